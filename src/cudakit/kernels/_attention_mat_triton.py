"""Triton source of the materialised float32 attention backward (tf32x3 products; imported only
once Triton is known to be there; the host side is kernels/attention_materialized.py).

The flash backward (_attention_triton.py) recomputes the scores in two fused kernels and keeps
every operand tile in registers and shared memory, where float32 tiles are twice the bytes of
16-bit ones: at head dim 128 the tiles that fit are 64 x 32 and its products ran at about
115 TF32 TFLOP/s on an H100. Here the work is split into wide, simple kernels instead:
  mat_prep    the long products' B operands split once into TF32 parts and remainders, transposed
              (K^T, Q^T and dO^T), and delta = rowsum(dO * O);
  mat_scores  per (query block, key block): S = Q K^T and dP = dO V^T with the reduction over D in
              one step, then P = exp(S - lse) and dS = P (dP - delta), written to a float32 workspace;
  mat_long    dQ = dS K, dK = dS^T Q, dV = P^T dO as long-K products over the workspace.
Five tf32x3 products a (query, key) pair, as FlashAttention-2's order, with no atomics (the
result is bitwise the same on every run; but a broadcasting bias's row or key sums in a call not
asked to be deterministic, below), at the cost of 2 x 4 Lq Lk bytes of workspace a head
(the host processes heads in chunks). tf32x3: a.b ~ a_lo.b_hi + a_hi.b_lo + a_hi.b_hi, a_lo.b_lo
(about 2^-22 of the term) dropped; the score kernel's operands and the long products' A operands
(P, dS) are split in registers.

Grouped-query k, v (G > 1): k, v hold BH / G heads, q head t reading head t // G; the split K^T
stays per q head, and dK, dV's long products sum each group's heads (mat_long GROUPS). Key lengths
(HAS_LENS): [BH] entry t sees keys below LENS[t // H] (clamped to [0, Lk]); the score kernel writes
zeros past it. A bias (HAS_BIAS) is added to the scores as the flash kernels add it, read in place
by its strides; its gradient, dS summed over the dims it broadcasts, goes out of the score kernel
(DB_MODE 1: stored, one writer an element; 2: added atomically; 4, a bias broadcast over its rows
or its keys: each tile's sums stored as partials, summed after) or is summed from the workspace's
dS after it (mat_bias_sum: no atomics). Dropout on the probabilities (DROPOUT): the flash kernels'
Philox mask of score (t, i, j), element (t Lq + i) Lk + j of cudakit.dropout's stream, regenerated
here once: P is stored dropped and scaled (dV's operand) and dP masked and scaled before dS.

Padding: the split arrays and the workspace are padded to LQP / LKP rows (multiples of 128) and DP
columns (head_dim's power of two) and hold zeros there, so the products read whole tiles without
masks. Masks: query row i sees the keys j with i + DLO <= j < i + DHI (causal, aligned bottom-right,
and sliding windows: kernels/attention.py key_bounds). With MASKED, score tiles no row sees are
neither computed nor written, and the long products read only the workspace entries a row sees.
"""
import triton
import triton.language as tl

from ._attention_triton import _bias_base, _bias_grad, _bias_tile, _dot3, _keep_tile, _tf32_parts
from ._triton_pdl import _pdl_start


@triton.jit
def _split_rows_t(X, HIT, LOT, r, src, rows, L, LP, D: tl.constexpr, DP: tl.constexpr):
    """Rows `rows` of matrix src of X ([R', L, D]) split into TF32 parts and remainders, written
    transposed into matrix r of HIT, LOT ([R, DP, LP]), zeros past L and D up to LP and DP.
    Returns the rows read (float32, zero past L, D)."""
    cols = tl.arange(0, DP)
    x = tl.load(X + src * L * D + rows[:, None] * D + cols[None, :],
                mask=(rows < L)[:, None] & (cols < D)[None, :], other=0.0)
    hi, lo = _tf32_parts(x)
    p = r * DP * LP + cols[None, :] * LP + rows[:, None]
    keep = (rows < LP)[:, None]
    tl.store(HIT + p, hi, mask=keep)
    tl.store(LOT + p, lo, mask=keep)
    return x


