import numpy as np
import pytest

import cudakit
from cudakit import DeviceError, DTypeError, ShapeError
from helpers import DTYPES, assert_same, np_dtype, random, reference

SIZES = [0, 1, 257, 1823 * 7]


def test_auto_backend_and_reason(caplog):
    import logging
    caplog.set_level(logging.INFO)
    be = cudakit.get_backend("auto")
    if not cudakit.is_available():
        assert be.name == "cpu"
        assert cudakit.unavailable_reason()
        assert "chose cpu" in caplog.text
        with pytest.raises(cudakit.BackendUnavailableError, match="unavailable"):
            cudakit.get_backend("cuda")


def test_backend_env_var(monkeypatch):
    monkeypatch.setenv("CUDAKIT_BACKEND", "cpu")
    cudakit.config.reload()
    try:
        assert cudakit.get_backend().name == "cpu"
        with pytest.raises(ValueError, match="backend must be one of"):
            cudakit.get_backend("tpu")
    finally:
        monkeypatch.undo()
        cudakit.config.reload()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", ["add", "mul", "relu_backward"])
def test_binary_ops(op, n, dtype, rng):
    a, b = random(rng, n, dtype), random(rng, n, dtype)
    got = getattr(cudakit, op)(a, b)
    assert got.dtype == np_dtype(dtype)
    assert_same(got, reference(op, a, b, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_relu(n, dtype, rng):
    x = random(rng, n, dtype)
    assert_same(cudakit.relu(x), reference("relu", x, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_noncontiguous_and_out(dtype, rng):
    a = random(rng, (7, 1, 5), dtype)
    b = random(rng, (6, 5), dtype)
    assert_same(cudakit.add(a, b), reference("add", a, b, dtype=dtype))
    big = random(rng, (9, 12), dtype)
    view = big[::2, 1::3]
    assert_same(cudakit.mul(view, view), reference("mul", view, view, dtype=dtype))
    out = np.full((9, 12), np.nan, np_dtype(dtype))
    r = cudakit.relu(big, out=out)
    assert r is out
    assert_same(out, reference("relu", big, dtype=dtype))
    assert_same(cudakit.add(big, 2.0), reference("add", big, np.full_like(big, 2.0), dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_results_keep_a_dense_layout(dtype, rng):
    """Inputs of one shape and strides covering their memory densely but not C-contiguously (a
    channels-last view, a transpose) give a result in that layout, as PyTorch keeps a memory
    format; mixed layouts, broadcasts and strided views give C-contiguous results."""
    a, b = random(rng, (2, 5, 3, 4), dtype), random(rng, (2, 5, 3, 4), dtype)
    cl = [np.ascontiguousarray(v.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) for v in (a, b)]
    for r, want in ((cudakit.add(*cl), reference("add", a, b, dtype=dtype)),
                    (cudakit.relu(cl[0]), reference("relu", a, dtype=dtype)),
                    (cudakit.relu_backward(cl[1], cl[0]), reference("relu_backward", b, a, dtype=dtype)),
                    (cudakit.mul(cl[0], 2.0), reference("mul", a, np.full_like(a, 2.0), dtype=dtype)),
                    (cudakit.relu(a.T), reference("relu", a.T, dtype=dtype))):
        assert r.strides == (cl[0].strides if r.shape == a.shape else a.T.strides)
        assert_same(r, want)
    assert cudakit.add(cl[0], b).flags.c_contiguous          # layouts differ
    assert cudakit.relu(a[:, :, ::2]).flags.c_contiguous     # not dense
    assert cudakit.add(cl[0], b[0, 0, 0]).flags.c_contiguous  # a broadcast operand


def test_nan_inf_propagate():
    x = np.array([np.nan, np.inf, -np.inf, -1.0, 0.0, 2.0], np.float32)
    assert_same(cudakit.relu(x), [np.nan, np.inf, 0, 0, 0, 2])
    assert_same(cudakit.add(x, x), x + x)
    assert_same(cudakit.relu_backward(np.full(6, np.nan, np.float32), x), [0, np.nan, 0, 0, 0, np.nan])


def test_bad_input():
    a = np.ones(4, np.float32)
    with pytest.raises(ShapeError, match=r"a \(4,\), b \(3,\)"):
        cudakit.add(a, np.ones(3, np.float32))
    with pytest.raises(DTypeError, match="int32 is not supported"):
        cudakit.relu(np.ones(3, np.int32))
    with pytest.raises(DTypeError, match="one dtype"):
        cudakit.mul(a, np.ones(4, np.float64))
    with pytest.raises(ShapeError, match="out must have shape"):
        cudakit.add(a, a, out=np.empty(5, np.float32))
    with pytest.raises(DTypeError, match="out must have dtype"):
        cudakit.add(a, a, out=np.empty(4, np.float64))
    with pytest.raises(DTypeError, match="at least one argument must be an array"):
        cudakit.add(1.0, 2.0)

    class FakeCuda:
        __cuda_array_interface__ = {}
    with pytest.raises(DeviceError, match="CPU backend"):
        cudakit.get_backend("cpu").add(a, FakeCuda())
    # still works afterwards
    assert_same(cudakit.add(a, a), a + a)


def test_backend_helpers():
    be = cudakit.get_backend("cpu")
    z = be.zeros((2, 3), "bfloat16")
    assert z.dtype == np_dtype("bfloat16") and not z.any()
    assert be.to_numpy(be.asarray([1, 2], "float32")).tolist() == [1.0, 2.0]
    assert be.device == "cpu"
    be.synchronize()


def _scalar_reference(op, x, s, left):
    """x op s (or s op x) with s rounded to x's dtype and 16-bit math in float32, rounded once."""
    acc = np.float64 if x.dtype == np.float64 else np.float32
    with np.errstate(all="ignore"):
        sv = acc(x.dtype.type(s))
        a, b = (sv, x.astype(acc)) if left else (x.astype(acc), sv)
        r = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[op](a, b)
    return r.astype(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("left", [False, True])
def test_scalar_operand(op, left, dtype, rng):
    x = random(rng, (3, 257), dtype)
    x[0, :3] = [0, np.inf, np.nan]
    for s in (2.5, -3, 1e-3, 0.0):
        got = getattr(cudakit, op)(s, x) if left else getattr(cudakit, op)(x, s)
        assert got.dtype == x.dtype and got.shape == x.shape
        assert_same(got, _scalar_reference(op, x, s, left))
    out = np.empty_like(x[:, ::2])
    assert cudakit.sub(x[:, ::2], 1.5, out=out) is out
    assert_same(out, _scalar_reference("sub", x[:, ::2], 1.5, False))
    with pytest.raises(DTypeError):
        cudakit.add(2.0, 3.0)


def test_memory_stats_reads_like_a_dict():
    from cudakit.runtime.memory import MemoryStats
    s = MemoryStats(device=0, allocated=1024, reserved=4096, peak_allocated=2048, allocations=3, frees=1,
                    oom_retries=0, fragmentation=0.75, limit=None)
    assert s["allocated"] == 1024 and s["reserved"] == 4096 and s.as_dict()["frees"] == 1
    assert s["cached"] == s.cached == 3072 and s["active_memory"] == 1024 and s["allocation_count"] == 3
    assert s["total_allocated"] == 4096
    with pytest.raises(KeyError, match="MemoryStats keys: device, allocated"):
        s["bytes_in_use"]
    # a read-only mapping: in, get, keys, items, dict(), json (seeds 002 and 004 read it as a dict)
    assert "allocated" in s and "active_memory" in s and "bytes_in_use" not in s
    assert s.get("frees") == 1 and s.get("bytes_in_use", -1) == -1
    assert list(s) == list(s.keys()) == list(s.as_dict()) and len(s) == len(s.as_dict())
    assert dict(s) == s.as_dict() == dict(s.items()) and {**s}["cached"] == 3072
    import json
    assert json.loads(json.dumps(dict(s)))["peak_allocated"] == 2048


def test_python_allocator_trims_the_cache_past_its_cap(monkeypatch):
    """memory._malloc (the allocator where the native module is not built) with a stand-in of
    CuPy's pool: an allocation that leaves more than the cap cached frees the pool's cache."""
    from types import SimpleNamespace
    from cudakit.runtime import memory

    class Base:
        def __init__(self):
            pass

    class Pool:
        reserved, freed, next_ptr = 0, 0, 0x1000

        def malloc(self, size):
            self.next_ptr += size
            return SimpleNamespace(ptr=self.next_ptr, device_id=0, mem=SimpleNamespace(size=size))

        def total_bytes(self):
            return self.reserved

        def free_all_blocks(self):
            self.freed += 1

    pool = Pool()
    monkeypatch.setattr(memory, "_pool", pool)
    monkeypatch.setattr(memory, "_TrackedMemory", memory._make_tracked_memory_class(
        SimpleNamespace(cuda=SimpleNamespace(memory=SimpleNamespace(BaseMemory=Base)))))
    monkeypatch.setattr(memory, "_mem_mod", SimpleNamespace(OutOfMemoryError=MemoryError,
                                                            MemoryPointer=lambda mem, offset: mem))
    monkeypatch.setattr(memory, "_counters", {})
    memory._counters_for(0).cache_limit = 4096
    a = memory._malloc(1024)
    pool.reserved = 2048 + 4096     # after b: cached is the cap: kept
    b = memory._malloc(1024)
    assert pool.freed == 0
    pool.reserved = 3072 + 4097     # after c: one byte over: the cache is freed, and counted
    c = memory._malloc(1024)
    assert pool.freed == 1 and memory._counters_for(0).cache_trims == 1
    memory._counters_for(0).cache_limit = None
    d = memory._malloc(1024)
    assert pool.freed == 1 and memory._counters_for(0).allocated == 4096
    del a, b, c, d


def test_out_of_memory_error_is_also_cupys():
    """The GPU path raises cudakit's OutOfMemoryError as a subclass of CuPy's as well (built once
    per CuPy class); here with a stand-in of CuPy's class, whose __init__ takes (size, total)."""
    from cudakit.runtime import memory

    class CupyOOM(MemoryError):
        def __init__(self, size, total, limit=0):
            super().__init__(f"Out of memory allocating {size:,} bytes")

    cls = memory._oom_class(CupyOOM)
    assert memory._oom_class(CupyOOM) is cls
    with pytest.raises(CupyOOM) as ei:
        raise cls(3 << 20, 1 << 20, 2 << 20, 5 << 20, 80 << 30, None, 1)
    e = ei.value
    assert isinstance(e, cudakit.OutOfMemoryError) and isinstance(e, MemoryError)
    assert e.requested == 3 << 20 and e.device == 1 and "out of memory on cuda:1" in str(e)


def test_cpu_backend_has_no_devices_to_bind_or_select():
    be = cudakit.get_backend("cpu")
    assert be.devices == []
    with pytest.raises(DeviceError, match="asked for device 1"):
        be.set_device(1)
    with pytest.raises(DeviceError, match=r"no GPU devices \(got device=0\)"):
        cudakit.get_backend("cpu", device=0)
    if not cudakit.is_available():
        with pytest.raises(DeviceError):
            cudakit.get_backend("auto", device=0)   # auto chose the CPU
