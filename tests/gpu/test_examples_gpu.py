"""The training examples on the CUDA backend: the same losses as the CPU backend from the same
weights and batches, the scripts at their tiny preset (also in bfloat16), and with cudakit.graph
(when this cudakit has it) a graphed step equal to the eager step bit for bit."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cudakit

pytestmark = pytest.mark.cuda

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

import train_cnn  # noqa: E402
import train_common  # noqa: E402
import train_gpt  # noqa: E402


def _gpt(cfg, backend, dtype="float32", graph=False):
    device = train_common.Device(backend)
    data = train_gpt.StreamData(cfg.vocab, 4096, 0)
    batches = [tuple(device.asarray(a) for a in data.batch(np.random.default_rng(i), cfg.batch, cfg.seq))
               for i in range(4)]
    return train_gpt.Trainer(cfg, device, dtype, 0, graph), batches


def _cnn(cfg, backend, dtype="float32", graph=False):
    device = train_common.Device(backend)
    dt = train_common.np_dtype(dtype)
    batches = []
    for i in range(4):
        x, y = train_cnn.generate_batch(np.random.default_rng(i), cfg)
        batches.append((device.asarray(x.astype(dt)), device.asarray(y)))
    return train_cnn.Trainer(cfg, device, dtype, 0, graph), batches


GPT_SMALL = train_gpt.GPTConfig(d_model=64, n_heads=4, n_layers=2, seq=32, batch=4, vocab=96, dropout=0.1, lr=3e-3)
CNN_SMALL = train_cnn.CNNConfig(batch=16, image=16, widths=(8, 16), classes=4)


@pytest.mark.parametrize("which", ["gpt", "cnn"])
def test_cuda_losses_follow_the_cpu_backend(which, float32_precision):
    float32_precision("ieee")
    make = _gpt if which == "gpt" else _cnn
    cfg = GPT_SMALL if which == "gpt" else CNN_SMALL
    (gpu, gb), (cpu, cb) = make(cfg, "cuda"), make(cfg, "cpu")
    for i in range(4):   # step 0: the same weights; later steps: AdamW/SGD amplify rounding a little
        lg, lc = float(gpu.step(*gb[i])), float(cpu.step(*cb[i]))
        assert abs(lg - lc) <= (1e-5 if i == 0 else 2e-3) * abs(lc), f"step {i}: cuda {lg}, cpu {lc}"


@pytest.mark.parametrize("which", ["gpt", "cnn"])
def test_graphed_step_equals_eager_step_bitwise(which):
    if not hasattr(cudakit, "graph"):
        pytest.skip("this cudakit has no cudakit.graph")
    make = _gpt if which == "gpt" else _cnn
    cfg = dataclasses.replace(GPT_SMALL, dropout=0.0) if which == "gpt" else CNN_SMALL
    (eager, batches), (graphed, _) = make(cfg, "cuda", "bfloat16"), make(cfg, "cuda", "bfloat16", graph=True)
    for b in batches:
        assert float(eager.step(*b)) == float(graphed.step(*b))
    for n in eager.params:
        assert bool((eager.params[n] == graphed.params[n]).all()), n


@pytest.mark.parametrize("script", ["train_gpt.py", "train_cnn.py"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_example_script_on_cuda(script, dtype):
    r = subprocess.run([sys.executable, str(EXAMPLES / script), "--backend", "cuda", "--preset", "tiny",
                        "--steps", "30", "--dtype", dtype], capture_output=True, text=True, check=False, timeout=600,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    losses = [float(line.split()[3]) for line in r.stdout.splitlines() if line.startswith("step ")]
    assert len(losses) == 30 and losses[-1] <= 0.7 * losses[0], r.stdout


@pytest.mark.parametrize("script", ["train_gpt.py", "train_cnn.py"])
def test_example_losses_are_the_same_with_and_without_pdl(script, tmp_path):
    """Programmatic dependent launch changes when kernels start, not what they compute: the tiny
    preset's bfloat16 losses with CUDAKIT_PDL=0 and at the default are the same, step for step (one
    cache directory: the second run takes the first's path choices)."""
    from cudakit.runtime import pdl
    if not pdl.supported():
        pytest.skip("no programmatic dependent launch here (compute capability below 9.0 or no cuLaunchKernelEx)")
    runs = {}
    for flag in ("0", "1"):
        r = subprocess.run([sys.executable, str(EXAMPLES / script), "--backend", "cuda", "--preset", "tiny",
                            "--steps", "10", "--dtype", "bfloat16"], capture_output=True, text=True, check=False,
                           timeout=600, env=dict(os.environ, CUDAKIT_PDL=flag, CUDAKIT_CACHE_DIR=str(tmp_path)))
        assert r.returncode == 0, r.stderr[-3000:]
        runs[flag] = [line.split()[3] for line in r.stdout.splitlines() if line.startswith("step ")]
    assert len(runs["0"]) == 10 and runs["0"] == runs["1"]
