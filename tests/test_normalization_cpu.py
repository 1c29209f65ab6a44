"""The CPU backend's layernorm, rmsnorm and batch_norm (cudakit.backends.cpu_normalization) against
the independent float64 references of tests/norm_reference.py, which a finite-difference check
validates in turn."""
import re

import norm_reference as ref
import numpy as np
import pytest
from helpers import DTYPES, np_dtype

import cudakit
from cudakit.backends import cpu_normalization as cn

HIDDEN = [1, 127, 769, 8193]
ROWS = [1, 1001]


def _data(rng, shape, dtype, loc=0.0, scale=1.0):
    return ref.cast(loc + scale * rng.standard_normal(shape), dtype)


def _stat_dtype(dtype):
    return "float64" if dtype == "float64" else "float32"


def _rows(rows, cols):
    return min(rows, 257) if cols > 4096 else rows  # keep the 8193-wide case quick


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", HIDDEN)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("affine", [False, True])
def test_layernorm(rows, cols, dtype, affine, rng):
    rows = _rows(rows, cols)
    x = _data(rng, (rows, cols), dtype, loc=0.5)
    w = _data(rng, cols, dtype, loc=1.0, scale=0.5) if affine else None
    b = _data(rng, cols, dtype) if affine else None
    dy = _data(rng, (rows, cols), dtype)
    y, mean, rstd = cn.layernorm_forward(x, w, b, 1e-5)
    assert y.dtype == np_dtype(dtype) and mean.dtype == np.dtype(_stat_dtype(dtype)) and rstd.shape == (rows,)
    yr, mr, rr = ref.layernorm(x, w, b, 1e-5)
    ref.assert_close(y, yr, dtype, "y")
    ref.assert_close(mean, mr, _stat_dtype(dtype), "mean", scale=1.0)
    ref.assert_close(rstd, rr, _stat_dtype(dtype), "rstd")
    dx, dw, db = cn.layernorm_backward(dy, x, w, mean, rstd)
    dxr, dwr, dbr = ref.layernorm_grad(dy, x, w, 1e-5)
    ref.assert_close(dx, dxr, dtype, "dx", scale=ref.grad_scale(dy, w, rr))
    assert (dw is None) == (w is None) and db.dtype == np_dtype(dtype)
    if w is not None:
        ref.assert_close(dw, dwr, dtype, "dweight", factor=4)
    ref.assert_close(db, dbr, dtype, "dbias", factor=4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", HIDDEN)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("affine", [False, True])
def test_rmsnorm(rows, cols, dtype, affine, rng):
    rows = _rows(rows, cols)
    x = _data(rng, (rows, cols), dtype, loc=0.3)
    w = _data(rng, cols, dtype, loc=1.0, scale=0.5) if affine else None
    dy = _data(rng, (rows, cols), dtype)
    y, rstd = cn.rmsnorm_forward(x, w, 1e-6)
    yr, rr = ref.rmsnorm(x, w, 1e-6)
    ref.assert_close(y, yr, dtype, "y")
    ref.assert_close(rstd, rr, _stat_dtype(dtype), "rstd")
    dx, dw = cn.rmsnorm_backward(dy, x, w, rstd)
    dxr, dwr = ref.rmsnorm_grad(dy, x, w, 1e-6)
    ref.assert_close(dx, dxr, dtype, "dx", scale=ref.grad_scale(dy, w, rr))
    if affine:
        ref.assert_close(dw, dwr, dtype, "dweight", factor=4)
    else:
        assert dw is None


def test_out_is_filled(rng):
    x = _data(rng, (5, 33), "float32")
    out = np.full_like(x, np.nan)
    y, _, _ = cn.layernorm_forward(x, None, None, 1e-5, out=out)
    assert y is out and np.isfinite(out).all()
    out = np.full_like(x, np.nan)
    dx, _ = cn.rmsnorm_backward(x, x, None, cn.rmsnorm_forward(x, None, 1e-6)[1], out=out)
    assert dx is out and np.isfinite(out).all()


def test_large_mean_is_accurate(rng):
    x = (1000.0 + rng.standard_normal((4, 4096))).astype(np.float32)
    y, _mean, rstd = cn.layernorm_forward(x, None, None, 1e-5)
    yr, mr, rr = ref.layernorm(x, None, None, 1e-5)
    np.testing.assert_allclose(rstd, rr, rtol=1e-4)
    # the bound float32 statistics guarantee (norm_reference.large_mean_atol), about 7e-4 to 1e-3 here
    assert np.all(np.abs(y - yr) <= ref.large_mean_atol(yr, rr, mr, x.shape[1]))


def test_sums_over_many_rows_are_accurate(rng):
    """Statistics and weight gradients summed over the rows (not x's last axis, which NumPy adds
    one row after another in float32): a float32 batch of 65536 rows near 1e4 had its batch mean
    off by 2.9 and its running variance 9.2 for 1."""
    x = (1e4 + rng.standard_normal((65536, 4))).astype(np.float32)
    rm, rv = np.zeros(4, np.float32), np.ones(4, np.float32)
    y, mean, invstd = cudakit.batch_norm_with_stats(x, training=True, running_mean=rm, running_var=rv, momentum=1.0)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mean, x64.mean(0), rtol=0, atol=1e-3)
    np.testing.assert_allclose(rv, x64.var(0, ddof=1), rtol=1e-3)
    np.testing.assert_allclose(y, (x64 - x64.mean(0)) / np.sqrt(x64.var(0) + 1e-5), atol=2e-3)
    g = (1.0 + rng.standard_normal((262144, 8))).astype(np.float32)
    xs = rng.standard_normal((262144, 8)).astype(np.float32)
    m, r = xs.mean(1, dtype=np.float64).astype(np.float32), np.ones(262144, np.float32)
    _, dw, db = cudakit.layernorm_backward(g, xs, np.ones(8, np.float32), m, r)
    want = g.astype(np.float64).sum(0)
    np.testing.assert_allclose(db, want, rtol=1e-6)
    _, dgamma, dbeta = cudakit.batch_norm_backward(g, xs, np.ones(8, np.float32), np.zeros(8, np.float32),
                                                   np.ones(8, np.float32))
    np.testing.assert_allclose(dbeta, want, rtol=1e-6)
    np.testing.assert_allclose(dgamma, (g.astype(np.float64) * xs).sum(0), rtol=1e-5, atol=1e-2)


