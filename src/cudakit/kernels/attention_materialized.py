"""The materialised float32 attention backward under tf32x3 (kernels/_attention_mat_triton.py):
P and dS written once to a float32 workspace, then three long-K products, instead of the flash
backward's two fused kernels. kernels/attention.py offers it to kernels/paths.py as a second path
of the float32 backward (timed once per signature against the flash kernels, the choice kept on
disk), for head dims up to 128 with causal or window masks (not key lengths, a bias, dropout or
grouped-query k, v: those stay on the flash kernels).

Measured on an H100 (2026-11-27, the 07:20 UTC call, benchmarks/sweeps/attention_f32_variants.py
--mat-shipped, everything inside the timed call): B4 H8 S2048 D128 2.205 ms against torch's float32
SDPA backward 5.006 ms and the flash kernels' 10.089 ms (causal 1.549 against 2.898 and 5.722 ms);
B16 H8 S512 D64 0.470 ms against 0.698 and 0.725 ms (causal 0.345 against 0.499 and 0.565 ms).

The launch sequence is written once, over an array allocator and a kernel launcher, so that
tests/attention_interpreter.py runs the same sequence in Triton's interpreter on NumPy arrays.
"""
from __future__ import annotations

import math

PAD = 128                   # the split arrays' and the workspace's rows: multiples of every tile below
MAX_HEAD_DIM = 128          # DP 256 tiles do not fit the score kernel's shared memory
WORKSPACE_BYTES = 1 << 30   # P and dS of one chunk of heads at most this (a head past it: not this path);
                            # the split operands come beside it: 8 DP (LKP + 2 LQP) bytes a head
_MAX_GRID = 65535           # heads a chunk (grid dims y and z)
# BH Lq Lk below which the flash kernels run without timing this path: their replayed plan costs a
# few launches of host time, this path about 16 allocations and 5 launches bound in Python, and
# its saving (about 30% of the flash kernels' device time at the shapes timed) is of that order
# below here: an estimate, not measured (the host-time benchmark's float32 backward, 2x2x64x32,
# stays on the plan it was measured with)
MIN_SCORES = 1 << 22
PREP_ROWS = 32
# tiles timed on an H100 (2026-11-27): at D128 the 64 x 64 score tile on 4 warps ran 1.178 ms
# against 1.325 ms for 128 x 64 on 8 (the 06:33 UTC call, the sweep's --materialized); whole,
# 64 x 32 long-product tiles on 4 warps ran causal backwards 4-5% faster than 128 x 32 on 8, and
# the others within 1% (the 06:43 UTC call, --mat-shipped)
SCORE_TILES = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1}
LONG_TILES = {"BLOCK_M": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3}
# Two options, both slower on an H100 with Triton 3.6 (2026-11-27 07:10 UTC, attention_f32_variants.py
# --mat-shipped) and kept for the sweep: B_REG, B split in the long products' registers (no split
# pass; its loads are no longer pipelined into shared memory): B4 H8 S2048 D128 5.795 ms against
# 2.261, B16 H8 S512 D64 0.597 against 0.499; PAIR, dK and dV in one kernel: 2.420 and 0.514 ms.
B_REG = False
PAIR = False
# L2_ORDER: dQ's product reads the heads in reverse order (the score kernel's last tiles first,
# while they are in L2), and dK's then forward (dQ's last reads first). Not yet timed: off.
L2_ORDER = False
# FUSED_PREP: no prep pass; the score kernel computes delta for its rows and its first column and
# row of programs split K^T, Q^T, dO^T (mat_scores OWN_DELTA, SPLIT_B). None: up to head dim 64,
# where it ran B16 H8 S512 D64 in 0.470 ms against 0.498 (causal 0.345 against 0.383); at 128 it
# ran 2.925 ms against 2.205 (H100, the 07:20 UTC call, the sweep above), its sm_90 SASS (Triton 3.9)
# holding 365 local loads against 36 without
FUSED_PREP = None


def fused_prep(dp: int) -> bool:
    """Whether the score kernel does mat_prep's work at head-dim block dp (FUSED_PREP)."""
    return dp <= 64 if FUSED_PREP is None else FUSED_PREP


