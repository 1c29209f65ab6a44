"""Dropout of the CPU backend, in NumPy, with the same counter-based random numbers as the CUDA
kernels (cudakit.kernels.dropout): both backends give bit-identical masks and outputs.

Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011;
Random123's philox4x32_10): key = (seed & 0xffffffff, seed >> 32); element i of the C-order
flattening uses output word i % 4 of the call with counter (g & 0xffffffff, g >> 32, 0, 0),
g = i // 4. Element i is kept iff that word >= threshold (an integer compare; see
dropout_api.threshold). Kept elements are multiplied by scale, dropped ones by 0, in float32 for
16-bit and float32 inputs (float64 for float64), rounded once to x's dtype.
"""
from __future__ import annotations

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57        # Philox multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85        # Weyl key increments (golden ratio, sqrt(3) - 1)
ROUNDS = 10
_MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32(counter, key, rounds: int = ROUNDS):
    """Philox4x32-`rounds` of counters `counter` (4 arrays of uint32, broadcastable) under `key`
    (two Python ints < 2^32). Returns 4 uint32 arrays (the output words 0..3)."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint64) for c in counter)
    k0, k1 = int(key[0]), int(key[1])
    m0, m1 = np.uint64(M0), np.uint64(M1)
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + W0) & 0xFFFFFFFF, (k1 + W1) & 0xFFFFFFFF
        p0, p1 = m0 * c0, m1 * c2          # < 2^64: exact in uint64
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
    return tuple(c.astype(np.uint32) for c in (c0, c1, c2, c3))


def random_words(n: int, seed: int) -> np.ndarray:
    """The uint32 word of each element 0..n-1 (C order) for `seed` (0 <= seed < 2^64)."""
    ng = -(-n // 4)
    g = np.arange(ng, dtype=np.uint64)
    zero = np.zeros((), np.uint64)
    words = philox4x32((g & _MASK32, g >> np.uint64(32), zero, zero), (seed & 0xFFFFFFFF, seed >> 32))
    return np.stack(words, axis=1).reshape(-1)[:n]


def mask(shape, threshold: int, seed: int) -> np.ndarray:
    """The keep-mask (bool, `shape`): element i kept iff its word >= threshold."""
    n = int(np.prod(shape, dtype=np.int64))
    return (random_words(n, seed) >= np.uint32(threshold)).reshape(shape)


def dropout(x, threshold: int, scale, seed: int, residual=None):
    """y = x * (keep ? scale : 0) for a C-contiguous x (float16, bfloat16, float32, float64);
    scale: np.float32 (np.float64 for float64 x). A dropped NaN or inf gives NaN (x * 0), as
    x * mask / (1 - p) does in NumPy and in torch. residual (like x or None): added to the
    product in the accumulation dtype, then rounded once to x's dtype."""
    keep = mask(x.shape, threshold, seed)
    acc = np.float64 if x.dtype == np.float64 else np.float32
    factor = np.where(keep, scale, acc(0)).astype(acc, copy=False)
    with np.errstate(all="ignore"):
        y = x.astype(acc, copy=False) * factor
        if residual is not None:
            y += residual.astype(acc, copy=False)
    return y.astype(x.dtype, copy=False) if y.dtype != x.dtype else y
