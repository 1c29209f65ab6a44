"""Argument checks every op family shares: required arrays, writable outputs and in-place
arguments, Python scalars that must fit a float, integer parameters and result sizes with limits.

Each check raises a typed cudakit error (errors.ArgumentError / ArgumentTypeError / ShapeError)
naming the op, the argument, the value and the accepted range, so that a bad argument never
reaches NumPy, CuPy or a kernel (where it would surface as a bare AttributeError, OverflowError
or "assignment destination is read-only" -- or, worse, after another argument was written).
"""
from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError, ShapeError

# The largest array any op allocates: 256 TiB, more than any host or GPU holds. Beyond it the
# request is a mistake (a padding of 10**9, a 2**80-element mask), reported as one before NumPy's
# "array is too big" or an attempt to allocate petabytes.
MAX_BYTES = 1 << 48
# Integer geometry parameters (kernel sizes, strides, paddings, dilations) index memory in 32-bit
# arithmetic in the kernels: anything above this is refused by name.
MAX_INDEX = (1 << 31) - 1


def require_array(op: str, arg: str, x) -> None:
    """Raise ArgumentTypeError when a required array argument is None."""
    if x is None:
        raise ArgumentTypeError(f"{op}: {arg} is required and must be an array (got None)")


def require_out_array(op: str, out) -> None:
    """Raise ArgumentTypeError when `out` is a list, a tuple or a scalar: it would be copied into a
    new array first, and the result lost with the copy. (Anything the backend writes through, an
    array, a memoryview or an object with __array__, passes: _coerce takes it.)"""
    if isinstance(out, _COPIED):
        raise ArgumentTypeError(f"{op}: out must be an array to write the result into (got {type(out).__name__}: "
                                f"a copy of it would take the result)")


_COPIED = (list, tuple, numbers.Number, np.generic, str, bytes)   # what np.asarray copies (require_out_array)


def is_writeable(x) -> bool:
    """Whether x can be written in place (NumPy's WRITEABLE flag; CuPy arrays always can)."""
    flags = getattr(x, "flags", None)
    return bool(getattr(flags, "writeable", True)) if flags is not None else True


def check_writeable(op: str, arg: str, x) -> None:
    """Raise ArgumentError when x, which the op writes in place, is read-only."""
    if not is_writeable(x):
        raise ArgumentError(f"{op}: {arg} is read-only but {op} writes it in place; pass a writable array "
                            f"(x.flags.writeable = True, or a copy)")


def float_scalar(op: str, arg: str, v) -> float:
    """A Python or NumPy real (or a one-element array) as a float: an integer beyond float range
    (10**400) and an array of more than one element raise ArgumentError naming `arg`."""
    if isinstance(v, (bool, np.bool_)):
        raise ArgumentTypeError(f"{op}: {arg} must be a number (got the bool {v!r})")
    dt = getattr(v, "dtype", None)
    if isinstance(v, (complex, np.complexfloating)) or (isinstance(dt, np.dtype) and dt.kind == "c"):
        raise ArgumentTypeError(f"{op}: {arg} must be a real number (got the complex {_short(v)})")
    if not isinstance(v, numbers.Real):
        size = getattr(v, "size", None)
        if size is not None and size != 1:
            raise ArgumentError(f"{op}: {arg} must be a single number (got an array of shape "
                                f"{tuple(getattr(v, 'shape', ()))})")
        if size is None and not hasattr(v, "__float__"):
            raise ArgumentTypeError(f"{op}: {arg} must be a number (got {type(v).__name__} {v!r})")
        if size == 1 and getattr(v, "ndim", 0) > 0:   # (NumPy 2.4 refuses float() of an array of ndim > 0)
            v = v.reshape(())
    try:
        return float(v)
    except OverflowError:
        raise ArgumentError(f"{op}: {arg} = {_short(v)} is beyond the float range (|{arg}| must be "
                            f"< 1.8e308)") from None
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"{op}: {arg} must be a number (got {type(v).__name__} {_short(v)})") from None


