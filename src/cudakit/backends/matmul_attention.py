"""Scaled-dot-product attention by matrix products, with the array module of its inputs (NumPy on
the CPU backend; CuPy for float64 on the GPU, which the fused Triton kernels do not take): the
contract of cudakit.kernels.attention ([BH, L, D] arrays, float32 arithmetic for 16-bit and
float32 data, float64 for float64, the row log-sum-exp returned for the backward). The scores are
materialised a chunk of (batch-head, query rows) at a time, at most _SCORE_BYTES a chunk, so
memory stays bounded for long sequences. Grouped-query k, v ([BH / groups, Lk, D], each serving
`groups` consecutive q heads) are read in place: a chunk covers whole groups, its q heads seen as
[kv heads, groups, rows, D] against the kv heads broadcast, and dK, dV summed over each group by
the products themselves (no repeated heads)."""
from __future__ import annotations

import numpy as np

from .attention_masks import Masks

_SCORE_BYTES = 64 << 20   # bytes of one chunk's (heads, query rows, Lk) scores


def _xp(x):
    """The array module of x (CuPy imported only for a CuPy array: NumPy-only installs work)."""
    if isinstance(x, np.ndarray):
        return np
    import cupy
    return cupy


def _acc(x):
    return np.float64 if x.dtype == np.float64 else np.float32


