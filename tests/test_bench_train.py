"""The `train` benchmark family (cudakit/bench/cases/train.py) without a GPU: the CPU rows time the
examples' tiny presets, the GPU rows are laid out (sizes, FLOPs, skip reasons) without running,
and a missing examples directory skips the family with the reason."""
from __future__ import annotations

import numpy as np
import pytest

import cudakit
import cudakit.bench
from cudakit.bench.case import Env
from cudakit.bench.cases import train
from cudakit.bench.runner import format_table


def test_cpu_rows_time_the_tiny_examples(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    rec = cudakit.bench.run(ops=["train_gpt", "train_cnn"], dtypes=["float32"], quick=True, cpu=True, reps=1,
                            warmup=0, progress=False)
    rows = {r["op"]: r for r in rec["rows"]}
    assert set(rows) == {"train_gpt", "train_cnn"}
    for r in rows.values():
        assert r["family"] == "train" and r["providers"]["cudakit"]["median_ms"] > 0 and r["flops"] > 0
        assert "skipped" not in r
    gpt = train.load_example("train_gpt")
    assert rows["train_gpt"]["shape"] == [gpt.PRESETS["tiny"].batch, gpt.PRESETS["tiny"].seq,
                                          gpt.PRESETS["tiny"].d_model]


def test_gpu_rows_are_laid_out_without_running():
    env = Env(gpu=True, quick=False, xp=np, torch=None, dtypes=("float32", "bfloat16"))
    cases = train.cases(env)
    labels = [c.label for c in cases]
    assert len(labels) == len(set(labels))
    gpt = [c for c in cases if c.op.startswith("train_gpt")]
    cnn = [c for c in cases if c.op.startswith("train_cnn")]
    assert {c.shape for c in gpt} == {(8, 1024, 768), (4, 128, 256)} and {c.dtype for c in gpt} == {"bfloat16"}
    assert {c.shape for c in cnn} == {(256, 3, 32, 32)} and {c.dtype for c in cnn} == {"bfloat16", "float32"}
    assert len(gpt) == 2 * len(train.VARIANTS) and len(cnn) == 2 * len(train.VARIANTS)
    for c in cases:
        graph, torch_kind = train.VARIANTS[c.op[len("train_gpt"):] if c.op.startswith("train_gpt")
                                           else c.op[len("train_cnn"):]]
        if graph and not hasattr(cudakit, "graph"):
            assert "cudakit.graph" in c.skip
        elif torch_kind != "eager":
            assert "torch is not installed" in c.skip
        else:
            assert c.skip == ""


def test_flops_formulas():
    gpt, cnn = train.load_example("train_gpt"), train.load_example("train_cnn")
    cfg = gpt.GPTConfig(d_model=4, n_heads=2, n_layers=1, seq=3, batch=2, vocab=5)
    # per token: qkv 4*12, proj 4*4, fc 4*16, fc2 16*4 multiply-adds (12 d^2 = 192), head 4*5;
    # attention: 2 products of (B=2) x (T^2 / 2 = 4.5) x d=4 multiply-adds each
    assert train.gpt_flops(cfg) == 3 * (2 * 2 * 3 * (192 + 20) + 2 * 2 * 9 * 4)
    ccfg = cnn.CNNConfig(batch=2, image=4, widths=(2, 3), classes=2)
    # stage 0 at 4x4: convs 3->2, 2->2, 2->2; stage 1 at 2x2: 2->3, 3->3, 3->3
    want = 2 * 2 * 9 * (16 * (2 * 3 + 2 * 2 + 2 * 2) + 4 * (3 * 2 + 3 * 3 + 3 * 3))
    assert train.cnn_flops(ccfg, cnn.conv_names(ccfg)) == 3 * want


def test_missing_examples_skip_the_family_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDAKIT_EXAMPLES_DIR", str(tmp_path))
    assert train.examples_dir() is None
    rec = cudakit.bench.run(ops=["train_gpt", "train_cnn"], quick=True, cpu=True, reps=1, warmup=0, progress=False)
    assert all("CUDAKIT_EXAMPLES_DIR" in r["skipped"] and not r["providers"] for r in rec["rows"])
    table = format_table(rec)
    assert table.count("skipped: the examples") == 2


def test_examples_dir_from_the_environment(monkeypatch):
    real = train.examples_dir()
    assert real is not None and (real / "train_gpt.py").is_file()
    monkeypatch.setenv("CUDAKIT_EXAMPLES_DIR", str(real))
    assert train.examples_dir() == real


@pytest.mark.parametrize("strict, rel, marker", [(True, 5e-4, "within"), (True, 2e-3, "OVER"), (False, 2e-3, None)])
def test_loss_check_records_the_agreement(strict, rel, marker):
    case = cudakit.bench.Case("train_x", "train", (1,), "float32", 0, dict)
    train._loss_check(case, "step-0 loss", 1.0 + rel, 1.0, strict)
    text = case.info["step-0 loss"]
    assert "cudakit 1.0" in text and "torch 1.00000" in text
    assert (marker in text) if marker else ("within" not in text and "OVER" not in text)
