"""Normalization ops of the CPU backend, in NumPy: layernorm, rmsnorm, batch_norm (forward and
backward), with the same signatures and semantics as cudakit.kernels.normalization.

16-bit inputs (float16, bfloat16) compute in float32 and round once to the input dtype; float32
computes in float32 and float64 in float64. Statistics (mean, rstd, save_mean, save_invstd) are
returned in the accumulation dtype: float32, or float64 for float64 input. Inputs are validated by
the caller (Backend); arrays are NumPy arrays of one dtype.
"""
from __future__ import annotations

import numpy as np


def _acc(dtype) -> np.dtype:
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def _cross_rows(x, axis, acc):
    """x summed over `axis`, axes that are not x's last (the batch's rows), in acc: NumPy adds
    those one row after another, not pairwise, so float32 sums over many rows are taken in float64
    (a float32 running sum of 65536 rows near 1e4 was off by 3 in the mean)."""
    return np.sum(x, axis=axis, dtype=np.float64).astype(acc)


def _up(a, acc):
    return None if a is None else np.asarray(a).astype(acc, copy=False)


def _write(result, dtype, out):
    if out is None:
        return result.astype(dtype)
    out[...] = result.astype(dtype)
    return out


def _pow2_scale(amax, acc):
    """2^-floor(log2 amax): amax * it is in [1, 2), and multiplying by it is exact; 1 where amax
    is 0, inf or NaN (nothing to rescale; an inf or NaN row stays NaN)."""
    _, e = np.frexp(amax)
    ok = np.isfinite(amax) & (amax > 0)
    return np.where(ok, np.ldexp(np.ones_like(amax), np.where(ok, 1 - e, 0)), 1).astype(acc)


def _normalized(xa, acc, eps: float, centre: bool):
    """(xhat, mean, rstd) of each row of xa (rows, cols >= 1) in `acc`: xhat = (x - mean) * rstd,
    rstd = 1 / sqrt(mean((x - mean)^2) + eps); mean None and taken as 0 when not centre (rmsnorm).
    Rows whose sums overflow (|x| ~ 1e19 and up in float32: the squares pass FLT_MAX) are
    recounted over x * s, s = 2^-ilogb(max |x|) (exact), and eps * s^2: scale before squaring."""
    mean = xa.mean(axis=1, dtype=acc) if centre else None
    xc = xa - mean[:, None] if centre else xa
    var = np.mean(xc * xc, axis=1, dtype=acc)
    rstd = (acc.type(1) / np.sqrt(var + acc.type(eps))).astype(acc)
    xhat = xc * rstd[:, None]
    bad = ~np.isfinite(var) if not centre else ~(np.isfinite(var) & np.isfinite(mean))
    if bad.any():
        xb = xa[bad]
        sc = _pow2_scale(np.abs(xb).max(axis=1), acc)
        xs = xb * sc[:, None]
        ms = xs.mean(axis=1, dtype=acc) if centre else None
        xcs = xs - ms[:, None] if centre else xs
        rs = (acc.type(1) / np.sqrt(np.mean(xcs * xcs, axis=1, dtype=acc) + acc.type(eps) * sc * sc)).astype(acc)
        xhat[bad] = xcs * rs[:, None]
        rstd[bad] = rs * sc
        if centre:
            mean[bad] = ms / sc
    return xhat, mean, rstd


def layernorm_forward(x2d, weight, bias, eps: float, out=None):
    """Layer normalisation of each row of x2d (rows, cols).

    weight, bias: (cols,) or None. Returns (y, mean, rstd): y of x2d's dtype (into `out` when
    given); mean and rstd (rows,) in the accumulation dtype; rstd = 1 / sqrt(biased var + eps).
    Rows whose squares overflow are scaled by a power of two first (see _normalized).
    """
    acc = _acc(x2d.dtype)
    with np.errstate(all="ignore"):
        xa = x2d.astype(acc, copy=False)
        if not x2d.shape[1]:
            z = np.zeros(x2d.shape[0], acc)
            return _write(xa, x2d.dtype, out), z, (acc.type(1) / np.sqrt(z + acc.type(eps))).astype(acc)
        y, mean, rstd = _normalized(xa, acc, eps, True)
        if weight is not None:
            y *= _up(weight, acc)
        if bias is not None:
            y += _up(bias, acc)
    return _write(y, x2d.dtype, out), mean.astype(acc), rstd


