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