def padded(n: int) -> int:
    return max(PAD, -(-n // PAD) * PAD)


def eligible(d: int, precision: str, masks, groups: int) -> bool:
    """Whether this float32 backward may take the materialised path: tf32x3 products, head_dim
    <= 128, no key lengths, bias, dropout or grouped k, v."""
    return (precision == "tf32x3" and 0 < d <= MAX_HEAD_DIM and groups == 1 and masks.lengths is None
            and masks.bias is None and masks.dropout is None)


def chunk_heads(bh: int, lq: int, lk: int, budget: int | None = None) -> int:
    """Heads a chunk: as many as the workspace budget holds (0: one head's P and dS exceed it)."""
    per = 8 * padded(lq) * padded(lk)
    return min(bh, _MAX_GRID, (WORKSPACE_BYTES if budget is None else budget) // per)


def run(do, q, k, v, out, lse, scale: float, dlo: int, dhi: int, empty, launch, budget: int | None = None):
    """(dq, dk, dv) float32 like q, k, v of attention for dL/dout = do, or None when one head's
    workspace exceeds the budget. q, out, do: [BH, Lq, D]; k, v: [BH, Lk, D]; lse: [BH, Lq] (natural
    log, the forward's); all float32, C-contiguous, BH, Lq, Lk > 0. dlo, dhi: key_bounds' interval.
    empty(shape) -> a float32 array; launch(kernel name, grid, args, constexprs and launch options).
    Everything is allocated before the first launch (an out-of-memory error leaves nothing written)."""
    bh, lq, d = q.shape
    lk = k.shape[1]
    n = chunk_heads(bh, lq, lk, budget)
    if n == 0:
        return None
    lqp, lkp = padded(lq), padded(lk)
    dp = max(16, 1 << (d - 1).bit_length())
    span = lq + lk   # an interval side past it bounds nothing; clamped so the kernels' sums stay in int32
    masked = dlo > -span or dhi < span
    dlo, dhi = max(dlo, -span), min(dhi, span)
    dq, dk, dv = empty(q.shape), empty(k.shape), empty(v.shape)
    split = (n, dp, lkp), (n, dp, lqp)
    kth, ktl = (empty(split[0] if not B_REG else (1,)) for _ in range(2))
    qth, qtl, doth, dotl = (empty(split[1] if not B_REG else (1,)) for _ in range(4))
    fused = fused_prep(dp)
    p, ds = empty((n, lqp, lkp)), empty((n, lqp, lkp))
    delta = p if fused else empty((n, lq))   # (not read when fused)
    sc, lt = SCORE_TILES, LONG_TILES
    qk_scale = float(scale * math.log2(math.e))
    for h0 in range(0, bh, n):
        h1 = min(bh, h0 + n)
        c = h1 - h0
        hs = slice(h0, h1)
        if not fused:
            launch("mat_prep", (math.ceil((max(lqp, lkp) if not B_REG else lq) / PREP_ROWS), c, 1 if B_REG else 3),
                   (q[hs], k[hs], out[hs], do[hs], kth, ktl, qth, qtl, doth, dotl, delta, lq, lk, lqp, lkp),
                   {"D": d, "DP": dp, "BLOCK_L": PREP_ROWS, "SPLIT": not B_REG, "num_warps": 4})
        launch("mat_scores", (lqp // sc["BLOCK_M"], lkp // sc["BLOCK_N"], c),
               (q[hs], do[hs], k[hs], v[hs], out[hs], lse[hs], delta, p, ds, kth, ktl, qth, qtl, doth, dotl,
                qk_scale, lq, lk, lqp, lkp, dlo, dhi),
               dict(sc, D=d, DP=dp, MASKED=masked, OWN_DELTA=fused, SPLIT_B=fused and not B_REG))
        b_k, b_q, b_do = ((k[hs], k), (q[hs], q), (do[hs], do)) if B_REG else ((kth, ktl), (qth, qtl), (doth, dotl))
        consts = dict(lt, D=d, DP=dp, MASKED=masked, B_REG=B_REG)
        # dQ = scale dS K
        launch("mat_long", (math.ceil(lq / lt["BLOCK_M"]), c),
               (ds, *b_k, dq[hs], ds, *b_k, dq[hs], float(scale), 1.0, lq, lq, lk, lqp, lkp, lkp, dlo, dhi),
               dict(consts, TRANS_A=False, **({"REV": True} if L2_ORDER else {})))
        # dK = scale dS^T Q, dV = P^T dO: in one kernel (PAIR) or two
        grid = (math.ceil(lk / lt["BLOCK_M"]), c)
        rest = (float(scale), 1.0, lk, lq, lk, lqp, lkp, lqp, dlo, dhi)
        if PAIR:
            launch("mat_long", grid, (ds, *b_q, dk[hs], p, *b_do, dv[hs], *rest), dict(consts, TRANS_A=True, PAIR=True))
        else:
            launch("mat_long", grid, (ds, *b_q, dk[hs], ds, *b_q, dk[hs], *rest), dict(consts, TRANS_A=True))
            launch("mat_long", grid, (p, *b_do, dv[hs], p, *b_do, dv[hs], float(1.0), 1.0, *rest[2:]),
                   dict(consts, TRANS_A=True))
    return dq, dk, dv
