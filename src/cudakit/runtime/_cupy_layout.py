"""Where CuPy keeps the fields that the native tiny-op path reads: byte offsets into its objects.

Why: reading an array's contiguity, size, shape, dtype and data pointer through attributes costs
about 0.6 us per tiny binary op (each getter builds a Python object), which is a tenth of
`cudakit.add` on 1,000 elements -- the op whose host time must not exceed torch.add's. CuPy's
`ndarray` and `MemoryPointer` are Cython extension types with fixed C layouts, so the native code
can read those fields directly once it knows where they are.

The offsets are found, not assumed: `discover()` builds objects with known and distinct values
(fake device pointers and device ids; no GPU is touched and nothing is dereferenced on one) and
scans their memory; a field is accepted only when exactly one offset holds its value in every
probe, and the shape only where it is a vector (begin, end, capacity) whose elements are the shape.
Anything else (another CuPy, another layout) gives None and the native code reads attributes, as
it does for objects of any other type.
"""
from __future__ import annotations

import ctypes

_HEAD = object.__basicsize__   # reference count and type: never scanned
_ADDR_MAX = 1 << 56            # user-space addresses are below this on every 64-bit Linux

# the tuple handed to the native module, in this order
FIELDS = ("size", "shape", "c_contiguous", "dtype", "data", "ptr", "device_id", "strides")


def _raw(o) -> bytes:
    return ctypes.string_at(id(o), type(o).__basicsize__)


def _int(raw: bytes, off: int, width: int) -> int:
    return int.from_bytes(raw[off:off + width], "little", signed=True)


def _offset(objs, width: int, value) -> int:
    """The one offset (a multiple of `width`) where every object holds value(object)."""
    raws = [_raw(o) for o in objs]
    size = min(len(r) for r in raws)
    found = [off for off in range(_HEAD, size - width + 1, width)
             if all(_int(r, off, width) == value(o) for r, o in zip(raws, objs))]
    if len(found) != 1:
        raise LookupError(f"{len(found)} offsets match")
    return found[0]


def _vector_offset(arrays, values) -> int:
    """The offset of a vector field: (begin, end, capacity) pointers, end - begin = 8 * ndim, and
    the elements at begin are values(array) (the shape and the strides vectors have the same
    length: the values tell them apart)."""
    raws = [_raw(a) for a in arrays]
    size = min(len(r) for r in raws)
    found = []
    for off in range(_HEAD, size - 24 + 1, 8):
        ok = True
        for r, a in zip(raws, arrays):
            begin, end, cap = (_int(r, off + 8 * k, 8) for k in range(3))
            if not (0 < begin <= end <= cap < _ADDR_MAX and begin % 8 == 0 and end - begin == 8 * a.ndim):
                ok = False
                break
        # only a triple that looks like a vector in every probe is read through
        if ok and all(tuple(memoryview(ctypes.string_at(_int(r, off, 8), 8 * a.ndim)).cast("q")) == values(a)
                      for r, a in zip(raws, arrays)):
            found.append(off)
    if len(found) != 1:
        raise LookupError(f"{len(found)} vectors match")
    return found[0]


def discover(cp) -> tuple | None:
    """The offsets of FIELDS for this CuPy: ndarray (size, shape vector, _c_contiguous as a C
    int, dtype object, data object), MemoryPointer (ptr, device_id as a C int), and the ndarray's
    strides vector (read by plan_call's inline cache); or None."""
    import numpy as np
    try:
        mem = cp.cuda.memory
        mps = [mem.MemoryPointer(mem.UnownedMemory(ptr, 1 << 20, None, dev), 0)
               for ptr, dev in ((0x7F0012300000, 5), (0x7F0045600000, 9), (0x7F0078900000, 13))]
        arrays = [cp.ndarray((5, 7), np.float32, mps[0]),             # C order only
                  cp.ndarray((5, 7), np.float32, mps[1]).T,           # F order only
                  cp.ndarray((37,), np.float16, mps[2])[::2],         # neither
                  cp.ndarray((11,), np.int64, mps[0]),                # both
                  cp.ndarray((2, 3, 4), np.float64, mps[1])]          # C order, 3-D
        if [a._c_contiguous for a in arrays] != [True, False, False, True, True]:
            return None
        ptr = _offset(mps, 8, lambda o: o.ptr)
        dev = _offset(mps, 4, lambda o: o.device_id)
        size = _offset(arrays, 8, lambda a: a.size)
        shape = _vector_offset(arrays, lambda a: a.shape)
        strides = _vector_offset(arrays, lambda a: a.strides)
        contig = _offset(arrays, 4, lambda a: int(a._c_contiguous))
        dtype = _offset(arrays, 8, lambda a: id(a.dtype))
        data = _offset(arrays, 8, lambda a: id(a.data))
    except (LookupError, TypeError, ValueError, AttributeError):
        return None
    return size, shape, contig, dtype, data, ptr, dev, strides
