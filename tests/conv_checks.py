"""Checks of conv2d, max_pool2d and avg_pool2d (forward and backward) against float64 loop
references, shared by the CPU and GPU tests (`dev`: host -> backend array, `host`: back)."""
import re

import numpy as np
import pytest
from helpers import SUBNORMAL_HALF_SPACING as _TINY
from helpers import UNIT_ROUNDOFF as _U
from helpers import data, f64, np_dtype

import cudakit

# Relative error of one float32 product in the GPU's conv kernels, by cudakit.float32_precision():
# tf32x3 rounds each operand's remainder to TF32 (2^-22 of the operand, twice) and drops the
# remainders' product (2^-22), summed on tensor cores: about 2^-20 (float32's own FMA: exact);
# tf32 rounds both operands to 10-bit mantissas. ieee_cudnn: "ieee" on cuDNN, whose FP32 plans include
# FFT and Winograd ones (as torch's strict FP32): an allowance of 2^-16 of the products' magnitudes
# for their transforms' roundings on top of the summation bound (not a guarantee: an FFT's error
# follows the whole input's magnitude; TF32 inputs would stray further).
PRODUCT_U = {"ieee": 0.0, "tf32x3": 2.0**-20, "tf32": 2.0**-9, "ieee_cudnn": 2.0**-16}


def _pad(x, ph, pw, value=0.0):
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def conv_reference(x, w, b, stride, pad, dil, groups=1):
    """float64 (y, |x| * |w| sums for the bounds) by explicit taps; groups: each group's channels
    on their own, the results stacked."""
    if groups > 1:
        c, k = x.shape[1] // groups, w.shape[0] // groups
        parts = [conv_reference(x[:, i * c:(i + 1) * c], w[i * k:(i + 1) * k],
                                None if b is None else b[i * k:(i + 1) * k], stride, pad, dil) for i in range(groups)]
        return (np.concatenate([p[0] for p in parts], 1), np.concatenate([p[1] for p in parts], 1), parts[0][2])
    x, w = f64(x), f64(w)
    n, _, h, wd = x.shape
    k, _, r, s = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, pad, dil
    xp = _pad(x, ph, pw)
    ho = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
    wo = (wd + 2 * pw - dw * (s - 1) - 1) // sw + 1
    y = np.zeros((n, k, ho, wo))
    mag = np.zeros_like(y)
    for i in range(r):
        for j in range(s):
            patch = xp[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw]
            y += np.einsum("nchw,kc->nkhw", patch, w[:, :, i, j])
            mag += np.einsum("nchw,kc->nkhw", np.abs(patch), np.abs(w[:, :, i, j]))
    if b is not None:
        y += f64(b)[None, :, None, None]
        mag += np.abs(f64(b))[None, :, None, None]
    return y, mag, (ho, wo)


def _close(got, want, mag, terms, dtype, what, product_u=0.0):
    """product_u: the relative error of each product when it is not exact (TF32 operands)."""
    got = f64(got)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    u_acc = 2.0**-53 if dtype == "float64" else 2.0**-24
    tol = _U[dtype] * np.abs(want) + (2 * terms * u_acc + product_u) * mag + _TINY[dtype]
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite, err_msg=f"{what}: non-finite where the reference is finite")
    err = np.abs(got[finite] - want[finite])
    bad = err > tol[finite]
    assert not bad.any(), f"{what}: {bad.sum()} of {bad.size} off, worst {np.max(err - tol[finite]):.3g} over"