def test_nan_propagates():
    x = np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 4.0]], np.float32)
    y, _, _ = cn.layernorm_forward(x, None, None, 1e-5)
    assert np.isnan(y[0]).all() and np.isfinite(y[1]).all()


def _numeric_grad(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        g[i] = (f(xp) - f(xm)) / (2 * h)
    return g


def test_references_match_finite_differences(rng):
    """The analytic float64 gradients that every other test trusts."""
    x = rng.standard_normal((3, 7))
    w, b = rng.standard_normal(7), rng.standard_normal(7)
    dy = rng.standard_normal((3, 7))
    eps = 1e-3
    dx, dw, db = ref.layernorm_grad(dy, x, w, eps)
    np.testing.assert_allclose(dx, _numeric_grad(lambda z: (dy * ref.layernorm(z, w, b, eps)[0]).sum(), x), atol=1e-7)
    np.testing.assert_allclose(dw, _numeric_grad(lambda z: (dy * ref.layernorm(x, z, b, eps)[0]).sum(), w), atol=1e-7)
    np.testing.assert_allclose(db, _numeric_grad(lambda z: (dy * ref.layernorm(x, w, z, eps)[0]).sum(), b), atol=1e-7)
    dx, dw = ref.rmsnorm_grad(dy, x, w, eps)
    np.testing.assert_allclose(dx, _numeric_grad(lambda z: (dy * ref.rmsnorm(z, w, eps)[0]).sum(), x), atol=1e-7)
    np.testing.assert_allclose(dw, _numeric_grad(lambda z: (dy * ref.rmsnorm(x, z, eps)[0]).sum(), w), atol=1e-7)
    x4 = rng.standard_normal((3, 2, 2, 3))
    dy4 = rng.standard_normal((3, 2, 2, 3))
    g2, b2 = rng.standard_normal(2), rng.standard_normal(2)
    dx, dg, dbeta = ref.batch_norm_grad(dy4, x4, g2, eps)
    f = lambda z: (dy4 * ref.batch_norm_train(z, g2, b2, eps)[0]).sum()
    np.testing.assert_allclose(dx, _numeric_grad(f, x4), atol=1e-7)
    np.testing.assert_allclose(dg, _numeric_grad(lambda z: (dy4 * ref.batch_norm_train(x4, z, b2, eps)[0]).sum(), g2), atol=1e-7)
    np.testing.assert_allclose(dbeta, _numeric_grad(lambda z: (dy4 * ref.batch_norm_train(x4, g2, z, eps)[0]).sum(), b2), atol=1e-7)


BN_SHAPES = [(64, 3), (1001, 17), (4, 5, 7, 9), (2, 3, 1, 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", BN_SHAPES)
@pytest.mark.parametrize("affine", [False, True])
def test_batch_norm_training(shape, dtype, affine, rng):
    c = shape[1]
    x = _data(rng, shape, dtype, loc=2.0, scale=3.0)
    dy = _data(rng, shape, dtype)
    gamma = _data(rng, c, dtype, loc=1.0, scale=0.3) if affine else None
    beta = _data(rng, c, dtype) if affine else None
    rm0, rv0 = _data(rng, c, dtype), ref.cast(np.abs(_data(rng, c, dtype)) + 0.5, dtype)
    rm, rv = rm0.copy(), rv0.copy()
    y, sm, si = cn.batch_norm_forward(x, gamma, beta, rm, rv, True, 0.1, 1e-5)
    yr, mr, vr, vu = ref.batch_norm_train(x, gamma, beta, 1e-5)
    ref.assert_close(y, yr, dtype, "y", scale=ref.batch_norm_y_scale(yr, x, gamma, mr, 1 / np.sqrt(vr + 1e-5)))
    sd = _stat_dtype(dtype)
    assert sm.dtype == np.dtype(sd) and si.dtype == np.dtype(sd)
    ref.assert_close(sm, mr, sd, "save_mean")
    ref.assert_close(si, 1 / np.sqrt(vr + 1e-5), sd, "save_invstd")
    ref.assert_close(rm, 0.9 * ref.f64(rm0) + 0.1 * mr, dtype, "running_mean")
    ref.assert_close(rv, 0.9 * ref.f64(rv0) + 0.1 * vu, dtype, "running_var")
    dx, dg, db = cn.batch_norm_backward(dy, x, gamma, sm, si)
    dxr, dgr, dbr = ref.batch_norm_grad(dy, x, gamma, 1e-5)
    gs = ref.grad_scale(dy, None if gamma is None else gamma, 1 / np.sqrt(vr + 1e-5), channels=True)
    ref.assert_close(dx, dxr, dtype, "dx", scale=gs, factor=2)
    if affine:
        ref.assert_close(dg, dgr, dtype, "dgamma", factor=4)
    else:
        assert dg is None
    ref.assert_close(db, dbr, dtype, "dbeta", factor=4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_batch_norm_inference(dtype, rng):
    x = _data(rng, (6, 4, 5, 5), dtype)
    gamma, beta = _data(rng, 4, dtype), _data(rng, 4, dtype)
    rm, rv = _data(rng, 4, dtype), ref.cast(np.abs(_data(rng, 4, dtype)) + 0.5, dtype)
    rm0, rv0 = rm.copy(), rv.copy()
    y, _sm, _si = cn.batch_norm_forward(x, gamma, beta, rm, rv, False, 0.1, 1e-5)
    shp = (1, 4, 1, 1)
    want = (ref.f64(x) - ref.f64(rm).reshape(shp)) / np.sqrt(ref.f64(rv).reshape(shp) + 1e-5)
    want = want * ref.f64(gamma).reshape(shp) + ref.f64(beta).reshape(shp)
    ref.assert_close(y, want, dtype, "y")
    assert (rm == rm0).all() and (rv == rv0).all()


def test_inputs_that_gave_silent_wrong_results_are_refused():
    """Found by a probing helper (2026-11-28), each a silent wrong result before: batch_norm's
    running statistics sharing memory (the variance update read the mean just written), given as
    lists in training (the update went to a temporary copy), a momentum outside [0, 1] (a negative
    running variance); an eps float32 rounds to 0 for 16- and 32-bit data (NaN for a constant
    row); uint64 targets past 2^63 (cast to a negative index, dropped as ignore_index)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 2))
    buf = np.r_[0.0, 0, 0, 1, 1, 1, 1]
    for rm, rv in ((buf[:3], buf[:3]), (buf[0:3], buf[1:4])):
        before = buf.copy()
        with pytest.raises(cudakit.ArgumentError, match="running_mean and running_var overlap in memory"):
            cudakit.batch_norm(x, None, None, rm, rv, True)
        np.testing.assert_array_equal(buf, before)
    pair = np.zeros((3, 2))   # interleaved strided views share no element: taken, both updated
    pair[:, 1] = 1
    cudakit.batch_norm(x, None, None, pair[:, 0], pair[:, 1], True)
    np.testing.assert_allclose(pair[:, 0], 0.1 * x.mean(axis=(0, 2)))
    np.testing.assert_allclose(pair[:, 1], 0.9 + 0.1 * x.var(axis=(0, 2), ddof=1))
    with pytest.raises(cudakit.ArgumentTypeError, match="running_mean is updated in place"):
        cudakit.batch_norm(x, None, None, [0.0, 0, 0], np.ones(3), True)
    assert cudakit.batch_norm(x, None, None, [0.0, 0, 0], [1.0, 1, 1], False).shape == x.shape   # (read only)
    for m in (-0.5, 1.5, 2.0):
        with pytest.raises(cudakit.ArgumentError, match=re.escape(f"momentum must be in [0, 1] (got {m})")):
            cudakit.batch_norm(x, None, None, np.zeros(3), np.ones(3), True, momentum=m)
    for dt in ("float32", "float16"):
        with pytest.raises(cudakit.ArgumentError, match="eps must be at least 1.4e-45"):
            cudakit.layernorm(np.full((1, 4), 3, dt), eps=1e-50)
        with pytest.raises(cudakit.ArgumentError, match="eps must be at least 1.4e-45"):
            cudakit.rmsnorm(np.full((1, 4), 3, dt), eps=1e-50)
    np.testing.assert_array_equal(cudakit.layernorm(np.full((1, 4), 3.0), eps=1e-50), np.zeros((1, 4)))   # float64
    logits = rng.standard_normal((3, 4)).astype(np.float32)
    with pytest.raises(cudakit.TargetIndexError):
        cudakit.cross_entropy(logits, np.array([2 ** 64 - 100, 1, 2], np.uint64))
    with pytest.raises(cudakit.ArgumentError, match="grad_loss = .* is beyond the float range"):
        cudakit.cross_entropy_backward(10 ** 400, logits, np.array([0, 1, 2]))
    for bad in ("no", None, 2):
        with pytest.raises(cudakit.ArgumentTypeError, match="validate must be a bool"):
            cudakit.cross_entropy(logits, np.array([0, 1, 2]), validate=bad)
    for call in (lambda: cudakit.softmax(None), lambda: cudakit.dropout(None, 0.5),
                 lambda: cudakit.cross_entropy(None, np.array([0]))):
        with pytest.raises(cudakit.ArgumentTypeError, match="is required"):
            call()
