"""Which keys each query row of an attention sees: the masks beyond the plain product, shared by the
CPU path (backends/matmul_attention.py) and the GPU kernels (kernels/attention.py).

Row i of a batch attends the keys j with i + DLO <= j < i + DHI and j below the batch's key length
(key_lengths[b], Lk without): one interval a row. causal and window are aligned bottom-right, as
FlashAttention-2 does: query row i sits at key position i + Lk - Lq, so the last query sees the
last key (the same as PyTorch's top-left is_causal when Lq == Lk). A row whose interval is empty
attends nothing: its output is 0 and its log-sum-exp -inf.
"""
from __future__ import annotations

_UNBOUNDED = 1 << 30   # DLO / DHI of a side without a bound (past any length the kernels take)


def key_bounds(lq: int, lk: int, causal: bool, window=None) -> tuple[int, int]:
    """(DLO, DHI): query row i attends the keys j with i + DLO <= j < i + DHI. causal and window
    are aligned bottom-right, as FlashAttention-2 does: row i sits at key position i + Lk - Lq, so
    the last query row sees the last key (top-left, PyTorch's is_causal, when Lq == Lk). window
    (left, right): keys from left before to right after that position (None: no bound that side);
    causal caps right at 0."""
    off = lk - lq
    dlo, dhi = -_UNBOUNDED, _UNBOUNDED
    if window is not None:   # a side wider than lq + lk bounds nothing (and stays far from int32's end)
        left, right = window
        if left is not None:
            dlo = off - min(left, lq + lk)
        if right is not None:
            dhi = off + min(right, lq + lk) + 1
    if causal:
        dhi = min(dhi, off + 1)
    return dlo, dhi


def check_window(op: str, window):
    """window as None or a (left, right) tuple of ints >= 0 or None; ArgumentError naming it otherwise."""
    if window is None:
        return None
    import numpy as np
    from ..errors import ArgumentError, ArgumentTypeError
    msg = f"{op}: window must be None or (left, right), each an int >= 0 or None (got {window!r})"
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise (ArgumentError if isinstance(window, (tuple, list)) else ArgumentTypeError)(msg)
    if not all(w is None or (isinstance(w, (int, np.integer)) and not isinstance(w, (bool, np.bool_)))
               for w in window):
        raise ArgumentTypeError(msg)
    if any(w is not None and w < 0 for w in window):
        raise ArgumentError(msg)
    return tuple(None if w is None else int(w) for w in window)


def relative_bounds(causal: bool, window=None, cap: int = _UNBOUNDED) -> tuple[int, int]:
    """(DLO, DHI) of key_bounds before the bottom-right offset Lk - Lq is added: packed
    variable-length sequences add each sequence's own offset in the kernel. cap (> every
    sequence's Lq + Lk) bounds the window's sides, which bound nothing past it."""
    dlo, dhi = -_UNBOUNDED, _UNBOUNDED
    if window is not None:
        left, right = window
        if left is not None:
            dlo = -min(left, cap)
        if right is not None:
            dhi = min(right, cap) + 1
    if causal:
        dhi = min(dhi, 1)
    return dlo, dhi