def layernorm_backward(dy, x, weight, mean, rstd, out=None, residual=None):
    """Gradients of layernorm_forward: (dx, dweight, dbias); dweight None when weight is None.

    dy, x: (rows, cols); mean, rstd: (rows,) from the forward; residual: like x or None, added to
    dx before its one rounding. dweight and dbias are (cols,) of x's dtype, summed over rows in the
    accumulation dtype.
    """
    acc = _acc(x.dtype)
    cols = x.shape[1]
    with np.errstate(all="ignore"):
        xh = (x.astype(acc, copy=False) - _up(mean, acc)[:, None]) * _up(rstd, acc)[:, None]
        d = dy.astype(acc, copy=False)
        g = d * _up(weight, acc) if weight is not None else d
        mg = g.mean(axis=1, dtype=acc)[:, None] if cols else 0
        mgx = (g * xh).mean(axis=1, dtype=acc)[:, None] if cols else 0
        dx = _plus(_up(rstd, acc)[:, None] * (g - mg - xh * mgx), residual, acc)
        dw = _cross_rows(d * xh, 0, acc).astype(x.dtype) if weight is not None else None
        db = _cross_rows(d, 0, acc).astype(x.dtype)
    return _write(dx, x.dtype, out), dw, db


def _plus(dx, residual, acc):
    """dx + residual in the accumulation dtype (dx unchanged without one)."""
    return dx if residual is None else dx + residual.astype(acc, copy=False)


def rmsnorm_forward(x2d, weight, eps: float, out=None):
    """RMS normalisation of each row: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps).

    Returns (y, rstd): y of x2d's dtype, rstd (rows,) in the accumulation dtype. Rows whose
    squares overflow are scaled by a power of two first (see _normalized).
    """
    acc = _acc(x2d.dtype)
    with np.errstate(all="ignore"):
        xa = x2d.astype(acc, copy=False)
        if not x2d.shape[1]:
            z = np.zeros(x2d.shape[0], acc)
            return _write(xa, x2d.dtype, out), (acc.type(1) / np.sqrt(z + acc.type(eps))).astype(acc)
        y, _, rstd = _normalized(xa, acc, eps, False)
        if weight is not None:
            y *= _up(weight, acc)
    return _write(y, x2d.dtype, out), rstd


def rmsnorm_backward(dy, x, weight, rstd, out=None, residual=None):
    """Gradients of rmsnorm_forward: (dx, dweight); dweight (cols,) of x's dtype, None when
    weight is None; residual as layernorm_backward's."""
    acc = _acc(x.dtype)
    with np.errstate(all="ignore"):
        r = _up(rstd, acc)[:, None]
        xh = x.astype(acc, copy=False) * r
        d = dy.astype(acc, copy=False)
        g = d * _up(weight, acc) if weight is not None else d
        mgx = (g * xh).mean(axis=1, dtype=acc)[:, None] if x.shape[1] else 0
        dx = _plus(r * (g - xh * mgx), residual, acc)
        dw = _cross_rows(d * xh, 0, acc).astype(x.dtype) if weight is not None else None
    return _write(dx, x.dtype, out), dw


def _bn_view(x):
    """x (N, C) or (N, C, *spatial) as (N, C, S) without copying (x is contiguous)."""
    return x.reshape(x.shape[0], x.shape[1], -1)


