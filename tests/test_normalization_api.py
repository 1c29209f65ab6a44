"""The argument policy of layernorm / rmsnorm / batch_norm (backends/normalization_api.py) on the CPU
backend: shapes over several trailing dims, non-contiguous inputs, in-place running statistics,
and typed errors for bad input."""
import norm_reference as ref
import numpy as np
import pytest
from helpers import np_dtype

import cudakit
from cudakit import DTypeError, ShapeError
from cudakit.backends.normalization_api import CpuNormalizationHooks


@pytest.fixture
def be():
    """The CPU backend; before its class carries the normalization ops, a subclass that adds them."""
    b = cudakit.get_backend("cpu")
    if hasattr(b, "layernorm"):
        return b
    return type("CpuNormBackend", (CpuNormalizationHooks, type(b)), {})()


def _data(rng, shape, dtype="float32", loc=0.0):
    return ref.cast(loc + rng.standard_normal(shape), dtype)


def test_layernorm_over_two_trailing_dims(be, rng):
    x = _data(rng, (3, 4, 5, 6))
    w, b = _data(rng, (5, 6), loc=1.0), _data(rng, (5, 6))
    y, mean, rstd = be.layernorm_with_stats(x, w, b, eps=1e-5)
    assert y.shape == x.shape and mean.shape == (3, 4) and rstd.shape == (3, 4)
    yr, _mr, rr = ref.layernorm(x.reshape(12, 30), w.reshape(30), b.reshape(30), 1e-5)
    ref.assert_close(y.reshape(12, 30), yr, "float32", "y")
    ref.assert_close(rstd.reshape(12), rr, "float32", "rstd")
    dy = _data(rng, x.shape)
    dx, dw, db = be.layernorm_backward(dy, x, w, mean, rstd)
    assert dx.shape == x.shape and dw.shape == (5, 6) and db.shape == (5, 6)
    dxr, dwr, _dbr = ref.layernorm_grad(dy.reshape(12, 30), x.reshape(12, 30), w.reshape(30), 1e-5)
    ref.assert_close(dx.reshape(12, 30), dxr, "float32", "dx", scale=ref.grad_scale(dy.reshape(12, 30), w.reshape(30), rr))
    ref.assert_close(dw.reshape(30), dwr, "float32", "dweight", factor=4)
    # without weight, the normalised dims follow from mean's shape
    y2, m2, r2 = be.layernorm_with_stats(x, normalized_ndim=2)
    _dx2, dw2, db2 = be.layernorm_backward(dy, x, None, m2, r2)
    assert dw2 is None and db2.shape == (5, 6)
    np.testing.assert_allclose(be.layernorm(x, normalized_ndim=2), y2)


