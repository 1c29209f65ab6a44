"""The argument policy of softmax, log_softmax and cross_entropy, forward and backward, shared by
every backend as a mixin of Backend.

softmax / log_softmax and their backward passes take any shape and any axis: the axis is checked
(ShapeError; TypeError for a non-integer), arrays are coerced to the backend's, must share one
supported dtype (DTypeError) and one device (DeviceError). The last axis of a C-contiguous array
is the fast path (viewed as (rows, cols)); any other axis or layout is moved to the end with one
copy, and the result is copied back to a C-contiguous array of x's shape.

cross_entropy: logits (N, C) float16/bfloat16/float32/float64, targets (N,) of an integer dtype
(int32 and int64 natively, others are cast to int64). The loss is float32 for 16-bit and float32
logits, float64 for float64 logits; "mean" divides by the count of non-ignored targets (NaN when
every target is ignored, as torch). A target outside [0, C) that is not ignore_index raises
TargetIndexError: the CPU backend checks before computing; the CUDA backend counts them in a
one-block pass over the targets that runs before the main kernel (which never reads outside the
logits) and, so that no call synchronises (and every call can be captured in a CUDA graph),
records the first bad row in the device's error flag (runtime/device_errors.py):
TargetIndexError then comes from the next cudakit.check(), cudakit.synchronize() or
cudakit.to_host(), naming the op, the row and its target. validate=True checks eagerly instead
(one synchronisation per call), raising from the call itself.

Special values of softmax follow NumPy with the formula exp(x - max(x)) / sum(exp(x - max(x))):
a slice holding NaN or +inf, or only -inf, is NaN everywhere; -inf among finite values gives 0
(log_softmax: -inf).
"""
from __future__ import annotations

import numbers

from ..errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError, TargetIndexError
from .checks import check_bool, float_scalar

_REDUCTIONS = ("mean", "sum", "none")


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _check_reduction(op: str, reduction) -> str:
    if not isinstance(reduction, str) or reduction not in _REDUCTIONS:
        raise ArgumentError(f"{op}: reduction must be 'mean', 'sum' or 'none' (got {reduction!r})")
    return reduction


def _target_error(op: str, f: list) -> TargetIndexError:
    """The TargetIndexError of a device flag's words (first row, its target, bad count, C, n,
    ignore_index), or of the stat read back eagerly."""
    row, value, bad, c, n, ignore = f[:6]
    return TargetIndexError(
        f"{op}: targets[{row}] = {value} is out of range [0, {c}) and is not ignore_index ({ignore}); "
        f"{bad} of {n} targets are out of range")


def _deferred_target_error(op: str, f: list) -> TargetIndexError:
    e = _target_error(op, f)
    e.args = (e.args[0] + " (found on the device by an earlier asynchronous call; pass validate=True "
              "to check in the call itself)",)
    return e


_CE_OPS = ("cross_entropy", "cross_entropy_backward", "cross_entropy_with_grad")
_CE_CODE = {op: 1 + i for i, op in enumerate(_CE_OPS)}   # their device error codes
_registered = False


def _ce_err_code(op: str) -> int:
    global _registered
    if not _registered:
        from ..runtime import device_errors
        for o, code in _CE_CODE.items():
            device_errors.register(code, o, _deferred_target_error)
        _registered = True
    return _CE_CODE[op]


def _check_ignore(op: str, ignore_index) -> int:
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral):
        raise ArgumentTypeError(f"{op}: ignore_index must be an int (got {ignore_index!r})")
    if not -(1 << 63) <= int(ignore_index) < 1 << 63:   # (the kernels compare int64 targets with it)
        raise ArgumentError(f"{op}: ignore_index must be in [-2^63, 2^63) (got {ignore_index!r})")
    return int(ignore_index)


