import json
import os
import subprocess
import sys

import pytest


def run(*args, env=None):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "cudakit", *args], capture_output=True, text=True, env=e)


def test_info_text_and_json(tmp_path):
    r = run("info", env={"CUDAKIT_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "cudakit" in r.stdout and "backend:" in r.stdout and "kernel cache" in r.stdout
    j = json.loads(run("info", "--json").stdout)
    assert {"cudakit", "devices", "backend", "cuda_usable"} <= set(j)
    if not j["cuda_usable"]:
        assert "no GPU found" in r.stdout and "backend: cpu" in r.stdout


def test_cache_info_and_clear(tmp_path):
    (tmp_path / "nvrtc").mkdir()
    (tmp_path / "nvrtc" / "x.bin").write_bytes(b"123")
    env = {"CUDAKIT_CACHE_DIR": str(tmp_path)}
    assert json.loads(run("cache", "info", "--json", env=env).stdout)["entries"] == 1
    r = run("cache", "clear", env=env)
    assert "removed 1 files" in r.stdout
    assert not (tmp_path / "nvrtc").exists()


def test_cache_warm_without_a_gpu_says_so(tmp_path):
    j = json.loads(run("info", "--json").stdout)
    if j["cuda_usable"]:
        pytest.skip("a GPU is usable: tests/gpu/test_runtime_gpu.py runs `cache warm`")
    r = run("cache", "warm", env={"CUDAKIT_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 2 and "no usable CUDA GPU" in r.stderr and "nothing to compile" in r.stderr


def test_bench_bad_input(tmp_path):
    r = run("bench", "--quick", "--ops", "nosuchop", "--out", str(tmp_path))
    assert r.returncode == 2 and "unknown op" in r.stderr and "relu" in r.stderr
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = run("bench", "--quick", "--out", str(blocker / "sub"))
    assert r.returncode == 2 and str(blocker / "sub") in r.stderr


@pytest.mark.slow
def test_bench_quick_cpu(tmp_path):
    r = run("bench", "--quick", "--cpu", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "relu" in r.stdout and "x numpy" in r.stdout
    rec = json.loads((tmp_path / "results.json").read_text())
    assert rec["device"]["kind"] == "cpu" and rec["rows"] and rec["copy_bandwidth_gbs"] > 0


def test_report_regenerates_markdown(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    rec = {"date": "2026-11-22T03:00:00+00:00", "command": "cudakit bench", "quick": False,
           "device": {"kind": "gpu", "name": "Test GPU"}, "versions": {"cudakit": "0.1.0"},
           "copy_bandwidth_gbs": 1000.0,
           "rows": [{"op": "add", "family": "elementwise", "shape": [8], "dtype": "float32", "mode": "device",
                     "nbytes": 96, "flops": 0, "note": "", "gbs": 900.0, "of_copy_bw": 0.9, "x_torch": 1.25,
                     "providers": {"cudakit": {"median_ms": 0.5}, "torch": {"median_ms": 0.625}}}]}
    (res / "test-gpu.json").write_text(json.dumps(rec))
    out = tmp_path / "B.md"
    r = run("report", "--results", str(res), "--output", str(out))
    assert r.returncode == 0, r.stderr
    md = out.read_text()
    assert "## Test GPU — 2026-11-22" in md and "1.25" in md and "90%" in md
    assert "elementwise kernel shapes" not in md                  # an older file: nothing said
    for tuned, said in ((0, "as shipped (untuned)"), (44, "44 tuned on this GPU by `cudakit tune`")):
        (res / "test-gpu.json").write_text(json.dumps({**rec, "tuned_elementwise_shapes": tuned}))
        assert run("report", "--results", str(res), "--output", str(out)).returncode == 0
        assert f"- elementwise kernel shapes: {said}" in out.read_text()


def test_bench_reps_warmup_and_tflops(tmp_path):
    r = run("bench", "--quick", "--cpu", "--ops", "matmul", "--dtype", "float32", "--reps", "2", "--warmup", "0",
            "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "TFLOP/s" in r.stdout
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert rows and all(p["runs"] == 2 for row in rows for p in row["providers"].values())
    assert all(row["tflops"] > 0 for row in rows)
    r = run("bench", "--reps", "0", "--out", str(tmp_path))
    assert r.returncode == 2 and "--reps: must be >= 1 (got 0)" in r.stderr
