"""The training examples under the launcher (`cudakit run --nproc-per-node 2`, CPU backend): the
synchronised gradients equal one process's on the combined batch, and both scripts train with
only rank 0 printing the (rank-averaged) loss."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _launch(*args, timeout=240):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=os.path.join(ROOT, "src"))
    return subprocess.run([sys.executable, "-m", "cudakit", "run", "--nproc-per-node", "2", "--master-port", "0", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def test_gpt_data_parallel_gradients_equal_the_combined_batch():
    r = _launch(os.path.join(ROOT, "tests", "dist_worker_gpt_dp.py"), "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    oks = [ln for ln in r.stdout.splitlines() if "GPT-DP-OK" in ln]
    assert len(oks) == 2, r.stdout
    assert all(float(ln.split("GPT-DP-OK ")[1]) <= 1e-5 for ln in oks)
    assert "is gone" not in r.stdout + r.stderr   # both ranks left the group cleanly


@pytest.mark.parametrize("script", ["train_gpt.py", "train_cnn.py"])
def test_examples_train_data_parallel(script):
    r = _launch(os.path.join(ROOT, "examples", script), "--backend", "cpu", "--preset", "tiny", "--steps", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    steps = [ln for ln in r.stdout.splitlines() if re.search(r"\bstep \d+ loss ", ln)]
    assert len(steps) == 4 and all(ln.startswith("[rank0]") for ln in steps), r.stdout
    losses = [float(ln.split(" loss ")[1].split()[0]) for ln in steps]
    assert losses[-1] < losses[0]


def test_graph_refused_with_several_ranks():
    r = _launch(os.path.join(ROOT, "examples", "train_gpt.py"), "--backend", "cpu", "--graph")
    assert r.returncode != 0 and "--graph" in r.stdout + r.stderr


@pytest.mark.parametrize("script", ["train_gpt.py", "train_cnn.py"])
def test_sharded_optimizer_trains_as_the_all_reduced_one(script):
    """--zero (the optimizer state sharded across the ranks: reduce_scatter, 1/N of the step,
    all_gather) prints the losses of the default data-parallel run (all-reduced buckets)."""
    args = [os.path.join(ROOT, "examples", script), "--backend", "cpu", "--preset", "tiny", "--steps", "4"]
    args += ["--dropout", "0"] if script == "train_gpt.py" else []
    runs = {}
    for mode in ((), ("--zero",)):
        r = _launch(*args, *mode)
        assert r.returncode == 0, r.stdout + r.stderr
        runs[mode] = re.findall(r"step \d+ loss ([0-9.]+)", r.stdout)
    assert len(runs[()]) == 4 and runs[()] == runs[("--zero",)], runs
    assert "optimizer state sharded over 2 ranks" in r.stdout
