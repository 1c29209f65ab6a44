"""The materialised float32 attention backward under tf32x3 (kernels/_attention_mat_triton.py):
P and dS written once to a float32 workspace, then three long-K products, instead of the flash
backward's two fused kernels. kernels/attention.py offers it to kernels/paths.py as a second path
of the float32 backward (timed once per signature against the flash kernels, the choice kept on
disk), for head dims up to 128 with causal or window masks, key lengths, grouped-query k, v,
an additive bias and dropout on the probabilities.
With grouped k, v and key lengths, on an H100 (2026-11-27 22:09 UTC, benchmarks/sweeps/
attention_f32_bwd_masks.py, history/attention/*-f32-bwd-masks.json; device time behind an L2 flush
against torch's fastest float32 way, enable_gqa or repeated heads, a boolean mask for lengths):
B1 H32 Hkv8 S1024 D128 causal 0.473 ms against torch's 0.899 and the flash kernels' 1.724 (the
public call, then summing dK, dV over each group after the kernels, 0.519; which of the two
sums a call takes: sum_groups, timed); key lengths at B2 H8 S2048 D128 causal
0.745 against 2.566 and 2.488; B4 H16 S1024 D64 0.708 against 1.387 and 0.966. With a bias (the
22:37 UTC call, history/attention/*-f32-bwd-bias.json; torch: the bias as a float attn_mask, its
gradient asked for): (1, H, L, L) at B4 H16 S1024 D64 1.278 ms against torch's 1.682 and the flash
kernels' 4.255 (3.412 when its gradient was added by atomics, the 22:18 UTC call); causal B2 H8 S2048
D128 1.590 against 2.864 and 6.645; a (B, 1, 1, L) padding bias at B4 H16 S1024 D64 0.850 against
1.582 and 1.677.

Measured on an H100 (2026-11-27, the 08:30 UTC call, benchmarks/sweeps/attention_f32_variants.py
--mat-shipped, everything inside the timed call): B16 H8 S512 D64 0.453 ms against torch's float32
SDPA backward 0.703 ms and the flash kernels' 0.724 ms (causal 0.330 against 0.499 and 0.569 ms),
of which the score kernel 0.235 ms and each long product 0.073-0.077 ms; B4 H8 S1024 D32 0.321
against 0.578 ms (causal 0.240 against 0.456). The 08:22 UTC call: B4 H8 S2048 D128 2.237 ms
against 5.040 ms and the flash kernels' 10.174 ms (causal 1.452 against 2.913 and 5.756 ms), the
score kernel 1.180 ms of it.

The launch sequence is written once, over an array allocator and a kernel launcher, so that
tests/attention_interpreter.py runs the same sequence in Triton's interpreter on NumPy arrays.
"""
from __future__ import annotations

import math

KERNELS = ("mat_prep", "mat_scores", "mat_long", "mat_bias_sum")   # what run() launches (_attention_mat_triton)
PAD = 128                   # the split arrays' and the workspace's rows: multiples of every tile below
MAX_HEAD_DIM = 128          # DP 256 tiles do not fit the score kernel's shared memory
WORKSPACE_BYTES = 1 << 30   # P and dS of one chunk of heads at most this (a head past it: not this path);
                            # the split operands come beside it: 8 DP (LKP + 2 LQP) bytes a head