def test_rmsnorm_public_and_backward(be, rng):
    x, w = _data(rng, (7, 33)), _data(rng, 33, loc=1.0)
    y, rstd = be.rmsnorm_with_stats(x, w, eps=1e-6)
    ref.assert_close(y, ref.rmsnorm(x, w, 1e-6)[0], "float32", "y")
    np.testing.assert_array_equal(be.rmsnorm(x, w, eps=1e-6), y)
    dy = _data(rng, x.shape)
    dx, dw = be.rmsnorm_backward(dy, x, w, rstd)
    dxr, dwr = ref.rmsnorm_grad(dy, x, w, 1e-6)
    ref.assert_close(dx, dxr, "float32", "dx", scale=ref.grad_scale(dy, w, rstd))
    ref.assert_close(dw, dwr, "float32", "dweight", factor=4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_noncontiguous_input_equals_contiguous(be, dtype, rng):
    big = _data(rng, (9, 40), dtype)
    view = big[::2, 1::3]
    assert not view.flags.c_contiguous
    np.testing.assert_array_equal(be.layernorm(view).astype(np.float64),
                                  be.layernorm(np.ascontiguousarray(view)).astype(np.float64))
    np.testing.assert_array_equal(be.rmsnorm(view.T).astype(np.float64),
                                  be.rmsnorm(np.ascontiguousarray(view.T)).astype(np.float64))


def test_batch_norm_updates_running_stats_in_place(be, rng):
    x = _data(rng, (4, 3, 5, 5), loc=1.0)
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    _y, sm, si = be.batch_norm_with_stats(x, None, None, rm, rv, training=True, momentum=0.25, eps=1e-5)
    _, mr, _vr, vu = ref.batch_norm_train(x, None, None, 1e-5)
    ref.assert_close(rm, 0.25 * mr, "float32", "running_mean")
    ref.assert_close(rv, 0.75 + 0.25 * vu, "float32", "running_var")
    # a strided running statistic is written back too
    holder = np.zeros((3, 2), np.float32)
    rv2 = np.ones(3, np.float32)
    be.batch_norm(x, running_mean=holder[:, 1], running_var=rv2, training=True, momentum=0.5)
    ref.assert_close(holder[:, 1], 0.5 * mr, "float32", "strided running_mean")
    assert (holder[:, 0] == 0).all()
    dy = _data(rng, x.shape)
    dx, dg, db = be.batch_norm_backward(dy, x, None, sm, si)
    assert dg is None and dx.shape == x.shape and db.shape == (3,)


def _channels_last(a):
    """An (N, C, *spatial) view of a copy of a in (N, *spatial, C) memory (PyTorch's channels_last)."""
    perm = (0, *range(2, a.ndim), 1)
    return np.ascontiguousarray(a.transpose(perm)).transpose(np.argsort(perm))


def _is_channels_last(a):
    return not a.flags.c_contiguous and a.transpose((0, *range(2, a.ndim), 1)).flags.c_contiguous


@pytest.mark.parametrize("shape", [(4, 3, 5, 7), (2, 6, 3, 4, 5), (3, 2, 9)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float64"])
def test_batch_norm_of_channels_last_views_keeps_the_layout(be, shape, dtype, rng):
    """A channels-last x (3-, 4- or 5-D) is normalised over its [N*spatial, C] rows in place: y and
    dx come back channels-last, equal to the plain layout's values within rounding; a grad_out in
    the other layout is taken too; running statistics are updated as for the plain layout."""
    c = shape[1]
    x, dy = _data(rng, shape, dtype, loc=1.0), _data(rng, shape, dtype)
    gamma, beta = _data(rng, c, dtype, loc=1.0), _data(rng, c, dtype)
    xc = _channels_last(x)
    assert _is_channels_last(xc)
    rm, rv = np.zeros(c, np_dtype(dtype)), np.ones(c, np_dtype(dtype))
    y, sm, si = be.batch_norm_with_stats(xc, gamma, beta, rm, rv, training=True, momentum=0.5)
    assert _is_channels_last(y) and y.shape == shape
    yr, mr, vr, vu = ref.batch_norm_train(x, gamma, beta, 1e-5)
    ref.assert_close(y, yr, dtype, "y", scale=ref.batch_norm_y_scale(yr, x, gamma, mr, 1 / np.sqrt(vr + 1e-5)))
    ref.assert_close(rm, 0.5 * mr, dtype, "running_mean")
    ref.assert_close(rv, 0.5 + 0.5 * vu, dtype, "running_var")
    dxr, dgr, dbr = ref.batch_norm_grad(dy, x, gamma, 1e-5)
    gs = ref.grad_scale(dy, gamma, 1 / np.sqrt(vr + 1e-5), channels=True)
    for g in (_channels_last(dy), dy):   # grad_out in x's layout, and C-contiguous
        dx, dg, db = be.batch_norm_backward(g, xc, gamma, sm, si)
        assert _is_channels_last(dx) and dx.shape == shape
        ref.assert_close(dx, dxr, dtype, "dx", scale=gs, factor=2)
        ref.assert_close(dg, dgr, dtype, "dgamma", factor=4)
        ref.assert_close(db, dbr, dtype, "dbeta", factor=4)
    # x C-contiguous, grad_out channels-last: dx follows x
    dx, _, _ = be.batch_norm_backward(_channels_last(dy), x, gamma, sm, si)
    assert dx.flags.c_contiguous
    ref.assert_close(dx, dxr, dtype, "dx", scale=gs, factor=2)
    # inference keeps the layout too
    yi = be.batch_norm(xc, gamma, beta, rm, rv)
    assert _is_channels_last(yi)
    ref.assert_close(yi, be.batch_norm(x, gamma, beta, rm, rv).astype(np.float64), dtype, "inference y")


def test_nan_propagates(be):
    x = np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 4.0]], np.float32)
    y = be.layernorm(x)
    assert np.isnan(y[0]).all() and np.isfinite(y[1]).all()
    y = be.rmsnorm(x)
    assert np.isnan(y[0]).all() and np.isfinite(y[1]).all()