class SoftmaxOps:
    """softmax, log_softmax and cross_entropy, forward and backward (mixed into Backend)."""

    # ---- hooks a backend fills in ----------------------------------------------------------
    def _softmax_module(self):
        """The module with softmax_forward / softmax_backward (signatures of cudakit.kernels.softmax)."""
        raise NotImplementedError

    def _ce_module(self):
        """The module with cross_entropy (signature of cudakit.kernels.cross_entropy)."""
        raise NotImplementedError

    # ---- shared checks ---------------------------------------------------------------------
    @staticmethod
    def _softmax_axis(op: str, x, axis) -> int:
        if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
            raise ArgumentTypeError(f"{op}: axis must be an int (got {axis!r})")
        nd = x.ndim
        if nd == 0:
            raise ShapeError(f"{op}: x is 0-d; it needs at least one axis (got axis={axis})")
        if not -nd <= axis < nd:
            raise ShapeError(f"{op}: axis {axis} is out of range for x with shape {tuple(x.shape)} "
                             f"({nd}-D: axis must be in [{-nd}, {nd - 1}])")
        return int(axis) % nd

    def _softmax_arrays(self, op: str, named: dict) -> dict:
        arrays = {a: self._coerce(v, a) for a, v in named.items()}
        dts = {a: self._check_dtype(v, a, op) for a, v in arrays.items()}
        first = next(iter(arrays))
        for a, d in dts.items():
            if d != dts[first]:
                raise DTypeError(f"{op}: {a} is {d} but {first} is {dts[first]}; both must have one dtype "
                                 f"(cast with .astype())")
            if tuple(arrays[a].shape) != tuple(arrays[first].shape):
                raise ShapeError(f"{op}: {a} must have {first}'s shape {tuple(arrays[first].shape)}; "
                                 f"got {tuple(arrays[a].shape)}")
        self._check_devices(arrays)
        return arrays

    def _softmax_rows(self, a, ax: int):
        """a with axis `ax` last, as a C-contiguous (rows, cols) array."""
        if ax != a.ndim - 1:
            perm = [d for d in range(a.ndim) if d != ax] + [ax]
            a = a.transpose(perm)
        cols = int(a.shape[-1])
        return self._ascontiguous(a).reshape(_prod(a.shape[:-1]), cols)

    def _softmax_unrows(self, r, shape: tuple, ax: int):
        """Inverse of _softmax_rows for a result of x's `shape`: C-contiguous, axis ax back in place."""
        nd = len(shape)
        if ax == nd - 1:
            return r.reshape(shape)
        moved = tuple(shape[d] for d in range(nd) if d != ax) + (shape[ax],)
        inv = list(range(nd - 1))
        inv.insert(ax, nd - 1)
        return self._ascontiguous(r.reshape(moved).transpose(inv))

    def _softmax_fast_rows(self, x, axis):
        """x as a (rows, cols) view when it needs no checks, copies or device switch (a native
        C-contiguous array of a supported dtype on the current device, axis its last); else None."""
        return None

    def _softmax_fwd(self, op: str, x, axis, log: bool):
        r = self._softmax_fast_rows(x, axis)
        if r is not None:  # the common call, with a fraction of the host time of the general path
            y = self._softmax_module().softmax_forward(r, log)
            return y if x.ndim == 2 else y.reshape(x.shape)
        x = self._softmax_arrays(op, {"x": x})["x"]
        ax = self._softmax_axis(op, x, axis)
        with self._device_scope(x):
            y = self._softmax_module().softmax_forward(self._softmax_rows(x, ax), log)
            return self._softmax_unrows(y, tuple(x.shape), ax)

    def _softmax_bwd(self, op: str, grad_out, y, axis, log: bool):
        ry = self._softmax_fast_rows(y, axis)
        if ry is not None and type(grad_out) is type(y) and grad_out.dtype == y.dtype and grad_out.shape == y.shape:
            rg = self._softmax_fast_rows(grad_out, axis)
            if rg is not None:
                dx = self._softmax_module().softmax_backward(rg, ry, log)
                return dx if y.ndim == 2 else dx.reshape(y.shape)
        a = self._softmax_arrays(op, {"grad_out": grad_out, "y": y})
        g, y = a["grad_out"], a["y"]
        ax = self._softmax_axis(op, y, axis)
        with self._device_scope(y):
            dx = self._softmax_module().softmax_backward(self._softmax_rows(g, ax), self._softmax_rows(y, ax), log)
            return self._softmax_unrows(dx, tuple(y.shape), ax)

    # ---- softmax / log_softmax -------------------------------------------------------------
    def softmax(self, x, axis: int = -1):
        """exp(x - max) / sum(exp(x - max)) along `axis`.

        x: any shape (at least 1-D), float16/bfloat16/float32/float64; axis: an int in
        [-x.ndim, x.ndim). Returns y with x's shape and dtype (C-contiguous). Numerically stable
        (the max is subtracted); 16-bit inputs accumulate in float32. A slice holding NaN or +inf,
        or only -inf, gives NaN in the whole slice; an empty axis gives an empty result.
        """
        return self._softmax_fwd("softmax", x, axis, False)

    def log_softmax(self, x, axis: int = -1):
        """(x - max) - log(sum(exp(x - max))) along `axis`. Shapes, dtypes and special values as
        softmax(); -inf among finite values gives -inf."""
        return self._softmax_fwd("log_softmax", x, axis, True)

    def softmax_backward(self, grad_out, y, axis: int = -1):
        """Gradient of softmax from its OUTPUT y: dx = y * (grad_out - sum(grad_out * y)), the sum
        along `axis`. grad_out, y: one shape and dtype. Returns dx with y's shape and dtype."""
        return self._softmax_bwd("softmax_backward", grad_out, y, axis, False)

    def log_softmax_backward(self, grad_out, y, axis: int = -1):
        """Gradient of log_softmax from its OUTPUT y: dx = grad_out - exp(y) * sum(grad_out), the
        sum along `axis`. grad_out, y: one shape and dtype. Returns dx with y's shape and dtype."""
        return self._softmax_bwd("log_softmax_backward", grad_out, y, axis, True)

    # ---- cross entropy ---------------------------------------------------------------------
    def _ce_inputs(self, op: str, logits, targets, reduction, ignore_index):
        reduction = _check_reduction(op, reduction)
        ignore_index = _check_ignore(op, ignore_index)
        logits = self._coerce(logits, "logits")
        self._check_dtype(logits, "logits", op)
        targets = self._coerce(targets, "targets")
        if logits.ndim != 2:
            raise ShapeError(f"{op}: logits must be 2-D (N, C); got shape {tuple(logits.shape)} ({logits.ndim}-D)")
        if targets.dtype.kind not in "iu":
            raise DTypeError(f"{op}: targets must be an integer array (int32 or int64 class indices); "
                             f"got {targets.dtype}")
        n = int(logits.shape[0])
        if targets.ndim != 1 or int(targets.shape[0]) != n:
            raise ShapeError(f"{op}: targets must have shape ({n},) (one class index per row of logits "
                             f"{tuple(logits.shape)}); got {tuple(targets.shape)}")
        self._check_devices({"logits": logits, "targets": targets})
        with self._device_scope(logits):
            if targets.dtype.name == "uint64":   # past 2^63 a cast would wrap (to ignore_index, say): those
                xp, top = self._xp(), (1 << 63) - 1   # become an index out of range for every C that is not
                cap = top - 1 if ignore_index == top else top   # ignore_index (2^63 - 1 may be one)
                targets = xp.where(targets > top, xp.uint64(cap), targets)
            if targets.dtype.name not in ("int32", "int64"):
                targets = targets.astype("int64")
            return self._ascontiguous(logits), self._ascontiguous(targets), reduction, ignore_index

    def _ce_grad_loss(self, op: str, grad_loss, logits, reduction: str):
        """grad_loss as an array of the loss dtype: (1,) for "mean"/"sum", (N,) for "none"."""
        acc = "float64" if logits.dtype.name == "float64" else "float32"
        n = int(logits.shape[0])
        with self._device_scope(logits):
            if isinstance(grad_loss, numbers.Real) and not isinstance(grad_loss, bool):
                if reduction == "none":
                    raise ShapeError(f"{op}: reduction='none' needs grad_loss of shape ({n},); got a scalar")
                return self._scalar_array(float_scalar(op, "grad_loss", grad_loss), acc).reshape(1)
            gl = self._coerce(grad_loss, "grad_loss")
            self._check_dtype(gl, "grad_loss", op)
            self._check_devices({"logits": logits, "grad_loss": gl})
            want = (n,) if reduction == "none" else ()
            if tuple(gl.shape) != want and not (reduction != "none" and gl.size == 1):
                raise ShapeError(f"{op}: grad_loss must have shape {want} (the loss's shape for "
                                 f"reduction={reduction!r}); got {tuple(gl.shape)}")
            return self._ascontiguous(gl.astype(acc).reshape(-1))

    def _ce_defers(self) -> bool:
        """Whether out-of-range targets go to the device's error flag (no synchronisation)
        instead of being read back in the call."""
        return False

    def _ce_run(self, op, logits, targets, reduction, ignore_index, grad_loss, want_loss, want_grad,
                validate=False):
        with self._device_scope(logits):
            extra = {}
            defer = not validate and self._ce_defers()
            if defer:
                from ..runtime import device_errors
                extra = {"err": device_errors.flag(logits.data.device_id), "err_code": _ce_err_code(op)}
            loss, grad, stat = self._ce_module().cross_entropy(
                logits, targets, reduction, ignore_index, grad_loss, want_loss, want_grad, **extra)
            if defer:
                return loss, grad
            st = self.to_numpy(stat)
            if int(st[1]):
                i = int(st[2])
                v = int(self.to_numpy(targets[i:i + 1])[0])
                raise _target_error(op, [i, v, int(st[1]), int(logits.shape[1]), int(targets.shape[0]),
                                         ignore_index])
        return loss, grad

    def cross_entropy(self, logits, targets, reduction: str = "mean", ignore_index: int = -100, *,
                      validate: bool = False):
        """Cross-entropy loss of logits (N, C) against class indices targets (N,).

        loss_i = logsumexp(logits_i) - logits_i[targets_i], 0 where targets_i == ignore_index.
        logits: float16/bfloat16/float32/float64; targets: int32/int64 (other integer dtypes are
        cast). reduction: "mean" (sum / count of non-ignored targets; NaN when all are ignored),
        "sum", or "none". Returns a 0-d array ("mean"/"sum") or (N,) ("none") of float32 (float64
        for float64 logits). A target outside [0, C) that is not ignore_index raises
        TargetIndexError: from this call on the CPU backend or with validate=True (on CUDA one host
        synchronisation); otherwise on CUDA from the next cudakit.check() / synchronize() /
        to_host() (no synchronisation here; the loss of that row is NaN meanwhile).
        """
        op = "cross_entropy"
        validate = check_bool(op, "validate", validate, ints=True)
        lg, t, reduction, ignore_index = self._ce_inputs(op, logits, targets, reduction, ignore_index)
        return self._ce_run(op, lg, t, reduction, ignore_index, None, True, False, validate)[0]

    def cross_entropy_backward(self, grad_loss, logits, targets, reduction: str = "mean", ignore_index: int = -100,
                               *, validate: bool = False):
        """Gradient of cross_entropy with respect to logits: (softmax(logits) - onehot(targets)) *
        grad_loss (per row for "none"), divided by the count of non-ignored targets for "mean";
        0 in ignored rows. grad_loss: the loss's shape (a 0-d array or a number for "mean"/"sum",
        (N,) for "none"), any float dtype. Returns dlogits with logits' shape and dtype."""
        op = "cross_entropy_backward"
        validate = check_bool(op, "validate", validate, ints=True)
        lg, t, reduction, ignore_index = self._ce_inputs(op, logits, targets, reduction, ignore_index)
        gl = self._ce_grad_loss(op, grad_loss, lg, reduction)
        return self._ce_run(op, lg, t, reduction, ignore_index, gl, False, True, validate)[1]

    def cross_entropy_with_grad(self, logits, targets, reduction: str = "mean", ignore_index: int = -100, *,
                                validate: bool = False):
        """cross_entropy() and its gradient for grad_loss = 1 in one fused pass over the logits
        (read once, the gradient written once; the softmax is never stored): (loss, dlogits),
        as cross_entropy() and cross_entropy_backward()."""
        op = "cross_entropy_with_grad"
        validate = check_bool(op, "validate", validate, ints=True)
        lg, t, reduction, ignore_index = self._ce_inputs(op, logits, targets, reduction, ignore_index)
        return self._ce_run(op, lg, t, reduction, ignore_index, None, True, True, validate)


