"""The argument policy of layernorm, rmsnorm and batch_norm (forward and backward), shared by every
backend as a mixin of Backend.

Inputs are coerced to the backend's arrays, must share one supported dtype (DTypeError) and one
device (DeviceError), and must have consistent shapes (ShapeError); eps must be a finite number
> 0 (ValueError). Non-contiguous inputs are copied to contiguous ones. Only then do the numbers run,
in the backend's module (`_norm_module()`: cpu_normalization or kernels.normalization), on the
device of x (`_device_scope`).

Statistics (mean, rstd, save_mean, save_invstd) are float32, float64 for float64 input.
"""
from __future__ import annotations

import contextlib
import functools
import numbers

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError
from .checks import (check_bool, check_distinct, check_same_shape, check_writeable, finite_scalar, inverse_order,
                     require_array)
from .softmax_api import last_axis_rows


# arrays an op takes None for (absent); any other array argument is required
_OPTIONAL = frozenset({"weight", "bias", "gamma", "beta", "running_mean", "running_var", "residual",
                       "residual_grad"})
_BN_ACTIVATIONS = (None, "relu")   # batch_norm's fused activations
_FLOATS = ("float16", "bfloat16", "float32", "float64")


def is_float(dtype) -> bool:
    """Whether dtype is one of the float dtypes statistics may come in (bfloat16 included, whose
    NumPy kind is 'V', not 'f')."""
    return dtype.name in _FLOATS


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


# the least eps 16- and 32-bit data take: their statistics are in float32, where a smaller one is 0
# (and var + eps of a constant row 0, its rstd inf, its output NaN)
EPS_MIN_F32 = float(np.finfo(np.float32).smallest_subnormal)


def _check_eps(op: str, eps, x=None) -> float:
    """eps as a float, > 0 and finite; for x (the input as given) not float64, at least
    EPS_MIN_F32."""
    f = finite_scalar(op, "eps", eps)
    if f <= 0:
        raise ArgumentError(f"{op}: eps must be a finite number > 0 (got {eps!r})")
    dt = getattr(x, "dtype", None)
    if f < EPS_MIN_F32 and dt is not None and not str(dt).endswith("float64"):   # (torch's dtypes too)
        raise ArgumentError(f"{op}: eps must be at least {EPS_MIN_F32:.3g} for {dt} data, whose statistics are "
                            f"float32, where a smaller eps is 0 (got {eps!r})")
    return f


def _check_real(op: str, name: str, v) -> float:
    return finite_scalar(op, name, v)


@functools.lru_cache(maxsize=None)
def _bn_perm(nd: int) -> tuple:
    """The axes of an (N, C, *spatial) array in channels-last memory order: (N, *spatial, C)."""
    return (0, *range(2, nd), 1)


def _bn_channels_last(x) -> bool:
    """x is a non-empty (N, C, *spatial) view of C-contiguous (N, *spatial, C) memory, C > 1, and
    not C-contiguous itself (an array that is both keeps the plain layout): PyTorch's channels_last
    (and channels_last_3d). Batch norm then runs on its [N*spatial, C] rows and returns its result
    in the same layout."""
    if x.ndim < 3 or x.shape[1] <= 1 or x.size == 0 or x.flags.c_contiguous:
        return False
    return bool(x.transpose(_bn_perm(x.ndim)).flags.c_contiguous)


def _bn_activation(op: str, activation) -> bool:
    """Whether batch_norm's activation is relu (None: none); anything else is an ArgumentError."""
    if activation is not None and not (type(activation) is str and activation in _BN_ACTIVATIONS):
        raise ArgumentError(f"{op}: activation must be None or 'relu' (got {activation!r})")
    return activation == "relu"


def _bn_rows(x):
    """The [N*spatial, C] rows of a channels-last x (a view)."""
    return x.transpose(_bn_perm(x.ndim)).reshape(-1, x.shape[1])


def _bn_unrows(rows, shape: tuple):
    """The (N, C, *spatial) channels-last view of [N*spatial, C] rows, for an x of this shape."""
    return rows.reshape((shape[0], *shape[2:], shape[1])).transpose(inverse_order(_bn_perm(len(shape))))


