"""conv2d, max_pool2d and avg_pool2d (NCHW, PyTorch's conventions), forward and backward, shared by
every backend as a mixin of Backend.

conv2d: a backend may run it with its own kernels (hooks _conv2d_kernel, _conv2d_input_grad_kernel,
_conv2d_weight_grad_kernel; the CUDA backend's are kernels/conv.py's implicit GEMMs and direct
depthwise kernels, the CPU backend's backends/cpu_conv.py's depthwise tap sums). Otherwise it is an
im2col convolution, group by group when groups > 1: the input's windows are gathered (a strided
view copied once, C*R*S x Ho*Wo per image) and multiplied by the (K, C*R*S) weight through the
backend's matmul, so it needs R*S times the input's memory for that copy; its backward is two more
batched GEMMs plus a col2im scatter-add (one strided add per kernel tap). 16-bit data are
accumulated in float32 and rounded once. Pooling runs a backend's pooling kernels where it has them
(hooks _pool_kernel, _pool_backward_kernel), else reduces strided window views through max, argmax
and mean.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .checks import MAX_INDEX, check_size, require_array
from ..errors import ArgumentError, DTypeError, ShapeError


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


_MAX_PLANS = 512   # cached conv2d argument checks (ConvOps._conv_plan) before the cache is emptied


def _channels_last(x) -> bool:
    """x is a 4-D (N, C, H, W) array whose memory is (N, H, W, C) C-contiguous with C > 1 (the
    channels adjacent), as PyTorch's channels_last; False for anything else (checked later)."""
    shape, strides = getattr(x, "shape", None), getattr(x, "strides", None)
    if shape is None or strides is None or len(shape) != 4 or shape[1] <= 1 or 0 in shape:
        return False
    n, c, h, w = shape
    item = getattr(getattr(x, "dtype", None), "itemsize", 0)
    return bool(item) and strides[1] == item and strides[3] == c * item and strides[2] == w * c * item \
        and (n == 1 or strides[0] == h * w * c * item)


def nc1l_view(a):
    """The (N, C, 1, L) view of an (N, C, L) array (or a (K, C, 1, R) one of a conv1d weight)."""
    return a[:, :, None, :]


def nlc_view(a):
    """The (N, C, 1, L) channels-last view of a C-contiguous (N, L, C) array."""
    n, length, c = a.shape
    return a.reshape(n, 1, length, c).transpose(0, 3, 1, 2)


def _check_1d_format(op: str, memory_format) -> bool:
    """conv1d's memory_format: True for "nlc" (channels-last), False for None or "ncl"."""
    if memory_format not in (None, "ncl", "nlc"):
        raise ArgumentError(f"{op}: memory_format must be None, 'ncl' or 'nlc' (got {memory_format!r})")
    return memory_format == "nlc"


def check_conv_activation(op: str, activation) -> bool:
    """conv2d's / conv1d's activation: True for "relu" (y = max(conv + bias, 0), fused into the
    convolution's own pass where a path can), False for None."""
    if activation is None:
        return False
    if isinstance(activation, str) and activation == "relu":
        return True
    raise ArgumentError(f"{op}: activation must be None or 'relu' (got {activation!r})")


def _weight_channels_last(w) -> bool:
    """w is a channels-last (K, C, R, S) weight (a view of (K, R, S, C) memory, as torch's
    channels_last) with a window of more than one tap: its gradient comes back in that layout."""
    return int(w.shape[2]) * int(w.shape[3]) > 1 and _channels_last(w)


def _plain(v) -> bool:
    """An int or a tuple of ints, exactly (True == 1 in a dict key: bools are checked every call)."""
    return type(v) is int or (type(v) is tuple and all(type(e) is int for e in v))


