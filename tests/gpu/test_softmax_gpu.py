"""softmax, log_softmax, their backward passes and cross_entropy on CUDA (through
get_backend("cuda")) against the float64 references of tests/softmax_reference.py. The shapes
reach every kernel: register rows (several rows per block, one block per row), the shared-memory
backward, the looped long rows (vector and scalar), ignored rows and out-of-range targets."""
import numpy as np
import pytest
import softmax_reference as ref
from helpers import DTYPES, np_dtype

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")

# (rows, cols): 1x1, odd/prime rows (scalar kernels), register rows of 128..32768, rows past
# registers (65536: shared-memory backward for 16-bit, loops otherwise), past 2^18 (scalar loop).
SHAPES = [(1, 1), (3, 7), (37, 127), (513, 128), (7, 1823), (64, 4096), (5, 4097), (4, 32768), (3, 65536),
          (2, 300007), (1, 262144)]


@pytest.fixture(scope="module")
def be():
    import cudakit
    return cudakit.get_backend("cuda")


def _data(rng, shape, dtype, scale=3.0):
    return ref.cast(scale * rng.standard_normal(shape), dtype)


def _big(shape):
    return shape[0] * shape[1] > 200000


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_forward_backward(be, shape, dtype, rng):
    if _big(shape) and dtype in ("float16", "float64") and shape != (3, 65536):
        pytest.skip("the long rows run for float32 and bfloat16 (and 65536 for every dtype)")
    x = _data(rng, shape, dtype)
    g = _data(rng, shape, dtype, 1.0)
    dx_, dg = cp.asarray(x), cp.asarray(g)
    y = be.softmax(dx_)
    assert isinstance(y, cp.ndarray) and y.dtype == np_dtype(dtype) and y.shape == shape
    yh = y.get()
    ref.assert_close(yh, ref.softmax(x), dtype, "softmax")
    ly = be.log_softmax(dx_)
    lyh = ly.get()
    ref.assert_close(lyh, ref.log_softmax(x), dtype, "log_softmax", scale=1.0)
    want, sc = ref.softmax_grad(g, yh)
    ref.assert_close(be.softmax_backward(dg, y).get(), want, dtype, "softmax_backward", scale=sc)
    want, sc = ref.log_softmax_grad(g, lyh)
    ref.assert_close(be.log_softmax_backward(dg, ly).get(), want, dtype, "log_softmax_backward", scale=sc)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_many_rows(be, dtype, rng):
    """100003 short rows: many blocks of several rows each, a ragged last block."""
    x = _data(rng, (100003, 40), dtype)
    g = _data(rng, (100003, 40), dtype, 1.0)
    y = be.softmax(cp.asarray(x))
    ref.assert_close(y.get(), ref.softmax(x), dtype, "softmax")
    want, sc = ref.softmax_grad(g, y.get())
    ref.assert_close(be.softmax_backward(cp.asarray(g), y).get(), want, dtype, "softmax_backward", scale=sc)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(1001, 128), (77, 40), (9, 4096)])
@pytest.mark.parametrize("plan_nv", [1, 2, 4, 8])
def test_every_forward_plan(plan_nv, shape, dtype, rng):
    """Each packs-per-thread target of the register forward (the shipped one depends on the row
    length: kernels/softmax.py fwd_target) gives the reference result."""
    from cudakit.kernels import softmax as sm
    x = _data(rng, shape, dtype)
    for log in (False, True):
        y = sm.softmax_forward(cp.asarray(x), log=log, plan_nv=plan_nv).get()
        want = ref.log_softmax(x) if log else ref.softmax(x)
        ref.assert_close(y, want, dtype, "log_softmax" if log else "softmax", scale=1.0 if log else 0.0)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_other_axes_and_views(be, axis, rng):
    x = _data(rng, (6, 35, 9), "float32")
    g = _data(rng, (6, 35, 9), "float32", 1.0)
    y = be.softmax(cp.asarray(x), axis=axis)
    assert y.flags.c_contiguous
    ref.assert_close(y.get(), ref.softmax(x, axis), "float32", "softmax")
    ly = be.log_softmax(cp.asarray(x), axis)
    ref.assert_close(ly.get(), ref.log_softmax(x, axis), "float32", "log_softmax", scale=1.0)
    want, sc = ref.softmax_grad(g, y.get(), axis)
    ref.assert_close(be.softmax_backward(cp.asarray(g), y, axis).get(), want, "float32", "softmax_backward", scale=sc)
    base = cp.asarray(_data(rng, (40, 66), "bfloat16"))
    for v in (base[:, ::2], base.T, base[::3, 1:-1]):
        ref.assert_close(be.softmax(v).get(), ref.softmax(v.get()), "bfloat16", "softmax view")


