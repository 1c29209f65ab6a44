"""Scaled-dot-product attention on the CPU with NumPy, the contract of cudakit.kernels.attention:
[BH, L, D] arrays, float32 arithmetic for 16-bit and float32 data (float64 for float64), the
row log-sum-exp returned for the backward."""
from __future__ import annotations

import numpy as np


def _acc(x):
    return np.float64 if x.dtype == np.float64 else np.float32


def _probs(q, k, scale, causal, lse=None):
    """(P, lse) with P = softmax(q k^T * scale) per row (from a given lse when passed)."""
    acc = _acc(q)
    s = np.matmul(q.astype(acc), k.astype(acc).swapaxes(1, 2)) * acc(scale)
    if causal:
        lq, lk = s.shape[1:]
        s = np.where(np.arange(lk)[None, :] <= np.arange(lq)[:, None], s, -np.inf)
    if lse is None:
        m = s.max(axis=2, keepdims=True)
        lse = (m + np.log(np.exp(s - m).sum(axis=2, keepdims=True)))[..., 0]
    return np.exp(s - lse.astype(acc)[..., None]), lse


def forward(q, k, v, scale: float, causal: bool, dtype_name: str, block_n=None):
    """(out, lse) of softmax(q k^T * scale) v; lse float32 (float64 for float64)."""
    acc = _acc(q)
    with np.errstate(invalid="ignore", over="ignore"):
        p, lse = _probs(q, k, scale, causal)
        out = np.matmul(p, v.astype(acc)).astype(q.dtype)
    return out, lse.astype(acc)


def backward(do, q, k, v, out, lse, scale: float, causal: bool, dtype_name: str):
    """(dq, dk, dv): dV = P^T dO, dS = P (dO V^T - rowsum(dO * O)), dQ = dS K s, dK = dS^T Q s."""
    acc = _acc(q)
    with np.errstate(invalid="ignore", over="ignore"):
        p, _ = _probs(q, k, scale, causal, lse)
        g = do.astype(acc)
        delta = (g * out.astype(acc)).sum(axis=2, keepdims=True)
        dv = np.matmul(p.swapaxes(1, 2), g)
        ds = p * (np.matmul(g, v.astype(acc).swapaxes(1, 2)) - delta)
        dq = np.matmul(ds, k.astype(acc)) * acc(scale)
        dk = np.matmul(ds.swapaxes(1, 2), q.astype(acc)) * acc(scale)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)
