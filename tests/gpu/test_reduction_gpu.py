"""Reductions on the CUDA backend (cudakit.backends.get_backend("cuda"), kernels in
cudakit.kernels.reduction) against the float64 references of tests/reduction_reference.py: every
op, dtype and layout case (split rows and columns, non-contiguous views, tuple axes), NaN/inf,
backward, bad input, bitwise reproducibility, and agreement with the CPU backend."""
import numpy as np
import pytest
import reduction_reference as ref
from helpers import DTYPES, np_dtype

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def b():
    from cudakit.backends import get_backend
    return get_backend("cuda")


def _dev(a):
    return cp.asarray(a)


def _host(a):
    assert isinstance(a, cp.ndarray), type(a)
    return a.get()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ref.FORWARD_CASES, ids=ref.case_id)
def test_forward(b, rng, case, dtype):
    ref.run_forward_case(b, _dev, _host, rng, case, dtype)


# the bandwidth paths at sizes the benchmarks use (smaller): split rows, register rows, split columns
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("shape,axis", [((2 ** 22 + 8,), None), ((4096, 1024), -1), ((4096, 1024), 0),
                                        ((2, 2 ** 21), 1), ((512, 2048), 0)])
def test_forward_large(b, rng, shape, axis, dtype):
    ref.run_forward_case(b, _dev, _host, rng, (shape, axis, False, None), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ref.BACKWARD_CASES, ids=str)
def test_backward(b, rng, case, dtype):
    ref.run_backward_case(b, _dev, _host, rng, case, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ref.LIKE_CASES, ids=str)
