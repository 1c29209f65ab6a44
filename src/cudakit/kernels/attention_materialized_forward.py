"""The materialised float32 attention forward under tf32x3 (kernels/_attention_matfwd_triton.py):
the scores written once to a float32 workspace with the softmax's per-tile partials, then O as a
long-K product over them, instead of the flash forward's one fused kernel. kernels/attention.py
offers it to kernels/paths.py beside the flash forward's tilings (timed once per signature, the
choice kept on disk) where its workspace is at most WORKSPACE_BYTES: the small problems whose flash
grids leave SMs idle or run one latency-bound program an SM.

The launch sequence is written once, over an array allocator and a kernel launcher, so that
tests/attention_interpreter.py runs the same sequence in Triton's interpreter on NumPy arrays.
"""
from __future__ import annotations

import math

KERNELS = ("matf_scores", "matf_out")   # what run() launches (_attention_matfwd_triton)
MAX_HEAD_DIM = 128
# S, the partials and V's parts of every head at most this (one launch a kernel; past it the
# path is not offered: the flash forward's grids fill the GPU there)
WORKSPACE_BYTES = 256 << 20
_MAX_GRID = 65535   # [BH] entries a launch (grid dim z, y)
# matf_out's tiles: its rows must lie inside one row of score tiles (BLOCK_M divides theirs) and its
# key block divide theirs, so that it reads only written tiles without a mask
OUT_TILES = {"BLOCK_M": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3}


def score_tiles(dp: int) -> dict:
    """matf_scores' tile and launch options at head-dim block dp (the materialised backward's score
    tiles: 64 x 128 up to 64, 64 x 64 past it)."""
    return {"BLOCK_M": 64, "BLOCK_N": 128 if dp <= 64 else 64, "num_warps": 4, "num_stages": 1}


def head_block(d: int) -> int:
    """DP: head_dim's power of two (at least 16), the kernels' column tile."""
    return max(16, 1 << (d - 1).bit_length())


def out_columns(dp: int, programs: int, sms: int | None) -> int:
    """matf_out's COLS for `programs` row blocks (all heads) on `sms` SMs (None: unknown, one):
    two column blocks at DP 128 where the row blocks number under two a SM, as the backward's long
    products (attention_materialized.long_columns)."""
    return 2 if dp == 128 and sms and programs < 2 * sms else 1


def _sizes(lq: int, lk: int, d: int) -> tuple[int, int, int, dict]:
    """(LQP, LKP, DP, score tiles): the workspace's rows and keys, multiples of the score tiles."""
    dp = head_block(d)
    sc = score_tiles(dp)
    return -(-lq // sc["BLOCK_M"]) * sc["BLOCK_M"], -(-lk // sc["BLOCK_N"]) * sc["BLOCK_N"], dp, sc


def workspace_bytes(bh: int, lq: int, lk: int, d: int, groups: int = 1) -> int:
    """Bytes run() allocates beside out and lse: S, its partials and V's parts."""
    lqp, lkp, dp, sc = _sizes(lq, lk, d)
    return 4 * (bh * lqp * lkp + 2 * bh * (lkp // sc["BLOCK_N"]) * lqp + 2 * (bh // groups) * dp * lkp)


def eligible(d: int, precision: str, bh: int, lq: int, lk: int, groups: int = 1) -> bool:
    """Whether a float32 forward may take this path: tf32x3 products, head_dim <= 128, a grid of at
    most 65535 [BH] entries and a workspace within WORKSPACE_BYTES."""
    return (precision == "tf32x3" and 0 < d <= MAX_HEAD_DIM and 0 < bh <= _MAX_GRID and lq > 0 and lk > 0
            and workspace_bytes(bh, lq, lk, d, groups) <= WORKSPACE_BYTES)


def run(q, k, v, scale: float, dlo: int, dhi: int, empty, launch, sms: int | None = None, groups: int = 1,
        lengths=None, heads: int = 1, bias=None, dropout=None, err=None):
    """(out [BH, Lq, D], lse [BH, Lq] natural log), both float32, of attention over q: [BH, Lq, D] and
    k, v: [BH / groups, Lk, D] (q head t reads head t // groups), all float32, C-contiguous,
    BH, Lq, Lk > 0. dlo, dhi: key_bounds' interval; lengths: an integer [B] array of key lengths,
    [BH] entry t seeing those of batch t // heads (None: all Lk); bias: (the 4-D bias, its 4
    element strides (0 broadcast), HB: [BH] entry t is its batch t // HB, head t % HB) or None;
    dropout: (the seed's low and high words as int32, the keep threshold, 1 / (1 - p)) or None.
    empty(shape) -> a float32 array; launch(kernel name, grid, args, constexprs and launch options);
    sms: the GPU's SMs (out_columns). Everything is allocated before the first launch."""
    bh, lq, d = q.shape
    lk = k.shape[1]
    lqp, lkp, dp, sc = _sizes(lq, lk, d)
    nkb = lkp // sc["BLOCK_N"]
    span = lq + lk   # an interval side past it bounds nothing; clamped so the kernels' sums stay in int32
    masked = dlo > -span or dhi < span
    dlo, dhi = max(dlo, -span), min(dhi, span)
    out, lse = empty((bh, lq, d)), empty((bh, lq))
    s, pm, pl = empty((bh, lqp, lkp)), empty((bh, nkb, lqp)), empty((bh, nkb, lqp))
    vth, vtl = empty((bh // groups, dp, lkp)), empty((bh // groups, dp, lkp))
    lens = s if lengths is None else lengths   # (not read without lengths)
    err = s if lengths is None else err   # (given with lengths)
    b_args = (s, 0, 0, 0, 0, 1) if bias is None else tuple(bias)
    drop = (0, 0, 0, 1.0) if dropout is None else tuple(dropout)
    common = dict(D=d, DP=dp, MASKED=masked, HAS_LENS=lengths is not None)
    launch("matf_scores", (lqp // sc["BLOCK_M"], nkb, bh),
           (q, k, v, s, pm, pl, vth, vtl, lens, err, *b_args, float(scale * math.log2(math.e)), lq, lk, lqp, lkp,
            dlo, dhi, groups, heads),
           dict(sc, **common, HAS_BIAS=bias is not None))
    ot = OUT_TILES
    rows = -(-lq // ot["BLOCK_M"])
    cols = out_columns(dp, rows * bh, sms)
    launch("matf_out", (rows, bh, cols),
           (s, pm, pl, vth, vtl, out, lse, lens, lq, lk, lqp, lkp, nkb, dlo, dhi, groups, heads, *drop),
           dict(ot, **common, NKB_P2=max(2, 1 << (nkb - 1).bit_length()), DROPOUT=dropout is not None, COLS=cols))
    return out, lse