_MAX_GRID = 65535           # heads a chunk (grid dims y and z)
# Offered at every size (kernels/attention.py times it against the flash kernels once per
# signature). Under its former least size (2^19 scores at head dim 64, 2^18 past 64) it still won
# wherever the head dim passed 64. On an H100
# (2026-11-27 22:00 UTC, benchmarks/sweeps/attention_f32_bwd_small.py,
# history/attention/*-f32-bwd-small-hd.json; device time behind an L2 flush, flash against
# materialised, torch's float32 SDPA in brackets): B1 H2 S256 D96 0.211 ms against 0.039 (0.103),
# B1 H2 S128 D128 0.118 against 0.031 (0.067), B2 H4 S128 D80 0.123 against 0.033 (0.064), B2 H2 S64
# D128 0.080 against 0.031 (0.056); the flash kernels lost to torch on all of them. Where the flash
# kernels are as fast (B2 H2 S64 D32: 0.024 against 0.026 ms, the 21:20 UTC call,
# *-f32-bwd-small.json) the timing picks either. Both paths' dispatch plans are traces replayed in C
# (kernels/path_plans._triton_chosen), so neither costs more host time a call.
PREP_ROWS = 32
# tiles timed on an H100 (2026-11-27): at D128 the 64 x 64 score tile on 4 warps ran 1.178 ms
# against 1.325 ms for 128 x 64 on 8 (the 06:33 UTC call, a first form of these kernels since
# removed); whole, 64 x 32 long-product tiles on 4 warps ran causal backwards 4-5% faster than
# 128 x 32 on 8, and the others within 1% (the 06:43 UTC call, --mat-shipped)
# the score kernel's tile by head-dim block (score_tiles); SCORE_TILES set: that tile at every head
# dim. At DP 64, 64 x 128 on 4 warps ran B16 H8 S512 D64 in 0.459 ms against 0.472 ms for 64 x 64,
# and B4 H16 S1024 D64 in 0.785 against 0.872 ms (causal 0.351 against 0.347 and 0.558 against
# 0.570); at DP 128 it ran B4 H8 S2048 D128 3.170 ms against 2.231 (H100, 2026-11-27 08:13 UTC,
# attention_f32_variants.py --mat-shipped); 128 x 64 on 8 warps was slower at both
SCORE_TILES = None
LONG_TILES = {"BLOCK_M": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3}
# UNMASKED_LONG: the long products read aligned blocks without the visibility mask (aligned()).
# Causal backwards ran B16 H8 S512 D64 in 0.330 ms against 0.350 with the mask, B4 H8 S2048 D128
# in 1.452 against 1.534 (H100, 2026-11-27 08:22 and 08:30 UTC, the sweep above)
UNMASKED_LONG = True
# L2_ORDER: dQ's product reads the heads in reverse order (the score kernel's last tiles first,
# while they are in L2), and dK's then forward (dQ's last reads first). None: up to head dim 64,
# where it ran 1-2% faster in both runs of the four D64 cases (B16 H8 S512 and B4 H16 S1024, causal
# and not: e.g. 0.451 against 0.456 ms and causal 0.327 against 0.333); at D128 B4 H8 S2048 it ran
# 2.275 against 2.237 ms (causal even) (H100, 2026-11-27 08:13 and 08:22 UTC, the sweep above)
L2_ORDER = None
# FUSED_PREP: no prep pass; the score kernel computes delta for its rows and its first column and
# row of programs split K^T, Q^T, dO^T (mat_scores OWN_DELTA, SPLIT_B). None: up to head dim 64,
# where it ran B16 H8 S512 D64 in 0.470 ms against 0.498 (causal 0.345 against 0.383); at 128 it
# ran 2.925 ms against 2.205 (H100, the 07:20 UTC call, the sweep above), its sm_90 SASS (Triton 3.9)
# holding 365 local loads against 36 without
FUSED_PREP = None


# LONG_COLUMNS: the long products' columns in this many blocks (mat_long's COLS, one program each).
# None: long_columns() decides by the launch's size. On an H100 (2026-11-27 18:14 UTC,
# attention_f32_variants.py --mat-shipped --cold; whole backward, two blocks against one and four):
# B1 H16 S512 D128 0.124 ms against 0.128 and 0.127 (causal 0.108 against 0.115 and 0.111); B1 H8
# S1024 D128 0.196 against 0.206 and 0.210 (causal 0.166 against 0.177 and 0.169); with 1024 row
# blocks (B4 H32 S512 D128) two ran slower, causal 0.614 against 0.547 ms, and at D64 (B16 H8 S512,
# 1024 row blocks) 0.588 against 0.459
LONG_COLUMNS: int | None = None