class Masks:
    """What limits the keys each query row sees beyond the plain product: causal, window and the
    per-batch key lengths (a C-contiguous int32/int64 (B,) array on q's device; heads: how many
    consecutive [BH] entries share a length), and the additive score bias: a 4-D view (Bb, Hb, Lqb,
    Lkb) of attn_bias, each dim 1 (broadcast) or the full size, where [BH] entry t is batch
    t // bias_heads and head t % bias_heads. plain: causal at most, the case cuDNN's graphs take
    (kernels/cudnn.py aligns their causal mask bottom-right too)."""
    __slots__ = ("causal", "window", "lengths", "heads", "bias", "bias_heads", "dropout", "drop_index")

    def __init__(self, causal: bool, window=None, lengths=None, heads: int = 1, bias=None, bias_heads: int = 1,
                 dropout=None, drop_index=None):
        self.causal, self.window, self.lengths, self.heads = bool(causal), window, lengths, max(1, int(heads))
        self.bias, self.bias_heads = bias, max(1, int(bias_heads))
        self.dropout = dropout   # (threshold, scale, seed) of dropout on the probabilities, or None
        # (t0, LQ, LK): score (t, i, j) of these arrays is element ((t0 + t) LQ + i) LK + j of the
        # dropout stream (one packed sequence's heads in the (B, H, max_seqlen_q, max_seqlen_k)
        # layout the varlen kernels index); None: (t Lq + i) Lk + j of the arrays' own Lq, Lk
        self.drop_index = drop_index

    @property
    def plain(self) -> bool:
        return self.window is None and self.lengths is None and self.bias is None and self.dropout is None

    def keep(self, xp, heads: slice, rows: slice, lq: int, lk: int):
        """Bools [heads, rows, Lk]: the dropout keep-mask of the probabilities of the [BH] entries
        `heads`, query rows `rows` (None without dropout): score (t, i, j) is element
        (t Lq + i) Lk + j of cudakit.dropout's Philox stream for the seed (drop_index: another
        layout's), kept iff its word >= the threshold, so the CPU backend and the GPU kernels drop
        the same probabilities."""
        if self.dropout is None:
            return None
        import numpy as np
        from .cpu_dropout import philox4x32
        thr, _, seed = self.dropout
        t0, row_stride, key_stride = self.drop_index or (0, lq, lk)
        t = np.arange(heads.start + t0, heads.stop + t0, dtype=np.uint64)[:, None, None]
        i = np.arange(rows.start, rows.stop, dtype=np.uint64)[None, :, None]
        j = np.arange(lk, dtype=np.uint64)[None, None, :]
        idx = (t * np.uint64(row_stride) + i) * np.uint64(key_stride) + j
        g = idx >> np.uint64(2)
        zero = np.zeros((), np.uint64)
        words = philox4x32((g & np.uint64(0xFFFFFFFF), g >> np.uint64(32), zero, zero),
                           (seed & 0xFFFFFFFF, seed >> 32))
        w = (idx & np.uint64(3)).astype(np.int64)
        word = np.choose(w, words)
        k = word >= np.uint32(thr)
        return k if xp is np else xp.asarray(k)

    def bias_index(self, xp, heads: slice):
        """(batch index, head index) arrays into the bias's first two dims for the [BH] entries
        `heads` (0 where the bias broadcasts that dim)."""
        t = xp.arange(heads.start, heads.stop)
        bb, hb = self.bias.shape[:2]
        return (t // self.bias_heads if bb > 1 else t * 0), (t % self.bias_heads if hb > 1 else t * 0)

    def bias_block(self, xp, heads: slice, rows: slice):
        """The bias of the query rows `rows` of the [BH] entries `heads`: [heads, rows or 1, Lk or 1]
        (broadcasting against the scores), or None without a bias."""
        if self.bias is None:
            return None
        bi, hi = self.bias_index(xp, heads)
        r = rows if self.bias.shape[2] > 1 else slice(0, 1)
        return self.bias[bi, hi][:, r]

    def allowed(self, xp, lq: int, lk: int, rows: slice, heads: slice):
        """Bools [heads, rows, lk]: which keys the query rows `rows` of the [BH] entries `heads` see
        (the matrix-product path's mask; lengths an array of xp), or None when every key is seen."""
        if not self.causal and self.window is None and self.lengths is None:
            return None
        dlo, dhi = key_bounds(lq, lk, self.causal, self.window)
        i = xp.arange(rows.start, rows.stop)[:, None]
        j = xp.arange(lk)[None, :]
        ok = ((j >= i + dlo) & (j < i + dhi))[None]
        if self.lengths is not None:
            n = self.lengths[xp.arange(heads.start, heads.stop) // self.heads].astype(xp.int64)
            ok = ok & (j[None] < n[:, None, None])
        return ok
