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
    monkeypatch.setattr(ew_shapes, "model", lambda dev: "a GPU model without a shipped table")
    ew_shapes.forget()
    yield
    ew_shapes.forget()


def test_stored_shapes_come_back_per_device_and_merge(store):
    p = ew_shapes.store(0, {("relu", "float32"): (1, 128)}, {"device": "fake"})
    assert p.name == "elementwise-GPU-fake-0.json" and json.loads(p.read_text())["shapes"] == {"relu:float32": [1, 128, 0]}
    ew_shapes.store(0, {("add", "bfloat16"): (2, 256, 4)}, {})
    ew_shapes.forget()                                  # another process: read from the file
    assert ew_shapes.shapes(0) == {("relu", "float32"): (1, 128, 0), ("add", "bfloat16"): (2, 256, 4)}
    assert ew_shapes.shapes(1) == {}                    # another GPU: nothing tuned
    assert ew.contig_config("relu", "float32", 0) == (1, 128, 0)
    assert ew.contig_config("add", "bfloat16", 0) == (2, 256, 4)
    untuned = ew_shapes.full(ew.TUNED[("relu", "float32")])
    assert ew.contig_config("relu", "float32", 1) == ew.contig_config("relu", "float32") == untuned
    assert ew.contig_config("sigmoid", "float32", 0) == (ew.UNROLL, ew.THREADS, 0)


def test_a_damaged_or_implausible_file_is_ignored(store, caplog):
    p = ew_shapes.path("GPU-fake-0")
    p.parent.mkdir(parents=True)
    p.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="cudakit.kernels.ew_shapes"):
        assert ew_shapes.shapes(0) == {}
    assert "cudakit tune" in caplog.text
    p.write_text(json.dumps({"shapes": {"relu:float32": [1, 100], "add:float32": [9, 256], "mul:float32": [2, 256],
                                        "sub:float32": [2, 256, 33], "div:float32": [1, 256, 6, 1],
                                        "tanh:float32": [1, 512]}}))   # a file of before the caps
    ew_shapes.forget()
    # 100 threads, U=9, 33 blocks an SM, four numbers: dropped
    assert ew_shapes.shapes(0) == {("mul", "float32"): (2, 256, 0), ("tanh", "float32"): (1, 512, 0)}


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
    for shape in ew_shapes.CANDIDATES + ew_shapes.HEAVY_CANDIDATES:
        assert len(shape) == 3 and ew_shapes.valid(shape)


def test_cli_tune_without_a_gpu_says_so():
    r = subprocess.run([sys.executable, "-m", "cudakit", "tune"], capture_output=True, text=True,
                       env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}, timeout=120)
    # CUDA_VISIBLE_DEVICES="" hides every GPU: this must fail on any machine, GPU or not
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
    kernel.parent.mkdir(parents=True)   # the root is cudakit's: store() marked it
    kernel.write_bytes(b"x")
    assert compiler.cache_info()["entries"] == 1           # the tuned shapes are not kernels
    assert compiler.cache_clear() == 1 and not kernel.exists()
    ew_shapes.forget()
    assert ew_shapes.shapes(0) == {("relu", "float32"): (1, 128, 0)}


def test_the_shipped_table_of_the_model_comes_between_tuned_and_default(store, monkeypatch):
    h100 = "NVIDIA H100 80GB HBM3"
    monkeypatch.setattr(ew_shapes, "model", lambda dev: h100 if dev == 0 else "another GPU")
    shipped = ew.TUNED_BY_MODEL[h100][("add", "bfloat16")]
    assert ew.contig_config("add", "bfloat16", 0) == ew_shapes.full(shipped)
    assert ew.contig_config("add", "bfloat16", 1) == ew.contig_config("add", "bfloat16")  # no table
    ew_shapes.store(0, {("add", "bfloat16"): (2, 128)}, {})   # the GPU's own tuning wins
    assert ew.contig_config("add", "bfloat16", 0) == (2, 128, 0)
    for table in ew.TUNED_BY_MODEL.values():
        for (op, dt), shape in table.items():
            assert (op in ew.BINARY_OPS or op in ew.UNARY_OPS) and ew_shapes.valid(shape)
            # compiled with the op's other kernels, not on its own on first use
            assert ew._expr("contig", op, dt, 8 if dt == "bfloat16" else 4, shape[0]) in ew.name_expressions()


def _fake_info(monkeypatch, per_sm, reserved, optin):
    from cudakit.runtime import device
    info = type("Info", (), {"max_shared_memory_per_multiprocessor": per_sm, "reserved_shared_memory_per_block": reserved,
                             "max_shared_memory_per_block_optin": optin})
    monkeypatch.setattr(device, "get_device_info", lambda dev=None: info)


def test_a_blocks_per_sm_cap_becomes_shared_memory(monkeypatch):
    _fake_info(monkeypatch, 233472, 1024, 232448)          # an H100's numbers
    assert ew.cap_shared_memory(0, 0) == 0
    for cap in (1, 3, 6, 32):
        smem = ew.cap_shared_memory(0, cap)
        assert cap * (smem + 1024) <= 233472 < (cap + 1) * (smem + 1024)   # exactly `cap` blocks fit
    _fake_info(monkeypatch, 233472, 1024, 100_000)
    with pytest.raises(ValueError, match="allows 0..100000"):
        ew.cap_shared_memory(0, 1)
    _fake_info(monkeypatch, 0, 0, 49152)
    with pytest.raises(ValueError, match="shared memory per SM"):
        ew.cap_shared_memory(0, 4)