def _pair(op: str, name: str, v, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints >= minimum as a pair (PyTorch's stride/padding/kernel_size forms)."""
    if type(v) is int and minimum <= v <= MAX_INDEX:   # the usual call, without the ABC checks below
        return v, v
    t = (v, v) if _is_int(v) else tuple(v) if isinstance(v, (tuple, list)) else None
    if t is None or len(t) != 2 or not all(_is_int(e) for e in t):
        raise ArgumentError(f"{op}: {name} must be an int or a pair of ints (got {v!r})")
    if min(t) < minimum:
        raise ArgumentError(f"{op}: {name} must be >= {minimum} (got {v!r})")
    if max(t) > MAX_INDEX:
        raise ArgumentError(f"{op}: {name} must be <= {MAX_INDEX} (2**31 - 1) (got {v!r})")
    return int(t[0]), int(t[1])


def _out_size(op, size, k, stride, pad, dil, axis, dilated: bool = True):
    """The output size along one axis; dilated: the op takes a dilation (conv), not a pool."""
    span = dil * (k - 1) + 1
    o = (size + 2 * pad - span) // stride + 1
    if size + 2 * pad < span:
        window = f"the window ({span} with dilation)" if dilated else f"kernel_size {k}"
        raise ShapeError(f"{op}: {window} is larger than the padded input along {axis} ({size} + 2 * {pad})")
    return o


def _check_sizes(op, x, ph: int, pw: int, out_shape: tuple) -> None:
    """The zero-padded input and the output must be arrays that can exist (checks.MAX_BYTES)."""
    n, c, h, w = x.shape
    check_size(op, "the padded input", (n, c, h + 2 * ph, w + 2 * pw), x.dtype.itemsize)
    check_size(op, "the output", out_shape, x.dtype.itemsize)


_GW_CHUNK_BYTES = 256 << 20   # grad_weight's per-image float32 products are summed in chunks this large


class ConvOps:
    """conv2d, max_pool2d, avg_pool2d and their backward passes (mixed into Backend)."""
    _conv_plans: dict   # _conv_plan's cache: made by the backends whose _plan_key gives keys

    # ---- hooks a backend fills in ----------------------------------------------------------
    def _xp(self):
        """The array module (numpy or cupy) whose strided views, zeros and slice-adds the window
        gathering and scattering use."""
        raise NotImplementedError

    def _pool_kernel(self, kind: str, x, geo):
        """Max ("max") or average ("avg") pooling of x by a kernel of this backend, or None to
        reduce over strided window views (the CPU backend)."""
        return None

    def _pool_backward_kernel(self, kind: str, grad_out, x, geo):
        """dL/dx of _pool_kernel, or None to scatter through window views (the CPU backend)."""
        return None

    def _conv2d_kernel(self, x, w, b, geo, groups: int, relu: bool = False):
        """y of conv2d from a backend's own kernel (relu: max(y, 0) applied, activation="relu"), or
        None for the im2col + GEMM path."""
        return None

    def _conv2d_input_grad_kernel(self, grad_out, w, x_shape, geo, groups: int):
        """dL/dx of conv2d from a backend's own kernel, or None for the col2im path."""
        return None

    def _conv2d_weight_grad_kernel(self, grad_out, x, w_shape, geo, bias: bool, groups: int, out_cl: bool = False):
        """(dL/dw, dL/db or None) of conv2d from a backend's own kernel, or None for the im2col path;
        out_cl: the weight is channels-last, so dL/dw is returned so (a backend may write it so
        directly; conv2d_backward copies one that is not)."""
        return None

    def _plan_key(self, named: dict):
        """A hashable signature of the arrays (None stays None) that fixes every check _conv_args
        makes of them -- type, shape, dtype, device -- or None when the arrays are not all this
        backend's own (they need coercing: no plan is cached)."""
        return None

    def _padded(self, x, ph: int, pw: int, value: float):
        if ph == 0 and pw == 0:
            return self._ascontiguous(x)
        xp = self._xp()
        n, c, h, w = x.shape
        out = xp.full((n, c, h + 2 * ph, w + 2 * pw), value, x.dtype)
        out[:, :, ph:ph + h, pw:pw + w] = x
        return out

    def _windows(self, xp_arr, r, s, ho, wo, sh, sw, dh, dw, order: str):
        """A strided view of the windows of a contiguous (N, C, Hp, Wp) array: (N, C, R, S, Ho, Wo)
        for order "rs_first" (im2col), (N, C, Ho, Wo, R, S) otherwise (pooling)."""
        xp = self._xp()
        st = xp_arr.strides
        tap = (st[2] * dh, st[3] * dw)
        pos = (st[2] * sh, st[3] * sw)
        n, c = xp_arr.shape[:2]
        if order == "rs_first":
            return xp.lib.stride_tricks.as_strided(xp_arr, (n, c, r, s, ho, wo), (st[0], st[1]) + tap + pos)
        return xp.lib.stride_tricks.as_strided(xp_arr, (n, c, ho, wo, r, s), (st[0], st[1]) + pos + tap)

    def _conv_plan(self, op, named, stride, padding, dilation, groups):
        """_conv_args, its (geo, groups) cached per call signature (_plan_key's, and the geometry
        arguments when they are plain ints or tuples of them): the checks cost more host time than
        a small convolution's kernels on a GPU. Only calls that passed every check are cached."""
        key = self._plan_key(named)
        if key is not None and all(_plain(v) for v in (stride, padding, dilation, groups)):
            key = (op, key, stride, padding, dilation, groups)
            hit = self._conv_plans.get(key)
            if hit is not None:
                return named, hit[0], hit[1]
        else:
            key = None
        arrs, geo, groups = self._conv_args(op, named, stride, padding, dilation, groups)
        if key is not None:
            if len(self._conv_plans) >= _MAX_PLANS:
                self._conv_plans.clear()
            self._conv_plans[key] = (geo, groups)
        return arrs, geo, groups

    def _conv_args(self, op, named, stride, padding, dilation, groups):
        arrs, _ = self._norm_arrays(op, named, optional=frozenset({"bias"}))
        x, w = arrs["x"], arrs["weight"]
        if x.ndim != 4:
            raise ShapeError(f"{op}: x must be (N, C, H, W) (got {tuple(x.shape)})")
        if not _is_int(groups) or groups < 1:
            raise ArgumentError(f"{op}: groups must be an int >= 1 (got {groups!r})")
        groups = int(groups)
        if x.shape[1] % groups:
            raise ShapeError(f"{op}: x's {x.shape[1]} channels are not divisible by groups = {groups}")
        one_d = op.startswith("conv1d")   # conv1d's (N, C, 1, L) views: named as its own arrays
        if w.ndim != 4 or w.shape[1] != x.shape[1] // groups:
            form, shape = ("(K, C / groups, R)", tuple(w.shape[:2]) + tuple(w.shape[3:])) if one_d else \
                ("(K, C / groups, R, S)", tuple(w.shape))
            raise ShapeError(f"{op}: weight must be {form} with C / groups = {x.shape[1] // groups} "
                             f"(x's channels over {groups} group(s)); got {shape}")
        if w.shape[0] % groups:
            raise ShapeError(f"{op}: weight's {w.shape[0]} filters are not divisible by groups = {groups}")
        b = arrs.get("bias")
        if b is not None and tuple(b.shape) != (w.shape[0],):
            raise ShapeError(f"{op}: bias must have shape ({w.shape[0]},) (got {tuple(b.shape)})")
        sh, sw = _pair(op, "stride", stride, 1)
        ph, pw = _pair(op, "padding", padding, 0)
        dh, dw = _pair(op, "dilation", dilation, 1)
        r, s = w.shape[2:]
        if r == 0 or s == 0 or w.shape[1] == 0:
            given = (w.shape[0], w.shape[1], s) if one_d else tuple(w.shape)   # (conv1d's (K, C / groups, R))
            raise ShapeError(f"{op}: weight {given} has an empty dimension")
        ho = _out_size(op, x.shape[2], r, sh, ph, dh, "H")
        wo = _out_size(op, x.shape[3], s, sw, pw, dw, "L" if one_d else "W")
        _check_sizes(op, x, ph, pw, (x.shape[0], w.shape[0], ho, wo))
        return arrs, (sh, sw, ph, pw, dh, dw, r, s, ho, wo), groups

    def _cols(self, x, geo):
        sh, sw, ph, pw, dh, dw, r, s, ho, wo = geo
        n, c = x.shape[:2]
        win = self._windows(self._padded(x, ph, pw, 0.0), r, s, ho, wo, sh, sw, dh, dw, "rs_first")
        return self._ascontiguous(win).reshape(n, c * r * s, ho * wo)

    # ---- conv1d: conv2d over (N, C, 1, L) views -------------------------------------------------
    def conv1d(self, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, memory_format=None,
               activation=None):
        """1-D cross-correlation, PyTorch's conv1d: x (N, C, L), weight (K, C / groups, R), bias
        (K,) or None; stride, padding (zeros), dilation: an int or a 1-tuple; groups as conv2d.
        Returns (N, K, Lo), Lo = (L + 2 p - d (R - 1) - 1) // s + 1. memory_format "nlc": x and
        the result channels-last, (N, L, C) and (N, Lo, K) (a transformer's (batch, time, features)
        read in place, no transposed copy); None or "ncl": (N, C, L). Runs as conv2d on (N, C, 1, L)
        views, channels-last ones for "nlc" (the same kernels, paths and checks; no copy of x).
        activation: None or "relu", as conv2d's."""
        op = "conv1d"
        nlc = _check_1d_format(op, memory_format)
        relu = check_conv_activation(op, activation)
        x4, w4, geo = self._conv1d_views(op, {"x": x, "weight": weight}, stride, padding, dilation, nlc)
        y = self._conv2d(op, x4, w4, bias, *geo, groups, relu)
        return self._conv1d_out(y, nlc)

    def conv1d_backward(self, grad_out, x, weight, stride=1, padding=0, dilation=1, bias: bool = True, groups=1, *,
                        memory_format=None, activation=None, y=None):
        """(grad_x, grad_weight, grad_bias) of y = conv1d(x, weight, bias, stride, padding, dilation,
        groups) for dL/dy = grad_out (N, K, Lo): x's and weight's shapes and (K,) (None when `bias`
        is False), in x's dtype. memory_format "nlc": grad_out (N, Lo, K), x and grad_x (N, L, C).
        activation="relu" with y, the forward's output: the gradients of conv1d(...,
        activation="relu"), as conv2d_backward's."""
        op = "conv1d_backward"
        nlc = _check_1d_format(op, memory_format)
        grad_out = self._activation_grad(op, grad_out, activation, y)
        x4, w4, geo = self._conv1d_views(op, {"x": x, "weight": weight}, stride, padding, dilation, nlc)
        g = self._coerce(grad_out, "grad_out") if grad_out is not None else None
        require_array(op, "grad_out", g)
        if getattr(g, "ndim", None) != 3:
            form = "(N, Lo, K)" if nlc else "(N, K, Lo)"
            raise ShapeError(f"{op}: grad_out must be {form} (got shape {tuple(getattr(g, 'shape', ()))})")
        g4 = self._as_nc1l(g, nlc)
        shown = (lambda s: (s[0], s[3], s[1])) if nlc else (lambda s: (s[0], s[1], s[3]))
        gx, gw, gb = self._conv2d_backward(op, g4, x4, w4, *geo, bias, groups, shown=shown)
        return self._conv1d_out(gx, nlc), gw.reshape(w4.shape[0], w4.shape[1], w4.shape[3]), gb

    def _as_nc1l(self, a, nlc: bool):
        """The (N, C, 1, L) view conv2d takes of a 3-D activation: of (N, C, L) a, or with nlc of
        (N, L, C) a, a channels-last one (a copy first where a's memory is not C-contiguous)."""
        return nlc_view(self._ascontiguous(a)) if nlc else nc1l_view(a)

    def _conv1d_out(self, y, nlc: bool):
        """conv2d's (N, K, 1, Lo) result as conv1d returns it: (N, K, Lo), or (N, Lo, K) with nlc."""
        n, k, _, lo = y.shape
        if nlc:
            return self._conv_out(y, "nhwc").reshape(n, lo, k)
        return y.reshape(n, k, lo)

    def _conv1d_views(self, op, named, stride, padding, dilation, nlc: bool = False):
        """x (N, C, 1, L) and weight (K, C / groups, 1, R) views, and conv2d's (stride, padding,
        dilation) pairs for conv1d's int (or 1-tuple) arguments; nlc: x given (N, L, C)."""
        arrs = {}
        for name, a in named.items():
            require_array(op, name, a)
            a = self._coerce(a, name)
            if a.ndim != 3:
                form = ("(N, L, C)" if nlc else "(N, C, L)") if name == "x" else "(K, C / groups, R)"
                raise ShapeError(f"{op}: {name} must be {form} (got shape {tuple(a.shape)})")
            arrs[name] = a
        geo = []
        for name, v, minimum in (("stride", stride, 1), ("padding", padding, 0), ("dilation", dilation, 1)):
            given = v
            if isinstance(v, (tuple, list)):
                if len(v) != 1:
                    raise ArgumentError(f"{op}: {name} must be an int or a 1-tuple (got {given!r})")
                v = v[0]
            if not _is_int(v):   # (an int or NumPy integer, not a bool or a float, as conv2d's _pair)
                raise ArgumentError(f"{op}: {name} must be an int or a 1-tuple (got {given!r})")
            v = int(v)
            if v < minimum:
                raise ArgumentError(f"{op}: {name} must be >= {minimum} (got {given!r})")
            if v > MAX_INDEX:
                raise ArgumentError(f"{op}: {name} must be <= {MAX_INDEX} (2**31 - 1) (got {given!r})")
            geo.append((1 if name != "padding" else 0, v))
        return self._as_nc1l(arrs["x"], nlc), nc1l_view(arrs["weight"]), geo

    # ---- conv2d ----------------------------------------------------------------------------
    def conv2d(self, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, memory_format=None,
               activation=None):
        """2-D cross-correlation, PyTorch's conv2d.

        x: (N, C, H, W); weight: (K, C / groups, R, S); bias: (K,) or None; one float dtype. stride,
        padding (zeros), dilation: an int or a pair. groups: C and K split into that many groups,
        group g's outputs from group g's inputs (C = groups = K: depthwise). Returns (N, K, Ho, Wo)
        with Ho = (H + 2 ph - dh (R - 1) - 1) // sh + 1 (Wo likewise). 16-bit data accumulate in
        float32.

        memory_format: "nhwc": x is an (N, H, W, C) array and the output comes back (N, Ho, Wo, K);
        None (the default): x (N, C, H, W), and where its strides are channels-last (an (N, H, W, C)
        array seen through transpose(0, 3, 1, 2), PyTorch's channels_last) the output is too: an
        (N, K, Ho, Wo) view of (N, Ho, Wo, K) memory; "nchw": x (N, C, H, W), the output C-contiguous
        whatever x's strides. On the CUDA backend cuDNN reads and writes channels-last memory in
        place; cudakit's own kernels compute in (N, C, H, W), so there a channels-last call pays a
        copy of x into that layout and of the output out of it.

        activation: None, or "relu": y = max(conv + bias, 0), fused into the pass that writes y
        (cuDNN's graph with a ReLU node, or the own kernels' store; rounded once, as conv then relu
        would round it), else applied to y after. Its gradients: conv2d_backward(...,
        activation="relu", y=y)."""
        nhwc, x = self._conv_layout("conv2d", x, memory_format)
        relu = check_conv_activation("conv2d", activation)
        y = self._conv2d("conv2d", x, weight, bias, stride, padding, dilation, groups, relu)
        return self._conv_out(y, nhwc)

    def _conv_layout(self, op: str, x, memory_format):
        """(the result's layout: None for NCHW, "nhwc" for (N, H, W, C) arrays, "view" for
        channels-last views; x as the (N, C, H, W) array the kernels take: C-contiguous, or a view
        of channels-last memory, which the kernel hooks read in place or copy)."""
        if memory_format not in (None, "nchw", "nhwc"):
            raise ArgumentError(f"{op}: memory_format must be None, 'nchw' or 'nhwc' (got {memory_format!r})")
        if memory_format is None and not _channels_last(x):
            return None, x
        require_array(op, "x", x)
        x = self._coerce(x, "x")
        if getattr(x, "ndim", None) != 4:
            form = "(N, H, W, C)" if memory_format == "nhwc" else "(N, C, H, W)"
            raise ShapeError(f"{op}: x must be {form} (got shape {tuple(getattr(x, 'shape', ()))})")
        if memory_format == "nhwc":
            return "nhwc", self._channels_last_view(x)
        if memory_format is None:
            return "view", x
        return None, x if _channels_last(x) else self._ascontiguous(x)

    def _channels_last_view(self, nhwc):
        """The (N, C, H, W) view of (N, H, W, C) array `nhwc`, copied first when its memory is not
        C-contiguous (a strided slice)."""
        v = nhwc.transpose(0, 3, 1, 2)
        return v if _channels_last(v) or nhwc.flags.c_contiguous else self._ascontiguous(nhwc).transpose(0, 3, 1, 2)

    def _conv_out(self, y, nhwc):
        """y (N, K, Ho, Wo), C-contiguous or channels-last, in the call's layout (see _conv_layout)."""
        if nhwc is None:
            return self._ascontiguous(y)
        if not _channels_last(y) and not (y.shape[1] == 1 and y.flags.c_contiguous):
            y = self._ascontiguous(y.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)   # into (N, Ho, Wo, K) memory
        t = y.transpose(0, 2, 3, 1)   # (N, Ho, Wo, K), C-contiguous
        return t if nhwc == "nhwc" else y

    def _conv2d(self, op, x, weight, bias, stride, padding, dilation, groups, relu: bool = False):
        arrs, geo, groups = self._conv_plan(op, {"x": x, "weight": weight, "bias": bias}, stride, padding,
                                            dilation, groups)
        x, w, b = arrs["x"], arrs["weight"], arrs["bias"]
        with self._device_scope(x):
            y = self._conv2d_kernel(x, w, b, geo, groups, relu)
            if y is not None:
                return y
            y = self._by_group(groups, lambda i, cg, kg: self._im2col_conv2d(
                x[:, i * cg:(i + 1) * cg], w[i * kg:(i + 1) * kg], None if b is None else b[i * kg:(i + 1) * kg], geo),
                1, x.shape[1], w.shape[0])
            # (max(., 0) after the rounding equals it before: rounding is monotonic and keeps 0)
            return self.relu(y, out=y) if relu else y

    def _im2col_conv2d(self, x, w, b, geo):
        n, k = x.shape[0], w.shape[0]
        ho, wo = geo[8], geo[9]
        acc = "float64" if x.dtype == np.float64 else "float32"
        w3, tw = self._operand(self._ascontiguous(w).reshape(k, math.prod(w.shape[1:])), ())
        cols = self._cols(x, geo)                                           # (N, C*R*S, Ho*Wo)
        y = self._product(w3, tw, cols, False, n, k, ho * wo, acc)          # float32 accumulator
        if b is not None:
            self.add(y, b.astype(acc).reshape(k, 1), out=y)
        return y.astype(x.dtype).reshape(n, k, ho, wo)                      # rounded once

    def conv2d_backward(self, grad_out, x, weight, stride=1, padding=0, dilation=1, bias: bool = True, groups=1, *,
                        memory_format=None, activation=None, y=None):
        """(grad_x, grad_weight, grad_bias) of y = conv2d(x, weight, bias, stride, padding, dilation,
        groups) for dL/dy = grad_out (N, K, Ho, Wo): x's shape, weight's shape and (K,), in x's dtype;
        grad_bias None when `bias` (a bool: did the forward have one) is False. memory_format as the
        forward's (with "nhwc", grad_out is (N, Ho, Wo, K) and grad_x comes back (N, H, W, C);
        without it, a channels-last x gives a channels-last grad_x). grad_weight comes back in the
        weight's layout: channels-last (a (K, C, R, S) view of (K, R, S, C) memory, as torch's
        channels_last) for such a weight with a window of more than one tap, else C-contiguous.

        activation="relu" with y, the forward's output (conv2d(..., activation="relu")), in
        grad_out's shape and layout: the gradients of that forward, grad_out counting where y > 0
        (relu_backward(grad_out, y), one elementwise pass before the convolution's backward)."""
        op = "conv2d_backward"
        grad_out = self._activation_grad(op, grad_out, activation, y)
        nhwc, x = self._conv_layout(op, x, memory_format)
        grad_out, shown = self._grad_layout(op, grad_out, nhwc)
        gx, gw, gb = self._conv2d_backward(op, grad_out, x, weight, stride, padding, dilation, bias, groups, shown)
        return self._conv_out(gx, nhwc), gw, gb

    def _activation_grad(self, op: str, grad_out, activation, y):
        """grad_out through the forward's activation: unchanged without one; for "relu", grad_out
        where y (the forward's output, grad_out's shape) > 0, else 0."""
        if not check_conv_activation(op, activation):
            if y is not None:
                raise ArgumentError(f"{op}: y is the output of a forward with an activation; "
                                    f"pass activation='relu' with it (got activation=None)")
            return grad_out
        require_array(op, "grad_out", grad_out)
        if y is None:
            raise ArgumentError(f"{op}: activation='relu' needs y, the forward's output (got None)")
        g, yy = self._coerce(grad_out, "grad_out"), self._coerce(y, "y")
        if tuple(yy.shape) != tuple(g.shape):
            raise ShapeError(f"{op}: y must have grad_out's shape {tuple(g.shape)} (got {tuple(yy.shape)})")
        if yy.dtype != g.dtype:
            raise DTypeError(f"{op}: y must have grad_out's dtype {g.dtype} (got {yy.dtype})")
        return self.relu_backward(g, yy)

    def _grad_layout(self, op: str, grad_out, nhwc):
        """(grad_out as the kernels take it, a function showing an (N, C, H, W) shape as the caller's
        arrays have it) for the layout _conv_layout gave x: a 4-D array for any format asked, seen
        through its channels-last view for "nhwc"."""
        if nhwc is not None:
            require_array(op, "grad_out", grad_out)
            g = self._coerce(grad_out, "grad_out")
            if getattr(g, "ndim", None) != 4:
                raise ShapeError(f"{op}: grad_out must be 4-D (got shape {tuple(getattr(g, 'shape', ()))})")
            grad_out = self._channels_last_view(g) if nhwc == "nhwc" else g
        return grad_out, (lambda s: (s[0], s[2], s[3], s[1])) if nhwc == "nhwc" else tuple

    def _conv2d_backward(self, op, grad_out, x, weight, stride, padding, dilation, bias, groups, shown):
        """shown: an (N, K, Ho, Wo) shape as the caller's grad_out has it ((N, Ho, Wo, K), conv1d's
        (N, K, Lo); `tuple` where it is so), for the error message."""
        from .linalg_api import _check_flag
        bias = _check_flag(op, "bias", bias)
        arrs, geo, groups = self._conv_plan(op, {"x": x, "weight": weight, "grad_out": grad_out}, stride, padding,
                                            dilation, groups)
        x, w, g = arrs["x"], arrs["weight"], arrs["grad_out"]
        ho, wo = geo[8], geo[9]
        n, k = x.shape[0], w.shape[0]
        if tuple(g.shape) != (n, k, ho, wo):
            raise ShapeError(f"{op}: grad_out must have shape {shown((n, k, ho, wo))} (got {shown(tuple(g.shape))})")
        w_cl = _weight_channels_last(w)
        with self._device_scope(x):
            grads = self._conv2d_weight_grad_kernel(g, x, w.shape, geo, bias, groups, out_cl=w_cl)
            if grads is None:
                gw = self._by_group(groups, lambda i, cg, kg: self._im2col_weight_grad(
                    g[:, i * kg:(i + 1) * kg], x[:, i * cg:(i + 1) * cg], kg, geo), 0, x.shape[1], k)
                gb = self.sum(self._ascontiguous(g).reshape(n, k, ho * wo), axis=(0, 2)) if bias else None
            else:
                gw, gb = grads
            gx = self._conv2d_input_grad_kernel(g, w, x.shape, geo, groups)
            if gx is None:
                gx = self._by_group(groups, lambda i, cg, kg: self._col2im_input_grad(
                    g[:, i * kg:(i + 1) * kg], w[i * kg:(i + 1) * kg], (n, cg) + tuple(x.shape[2:]), geo),
                    1, x.shape[1], k)
        gw = gw.reshape(w.shape)
        if w_cl and not _channels_last(gw):   # dL/dw in the weight's layout
            gw = self._ascontiguous(gw.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        return gx, gw, gb

    def _by_group(self, groups, fn, axis, c, k):
        """fn(i, C / groups, K / groups) of each group, concatenated along axis (one call for one group)."""
        if groups == 1:
            return fn(0, c, k)
        return self._xp().concatenate([fn(i, c // groups, k // groups) for i in range(groups)], axis=axis)

    def _im2col_weight_grad(self, g, x, k, geo):
        """dL/dw as (K, C R S) in x's dtype for grad_out g (N, K, Ho, Wo): sum over images of g[n]
        cols[n]^T, the per-image products summed (in float32 for 16-bit data) in chunks of images
        (bounded memory), rounded once."""
        n = x.shape[0]
        acc = "float64" if x.dtype == np.float64 else "float32"
        g3 = self._ascontiguous(g).reshape(n, k, geo[8] * geo[9])
        cols = self._cols(x, geo)
        crs = cols.shape[1]
        step = max(1, _GW_CHUNK_BYTES // max(1, k * crs * np.dtype(acc).itemsize))
        gw = self._xp().zeros((k, crs), acc)
        for i0 in range(0, n, step):
            i1 = min(n, i0 + step)
            gw += self.sum(self._product(g3[i0:i1], False, cols[i0:i1], True, i1 - i0, k, crs, acc), axis=0)
        return gw.astype(x.dtype)

    def _col2im_input_grad(self, g, w, x_shape, geo):
        """dL/dx (x_shape) in w's dtype for grad_out g (N, K, Ho, Wo): W^T g as columns (float32 for
        16-bit data), each tap (r, s) added back onto the padded input, rounded once."""
        sh, sw, ph, pw, dh, dw, r, s, ho, wo = geo
        n, c, h, wd = x_shape
        k = w.shape[0]
        acc = "float64" if w.dtype == np.float64 else "float32"
        g3 = self._ascontiguous(g).reshape(n, k, ho * wo)
        w3, tw = self._operand(self._ascontiguous(w).reshape(k, c * r * s), ())
        gcols = self._product(w3, not tw, g3, False, n, c * r * s, ho * wo, acc)   # W^T g, float32
        xp = self._xp()
        gcols = gcols.reshape(n, c, r, s, ho, wo)
        gx = xp.zeros((n, c, h + 2 * ph, wd + 2 * pw), acc)
        for i in range(r):
            for j in range(s):
                gx[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw] += gcols[:, :, i, j]
        return self._ascontiguous(gx[:, :, ph:ph + h, pw:pw + wd]).astype(w.dtype)

    # ---- pooling ---------------------------------------------------------------------------
    def _pool_args(self, op, x, kernel_size, stride, padding):
        arrs, _ = self._norm_arrays(op, {"x": x})
        x = arrs["x"]
        if x.ndim != 4:
            raise ShapeError(f"{op}: x must be (N, C, H, W) (got {tuple(x.shape)})")
        r, s = _pair(op, "kernel_size", kernel_size, 1)
        sh, sw = _pair(op, "stride", kernel_size if stride is None else stride, 1)
        ph, pw = _pair(op, "padding", padding, 0)
        if ph > r // 2 or pw > s // 2:
            raise ArgumentError(f"{op}: padding must be <= half the kernel size ({r // 2}, {s // 2}) (got {padding!r})")
        ho = _out_size(op, x.shape[2], r, sh, ph, 1, "H", dilated=False)
        wo = _out_size(op, x.shape[3], s, sw, pw, 1, "W", dilated=False)
        _check_sizes(op, x, ph, pw, tuple(x.shape[:2]) + (ho, wo))
        return x, (sh, sw, ph, pw, 1, 1, r, s, ho, wo)

    def _pool_windows(self, x, geo, pad_value):
        sh, sw, ph, pw, _, _, r, s, ho, wo = geo
        return self._windows(self._padded(x, ph, pw, pad_value), r, s, ho, wo, sh, sw, 1, 1, "pos_first")

    def max_pool2d(self, x, kernel_size, stride=None, padding=0, *, memory_format=None):
        """Max over each (R, S) window of x (N, C, H, W), PyTorch's max_pool2d: stride defaults to
        kernel_size, padding (<= half the kernel, with -inf) on both sides; a window holding a NaN
        gives NaN. Returns (N, C, Ho, Wo). memory_format as conv2d's: "nhwc" for (N, H, W, C) arrays
        (the output (N, Ho, Wo, C)); None: a channels-last view gives a channels-last output; "nchw":
        a C-contiguous output whatever x's strides."""
        return self._pool("max_pool2d", "max", x, kernel_size, stride, padding, memory_format)

    def max_pool2d_backward(self, grad_out, x, kernel_size, stride=None, padding=0, *, memory_format=None):
        """dL/dx of max_pool2d, x's shape, dtype and layout: each window's gradient goes to its first
        largest element (the first NaN where there is one; the first in-bounds element of a window
        of -inf), recomputed from x. memory_format as max_pool2d's ("nhwc": grad_out (N, Ho, Wo, C),
        x and dL/dx (N, H, W, C))."""
        return self._pool_grad("max_pool2d_backward", "max", grad_out, x, kernel_size, stride, padding,
                               memory_format)

    def avg_pool2d(self, x, kernel_size, stride=None, padding=0, *, memory_format=None):
        """Mean over each (R, S) window of x (N, C, H, W), PyTorch's avg_pool2d with its default
        count_include_pad=True (padding zeros count); 16-bit data summed in float32. memory_format
        as max_pool2d's."""
        return self._pool("avg_pool2d", "avg", x, kernel_size, stride, padding, memory_format)

    def avg_pool2d_backward(self, grad_out, x, kernel_size, stride=None, padding=0, *, memory_format=None):
        """dL/dx of avg_pool2d, x's shape, dtype and layout: grad_out / (R * S) spread over each
        window. memory_format as max_pool2d_backward's."""
        return self._pool_grad("avg_pool2d_backward", "avg", grad_out, x, kernel_size, stride, padding,
                               memory_format)

    def _pool(self, op, kind, x, kernel_size, stride, padding, memory_format):
        layout, x = self._conv_layout(op, x, memory_format)
        x, geo = self._pool_args(op, x, kernel_size, stride, padding)
        with self._device_scope(x):
            y = self._pool_kernel(kind, x, geo)
            if y is None:   # max or mean (float32 sum and division for 16-bit data, one rounding)
                win = self._pool_windows(x, geo, -np.inf if kind == "max" else 0.0)
                y = self.max(win, axis=(4, 5)) if kind == "max" else self.mean(win, axis=(4, 5))
            return self._conv_out(y, layout)

    def _pool_grad(self, op, kind, grad_out, x, kernel_size, stride, padding, memory_format):
        layout, x = self._conv_layout(op, x, memory_format)
        grad_out, shown = self._grad_layout(op, grad_out, layout)
        x, geo = self._pool_args(op, x, kernel_size, stride, padding)
        return self._conv_out(self._pool_backward(op, grad_out, x, geo, kind, shown), layout)

    def _pool_backward(self, op, grad_out, x, geo, kind, shown):
        sh, sw, ph, pw, _, _, r, s, ho, wo = geo
        n, c, h, w = x.shape
        g = self._norm_arrays(op, {"x": x, "grad_out": grad_out})[0]["grad_out"]
        if tuple(g.shape) != (n, c, ho, wo):
            raise ShapeError(f"{op}: grad_out must have shape {shown((n, c, ho, wo))} (got {shown(tuple(g.shape))})")
        xp = self._xp()
        acc = "float64" if x.dtype == np.float64 else "float32"
        with self._device_scope(x):
            gx = self._pool_backward_kernel(kind, g, x, geo)
            if gx is not None:
                return gx
            g32 = g.astype(acc)
            if kind == "max":
                win = self._ascontiguous(self._pool_windows(x, geo, -np.inf)).reshape(n, c, ho, wo, r * s)
                idx = self.argmax(win, axis=4)
                if ph or pw:  # a window of -inf only: its first in-bounds tap, not the padding
                    inside = xp.zeros((1, 1, h, w), acc) + 1
                    first_in = self.argmax(self._ascontiguous(self._pool_windows(inside, geo, 0.0))
                                           .reshape(1, 1, ho, wo, r * s), axis=4)
                    idx = xp.where(self.max(win, axis=4) == -np.inf, first_in, idx)
            gx = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), acc)
            for i in range(r):
                for j in range(s):
                    part = g32 * (1.0 / (r * s)) if kind == "avg" else xp.where(idx == i * s + j, g32, 0)
                    gx[:, :, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw] += part
            return self._ascontiguous(gx[:, :, ph:ph + h, pw:pw + w]).astype(x.dtype)


class CpuConvHooks(ConvOps):
    """The CPU backend's depthwise convolutions (backends/cpu_conv.py); the rest take im2col."""

    def _conv2d_kernel(self, x, w, b, geo, groups, relu=False):
        from . import cpu_conv
        if not cpu_conv.depthwise(x.shape, w.shape, groups):
            return None
        y = cpu_conv.forward(x, w, b, geo)
        return self.relu(y, out=y) if relu else y

    def _conv2d_input_grad_kernel(self, grad_out, w, x_shape, geo, groups):
        from . import cpu_conv
        return cpu_conv.input_grad(grad_out, w, x_shape, geo) if cpu_conv.depthwise(x_shape, w.shape, groups) else None

    def _conv2d_weight_grad_kernel(self, grad_out, x, w_shape, geo, bias, groups, out_cl=False):
        from . import cpu_conv
        return cpu_conv.weight_grad(grad_out, x, w_shape, geo, bias) if cpu_conv.depthwise(x.shape, w_shape, groups) \
            else None
