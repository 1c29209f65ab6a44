"""Checks of matmul, linear and fused_linear_gelu (forward and backward) against float64 references,
shared by the CPU tests and the GPU tests: each takes `dev` (host array -> the backend's array)
and `host` (the backend's array -> NumPy)."""
import math

import numpy as np
import pytest
from helpers import SUBNORMAL_HALF_SPACING as _TINY
from helpers import UNIT_ROUNDOFF as _U
from helpers import data, f64, np_dtype

import cudakit

MATMUL_SHAPES = [((1, 1), (1, 1)), ((5, 7), (7, 3)), ((1823, 13), (13, 781)), ((7,), (7,)), ((7,), (7, 4)),
                 ((5, 7), (7,)), ((2, 3, 5, 7), (3, 7, 4)), ((2, 1, 5, 7), (1, 3, 7, 4)), ((4, 5, 7), (7, 6)),
                 ((5, 7), (4, 7, 6)), ((0, 5, 7), (7, 3)), ((5, 0), (0, 3)), ((0, 7), (7, 3)), ((3, 97), (97, 0))]




def assert_close(got, want, bound, dtype, what=""):
    """|got - want| <= the output's rounding of want plus `bound` (the accumulation error), per element."""
    got = f64(got)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    tol = _U[dtype] * np.abs(want) + bound + _TINY[dtype]
    err = np.abs(got - want)
    assert not np.isnan(got).any(), f"{what}: NaN in the result"
    bad = err > tol
    assert not bad.any(), f"{what}: {bad.sum()} elements off, worst {np.max(err - tol):.3g} over the bound"


def _acc_bound(a_abs, b_abs, k, dtype):
    """Rounding of the accumulation: k * u_acc * (|a| @ |b|) with float32 accumulation for 16-bit
    operands and the operands' own precision otherwise."""
    u = 2.0**-53 if dtype == "float64" else 2.0**-24
    return 2 * max(k, 1) * u * (a_abs @ b_abs)


def check_matmul(dev, host, rng, sa, sb, dtype, layout="c"):
    a, b = data(rng, sa, dtype), data(rng, sb, dtype)
    if layout == "transposed" and len(sa) >= 2 and len(sb) >= 2:  # views whose transpose is contiguous
        da = dev(np.ascontiguousarray(a.swapaxes(-1, -2))).swapaxes(-1, -2)
        db = dev(np.ascontiguousarray(b.swapaxes(-1, -2))).swapaxes(-1, -2)
    elif layout == "strided" and len(sa) >= 2 and len(sb) >= 2:  # neither it nor its transpose contiguous
        da = dev(np.repeat(a, 2, axis=-1))[..., ::2]
        db = dev(np.repeat(b, 2, axis=-1))[..., ::2]
    else:
        da, db = dev(a), dev(b)
    got = host(cudakit.matmul(da, db))
    want = f64(a) @ f64(b)
    k = sa[-1]
    assert_close(got, want, _acc_bound(np.abs(f64(a)), np.abs(f64(b)), k, dtype), dtype, f"{sa}@{sb}")
    assert got.dtype == np_dtype(dtype)


def check_matmul_backward(dev, host, rng, sa, sb, dtype):
    a, b = data(rng, sa, dtype), data(rng, sb, dtype)
    want_y = f64(a) @ f64(b)
    g = data(rng, want_y.shape, dtype)
    ga, gb = cudakit.matmul_backward(dev(g), dev(a), dev(b))
    ga, gb = host(ga), host(gb)
    # float64 reference: promote 1-D operands, broadcast, then sum over what was broadcast
    a2 = f64(a).reshape(1, -1) if a.ndim == 1 else f64(a)
    b2 = f64(b).reshape(-1, 1) if b.ndim == 1 else f64(b)
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    g2 = f64(g).reshape(batch + (a2.shape[-2], b2.shape[-1]))
    ab, bb = np.broadcast_to(a2, batch + a2.shape[-2:]), np.broadcast_to(b2, batch + b2.shape[-2:])
    full_ga, full_gb = g2 @ bb.swapaxes(-1, -2), ab.swapaxes(-1, -2) @ g2
    abs_ga = np.abs(g2) @ np.abs(bb).swapaxes(-1, -2)
    abs_gb = np.abs(ab).swapaxes(-1, -2) @ np.abs(g2)

    def reduce(full, like):
        pad = (1,) * (len(batch) + 2 - like.ndim) + like.shape
        axes = tuple(i for i in range(len(batch)) if pad[i] == 1 and batch[i] != 1)
        return full.sum(axis=axes, keepdims=True).reshape(like.shape)

    n_sum = max(1, math.prod(batch))
    k_a, k_b = b2.shape[-1] * n_sum, a2.shape[-2] * n_sum
    assert_close(ga, reduce(full_ga, a), _acc_bound_sum(reduce(abs_ga, a), k_a, dtype), dtype, "grad_a")
    assert_close(gb, reduce(full_gb, b), _acc_bound_sum(reduce(abs_gb, b), k_b, dtype), dtype, "grad_b")
    assert ga.dtype == gb.dtype == np_dtype(dtype)