def finite_scalar(op: str, arg: str, v) -> float:
    """float_scalar() that must also be finite."""
    f = float_scalar(op, arg, v)
    if not math.isfinite(f):
        raise ArgumentError(f"{op}: {arg} must be a finite number (got {f})")
    return f


# the largest |scale| the float32 arithmetic of the kernels takes (they scale by scale * log2(e) in
# float32, the CPU backend by scale in the data's float32): float16, bfloat16 and float32 data
F32_SCALE_MAX = float(np.finfo(np.float32).max) / math.log2(math.e)


def check_scale_range(op: str, scale: float, dtype_name: str) -> float:
    """scale, or ArgumentError where |scale| overflows the float32 arithmetic of 16- and 32-bit data
    (a finite Python float such as 1e39 would turn every output NaN)."""
    if dtype_name != "float64" and abs(scale) > F32_SCALE_MAX:
        raise ArgumentError(f"{op}: scale must be at most {F32_SCALE_MAX:.4g} in magnitude for {dtype_name} data, "
                            f"whose products are taken in float32 (got {scale!r})")
    return scale


def check_size(op: str, what: str, shape, itemsize: int) -> None:
    """Raise ShapeError when an array of `shape` and `itemsize` would exceed MAX_BYTES."""
    n = 1
    for d in shape:
        n *= int(d)
    if n * itemsize > MAX_BYTES:
        need = n * itemsize
        need = f"{need:.3g}" if need < 1e300 else f"about 1e{len(str(need)) - 1}"   # (float() of it overflows)
        raise ShapeError(f"{op}: {what} of shape {tuple(int(d) for d in shape)} would need {need} "
                         f"bytes, over the {MAX_BYTES:.3g} bytes (256 TiB) any array can have; check the shape "
                         f"and the geometry arguments")