class NormalizationOps:
    """layernorm, rmsnorm, batch_norm and their backward passes (mixed into Backend)."""

    # ---- hooks a backend fills in ----------------------------------------------------------
    def _norm_module(self):
        """The module with the implementations (signatures of cudakit.kernels.normalization)."""
        raise NotImplementedError

    def _device_scope(self, x):
        """A context manager under which work on x's device runs (the CPU needs none)."""
        return contextlib.nullcontext()

    def _ascontiguous(self, a):
        """`a` itself when C-contiguous, else a C-contiguous copy."""
        raise NotImplementedError

    def _norm_fast(self, kind: str, x, weight, bias, eps, normalized_ndim, stats: bool):
        """The forward through the backend's planned launch, or None (then the calls below run)."""
        return None

    def _norm_fast_rows(self, x, params: tuple, normalized_ndim):
        """x as a (rows, cols) view when the call needs no checks, copies or device switch: x a
        native C-contiguous array of a supported dtype on the current device normalised over its
        last dim, each parameter None or a contiguous (cols,) array like it; else None."""
        return None

    # ---- shared checks ---------------------------------------------------------------------
    def _norm_arrays(self, op: str, named: dict, stats: dict | None = None,
                     optional: frozenset = _OPTIONAL) -> tuple[dict, dict]:
        """Coerce the arrays (None stays None): `named` must share the first one's dtype; `stats`
        (per-row or per-channel statistics) are cast to the statistics dtype of that dtype. All on
        one device. Arrays of `named` not in `optional` must not be None (ArgumentTypeError).
        Returns (named, stats) with the same keys."""
        for a, v in named.items():
            if v is None and a not in optional:
                require_array(op, a, v)
        arrays = {a: self._coerce(v, a) for a, v in named.items() if v is not None}
        dts = {a: self._check_dtype(v, a, op) for a, v in arrays.items()}
        first = next(iter(dts))
        for a, d in dts.items():
            if d != dts[first]:
                raise DTypeError(f"{op}: {a} is {d} but {first} is {dts[first]}; every array must have "
                                 f"{first}'s dtype (cast with .astype())")
        st = {a: self._coerce(v, a) for a, v in (stats or {}).items() if v is not None}
        self._check_devices({**arrays, **st})
        acc = "float64" if dts[first] == "float64" else "float32"
        for a, v in st.items():
            if not is_float(v.dtype):
                raise DTypeError(f"{op}: {a} must be a float array: {', '.join(_FLOATS)} (got {v.dtype})")
            if v.dtype.name != acc:
                with self._device_scope(v):
                    st[a] = v.astype(acc)
        return {a: arrays.get(a) for a in named}, {a: st.get(a) for a in (stats or {})}

    @staticmethod
    def _normalized_ndim(op: str, x, params: dict, normalized_ndim) -> int:
        """How many trailing dims of x are normalised: `normalized_ndim`, else the ndim of the
        first given parameter, else 1. Parameters must have exactly those trailing dims' shape."""
        if normalized_ndim is None:
            given = [p for p in params.values() if p is not None]
            k = given[0].ndim if given else 1
        elif isinstance(normalized_ndim, bool) or not isinstance(normalized_ndim, numbers.Integral):
            raise ArgumentError(f"{op}: normalized_ndim must be an int (got {normalized_ndim!r})")
        else:
            k = int(normalized_ndim)
        if not 1 <= k <= x.ndim:
            raise ShapeError(f"{op}: cannot normalise the last {k} dims of x with shape {tuple(x.shape)}; "
                             f"x needs at least {max(k, 1)} dims and normalized_ndim must be >= 1")
        norm = tuple(x.shape[x.ndim - k:])
        if _prod(norm) == 0:
            raise ShapeError(f"{op}: the normalized dims {norm} of x {tuple(x.shape)} are empty")
        for name, p in params.items():
            if p is not None and tuple(p.shape) != norm:
                raise ShapeError(f"{op}: {name} must have shape {norm} (the normalized trailing dims of x "
                                 f"{tuple(x.shape)}); got {tuple(p.shape)}")
        return k

    def _rows_stat(self, op: str, name: str, s, lead: tuple):
        if s is None:
            raise ArgumentError(f"{op}: {name} is required (the value the forward returned)")
        if _prod(s.shape) != _prod(lead) or (s.ndim > 1 and tuple(s.shape) != lead):
            raise ShapeError(f"{op}: {name} must have shape {lead} (one value per normalised row); "
                             f"got {tuple(s.shape)}")
        return self._ascontiguous(s).reshape(_prod(lead))

    def _flat(self, a, shape):
        return None if a is None else self._ascontiguous(a).reshape(shape)

    # ---- layernorm -------------------------------------------------------------------------
    def layernorm(self, x, weight=None, bias=None, eps: float = 1e-5, normalized_ndim=None):
        """Layer normalisation over the trailing dims of x: (x - mean) / sqrt(var + eps) * weight + bias.

        x: any shape, float16/bfloat16/float32/float64; weight, bias: the shape of the normalised
        trailing dims (x.shape[-k:], k = normalized_ndim, default weight.ndim or 1), x's dtype, or
        None. var is the biased variance; statistics accumulate in float32 (float64 for float64),
        so eps (> 0) must be at least 1.4e-45, the least float32 above 0, for 16- and 32-bit x.
        Returns y with x's shape and dtype.
        """
        r = self._norm_fast("ln", x, weight, bias, eps, normalized_ndim, False)
        return r if r is not None else self.layernorm_with_stats(x, weight, bias, eps, normalized_ndim)[0]

    def layernorm_with_stats(self, x, weight=None, bias=None, eps: float = 1e-5, normalized_ndim=None):
        """layernorm() that also returns the statistics its backward needs: (y, mean, rstd), mean and
        rstd of shape x.shape[:-k], float32 (float64 for float64 x), rstd = 1 / sqrt(var + eps)."""
        r = self._norm_fast("ln", x, weight, bias, eps, normalized_ndim, True)
        if r is not None:
            return r
        op = "layernorm"
        eps = _check_eps(op, eps, x)
        r = self._norm_fast_rows(x, (weight, bias), normalized_ndim)
        if r is not None:  # the common call, with a fraction of the host time of the checks below
            y, mean, rstd = self._norm_module().layernorm_forward(r, weight, bias, eps)
            return (y, mean, rstd) if x.ndim == 2 else (y.reshape(x.shape), mean.reshape(x.shape[:-1]),
                                                        rstd.reshape(x.shape[:-1]))
        a, _ = self._norm_arrays(op, {"x": x, "weight": weight, "bias": bias})
        x, w, b = a["x"], a["weight"], a["bias"]
        k = self._normalized_ndim(op, x, {"weight": w, "bias": b}, normalized_ndim)
        lead, cols = tuple(x.shape[:x.ndim - k]), _prod(x.shape[x.ndim - k:])
        with self._device_scope(x):
            y, mean, rstd = self._norm_module().layernorm_forward(
                self._flat(x, (_prod(lead), cols)), self._flat(w, cols), self._flat(b, cols), eps)
        return y.reshape(x.shape), mean.reshape(lead), rstd.reshape(lead)

    def layernorm_backward(self, grad_out, x, weight, mean, rstd, normalized_ndim=None, *, residual_grad=None):
        """Gradients of layernorm: (dx, dweight, dbias).

        grad_out, x: one shape and dtype; weight: as given to the forward, or None; mean, rstd: from
        layernorm_with_stats (shape x.shape[:-k]). dx has x's shape; dweight (None when weight is
        None) and dbias have the normalised dims' shape and x's dtype, and are bitwise reproducible
        from run to run (a fixed reduction order).

        residual_grad: None, or an array of x's shape and dtype added to dx in the pass that writes
        it, rounded once: the whole gradient of x in a pre-norm residual block (x + f(layernorm(x))),
        where the residual path's gradient would otherwise take an add pass (a read of both and a
        write) after this one.
        """
        op = "layernorm_backward"
        a, st = self._norm_arrays(op, {"x": x, "grad_out": grad_out, "weight": weight,
                                       "residual_grad": residual_grad}, {"mean": mean, "rstd": rstd})
        x, g, w = a["x"], a["grad_out"], a["weight"]
        lead, norm, rows, cols = self._backward_layout(op, x, g, w, st["mean"], normalized_ndim)
        with self._device_scope(x):
            res = self._residual_grad(op, x, a["residual_grad"], (rows, cols))
            m = self._rows_stat(op, "mean", st["mean"], lead)
            r = self._rows_stat(op, "rstd", st["rstd"], lead)
            dx, dw, db = self._norm_module().layernorm_backward(
                self._flat(g, (rows, cols)), self._flat(x, (rows, cols)), self._flat(w, cols), m, r, residual=res)
        return dx.reshape(x.shape), None if dw is None else dw.reshape(norm), db.reshape(norm)

    def _residual_grad(self, op, x, res, shape):
        """residual_grad (checked: x's shape) as a C-contiguous (rows, cols) array, or None."""
        if res is None:
            return None
        check_same_shape(op, "residual_grad", res, x.shape)
        return self._flat(res, shape)

    def _backward_layout(self, op, x, g, w, stat, normalized_ndim):
        """(lead dims, normalised dims, rows, cols) of a layernorm/rmsnorm backward; grad_out must
        have x's shape; without weight, the normalised dims follow from the saved statistic's rank."""
        check_same_shape(op, "grad_out", g, x.shape)
        if normalized_ndim is None and w is None and stat is not None and stat.ndim < x.ndim:
            normalized_ndim = max(1, x.ndim - stat.ndim)
        k = self._normalized_ndim(op, x, {"weight": w}, normalized_ndim)
        lead, norm = tuple(x.shape[:x.ndim - k]), tuple(x.shape[x.ndim - k:])
        return lead, norm, _prod(lead), _prod(norm)

    # ---- rmsnorm ---------------------------------------------------------------------------
    def rmsnorm(self, x, weight=None, eps: float = 1e-6, normalized_ndim=None):
        """RMS normalisation over the trailing dims of x: x / sqrt(mean(x^2) + eps) * weight.

        Shapes and dtypes as layernorm(). Returns y with x's shape and dtype.
        """
        r = self._norm_fast("rms", x, weight, None, eps, normalized_ndim, False)
        return r if r is not None else self.rmsnorm_with_stats(x, weight, eps, normalized_ndim)[0]

    def rmsnorm_with_stats(self, x, weight=None, eps: float = 1e-6, normalized_ndim=None):
        """rmsnorm() that also returns rstd = 1 / sqrt(mean(x^2) + eps), shape x.shape[:-k],
        float32 (float64 for float64 x): (y, rstd)."""
        r = self._norm_fast("rms", x, weight, None, eps, normalized_ndim, True)
        if r is not None:
            return r
        op = "rmsnorm"
        eps = _check_eps(op, eps, x)
        r = self._norm_fast_rows(x, (weight,), normalized_ndim)
        if r is not None:
            y, rstd = self._norm_module().rmsnorm_forward(r, weight, eps)
            return (y, rstd) if x.ndim == 2 else (y.reshape(x.shape), rstd.reshape(x.shape[:-1]))
        a, _ = self._norm_arrays(op, {"x": x, "weight": weight})
        x, w = a["x"], a["weight"]
        k = self._normalized_ndim(op, x, {"weight": w}, normalized_ndim)
        lead, cols = tuple(x.shape[:x.ndim - k]), _prod(x.shape[x.ndim - k:])
        with self._device_scope(x):
            y, rstd = self._norm_module().rmsnorm_forward(
                self._flat(x, (_prod(lead), cols)), self._flat(w, cols), eps)
        return y.reshape(x.shape), rstd.reshape(lead)

    def rmsnorm_backward(self, grad_out, x, weight, rstd, normalized_ndim=None, *, residual_grad=None):
        """Gradients of rmsnorm: (dx, dweight); dweight None when weight is None, bitwise
        reproducible from run to run. Shapes and residual_grad as layernorm_backward()."""
        op = "rmsnorm_backward"
        a, st = self._norm_arrays(op, {"x": x, "grad_out": grad_out, "weight": weight,
                                       "residual_grad": residual_grad}, {"rstd": rstd})
        x, g, w = a["x"], a["grad_out"], a["weight"]
        lead, norm, rows, cols = self._backward_layout(op, x, g, w, st["rstd"], normalized_ndim)
        with self._device_scope(x):
            res = self._residual_grad(op, x, a["residual_grad"], (rows, cols))
            r = self._rows_stat(op, "rstd", st["rstd"], lead)
            dx, dw = self._norm_module().rmsnorm_backward(
                self._flat(g, (rows, cols)), self._flat(x, (rows, cols)), self._flat(w, cols), r, residual=res)
        return dx.reshape(x.shape), None if dw is None else dw.reshape(norm)

    # ---- batch norm ------------------------------------------------------------------------
    def _bn_check_x(self, op: str, x):
        if x.ndim < 2:
            raise ShapeError(f"{op}: x must be (N, C) or (N, C, *spatial); got shape {tuple(x.shape)} "
                             f"({x.ndim}-D)")

    def _bn_check_params(self, op: str, c: int, params: dict):
        for name, p in params.items():
            if p is not None and tuple(p.shape) != (c,):
                raise ShapeError(f"{op}: {name} must have shape ({c},) (one value per channel); "
                                 f"got {tuple(p.shape)}")

    def batch_norm(self, x, gamma=None, beta=None, running_mean=None, running_var=None,
                   training: bool = False, momentum: float = 0.1, eps: float = 1e-5, *, residual=None,
                   activation=None):
        """Batch normalisation over every axis but 1 of x, (N, C) or (N, C, *spatial).

        gamma, beta, running_mean, running_var: (C,) of x's dtype, or None. training=True: batch
        statistics, and running_mean / running_var (when given: arrays of this backend, separate in
        memory) are updated in place: r = (1 - momentum) * r + momentum * batch value, momentum in
        [0, 1], with the unbiased variance for running_var (as PyTorch). training=False: the running
        statistics, which are then required. eps > 0; for 16- and 32-bit x at least 1.4e-45, the
        least float32 above 0 (statistics are float32). Returns y with x's shape and dtype.

        Fused epilogue, as cuDNN's batch norm with BN_ADD_ACTIVATION: y = act(bn(x) + residual),
        in the pass that writes y (no extra read and write of y for the add and the activation),
        rounded once. residual: None or an array of x's shape and dtype (a ResNet block's skip
        path); activation: None or "relu". Gradients: with activation="relu" and no residual,
        batch_norm_backward(..., beta=beta, activation="relu") masks grad_out itself; with a
        residual, relu_backward(grad_out, y) is the gradient of bn(x) + residual (the residual's
        gradient too), then batch_norm_backward of it.
        """
        return self.batch_norm_with_stats(x, gamma, beta, running_mean, running_var, training,
                                          momentum, eps, residual=residual, activation=activation)[0]

    def batch_norm_with_stats(self, x, gamma=None, beta=None, running_mean=None, running_var=None,
                              training: bool = False, momentum: float = 0.1, eps: float = 1e-5, *,
                              residual=None, activation=None):
        """batch_norm() that also returns (save_mean, save_invstd), each (C,) float32 (float64 for
        float64 x), invstd = 1 / sqrt(var + eps): (y, save_mean, save_invstd)."""
        op = "batch_norm"
        relu = _bn_activation(op, activation)
        eps = _check_eps(op, eps, x)
        momentum = _check_real(op, "momentum", momentum)
        if not 0.0 <= momentum <= 1.0:   # (outside, the running variance can turn negative)
            raise ArgumentError(f"{op}: momentum must be in [0, 1] (got {momentum!r})")
        training = check_bool(op, "training", training)
        a, _ = self._norm_arrays(op, {"x": x, "gamma": gamma, "beta": beta, "running_mean": running_mean,
                                      "running_var": running_var, "residual": residual})
        x, res = a["x"], a["residual"]
        self._bn_check_x(op, x)
        if res is not None:
            check_same_shape(op, "residual", res, x.shape)
        c = int(x.shape[1])
        self._bn_check_params(op, c, {n: a[n] for n in ("gamma", "beta", "running_mean", "running_var")})
        rm, rv = a["running_mean"], a["running_var"]
        if (rm is None) != (rv is None):
            raise ArgumentError(f"{op}: give both running_mean and running_var, or neither")
        if not training and rm is None:
            raise ArgumentError(f"{op}: inference (training=False) needs running_mean and running_var")
        per_channel = x.size // c if c else 0
        if training and per_channel == 1:
            raise ArgumentError(f"{op}: training needs more than one value per channel (x has shape "
                                f"{tuple(x.shape)})")
        if training:   # validate everything before writing anything: both statistics are written
            for n, given in (("running_mean", running_mean), ("running_var", running_var)):
                if isinstance(given, (list, tuple, numbers.Number)):   # (made a new array: the update would be
                    raise ArgumentTypeError(f"{op}: with training=True {n} is updated in place, so it must be an "
                                            f"array (got {type(given).__name__})")   # lost with it)
                if a[n] is not None:
                    check_writeable(op, n, a[n])
            check_distinct(op, {"running_mean": rm, "running_var": rv})
        if x.size == 0:
            return self._bn_empty(x, rm, rv, training, eps)
        cl = _bn_channels_last(x)
        with self._device_scope(x):
            rm_c, rv_c = self._ascontiguous_opt(rm), self._ascontiguous_opt(rv)
            if res is not None:   # in x's layout (a copy where it is not)
                res = _bn_rows(self._as_channels_last(res)) if cl else self._ascontiguous(res)
            y, sm, si = self._norm_module().batch_norm_forward(
                _bn_rows(x) if cl else self._ascontiguous(x), self._ascontiguous_opt(a["gamma"]),
                self._ascontiguous_opt(a["beta"]), rm_c, rv_c, bool(training), momentum, eps, residual=res,
                relu=relu)
            for orig, cont in ((rm, rm_c), (rv, rv_c)):  # a strided running statistic: write back
                if cont is not orig and orig is not None:
                    orig[...] = cont
        return (_bn_unrows(y, x.shape) if cl else y), sm, si

    def _bn_empty(self, x, rm, rv, training: bool, eps: float):
        """batch_norm of an x without elements (N == 0, or an empty spatial dim): y is empty; the
        batch statistics of no values are NaN and the running statistics are left as they are
        (PyTorch skips their update too); inference returns the running statistics' values."""
        acc = "float64" if x.dtype.name == "float64" else "float32"
        c = int(x.shape[1])
        with self._device_scope(x):
            y = self.empty(tuple(x.shape), x.dtype)
            if training:
                sm, si = self.empty((c,), acc), self.empty((c,), acc)
                sm.fill(float("nan"))
                si.fill(float("nan"))
            else:
                sm = rm.astype(acc)
                si = (1.0 / (rv.astype(acc) + eps) ** 0.5).astype(acc)
        return y, sm, si

    def batch_norm_backward(self, grad_out, x, gamma, save_mean, save_invstd, *, beta=None, activation=None):
        """Gradients of training-mode batch_norm: (dx, dgamma, dbeta).

        grad_out, x: one shape and dtype; gamma: (C,) or None; save_mean, save_invstd: from
        batch_norm_with_stats. dx has x's shape; dgamma (None when gamma is None) and dbeta are
        (C,) of x's dtype, bitwise reproducible from run to run.

        activation="relu": the gradients of batch_norm(..., activation="relu") without residual,
        grad_out being the gradient of its output: grad_out counts where the forward's
        pre-activation bn(x) was above 0, recomputed here from x, gamma, beta (pass the forward's)
        and the saved statistics exactly as the forward computed it, so that no relu_backward pass
        (a read of grad_out and y, a write) runs. (A forward with a residual: see batch_norm.)
        """
        op = "batch_norm_backward"
        relu = _bn_activation(op, activation)
        a, st = self._norm_arrays(op, {"x": x, "grad_out": grad_out, "gamma": gamma, "beta": beta},
                                  {"save_mean": save_mean, "save_invstd": save_invstd})
        x, g = a["x"], a["grad_out"]
        self._bn_check_x(op, x)
        check_same_shape(op, "grad_out", g, x.shape)
        c = int(x.shape[1])
        self._bn_check_params(op, c, {"gamma": a["gamma"], "beta": a["beta"], **st})
        for n, v in st.items():
            if v is None:
                raise ArgumentError(f"{op}: {n} is required (the value batch_norm_with_stats returned)")
        with self._device_scope(x):
            if x.size == 0:   # sums over no values: zero gradients for gamma and beta
                return (self.empty(tuple(x.shape), x.dtype),
                        None if a["gamma"] is None else self.zeros((c,), x.dtype), self.zeros((c,), x.dtype))
            params = (self._ascontiguous_opt(a["gamma"]), self._ascontiguous(st["save_mean"]),
                      self._ascontiguous(st["save_invstd"]))
            beta = self._ascontiguous_opt(a["beta"])
            if not _bn_channels_last(x):
                return self._norm_module().batch_norm_backward(
                    self._ascontiguous(g), self._ascontiguous(x), *params, beta=beta, relu=relu)
            # channels-last x: grad_out in its layout (a copy where it is not), dx in it too
            dx, dgamma, dbeta = self._norm_module().batch_norm_backward(
                _bn_rows(self._as_channels_last(g)), _bn_rows(x), *params, beta=beta, relu=relu)
            return _bn_unrows(dx, x.shape), dgamma, dbeta

    def _as_channels_last(self, a):
        """An (N, C, *spatial) array in channels-last memory: a itself where it is, else a copy."""
        if _bn_channels_last(a):
            return a
        return self._ascontiguous(a.transpose(_bn_perm(a.ndim))).transpose(inverse_order(_bn_perm(a.ndim)))

    def _ascontiguous_opt(self, a):
        return None if a is None else self._ascontiguous(a)