def _acc_bound_sum(abs_sum, k, dtype):
    u = 2.0**-53 if dtype == "float64" else 2.0**-24
    return 2 * max(k, 1) * u * abs_sum


def _gelu_tanh(h):
    c = math.sqrt(2 / math.pi)
    return 0.5 * h * (1 + np.tanh(c * (h + 0.044715 * h**3)))


def _gelu_tanh_grad(h):
    c = math.sqrt(2 / math.pi)
    t = np.tanh(c * (h + 0.044715 * h**3))
    return 0.5 * (1 + t) + 0.5 * h * (1 - t * t) * c * (1 + 3 * 0.044715 * h * h)


def check_linear(dev, host, rng, lead, fin, fout, dtype, with_bias=True, weight_layout="c", strided=False):
    x, w = data(rng, lead + (fin,), dtype), data(rng, (fout, fin), dtype, 1 / math.sqrt(fin))
    b = data(rng, (fout,), dtype) if with_bias else None
    dw = dev(w) if weight_layout == "c" else dev(np.ascontiguousarray(w.T)).T
    if strided:  # a strided bias, and an x that starts one row into a bigger array (pointer offset)
        dx = dev(np.concatenate([x[..., :1, :], x], axis=-2))[..., 1:, :]
        db = None if b is None else dev(np.repeat(b, 2))[::2]
    else:
        dx, db = dev(x), None if b is None else dev(b)
    y = host(cudakit.linear(dx, dw, db))
    want = f64(x) @ f64(w).T + (0 if b is None else f64(b))
    bound = _acc_bound(np.abs(f64(x)), np.abs(f64(w)).T, fin, dtype) + (0 if b is None else 4 * _U["float32"] * np.abs(f64(b)))
    assert_close(y, want, bound, dtype, "linear")
    assert y.dtype == np_dtype(dtype) and y.shape == lead + (fout,)
    g = data(rng, lead + (fout,), dtype)
    gx, gw, gb = (host(t) if t is not None else None for t in
                  cudakit.linear_backward(dev(g), dev(x), dw, with_bias))
    g2, x2 = f64(g).reshape(-1, fout), f64(x).reshape(-1, fin)
    rows = g2.shape[0]
    assert_close(gx, (g2 @ f64(w)).reshape(x.shape), _acc_bound(np.abs(g2), np.abs(f64(w)), fout, dtype).reshape(x.shape),
                 dtype, "grad_x")
    assert_close(gw, g2.T @ x2, _acc_bound(np.abs(g2).T, np.abs(x2), rows, dtype), dtype, "grad_weight")
    if with_bias:
        assert_close(gb, g2.sum(0), _acc_bound_sum(np.abs(g2).sum(0), rows, dtype), dtype, "grad_bias")
    else:
        assert gb is None


