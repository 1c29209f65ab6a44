"""Triton source of the materialised float32 attention forward (tf32x3 products; imported only
once Triton is known to be there; the host side is kernels/attention_materialized_forward.py).

The flash forward (_attention_triton.attn_fwd) walks every key block of a row block in one
program, Q's parts and the accumulator in registers. On grids of fewer row blocks than SMs it runs
one program an SM, latency-bound on its own instruction stream (255 registers with spills at head
dims 80..128: history/attention/nvidia-h200-attention-f32-small-grid-ncu.json). Here the work is
two wide kernels instead:
  matf_scores  per (query block, key block): S = Q K^T (over D in one step), scaled, biased and
               masked, written to a float32 workspace in base-2 units, with each row's max over
               the tile and its sum of exp2(s - max) (the softmax's partials, a tile each); its
               first row of programs also writes V^T's TF32 parts and remainders (the second
               product's B operand, which the tensor cores take from shared memory only
               contiguous along the keys);
  matf_out     per query block (and block of columns): the partials merged into each row's
               log-sum-exp, then O = exp2(S - lse) V as a long-K product over the workspace.
Two tf32x3 products a (query, key) pair, as the flash forward, for 4 Lq Lk bytes of workspace a
head written once and read once. tf32x3: a.b ~ a_lo.b_hi + a_hi.b_lo + a_hi.b_hi (a_lo.b_lo, about
2^-22 of the term, dropped); Q, K and P are split in registers.

Masks as the other attention kernels: query row i sees the keys j with i + DLO <= j < i + DHI
(kernels/attention.py key_bounds) and j below its batch's key length (HAS_LENS); with MASKED the
score tiles no row sees are neither computed nor written, and matf_out reads only the key range
its rows see, in blocks that lie inside written tiles (its row block inside one row of score
tiles, its key block dividing theirs). A row that sees no key gets out 0 and lse -inf.
Dropout (DROPOUT) on the probabilities as the flash kernels apply it: the row sums keep every
probability, the product takes the kept ones scaled, by the Philox stream of cudakit.dropout.
"""
import triton
import triton.language as tl

from ._attention_triton import _bias_base, _bias_tile, _dot3, _keep_tile, _key_length, _tf32_parts


@triton.jit
def matf_scores(Q, K, V,                # Q: [BH, Lq, D]; K, V: [BH / G, Lk, D] float32, contiguous
                S, PM, PL,              # S: [BH, LQP, LKP] float32; PM, PL: [BH, LKP / BLOCK_N, LQP] float32
                VTH, VTL,               # [BH / G, DP, LKP]: V^T's TF32 parts and remainders
                LENS, ERR,              # HAS_LENS: int [B] key lengths, [BH] entry t seeing LENS[t // H];
                                        # ERR: int64 [8], the device's error flag (a length outside [0, Lk])
                BIAS, sb_b, sb_h, sb_q, sb_k, HB,   # HAS_BIAS: the 4-D bias, element strides (0 broadcast),
                                                    # [BH] entry t its batch t // HB, head t % HB
                qk_scale, Lq, Lk, LQP, LKP, DLO, DHI, G, H,   # qk_scale: scale * log2(e); G: q heads a k, v head
                D: tl.constexpr, DP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                MASKED: tl.constexpr, HAS_LENS: tl.constexpr, HAS_BIAS: tl.constexpr):
    """One (BLOCK_M queries, BLOCK_N keys) tile of [BH] entry t = program_id(2): S = Q K^T *
    qk_scale (+ the bias times log2(e)), -inf where a row does not see a key and past Lk, Lq;
    PM, PL (row max over the tile, sum of exp2(s - max); -inf and 0 for a tile no row sees or past
    the keys). HAS_LENS: a length outside [0, Lk] is recorded in ERR as the flash forward records
    it (_key_length). Programs of row block 0 of the first q head of each group also split V's rows of
    this key block into VTH, VTL (zeros past Lk and D). FLOPs: 2 BLOCK_M BLOCK_N DP x 3; memory:
    4 BLOCK_M BLOCK_N bytes written, the Q and K tiles read."""
    start_m = tl.program_id(0)
    start_n = tl.program_id(1)
    bh = tl.program_id(2).to(tl.int64)
    kvh = bh // G
    m0 = start_m * BLOCK_M
    n0 = start_n * BLOCK_N
    rows = m0 + tl.arange(0, BLOCK_M)
    cols = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, DP)
    kt = kvh * Lk * D + cols[None, :] * D + offs_d[:, None]   # [DP, N]: K^T's (and V^T's) tile
    kv_ok = (offs_d < D)[:, None] & (cols < Lk)[None, :]
    if (start_m == 0) & (bh % G == 0):
        v_hi, v_lo = _tf32_parts(tl.load(V + kt, mask=kv_ok, other=0.0))
        tp = kvh * DP * LKP + offs_d[:, None] * LKP + cols[None, :]
        tl.store(VTH + tp, v_hi)
        tl.store(VTL + tp, v_lo)
    live = True
    if MASKED:   # some row of the tile sees some key of it
        live = (n0 + BLOCK_N - 1 >= m0 + DLO) & (n0 < m0 + BLOCK_M - 1 + DHI)
    length = Lk
    if HAS_LENS:   # (clamped into [0, Lk]; program (0, 0) of a batch's first head records a bad one)
        length = _key_length(LENS, ERR, bh, H, Lk, start_m + start_n, True)
    pp = (bh * tl.num_programs(1) + start_n) * LQP + rows   # this tile's partials
    if live & (n0 < length):
        r_ok = rows < Lq
        q_ok = r_ok[:, None] & (offs_d < D)[None, :]
        q_hi, q_lo = _tf32_parts(tl.load(Q + bh * Lq * D + rows[:, None] * D + offs_d[None, :], mask=q_ok,
                                         other=0.0))
        k_hi, k_lo = _tf32_parts(tl.load(K + kt, mask=kv_ok, other=0.0))
        s = _dot3(q_hi, q_lo, k_hi, k_lo, tl.zeros([BLOCK_M, BLOCK_N], tl.float32)) * qk_scale
        ok = r_ok[:, None] & (cols < length)[None, :]
        if MASKED:
            ok = ok & (cols[None, :] >= rows[:, None] + DLO) & (cols[None, :] < rows[:, None] + DHI)
        if HAS_BIAS:
            s += _bias_tile(BIAS, _bias_base(bh, HB, sb_b, sb_h), rows.to(tl.int64)[:, None] * sb_q,
                            cols.to(tl.int64)[None, :] * sb_k, r_ok[:, None] & (cols < Lk)[None, :])
        s = tl.where(ok, s, float("-inf"))
        top = tl.max(s, 1)
        use = tl.where(top == float("-inf"), 0.0, top)   # (a row that sees none of these keys: sum 0)
        tl.store(S + bh * LQP * LKP + rows[:, None].to(tl.int64) * LKP + cols[None, :], s)
        tl.store(PM + pp, top)
        tl.store(PL + pp, tl.sum(tl.math.exp2(s - use[:, None]), 1))
    else:
        tl.store(PM + pp, tl.full([BLOCK_M], float("-inf"), tl.float32))
        tl.store(PL + pp, tl.zeros([BLOCK_M], tl.float32))