# ------------------------------------------------------------------------------- bad input

def test_weight_of_the_wrong_length(be):
    x = np.ones((4, 8), np.float32)
    with pytest.raises(ShapeError, match="weight must have shape"):
        be.layernorm(x, np.ones(7, np.float32))
    with pytest.raises(ShapeError, match="bias must have shape"):
        be.layernorm(x, np.ones(8, np.float32), np.ones(9, np.float32))
    with pytest.raises(ShapeError, match="weight must have shape"):
        be.rmsnorm(x, np.ones(16, np.float32))
    with pytest.raises(ShapeError, match="gamma must have shape"):
        be.batch_norm(np.ones((4, 3, 2, 2), np.float32), np.ones(4, np.float32), training=True)
    with pytest.raises(ShapeError, match="weight must have shape"):
        _, m, r = be.layernorm_with_stats(x)
        be.layernorm_backward(x, x, np.ones(5, np.float32), m, r)


@pytest.mark.parametrize("eps", [0, -1e-5, float("nan"), float("inf"), True, "1e-5"])
def test_eps_must_be_positive(be, eps):
    x = np.ones((2, 8), np.float32)
    with pytest.raises(ValueError, match="eps must be"):
        be.layernorm(x, eps=eps)
    with pytest.raises(ValueError, match="eps must be"):
        be.rmsnorm(x, eps=eps)
    with pytest.raises(ValueError, match="eps must be"):
        be.batch_norm(x, training=True, eps=eps)


def test_batch_norm_needs_2d_or_more(be):
    with pytest.raises(ShapeError, match="1-D"):
        be.batch_norm(np.ones(8, np.float32), training=True)
    with pytest.raises(ShapeError, match="1-D"):
        be.batch_norm_backward(np.ones(8, np.float32), np.ones(8, np.float32), None,
                               np.zeros(1, np.float32), np.ones(1, np.float32))


def test_other_bad_input(be):
    x = np.ones((4, 8), np.float32)
    with pytest.raises(DTypeError, match="weight is float64"):
        be.layernorm(x, np.ones(8, np.float64))
    with pytest.raises(DTypeError, match="int32"):
        be.layernorm(np.ones((4, 8), np.int32))
    with pytest.raises(ShapeError, match="grad_out must have"):
        _, m, r = be.layernorm_with_stats(x)
        be.layernorm_backward(np.ones((4, 9), np.float32), x, None, m, r)
    with pytest.raises(ShapeError, match="mean must have shape"):
        be.layernorm_backward(x, x, None, np.zeros(3, np.float32), np.ones(4, np.float32))
    with pytest.raises(ShapeError, match="normalise the last"):
        be.layernorm(np.float32(1.0))
    with pytest.raises(ShapeError, match="empty"):
        be.layernorm(np.ones((4, 0), np.float32))
    with pytest.raises(ValueError, match="needs running_mean"):
        be.batch_norm(np.ones((4, 3), np.float32), training=False)
    with pytest.raises(ValueError, match="more than one value per channel"):
        be.batch_norm(np.ones((1, 3), np.float32), training=True)
    with pytest.raises(ValueError, match="both running_mean and running_var"):
        be.batch_norm(np.ones((4, 3), np.float32), running_mean=np.zeros(3, np.float32), training=True)


def test_statistics_of_another_float_dtype_are_cast(be, rng):
    x = _data(rng, (3, 16))
    _, m, r = be.layernorm_with_stats(x)
    a = be.layernorm_backward(x, x, None, m, r)[0]
    b = be.layernorm_backward(x, x, None, m.astype(np.float64), r.astype(np.float64))[0]
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np_dtype("float32")