def check_fused_linear_gelu(dev, host, rng, lead, fin, fout, dtype):
    x, w = data(rng, lead + (fin,), dtype), data(rng, (fout, fin), dtype, 1 / math.sqrt(fin))
    b = data(rng, (fout,), dtype)
    y, pre = cudakit.fused_linear_gelu_with_preact(dev(x), dev(w), dev(b))
    y_only = host(cudakit.fused_linear_gelu(dev(x), dev(w), dev(b)))
    y, pre = host(y), host(pre)
    h = f64(x) @ f64(w).T + f64(b)
    h_bound = _acc_bound(np.abs(f64(x)), np.abs(f64(w)).T, fin, dtype) + 4 * _U["float32"] * np.abs(f64(b))
    assert_close(pre, h, h_bound, dtype, "pre-activation")
    # y is gelu of the pre-activation, within a few ulps of gelu's own evaluation (its 0.5 h (1 + t)
    # cancels near t = -1: the bound scales with |h| too). 16-bit outputs may come from cuBLASLt's
    # GELU epilogue, up to 5.3e-6 off the tanh form (kernels/cublaslt.py)
    want = _gelu_tanh(f64(pre))
    bound = 8 * _U[dtype] * (np.abs(want) + np.abs(f64(pre))) + (2e-5 if _U[dtype] > 2.0**-20 else 0.0)
    assert_close(y, want, bound, dtype, "y")
    assert_close(y_only, want, bound, dtype, "y of fused_linear_gelu")
    g = data(rng, y.shape, dtype)
    gx, gw, gb = (host(t) for t in cudakit.fused_linear_gelu_backward(dev(g), dev(x), dev(w), dev(pre)))
    gp = f64(g) * _gelu_tanh_grad(f64(pre))
    gp = gp.astype(np_dtype(dtype)).astype(np.float64)  # the backend rounds dL/dpre to x's dtype once
    g2, x2 = gp.reshape(-1, fout), f64(x).reshape(-1, fin)
    # dL/dpre within a few ulps of the size of gelu's terms (they cancel for negative pre)
    h = f64(pre)
    slack = 16 * _U[dtype] * (np.abs(f64(g)) * (1 + np.abs(h) * (1 + 0.14 * h * h))).reshape(-1, fout)
    assert_close(gx, (g2 @ f64(w)).reshape(x.shape),
                 (_acc_bound(np.abs(g2) + slack, np.abs(f64(w)), fout, dtype) + (slack @ np.abs(f64(w)))).reshape(x.shape),
                 dtype, "grad_x")
    assert_close(gw, g2.T @ x2, _acc_bound((np.abs(g2) + slack).T, np.abs(x2), g2.shape[0], dtype) + slack.T @ np.abs(x2),
                 dtype, "grad_weight")
    assert_close(gb, g2.sum(0), _acc_bound_sum(np.abs(g2).sum(0), g2.shape[0], dtype) + slack.sum(0), dtype, "grad_bias")


def check_linear_residual(dev, host, rng, lead, fin, fout, dtype, with_bias=True):
    """linear(x, w, b, residual=r) = x @ w^T + b + r, rounded once (the GEMM's C operand on the GPU
    where the epilogue applies); a residual of another shape raises naming it."""
    x, w = data(rng, lead + (fin,), dtype), data(rng, (fout, fin), dtype, 1 / math.sqrt(fin))
    b = data(rng, (fout,), dtype) if with_bias else None
    r = data(rng, lead + (fout,), dtype, 4.0)
    y = host(cudakit.linear(dev(x), dev(w), None if b is None else dev(b), residual=dev(r)))
    want = f64(x) @ f64(w).T + (0 if b is None else f64(b)) + f64(r)
    bound = (_acc_bound(np.abs(f64(x)), np.abs(f64(w)).T, fin, dtype)
             + 4 * _U["float32" if dtype != "float64" else dtype] * (np.abs(f64(r)) + (0 if b is None else np.abs(f64(b)))))
    assert_close(y, want, bound, dtype, "linear + residual")
    assert y.dtype == np_dtype(dtype) and y.shape == lead + (fout,)
    with pytest.raises(cudakit.ShapeError, match="residual"):
        cudakit.linear(dev(x), dev(w), None if b is None else dev(b), residual=dev(r[..., :1]))