@triton.jit
def matf_out(S, PM, PL, VTH, VTL,      # as matf_scores wrote them
             O, LSE,                   # O: [BH, Lq, D] float32; LSE: [BH, Lq] float32 (natural log)
             LENS,                     # HAS_LENS: as matf_scores
             Lq, Lk, LQP, LKP, NKB, DLO, DHI, G, H,   # NKB: the score tiles along the keys (LKP / BLOCK_N)
             DSEED_LO, DSEED_HI, DTHRESH, DSCALE,    # DROPOUT: the seed's words, keep threshold, 1 / (1 - p)
             D: tl.constexpr, DP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
             NKB_P2: tl.constexpr, MASKED: tl.constexpr, HAS_LENS: tl.constexpr, DROPOUT: tl.constexpr,
             COLS: tl.constexpr = 1):
    """O's rows of one BLOCK_M query block of [BH] entry program_id(1), columns block program_id(2)
    of COLS (DP / COLS wide: more, smaller programs where the row blocks alone leave SMs idle, each
    reading and exponentiating the same scores): lse from the NKB partials of each row, then
    O = sum over the keys the rows see of exp2(s - lse) V (tf32x3, P split in registers, V's parts
    as matf_scores wrote them). FLOPs: 2 BLOCK_M (keys seen) DP / COLS x 3; memory: the block's
    scores read once (4 bytes each), V's parts once a program."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    kvh = bh // G
    m0 = start_m * BLOCK_M
    rows = m0 + tl.arange(0, BLOCK_M)
    nb = tl.arange(0, NKB_P2)
    pp = (bh * NKB + nb[None, :]) * LQP + rows[:, None]
    pm = tl.load(PM + pp, mask=(nb < NKB)[None, :], other=float("-inf"))
    pl = tl.load(PL + pp, mask=(nb < NKB)[None, :], other=0.0)
    top = tl.max(pm, 1)
    use = tl.where(top == float("-inf"), 0.0, top)
    total = tl.sum(pl * tl.math.exp2(pm - use[:, None]), 1)
    seen = total != 0.0   # rows with at least one key (NaN stays NaN)
    lse2 = tl.where(seen, use + tl.math.log2(tl.where(seen, total, 1.0)), 0.0)
    lo = 0
    hi = Lk
    if HAS_LENS:
        hi = _key_length(LENS, LENS, bh, H, Lk, start_m, False)
    if MASKED:   # query i sees the keys j with i + DLO <= j < i + DHI (DLO, DHI clamped to +-(Lq + Lk))
        lo = (tl.maximum(m0 + DLO, 0) // BLOCK_K) * BLOCK_K
        hi = tl.minimum(m0 + BLOCK_M - 1 + DHI, hi)
    offs_k = tl.arange(0, BLOCK_K)
    offs_d = tl.program_id(2) * (DP // COLS) + tl.arange(0, DP // COLS)
    s_base = bh * LQP * LKP + rows[:, None].to(tl.int64) * LKP
    drop_rows = (bh * Lq + rows) * Lk   # the scores' flat indices of these rows (DROPOUT)
    acc = tl.zeros([BLOCK_M, DP // COLS], tl.float32)
    for k0 in range(lo, hi, BLOCK_K):
        ks = k0 + offs_k
        p = tl.math.exp2(tl.load(S + s_base + ks[None, :]) - lse2[:, None])
        if DROPOUT:
            p = tl.where(_keep_tile(drop_rows, ks, DSEED_LO, DSEED_HI, DTHRESH), p * DSCALE, 0.0)
        p_hi, p_lo = _tf32_parts(p)
        bp = kvh * DP * LKP + offs_d[None, :] * LKP + ks[:, None]
        acc = _dot3(p_hi, p_lo, tl.load(VTH + bp), tl.load(VTL + bp), acc)
    r_ok = rows < Lq
    tl.store(O + bh * Lq * D + rows[:, None] * D + offs_d[None, :], acc, mask=r_ok[:, None] & (offs_d < D)[None, :])
    if tl.program_id(2) == 0:
        tl.store(LSE + bh * Lq + rows, tl.where(seen, lse2 * 0.6931471805599453, float("-inf")), mask=r_ok)
