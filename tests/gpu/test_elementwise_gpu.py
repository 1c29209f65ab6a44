"""add, mul, relu, relu_backward on the GPU equal the CPU backend / NumPy bit for bit."""
import numpy as np
import pytest

import cudakit
from helpers import DTYPES, assert_same, np_dtype, random, reference

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")

SIZES = [0, 1, 257, (1 << 20) + 3]


def _dev(x, dtype):
    return cp.asarray(np.asarray(x).astype(np_dtype(dtype)))


def _poisoned_out(shape, dtype):
    return cp.full(shape, np.nan, np_dtype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", ["add", "mul", "relu_backward"])
def test_binary(op, n, dtype, rng):
    a, b = random(rng, n, dtype), random(rng, n, dtype)
    out = _poisoned_out(n, dtype)
    got = getattr(cudakit, op)(_dev(a, dtype), _dev(b, dtype), out=out)
    assert got is out and got.dtype == np_dtype(dtype)
    assert_same(got.get(), reference(op, a, b, dtype=dtype))
    assert_same(got.get(), getattr(cudakit, op)(a, b))  # the CPU backend agrees bit for bit
    assert_same(getattr(cudakit, op)(_dev(a, dtype), _dev(b, dtype)).get(), got.get())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_relu(n, dtype, rng):
    x = random(rng, n, dtype)
    got = cudakit.relu(_dev(x, dtype), out=_poisoned_out(n, dtype))
    assert_same(got.get(), reference("relu", x, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_misaligned_noncontiguous_broadcast(dtype, rng):
    a = random(rng, (1001,), dtype)
    da = _dev(a, dtype)
    assert_same(cudakit.add(da[1:], da[:-1]).get(), reference("add", a[1:], a[:-1], dtype=dtype))  # unaligned
    m = random(rng, (34, 65), dtype)
    dm = _dev(m, dtype)
    assert_same(cudakit.mul(dm[::2, 1::3], dm[1::2, ::3]).get(), reference("mul", m[::2, 1::3], m[1::2, ::3], dtype=dtype))
    assert_same(cudakit.relu(dm.T).get(), reference("relu", m.T, dtype=dtype))
    col, row = random(rng, (7, 1, 5), dtype), random(rng, (6, 5), dtype)
    assert_same(cudakit.add(_dev(col, dtype), _dev(row, dtype)).get(), reference("add", col, row, dtype=dtype))
    assert_same(cudakit.relu_backward(_dev(row, dtype), _dev(col, dtype)).get(),
                reference("relu_backward", row, col, dtype=dtype))
    out = _dev(m, dtype)[:, ::2]  # a strided out
    cudakit.add(_dev(m, dtype)[:, ::2], 1.5, out=out)
    assert_same(out.get(), reference("add", m[:, ::2], np.full_like(m[:, ::2], 1.5), dtype=dtype))
    # 9 non-mergeable dimensions: more than the strided kernel takes, computed on copies
    big = random(rng, (2,) * 9 + (3,), dtype)
    dbig = _dev(big, dtype)[..., ::2]
    assert_same(cudakit.relu(dbig).get(), reference("relu", big[..., ::2], dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_results_keep_a_dense_layout(dtype, rng):
    """Channels-last views (and a transpose) in: the result in their layout, computed over the flat
    memory by the contiguous kernels (unaligned too), equal to NumPy bit for bit."""
    a, b = random(rng, (3, 16, 9, 7), dtype), random(rng, (3, 16, 9, 7), dtype)
    cl = [cp.ascontiguousarray(_dev(v, dtype).transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) for v in (a, b)]
    for r, want in ((cudakit.add(*cl), reference("add", a, b, dtype=dtype)),
                    (cudakit.relu(cl[0]), reference("relu", a, dtype=dtype)),
                    (cudakit.relu_backward(cl[1], cl[0]), reference("relu_backward", b, a, dtype=dtype)),
                    (cudakit.mul(cl[0], 0.5), reference("mul", a, np.full_like(a, 0.5), dtype=dtype))):
        assert r.strides == cl[0].strides
        assert_same(r.get(), want)
    t = _dev(a, dtype).transpose(3, 1, 0, 2)
    assert cudakit.relu(t).strides == t.strides
    # out= in the same layout, in place, and a shifted view of the input (computed through a temporary)
    out = cp.ascontiguousarray(cl[1].transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    assert cudakit.add(cl[0], cl[1], out=out) is out
    assert_same(out.get(), reference("add", a, b, dtype=dtype))
    inplace = cp.ascontiguousarray(cl[0].transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    cudakit.relu(inplace, out=inplace)
    assert_same(inplace.get(), reference("relu", a, dtype=dtype))
    host = np.asarray(a).astype(np_dtype(dtype)).transpose(0, 2, 3, 1).reshape(-1)
    flat = cp.asarray(np.concatenate([host, np.zeros(16, host.dtype)]))   # a's pixels, then one more
    src = flat[:-16].reshape(3, 9, 7, 16)   # out one pixel (16 channels) further on in the same memory:
    dst = flat[16:].reshape(3, 9, 7, 16)    # it overlaps the input without being the same view
    want_shift = reference("relu", src.get(), dtype=dtype)
    cudakit.relu(src.transpose(0, 3, 1, 2), out=dst.transpose(0, 3, 1, 2))
    assert_same(dst.get(), want_shift)
    un = cp.empty(a.size + 1, np_dtype(dtype))[1:].reshape(3, 9, 7, 16)   # one element off alignment
    un[...] = cl[0].transpose(0, 2, 3, 1)
    assert_same(cudakit.relu(un.transpose(0, 3, 1, 2)).get(), reference("relu", a, dtype=dtype))


def test_nan_inf_propagate():
    x = np.array([np.nan, np.inf, -np.inf, -1.0, 0.0, 2.0], np.float32)
    dx = cp.asarray(x)
    assert_same(cudakit.relu(dx).get(), [np.nan, np.inf, 0, 0, 0, 2])
    assert_same(cudakit.add(dx, dx).get(), x + x)
    assert_same(cudakit.mul(dx, dx).get(), x * x)


def test_runs_on_the_inputs_device():
    x = cp.arange(10, dtype=cp.float32)
    with cudakit.device(0):
        y = cudakit.relu(x - 5)
    assert y.device.id == x.device.id


def test_zero_copy_torch_inputs():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    t = torch.arange(-3, 3, dtype=torch.float32, device="cuda")
    y = cudakit.relu(t)
    assert isinstance(y, cp.ndarray)
    np.testing.assert_array_equal(y.get(), [0, 0, 0, 0, 1, 2])


def test_bad_input_gpu():
    a = cp.ones(4, cp.float32)
    with pytest.raises(cudakit.ShapeError):
        cudakit.add(a, cp.ones(5, cp.float32))
    with pytest.raises(cudakit.DTypeError, match="int32"):
        cudakit.relu(cp.ones(3, cp.int32))
    with pytest.raises(cudakit.DeviceError, match="host array"):
        cudakit.add(a, np.ones(4, np.float32))
    assert_same(cudakit.add(a, a).get(), np.full(4, 2.0))


@pytest.mark.multi_gpu
def test_arrays_on_different_devices():
    with cp.cuda.Device(0):
        a = cp.ones(8, cp.float32)
    with cp.cuda.Device(1):
        b = cp.ones(8, cp.float32)
        c = cudakit.add(b, b)  # runs on device 1 while 1 is current...
    assert c.device.id == 1
    with cp.cuda.Device(0):
        c = cudakit.relu(b)  # ...and while 0 is current
    assert c.device.id == 1 and (c.get() == 1).all()
    with cp.cuda.Device(0):  # the other op families too: on the inputs' device, through any launcher
        s, r, d = cudakit.softmax(b.reshape(2, 4)), cudakit.sum(b), cudakit.gelu(b, approximate="none")
        assert cp.cuda.runtime.getDevice() == 0
    assert s.device.id == r.device.id == d.device.id == 1
    assert float(r.get()) == 8 and np.allclose(s.get(), 0.25) and np.allclose(d.get(), 0.8413447460685429)
    with pytest.raises(cudakit.DeviceError, match="different devices"):
        cudakit.add(a, b)


@pytest.mark.slow
def test_more_than_2_31_elements():
    """2^31 + 77 float16 elements (4 GiB per array): 64-bit indexing end to end."""
    free, _ = cudakit.memory_info()
    n = (1 << 31) + 77
    if free < 4 * n * 2 + (2 << 30):
        pytest.skip("not enough free device memory")
    x = cp.empty(n, cp.float16)
    x[: 1 << 20] = cp.random.standard_normal(1 << 20).astype(cp.float16)
    x[1 << 20:] = -1.5
    x[-7:] = cp.asarray([1, -2, 3, -4, 5, float("nan"), 7], cp.float16)
    y = cudakit.relu(x)
    assert bool((y[-7:] == cp.asarray([1, 0, 3, 0, 5, float("nan"), 7], cp.float16)).sum() == 6)
    assert bool(cp.isnan(y[-2])) and bool((y[1 << 20: -7] == 0).all())
    assert bool((y[: 1 << 20] == cp.maximum(x[: 1 << 20], 0)).all())
    z = cudakit.add(y, y)
    assert float(z[-1]) == 14.0 and bool((z[: 1 << 20] == 2 * y[: 1 << 20]).all())
    del x, y, z
    cudakit.empty_cache()


def test_launch_blocking_and_profiled_paths_agree(monkeypatch, rng):
    x = random(rng, 4099, "float32")
    want = reference("relu", x, dtype="float32")
    monkeypatch.setenv("CUDAKIT_LAUNCH_BLOCKING", "1")
    cudakit.config.reload()
    try:
        assert_same(cudakit.relu(cp.asarray(x)).get(), want)
    finally:
        monkeypatch.undo()
        cudakit.config.reload()
    with cudakit.profile() as prof:
        got = cudakit.relu(cp.asarray(x))
    assert_same(got.get(), want)
    from cudakit.kernels import elementwise as ew
    dev = cp.cuda.runtime.getDevice()   # the shape of this GPU (its tuned or its model's)
    assert [r["name"] for r in prof.table()] == [ew._expr("contig", "relu", "float32", 4, ew.contig_config("relu", "float32", dev)[0])]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_scalar_operand_fused(op, dtype, rng):
    """array op scalar and scalar op array take the one-input kernel and equal the CPU backend."""
    for n in (1, 257, (1 << 20) + 3):
        x = random(rng, n, dtype)
        x[:2] = [0, np.inf] if n > 1 else [0]
        dx = _dev(x, dtype)
        for s in (2.5, -3, 1e-3):
            fn = getattr(cudakit, op)
            assert_same(fn(dx, s).get(), fn(x, s))
            assert_same(fn(s, dx).get(), fn(s, x))
    m = random(rng, (34, 65), dtype)
    assert_same(cudakit.div(_dev(m, dtype)[:, ::3], 0.75).get(), cudakit.div(m[:, ::3], 0.75))


def test_native_tiny_op_path(rng):
    """The native dispatch (runtime/_native.c ew) that cudakit.add/mul/relu take for contiguous
    same-shape arrays gives the reference result for every dtype, aligned and not, and stands
    aside while a profile records."""
    from cudakit import ops
    from cudakit.runtime import launch, native
    if native.module() is None:
        pytest.skip(f"native module: {native.status()}")
    for dtype in DTYPES:
        a, b = random(rng, 1003, dtype), random(rng, 1003, dtype)
        for off in (0, 1):  # off=1: views 2-8 bytes past a 16-byte boundary (scalar kernels)
            da, db = _dev(a, dtype)[off:], _dev(b, dtype)[off:]
            cases = [("_T_ADD", da, db, "add", cudakit.add), ("_T_MUL", da, db, "mul", cudakit.mul),
                     ("_T_RELU", da, None, "relu", cudakit.relu)]
            for table, x0, x1, op, fn in cases:
                fn(*([x0] if x1 is None else [x0, x1]))  # fills the table, opens the gate
                # (the tables are ops' once its first CUDA call has run: read after it, not before)
                got = ops._ew(getattr(ops, table), x0, x1, 0.0)
                assert got is not None, (op, dtype, off)
                want = reference(op, a[off:], *([] if x1 is None else [b[off:]]), dtype=dtype)
                assert_same(got.get(), want)
                assert launch.recent_launches[-1][0].startswith("ck_ew")
    x = _dev(random(rng, 64, "float32"), "float32")
    cudakit.relu(x)
    with cudakit.profile() as prof:
        assert ops._ew(ops._T_RELU, x, None, 0.0) is None
        cudakit.relu(x)
    assert len(prof.table()) == 1


def test_native_tiny_op_path_reads_cupy_arrays_from_their_fields(rng):
    """On this CuPy the native path reads arrays from their fields (runtime/_cupy_layout.py) and
    builds outputs with CuPy's _ndarray_init: the offsets read real GPU arrays as their attributes
    say, and outputs of every rank come out right, counted by the memory statistics."""
    import ctypes
    import struct
    from cudakit import ops
    from cudakit.runtime import _cupy_layout, native
    mod = native.fast_paths()
    if mod is None:
        pytest.skip(f"native module: {native.status()}")
    offs = _cupy_layout.discover(cp)
    assert offs is not None, "CuPy's ndarray layout not recognised"
    size, shape, contig, dtype_off, data = offs[:5]

    def field(o, off, fmt):
        return struct.unpack(fmt, ctypes.string_at(id(o) + off, struct.calcsize(fmt)))[0]
    for x in (cp.arange(12, dtype=cp.float32).reshape(3, 4), cp.zeros((5, 6), cp.float16)[:, 1:], cp.ones(())):
        assert field(x, size, "<q") == x.size and field(x, contig, "<i") == int(x._c_contiguous)
        assert field(x, dtype_off, "<Q") == id(x.dtype) and field(x, data, "<Q") == id(x.data)
        assert field(x.data, offs[5], "<Q") == x.data.ptr and field(x.data, offs[6], "<i") == x.data.device_id
        assert field(x, shape + 8, "<Q") - field(x, shape, "<Q") == 8 * x.ndim
    # the capsule's signature is this CuPy's (else native.py logged and left it out)
    mod.fast_layout(offs, cp.cuda.memory.MemoryPointer, native._c_function(cp._core.core, "_ndarray_init"))
    for shp in [(), (1,), (7, 143), (2, 3, 5, 7)]:
        a, b = random(rng, shp, "float32"), random(rng, shp, "float32")
        da, db = _dev(a, "float32"), _dev(b, "float32")
        cudakit.add(da, db)  # fills the table, opens the gate
        before = cudakit.memory.stats()
        got = ops._ew(ops._T_ADD, da, db, 0.0)
        assert got is not None and got.shape == shp and got.strides == da.strides and got._c_contiguous
        assert_same(got.get(), reference("add", a, b, dtype="float32"))
        after = cudakit.memory.stats()
        assert after.allocations == before.allocations + 1
        assert after.allocated - before.allocated == max(512, -(-a.nbytes // 512) * 512)
        del got
        assert cudakit.memory.stats().allocated == before.allocated


def test_tune_stores_the_fastest_shape_and_the_op_launches_it(cache_dir, rng):
    """`cudakit tune` on one op: each candidate shape timed through cudakit.relu, the winner kept
    in the cache for this GPU's UUID and launched by the next call, with the right result."""
    from cudakit.bench.tune import candidates, tune_elementwise
    from cudakit.kernels import elementwise as ew, ew_shapes
    from cudakit.runtime import launch
    ew_shapes.forget()
    try:
        found, path, times = tune_elementwise({"relu"}, ("float32",), rounds=1)
        best = found[("relu", "float32")]
        assert set(times[("relu", "float32")]) == set(candidates("relu", "float32"))
        assert best == min(times[("relu", "float32")], key=times[("relu", "float32")].get)
        assert path.exists() and cudakit.get_device_info().uuid in path.name
        ew_shapes.forget()
        assert ew_shapes.shapes(cudakit.current_device())[("relu", "float32")] == best
        x = random(rng, 1 << 20, "float32")
        got = cudakit.relu(_dev(x, "float32"))
        assert launch.recent_launches[-1][2] == (best[1], 1, 1)
        assert launch.recent_launches[-1][0].endswith(f", {best[0]}>")
        assert_same(got.get(), reference("relu", x, dtype="float32"))
    finally:
        ew_shapes.forget()
        ew.forget_entries("relu")


def test_out_sharing_memory_with_an_input_gives_numpys_result(rng):
    """out= a shifted or reversed view of an input: computed into a temporary first, as NumPy
    does (the native path declines these; in place goes straight through)."""
    a = random(rng, 4099, "float32")
    for fn, op in ((cudakit.add, np.add), (cudakit.mul, np.multiply)):
        x, want = _dev(a, "float32"), a.copy()
        fn(x[1:], x[:-1], out=x[:-1])
        op(want[1:], want[:-1], out=want[:-1])                 # NumPy buffers the overlap
        assert_same(x.get(), want)
    x = _dev(a, "float32")
    cudakit.relu(x[::-1], out=x)
    assert_same(x.get(), reference("relu", a[::-1], dtype="float32"))
    x = _dev(a, "float32")
    assert cudakit.add(x, x, out=x) is x                       # in place
    assert_same(x.get(), reference("add", a, a, dtype="float32"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_every_elementwise_call_takes_the_native_path_once_warm(dtype, rng, monkeypatch):
    """After its first call, each functional elementwise op (activations, backwards, scalar
    operands) launches from C with no Python launch, and gives the backend's result bit for bit."""
    from cudakit.kernels import elementwise as ew
    from cudakit.runtime import native
    if native.module() is None:
        pytest.skip(f"native module: {native.status()}")
    x, g = _dev(random(rng, 1003, dtype), dtype), _dev(random(rng, 1003, dtype), dtype)
    be = cudakit.get_backend("cuda")
    calls = {
        "sub": (lambda: cudakit.sub(x, g), lambda: be.sub(x, g)),
        "div": (lambda: cudakit.div(x, g), lambda: be.div(x, g)),
        "add 1": (lambda: cudakit.add(x, 1), lambda: be.add(x, 1)),
        "mul 0.1": (lambda: cudakit.mul(0.1, x), lambda: be.mul(0.1, x)),
        "2.5 - x": (lambda: cudakit.sub(2.5, x), lambda: be.sub(2.5, x)),
        "x / 3": (lambda: cudakit.div(x, 3.0), lambda: be.div(x, 3.0)),
        "1 / x": (lambda: cudakit.div(1.0, x), lambda: be.div(1.0, x)),
        "leaky_relu": (lambda: cudakit.leaky_relu(x, 0.2), lambda: be.leaky_relu(x, 0.2)),
        "leaky_relu_backward": (lambda: cudakit.leaky_relu_backward(g, x, 0.2), lambda: be.leaky_relu_backward(g, x, 0.2)),
        "relu_backward": (lambda: cudakit.relu_backward(g, x), lambda: be.relu_backward(g, x)),
        "gelu": (lambda: cudakit.gelu(x), lambda: be.gelu(x)),
        "gelu erf": (lambda: cudakit.gelu(x, "none"), lambda: be.gelu(x, "none")),
        "gelu_backward erf": (lambda: cudakit.gelu_backward(g, x, "none"), lambda: be.gelu_backward(g, x, "none")),
    }
    for op in ("sigmoid", "tanh", "silu"):
        calls[op] = (lambda op=op: getattr(cudakit, op)(x), lambda op=op: getattr(be, op)(x))
        calls[op + "_backward"] = (lambda op=op: getattr(cudakit, op + "_backward")(g, x),
                                   lambda op=op: getattr(be, op + "_backward")(g, x))
    wants = {name: slow().get() for name, (_, slow) in calls.items()}  # fills the tables
    for name, (fast, _) in calls.items():
        fast()

    def no_python_launch(*a, **k):
        raise AssertionError("the Python launch path ran")
    monkeypatch.setattr(ew, "_launch_contig", no_python_launch)
    for name, (fast, _) in calls.items():
        got = fast().get()
        np.testing.assert_array_equal(got.astype(np.float64), wants[name].astype(np.float64), err_msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "relu_backward", "gelu_tanh_backward"])
def test_trailing_dims_broadcast(op, dtype, rng, monkeypatch):
    """An operand repeated along the other (its shape the result's trailing dims: a bias, a position
    table; either side; leading 1s; a length that is not a multiple of the vector; an unaligned
    view) takes the row-broadcast kernel: bitwise the contiguous kernel on the operand broadcast
    out and the CPU backend; the strided kernel still takes other broadcasts."""
    from cudakit.kernels import elementwise
    name = "gelu_backward" if op == "gelu_tanh_backward" else op
    fn = getattr(cudakit, name)
    launched = []
    real = elementwise._launch_rowbc
    # (counts every row-broadcast launch: the contiguous operands of `want` and the CPU calls take none)
    monkeypatch.setattr(elementwise, "_launch_rowbc", lambda *args: (launched.append(1), real(*args))[1])
    for full_shape, rep_shape in (((8, 33, 64), (33, 64)), ((129, 40), (40,)), ((5, 7, 3), (1, 7, 3)),
                                  ((300, 13), (13,)), ((64, 1024), (1, 1024))):
        a, b = random(rng, full_shape, dtype), random(rng, rep_shape, dtype)
        da, db = _dev(a, dtype), _dev(b, dtype)
        wide = cp.zeros(db.size + 1, db.dtype)
        off = wide[1:].reshape(db.shape)
        off[...] = db
        for x, y, hx, hy in ((da, db, a, b), (db, da, b, a), (da, off, a, b)):
            got = fn(x, y).get()
            shape = np.broadcast_shapes(x.shape, y.shape)
            want = fn(cp.ascontiguousarray(cp.broadcast_to(x, shape)), cp.ascontiguousarray(cp.broadcast_to(y, shape)))
            assert_same(got, want.get())
            if op != "gelu_tanh_backward":   # (the GPU's tanh is not NumPy's to the bit)
                assert_same(got, fn(hx, hy))   # the CPU backend
    assert len(launched) == 15
    c, r = random(rng, (7, 1), dtype), random(rng, (7, 5), dtype)   # a column broadcast: the strided kernel
    got = fn(_dev(c, dtype), _dev(r, dtype)).get()
    assert len(launched) == 15
    assert_same(got, fn(cp.ascontiguousarray(cp.broadcast_to(_dev(c, dtype), (7, 5))), _dev(r, dtype)).get())
