"""The argument policy of sum, mean, max, min, argmax, argmin, var (and reduce_sum) and of their
backward passes, shared by every backend as a mixin of Backend.

x is coerced to the backend's arrays (DeviceError otherwise) and must have a supported float dtype
(DTypeError: float16, bfloat16, float32, float64). axis is None (every axis), an int (negative
counts from the end) or a tuple of ints; an axis out of range, a repeated axis, or a non-int axis
raises ShapeError (a ValueError) naming the value and x's ndim; argmax/argmin take None or one int.
Semantics follow NumPy: keepdims keeps reduced axes as size 1; an empty reduction gives sum 0 and
mean/var NaN, while max/min/argmax/argmin of one raise ShapeError (NumPy raises ValueError); NaN
propagates through sum/mean/max/min/var, and argmax/argmin return the first NaN's index.
Results have x's dtype (16-bit inputs accumulate in float32 and round once, float64 in double);
argmax/argmin return int64. A full reduction returns a 0-d array. Only then do the numbers run, in
the backend's module (`_reduction_module()`: cpu_reduction or kernels.reduction), on x's device.
"""
from __future__ import annotations

import numbers

from .checks import array_dense_order, check_bool, check_shape, check_size, finite_scalar, inverse_order
from ..errors import ArgumentTypeError, DTypeError, ShapeError


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _axes(op: str, axis, ndim: int, int_only: bool = False) -> tuple:
    """The sorted, non-negative axes that `axis` names for an array of `ndim` dims."""
    if axis is None:
        return tuple(range(ndim))
    if int_only and not _is_int(axis):
        raise ShapeError(f"{op}: axis must be None or an int (got {axis!r}); reduce one axis at a time")
    items = (axis,) if _is_int(axis) else axis
    if not isinstance(items, (tuple, list)):
        raise ShapeError(f"{op}: axis must be None, an int or a tuple of ints (got {axis!r})")
    out = []
    for a in items:
        if not _is_int(a):
            raise ShapeError(f"{op}: axis must be None, an int or a tuple of ints (got {axis!r})")
        a = int(a)
        if not -ndim <= a < ndim:
            raise ShapeError(f"{op}: axis {a} is out of range for an array with ndim {ndim} "
                             f"(valid: {-ndim}..{ndim - 1})" if ndim else
                             f"{op}: axis {a} is out of range for a 0-d array (ndim 0); use axis=None")
        a %= ndim
        if a in out:
            raise ShapeError(f"{op}: axis {a} is repeated in axis={axis!r} (ndim {ndim})")
        out.append(a)
    return tuple(sorted(out))