def check_conv2d(dev, host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype, with_bias=True, product_u=0.0,
                 groups=1):
    x, wt = data(rng, (n, c, h, w), dtype), data(rng, (k, c // groups, r, s), dtype)
    b = data(rng, (k,), dtype) if with_bias else None
    if groups == 1:   # the default, not passed
        y = host(cudakit.conv2d(dev(x), dev(wt), None if b is None else dev(b), stride, pad, dil))
    else:
        y = host(cudakit.conv2d(dev(x), dev(wt), None if b is None else dev(b), stride, pad, dil, groups))
    want, mag, (ho, wo) = conv_reference(x, wt, b, _two(stride), _two(pad), _two(dil), groups)
    _close(y, want, mag, c // groups * r * s + 1, dtype, "conv2d", product_u)
    assert y.dtype == np_dtype(dtype)
    # backward through the adjoint identity <g, conv(x)> against float64 finite-free references
    g = data(rng, (n, k, ho, wo), dtype)
    gx, gw, gb = cudakit.conv2d_backward(dev(g), dev(x), dev(wt), stride, pad, dil, with_bias, groups=groups)
    gx, gw = host(gx), host(gw)
    rgx, rgw, magx, magw = _conv_grads(f64(g), f64(x), f64(wt), _two(stride), _two(pad), _two(dil), groups)
    _close(gx, rgx, magx, k // groups * r * s, dtype, "grad_x", product_u)
    _close(gw, rgw, magw, n * ho * wo, dtype, "grad_weight", product_u)
    if with_bias:
        _close(host(gb), f64(g).sum(axis=(0, 2, 3)), np.abs(f64(g)).sum(axis=(0, 2, 3)), n * ho * wo, dtype, "grad_bias")
    else:
        assert gb is None

def check_conv2d_channels_last(dev, host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype, groups=1, product_u=0.0,
                               weight_cl=False):
    """conv2d and its backward on channels-last data, both forms (memory_format="nhwc" with
    (N, H, W, C) arrays; an (N, C, H, W) view of channels-last memory), against float64.
    weight_cl: the weight a (K, C, R, S) view of (K, R, S, C) memory (torch's channels_last), NCHW
    activations too; grad_weight must come back in that layout (a window of more than one tap)."""
    x, wt, b = data(rng, (n, c, h, w), dtype), data(rng, (k, c // groups, r, s), dtype), data(rng, (k,), dtype)
    want, mag, (ho, wo) = conv_reference(x, wt, b, _two(stride), _two(pad), _two(dil), groups)
    g = data(rng, (n, k, ho, wo), dtype)
    rgx, rgw, magx, magw = _conv_grads(f64(g), f64(x), f64(wt), _two(stride), _two(pad), _two(dil), groups)
    wd = dev(_nhwc(wt)).transpose(0, 3, 1, 2) if weight_cl else dev(wt)
    for form in ("nhwc", "view") + (("nchw",) if weight_cl else ()):
        if form == "nhwc":
            xd, gd, kw = dev(_nhwc(x)), dev(_nhwc(g)), {"memory_format": "nhwc"}
        elif form == "view":   # (N, C, H, W) views of (N, H, W, C) memory: the results come back the same way
            xd, gd, kw = dev(_nhwc(x)).transpose(0, 3, 1, 2), dev(_nhwc(g)).transpose(0, 3, 1, 2), {}
        else:
            xd, gd, kw = dev(x), dev(g), {}
        y = cudakit.conv2d(xd, wd, dev(b), stride, pad, dil, groups, **kw)
        gx, gw, gb = cudakit.conv2d_backward(gd, xd, wd, stride, pad, dil, True, groups, **kw)
        if weight_cl and r * s > 1 and c // groups > 1:   # (one channel or one tap: the layouts are one memory)
            assert gw.strides[1] == gw.itemsize and gw.strides[3] == gw.shape[1] * gw.itemsize, (form, gw.strides)
        else:
            assert gw.flags.c_contiguous, (form, gw.strides)
        if form == "nchw":
            y, gx = host(y), host(gx)
        elif form == "nhwc":
            assert y.shape == (n, ho, wo, k) and gx.shape == (n, h, w, c)
            y, gx = host(y).transpose(0, 3, 1, 2), host(gx).transpose(0, 3, 1, 2)
        else:
            assert y.strides[1] == y.itemsize and gx.strides[1] == gx.itemsize, (y.strides, gx.strides)
            y, gx = host(y), host(gx)
        _close(y, want, mag, c // groups * r * s + 1, dtype, f"conv2d {form}", product_u)
        _close(gx, rgx, magx, k // groups * r * s, dtype, f"grad_x {form}", product_u)
        _close(host(gw), rgw, magw, n * ho * wo, dtype, f"grad_weight {form}", product_u)
        _close(host(gb), f64(g).sum(axis=(0, 2, 3)), np.abs(f64(g)).sum(axis=(0, 2, 3)), n * ho * wo, dtype,
               f"grad_bias {form}")


def check_conv1d(dev, host, rng, n, c, length, k, r, stride, pad, dil, dtype, groups=1, with_bias=True, product_u=0.0,
                 nlc=False):
    """conv1d and conv1d_backward against the 2-D references on (N, C, 1, L) copies (the 1-D
    convolution is the 2-D one with a 1 x R window, stride, padding and dilation 1, 0, 1 in H).
    nlc: the activations passed and returned (N, L, C) (memory_format="nlc")."""
    x, wt = data(rng, (n, c, length), dtype), data(rng, (k, c // groups, r), dtype)
    b = data(rng, (k,), dtype) if with_bias else None
    fmt = {"memory_format": "nlc"} if nlc else {}

    def given(a):   # an (N, C, L) activation as the call takes it, and back
        return np.ascontiguousarray(a.swapaxes(1, 2)) if nlc else a
    y = host(cudakit.conv1d(dev(given(x)), dev(wt), None if b is None else dev(b), stride, pad, dil, groups, **fmt))
    geo = ((1, stride), (0, pad), (1, dil))
    want, mag, (_, lo) = conv_reference(x[:, :, None], wt[:, :, None], b, *geo, groups)
    assert y.shape == ((n, lo, k) if nlc else (n, k, lo)) and y.dtype == np_dtype(dtype)
    y = given(y)
    _close(y[:, :, None], want, mag, c // groups * r + 1, dtype, "conv1d", product_u)
    g = data(rng, (n, k, lo), dtype)
    gx, gw, gb = (None if t is None else host(t) for t in
                  cudakit.conv1d_backward(dev(given(g)), dev(given(x)), dev(wt), stride, pad, dil, with_bias, groups,
                                          **fmt))
    rgx, rgw, magx, magw = _conv_grads(f64(g)[:, :, None], f64(x)[:, :, None], f64(wt)[:, :, None], *geo, groups)
    assert gx.shape == given(x).shape and gw.shape == wt.shape
    gx = given(gx)
    _close(gx[:, :, None], rgx, magx, k // groups * r, dtype, "conv1d grad_x", product_u)
    _close(gw[:, :, None], rgw, magw, n * lo, dtype, "conv1d grad_weight", product_u)
    if with_bias:
        _close(gb, f64(g).sum(axis=(0, 2)), np.abs(f64(g)).sum(axis=(0, 2)), n * lo, dtype, "conv1d grad_bias")
    else:
        assert gb is None


# (n, c, length, k, r, stride, padding, dilation, groups) of conv1d on both backends
CONV1D_GEOMETRIES = [(2, 3, 17, 4, 3, 1, 1, 1, 1), (1, 6, 40, 9, 5, 2, 3, 2, 3), (3, 4, 9, 4, 3, 1, 1, 1, 4),
                     (2, 5, 1, 2, 1, 1, 0, 1, 1)]

# (n, c, h, w, k, r, s, stride, padding, dilation) and (n, c, h, w, kernel_size, stride, padding)
# run on both backends; the GPU tests add a larger case of each
CONV_GEOMETRIES = [(1, 1, 1, 1, 1, 1, 1, 1, 0, 1), (2, 3, 9, 7, 4, 3, 3, 1, 1, 1),
                   (1, 5, 13, 11, 3, 3, 2, (2, 1), (1, 2), 1), (2, 2, 10, 10, 3, 3, 3, 1, 2, 2)]
# ((n, c, h, w, k, r, s, stride, padding, dilation), groups): groups of several channels, depthwise
# (strided), more filters than channels per group, dilated
GROUPED_GEOMETRIES = [((2, 6, 9, 7, 9, 3, 3, 1, 1, 1), 3), ((2, 8, 10, 9, 8, 3, 3, 2, 1, 1), 8),
                      ((1, 4, 11, 10, 12, 3, 3, 1, 2, 2), 2)]
POOL_GEOMETRIES = [(1, 1, 4, 4, 2, None, 0), (2, 3, 9, 7, 3, 2, 1), (1, 2, 8, 8, (2, 3), (1, 2), (1, 0))]
# channels-last pooling: channel counts that take every channel width of the GPU kernels (3: one,
# 6: two, 16 and 24: all)
POOL_CL_GEOMETRIES = [(2, 3, 9, 7, 3, 2, 1), (1, 16, 12, 12, 2, None, 0), (2, 6, 10, 9, (2, 3), (1, 2), (1, 0)),
                      (3, 24, 15, 15, 3, 2, 1)]


def check_pool_memory_format_errors(dev, rng):
    """Typed errors naming the argument: an unknown memory_format, "nhwc" arrays of the wrong rank
    or of a gradient of the wrong shape."""
    import pytest
    x = data(rng, (2, 3, 6, 6), "float32")
    with pytest.raises(cudakit.ArgumentError, match="memory_format must be None, 'nchw' or 'nhwc'"):
        cudakit.max_pool2d(dev(x), 2, memory_format="channels_last")
    with pytest.raises(cudakit.ShapeError, match="x must be"):
        cudakit.avg_pool2d(dev(x[0]), 2, memory_format="nhwc")
    with pytest.raises(cudakit.ShapeError, match="grad_out must be"):
        cudakit.max_pool2d_backward(dev(x[0]), dev(x), 2, memory_format="nhwc")
    # x (N, H, W, C) = (2, 3, 6, 6): grad_out must be (2, 1, 3, 6), named in that order
    with pytest.raises(cudakit.ShapeError, match=re.escape("grad_out must have shape (2, 1, 3, 6) (got (2, 3, 3, 3))")):
        cudakit.max_pool2d_backward(dev(x[:, :, :3, :3]), dev(x), 2, memory_format="nhwc")


def _two(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _conv_grads(g, x, w, stride, pad, dil, groups=1):
    if groups > 1:   # each group's gradients on their own, stacked
        c, k = x.shape[1] // groups, w.shape[0] // groups
        parts = [_conv_grads(g[:, i * k:(i + 1) * k], x[:, i * c:(i + 1) * c], w[i * k:(i + 1) * k], stride, pad, dil)
                 for i in range(groups)]
        return tuple(np.concatenate([p[j] for p in parts], 0 if j in (1, 3) else 1) for j in range(4))
    h, wd = x.shape[2:]
    r, s = w.shape[2:]
    (sh, sw), (ph, pw), (dh, dw) = stride, pad, dil
    ho, wo = g.shape[2:]
    xp = _pad(x, ph, pw)
    gxp, magxp = np.zeros_like(xp), np.zeros_like(xp)
    gw, magw = np.zeros_like(w), np.zeros_like(w)
    for i in range(r):
        for j in range(s):
            sl = (slice(None), slice(None), slice(i * dh, i * dh + sh * (ho - 1) + 1, sh),
                  slice(j * dw, j * dw + sw * (wo - 1) + 1, sw))
            gxp[sl] += np.einsum("nkhw,kc->nchw", g, w[:, :, i, j])
            magxp[sl] += np.einsum("nkhw,kc->nchw", np.abs(g), np.abs(w[:, :, i, j]))
            gw[:, :, i, j] = np.einsum("nkhw,nchw->kc", g, xp[sl])
            magw[:, :, i, j] = np.einsum("nkhw,nchw->kc", np.abs(g), np.abs(xp[sl]))
    crop = (slice(None), slice(None), slice(ph, ph + h), slice(pw, pw + wd))
    return gxp[crop], gw, magxp[crop], magw


def _nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def _pool_io(dev, host, layout, c):
    """(a function putting an (N, C, H, W) host array on the device as passed, keywords, a function
    checking a result's layout and giving it back as an (N, C, H, W) host array) for one pooling
    layout: None (C-contiguous (N, C, H, W)), "view" ((N, C, H, W) views of (N, H, W, C) memory: the
    results channels-last views too), "nhwc" ((N, H, W, C) arrays, memory_format="nhwc"), "nchw"
    (channels-last views in, memory_format "nchw": C-contiguous results)."""
    def back(a):
        if layout == "nhwc":
            return host(a).transpose(0, 3, 1, 2)
        if layout == "view" and c > 1:
            assert a.strides[1] == a.itemsize and a.strides[3] == c * a.itemsize, ("channels-last", a.strides)
        elif layout != "view":
            assert a.flags.c_contiguous, (layout, a.strides)
        return host(a)
    if layout is None:
        return dev, {}, back
    if layout == "nhwc":
        return (lambda a: dev(_nhwc(a))), {"memory_format": "nhwc"}, back
    kw = {"memory_format": "nchw"} if layout == "nchw" else {}
    return (lambda a: dev(_nhwc(a)).transpose(0, 3, 1, 2)), kw, back


def check_pool(dev, host, rng, kind, n, c, h, w, ksize, stride, pad, dtype, nan=False, layout=None):
    """max_pool2d / avg_pool2d and their backward against float64 window references; layout: see
    _pool_io (the backward takes grad_out in the same layout as x)."""
    x = data(rng, (n, c, h, w), dtype)
    if nan:
        x[0, 0, 1, 1] = np.nan
    fwd = cudakit.max_pool2d if kind == "max" else cudakit.avg_pool2d
    bwd = cudakit.max_pool2d_backward if kind == "max" else cudakit.avg_pool2d_backward
    put, kw, back = _pool_io(dev, host, layout, c)
    xd = put(x)
    y = back(fwd(xd, ksize, stride, pad, **kw))
    r, s = _two(ksize)
    sh, sw = _two(ksize if stride is None else stride)
    ph, pw = _two(pad)
    xp = _pad(f64(x), ph, pw, -np.inf if kind == "max" else 0.0)
    ho, wo = (h + 2 * ph - r) // sh + 1, (w + 2 * pw - s) // sw + 1
    win = np.stack([xp[:, :, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw]
                    for i in range(r) for j in range(s)], axis=-1)
    want = win.max(-1) if kind == "max" else win.mean(-1)
    if kind == "max":
        np.testing.assert_array_equal(f64(y), want)   # a max is exact (NaN where the window has one)
    else:
        _close(y, want, np.abs(win).mean(-1), r * s, dtype, "avg_pool2d")
    g = data(rng, y.shape, dtype)
    gx = f64(back(bwd(put(g), xd, ksize, stride, pad, **kw)))
    want_gx, mag = np.zeros_like(xp), np.zeros_like(xp)
    pick = np.argmax(win, axis=-1)
    for t in range(r * s):
        i, j = divmod(t, s)
        sl = (slice(None), slice(None), slice(i, i + sh * (ho - 1) + 1, sh), slice(j, j + sw * (wo - 1) + 1, sw))
        part = np.where(pick == t, f64(g), 0) if kind == "max" else f64(g) / (r * s)
        want_gx[sl] += part
        mag[sl] += np.abs(part)
    crop = (slice(None), slice(None), slice(ph, ph + h), slice(pw, pw + w))
    _close(gx, want_gx[crop], mag[crop], r * s + 1, dtype, f"{kind}_pool2d_backward")


def check_conv_relu(dev, host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype, groups=1, form="nchw",
                    product_u=0.0, with_bias=True):
    """conv2d(..., activation="relu") against max(float64 conv, 0), and conv2d_backward(...,
    activation="relu", y=y) against the float64 gradients of grad_out masked where the reference
    is above 0 (entries whose reference lies within the forward's error bound of 0 may round to
    either side: their gradient is compared unmasked-or-masked, whichever y says). form: "nchw",
    "nhwc" (memory_format="nhwc" arrays) or "view" (NCHW views of channels-last memory);
    "conv1d" (h == 1: conv1d on (N, C, W))."""
    x, wt = data(rng, (n, c, h, w), dtype), data(rng, (k, c // groups, r, s), dtype)
    b = data(rng, (k,), dtype) if with_bias else None
    want, mag, (ho, wo) = conv_reference(x, wt, b, _two(stride), _two(pad), _two(dil), groups)
    g = data(rng, (n, k, ho, wo), dtype)
    bd = None if b is None else dev(b)
    if form == "conv1d":
        x3, w3, g3 = x[:, :, 0], wt[:, :, 0], g[:, :, 0]
        y = cudakit.conv1d(dev(x3), dev(w3), bd, stride[1], pad[1], dil[1], groups, activation="relu")
        grads = cudakit.conv1d_backward(dev(g3), dev(x3), dev(w3), stride[1], pad[1], dil[1], with_bias, groups,
                                        activation="relu", y=y)
        y, gx, gw = host(y)[:, :, None], host(grads[0])[:, :, None], host(grads[1])[:, :, None]
    else:
        to = {"nchw": lambda a: dev(a), "nhwc": lambda a: dev(_nhwc(a)),
              "view": lambda a: dev(_nhwc(a)).transpose(0, 3, 1, 2)}[form]
        kw = {"memory_format": "nhwc"} if form == "nhwc" else {}
        yd = cudakit.conv2d(to(x), dev(wt), bd, stride, pad, dil, groups, activation="relu", **kw)
        grads = cudakit.conv2d_backward(to(g), to(x), dev(wt), stride, pad, dil, with_bias, groups,
                                        activation="relu", y=yd, **kw)
        back = (lambda a: host(a).transpose(0, 3, 1, 2)) if form == "nhwc" else host
        y, gx, gw = back(yd), back(grads[0]), host(grads[1])
    assert y.dtype == np_dtype(dtype)
    _close(y, np.maximum(want, 0), mag, c // groups * r * s + 1, dtype, f"conv2d relu {form}", product_u)
    assert (f64(y) >= 0).all(), f"{form}: relu left a negative"
    on = f64(y) > 0   # the mask the backward applies (y as the kernels rounded it)
    u_acc = 2.0**-53 if dtype == "float64" else 2.0**-24
    slack = _U[dtype] * np.abs(want) + (2 * (c // groups * r * s + 1) * u_acc + product_u) * mag + _TINY[dtype]
    assert (on == (want > 0))[np.abs(want) > slack].all(), f"{form}: y > 0 where the reference is not, or not"
    gm = np.where(on, f64(g), 0.0)
    rgx, rgw, magx, magw = _conv_grads(gm, f64(x), f64(wt), _two(stride), _two(pad), _two(dil), groups)
    _close(gx, rgx, magx, k // groups * r * s, dtype, f"grad_x relu {form}", product_u)
    _close(gw, rgw, magw, n * ho * wo, dtype, f"grad_weight relu {form}", product_u)
    if with_bias:
        _close(host(grads[2]), gm.sum(axis=(0, 2, 3)), np.abs(gm).sum(axis=(0, 2, 3)), n * ho * wo, dtype,
               f"grad_bias relu {form}")
    else:
        assert grads[2] is None


CONV_RELU_CASES = [((2, 5, 9, 8, 6, 3, 3, (1, 1), (1, 1), (1, 1)), 1, "nchw"),
                   ((1, 8, 11, 7, 8, 3, 3, (2, 1), (1, 2), (1, 2)), 8, "nchw"),   # depthwise
                   ((2, 4, 7, 9, 6, 1, 1, (1, 1), (0, 0), (1, 1)), 2, "nhwc"),
                   ((2, 6, 8, 8, 4, 3, 3, (2, 2), (1, 1), (1, 1)), 1, "view"),
                   ((3, 4, 1, 19, 5, 1, 3, (1, 2), (0, 1), (1, 1)), 1, "conv1d")]


def check_conv_activation_errors(dev, rng):
    """Bad activation names, a missing or mis-shaped y, and y without an activation: typed errors
    naming the argument."""
    x, w = dev(data(rng, (1, 2, 5, 5), "float32")), dev(data(rng, (3, 2, 3, 3), "float32"))
    g = dev(data(rng, (1, 3, 3, 3), "float32"))
    y = cudakit.conv2d(x, w, activation="relu")
    with pytest.raises(cudakit.ArgumentError, match=r"conv2d: activation must be None or 'relu' \(got 'gelu'\)"):
        cudakit.conv2d(x, w, activation="gelu")
    with pytest.raises(cudakit.ArgumentError, match=r"conv1d: activation must be None or 'relu' \(got 1\)"):
        cudakit.conv1d(x[:, :, 0], w[:, :, 0], activation=1)
    with pytest.raises(cudakit.ArgumentError, match=r"activation='relu' needs y, the forward's output"):
        cudakit.conv2d_backward(g, x, w, activation="relu")
    with pytest.raises(cudakit.ArgumentError, match=r"y is the output of a forward with an activation"):
        cudakit.conv2d_backward(g, x, w, y=y)
    with pytest.raises(cudakit.ShapeError, match=r"y must have grad_out's shape \(1, 3, 3, 3\) \(got \(1, 3, 2, 3\)\)"):
        cudakit.conv2d_backward(g, x, w, activation="relu", y=y[:, :, :2])
    with pytest.raises(cudakit.DTypeError, match=r"y must have grad_out's dtype float32 \(got float64\)"):
        cudakit.conv2d_backward(g, x, w, activation="relu", y=y.astype("float64"))


def check_conv_relu_nan(dev, host, rng, dtype, groups=1, form="nchw"):
    """A NaN in x stays NaN through conv2d(..., activation="relu") (as relu(conv2d) keeps it): every
    output whose window reads it is NaN, the others max(conv, 0)."""
    c, k = (4, 4) if groups > 1 else (8, 16)   # (8 channels: rows of 16 bytes, which cuDNN's fused graph needs)
    x, wt = data(rng, (2, c, 7, 6), dtype), data(rng, (k, c // groups, 3, 3), dtype)
    x[1, 0, 3, 2] = np.nan
    to = (lambda a: dev(_nhwc(a)).transpose(0, 3, 1, 2)) if form == "view" else dev
    y = f64(host(cudakit.conv2d(to(x), dev(wt), None, 1, 1, 1, groups, activation="relu")))
    want, _, _ = conv_reference(np.nan_to_num(x), wt, None, (1, 1), (1, 1), (1, 1), groups)
    hit = np.zeros(want.shape, bool)
    ks = range(k) if groups == 1 else range(0, k // groups)   # (the group of channel 0)
    for kk in ks:
        hit[1, kk, 2:5, 1:4] = True
    assert np.isnan(y[hit]).all(), f"{form}: a NaN lost by the relu"
    assert not np.isnan(y[~hit]).any()