class CpuSoftmaxHooks(SoftmaxOps):
    """NumPy implementations (cudakit.backends.cpu_softmax)."""

    def _softmax_module(self):
        from . import cpu_softmax
        return cpu_softmax

    def _ce_module(self):
        from . import cpu_softmax
        return cpu_softmax


def _fast_dtypes() -> dict:
    from .base import supported_dtypes  # base imports this module: resolved on first call
    return supported_dtypes()


def last_axis_rows(x, array_type, device: int):
    """x as a (rows, cols) view over its last axis when an op can take it unchecked: an array of
    exactly `array_type`, C-contiguous, at least 1-D, of a supported dtype, with cols > 0, on
    `device`; else None. The shared test of the CUDA backend's fast calls."""
    if type(x) is not array_type or not x._c_contiguous:
        return None
    nd = x.ndim
    if nd == 0 or x.dtype not in _fast_dtypes():
        return None
    cols = x.shape[-1]
    if cols == 0 or x.data.device_id != device:
        return None
    return x if nd == 2 else x.reshape(x.size // cols, cols)


class CudaSoftmaxHooks(SoftmaxOps):
    """CUDA kernels (cudakit.kernels.softmax, cudakit.kernels.cross_entropy), on x's device."""

    def _softmax_module(self):
        from ..kernels import softmax
        return softmax

    def _ce_module(self):
        from ..kernels import cross_entropy
        return cross_entropy

    def _ce_defers(self) -> bool:
        return True

    def _softmax_fast_rows(self, x, axis):
        if type(axis) is not int or (axis != -1 and axis != getattr(x, "ndim", 0) - 1):
            return None
        return last_axis_rows(x, self._array_type, self._get_device())

    # the common call through a launch planned once per shape (kernels.softmax.forward_fast)
    def _softmax_fwd(self, op: str, x, axis, log: bool):
        if type(axis) is int and (axis == -1 or axis == getattr(x, "ndim", 0) - 1):
            y = self._softmax_module().forward_fast(x, log)
            if y is not None:
                return y
        return super()._softmax_fwd(op, x, axis, log)

    def _softmax_bwd(self, op: str, grad_out, y, axis, log: bool):
        if type(axis) is int and (axis == -1 or axis == getattr(y, "ndim", 0) - 1):
            dx = self._softmax_module().backward_fast(grad_out, y, log)
            if dx is not None:
                return dx
        return super()._softmax_bwd(op, grad_out, y, axis, log)