def test_size_zero(be):
    for shape, axis in (((0, 5), -1), ((5, 0), -1), ((3, 0, 4), 1), ((0,), 0)):
        x = cp.zeros(shape, cp.float32)
        assert be.softmax(x, axis).shape == shape and be.log_softmax(x, axis).shape == shape
        assert be.softmax_backward(x, x, axis).shape == shape


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [4, 65536 + 8])  # register rows and the looped online softmax
def test_special_values(be, dtype, cols, rng):
    x = ref.cast(rng.standard_normal((5, cols)), dtype)
    x[0, 1] = np.inf
    x[1, :] = -np.inf
    x[2, 1] = np.nan
    x[3, 1] = -np.inf
    x[4, :2] = ref.cast([1e4, -1e4], dtype)
    y = be.softmax(cp.asarray(x)).get()
    ly = be.log_softmax(cp.asarray(x)).get()
    ref.assert_close(y, ref.softmax(x), dtype, "softmax")
    ref.assert_close(ly, ref.log_softmax(x), dtype, "log_softmax", scale=1.0)
    assert y[3, 1] == 0 and ly[3, 1] == -np.inf


# ---------------------------------------------------------------------------------- cross entropy

def _targets(rng, n, c, itype, frac_ignored=0.2, ignore=-100):
    t = rng.integers(0, c, n)
    t[rng.random(n) < frac_ignored] = ignore
    return t.astype(itype)


CE_CASES = [((1, 1), "float32"), ((33, 127), "float16"), ((64, 1823), "float64"), ((40, 4096), "bfloat16"),
            ((64, 32000), "bfloat16"), ((16, 32000), "float32"), ((9, 50257), "bfloat16"), ((5, 70000), "float32"),
            ((3, 300007), "float32")]


