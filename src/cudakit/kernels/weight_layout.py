"""A convolution weight between its C-contiguous (K, C, R, S) memory and channels-last (K, R, S, C)
memory, for cuDNN's channels-last graphs (kernels/cudnn.py): the weight a call reads, and dL/dw
it writes, in that layout.

    ck_weight_layout_u{16,32}(x, y, kc, c, t, to_krsc)

x, y: the weight's words (2 or 4 bytes, whatever the dtype); kc = K C, t = R S. One thread per
(k, c): to_krsc, y[k, r, c] = x[k, c, r] for r < t (each warp's stores one coalesced row of y per
r; its loads a 2t-byte run a thread, read whole by the warp); else the reverse. cudakit's general
layout kernel (kernels/transpose.py) moves t = 9 rows of 18 bytes in 2-byte chunks: 44 us for a
512 x 512 x 3 x 3 bfloat16 weight on an H100 (2026-11-27 15:46 UTC, conv_nhwc_weight_ab.py).

Memory traffic: 2 x the weight's bytes.
"""
from __future__ import annotations

import numpy as np

from ..runtime import _cupy
from ..runtime import compiler as _compiler

THREADS = 256
_WORDS = {2: "unsigned short", 4: "unsigned int"}

SOURCE = "".join(f"""
extern "C" __global__ void __launch_bounds__({THREADS})
ck_weight_layout_u{8 * size}(const {word}* __restrict__ x, {word}* __restrict__ y, long long kc, int c, int t,
                           int to_krsc)
{{
  const long long i = (long long)blockIdx.x * {THREADS} + threadIdx.x;   // (k, c) = (i / c, i % c)
  if (i >= kc) return;
  const long long k = i / c, ci = i - k * c;
  if (to_krsc) {{
    for (int r = 0; r < t; ++r) y[(k * t + r) * c + ci] = x[i * t + r];
  }} else {{
    for (int r = 0; r < t; ++r) y[i * t + r] = x[(k * t + r) * c + ci];
  }}
}}
""" for size, word in _WORDS.items())
_module = None


def _function(dev: int, size: int):
    global _module
    if _module is None:
        _module = _compiler.compile_module(SOURCE, source_name="weight_layout.cu")
    return _module.get_kernel(f"ck_weight_layout_u{8 * size}")._function(dev)


def supported(dtype) -> bool:
    """Whether the kernel moves this dtype (2- and 4-byte elements)."""
    return np.dtype(dtype).itemsize in _WORDS


def to_krsc(w):
    """The C-contiguous weight w (K, C, R, S) as a (K, C, R, S) view of a new (K, R, S, C) array."""
    k, c, r, s = w.shape
    y = _cupy.loaded_cupy().empty((k, r, s, c), w.dtype)
    _launch(w, y, k * c, c, r * s, True)
    return y.transpose(0, 3, 1, 2)


def from_krsc(w):
    """A new C-contiguous (K, C, R, S) copy of w, a (K, C, R, S) view of C-contiguous (K, R, S, C)
    memory (to_krsc's layout)."""
    k, c, r, s = w.shape
    y = _cupy.loaded_cupy().empty((k, c, r, s), w.dtype)
    _launch(w, y, k * c, c, r * s, False)
    return y


def _launch(x, y, kc: int, c: int, t: int, to: bool) -> None:
    if kc == 0 or t == 0:
        return
    f = _function(x.data.device_id, x.dtype.itemsize)
    _compiler._launch_function(f"ck_weight_layout_u{8 * x.dtype.itemsize}", f, ((kc + THREADS - 1) // THREADS, 1, 1),
                               (THREADS, 1, 1), (x, y, np.int64(kc), np.int32(c), np.int32(t), np.int32(to)), 0,
                               None)