def _chunks(bh: int, lq: int, lk: int, itemsize: int, groups: int = 1):
    """(heads slice, query-rows slice) chunks covering [bh, lq] with at most _SCORE_BYTES of scores
    (a row of each head at least); with groups > 1, whole groups of heads a chunk (their rows split
    where a group's scores pass the bound)."""
    per_row = max(1, lk * itemsize)
    per_head = max(1, lq * per_row)
    heads = max(1, _SCORE_BYTES // per_head)
    if groups > 1:
        heads = max(groups, heads // groups * groups)
    rows = max(1, lq) if heads * per_head <= _SCORE_BYTES else max(1, _SCORE_BYTES // (heads * per_row))
    for b0 in range(0, bh, heads):
        for r0 in range(0, lq, rows):
            yield slice(b0, min(bh, b0 + heads)), slice(r0, min(lq, r0 + rows))


def _kv_rows(hs, groups: int):
    """The rows of [BH / groups] k, v (and dK, dV) that the q heads hs read."""
    return hs if groups == 1 else slice(hs.start // groups, (hs.stop - 1) // groups + 1)


def _kv(x, hs, groups: int):
    """The k or v rows the q heads hs read: x[hs], or with groups > 1 the kv heads of those groups
    as [kv heads, 1, L, D] (broadcast over each group's q heads by _by_kv)."""
    rows = x[_kv_rows(hs, groups)]
    return rows if groups == 1 else rows[:, None]


def _by_kv(xp, a, b):
    """a [heads, rows, X] @ b: b [heads, X, Y], or [kv heads, 1, X, Y] from _kv (a's heads seen as
    [kv heads, heads / kv heads, rows, X]: one product per kv head's group, b read in place)."""
    if b.ndim == 3:
        return xp.matmul(a, b)
    return xp.matmul(a.reshape((b.shape[0], -1) + a.shape[1:]), b).reshape(a.shape[:2] + b.shape[-1:])


def _summed_kv(xp, a, b, nkv: int):
    """Sum over each kv head's q heads of a^T b: a [heads, rows, X], b [heads, rows, Y] (both
    C-contiguous: a chunk's own arrays) -> [nkv, X, Y] (the group's rows stacked: one product, summed by it)."""
    if nkv == a.shape[0]:
        return xp.matmul(a.swapaxes(1, 2), b)
    return xp.matmul(a.reshape(nkv, -1, a.shape[2]).swapaxes(1, 2), b.reshape(nkv, -1, b.shape[2]))


def _scores(xp, q, k, scale, masks, lq, hs, rs):
    """q k^T * scale (+ the bias) for the query rows rs of the [BH] entries hs (k: their rows, or
    _kv's grouped-query block), the keys a row does not see (masks: Masks) set to -inf."""
    acc = _acc(q)
    s = _by_kv(xp, q.astype(acc), k.astype(acc).swapaxes(-1, -2)) * acc(scale)
    bias = masks.bias_block(xp, hs, rs)
    if bias is not None:
        s = s + bias.astype(acc)
    ok = masks.allowed(xp, lq, s.shape[2], rs, hs)
    return s if ok is None else xp.where(ok, s, -xp.inf)


def _probabilities(xp, s):
    """(softmax of each score row, the row's log-sum-exp): exp(s - max) / sum, normalised by the
    max-subtracted sum itself. Never by exp(s - lse): lse = max + log(sum) rounds to max once
    |max| is large (1e8 in float32), and the rows would then lose their normalisation. A row that
    sees no key (every score -inf): probabilities 0, log-sum-exp -inf."""
    m = s.max(axis=2, keepdims=True)
    seen = m != -xp.inf
    e = xp.exp(s - xp.where(seen, m, 0))
    total = e.sum(axis=2, keepdims=True)
    safe = xp.where(seen, total, 1)
    return xp.where(seen, e / safe, 0), xp.where(seen, m + xp.log(safe), -xp.inf)


def forward(q, k, v, scale: float, causal: bool, dtype_name: str, block_n=None, masks=None, need_lse: bool = True,
            groups: int = 1, q_heads: int = 1):
    """(out, lse) of softmax(q k^T * scale) v; lse float32 (float64 for float64). block_n: the
    fused kernels' key block, no meaning here. masks: Masks (Masks(causal) when None). groups > 1:
    k, v are [BH / groups, Lk, D], read in place (q_heads: taken for the fused kernels' interface)."""
    xp, acc = _xp(q), _acc(q)
    masks = Masks(causal) if masks is None else masks
    bh, lq, _ = q.shape
    out = xp.empty(q.shape[:2] + (v.shape[2],), q.dtype)
    lse = xp.empty((bh, lq), acc)
    with np.errstate(invalid="ignore", over="ignore"):
        for hs, rs in _chunks(bh, lq, k.shape[1], np.dtype(acc).itemsize, groups):
            p, lse_c = _probabilities(xp, _scores(xp, q[hs, rs], _kv(k, hs, groups), scale, masks, lq, hs, rs))
            keep = masks.keep(xp, hs, rs, lq, k.shape[1])
            if keep is not None:   # dropout on the probabilities (the row sums stay the undropped ones)
                p = xp.where(keep, p * acc(masks.dropout[1]), 0)
            out[hs, rs] = _by_kv(xp, p, _kv(v, hs, groups).astype(acc)).astype(q.dtype)
            lse[hs, rs] = lse_c[..., 0]
    return out, lse


def backward(do, q, k, v, out, lse, scale: float, causal: bool, dtype_name: str, masks=None, deterministic=False,
             groups: int = 1, q_heads: int = 1):
    """(dq, dk, dv), and the bias's gradient dS (summed over the dims the bias broadcasts, float32
    or float64, the bias's 4-D shape) as a fourth when masks has a bias: dV = P^T dO,
    dS = P (dO V^T - rowsum(dO * O)), dQ = dS K s, dK = dS^T Q s, P recomputed chunk by chunk from
    the scores, normalised by their own max-subtracted sum (exp(s - lse) loses the normalisation
    where lse rounds to the row max); lse is the forward's, taken for the interface. dK, dV and the
    bias's gradient are summed over the chunks in a fixed order: deterministic whatever
    `deterministic` says. groups > 1: k, v [BH / groups, Lk, D] read in place, and dK, dV come back
    so, summed over each group's q heads in the accumulation type before their one rounding."""
    xp, acc = _xp(q), _acc(q)
    masks = Masks(causal) if masks is None else masks
    bh, lq, _ = q.shape
    dq = xp.empty(q.shape, acc)
    dk = xp.zeros(k.shape, acc)
    dv = xp.zeros(v.shape, acc)
    db = None if masks.bias is None else xp.zeros(masks.bias.shape, acc)
    with np.errstate(invalid="ignore", over="ignore"):
        for hs, rs in _chunks(bh, lq, k.shape[1], np.dtype(acc).itemsize, groups):
            kb, vb, kr = _kv(k, hs, groups).astype(acc), _kv(v, hs, groups).astype(acc), _kv_rows(hs, groups)
            nkv = kb.shape[0]
            p = _probabilities(xp, _scores(xp, q[hs, rs], kb, scale, masks, lq, hs, rs))[0]
            g = xp.ascontiguousarray(do[hs, rs].astype(acc))
            delta = (g * out[hs, rs].astype(acc)).sum(axis=2, keepdims=True)
            keep = masks.keep(xp, hs, rs, lq, k.shape[1])
            dp = _by_kv(xp, g, vb.swapaxes(-1, -2))
            if keep is not None:   # out = (P o M / (1 - p)) V: dV and dP through the same mask
                sd = acc(masks.dropout[1])
                dv[kr] += _summed_kv(xp, xp.where(keep, p * sd, 0), g, nkv)
                dp = xp.where(keep, dp * sd, 0)
            else:
                dv[kr] += _summed_kv(xp, p, g, nkv)
            ds = p * (dp - delta)
            dq[hs, rs] = _by_kv(xp, ds, kb) * acc(scale)
            dk[kr] += _summed_kv(xp, ds, xp.ascontiguousarray(q[hs, rs].astype(acc)), nkv) * acc(scale)
            if db is not None:
                _add_bias_grad(db, ds, masks, hs, rs)
        grads = dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)   # overflow to +-inf as IEEE
        return grads if db is None else grads + (db,)


def _add_bias_grad(db, ds, masks, hs, rs) -> None:
    """db (the bias's 4-D shape) += ds [heads, rows, Lk] of the [BH] entries hs and query rows rs,
    summed over the dims the bias broadcasts."""
    bi, hi = (np.asarray(x) for x in masks.bias_index(np, hs))
    if db.shape[3] == 1:
        ds = ds.sum(axis=2, keepdims=True)
    if db.shape[2] == 1:
        ds = ds.sum(axis=1, keepdims=True)
        rs = slice(0, 1)
    for j in range(ds.shape[0]):
        db[int(bi[j]), int(hi[j]), rs] += ds[j]
