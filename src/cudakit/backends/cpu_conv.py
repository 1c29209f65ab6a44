"""Depthwise conv2d on the CPU backend (groups = channels = filters): one multiply-add of whole
(N, C, Ho, Wo) arrays per kernel tap, instead of one im2col GEMM per channel. 16-bit data are
accumulated in float32 and rounded once, as everywhere."""
from __future__ import annotations

import numpy as np


def depthwise(x_shape, w_shape, groups: int) -> bool:
    """One input and one output channel per group."""
    return groups > 1 and groups == x_shape[1] == w_shape[0]


def _acc(a):
    return a.astype(np.float64 if a.dtype == np.float64 else np.float32)


def _tap(geo, i: int, j: int) -> tuple:
    """The (H, W) slices of the padded input that tap (i, j) reads for every output position."""
    sh, sw, _, _, dh, dw, _, _, ho, wo = geo
    return slice(i * dh, i * dh + sh * (ho - 1) + 1, sh), slice(j * dw, j * dw + sw * (wo - 1) + 1, sw)


def _padded(x, geo):
    ph, pw = geo[2], geo[3]
    return np.pad(_acc(x), ((0, 0), (0, 0), (ph, ph), (pw, pw)))


def forward(x, w, b, geo):
    """y (N, C, Ho, Wo) = sum over taps of x at the tap times w[c, 0, tap] (+ b)."""
    xp, wa = _padded(x, geo), _acc(w)
    y = np.zeros(x.shape[:2] + geo[8:], xp.dtype)
    with np.errstate(invalid="ignore", over="ignore"):   # inf * 0 is NaN, as the GPU gives, silently
        for i in range(geo[6]):
            for j in range(geo[7]):
                y += xp[(slice(None), slice(None)) + _tap(geo, i, j)] * wa[None, :, 0, i, j, None, None]
        if b is not None:
            y += _acc(b)[None, :, None, None]
    return y.astype(x.dtype)


def input_grad(g, w, x_shape, geo):
    """dL/dx: each tap's g * w[c, 0, tap] added back where the tap read, the padding cropped."""
    n, c, h, wd = x_shape
    ph, pw = geo[2], geo[3]
    ga, wa = _acc(g), _acc(w)
    gx = np.zeros((n, c, h + 2 * ph, wd + 2 * pw), ga.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(geo[6]):
            for j in range(geo[7]):
                gx[(slice(None), slice(None)) + _tap(geo, i, j)] += ga * wa[None, :, 0, i, j, None, None]
    return gx[:, :, ph:ph + h, pw:pw + wd].astype(w.dtype)


def weight_grad(g, x, w_shape, geo, bias: bool):
    """(dL/dw (C, 1, R, S): per channel and tap, the sum of g times x at the tap; dL/db or None)."""
    xp, ga = _padded(x, geo), _acc(g)
    gw = np.empty(w_shape, ga.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(geo[6]):
            for j in range(geo[7]):
                gw[:, 0, i, j] = (ga * xp[(slice(None), slice(None)) + _tap(geo, i, j)]).sum(axis=(0, 2, 3))
    gb = ga.sum(axis=(0, 2, 3)).astype(x.dtype) if bias else None
    return gw.astype(x.dtype), gb
