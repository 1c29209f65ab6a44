"""softmax, log_softmax and cross_entropy of the CPU backend, in NumPy, with the signatures and
semantics of cudakit.kernels.softmax and cudakit.kernels.cross_entropy.

16-bit inputs (float16, bfloat16) compute in float32 and round once; float32 in float32, float64
in float64. Special values follow the formula exp(x - max) / sum (NumPy's max propagates NaN):
a row holding NaN or +inf, or only -inf, is NaN everywhere; -inf among finite values gives 0
(log_softmax: -inf). Inputs are validated by the caller (Backend); arrays are C-contiguous.
"""
from __future__ import annotations

import numpy as np


def _acc(dtype) -> np.dtype:
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def _write(result, dtype, out):
    with np.errstate(over="ignore"):   # (a log-probability past float16's range rounds to -inf: no warning)
        r = result.astype(dtype)
    if out is None:
        return r
    out[...] = r
    return out


def softmax_forward(x2d, log: bool = False, out=None):
    """softmax (log=False) or log_softmax (log=True) of each row of x2d (rows, cols)."""
    acc = _acc(x2d.dtype)
    if x2d.size == 0:
        return _write(np.empty(x2d.shape, acc), x2d.dtype, out)
    with np.errstate(all="ignore"):
        xa = x2d.astype(acc, copy=False)
        xc = xa - xa.max(axis=1, keepdims=True)
        e = np.exp(xc)
        s = e.sum(axis=1, keepdims=True, dtype=acc)
        y = xc - np.log(s) if log else e / s
    return _write(y, x2d.dtype, out)


def softmax_backward(g2d, y2d, log: bool = False, out=None):
    """Gradient from the forward's output y: log=False: y * (g - sum(g*y)); log=True:
    g - exp(y) * sum(g); sums over each row of (rows, cols)."""
    acc = _acc(y2d.dtype)
    with np.errstate(all="ignore"):
        g, y = g2d.astype(acc, copy=False), y2d.astype(acc, copy=False)
        if log:
            dx = g - np.exp(y) * g.sum(axis=1, keepdims=True, dtype=acc)
        else:
            dx = y * (g - (g * y).sum(axis=1, keepdims=True, dtype=acc))
    return _write(dx, y2d.dtype, out)


def target_stats(targets, c: int, ignore_index: int) -> np.ndarray:
    """(count of non-ignored targets, count of those outside [0, c), index of the first of those
    or N) as int64[3], as the CUDA kernels' stat array."""
    t = targets.astype(np.int64, copy=False)
    keep = t != ignore_index
    bad = keep & ((t < 0) | (t >= c))
    nbad = int(bad.sum())
    first = int(np.argmax(bad)) if nbad else t.shape[0]
    return np.array([int(keep.sum()), nbad, first], np.int64)


def cross_entropy(logits, targets, reduction: str = "mean", ignore_index: int = -100, grad_loss=None,
                  want_loss: bool = True, want_grad: bool = False):
    """Cross-entropy of each row of logits (N, C) against targets (N,), and/or its gradient.

    grad_loss: None (the gradient of the loss itself) or an array of the accumulation dtype, shape
    (1,) ("mean"/"sum") or (N,) ("none"). Returns (loss, dlogits, stat) as
    cudakit.kernels.cross_entropy.cross_entropy; loss and dlogits are None when stat counts
    out-of-range targets (the caller raises).
    """
    n, c = logits.shape
    acc = _acc(logits.dtype)
    stat = target_stats(targets, c, ignore_index)
    if stat[1]:
        return None, None, stat
    t = targets.astype(np.int64, copy=False)
    use = t != ignore_index
    rows = np.nonzero(use)[0]
    tu = t[rows]
    loss_rows = np.zeros(n, acc)
    grad = None
    with np.errstate(all="ignore"):
        x = logits[rows].astype(acc, copy=False) if c else np.zeros((rows.size, 0), acc)
        if c:
            m = x.max(axis=1, keepdims=True)
            e = np.exp(x - m)
            s = e.sum(axis=1, keepdims=True, dtype=acc)
            loss_rows[rows] = ((m[:, 0] - x[np.arange(rows.size), tu]) + np.log(s[:, 0])).astype(acc)
        if want_grad:
            if reduction == "none":
                w = np.ones(n, acc) if grad_loss is None else np.asarray(grad_loss, acc).reshape(n)
            else:
                w0 = acc.type(1) if grad_loss is None else acc.type(np.asarray(grad_loss).reshape(-1)[0])
                w = np.full(n, w0 / acc.type(stat[0]) if reduction == "mean" else w0, acc)
            g = np.zeros((n, c), acc)
            if c and rows.size:
                wr = w[rows][:, None]
                gr = e / s * wr
                gr[np.arange(rows.size), tu] -= wr[:, 0]
                g[rows] = gr
            grad = g.astype(logits.dtype)
        loss = None
        if want_loss:
            if reduction == "none":
                loss = loss_rows
            else:
                total = loss_rows.sum(dtype=acc)
                loss = np.asarray(total / acc.type(stat[0]) if reduction == "mean" else total, acc)
    return loss, grad, stat