def test_public_functions_dispatch_to_the_cpu_backend(rng):
    x, w, b = _data(rng, (6, 10)), _data(rng, 10, loc=1.0), _data(rng, 10)
    y, mean, rstd = cudakit.layernorm_with_stats(x, w, b, eps=1e-5)
    np.testing.assert_array_equal(cudakit.layernorm(x, w, b, eps=1e-5), y)
    dx, dw, db = cudakit.layernorm_backward(x, x, w, mean, rstd)
    assert dx.shape == x.shape and dw.shape == (10,) and db.shape == (10,)
    y, rstd = cudakit.rmsnorm_with_stats(x, w)
    np.testing.assert_array_equal(cudakit.rmsnorm(x, w), y)
    assert cudakit.rmsnorm_backward(x, x, w, rstd)[1].shape == (10,)
    x4 = _data(rng, (2, 3, 4, 4))
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    y, sm, si = cudakit.batch_norm_with_stats(x4, None, None, rm, rv, training=True)
    assert y.shape == x4.shape and rm.any()
    assert cudakit.batch_norm(x4, running_mean=rm, running_var=rv).shape == x4.shape
    assert cudakit.batch_norm_backward(x4, x4, None, sm, si)[0].shape == x4.shape
    with pytest.raises(ShapeError):
        cudakit.batch_norm(np.ones(4, np.float32), training=True)