def long_columns(dp: int, programs: int, sms: int | None) -> int:
    """mat_long's COLS for a launch of `programs` row blocks (all heads) on `sms` SMs (None: unknown,
    one block): two column blocks at DP 128 where the row blocks number under two a SM (LONG_COLUMNS
    set: that)."""
    if LONG_COLUMNS is not None:   # (halved to blocks of 16 columns or more: the products' least)
        cols = max(1, int(LONG_COLUMNS))
        while cols > 1 and (dp % cols or dp // cols < 16):
            cols //= 2
        return cols
    return 2 if dp == 128 and sms and programs < 2 * sms else 1


def l2_order(dp: int) -> bool:
    """Whether dQ's long product reads the heads in reverse order at head-dim block dp (L2_ORDER)."""
    return dp <= 64 if L2_ORDER is None else L2_ORDER


def fused_prep(dp: int) -> bool:
    """Whether the score kernel does mat_prep's work at head-dim block dp (FUSED_PREP)."""
    return dp <= 64 if FUSED_PREP is None else FUSED_PREP


def score_tiles(dp: int) -> dict:
    """mat_scores' tile and launch options at head-dim block dp (SCORE_TILES)."""
    if SCORE_TILES is not None:
        return SCORE_TILES
    return {"BLOCK_M": 64, "BLOCK_N": 128 if dp <= 64 else 64, "num_warps": 4, "num_stages": 1}


def aligned(rows_side: int, reduced_side: int) -> bool:
    """mat_long's ALIGNED: its row blocks lie in one row (or column) of score tiles, of side
    rows_side, and its reduced blocks divide the tiles' other side (then its masked reads need no
    mask: every entry read lies in a score tile that was written). UNMASKED_LONG False: never."""
    return UNMASKED_LONG and rows_side % LONG_TILES["BLOCK_M"] == 0 and reduced_side % LONG_TILES["BLOCK_K"] == 0


def head_block(d: int) -> int:
    """DP: head_dim's power of two (at least 16), the kernels' column tile."""
    return max(16, 1 << (d - 1).bit_length())


def padded(n: int) -> int:
    return max(PAD, -(-n // PAD) * PAD)


def eligible(d: int, precision: str, masks) -> bool:
    """Whether this float32 backward may take the materialised path: tf32x3 products, head_dim
    <= 128 (any mask, key lengths, a bias, grouped k, v, dropout in the arrays' own score layout)."""
    return precision == "tf32x3" and 0 < d <= MAX_HEAD_DIM and masks.drop_index is None


def chunk_heads(bh: int, lq: int, lk: int, budget: int | None = None, groups: int = 1) -> int:
    """Heads a chunk: as many as the workspace budget holds, a multiple of groups (each chunk
    reads whole k, v heads; 0: one group's P and dS exceed it)."""
    per = 8 * padded(lq) * padded(lk)
    n = min(bh, _MAX_GRID, (WORKSPACE_BYTES if budget is None else budget) // per)
    return n - n % groups


# Workspaces (workspace_bytes) up to which the dispatch plan of a signature that chose this path
# replays a trace of its launches (kernels/path_plans._triton_chosen), whose host cost suits the
# small problems the trace is for; past it the plan runs this module's Python, whose want of
# memory for the workspace falls back to the flash kernels (kernels/attention._materialized_backward)
# where a replay would raise. At this size the device time is past the Python's host cost (about
# 0.15 ms a call): B1 H32 S256 D64 takes 28 MiB, B2 H32 S256 D64 56 MiB.
# A trace keeps this module's options (FUSED_PREP, SCORE_TILES, ...) as they were when it was made:
# cudakit.dispatch.clear() after changing them.
TRACE_MAX_BYTES = 64 << 20


def sum_groups(groups: int, programs: int, sms: int | None) -> bool:
    """Whether dK, dV's long products sum each group of q heads themselves (mat_long GROUPS), for
    a launch of `programs` row blocks (all k, v heads) on `sms` SMs (None: unknown, yes): where that
    keeps two programs an SM at least. Fewer, each G times as long, would leave SMs idle (an MQA
    grid of 16 row blocks on one k, v head: 16 programs); the q heads' gradients are then summed by
    the caller. Timed on an H100 (2026-11-28 01:50 UTC, benchmarks/sweeps/attention_f32_gqa_sum.py,
    history/attention/*-attention-f32-gqa-sum.json, both forms with the caller's sum): per q head
    was faster at B1 H32 Hkv8 S1024 D128 causal (0.516 against 0.525 ms), B2 H16 Hkv4 S512 D64
    causal (0.128 / 0.154) and MQA B1 H16 Hkv1 S1024 D128 causal (0.284 / 0.699); summed in the
    kernels at B4 H32 Hkv4 S512 D64 (0.507 / 0.518, 128 programs). The bound picks per q head at all
    four: the faster form or within 2% of it."""
    return groups > 1 and (sms is None or programs >= 2 * sms)


def workspace_bytes(bh: int, lq: int, lk: int, d: int, groups: int = 1) -> int:
    """Bytes run() allocates beside the gradients for a [BH, Lq, Lk] backward at head dim d: P and
    dS, the split operands and (without fused_prep) delta, for one chunk of heads (chunk_heads; 0
    where a group of heads exceeds the budget)."""
    n, lqp, lkp, dp = chunk_heads(bh, lq, lk, None, groups), padded(lq), padded(lk), head_block(d)
    return 4 * n * (2 * lqp * lkp + dp * (2 * lkp + 4 * lqp) + (0 if fused_prep(dp) else lq))


def run(do, q, k, v, out, lse, scale: float, dlo: int, dhi: int, empty, launch, budget: int | None = None,
        sms: int | None = None, groups: int = 1, lengths=None, heads: int = 1, bias=None, bias_grad=None,
        dropout=None):
    """(dq, dk, dv) float32 of attention for dL/dout = do, dq like q and dk, dv like k, v (each k, v
    head's the sum over its group of q heads: sum_groups()) or, where summing in the kernels
    would leave too few programs, per q head [BH, Lk, D] for the caller to sum; None when one group
    of heads' workspace exceeds the budget. q, out, do: [BH, Lq, D];
    k, v: [BH / groups, Lk, D] (q head t reads head t // groups); lse: [BH, Lq] (natural log, the
    forward's); all float32, C-contiguous, BH, Lq, Lk > 0. dlo, dhi: key_bounds' interval;
    lengths: an integer [B] array of key lengths, [BH] entry t seeing those of batch t // heads
    (None: all Lk). bias: (the 4-D bias, its 4 element strides (0 broadcast), HB: [BH] entry t is
    its batch t // HB, head t % HB) or None; bias_grad (with a bias): (its gradient's buffer, zeroed,
    its 4 element strides, mode: 1 stored or 2 added atomically by the score kernel, 3 summed
    from the workspace after it (mat_bias_sum; a float32 buffer in the bias's shape), 4 each score
    tile's partial sums stored (a zeroed float32 workspace, the strides of a bh, a row block of
    score_tiles' BLOCK_M and a key block of its BLOCK_N, for the caller to sum), DBQ, DBK:
    whether it has a row and a key dim), filled here. dropout: (the seed's low and high words as
    int32, the keep threshold, 1 / (1 - p)) of dropout on the probabilities, or None.
    empty(shape) -> a float32 array; launch(kernel name, grid, args, constexprs and launch
    options); sms: the GPU's SMs (long_columns).
    Everything is allocated before the first launch (an out-of-memory error leaves nothing written)."""
    bh, lq, d = q.shape
    lk = k.shape[1]
    n = chunk_heads(bh, lq, lk, budget, groups)
    if n == 0:
        return None
    lqp, lkp = padded(lq), padded(lk)
    dp = head_block(d)
    span = lq + lk   # an interval side past it bounds nothing; clamped so the kernels' sums stay in int32
    masked = dlo > -span or dhi < span
    dlo, dhi = max(dlo, -span), min(dhi, span)
    g_sum = groups if sum_groups(groups, math.ceil(lk / LONG_TILES["BLOCK_M"]) * (n // groups), sms) else 1
    dq, dk, dv = empty(q.shape), empty((bh // g_sum, lk, d)), empty((bh // g_sum, lk, d))
    kth, ktl = (empty((n, dp, lkp)) for _ in range(2))
    qth, qtl, doth, dotl = (empty((n, dp, lqp)) for _ in range(4))
    fused = fused_prep(dp)
    p, ds = empty((n, lqp, lkp)), empty((n, lqp, lkp))
    delta = p if fused else empty((n, lq))   # (not read when fused)
    sc, lt = score_tiles(dp), LONG_TILES
    qk_scale = float(scale * math.log2(math.e))
    score_consts = dict(sc, D=d, DP=dp, MASKED=masked, OWN_DELTA=fused, SPLIT_B=fused, HAS_LENS=lengths is not None)
    lens = p if lengths is None else lengths   # (not read without lengths)
    b_args, db_args = (p, 0, 0, 0, 0, 1), (p, 0, 0, 0, 0)   # (not read without a bias)
    score_consts["DROPOUT"] = dropout is not None
    drop = (0, 0, 0, 1.0) if dropout is None else tuple(dropout)
    mode = 0
    if bias is not None:
        b_args, (*db_args, mode, dbq, dbk) = tuple(bias), bias_grad
        score_consts.update(HAS_BIAS=True, DB_MODE=0 if mode == 3 else mode, DBQ=dbq, DBK=dbk,
                            # (the key strides 1 as constants: vector loads and stores, attention._unit_keys)
                            BIAS_K1=b_args[4] == 1, DB_K1=mode in (1, 2) and db_args[4] == 1)
    consts = dict(lt, D=d, DP=dp, MASKED=masked)
    by_rows = dict(consts, TRANS_A=False, REV=l2_order(dp), ALIGNED=aligned(sc["BLOCK_M"], sc["BLOCK_N"]))
    by_cols = dict(consts, TRANS_A=True, ALIGNED=aligned(sc["BLOCK_N"], sc["BLOCK_M"]))
    for h0 in range(0, bh, n):
        h1 = min(bh, h0 + n)
        c = h1 - h0
        # one chunk (the usual case): the arrays themselves, not views (each view costs host time)
        qc, oc, doc, lsec, dqc = (x if c == bh else x[h0:h1] for x in (q, out, do, lse, dq))
        kc, vc = (x if c == bh else x[h0 // groups:h1 // groups] for x in (k, v))
        dkc, dvc = (x if c == bh else x[h0 // g_sum:h1 // g_sum] for x in (dk, dv))
        if not fused:
            launch("mat_prep", (math.ceil(max(lqp, lkp) / PREP_ROWS), c, 3),
                   (qc, kc, oc, doc, kth, ktl, qth, qtl, doth, dotl, delta, lq, lk, lqp, lkp, groups),
                   {"D": d, "DP": dp, "BLOCK_L": PREP_ROWS, "num_warps": 4})
        launch("mat_scores", (lqp // sc["BLOCK_M"], lkp // sc["BLOCK_N"], c),
               (qc, doc, kc, vc, oc, lsec, delta, p, ds, kth, ktl, qth, qtl, doth, dotl, lens, *b_args, *db_args,
                qk_scale, lq, lk, lqp, lkp, dlo, dhi, groups, heads, h0, *drop), score_consts)
        if mode == 3:   # the bias's gradient from this chunk's dS: a program per block of it
            nb, nh, hb = db_args[0].shape[0], db_args[0].shape[1], b_args[5]
            launch("mat_bias_sum", (math.ceil(lq / sc["BLOCK_M"]) if dbq else 1,
                                    math.ceil(lk / sc["BLOCK_N"]) if dbk else 1, nb * nh),
                   (ds, *db_args, nb, nh, hb, bh // hb, h0, c, lq, lk, lqp, lkp, dlo, dhi),
                   {"BLOCK_M": sc["BLOCK_M"], "BLOCK_N": sc["BLOCK_N"], "DBQ": dbq, "DBK": dbk, "MASKED": masked,
                    "num_warps": 4})
        for a, b_hi, b_lo, dst, m, kp, factor, cs, g in (
                (ds, kth, ktl, dqc, lq, lkp, scale, by_rows, 1),        # dQ = scale dS K
                (ds, qth, qtl, dkc, lk, lqp, scale, by_cols, g_sum),   # dK = scale dS^T Q (summed over each group)
                (p, doth, dotl, dvc, lk, lqp, 1.0, by_cols, g_sum)):   # dV = P^T dO (the same)
            rows = math.ceil(m / lt["BLOCK_M"])
            cols = long_columns(dp, rows * c // g, sms)
            launch("mat_long", (rows, c // g, cols),
                   (a, b_hi, b_lo, dst, float(factor), m, lq, lk, lqp, lkp, kp, dlo, dhi),
                   dict(cs, COLS=cols, GROUPS=g))
    return dq, dk, dv
