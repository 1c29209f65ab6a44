"""A low-overhead launch path for cudakit's own kernels and Triton's.

CuPy's Function.__call__ converts every argument through a chain of type checks (about 4.5 µs per
launch measured on an H200). A FastLauncher knows its kernel's parameter types up front (codes
of runtime/_native.c: Q 8-byte integer or pointer, i 4-byte integer, h 16-bit pattern, f float32,
d float64) and launches through the native launcher, which packs the values in C; where that is
unavailable (runtime/native.py says why) it fills ctypes cells and calls CuPy's typed driver
binding. Callers keep the profiler and CUDAKIT_LAUNCH_BLOCKING semantics by taking
runtime.compiler._launch_function when either is on.
"""
from __future__ import annotations

import ctypes
import threading

from . import native

_tls = threading.local()
_CELL = {"Q": ctypes.c_uint64, "i": ctypes.c_uint32, "h": ctypes.c_uint16, "f": ctypes.c_float, "d": ctypes.c_double}


def _raise(status: int):
    from cupy_backends.cuda.api import driver
    raise driver.CUDADriverError(status)


class FastLauncher:
    """Launches one CUfunction whose parameters have the types `codes` (a str, one code each)."""

    __slots__ = ("func", "codes", "_bcodes", "_native", "_launch")

    def __init__(self, func_ptr: int, codes: str):
        bad = set(codes) - set(_CELL)
        if bad:
            raise ValueError(f"unknown parameter codes {sorted(bad)} (expected some of {''.join(_CELL)})")
        from cupy_backends.cuda.api import driver
        self.func, self.codes, self._bcodes = func_ptr, codes, codes.encode()
        self._native = native.launcher()
        self._launch = driver.launchKernel

    def __call__(self, grid_x: int, block_x: int, values, stream_ptr: int, grid_yz=(1, 1), smem: int = 0) -> None:
        """Launch with `values` (Python ints and floats, one per code) on the stream `stream_ptr`.
        Raises CuPy's CUDADriverError when the driver refuses the launch."""
        nl = self._native
        if nl is not None:
            r = nl(self.func, grid_x, grid_yz[0], grid_yz[1], block_x, 1, 1, smem, stream_ptr, self._bcodes, *values)
            if r:
                _raise(r)
            return
        cells, _keep, params = self._buffers()
        for c, v in zip(cells, values):
            c.value = v
        self._launch(self.func, grid_x, grid_yz[0], grid_yz[1], block_x, 1, 1, smem, stream_ptr, params, 0)

    def _buffers(self):
        bufs = getattr(_tls, "bufs", None)
        if bufs is None:
            bufs = _tls.bufs = {}
        b = bufs.get((self.func, self.codes))
        if b is None:
            cells = [_CELL[c]() for c in self.codes]
            ptrs = (ctypes.c_void_p * len(cells))(*[ctypes.addressof(c) for c in cells])
            b = bufs[(self.func, self.codes)] = (cells, ptrs, ctypes.addressof(ptrs))
        return b
