"""Dropout kernels with counter-based random numbers (Philox4x32-10): the mask is recomputed from
(seed, element index) wherever it is needed, never stored.

Thread work: one Philox call (10 rounds of two 32x32->64-bit multiplies) gives the 4 words of the
group g = i // 4 of elements 4g..4g+3. An item of 4 elements (float32, float64) or 8 (two groups:
16-bit dtypes) moves with one 16-byte load and store (two for float64); each thread takes 2 items
per grid-stride step so that two loads are in flight while the Philox rounds run. 64-bit indices. Counter, key, threshold
and scaling are those of cudakit.backends.cpu_dropout (bit-identical results; see
backends/dropout_api.py for the definition).
Traffic: dropout / its backward: n * itemsize read + the same written; the mask: n bytes written.
"""
from __future__ import annotations

import numpy as np

from ._common import FLOAT_DTYPE_NAMES, KernelFamily, ctype, cuda_source

SOURCE_FILES = ("_pdl.cuh", "_preamble.cuh", "dropout.cu")
SOURCE = cuda_source(*SOURCE_FILES)

THREADS = 256
_WAVES = 8   # resident-block waves the grid covers at most (each thread then loops)


def name_expressions() -> list[str]:
    """Every template instantiation this module launches."""
    out = [f"ck_dropout{r}<{ctype(dt)}, {v}>" for r in ("", "_res") for dt in FLOAT_DTYPE_NAMES
           for v in ("true", "false")]
    return out + ["ck_dropout_mask<true>", "ck_dropout_mask<false>"]


_family = KernelFamily(SOURCE, name_expressions, "cudakit/dropout.cu")


def _grid(items_per_thread_step: int, nitems: int) -> tuple:
    from ..runtime.device import get_device_info
    sms = get_device_info().multiprocessors
    need = -(-nitems // (THREADS * items_per_thread_step))
    return (max(1, min(need, sms * (2048 // THREADS) * _WAVES)), 1, 1)


def _key(seed: int):
    return np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32)


def dropout(x, threshold: int, scale, seed: int, residual=None):
    """y = x * (word(i) >= threshold ? scale : 0) for a C-contiguous CuPy array x (float16,
    bfloat16, float32, float64) on the current device; scale: np.float32 (np.float64 for
    float64); residual: None or a C-contiguous array like x added to the product (ck_dropout_res).
    Returns a new array like x. Arguments validated by the caller."""
    from ..runtime import _cupy
    from ..runtime.compiler import _launch_function
    cp = _cupy.loaded_cupy()
    y = cp.empty(x.shape, x.dtype)
    n = x.size
    if n == 0:
        return y
    res = () if residual is None else (residual,)
    vec = (x.data.ptr | y.data.ptr | (residual.data.ptr if res else 0)) % 16 == 0
    expr = f"ck_dropout{'_res' if res else ''}<{ctype(x.dtype.name)}, {'true' if vec else 'false'}>"
    f = _family.function(x.data.device_id, expr)
    k0, k1 = _key(seed)
    acc = np.float64 if x.dtype == np.float64 else np.float32
    per_item = 8 if x.dtype.itemsize == 2 else 4
    _launch_function(expr, f, _grid(2, -(-n // per_item)), (THREADS, 1, 1),
                     (x, *res, y, np.int64(n), k0, k1, np.uint32(threshold), acc(scale)), 0, None)
    return y


def mask(shape, threshold: int, seed: int):
    """The keep-mask (bool CuPy array of `shape`, on the current device): word(i) >= threshold."""
    from ..runtime import _cupy
    from ..runtime.compiler import _launch_function
    cp = _cupy.loaded_cupy()
    m = cp.empty(shape, np.bool_)
    n = m.size
    if n == 0:
        return m
    vec = m.data.ptr % 4 == 0
    expr = f"ck_dropout_mask<{'true' if vec else 'false'}>"
    f = _family.function(m.data.device_id, expr)
    k0, k1 = _key(seed)
    _launch_function(expr, f, _grid(1, -(-n // 4)), (THREADS, 1, 1),
                     (m, np.int64(n), k0, k1, np.uint32(threshold)), 0, None)
    return m