def check_linear_backward_gelu(dev, host, rng, lead, fin, fout, dtype):
    """linear_backward(..., gelu_pre=pre) for x = gelu(pre): the first result is (g @ w) * gelu'(pre)
    (the epilogue rounds it once; elsewhere grad_x is rounded, then the product), the weight and
    bias gradients bitwise those of the plain call."""
    pre = data(rng, lead + (fin,), dtype)
    x = _gelu_tanh(f64(pre)).astype(np_dtype(dtype))
    w, g = data(rng, (fout, fin), dtype, 1 / math.sqrt(fin)), data(rng, lead + (fout,), dtype)
    gp, gw, gb = (host(t) for t in cudakit.linear_backward(dev(g), dev(x), dev(w), True, gelu_pre=dev(pre)))
    plain = [host(t) for t in cudakit.linear_backward(dev(g), dev(x), dev(w), True)]
    g2, h = f64(g).reshape(-1, fout), f64(pre).reshape(-1, fin)
    gx = g2 @ f64(w)
    d = _gelu_tanh_grad(h)
    # the GEMM's accumulation error times |gelu'|, grad_x's own rounding where it is rounded before the
    # product, and gelu' within a few ulps of the size of its terms (they cancel for negative pre);
    # cuBLASLt's GELU is up to 5.3e-6 off the tanh form (kernels/cublaslt.py)
    slack = (_U[dtype] + 16 * _U[dtype] * (1 + np.abs(h) * (1 + 0.14 * h * h))
             + (2e-5 if _U[dtype] > 2.0**-20 else 0.0)) * np.abs(gx)
    bound = _acc_bound(np.abs(g2), np.abs(f64(w)), fout, dtype) * np.maximum(np.abs(d), 1) + slack
    assert_close(gp, (gx * d).reshape(pre.shape), bound.reshape(pre.shape), dtype, "grad of gelu_pre")
    assert gp.dtype == np_dtype(dtype) and gp.shape == pre.shape
    for got, want in zip((gw, gb), plain[1:]):
        np.testing.assert_array_equal(f64(got), f64(want))


def check_errors(dev, dtype="float32"):
    rng = np.random.default_rng(0)
    a, b = dev(data(rng, (3, 4), dtype)), dev(data(rng, (5, 2), dtype))
    with pytest.raises(cudakit.ShapeError, match=r"a's last dim \(4\) must equal b's second-to-last dim \(5\)"):
        cudakit.matmul(a, b)
    with pytest.raises(cudakit.ShapeError, match="0-d"):
        cudakit.matmul(dev(np.float32(1.0).reshape(())), a)
    with pytest.raises(cudakit.ShapeError, match="batch dims do not broadcast"):
        cudakit.matmul(dev(data(rng, (2, 3, 4), dtype)), dev(data(rng, (3, 4, 2), dtype)))
    with pytest.raises(cudakit.DTypeError, match="dtype"):
        cudakit.matmul(a, dev(data(rng, (4, 2), "float64")))
    good = cudakit.matmul(a, dev(data(rng, (4, 2), dtype)))
    with pytest.raises(cudakit.ShapeError, match=r"out must have shape \(3, 2\)"):
        cudakit.matmul(a, dev(data(rng, (4, 2), dtype)), out=dev(data(rng, (2, 3), dtype)))
    with pytest.raises(cudakit.DTypeError, match="out must have dtype"):
        cudakit.matmul(a, dev(data(rng, (4, 2), dtype)), out=dev(data(rng, (3, 2), "float64")))
    assert good.shape == (3, 2)
    with pytest.raises(cudakit.ShapeError, match=r"x's last dim must be in_features = 2"):
        cudakit.linear(a, b)
    with pytest.raises(cudakit.ShapeError, match="weight must be 2-D"):
        cudakit.linear(a, dev(data(rng, (4,), dtype)))
    with pytest.raises(cudakit.ShapeError, match=r"bias must have shape \(5,\)"):
        cudakit.linear(dev(data(rng, (3, 2), dtype)), b, dev(data(rng, (4,), dtype)))
    with pytest.raises(cudakit.ShapeError, match=r"grad_out must have shape \(3, 5\)"):
        cudakit.linear_backward(dev(data(rng, (3, 4), dtype)), dev(data(rng, (3, 2), dtype)), b)
    with pytest.raises(cudakit.ShapeError, match="grad_out must have the product's shape"):
        cudakit.matmul_backward(dev(data(rng, (3, 3), dtype)), a, dev(data(rng, (4, 2), dtype)))
    with pytest.raises(ValueError, match="approximate"):
        cudakit.fused_linear_gelu(dev(data(rng, (3, 2), dtype)), b, approximate="fast")


def check_nan_inf(dev, host, dtype):
    rng = np.random.default_rng(1)
    a, b = data(rng, (4, 6), dtype), data(rng, (6, 3), dtype)
    a[1, 2] = np.nan
    a[2, 0] = np.inf
    b[0, :] = 0.0     # inf * 0 = NaN in row 2, as NumPy gives
    got = f64(host(cudakit.matmul(dev(a), dev(b))))
    want = f64(a) @ f64(b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[1]).all() and np.isnan(got[2]).all() and np.isfinite(got[[0, 3]]).all()