@pytest.mark.parametrize("shape,dtype", CE_CASES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(be, shape, dtype, reduction, rng):
    n, c = shape
    x = _data(rng, shape, dtype)
    t = _targets(rng, n, c, np.int32 if n % 2 else np.int64, frac_ignored=0.2 if n > 3 else 0.0)
    acc = ref.acc_dtype(dtype)
    want, wgrad, sc = ref.cross_entropy(x, t, reduction)
    dx_, dt = cp.asarray(x), cp.asarray(t)
    loss = be.cross_entropy(dx_, dt, reduction)
    assert loss.dtype == np.dtype(acc) and loss.shape == (() if reduction != "none" else (n,))
    ref.assert_close(loss.get(), want, acc, "loss", scale=1.0)
    loss2, grad = be.cross_entropy_with_grad(dx_, dt, reduction)
    ref.assert_close(loss2.get(), want, acc, "fused loss", scale=1.0)
    assert grad.dtype == np_dtype(dtype) and grad.shape == shape
    ref.assert_close(grad.get(), wgrad, dtype, "fused dlogits", scale=sc)
    gl = (rng.standard_normal(n) if reduction == "none" else np.asarray(rng.standard_normal())).astype(acc)
    _, wgrad, sc = ref.cross_entropy(x, t, reduction, grad_loss=gl)
    got = be.cross_entropy_backward(cp.asarray(gl), dx_, dt, reduction)
    ref.assert_close(got.get(), wgrad, dtype, "dlogits", scale=sc)


def test_cross_entropy_ignored_and_empty(be, rng):
    x = cp.asarray(_data(rng, (6, 70000), "float32"))  # the looped kernel's ignored-row path
    t = cp.full(6, -100, cp.int64)
    loss, grad = be.cross_entropy_with_grad(x, t)
    assert np.isnan(loss.get()) and not grad.any()
    assert float(be.cross_entropy(x, t, "sum").get()) == 0
    x0, t0 = cp.zeros((0, 5), cp.float32), cp.zeros(0, cp.int64)
    assert np.isnan(be.cross_entropy(x0, t0).get()) and be.cross_entropy(x0, t0, "none").shape == (0,)


@pytest.mark.parametrize("cols", [7, 70000])
def test_cross_entropy_out_of_range(be, cols):
    """validate=True raises from the call; by default nothing synchronises and the next
    check() / synchronize() / to_host() raises, naming the op and the first bad row, once."""
    import cudakit
    from cudakit.errors import TargetIndexError
    x = cp.zeros((4, cols), cp.float32)
    for bad in (cols, -1):
        t = cp.asarray(np.array([0, 1, bad, 2], np.int32))
        with pytest.raises(TargetIndexError, match=rf"cross_entropy_with_grad: targets\[2\] = {bad} is out of range"):
            be.cross_entropy_with_grad(x, t, validate=True)
        with pytest.raises(TargetIndexError):
            be.cross_entropy(x, t, "none", validate=True)
        loss, _ = be.cross_entropy_with_grad(x, t)            # deferred: no error yet
        assert np.isnan(float(loss.get()))                    # CuPy's own get(): no check
        with pytest.raises(TargetIndexError, match=rf"cross_entropy_with_grad: targets\[2\] = {bad} .*validate=True"):
            cudakit.check()
        cudakit.check()                                       # cleared: raised once
        be.cross_entropy(x, t, "none")
        be.cross_entropy(x, t, "sum")                         # the first pending error wins
        with pytest.raises(TargetIndexError, match=r"^cross_entropy: "):
            cudakit.synchronize()
        be.cross_entropy_backward(1.0, x, t)
        with pytest.raises(TargetIndexError, match=r"^cross_entropy_backward: "):
            cudakit.to_host(x[:1])
    t = cp.asarray(np.array([0, 1, cols + 5, 2]))
    assert np.isfinite(be.cross_entropy(x, t, ignore_index=cols + 5).get())
    cudakit.check()


def test_cross_entropy_uint64_targets_past_int64(be):
    """uint64 targets past 2^63 - 1 are out of range, also where ignore_index is 2^63 - 1 (they
    had been clamped to it and ignored); a target of exactly 2^63 - 1 is ignored there."""
    from cudakit.errors import TargetIndexError
    x = cp.zeros((3, 4), cp.float32)
    for ig in (-100, 2**63 - 1):
        with pytest.raises(TargetIndexError, match=r"targets\[1\]"):
            be.cross_entropy(x, cp.asarray(np.array([1, 2**64 - 1, 3], np.uint64)), ignore_index=ig, validate=True)
    t = cp.asarray(np.array([1, 2**63 - 1, 3], np.uint64))
    assert np.isclose(float(be.cross_entropy(x, t, ignore_index=2**63 - 1, validate=True).get()), np.log(4))


def test_cross_entropy_does_not_synchronise(be):
    """The default call queues its kernels behind a long-running kernel without waiting for it:
    captured into a CUDA graph, which raises on any synchronisation."""
    x = cp.random.standard_normal((64, 1000), dtype=cp.float32)
    t = cp.asarray(np.arange(64) % 1000)
    be.cross_entropy_with_grad(x, t)   # warm: compiled, pool blocks cached
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        try:
            loss, grad = be.cross_entropy_with_grad(x, t)
        finally:
            g = s.end_capture()
        g.launch(s)
    s.synchronize()
    ref_loss, ref_grad = be.cross_entropy_with_grad(x, t)
    assert float(loss.get()) == float(ref_loss.get()) and bool((grad == ref_grad).all())


def test_matches_torch_if_available(be, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    x = cp.asarray(_data(rng, (64, 1000), "float32"))
    t = cp.asarray(_targets(rng, 64, 1000, np.int64))
    tx = torch.from_dlpack(x).clone().requires_grad_(True)
    tl = torch.nn.functional.cross_entropy(tx, torch.from_dlpack(t))
    tl.backward()
    loss, grad = be.cross_entropy_with_grad(x, t)
    np.testing.assert_allclose(loss.get(), tl.item(), rtol=1e-5)
    np.testing.assert_allclose(grad.get(), tx.grad.cpu().numpy(), atol=1e-7)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_cross_entropy_keeps_no_full_size_temporary(be, dtype, rng):
    """Forward + backward allocate the gradient and per-row numbers only: the softmax is never
    written out (peak of cudakit's memory statistics over the call)."""
    import cudakit
    n, c = 2048, 32000
    x = cp.random.standard_normal((n, c), dtype=cp.float32).astype(dtype)
    t = cp.asarray(rng.integers(0, c, n))
    rows = 1 << 20  # generous room for per-row losses and statistics (n * a few floats = 32 KiB)
    for fused in (True, False):
        cp.cuda.runtime.deviceSynchronize()
        base = cudakit.memory.stats().allocated
        cudakit.memory.reset_peak()
        if fused:
            loss, grad = be.cross_entropy_with_grad(x, t)
        else:
            loss = be.cross_entropy(x, t)
            grad = be.cross_entropy_backward(cp.ones((), loss.dtype), x, t)
        cp.cuda.runtime.deviceSynchronize()
        extra = cudakit.memory.stats().peak_allocated - base
        assert grad.nbytes <= extra <= grad.nbytes + rows, (fused, extra, grad.nbytes)
        del loss, grad


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_planned_fast_call_equals_the_checked_launch(dtype, rng, monkeypatch):
    """cudakit.softmax & co. and the Backend methods over the last axis of a contiguous CuPy array
    take kernels.softmax's planned launch (one plan per shape, dtype, device and alignment, no
    Python launch wrapper): bitwise the checked launch's result for register, looped,
    shared-memory-backward and unaligned rows, any number of dims; the plan serves new data; the
    profiler still sees the launch."""
    import cudakit
    from cudakit.kernels import softmax as sk
    be = cudakit.get_backend("cuda")
    calls = []
    real = sk._launch_function
    monkeypatch.setattr(sk, "_launch_function", lambda *a: (calls.append(a[0]), real(*a)))
    shapes = [(3, 5, 96), (96,), (64, 4096), (5, 4097), (3, 65536)]
    if dtype in ("float32", "bfloat16"):
        shapes.append((2, 300007))
    for shape in shapes:
        for log in (False, True):
            x = cp.asarray(_data(rng, shape, dtype))
            g = cp.asarray(_data(rng, shape, dtype, 1.0))
            rows = (-1, shape[-1])
            calls.clear()
            fwd = (cudakit.log_softmax if log else cudakit.softmax)(x)
            bwd = (cudakit.log_softmax_backward if log else cudakit.softmax_backward)(g, fwd)
            assert calls == [] and fwd.shape == bwd.shape == shape and fwd.dtype == bwd.dtype == x.dtype
            want = sk.softmax_forward(x.reshape(rows), log)
            dwant = sk.softmax_backward(g.reshape(rows), want, log)
            assert len(calls) == 2   # the checked launches did go through the wrapper
            np.testing.assert_array_equal(fwd.reshape(rows).get().astype(np.float64), want.get().astype(np.float64))
            np.testing.assert_array_equal(bwd.reshape(rows).get().astype(np.float64), dwant.get().astype(np.float64))
            method = be.log_softmax if log else be.softmax
            np.testing.assert_array_equal(method(x).get().astype(np.float64), fwd.get().astype(np.float64))
    # 16-byte-unaligned rows (a view one element in) take the one-element plan, as the checked launch does
    base = cp.asarray(_data(rng, (64 * 96 + 1,), dtype))
    x = base[1:].reshape(64, 96)
    assert x.flags.c_contiguous and x.data.ptr % 16
    np.testing.assert_array_equal(cudakit.softmax(x).get().astype(np.float64),
                                  sk.softmax_forward(x, False).get().astype(np.float64))
    assert any(k[1] == (64, 96) and not k[4] for k in sk._fast)
    # mismatched backward operands, another device's array, a 0-d array: the checked path decides
    from cudakit.errors import ShapeError
    with pytest.raises(ShapeError, match="shape"):
        cudakit.softmax_backward(g[:1], cudakit.softmax(g))
    with pytest.raises(ShapeError, match="0-d"):
        cudakit.softmax(cp.asarray(np.float32(1.0)))
    with cudakit.profile() as prof:
        cudakit.softmax(x)
    assert [r["name"] for r in prof.table()][0].startswith("ck_softmax_fwd")