def _kept_shape(shape, axes, keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def _check_ddof(op: str, ddof) -> float:
    return finite_scalar(op, "ddof", ddof)


class ReductionOps:
    """sum, mean, max, min, argmax, argmin, var, reduce_sum and the backward passes (mixed into Backend)."""

    # ---- hooks a backend fills in ----------------------------------------------------------
    def _reduction_module(self):
        """The module with the implementations (signatures of cudakit.kernels.reduction)."""
        raise NotImplementedError

    # ---- shared checks ---------------------------------------------------------------------
    def _red_x(self, op: str, x, arg: str = "x"):
        x = self._coerce(x, arg)
        self._check_dtype(x, arg, op)
        return x

    def _red_fast(self, op: str, x, axis, keepdims):
        """The reduction through the backend's planned launches, or None (then the checked path runs)."""
        return None

    def _red_reduce(self, op: str, x, axis, keepdims: bool, ddof: float = 0.0, int_only: bool = False):
        r = self._red_fast(op, x, axis, keepdims) if not ddof and not int_only else None
        if r is not None:
            return r
        x = self._red_x(op, x)
        keepdims = check_bool(op, "keepdims", keepdims, ints=True)
        axes = _axes(op, axis, x.ndim, int_only)
        if op in ("max", "min", "argmax", "argmin") and _prod(x.shape[d] for d in axes) == 0:
            raise ShapeError(f"{op}: cannot reduce an empty array (axis={axis!r} of shape {tuple(x.shape)} "
                             f"has no elements); {op} of an empty sequence has no value")
        with self._device_scope(x):
            r = self._reduction_module().reduce(x, op, axes, ddof)
        return r.reshape(_kept_shape(x.shape, axes, bool(keepdims)))

    # ---- forward ---------------------------------------------------------------------------
    def sum(self, x, axis=None, keepdims: bool = False):
        """Sum of x over `axis`.

        x: any shape, float16/bfloat16/float32/float64 (any strides). axis: None (all axes), an int
        (negative counts from the end) or a tuple of ints. keepdims: keep the reduced axes as size 1.
        Returns x's dtype (16-bit inputs summed in float32 and rounded once; float64 in double) with
        the remaining axes' shape (0-d for a full reduction). An empty reduction sums to 0. CUDA:
        no atomics, bitwise the same from run to run.
        """
        return self._red_reduce("sum", x, axis, keepdims)

    def reduce_sum(self, x, axis=None):
        """sum(x, axis) (NeuralScript's name): the reduced axes are dropped."""
        return self._red_reduce("sum", x, axis, False)

    def mean(self, x, axis=None, keepdims: bool = False):
        """Arithmetic mean of x over `axis` (sum / count, computed in float32 for 16-bit, double for
        float64). Shapes and dtypes as sum(); an empty reduction gives NaN."""
        return self._red_reduce("mean", x, axis, keepdims)

    def max(self, x, axis=None, keepdims: bool = False):
        """Largest value of x over `axis`; NaN if the group holds a NaN. Shapes and dtypes as sum().
        Raises ShapeError for an empty reduction."""
        return self._red_reduce("max", x, axis, keepdims)

    def min(self, x, axis=None, keepdims: bool = False):
        """Smallest value of x over `axis`; NaN if the group holds a NaN. Shapes and dtypes as sum().
        Raises ShapeError for an empty reduction."""
        return self._red_reduce("min", x, axis, keepdims)

    def argmax(self, x, axis=None, keepdims: bool = False):
        """int64 index of the largest value of x along `axis` (an int), or into the flattened x (C
        order) when axis is None. Ties go to the first occurrence; a NaN counts as the largest (the
        first NaN wins), as NumPy. keepdims: the reduced axis (all axes for None) kept as size 1.
        Raises ShapeError for a tuple axis or an empty reduction."""
        return self._red_reduce("argmax", x, axis, keepdims, int_only=True)

    def argmin(self, x, axis=None, keepdims: bool = False):
        """int64 index of the smallest value along `axis` (None or an int); NaN counts as the
        smallest (the first NaN wins). As argmax() otherwise."""
        return self._red_reduce("argmin", x, axis, keepdims, int_only=True)

    def var(self, x, axis=None, ddof=0, keepdims: bool = False):
        """Variance of x over `axis`: sum((x - mean)^2) / (N - ddof), N the number of reduced
        elements (ddof=0: biased, PyTorch's unbiased=False; ddof=1: unbiased). N - ddof <= 0 gives
        inf or NaN as NumPy; an empty reduction NaN. Computed in float32 for 16-bit and float32
        input, double for float64, accurate for data with a large mean (shifted Welford on CUDA,
        two-pass on the CPU). Shapes and dtypes as sum()."""
        ddof = _check_ddof("var", ddof)
        return self._red_reduce("var", x, axis, keepdims, ddof=ddof)

    # ---- backward --------------------------------------------------------------------------
    def _red_grad(self, op: str, grad_out, x_shape, axis, keepdims: bool, dtype_of=None):
        """Validate grad_out against the result shape of reducing `axis` of x_shape; returns
        (grad_out reshaped to the kept axes' shape, axes)."""
        g = self._red_x(op, grad_out, "grad_out")
        keepdims = check_bool(op, "keepdims", keepdims, ints=True)
        ndim = len(x_shape)
        axes = _axes(op, axis, ndim)
        want = _kept_shape(x_shape, axes, bool(keepdims))
        if tuple(g.shape) != want:
            other = _kept_shape(x_shape, axes, not keepdims)
            raise ShapeError(f"{op}: grad_out must have shape {want} (the result of reducing axis={axis!r} "
                             f"of {tuple(x_shape)} with keepdims={bool(keepdims)}); got {tuple(g.shape)}"
                             + (f" (that is the keepdims={not keepdims} shape {other})"
                                if tuple(g.shape) == other else ""))
        if dtype_of is not None and g.dtype != dtype_of.dtype:
            raise DTypeError(f"{op}: grad_out is {g.dtype} but x is {dtype_of.dtype}; they must have one "
                             f"dtype (cast with .astype())")
        return g.reshape(_kept_shape(x_shape, axes, False)), axes

    def _red_shape(self, op: str, x_shape) -> tuple:
        shape = check_shape(op, "x_shape", x_shape)
        check_size(op, "the gradient", shape, 8)
        return shape

    def _grad_order(self, op: str, like, shape: tuple):
        """The memory order (checks.dense_order: axes slowest first) a gradient of `shape` takes from
        `like`, or None for C order: like's where it covers its memory densely in another order than
        C (a channels-last view, a transpose), C order for like None, C-contiguous or not dense."""
        if like is None:
            return None
        if not all(hasattr(like, a) for a in ("shape", "strides", "itemsize")):
            raise ArgumentTypeError(f"{op}: like must be an array (got {type(like).__name__})")
        if tuple(like.shape) != shape:
            raise ShapeError(f"{op}: like must have x_shape {shape} (its layout is the gradient's); "
                             f"got {tuple(like.shape)}")
        order = array_dense_order(like)
        return None if order is None or order == tuple(range(len(shape))) else order

    def _spread(self, g, shape: tuple, axes: tuple, divisor: float, order):
        """g / divisor broadcast back to `shape` over `axes`, laid out in `order` (None: C order):
        computed C-contiguous on the permuted shape, then seen through the inverse permutation."""
        if order is None:
            return self._reduction_module().sum_backward(g, shape, axes, divisor)
        kept = [a for a in range(len(shape)) if a not in axes]
        g = g.transpose([kept.index(a) for a in order if a not in axes])
        r = self._reduction_module().sum_backward(g, tuple(shape[a] for a in order),
                                                  tuple(i for i, a in enumerate(order) if a in axes), divisor)
        return r.transpose(inverse_order(order))

    def sum_backward(self, grad_out, x_shape, axis=None, keepdims: bool = False, *, like=None):
        """Gradient of sum(x, axis, keepdims) with respect to x: grad_out broadcast back to x_shape.

        grad_out: the shape sum() returned for an x of shape x_shape (with the same axis and
        keepdims), any float dtype. like: None, or an array of shape x_shape (the forward's x) whose
        memory layout the gradient takes where that layout is dense (a channels-last view, a
        transpose), as PyTorch's gradients keep x's memory format. Returns an array of shape x_shape
        and grad_out's dtype, C-contiguous unless like gives another dense layout.
        """
        shape = self._red_shape("sum_backward", x_shape)
        g, axes = self._red_grad("sum_backward", grad_out, shape, axis, keepdims)
        order = self._grad_order("sum_backward", like, shape)
        with self._device_scope(g):
            return self._spread(g, shape, axes, 1.0, order)

    def mean_backward(self, grad_out, x_shape, axis=None, keepdims: bool = False, *, like=None):
        """Gradient of mean(x, axis, keepdims): grad_out / N broadcast back to x_shape (N the number
        of reduced elements; 16-bit divided in float32, rounded once). Shapes and like as
        sum_backward(): mean_backward(g, x.shape, (2, 3), like=x) of a channels-last x (global average
        pooling) is channels-last too."""
        shape = self._red_shape("mean_backward", x_shape)
        g, axes = self._red_grad("mean_backward", grad_out, shape, axis, keepdims)
        order = self._grad_order("mean_backward", like, shape)
        n = _prod(shape[d] for d in axes)
        with self._device_scope(g):
            return self._spread(g, shape, axes, float(n) if n else float("nan"), order)

    def var_backward(self, grad_out, x, axis=None, ddof=0, keepdims: bool = False):
        """Gradient of var(x, axis, ddof, keepdims): grad_out * 2 (x - mean) / (N - ddof); where
        N - ddof <= 0 (var() divides by max(N - ddof, 0), as NumPy, and gives inf or NaN) the
        gradient is +-inf (NaN where x equals the mean or grad_out is 0).

        grad_out: the shape var() returned, x's dtype; x: the forward's input. The mean is taken
        in float32 (double for float64). Returns dx, C-contiguous, with x's shape and dtype.
        """
        op = "var_backward"
        ddof = _check_ddof(op, ddof)
        x = self._red_x(op, x)
        g, axes = self._red_grad(op, grad_out, tuple(x.shape), axis, keepdims, dtype_of=x)
        self._check_devices({"grad_out": g, "x": x})
        with self._device_scope(x):
            return self._reduction_module().var_backward(g, x, axes, ddof)

    def _red_extreme_backward(self, op: str, kind: str, grad_out, x, axis, keepdims):
        x = self._red_x(op, x)
        g, axes = self._red_grad(op, grad_out, tuple(x.shape), axis, keepdims, dtype_of=x)
        self._check_devices({"grad_out": g, "x": x})
        if _prod(x.shape[d] for d in axes) == 0:   # (as the forward refuses it, x empty or not)
            raise ShapeError(f"{op}: {kind} of an empty reduction (axis={axis!r} of shape {tuple(x.shape)}) "
                             f"has no value, so no gradient")
        with self._device_scope(x):
            return self._reduction_module().extreme_backward(g, x, axes, kind)

    def max_backward(self, grad_out, x, axis=None, keepdims: bool = False):
        """Gradient of max(x, axis, keepdims): grad_out goes to the position argmax picks in each
        reduced group (the first maximum, or the first NaN), zero elsewhere, as torch.max with
        indices. With several reduced axes the group is those axes flattened in C order.
        grad_out: the shape max() returned, x's dtype. Returns dx with x's shape and dtype."""
        return self._red_extreme_backward("max_backward", "max", grad_out, x, axis, keepdims)

    def min_backward(self, grad_out, x, axis=None, keepdims: bool = False):
        """Gradient of min(x, axis, keepdims): grad_out to the first minimum (or first NaN) of each
        reduced group, zero elsewhere. As max_backward()."""
        return self._red_extreme_backward("min_backward", "min", grad_out, x, axis, keepdims)


class CpuReductionHooks(ReductionOps):
    """The CPU backend's hooks: NumPy implementations (cudakit.backends.cpu_reduction)."""

    def _reduction_module(self):
        from . import cpu_reduction
        return cpu_reduction


class CudaReductionHooks(ReductionOps):
    """The CUDA backend's hooks: cudakit.kernels.reduction, run on the device of x."""

    def _reduction_module(self):
        from ..kernels import reduction
        return reduction

    def _red_fast(self, op: str, x, axis, keepdims):
        return self._reduction_module().reduce_fast(op, x, axis, keepdims)