def check_bool(op: str, arg: str, v, ints: bool = False) -> bool:
    """A yes/no flag: a bool (NumPy's included), or with ints=True also the ints 0 and 1; 'no', 2,
    None or an array raise ArgumentTypeError."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if ints and isinstance(v, numbers.Integral) and v in (0, 1):
        return bool(v)
    raise ArgumentTypeError(f"{op}: {arg} must be a bool (got {type(v).__name__} {_short(v)})")


def check_shape(op: str, arg: str, shape) -> tuple:
    """A shape: an int or a tuple/list of non-negative ints (bools, floats, strings and NumPy
    arrays of them are refused; '23' is not (2, 3)). Returns a tuple of Python ints."""
    if getattr(getattr(shape, "dtype", None), "kind", "") in ("i", "u"):   # an int array: its values
        shape = shape.tolist()
    if isinstance(shape, numbers.Integral) and not isinstance(shape, (bool, np.bool_)):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise ShapeError(f"{op}: {arg} must be an int or a tuple of ints (got {type(shape).__name__} {_short(shape)})")
    for d in shape:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, numbers.Integral):
            raise ShapeError(f"{op}: {arg} must hold ints (got {_short(shape)}: {d!r} is a {type(d).__name__})")
        if d < 0:
            raise ShapeError(f"{op}: {arg} must not have negative sizes (got {_short(shape)})")
    return tuple(int(d) for d in shape)


def check_same_shape(op: str, arg: str, a, shape, what: str = "x's shape") -> None:
    """ShapeError unless array `a` (argument `arg`) has `shape` (described as `what`)."""
    if tuple(a.shape) != tuple(shape):
        raise ShapeError(f"{op}: {arg} must have {what} {tuple(shape)} (got {tuple(a.shape)})")


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 40 else f"{s[:20]}...({len(s)} characters)"


def memory_span(a) -> tuple[int, int]:
    """(first byte address, one past the last) of the memory a NumPy or CuPy array spans (of a
    strided one, from its lowest element to its highest: the spans of two interleaved views cross,
    and check_distinct then asks NumPy whether they share an element)."""
    if isinstance(a, np.ndarray) or not hasattr(a, "data"):   # NumPy's .data is a buffer, not a pointer
        ptr = a.__array_interface__["data"][0]
    else:   # CuPy: a MemoryPointer
        ptr = a.data.ptr
    if a.flags.c_contiguous:   # (the usual case: the optimizers check every parameter each step)
        return int(ptr), int(ptr) + int(a.nbytes)
    lo = hi = int(ptr)
    for n, s in zip(a.shape, a.strides):
        if n > 1:
            if s > 0:
                hi += (n - 1) * s
            else:
                lo += (n - 1) * s
    return lo, hi + int(a.itemsize)


def check_distinct(op: str, arrays: dict) -> None:
    """Raise ArgumentError when two of `arrays` ({label: array the op updates in place}, None
    entries skipped) are the same array or overlap in memory -- one would be updated
    twice, or through the other -- naming both."""
    labels = list(arrays)
    spans = sorted((*memory_span(a), i) for i, a in enumerate(arrays.values()) if a is not None and a.nbytes)
    values = list(arrays.values())
    for (_s0, e0, i), (s1, _e1, j) in zip(spans, spans[1:]):
        if s1 < e0:
            a, b = values[i], values[j]
            if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and not (
                    a.flags.c_contiguous and b.flags.c_contiguous) and not np.shares_memory(a, b):
                continue   # interleaved strided views: their spans cross, their elements do not
            i, j = min(i, j), max(i, j)
            what = "are the same array" if arrays[labels[i]] is arrays[labels[j]] else "overlap in memory"
            raise ArgumentError(f"{op}: {labels[i]} and {labels[j]} {what}; every array updated in place "
                                f"must be a separate one")


@functools.lru_cache(maxsize=1024)
def dense_order(shape: tuple, strides: tuple, itemsize: int):
    """The axes of an array of this shape and these byte strides from its slowest to its fastest in
    memory, when the array covers one gapless block of memory once (a C-contiguous array, or a
    permutation of one: a channels-last view, a transpose); None otherwise (broadcast, sliced,
    negative strides). Size-1 axes, whose strides mean nothing, keep their place in C order.
    Remembered per (shape, strides, itemsize): the elementwise calls on channels-last activations
    ask it on every call."""
    if 0 in shape:
        return None
    big = sorted((a for a in range(len(shape)) if shape[a] != 1), key=lambda a: -strides[a])
    expect = itemsize
    for a in reversed(big):
        if strides[a] != expect:
            return None
        expect *= shape[a]
    it = iter(big)   # each size-1 axis stays at its index; the others fill the rest in memory order
    return tuple(a if shape[a] == 1 else next(it) for a in range(len(shape)))


def array_dense_order(a):
    """dense_order of array a (any type with shape, strides and itemsize)."""
    return dense_order(tuple(a.shape), tuple(a.strides), a.itemsize)


def shared_dense_order(arrays, shape: tuple):
    """dense_order of arrays that all have `shape` and one set of strides (elementwise operands the
    kernels may run over as flat memory, element i of each at one offset), else None."""
    shape, st = tuple(shape), arrays[0].strides
    for a in arrays:   # (a loop, not any(): the elementwise host-time path asks it per call)
        if a.strides != st or tuple(a.shape) != shape:
            return None
    return dense_order(shape, st, arrays[0].itemsize)


def empty_in_order(empty, shape, dtype, order: tuple):
    """A new array of `shape` whose memory holds its axes in `order` (dense_order's, slowest
    first): empty(the permuted shape, dtype), seen through the inverse permutation."""
    return empty(tuple(shape[a] for a in order), dtype).transpose(inverse_order(order))


@functools.lru_cache(maxsize=256)
def inverse_order(order: tuple) -> tuple:
    """The axes that undo the permutation `order`."""
    inv = [0] * len(order)
    for i, a in enumerate(order):
        inv[a] = i
    return tuple(inv)