@triton.jit
def mat_prep(Q, K, O, DO,                      # Q, O, DO: [BH, Lq, D]; K: [BH / G, Lk, D] float32, contiguous
             KTH, KTL, QTH, QTL, DOTH, DOTL,   # [BH, DP, LKP] (K^T) and [BH, DP, LQP] (Q^T, dO^T): TF32 parts, remainders
             DELTA,                            # [BH, Lq] float32: rowsum(dO * O)
             Lq, Lk, LQP, LKP, G,              # G: q heads a k head serves
             D: tl.constexpr, DP: tl.constexpr, BLOCK_L: tl.constexpr, PDL: tl.constexpr = None):
    """One program per (BLOCK_L rows, matrix, operand): operand 0 K, 1 Q, 2 dO (and delta from O),
    each split and transposed: the long products' B operands. Memory traffic: per element of K
    and Q 4 + 8 bytes, of dO and O 8 + 8 (the padding's zeros besides)."""
    _pdl_start(PDL)
    rows = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    r = tl.program_id(1).to(tl.int64)
    which = tl.program_id(2)
    if which == 0:
        _split_rows_t(K, KTH, KTL, r, r // G, rows, Lk, LKP, D, DP)
    elif which == 1:
        _split_rows_t(Q, QTH, QTL, r, r, rows, Lq, LQP, D, DP)
    else:
        do = _split_rows_t(DO, DOTH, DOTL, r, r, rows, Lq, LQP, D, DP)
        cols = tl.arange(0, DP)
        o = tl.load(O + r * Lq * D + rows[:, None] * D + cols[None, :],
                    mask=(rows < Lq)[:, None] & (cols < D)[None, :], other=0.0)
        tl.store(DELTA + r * Lq + rows, tl.sum(o * do, 1), mask=rows < Lq)


@triton.jit
def _prep_in_scores(Q, DO, K, KTH, KTL, QTH, QTL, DOTH, DOTL, bh, kvh, start_m, start_n, Lq, Lk, LQP, LKP,
                    D: tl.constexpr, DP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """mat_prep's split, done by the score kernel's first column of programs (Q^T, dO^T parts of
    their rows) and first row (K^T parts of their keys), whether or not their tile is seen."""
    offs_d = tl.arange(0, DP)
    if start_n == 0:
        rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        qp = bh * Lq * D + rows[:, None] * D + offs_d[None, :]
        q_ok = (rows < Lq)[:, None] & (offs_d < D)[None, :]
        tp = bh * DP * LQP + offs_d[None, :] * LQP + rows[:, None]
        hi, lo = _tf32_parts(tl.load(Q + qp, mask=q_ok, other=0.0))
        tl.store(QTH + tp, hi)
        tl.store(QTL + tp, lo)
        hi, lo = _tf32_parts(tl.load(DO + qp, mask=q_ok, other=0.0))
        tl.store(DOTH + tp, hi)
        tl.store(DOTL + tp, lo)
    if start_m == 0:
        cols = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
        kt = kvh * Lk * D + cols[None, :] * D + offs_d[:, None]      # [DP, N]: K^T's tile
        hi, lo = _tf32_parts(tl.load(K + kt, mask=(offs_d < D)[:, None] & (cols < Lk)[None, :], other=0.0))
        tp = bh * DP * LKP + offs_d[:, None] * LKP + cols[None, :]
        tl.store(KTH + tp, hi)
        tl.store(KTL + tp, lo)


@triton.jit
def mat_scores(Q, DO, K, V, O,    # Q, DO, O: [BH, Lq, D]; K, V: [BH / G, Lk, D]
               LSE, DELTA, P, DS,  # LSE (natural log), DELTA: [BH, Lq] float32; P, DS: [BH, LQP, LKP] float32
               KTH, KTL, QTH, QTL, DOTH, DOTL,   # SPLIT_B: as mat_prep writes them
               LENS,               # HAS_LENS: int32/int64 [B] key lengths, [BH] entry t (BH0 + t: the whole
                                   # arrays' entry) seeing LENS[(BH0 + t) // H]
               BIAS, sb_b, sb_h, sb_q, sb_k, HB,   # HAS_BIAS: the 4-D bias, element strides (0 broadcast),
                                                   # entry t its batch t // HB, head t % HB
               DBIAS, sd_b, sd_h, sd_q, sd_k,      # its gradient (float32, or the bias's dtype for DB_MODE 1);
                                                   # DB_MODE 4: the partials' workspace, strides of a
                                                   # bh, a row block and a key block (sd_h not read)
               qk_scale, Lq, Lk, LQP, LKP, DLO, DHI,   # qk_scale: scale * log2(e)
               G, H, BH0,          # G: q heads a k, v head serves
               DSEED_LO, DSEED_HI, DTHRESH, DSCALE,   # DROPOUT: the seed's words, keep threshold, 1 / (1 - p)
               D: tl.constexpr, DP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               MASKED: tl.constexpr, OWN_DELTA: tl.constexpr = False, SPLIT_B: tl.constexpr = False,
               HAS_LENS: tl.constexpr = False, HAS_BIAS: tl.constexpr = False, DB_MODE: tl.constexpr = 0,
               DBQ: tl.constexpr = True, DBK: tl.constexpr = True, DROPOUT: tl.constexpr = False,
               BIAS_K1: tl.constexpr = False, DB_K1: tl.constexpr = False, PDL: tl.constexpr = None):
    """P and dS of one (BLOCK_M queries, BLOCK_N keys) tile: S = Q K^T and dP = dO V^T (tf32x3,
    over D in one step), P = exp2(S qk_scale - lse log2(e)), dS = P (dP - delta); 0 where a row
    does not see a key, past Lq and past Lk. Every operand is split in registers (K, V split
    ahead by a pass of their own ran the backward 4-10% slower at head dims 64 and 128 on an
    H100, 2026-11-27). OWN_DELTA: delta = rowsum(dO * O) of the tile's rows computed here (DELTA
    not read); SPLIT_B: mat_prep's split of K^T, Q^T, dO^T done here too (_prep_in_scores), so
    that no prep pass runs. FLOPs: 2 x 2 BLOCK_M BLOCK_N DP x 3 (tf32x3); memory: 8 BLOCK_M
    BLOCK_N bytes written, the Q, dO, K and V tiles (and O's with OWN_DELTA) read."""
    _pdl_start(PDL)
    if BIAS_K1:   # the bias's key stride 1 as a constant: its tiles load as vectors (attention._unit_keys)
        sb_k = 1
    tl.static_assert(not DB_K1 or DB_MODE == 1 or DB_MODE == 2, "DB_K1: a per-element gradient (DB_MODE 1, 2)")
    if DB_K1:   # (DB_MODE 1 or 2: the gradient's key stride 1, as BIAS_K1; DB_MODE 4's sd_k strides key blocks)
        sd_k = 1
    start_m = tl.program_id(0)
    start_n = tl.program_id(1)
    bh = tl.program_id(2).to(tl.int64)
    kvh = bh // G
    if SPLIT_B:
        _prep_in_scores(Q, DO, K, KTH, KTL, QTH, QTL, DOTH, DOTL, bh, kvh, start_m, start_n, Lq, Lk, LQP, LKP,
                        D, DP, BLOCK_M, BLOCK_N)
    m0 = start_m * BLOCK_M
    n0 = start_n * BLOCK_N
    seen = True
    if MASKED:   # some row of the tile sees some key of it
        seen = (n0 + BLOCK_N - 1 >= m0 + DLO) & (n0 < m0 + BLOCK_M - 1 + DHI) & (m0 < Lq) & (n0 < Lk)
    length = Lk
    live = seen
    if HAS_LENS:
        length = tl.minimum(tl.maximum(tl.load(LENS + (bh + BH0) // H).to(tl.int64), 0), Lk).to(tl.int32)
        if seen & (n0 >= length):   # a tile past the keys: zeros (the long products may read them)
            zout = bh * LQP * LKP + (m0 + tl.arange(0, BLOCK_M))[:, None].to(tl.int64) * LKP \
                + (n0 + tl.arange(0, BLOCK_N))[None, :]
            zero = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            tl.store(P + zout, zero)
            tl.store(DS + zout, zero)
        live = seen & (n0 < length)
    if live:
        rows = m0 + tl.arange(0, BLOCK_M)
        cols = n0 + tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, DP)
        r_ok = rows < Lq
        qp = bh * Lq * D + rows[:, None] * D + offs_d[None, :]
        q_ok = r_ok[:, None] & (offs_d < D)[None, :]
        kt = kvh * Lk * D + cols[None, :] * D + offs_d[:, None]      # [DP, N] tiles of K, V
        kv_ok = (offs_d < D)[:, None] & (cols < Lk)[None, :]
        if OWN_DELTA:
            delta = tl.sum(tl.load(O + qp, mask=q_ok, other=0.0) * tl.load(DO + qp, mask=q_ok, other=0.0), 1)
        else:
            delta = tl.load(DELTA + bh * Lq + rows, mask=r_ok, other=0.0)
        # one product's operands live at a time (Q's parts and dO's together spilled at head dim
        # 128: the backward ran 2.90 ms against 2.35, H100, 2026-11-27)
        q_hi, q_lo = _tf32_parts(tl.load(Q + qp, mask=q_ok, other=0.0))
        k_hi, k_lo = _tf32_parts(tl.load(K + kt, mask=kv_ok, other=0.0))
        s = _dot3(q_hi, q_lo, k_hi, k_lo, tl.zeros([BLOCK_M, BLOCK_N], tl.float32))
        do_hi, do_lo = _tf32_parts(tl.load(DO + qp, mask=q_ok, other=0.0))
        v_hi, v_lo = _tf32_parts(tl.load(V + kt, mask=kv_ok, other=0.0))
        dp = _dot3(do_hi, do_lo, v_hi, v_lo, tl.zeros([BLOCK_M, BLOCK_N], tl.float32))
        lse2 = tl.load(LSE + bh * Lq + rows, mask=r_ok, other=0.0) * 1.4426950408889634
        ok = r_ok[:, None] & (cols < length)[None, :]
        if MASKED:
            ok = ok & (cols[None, :] >= rows[:, None] + DLO) & (cols[None, :] < rows[:, None] + DHI)
        s = s * qk_scale
        if HAS_BIAS:   # (a row the bias masks whole: lse -inf, its p 0 below, not NaN)
            s += _bias_tile(BIAS, _bias_base(bh + BH0, HB, sb_b, sb_h), rows.to(tl.int64)[:, None] * sb_q,
                            cols.to(tl.int64)[None, :] * sb_k, r_ok[:, None] & (cols < Lk)[None, :])
            ok = ok & (lse2 != float("-inf"))[:, None]
        p = tl.where(ok, tl.math.exp2(s - lse2[:, None]), 0.0)   # (a row seeing no key: lse -inf)
        if DROPOUT:
            keep = _keep_tile(((bh + BH0) * Lq + rows) * Lk, cols, DSEED_LO, DSEED_HI, DTHRESH)
            dp = tl.where(keep, dp * DSCALE, 0.0)
        ds = tl.where(ok, p * (dp - delta[:, None]), 0.0)
        out = bh * LQP * LKP + rows[:, None].to(tl.int64) * LKP + cols[None, :]
        if DROPOUT:
            tl.store(P + out, tl.where(keep, p * DSCALE, 0.0))
        else:
            tl.store(P + out, p)
        tl.store(DS + out, ds)
        if DB_MODE == 4:   # this tile's partials (sd_b, sd_q, sd_k: the strides of a bh, a row and a key block)
            _bias_grad(DBIAS, (bh + BH0) * sd_b + start_m.to(tl.int64) * sd_q + start_n.to(tl.int64) * sd_k,
                       rows.to(tl.int64), cols.to(tl.int64), ds, r_ok, cols < Lk, DB_MODE, DBQ, DBK)
        elif DB_MODE != 0:
            _bias_grad(DBIAS, _bias_base(bh + BH0, HB, sd_b, sd_h), rows.to(tl.int64) * sd_q,
                       cols.to(tl.int64) * sd_k, ds, r_ok, cols < Lk, DB_MODE, DBQ, DBK)


@triton.jit
def mat_bias_sum(DS,                            # [CH, LQP, LKP] float32: dS of [BH] entries T0 .. T0 + CH - 1
                 DBIAS, sd_b, sd_h, sd_q, sd_k,  # [NB, NH, Lq | 1, Lk | 1] float32, zeroed before the first chunk
                 NB, NH, HB, NBATCH, T0, CH, Lq, Lk, LQP, LKP, DLO, DHI,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DBQ: tl.constexpr, DBK: tl.constexpr,
                 MASKED: tl.constexpr, PDL: tl.constexpr = None):
    """The bias's gradient summed from the workspace: program (row block, key block, target
    (batch, head)) adds to its block of DBIAS the dS tiles of every [BH] entry t = b HB + h in this
    chunk (T0 <= t < T0 + CH) that the target broadcasts over (every batch b < NBATCH where NB is 1, every head h < HB
    where NH is 1), over every row block where the bias has no row dim (not DBQ) and every key block
    where it has no key dim (not DBK). One writer an element: deterministic. The tiles are the
    score kernel's, and with MASKED those no row sees (not written) are skipped as it skips them.
    Memory: the chunk's dS read once (8 BLOCK_M BLOCK_N bytes a tile), DBIAS read and written."""
    _pdl_start(PDL)
    pid_t = tl.program_id(2)
    bb = pid_t // NH
    hb = pid_t % NH
    b_lo = tl.where(NB > 1, bb, 0)
    b_hi = tl.where(NB > 1, bb + 1, NBATCH)
    h_lo = tl.where(NH > 1, hb, 0)
    h_hi = tl.where(NH > 1, hb + 1, HB)
    m_lo, m_hi, n_lo, n_hi = 0, Lq, 0, Lk
    if DBQ:
        m_lo = tl.program_id(0) * BLOCK_M
        m_hi = m_lo + 1
    if DBK:
        n_lo = tl.program_id(1) * BLOCK_N
        n_hi = n_lo + 1
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for b in range(b_lo, b_hi):
        for h in range(h_lo, h_hi):
            t = (b * HB + h - T0).to(tl.int64)
            if (t >= 0) & (t < CH):
                for m0 in range(m_lo, m_hi, BLOCK_M):
                    for n0 in range(n_lo, n_hi, BLOCK_N):
                        seen = True
                        if MASKED:   # (as mat_scores decides)
                            seen = (n0 + BLOCK_N - 1 >= m0 + DLO) & (n0 < m0 + BLOCK_M - 1 + DHI)
                        if seen:
                            acc += tl.load(DS + t * LQP * LKP + (m0 + offs_m)[:, None].to(tl.int64) * LKP
                                           + (n0 + offs_n)[None, :])
    base = bb.to(tl.int64) * sd_b + hb.to(tl.int64) * sd_h
    rows = tl.program_id(0) * BLOCK_M + offs_m
    cols = tl.program_id(1) * BLOCK_N + offs_n
    if DBQ and DBK:
        ptr = DBIAS + base + rows[:, None].to(tl.int64) * sd_q + cols[None, :].to(tl.int64) * sd_k
        ok = (rows < Lq)[:, None] & (cols < Lk)[None, :]
        tl.store(ptr, tl.load(ptr, mask=ok, other=0.0) + acc, mask=ok)
    if DBQ and not DBK:
        ptr = DBIAS + base + rows.to(tl.int64) * sd_q
        tl.store(ptr, tl.load(ptr, mask=rows < Lq, other=0.0) + tl.sum(acc, 1), mask=rows < Lq)
    if DBK and not DBQ:
        ptr = DBIAS + base + cols.to(tl.int64) * sd_k
        tl.store(ptr, tl.load(ptr, mask=cols < Lk, other=0.0) + tl.sum(acc, 0), mask=cols < Lk)
    if not DBQ and not DBK:
        tl.store(DBIAS + base, tl.load(DBIAS + base) + tl.sum(tl.sum(acc, 1), 0))


@triton.jit
def _b_tile(BHI, BLO, bh, ks, offs_d, KP, DP: tl.constexpr):
    """The [BLOCK_K, DP] tile of B at reduced positions ks: its TF32 parts and remainders, as
    mat_prep split them ([BH, DP, KP] transposed parts)."""
    bp = bh * DP * KP + offs_d[None, :] * KP + ks[:, None]
    return tl.load(BHI + bp), tl.load(BLO + bp)


@triton.jit
def _a_tile(A, a_base, rows, ks, LKP, Lq, Lk, DLO, DHI, TRANS_A: tl.constexpr, MASKED: tl.constexpr):
    """The [BLOCK_M, BLOCK_K] tile of op(A) (A or A^T) at rows x ks, split in registers; with
    MASKED, 0 where a row does not see a key (entries the score kernel may not have written)."""
    if TRANS_A:   # rows: keys (columns of A), ks: queries (rows of A)
        ap = A + a_base + ks[None, :].to(tl.int64) * LKP + rows[:, None]
    else:
        ap = A + a_base + rows[:, None].to(tl.int64) * LKP + ks[None, :]
    if MASKED:
        if TRANS_A:
            ok = (ks[None, :] < Lq) & (rows[:, None] < Lk) & (rows[:, None] >= ks[None, :] + DLO) \
                & (rows[:, None] < ks[None, :] + DHI)
        else:
            ok = (rows[:, None] < Lq) & (ks[None, :] < Lk) & (ks[None, :] >= rows[:, None] + DLO) \
                & (ks[None, :] < rows[:, None] + DHI)
        a = tl.load(ap, mask=ok, other=0.0)
    else:
        a = tl.load(ap)
    return _tf32_parts(a)


@triton.jit
def mat_long(A, BHI, BLO, C,   # A: [BH, LQP, LKP] float32 (P or dS); BHI, BLO: B's parts [BH, DP, KP];
                               # C: [BH / GROUPS, M, D]
             scale, M, Lq, Lk, LQP, LKP, KP, DLO, DHI,
             D: tl.constexpr, DP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
             TRANS_A: tl.constexpr, MASKED: tl.constexpr, REV: tl.constexpr = False,
             ALIGNED: tl.constexpr = False, COLS: tl.constexpr = 1, GROUPS: tl.constexpr = 1,
             PDL: tl.constexpr = None):
    """C = scale * op(A) B, rows BLOCK_M at a time, over the reduced axis: op(A) = A, rows the
    queries, reduced over the keys (dQ = dS K; M = Lq, KP = LKP) or, with TRANS_A, A^T, rows the
    keys, reduced over the queries (dK = dS^T Q, dV = P^T dO; M = Lk, KP = LQP). B as mat_prep
    split it: its transpose's TF32 parts (the tensor cores read 32-bit operands from shared memory
    only contiguous along the reduced axis). A's tiles are split in registers. REV: the heads in
    reverse order (the last written first, while in L2).
    With MASKED only the reduced range some row of the block sees is read (BLOCK_K blocks). The
    score kernel leaves the tiles no row sees unwritten; ALIGNED: the block's rows lie in one row
    of score tiles (BLOCK_M divides the score tile's side along them) and BLOCK_K divides its other
    side, so every entry read lies in a tile some row of the block sees, written whole (zeros
    where a row does not see a key, and in the padding): read without a mask. Else entries a row
    does not see are masked to 0 on load.
    FLOPs: 2 BLOCK_M KP DP x 3 a program (less with MASKED); memory: A's rows (or columns) read
    once, B's tiles once a program. Measured slower on an H100 with Triton 3.6 and removed
    (2026-11-27 07:10 UTC, attention_f32_variants.py --mat-shipped): B split in these registers from
    B itself (no split pass, but its loads no longer pipelined into shared memory), B4 H8 S2048
    D128 5.795 ms against 2.261 and B16 H8 S512 D64 0.597 against 0.499; dK and dV in one
    kernel, 2.420 and 0.514 ms.
    COLS > 1: C's columns in COLS blocks of DP / COLS, one program each (grid dim z): more, smaller
    programs where the row blocks alone leave SMs idle (A's tiles are then read and split COLS
    times, from L2). GROUPS > 1 (grouped-query k, v; with TRANS_A): program (., g, .) sums the
    products of heads g GROUPS .. g GROUPS + GROUPS - 1 into C's head g (dK, dV per k, v head)."""
    _pdl_start(PDL)
    start_m = tl.program_id(0)
    bh_out = tl.program_id(1).to(tl.int64)
    if REV:
        bh_out = tl.num_programs(1) - 1 - bh_out
    m0 = start_m * BLOCK_M
    rows = m0 + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    offs_d = tl.program_id(2) * (DP // COLS) + tl.arange(0, DP // COLS)
    lo = 0
    hi = KP
    if MASKED:   # the reduced range the block's rows see (DLO, DHI clamped by the host to +-(Lq + Lk))
        if TRANS_A:   # key j is seen by the queries i with j - DHI < i <= j - DLO
            lo = tl.maximum(m0 - DHI + 1, 0)
            hi = tl.minimum(m0 + BLOCK_M - DLO, Lq)
        else:         # query i sees the keys j with i + DLO <= j < i + DHI
            lo = tl.maximum(m0 + DLO, 0)
            hi = tl.minimum(m0 + BLOCK_M - 1 + DHI, Lk)
        lo = (lo // BLOCK_K) * BLOCK_K
    acc = tl.zeros([BLOCK_M, DP // COLS], tl.float32)
    for g in range(GROUPS):
        bh = bh_out * GROUPS + g
        a_base = bh * LQP * LKP
        for k0 in range(lo, hi, BLOCK_K):
            ks = k0 + offs_k
            a_hi, a_lo = _a_tile(A, a_base, rows, ks, LKP, Lq, Lk, DLO, DHI, TRANS_A, MASKED and not ALIGNED)
            b_hi, b_lo = _b_tile(BHI, BLO, bh, ks, offs_d, KP, DP)
            acc = _dot3(a_hi, a_lo, b_hi, b_lo, acc)
    out = bh_out * M * D + rows[:, None] * D + offs_d[None, :]
    ok = (rows < M)[:, None] & (offs_d < D)[None, :]
    tl.store(C + out, acc * scale, mask=ok)