@pytest.mark.parametrize("shape,channels_last", [((6, 4, 5, 3), False), ((6, 4, 5, 3), True), ((40, 7), False),
                                                 ((2, 6, 3, 4, 5), True)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float64"])
def test_batch_norm_fused_residual_and_relu(be, shape, channels_last, dtype, rng):
    """batch_norm(..., residual=r, activation="relu") is relu(bn(x) + r) rounded once (against
    float64), in x's layout (a residual in the other layout is taken); activation="relu" alone is
    relu(bn(x)); its backward with the forward's beta equals batch_norm_backward of
    relu_backward(grad_out, y) bit for bit, in training and for the running statistics' update."""
    c = shape[1]
    x, dy, r = (_data(rng, shape, dtype, loc=1.0) for _ in range(3))
    gamma, beta = _data(rng, c, dtype, loc=1.0), _data(rng, c, dtype)
    lay = _channels_last if channels_last else (lambda a: a)
    xl = lay(x)
    yr, mr, vr, _ = ref.batch_norm_train(x, gamma, beta, 1e-5)
    scale = ref.batch_norm_y_scale(yr, x, gamma, mr, 1 / np.sqrt(vr + 1e-5))
    for res in (lay(r), r, _channels_last(r) if len(shape) > 2 else r):   # (x's layout, C order, channels-last)
        rm, rv = np.zeros(c, np_dtype(dtype)), np.ones(c, np_dtype(dtype))
        y = be.batch_norm(xl, gamma, beta, rm, rv, training=True, residual=res, activation="relu")
        assert y.strides == xl.strides
        ref.assert_close(y, np.maximum(yr + ref.f64(r), 0), dtype, "y", scale=np.maximum(scale, np.abs(ref.f64(r))))
        ref.assert_close(rm, 0.1 * mr, dtype, "running_mean")
    y = be.batch_norm(xl, gamma, beta, training=True, residual=lay(r))
    ref.assert_close(y, yr + ref.f64(r), dtype, "y + residual", scale=np.maximum(scale, np.abs(ref.f64(r))))
    y, sm, si = be.batch_norm_with_stats(xl, gamma, beta, training=True, activation="relu")
    plain = be.batch_norm(xl, gamma, beta, training=True)
    assert np.array_equal(ref.f64(y), np.maximum(ref.f64(plain), 0))
    got = be.batch_norm_backward(lay(dy), xl, gamma, sm, si, beta=beta, activation="relu")
    want = be.batch_norm_backward(be.relu_backward(lay(dy), y), xl, gamma, sm, si)
    for name, a, b in zip(("dx", "dgamma", "dbeta"), got, want):
        assert np.array_equal(ref.f64(a), ref.f64(b)), name
    assert got[0].strides == xl.strides


def test_batch_norm_fused_bad_input(be, rng):
    x = _data(rng, (4, 3, 2, 2))
    g, b = _data(rng, 3), _data(rng, 3)
    with pytest.raises(cudakit.ArgumentError, match="activation must be None or 'relu'"):
        be.batch_norm(x, training=True, activation="gelu")
    with pytest.raises(cudakit.ArgumentError, match="activation must be None or 'relu'"):
        be.batch_norm(x, training=True, activation=True)
    with pytest.raises(ShapeError, match="residual must have x's shape"):
        be.batch_norm(x, training=True, residual=x[:2])
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    with pytest.raises(DTypeError, match="residual is float64"):
        be.batch_norm(x, None, None, rm, rv, training=True, residual=x.astype(np.float64))
    with pytest.raises(ShapeError, match="residual must have x's shape"):
        be.batch_norm(x, None, None, rm, rv, training=True, residual=x[:, :2])
    assert (rm == 0).all() and (rv == 1).all()   # nothing written by a refused call
    _, sm, si = be.batch_norm_with_stats(x, g, b, training=True)
    with pytest.raises(cudakit.ArgumentError, match="activation must be None or 'relu'"):
        be.batch_norm_backward(x, x, g, sm, si, beta=b, activation="sigmoid")
    with pytest.raises(ShapeError, match=r"beta must have shape \(3,\)"):
        be.batch_norm_backward(x, x, g, sm, si, beta=_data(rng, 4), activation="relu")


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_backward_residual_grad(be, dtype, rng):
    """residual_grad is added to dx (layernorm and rmsnorm, over two trailing dims, a
    non-contiguous residual_grad), dweight/dbias as without it; the public functions take it on the
    CPU backend; a residual_grad of another shape or dtype raises naming it."""
    x, dy = _data(rng, (3, 4, 5, 6), dtype), _data(rng, (3, 4, 5, 6), dtype)
    w, b = _data(rng, (5, 6), dtype, loc=1.0), _data(rng, (5, 6), dtype)
    res = _data(rng, (3, 4, 6, 5), dtype).transpose(0, 1, 3, 2)   # x's shape, not contiguous
    _, mean, rstd = be.layernorm_with_stats(x, w, b)
    _, rstd_r = be.rmsnorm_with_stats(x, w, normalized_ndim=2)
    flat = lambda a: ref.f64(a).reshape(12, 30)
    for got, plain, want, st in (
            (be.layernorm_backward(dy, x, w, mean, rstd, residual_grad=res), be.layernorm_backward(dy, x, w, mean, rstd),
             ref.layernorm_grad(flat(dy), flat(x), ref.f64(w).reshape(30), 1e-5)[0], rstd),
            (be.rmsnorm_backward(dy, x, w, rstd_r, residual_grad=res), be.rmsnorm_backward(dy, x, w, rstd_r),
             ref.rmsnorm_grad(flat(dy), flat(x), ref.f64(w).reshape(30), 1e-6)[0], rstd_r)):
        assert got[0].shape == x.shape and got[0].dtype == x.dtype
        scale = np.maximum(ref.grad_scale(flat(dy), ref.f64(w).reshape(30), ref.f64(st).reshape(12)), np.abs(flat(res)))
        ref.assert_close(flat(got[0]), want + flat(res), dtype, "dx + residual", scale=scale)
        for g, p in zip(got[1:], plain[1:]):
            np.testing.assert_array_equal(ref.f64(g), ref.f64(p))
    public = cudakit.layernorm_backward(dy, x, w, mean, rstd, residual_grad=res)
    np.testing.assert_array_equal(ref.f64(public[0]), ref.f64(be.layernorm_backward(dy, x, w, mean, rstd,
                                                                                     residual_grad=res)[0]))
    with pytest.raises(ShapeError, match="residual_grad"):
        be.layernorm_backward(dy, x, w, mean, rstd, residual_grad=res[:, :2])
    with pytest.raises(DTypeError, match="residual_grad"):
        be.rmsnorm_backward(dy, x, w, rstd_r, residual_grad=np.zeros(x.shape, np.float16))