class CpuNormalizationHooks(NormalizationOps):
    """The CPU backend's hooks: NumPy implementations, contiguous copies with NumPy."""

    def _norm_module(self):
        from . import cpu_normalization
        return cpu_normalization

    def _ascontiguous(self, a):
        import numpy as np
        return np.ascontiguousarray(a)


class CudaNormalizationHooks(NormalizationOps):
    """The CUDA backend's hooks: cudakit.kernels.normalization, run on the device of x."""

    def _norm_module(self):
        from ..kernels import normalization
        return normalization

    def _device_scope(self, x):
        from ..runtime import _cupy
        cp = _cupy.cupy()
        dev = x.data.device_id
        return contextlib.nullcontext() if dev == cp.cuda.runtime.getDevice() else cp.cuda.Device(dev)

    def _norm_fast(self, kind: str, x, weight, bias, eps, normalized_ndim, stats: bool):
        if normalized_ndim is not None and (type(normalized_ndim) is not int or normalized_ndim != 1):
            return None
        return self._norm_module().forward_fast(kind, x, weight, bias, eps, stats)

    def _norm_fast_rows(self, x, params: tuple, normalized_ndim):
        if normalized_ndim is not None and (type(normalized_ndim) is not int or normalized_ndim != 1):
            return None   # (True == 1: a bool takes the checked path, which refuses it)
        dev = self._get_device()
        r = last_axis_rows(x, self._array_type, dev)
        if r is None:
            return None
        cols = r.shape[1]
        for p in params:
            if p is not None and (type(p) is not self._array_type or p.dtype != x.dtype or p.shape != (cols,)
                                  or not p._c_contiguous or p.data.device_id != dev):
                return None
        return r

    def _ascontiguous(self, a):
        if a.flags.c_contiguous:   # the usual case, without cupy.ascontiguousarray's call cost
            return a
        from ..runtime import _cupy
        return _cupy.cupy().ascontiguousarray(a)