def batch_norm_forward(x, gamma, beta, running_mean, running_var, training: bool, momentum: float,
                       eps: float, out=None, residual=None, relu: bool = False):
    """Batch normalisation over every axis but 1 of x (N, C) or (N, C, *spatial).

    gamma, beta, running_mean, running_var: (C,) or None. Training uses the batch statistics and
    updates running_mean / running_var in place (running_var with the unbiased variance);
    inference uses the running statistics. residual (like x) is added, then relu applied where
    relu, before the one rounding to x's dtype. Returns (y, save_mean, save_invstd), the last two
    (C,) in the accumulation dtype.
    """
    acc = _acc(x.dtype)
    x3 = _bn_view(x)
    count = x3.shape[0] * x3.shape[2]
    with np.errstate(all="ignore"):
        xa = x3.astype(acc, copy=False)
        if training:
            mean = (_cross_rows(xa, (0, 2), np.float64) / count).astype(acc)
            xc = xa - mean[None, :, None]
            m2 = _cross_rows(xc * xc, (0, 2), acc)
            var = m2 / acc.type(count)
            if running_mean is not None:
                rm = (1 - momentum) * _up(running_mean, acc) + acc.type(momentum) * mean
                running_mean[...] = rm.astype(running_mean.dtype)
            if running_var is not None:
                unbiased = m2 / acc.type(count - 1)
                rv = (1 - momentum) * _up(running_var, acc) + acc.type(momentum) * unbiased
                running_var[...] = rv.astype(running_var.dtype)
        else:
            mean = _up(running_mean, acc)
            var = _up(running_var, acc)
            xc = xa - mean[None, :, None]
        invstd = (acc.type(1) / np.sqrt(var + acc.type(eps))).astype(acc)
        y = _bn_affine(xc, invstd, gamma, beta, acc)
        if residual is not None:
            y += _bn_view(residual).astype(acc, copy=False)
        if relu:
            y = np.maximum(y, acc.type(0))   # (NaN kept, as relu)
    res = _write(y.reshape(x.shape), x.dtype, out)
    return res, mean.astype(acc), invstd


def _bn_affine(xc, invstd, gamma, beta, acc):
    """The batch norm before rounding, from x - mean (N, C, S): xc * (invstd * gamma) + beta; the
    forward's y, and the relu mask its backward recomputes (the same operations, so the same bits)."""
    scale = invstd * _up(gamma, acc) if gamma is not None else invstd
    y = xc * scale[None, :, None]
    if beta is not None:
        y += _up(beta, acc)[None, :, None]
    return y


def batch_norm_backward(dy, x, gamma, save_mean, save_invstd, out=None, beta=None, relu: bool = False):
    """Gradients of batch_norm_forward in training mode: (dx, dgamma, dbeta); dgamma None when
    gamma is None. dy, x: (N, C, ...); save_mean, save_invstd: (C,) from the forward. relu: of
    relu(batch_norm(x)), dy kept where the forward's pre-activation (recomputed from x, gamma and
    beta) was above 0."""
    acc = _acc(x.dtype)
    x3, d3 = _bn_view(x), _bn_view(dy)
    count = x3.shape[0] * x3.shape[2]
    with np.errstate(all="ignore"):
        inv = _up(save_invstd, acc)[None, :, None]
        xc = x3.astype(acc, copy=False) - _up(save_mean, acc)[None, :, None]
        d = d3.astype(acc, copy=False)
        if relu:
            d = np.where(_bn_affine(xc, _up(save_invstd, acc), gamma, beta, acc) > 0, d, acc.type(0))
        sg = _cross_rows(d, (0, 2), acc)
        sgx = _cross_rows(d * xc, (0, 2), acc)
        g = _up(gamma, acc) if gamma is not None else np.ones(x3.shape[1], acc)
        a = (g * _up(save_invstd, acc))[None, :, None]
        n = acc.type(max(count, 1))
        dx = a * (d - (sg / n)[None, :, None] - xc * inv * inv * (sgx / n)[None, :, None])
        dgamma = (sgx * _up(save_invstd, acc)).astype(x.dtype) if gamma is not None else None
        dbeta = sg.astype(x.dtype)
    return _write(dx.reshape(x.shape), x.dtype, out), dgamma, dbeta
