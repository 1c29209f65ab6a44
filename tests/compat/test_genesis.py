"""Seed 002 (Genesis's CUDA backend) through cudakit.compat.genesis.

Blocks of seeds/002_genesis.md: 0 architecture (mermaid), 1 CUDAMemoryPool, 2 a Triton kernel,
3 CUDAStorage, 4 get_memory_stats, 5 environment variables (bash), 6 runtime configuration,
7 memory comparison with torch, 8 memory monitoring, 9 kernel profiling, 10 out-of-memory
remedies, 11 kernel-compilation remedies, 12 slow-performance checks.
"""
import logging

import numpy as np
import pytest
import seed_doc

import cudakit
import cudakit.compat.genesis as genesis
from cudakit.config import reload
from cudakit.errors import DeviceError
from cudakit.runtime import memory
from cudakit.runtime.memory import MemoryStats

DOC = "002_genesis"
IMPORTS = {"import genesis": "import cudakit.compat.genesis as genesis"}


@pytest.fixture
def fresh_env(monkeypatch):
    """genesis.cuda re-reads the GENESIS_* variables; cudakit's settings and pool limits restored after."""
    for v in ("GENESIS_CUDA_MEMORY_FRACTION", "GENESIS_CUDA_CACHE_SIZE", "GENESIS_KERNEL_CACHE_DIR",
              "CUDAKIT_CACHE_DIR"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(genesis.cuda, "_env_done", False)
    monkeypatch.setattr(genesis.cuda, "_cuda_done", False)
    yield monkeypatch
    monkeypatch.undo()
    reload()
    if cudakit.is_available():
        for d in range(cudakit.device_count()):
            memory.set_limit(device=d)
            memory.set_cache_size(None, device=d)


def test_seed_copy_is_verbatim():
    seed_doc.compare_with_shared(DOC)


def test_internals_listings_have_facades_with_their_signatures():
    """Blocks 1, 3 and 4 show Genesis's internals: the facade has each public member."""
    where = {"CUDAMemoryPool": genesis.CUDAMemoryPool, "CUDAStorage": genesis.CUDAStorage}
    seen = []
    for i in (1, 3, 4):
        for name, params in seed_doc.signatures(seed_doc.blocks(DOC)[i][1]).items():
            if name.split(".")[-1].startswith("_") and not name.endswith("__init__"):
                continue   # a private helper of the seed's
            cls, _, member = name.rpartition(".")
            fn = getattr(where[cls], member) if cls else getattr(genesis, member)
            seed_doc.assert_signature(fn, params, name)
            seen.append(name)
    assert sorted(seen) == ["CUDAMemoryPool.allocate", "CUDAMemoryPool.deallocate", "CUDAStorage.__init__",
                            "get_memory_stats"]
    pool = genesis.CUDAMemoryPool.get_instance()
    assert pool is genesis.CUDAMemoryPool.get_instance()
    for attr in ("allocated_bytes", "cached_bytes", "reserved_bytes", "free_bytes", "fragmentation_ratio",
                 "peak_allocated_bytes"):
        assert isinstance(getattr(genesis.CUDAMemoryPool, attr), property)


def test_triton_kernel_block_defines_with_triton():
    triton = pytest.importorskip("triton")
    ns = {"triton": triton, "tl": triton.language}   # the module's imports in Genesis's cuda_kernels.py
    exec(seed_doc.compiled(seed_doc.example(DOC, 2, IMPORTS), "<002 block 2>"), ns)
    assert [c.kwargs["BLOCK_SIZE"] for c in ns["elementwise_add_kernel"].configs] == [128, 256, 512]


@pytest.mark.cuda
def test_triton_kernel_block_runs_through_cudakit(rng):
    """The Genesis kernel's function and configs launched by cudakit's Triton launcher (no torch),
    against cudakit.add."""
    triton = pytest.importorskip("triton")
    import cupy as cp
    ns = {"triton": triton, "tl": triton.language}
    exec(seed_doc.compiled(seed_doc.example(DOC, 2, IMPORTS), "<002 block 2>"), ns)
    tuned = ns["elementwise_add_kernel"]
    kernel = cudakit.autotune(tuned.configs, key=["n_elements"], restore=["output_ptr"])(
        cudakit.triton_kernel(tuned.fn))
    n = 100_003
    x = cp.asarray(rng.standard_normal(n).astype(np.float32))
    y = cp.asarray(rng.standard_normal(n).astype(np.float32))
    out = cp.full(n, cp.nan, cp.float32)
    kernel[lambda meta: (cudakit.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, out, n)
    np.testing.assert_array_equal(out.get(), cudakit.add(x, y).get())


def test_environment_variables_are_checked_and_the_cache_dir_applied(fresh_env, tmp_path):
    fresh_env.setenv("GENESIS_KERNEL_CACHE_DIR", str(tmp_path / "genesis_kernels"))
    genesis.cuda.clear_kernel_cache()
    assert cudakit.config.settings().cache_dir == tmp_path / "genesis_kernels"
    fresh_env.setattr(genesis.cuda, "_env_done", False)
    fresh_env.setenv("GENESIS_CUDA_MEMORY_FRACTION", "1.5")
    with pytest.raises(ValueError, match=r"GENESIS_CUDA_MEMORY_FRACTION must be a number in \(0, 1\] \(got 1.5\)"):
        genesis.cuda.clear_kernel_cache()
    fresh_env.setenv("GENESIS_CUDA_MEMORY_FRACTION", "0.8")
    fresh_env.setenv("GENESIS_CUDA_CACHE_SIZE", "lots")
    with pytest.raises(ValueError, match="bad memory size 'lots'"):
        genesis.cuda.clear_kernel_cache()


@pytest.mark.parametrize("first", ["enable_profiling", "empty_cache", "set_kernel_fusion", "current_device"])
def test_the_cache_dir_applies_at_whichever_call_comes_first(first, fresh_env, tmp_path):
    """'at the first genesis.cuda call': enable_profiling, empty_cache or set_kernel_fusion first
    left the kernel cache where it was."""
    fresh_env.setenv("GENESIS_KERNEL_CACHE_DIR", str(tmp_path / "genesis_kernels"))
    call = getattr(genesis.cuda, first)
    try:
        if first == "enable_profiling":
            call(False)
        elif first == "set_kernel_fusion":
            call(True)
        else:
            call()
    except RuntimeError:   # (the calls that need a GPU raise without one, after applying the variables)
        pass
    assert cudakit.config.settings().cache_dir == tmp_path / "genesis_kernels"


def test_cudakit_cache_dir_wins_over_genesis(fresh_env, tmp_path, caplog):
    fresh_env.setenv("CUDAKIT_CACHE_DIR", str(tmp_path / "ours"))
    fresh_env.setenv("GENESIS_KERNEL_CACHE_DIR", str(tmp_path / "theirs"))
    reload()
    with caplog.at_level(logging.WARNING):
        genesis.cuda.clear_kernel_cache()
    assert cudakit.config.settings().cache_dir == tmp_path / "ours" and "GENESIS_KERNEL_CACHE_DIR" in caplog.text


@pytest.mark.cuda
def test_environment_variables_set_the_pool(fresh_env):
    fresh_env.setenv("GENESIS_CUDA_MEMORY_FRACTION", "0.8")
    fresh_env.setenv("GENESIS_CUDA_CACHE_SIZE", "1GB")
    genesis.cuda.memory_stats()
    total = cudakit.memory_info()[1]
    assert abs(memory.get_limit() - 0.8 * total) <= 1 << 20
    assert memory.get_cache_size() == 10**9


@pytest.mark.cuda
def test_runtime_configuration_example(fresh_env):
    ns = seed_doc.run(DOC, 6, IMPORTS)
    total = cudakit.memory_info()[1]
    assert abs(memory.get_limit() - 0.9 * total) <= 1 << 20 and memory.get_cache_size() == 2 * 10**9
    assert str(ns["device"]) == "cuda:0"
    np.testing.assert_array_equal(ns["x"].get(), [1, 2, 3])
    assert ns["x"].dtype == np.float32 and ns["x"].device.id == 0


@pytest.mark.cuda
def test_memory_comparison_with_torch(capsys, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    data = rng.standard_normal(1 << 20).astype(np.float32)
    before = genesis.cuda.memory_allocated()
    ns = seed_doc.run(DOC, 7, IMPORTS, {"genesis": genesis, "torch": torch, "data": data})
    assert genesis.cuda.memory_allocated() - before >= data.nbytes
    np.testing.assert_array_equal(ns["genesis_tensor"].get(), data)
    assert "Genesis memory:" in capsys.readouterr().out


@pytest.mark.cuda
def test_memory_monitoring_example(capsys):
    ns = seed_doc.run(DOC, 8, IMPORTS, {"genesis": genesis})
    try:
        x = genesis.tensor(np.zeros(1 << 18), device="cuda")
        out = capsys.readouterr().out
        assert "Allocated:" in out and "Cached:" in out and "Fragmentation:" in out
        del x
    finally:
        genesis.cuda.set_memory_callback(None)
    ns["monitor_cuda_memory"]()


@pytest.mark.cuda
def test_kernel_profiling_example(caplog):
    try:
        ns = seed_doc.run(DOC, 9, IMPORTS, {"genesis": genesis})
    finally:
        with caplog.at_level(logging.INFO, logger="cudakit.compat.genesis.cuda"):
            prof = genesis.cuda.enable_profiling(False)
    np.testing.assert_array_equal(ns["y"].get(), [[7, 10], [15, 22]])
    assert prof.records and "calls" in caplog.text
    assert any("cublas" in r.name or "matmul" in r.name for r in prof.records)


@pytest.mark.cuda
def test_out_of_memory_remedies_example(fresh_env, caplog):
    try:
        with caplog.at_level(logging.DEBUG, logger="cudakit.compat.genesis.cuda"):
            seed_doc.run(DOC, 10, IMPORTS, {"genesis": genesis})
            x = genesis.tensor(np.zeros(4096), device="cuda")
        assert abs(memory.get_limit() - 0.7 * cudakit.memory_info()[1]) <= 1 << 20
        assert "memory alloc of" in caplog.text
        del x
    finally:
        genesis.cuda.enable_memory_debugging(False)


def test_kernel_compilation_remedies_example(cache_dir):
    """Block 11 needs no GPU: the cache is cleared (an isolated one here) and fusion set."""
    from cudakit.runtime import cache
    (cache_dir / "nvrtc").mkdir(parents=True)
    (cache_dir / "nvrtc" / "entry.bin").write_bytes(b"x")
    (cache_dir / cache.MARKER).write_text("cudakit cache\n")   # a cache cudakit made (clear refuses others)
    seed_doc.run(DOC, 11, IMPORTS, {"genesis": genesis})
    assert not (cache_dir / "nvrtc").exists()
    assert genesis.cuda.set_kernel_fusion(True) is False
    with pytest.raises(TypeError, match="enabled must be True or False"):
        genesis.cuda.set_kernel_fusion("no")


@pytest.mark.cuda
@pytest.mark.slow
def test_slow_performance_checks_example(capsys):
    """Block 12 after block 9 (which made `x`): every kernel family compiled, then the devices."""
    try:
        ns = seed_doc.run(DOC, [9, 12], IMPORTS, {"genesis": genesis})
    finally:
        genesis.cuda.enable_profiling(False)
    out = capsys.readouterr().out
    assert "Tensor device: <CUDA Device 0>" in out and f"Current device: {cudakit.current_device()}" in out
    assert ns["x"].shape == (2, 2)


def test_cpu_tensors_devices_and_matmul(rng):
    assert str(genesis.device("cuda:1")) == "cuda:1" and genesis.device("cpu") == genesis.Device("cpu")
    assert genesis.device(genesis.device("cuda")) == genesis.Device("cuda", None)
    with pytest.raises(DeviceError, match="device must be 'cpu', 'cuda', 'cuda:N'"):
        genesis.device("gpu0")
    x = genesis.tensor([[1, 2], [3, 4]])
    assert isinstance(x, np.ndarray) and x.dtype == np.float32
    a = genesis.tensor(rng.standard_normal((5, 7)))
    b = genesis.tensor(rng.standard_normal((7, 3)))
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(genesis.matmul(a, b), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(genesis.matmul(a, b), cudakit.matmul(a, b))


def test_tensor_refuses_what_is_not_numbers_and_devices_check_themselves():
    """genesis.tensor made NaN of None and of object arrays holding None, kept object and string
    dtypes, and turned 1e300 into inf silently; a Device made directly took any type ('tpu' ran
    as CUDA) and any index."""
    from cudakit.errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError
    import ml_dtypes
    for data in (None, "abc", {1: 2}, np.array([1, None], object), [1j]):
        with pytest.raises(ArgumentTypeError, match="genesis.tensor: data must be numbers"):
            genesis.tensor(data)
    for dt in (object, str, "nope", np.complex64):
        with pytest.raises(DTypeError, match="genesis.tensor: dtype"):
            genesis.tensor([1, 2], dtype=dt)
    with pytest.raises(ShapeError, match="rectangular"):
        genesis.tensor([[1, 2], [3]])
    with pytest.raises(ArgumentError, match="overflows float32"):
        genesis.tensor(np.array([1.0, 1e300]))
    with pytest.raises(ArgumentError, match="overflows bfloat16"):
        genesis.tensor([1e39], dtype="bfloat16")
    for data, dt, match in (([300], np.int8, "outside int8's range"), ([-1], np.uint8, "outside uint8's range"),
                            ([128.0], np.int8, "outside int8's range"), ([np.nan], np.int32, "NaN or inf"),
                            ([2**200], np.int64, "outside int64's range")):
        with pytest.raises(ArgumentError, match=match):   # (NumPy's cast wrapped them: 300 became 44)
            genesis.tensor(data, dtype=dt)
    np.testing.assert_array_equal(genesis.tensor([127.7, -128.5], dtype=np.int8), [127, -128])   # truncated
    import decimal
    import fractions
    np.testing.assert_allclose(genesis.tensor([2**70, decimal.Decimal("1.5"), fractions.Fraction(1, 4)]),
                               [2.0**70, 1.5, 0.25], rtol=1e-7)   # numbers NumPy keeps as objects
    inf_nan = genesis.tensor([np.inf, np.nan])   # non-finite data stays as it is
    assert np.isinf(inf_nan[0]) and np.isnan(inf_nan[1])
    assert genesis.tensor(np.ones(2, ml_dtypes.bfloat16)).dtype == np.float32
    assert genesis.tensor([1, 2], dtype="bfloat16").dtype.name == "bfloat16"
    assert genesis.tensor([3, 4], dtype=np.int32).dtype == np.int32
    for args, match in ((("tpu",), "type must be 'cpu' or 'cuda'"), (("CPU",), "type must be"),
                        (("cuda", -3), "index must be an int >= 0"), (("cuda", 1.0), "index must be"),
                        (("cpu", 3), "cpu Device has no index")):
        with pytest.raises(DeviceError, match=match):
            genesis.Device(*args)
    assert genesis.Device("cuda", np.int64(1)) == genesis.Device("cuda", 1)


def test_without_a_gpu(no_gpu):
    with pytest.raises(RuntimeError, match="genesis.tensor on a CUDA device needs a usable CUDA GPU"):
        genesis.tensor([1, 2, 3], device=genesis.device("cuda:0"))
    for call in (genesis.cuda.memory_stats, genesis.cuda.memory_allocated, genesis.cuda.current_device,
                 lambda: genesis.cuda.set_memory_fraction(0.5), lambda: genesis.CUDAStorage((2,), "float32")):
        with pytest.raises(RuntimeError, match="needs a usable CUDA GPU"):
            call()
    genesis.cuda.empty_cache()
    genesis.cuda.enable_lazy_init(True)
    assert genesis.cuda.warm_up_kernels() == {}
    prof = genesis.cuda.enable_profiling(True)
    assert genesis.cuda.enable_profiling(True) is prof
    assert genesis.cuda.enable_profiling(False) is prof and prof.records == []
    assert genesis.cuda.enable_profiling(False) is None
    # stopped through cudakit.profiler: True starts a new profile (it returned the dead one), and
    # False returns the stopped one (it raised "no cudakit profile is active")
    dead = genesis.cuda.enable_profiling(True)
    cudakit.profiler.stop()
    live = genesis.cuda.enable_profiling(True)
    assert live is not dead and cudakit.profiler._active is live
    cudakit.profiler.stop()
    assert genesis.cuda.enable_profiling(False) is live and cudakit.profiler._active is None


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"fraction must be a number in \(0, 1\] \(got 1.5\)"):
        genesis.cuda.set_memory_fraction(1.5)
    with pytest.raises(ValueError, match="bad memory size '2 lots'"):
        genesis.cuda.set_cache_size("2 lots")
    with pytest.raises(TypeError, match="enabled must be True or False"):
        genesis.cuda.enable_memory_debugging("yes")
    with pytest.raises(TypeError, match="callback must be callable"):
        genesis.cuda.set_memory_callback(42)


def test_memory_stats_keys_genesis_reads():
    """cudakit's MemoryStats answers every key Genesis's get_memory_stats() has, and as_dict() has
    "cached" (reserved - allocated) and the driver's "free"."""
    s = MemoryStats(device=0, allocated=1024, reserved=4096, peak_allocated=2048, allocations=3, frees=1,
                    oom_retries=0, fragmentation=0.75, limit=None, free=10_000, total=20_000)
    for key, want in {"allocated": 1024, "cached": 3072, "reserved": 4096, "free": 10_000,
                      "fragmentation": 0.75, "peak_allocated": 2048}.items():
        assert s[key] == want and s.as_dict()[key] == want


@pytest.mark.cuda
def test_memory_statistics_pool_and_storage():
    import cupy as cp
    before = genesis.cuda.memory_allocated()
    storage = genesis.CUDAStorage((256, 4), "float32", device_id=0)
    assert storage.data.shape == (256, 4) and storage.data_ptr == storage.data.data.ptr
    assert genesis.cuda.memory_allocated() - before >= 4096
    s = genesis.cuda.memory_stats()
    free, total = cudakit.memory_info()
    assert s["cached"] == s["reserved"] - s["allocated"] == s.as_dict()["cached"]
    assert 0 < s["free"] <= total and s["total"] == total
    pool = genesis.CUDAMemoryPool.get_instance()
    block = pool.allocate(1000)
    assert isinstance(block, cp.ndarray) and block.nbytes == 1000 and pool.allocated_bytes >= 1000
    pool.deallocate(block)
    with pytest.raises(ValueError, match="not a live block of this pool"):
        pool.deallocate(block)
    stats = genesis.get_memory_stats()
    assert set(stats) == {"allocated", "cached", "reserved", "free", "fragmentation", "peak_allocated"}
    with pytest.raises(ValueError, match="size must be >= 1"):
        pool.allocate(0)


@pytest.mark.cuda
def test_memory_callback_forms():
    events, calls = [], []
    genesis.cuda.set_memory_callback(lambda event, device, nbytes: events.append((event, nbytes)))
    try:
        x = genesis.tensor(np.zeros(1000), device="cuda")
        del x
        assert ("alloc", 4096) in events or any(e == "alloc" for e, _ in events)
        genesis.cuda.set_memory_callback(lambda: calls.append(1))
        y = genesis.tensor(np.zeros(1000), device="cuda")
        del y
        assert calls
    finally:
        genesis.cuda.set_memory_callback(None)


def test_compat_doc_names_every_documented_name():
    names = seed_doc.called_names(DOC, r"genesis\.cuda\.(\w+)") | seed_doc.called_names(DOC, r"genesis\.(\w+)\(")
    names |= {n.split(".")[-1] for i in (1, 3, 4) for n in seed_doc.signatures(seed_doc.blocks(DOC)[i][1])}
    names |= seed_doc.called_names(DOC, r"pool\.(\w+)") | {"CUDAMemoryPool", "CUDAStorage", "elementwise_add_kernel"}
    names |= {"GENESIS_CUDA_MEMORY_FRACTION", "GENESIS_CUDA_CACHE_SIZE", "GENESIS_KERNEL_CACHE_DIR",
              "CUDA_VISIBLE_DEVICES"}
    assert {"set_memory_fraction", "memory_allocated", "set_kernel_fusion", "enable_memory_debugging"} <= names
    seed_doc.assert_in_compat_doc(DOC, names - {"__init__"})
