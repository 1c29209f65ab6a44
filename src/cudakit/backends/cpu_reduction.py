"""Reductions of the CPU backend, in NumPy: sum, mean, max, min, argmax, argmin, var and the
backward passes of sum/mean, var, max/min, with the signatures and semantics of
cudakit.kernels.reduction.

Every dtype accumulates in float64 and rounds once to the input dtype: NumPy reduces a non-last
axis element by element (no pairwise summation), which in float32 loses accuracy over long columns;
float64 keeps the CPU at least as accurate as the CUDA kernels (float32 accumulation for 16-bit and
float32). var is two-pass (mean, then squared deviations). acc_out results are float32 for 16-bit
and float32 inputs (float64 for float64), as on CUDA. Inputs are validated by the caller (Backend): NumPy arrays of a supported
float dtype, axes sorted and non-negative.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError


def _acc(dtype) -> np.dtype:
    """The dtype results are computed in (float64 for every input; see the module docstring)."""
    return np.dtype(np.float64)


def _acc_out(dtype) -> np.dtype:
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _c(a):
    """A writable C-contiguous copy that keeps 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    return np.array(a, order="C")


def _grouped(x, axes: tuple):
    """x with the kept axes first (in order), then the reduced axes flattened into one last axis."""
    kept = [d for d in range(x.ndim) if d not in axes]
    moved = np.transpose(x, kept + list(axes))
    return moved.reshape(tuple(x.shape[d] for d in kept) + (_prod(x.shape[d] for d in axes),))


def reduce(x, op: str, axes: tuple, ddof: float = 0.0, acc_out: bool = False):
    """Reduce `axes` of x (sorted, non-negative; () reduces nothing) with op: "sum", "mean",
    "max", "min", "argmax", "argmin" or "var" (ddof: delta degrees of freedom).

    Returns an array with the kept axes' shape: x's dtype (the accumulation dtype with acc_out),
    int64 for argmax/argmin, whose index runs over the reduced axes flattened in C order. Empty
    reductions: sum 0, mean and var NaN; max/min/argmax/argmin raise ShapeError.
    """
    acc = _acc(x.dtype)
    odt = _acc_out(x.dtype) if acc_out else x.dtype
    R = _prod(x.shape[d] for d in axes)
    out_shape = tuple(x.shape[d] for d in range(x.ndim) if d not in axes)
    if op in ("max", "min", "argmax", "argmin") and R == 0 and _prod(out_shape) != 0:
        raise ShapeError(f"{op}: the reduction over axes {axes} of shape {tuple(x.shape)} is empty; "
                         f"{op} of an empty sequence has no value")
    if op in ("max", "min", "argmax", "argmin"):  # exact in any dtype: widen 16-bit only (NumPy's own loops)
        xa = x.astype(np.float32) if x.dtype.itemsize == 2 else x
    elif x.dtype == np.float64 and axes and (len(axes) > 1 or axes[-1] != x.ndim - 1):
        # NumPy sums a non-last axis sequentially; reduced axes made last and contiguous get its
        # pairwise sum (O(log n) error), as accurate as the CUDA kernels' tree order
        xa = np.ascontiguousarray(_grouped(x, axes))
        axes = (xa.ndim - 1,)
    else:
        xa = x.astype(acc, copy=False)
    with np.errstate(all="ignore"):
        if op in ("argmax", "argmin"):
            if _prod(out_shape) == 0:
                return np.empty(out_shape, np.int64)
            g = _grouped(xa, axes)
            r = (np.argmax if op == "argmax" else np.argmin)(g, axis=-1)
            return np.asarray(r).astype(np.int64).reshape(out_shape)
        if op in ("max", "min"):
            if _prod(out_shape) == 0:
                return np.empty(out_shape, odt)
            r = (np.max if op == "max" else np.min)(xa, axis=axes)
        elif op == "sum":
            r = np.sum(xa, axis=axes, dtype=acc)
        elif op == "mean":
            r = np.sum(xa, axis=axes, dtype=acc) / acc.type(R)
        elif op == "var":
            mean = np.sum(xa, axis=axes, dtype=acc, keepdims=True) / acc.type(R)
            dev = xa - mean
            r = np.sum(dev * dev, axis=axes, dtype=acc) / acc.type(max(R - ddof, 0))
        else:
            raise ValueError(f"unknown reduction {op!r}")
    with np.errstate(over="ignore"):  # a 16-bit sum may overflow to inf, as on CUDA
        return np.asarray(r).astype(odt).reshape(out_shape)


def _keep(g, x_shape, axes):
    """g (kept axes' shape) reshaped to broadcast against x_shape."""
    return np.asarray(g).reshape(tuple(1 if d in axes else n for d, n in enumerate(x_shape)))


def sum_backward(g, x_shape: tuple, axes: tuple, divisor: float = 1.0):
    """g / divisor broadcast to x_shape (sum: divisor 1, mean: N); g's dtype, C-contiguous."""
    acc = _acc(g.dtype)
    with np.errstate(all="ignore"):
        r = _keep(g, x_shape, axes).astype(acc) / acc.type(divisor)
    return _c(np.broadcast_to(r.astype(g.dtype), tuple(x_shape)))


def var_backward(g, x, axes: tuple, ddof: float):
    """g * 2 (x - mean) / (N - ddof) with mean over `axes`; x's dtype and shape."""
    acc = _acc(x.dtype)
    N = _prod(x.shape[d] for d in axes)
    xa = x.astype(acc)
    with np.errstate(all="ignore"):
        mean = np.sum(xa, axis=axes, dtype=acc, keepdims=True) / acc.type(N) if N else np.zeros((), acc)
        scale = acc.type(2.0 / (N - ddof)) if N - ddof > 0 else acc.type(np.inf)
        r = _keep(g, x.shape, axes).astype(acc) * (xa - mean) * scale
    return _c(r.astype(x.dtype))


def extreme_backward(g, x, axes: tuple, kind: str):
    """g at the first max (kind "max") / min ("min") position of each reduced group (the first
    NaN if any), zero elsewhere; x's dtype and shape."""
    if x.size == 0:
        return np.zeros(x.shape, x.dtype)
    idx = reduce(x, "argmax" if kind == "max" else "argmin", axes)
    kept = [d for d in range(x.ndim) if d not in axes]
    R = _prod(x.shape[d] for d in axes)
    hot = np.arange(R).reshape((1,) * len(kept) + (R,)) == idx[..., None]
    grp = np.where(hot, np.asarray(g, x.dtype)[..., None], np.zeros((), x.dtype))
    moved = grp.reshape(tuple(x.shape[d] for d in kept) + tuple(x.shape[d] for d in axes))
    inv = np.argsort(kept + list(axes))
    return _c(np.transpose(moved, inv))
