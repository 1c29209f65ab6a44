"""A convolution weight between its C-contiguous (K, C, R, S) memory and channels-last (K, R, S, C)
memory, for cuDNN's channels-last graphs (kernels/cudnn.py): the weight a call reads, and dL/dw
it writes, in that layout. x, y: the weight's words (2 or 4 bytes, whatever the dtype); t = R S.

    ck_weight_to_krsc_u{16,32}(x, y, kc, c, t)            one thread per (k, c), kc = K C
    ck_weight_from_krsc_u{16,32}(x, y, c, t, cb, k0)      grid (ceil(C / cb), K), cb t words of shared memory

to_krsc: thread (k, c) copies its t taps, x[k, c, :] (one 2t-byte run), to y[k, r, c]: for each r
the warp's stores are one coalesced row. from_krsc: block (b, k) reads t rows of cb channels of
filter k0 + k (coalesced) into shared memory and writes their cb t words of y as one run. On an H100
(2026-11-27, bfloat16 ResNet-50 3x3 convolutions on channels-last activations, `cudakit bench`
against the plan probe's cuDNN graphs alone), a 512 x 512 x 3 x 3 weight's copy to (K, R, S, C)
took about 6 us by the thread-per-(k, c) kernel (15:41 UTC) and about 10 by the shared-memory one
(15:45 UTC), whose copy back ran the backward faster (7x7 to 512: 0.887x torch against 0.856x);
cudakit's general layout kernel (kernels/transpose.py) moves t = 9 rows of 18 bytes in 2-byte
chunks: 44 us (15:28 UTC, conv_nhwc_weight_ab.py).

Memory traffic: 2 x the weight's bytes.
"""
from __future__ import annotations

import numpy as np

from ..runtime import _cupy
from ..runtime import compiler as _compiler

THREADS = 256
SHARED_BYTES = 32768      # a block's staging buffer at most: cb t words
_MAX_GRID_Y = 65535
_WORDS = {2: "unsigned short", 4: "unsigned int"}

SOURCE = "".join(f"""
extern "C" __global__ void __launch_bounds__({THREADS})
ck_weight_to_krsc_u{8 * size}(const {word}* __restrict__ x, {word}* __restrict__ y, long long kc, int c, int t)
{{
  const long long i = (long long)blockIdx.x * {THREADS} + threadIdx.x;   // (k, c) = (i / c, i % c)
  if (i >= kc) return;
  const long long k = i / c, ci = i - k * c;
  for (int r = 0; r < t; ++r) y[(k * t + r) * c + ci] = x[i * t + r];
}}

extern "C" __global__ void __launch_bounds__({THREADS})
ck_weight_from_krsc_u{8 * size}(const {word}* __restrict__ x, {word}* __restrict__ y, int c, int t, int cb,
                              long long k0)
{{
  extern __shared__ __align__(16) unsigned char smem[];
  {word}* buf = reinterpret_cast<{word}*>(smem);          // [cb channels][t taps]
  const long long k = k0 + blockIdx.y;
  const int c0 = blockIdx.x * cb;
  const int n = min(cb, c - c0);                          // this block's channels
  const int m = n * t;
  for (int i = threadIdx.x; i < m; i += {THREADS}) {{     // row r of n channels: x[k, r, c0 + j]
    const int r = i / n, j = i - r * n;
    buf[j * t + r] = x[(k * t + r) * c + c0 + j];
  }}
  __syncthreads();
  const long long run = (k * c + c0) * t;                 // their words of (K, C, T), contiguous
  for (int i = threadIdx.x; i < m; i += {THREADS}) y[run + i] = buf[i];
}}
""" for size, word in _WORDS.items())
_module = None


def _function(dev: int, name: str):
    global _module
    if _module is None:
        _module = _compiler.compile_module(SOURCE, source_name="weight_layout.cu")
    return _module.get_kernel(name)._function(dev)


def supported(dtype, taps: int = 1) -> bool:
    """Whether the kernel moves a weight of this dtype (2- and 4-byte elements) and window (R S
    taps, one channel's of which a block stages)."""
    e = np.dtype(dtype).itemsize
    return e in _WORDS and 0 < taps * e <= SHARED_BYTES


def to_krsc(w):
    """The C-contiguous weight w (K, C, R, S) (supported: its dtype and window) as a (K, C, R, S)
    view of a new (K, R, S, C) array."""
    k, c, r, s = w.shape
    y = _cupy.loaded_cupy().empty((k, r, s, c), w.dtype)
    if y.size:
        e = w.dtype.itemsize
        name = f"ck_weight_to_krsc_u{8 * e}"
        _compiler._launch_function(name, _function(w.data.device_id, name), (-(-k * c // THREADS), 1, 1),
                                   (THREADS, 1, 1), (w, y, np.int64(k * c), np.int32(c), np.int32(r * s)), 0, None)
    return y.transpose(0, 3, 1, 2)


def from_krsc(w):
    """A new C-contiguous (K, C, R, S) copy of w, a (K, C, R, S) view of C-contiguous (K, R, S, C)
    memory (to_krsc's layout; supported: its dtype and window)."""
    k, c, r, s = w.shape
    y = _cupy.loaded_cupy().empty((k, c, r, s), w.dtype)
    if y.size:
        e, t = w.dtype.itemsize, r * s
        name = f"ck_weight_from_krsc_u{8 * e}"
        f, cb = _function(w.data.device_id, name), channels_per_block(c, t, e)
        for k0 in range(0, k, _MAX_GRID_Y):
            _compiler._launch_function(name, f, (-(-c // cb), min(_MAX_GRID_Y, k - k0), 1), (THREADS, 1, 1),
                                       (w, y, np.int32(c), np.int32(t), np.int32(cb), np.int64(k0)), cb * t * e, None)
    return y


def channels_per_block(c: int, t: int, itemsize: int) -> int:
    """cb: the channels a block stages, a power of two up to 256 whose cb t words fit SHARED_BYTES
    (at least 1: a window of up to SHARED_BYTES / itemsize taps)."""
    cb = 256
    while cb > 1 and cb * t * itemsize > SHARED_BYTES:
        cb //= 2
    return min(cb, 1 << max(0, (c - 1).bit_length()))