def test_backward_in_the_layout_of_like(b, rng, case, dtype):
    ref.run_backward_like(b, _dev, _host, rng, case, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_inf(b, dtype):
    ref.run_nan_inf(b, _dev, _host, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_var_large_mean(b, rng, dtype):
    x = ref.normal(rng, (64, 4096), dtype, loc=1e4)
    xt = np.ascontiguousarray(x.T)
    for axis in (-1, None):
        ref.check_forward(b.var(_dev(x), axis=axis).get(), "var", x, axis, what="large mean rows")
    ref.check_forward(b.var(_dev(xt), axis=0).get(), "var", xt, 0, what="large mean columns")
    # float16 with a mean of 1000 (ulp 0.5): still the float64 variance of the float16 values
    h = ref.normal(rng, (33, 3000), "float16", loc=1000.0, scale=4.0)
    ref.check_forward(b.var(_dev(h), axis=1).get(), "var", h, 1, what="float16 large mean")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bitwise_reproducible(b, rng, dtype):
    x = _dev(ref.normal(rng, (2 ** 22 + 3,), dtype))
    y = _dev(ref.normal(rng, (3000, 700), dtype))
    for f in (lambda: b.sum(x), lambda: b.var(x), lambda: b.mean(y, axis=0), lambda: b.var(y, axis=1),
              lambda: b.argmax(y, axis=0)):
        r1, r2 = f().get(), f().get()
        assert r1.tobytes() == r2.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_cpu_backend(b, rng, dtype):
    from cudakit.backends import get_backend
    c = get_backend("cpu")
    x = ref.ints(rng, (37, 45, 3), dtype)
    for op, kw in [("sum", {"axis": (0, 2)}), ("max", {"axis": 1}), ("argmax", {"axis": 0}),
                   ("argmin", {"axis": None}), ("mean", {"axis": -1, "keepdims": True})]:
        np.testing.assert_array_equal(getattr(b, op)(_dev(x), **kw).get(), getattr(c, op)(x, **kw))


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_and_zero_d(b, dtype):
    from cudakit.errors import ShapeError
    dt = np_dtype(dtype)
    x = _dev(np.zeros((3, 0), dt))
    assert b.sum(x, axis=1).get().tolist() == [0, 0, 0] and b.sum(x, axis=1).dtype == dt
    assert np.isnan(b.mean(x, axis=1).get().astype(np.float64)).all()
    assert np.isnan(b.var(x).get().astype(np.float64))
    assert b.max(x, axis=0).shape == (0,) and b.argmax(x, axis=0).dtype == np.int64
    for op in ("max", "min", "argmax"):
        with pytest.raises(ShapeError, match="empty"):
            getattr(b, op)(x, axis=1)
    z = _dev(np.array(2.5, dt))
    assert b.sum(z).shape == () and float(b.sum(z).get().astype(np.float64)) == 2.5
    assert int(b.argmax(z).get()) == 0 and float(b.var(z).get().astype(np.float64)) == 0.0
    assert b.sum_backward(_dev(np.zeros(3, dt)), (3, 0), axis=1).shape == (3, 0)


def test_bad_input(b):
    from cudakit.errors import DeviceError, DTypeError, ShapeError
    x = _dev(np.ones((2, 3), np.float32))
    with pytest.raises(ShapeError, match=r"axis 2 .*ndim 2"):
        b.sum(x, axis=2)
    with pytest.raises(ShapeError, match="repeated"):
        b.var(x, axis=(0, -2))
    with pytest.raises(ShapeError, match="axis must be None or an int"):
        b.argmax(x, axis=(0,))
    with pytest.raises(DTypeError):
        b.sum(cp.ones(3, cp.int32))
    with pytest.raises(DeviceError):
        b.sum(np.ones(3, np.float32))
    with pytest.raises(ShapeError):
        b.max_backward(_dev(np.ones(3, np.float32)), x, axis=1)


def test_cached_plans_serve_new_data_and_keep_shape_specific_settings(b, rng):
    """reduce() keeps the plan of each C-contiguous input (shape, dtype, axes, ddof, alignment,
    device): a second call with other values, a shifted (unaligned) view, another ddof or a
    permuting tuple of axes computes its own result, as the uncached path does."""
    from cudakit.kernels import reduction
    reduction._plans.clear()
    reduction._fast.clear()
    for _ in range(2):
        x = rng.standard_normal((6, 5, 40)).astype(np.float32)
        dx = cp.asarray(x)
        # a float32 sum's error scales with the sum of |terms|, not with the (possibly cancelling) sum
        np.testing.assert_allclose(_host(b.sum(dx, axis=(0, 2))), x.sum(axis=(0, 2)), rtol=1e-5,
                                   atol=1e-6 * float(np.abs(x).sum(axis=(0, 2)).max()))
        for ddof in (0, 1):
            np.testing.assert_allclose(_host(b.var(dx, axis=-1, ddof=ddof)), x.var(axis=-1, ddof=ddof), rtol=1e-4)
        np.testing.assert_array_equal(_host(b.argmax(dx, axis=1)), x.argmax(axis=1))
        flat = cp.asarray(np.concatenate([[0.0], x.ravel()]).astype(np.float32))[1:]  # 4 bytes past alignment
        np.testing.assert_allclose(float(_host(b.sum(flat))), float(x.sum(dtype=np.float64)), rtol=1e-5)
    assert len(reduction._plans) == 3   # var ddof 0 and 1, argmax
    assert len(reduction._fast) == 2    # sum (0, 2) and the shifted full sum: the planned launches (reduce_fast)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_planned_fast_call_equals_the_checked_reduce(dtype, rng, monkeypatch):
    """cudakit.sum/mean/max/min (and the Backend methods) over all axes, one int axis or a tuple of
    them of a C-contiguous CuPy array take kernels.reduction's planned launches (no Python launch
    wrapper): bitwise reduce()'s result for one-block, split (with the final kernel), row and column
    layouts, reduced axes in several runs (reduce()'s passes), keepdims and 16-byte-unaligned data;
    axis lists and numpy ints, transposed layouts, empty reductions and bad axes take the checked path."""
    import cudakit
    from cudakit.kernels import reduction as rd
    from helpers import data
    from cudakit.errors import ShapeError
    calls = []
    real = rd._launch_function
    monkeypatch.setattr(rd, "_launch_function", lambda *a: (calls.append(a[0]), real(*a)))
    cases = [(((1 << 20) + 3,), None), ((64, 96), None), ((64, 96), -1), ((64, 96), 0), ((3, 5, 96), 1),
             ((7, 1, 33), 2), ((4096, 8), 0), ((5, 6, 7), (1, 2)), ((4, 6, 8), (0, 2)), ((4, 6, 8), (-1, 0)),
             ((32, 24, 28, 28), (0, 2, 3)), ((3, 5, 4, 6, 7), (0, 2, 4)), ((2, 1, 4, 1, 5), (0, 2))]
    for shape, axis in cases:
        x = _dev(data(rng, shape, dtype))
        axes = tuple(range(len(shape))) if axis is None else \
            tuple(sorted(a % len(shape) for a in ((axis,) if isinstance(axis, int) else axis)))
        for op in ("sum", "mean", "max", "min"):
            for keepdims in (False, True):
                calls.clear()
                got = getattr(cudakit, op)(x, axis, keepdims)
                via_backend = getattr(cudakit.get_backend("cuda"), op)(x, axis, keepdims)
                assert calls == [], (shape, axis, op)
                want = rd.reduce(x, op, axes)
                assert calls   # the checked reduce did launch through the wrapper
                kept = tuple(1 if d in axes else n for d, n in enumerate(shape)) if keepdims else want.shape
                assert got.shape == via_backend.shape == kept and got.dtype == want.dtype
                np.testing.assert_array_equal(_host(got).reshape(want.shape).astype(np.float64),
                                              _host(want).astype(np.float64))
                np.testing.assert_array_equal(_host(via_backend), _host(got))
    base = _dev(data(rng, (64 * 96 + 1,), dtype))
    x = base[1:].reshape(64, 96)
    assert x.flags.c_contiguous and x.data.ptr % 16
    np.testing.assert_array_equal(_host(cudakit.sum(x, -1)).astype(np.float64),
                                  _host(rd.reduce(x, "sum", (1,))).astype(np.float64))
    assert any(k[1] == (64, 96) and not k[6] for k in rd._fast)
    # the checked path: a list of axes, a numpy int axis, a transposed layout, an empty reduction, a bad axis
    x = _dev(data(rng, (4, 6, 8), dtype))
    calls.clear()
    cudakit.sum(x, [0, 2])
    cudakit.sum(x, np.int64(1))
    cudakit.sum(x.transpose(1, 0, 2), 0)
    assert len(calls) >= 3
    assert _host(cudakit.sum(_dev(data(rng, (3, 0), dtype)), 1)).tolist() == [0, 0, 0]
    with pytest.raises(ShapeError, match="repeated"):
        cudakit.sum(x, (1, -2))
    with pytest.raises(ShapeError):
        cudakit.max(_dev(data(rng, (3, 0), dtype)), 1)
    with pytest.raises(ShapeError, match="out of range"):
        cudakit.sum(x, 3)
    with cudakit.profile() as prof:
        cudakit.sum(x)
    assert [r["name"] for r in prof.table()][0].startswith("ck_red_")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 7, 5, 9), (32, 24, 28, 28), (1, 5, 1, 1), (4, 3, 11), (0, 6, 4, 4),
                                   (2, 4, 0, 3)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_channel_sum_against_float64(rng, shape, dtype, channels_last):
    """reduction.channel_sum (a convolution's bias gradient, every axis but 1 summed): C-contiguous
    and channels-last views, empty ones, against a float64 sum, in g's dtype, rounded once."""
    from helpers import data
    from cudakit.kernels.reduction import channel_sum
    g = data(rng, shape, dtype)
    want = g.astype(np.float64).sum(axis=(0,) + tuple(range(2, g.ndim)))
    if channels_last and g.ndim == 4:
        d = cp.asarray(np.ascontiguousarray(g.transpose(0, 2, 3, 1))).transpose(0, 3, 1, 2)
        if 0 not in shape and shape[1] > 1 and shape[2] * shape[3] > 1:   # (else both layouts are one memory)
            assert not d.flags.c_contiguous
    else:
        d = cp.asarray(g)
    got = channel_sum(d)
    assert got.shape == (shape[1],) and got.dtype == np_dtype(dtype)
    # float32 sums (blocked: at most a few hundred roundings deep) rounded once to the dtype
    mag = np.abs(g.astype(np.float64)).sum(axis=(0,) + tuple(range(2, g.ndim)))
    eps = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53}[dtype]
    bound = np.abs(want) * eps + mag * 256 * (2.0**-24 if dtype != "float64" else 2.0**-53) + 1e-30
    err = np.abs(_host(got).astype(np.float64) - want)
    assert (err <= 2 * bound).all(), (err.max(), bound.min())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_planned_mean_backward_keeps_the_layout_of_like(rng, dtype):
    """cudakit.mean_backward(..., like=x) of a channels-last x through the planned calls (the first
    call checked, later ones a traced plan): the same strides and values on every call."""
    import cudakit
    x = cp.ascontiguousarray(cp.zeros((8, 16, 5, 6), np_dtype(dtype)).transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    for _ in range(3):
        g = ref.normal(rng, (8, 16), dtype)
        r = cudakit.mean_backward(_dev(g), x.shape, axis=(2, 3), like=x)
        assert r.strides == x.strides
        ref.check_backward(r.get(), "mean", g, x.shape, (2, 3), what="planned")
