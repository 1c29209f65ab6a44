"""Per-GPU elementwise kernel shapes (kernels/ew_shapes.py, `cudakit tune`): stored per GPU UUID,
read back by contig_config, bad files ignored. No GPU needed: the device's UUID is faked."""
import json
import logging
import subprocess
import sys

import pytest

from cudakit.kernels import elementwise as ew, ew_shapes


@pytest.fixture
def store(cache_dir, monkeypatch):
    monkeypatch.setattr(ew_shapes, "_uuid", lambda dev: f"GPU-fake-{dev}")
    ew_shapes.forget()
    yield
    ew_shapes.forget()


def test_stored_shapes_come_back_per_device_and_merge(store):
    p = ew_shapes.store(0, {("relu", "float32"): (1, 128)}, {"device": "fake"})
    assert p.name == "elementwise-GPU-fake-0.json" and json.loads(p.read_text())["shapes"] == {"relu:float32": [1, 128]}
    ew_shapes.store(0, {("add", "bfloat16"): (2, 512)}, {})
    ew_shapes.forget()                                  # another process: read from the file
    assert ew_shapes.shapes(0) == {("relu", "float32"): (1, 128), ("add", "bfloat16"): (2, 512)}
    assert ew_shapes.shapes(1) == {}                    # another GPU: nothing tuned
    assert ew.contig_config("relu", "float32", 0) == (1, 128)
    untuned = ew.TUNED[("relu", "float32")]
    assert ew.contig_config("relu", "float32", 1) == ew.contig_config("relu", "float32") == untuned
    assert ew.contig_config("sigmoid", "float32", 0) == (ew.UNROLL, ew.THREADS)


def test_a_damaged_or_implausible_file_is_ignored(store, caplog):
    p = ew_shapes.path("GPU-fake-0")
    p.parent.mkdir(parents=True)
    p.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="cudakit.kernels.ew_shapes"):
        assert ew_shapes.shapes(0) == {}
    assert "cudakit tune" in caplog.text
    p.write_text(json.dumps({"shapes": {"relu:float32": [1, 100], "add:float32": [9, 256], "mul:float32": [2, 256]}}))
    ew_shapes.forget()
    assert ew_shapes.shapes(0) == {("mul", "float32"): (2, 256)}  # 100 threads, U=9: dropped


def test_forget_entries_clears_one_op_in_place():
    table = ew.EW_TABLES["relu"]
    ew._fast[("relu", "f", 0, 4)] = ew._fast[("add", "f", 0, 4)] = object()
    table[1] = ew.EW_TABLES["add"][1] = object()
    try:
        ew.forget_entries("relu")
        assert ("relu", "f", 0, 4) not in ew._fast and ("add", "f", 0, 4) in ew._fast
        assert ew.EW_TABLES["relu"] is table and not table and ew.EW_TABLES["add"]
    finally:
        ew.forget_entries("add")


def test_candidates_fit_the_op():
    from cudakit.bench.tune import candidates
    assert candidates("gelu_erf", "bfloat16") == ew_shapes.HEAVY_CANDIDATES
    assert candidates("gelu_erf", "float32") == candidates("add", "bfloat16") == ew_shapes.CANDIDATES
    for u, t in ew_shapes.CANDIDATES + ew_shapes.HEAVY_CANDIDATES:
        assert 1 <= u <= 8 and t % 32 == 0 and t <= 1024


def test_cli_tune_without_a_gpu_says_so():
    r = subprocess.run([sys.executable, "-m", "cudakit", "tune"], capture_output=True, text=True,
                       env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}, timeout=120)
    if r.returncode == 0:
        pytest.skip("a GPU is usable here")
    assert r.returncode == 2 and "no usable CUDA GPU" in r.stderr


def test_forget_rebuilds_the_launch_entries(store):
    ew._fast[("relu", "f", 0, 4)] = object()
    ew.EW_TABLES["relu"][1] = object()
    ew_shapes.forget()
    assert not any(k[0] == "relu" for k in ew._fast) and not ew.EW_TABLES["relu"]


def test_cache_clear_keeps_the_tuned_shapes(store):
    from cudakit.runtime import compiler
    ew_shapes.store(0, {("relu", "float32"): (1, 128)}, {})
    kernel = compiler.cache_dir() / "nvrtc" / "k.cubin"
    kernel.parent.mkdir(parents=True)
    kernel.write_bytes(b"x")
    assert compiler.cache_info()["entries"] == 1           # the tuned shapes are not kernels
    assert compiler.cache_clear() == 1 and not kernel.exists()
    ew_shapes.forget()
    assert ew_shapes.shapes(0) == {("relu", "float32"): (1, 128)}
