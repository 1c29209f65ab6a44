"""Triton source of the fused attention kernels (imported only once Triton is known to be there).

Forward: one program per (BLOCK_M query rows, batch*head): the scores of a row block against every
key block stay in registers, with the running max / sum rescaling of online softmax; O and the
log-sum-exp of each row (natural log, float32) are written. Memory traffic: Q, K, V read once per
query block, O written once; FLOPs: 4 * BH * Lq * Lk * D (halved with causal).
Backward (FlashAttention-2): delta = rowsum(dO * O); one kernel accumulates dK, dV per key block
over the query blocks, another dQ per query block over the key blocks (no atomics); P is
recomputed from the saved log-sum-exp. FLOPs: 10 * BH * Lq * Lk * D (halved with causal).
All arrays contiguous [BH, L, D]; D may be any size up to BLOCK_D (masked; D is a compile-time
constant, so the mask and the row strides fold away). Each loop over blocks is split: the blocks
that need no mask (wholly inside the keys and below the causal diagonal) run without the
comparisons and selects, the few at the diagonal and the ragged end of the keys with them; the
dK/dV kernel masks query rows past Lq in every block unless EVEN_Q says Lq is a multiple of its
query block (compiled in, not selected per block: a select-driven loop ran the causal backward
1.3-1.6x slower on an H100).
"""
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _key_range(start_m, Lk, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """(n_full, hi) for query block start_m: key blocks before n_full need no mask (inside the keys,
    below the causal diagonal), those in [n_full, hi) do; keys from hi on are never seen."""
    hi = Lk
    n_full = (Lk // BLOCK_N) * BLOCK_N
    if CAUSAL:  # row i attends to keys j <= i: later key blocks are skipped
        hi = tl.minimum(Lk, (start_m + 1) * BLOCK_M)
        n_full = tl.minimum(n_full, ((start_m * BLOCK_M + 1) // BLOCK_N) * BLOCK_N)
    return n_full, hi


@triton.jit
def _fwd_block(acc, l_i, m_i, q, K, V, kv_base, start_n, rows, offs_n, offs_d, d_ok, qk_scale, Lk,
               D: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, PREC: tl.constexpr,
               POS_SCALE: tl.constexpr):
    """One key block of the online softmax; MASK: the block crosses the end of the keys or the
    causal diagonal. POS_SCALE (qk_scale > 0): the row max is taken on the raw scores and scaled
    once, so each probability is one FMA and an exp2 (s * qk_scale - m), not a multiply, a subtract
    and an exp2: 3-7% faster in bfloat16 on an H100 (.carry A/B, 2026-11-25), where the
    forward's non-matrix work is not overlapped with the products. A zero or negative scale keeps
    the scaled scores (max(s) * c is not max(s * c) for c < 0, and -inf * 0 is NaN)."""
    cols = start_n + offs_n
    n_ok = cols < Lk
    kt_mask = d_ok[:, None]
    v_mask = d_ok[None, :]
    if MASK:
        kt_mask = kt_mask & n_ok[None, :]
        v_mask = v_mask & n_ok[:, None]
    kt = tl.load(K + kv_base + cols[None, :] * D + offs_d[:, None], mask=kt_mask, other=0.0)
    s = tl.dot(q, kt, input_precision=PREC)
    if not POS_SCALE:
        s = s * qk_scale
    if MASK:
        valid = n_ok[None, :]
        if CAUSAL:
            valid = valid & (cols[None, :] <= rows[:, None])
        s = tl.where(valid, s, float("-inf"))
    if POS_SCALE:
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(V + kv_base + cols[:, None] * D + offs_d[None, :], mask=v_mask, other=0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
    return acc, l_i, m_new


@triton.jit
def attn_fwd(Q, K, V, O, LSE,            # Q, O: [BH, Lq, D]; K, V: [BH, Lk, D]; LSE: [BH, Lq] float32
             qk_scale, Lq, Lk, D: tl.constexpr,  # qk_scale: softmax scale * log2(e)
             CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
             PREC: tl.constexpr, POS_SCALE: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    m_ok, d_ok = rows < Lq, offs_d < D
    q_base, kv_base = bh * Lq * D, bh * Lk * D
    q = tl.load(Q + q_base + rows[:, None] * D + offs_d[None, :], mask=m_ok[:, None] & d_ok[None, :], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    n_full, hi = _key_range(start_m, Lk, CAUSAL, BLOCK_M, BLOCK_N)
    for start_n in range(0, n_full, BLOCK_N):
        acc, l_i, m_i = _fwd_block(acc, l_i, m_i, q, K, V, kv_base, start_n, rows, offs_n, offs_d, d_ok,
                                   qk_scale, Lk, D, False, CAUSAL, PREC, POS_SCALE)
    for start_n in range(n_full, hi, BLOCK_N):
        acc, l_i, m_i = _fwd_block(acc, l_i, m_i, q, K, V, kv_base, start_n, rows, offs_n, offs_d, d_ok,
                                   qk_scale, Lk, D, True, CAUSAL, PREC, POS_SCALE)
    acc = acc / l_i[:, None]
    tl.store(O + q_base + rows[:, None] * D + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=m_ok[:, None] & d_ok[None, :])
    tl.store(LSE + bh * Lq + rows, (m_i + tl.math.log2(l_i)) * 0.6931471805599453, mask=m_ok)


@triton.jit
def attn_bwd_delta(O, DO, DELTA, Lq, D: tl.constexpr,  # O, DO: [BH, Lq, D]; DELTA: [BH, Lq] float32
                   BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (rows < Lq)[:, None] & (offs_d < D)[None, :]
    ptr = bh * Lq * D + rows[:, None] * D + offs_d[None, :]
    o = tl.load(O + ptr, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO + ptr, mask=mask, other=0.0).to(tl.float32)
    tl.store(DELTA + bh * Lq + rows, tl.sum(o * do, 1), mask=rows < Lq)


@triton.jit
def _dkdv_block(dk, dv, k, v, Q, DO, LSE, DELTA, q_base, lse_base, start_m, cols, offs_m, offs_d, d_ok,
                qk_scale, Lq, D: tl.constexpr, DIAG: tl.constexpr, ROWS: tl.constexpr, PREC: tl.constexpr):
    """One query block's share of dK, dV, with the scores transposed ([keys, queries]) so that P^T
    and dS^T leave their MMA in the layout the next MMA takes (no trip through shared memory).
    DIAG: the block crosses the causal diagonal; ROWS: it may cross the end of the queries (rows
    past Lq load as zeros, but 0 * inf in their scores would reach dK, dV). Keys past Lk only reach
    rows of dK, dV that are never stored."""
    rows = start_m + offs_m
    m_ok = rows < Lq
    qT = tl.load(Q + q_base + rows[None, :] * D + offs_d[:, None], mask=m_ok[None, :] & d_ok[:, None], other=0.0)
    do = tl.load(DO + q_base + rows[:, None] * D + offs_d[None, :], mask=m_ok[:, None] & d_ok[None, :], other=0.0)
    lse2 = tl.load(LSE + lse_base + rows, mask=m_ok, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + lse_base + rows, mask=m_ok, other=0.0)
    pT = tl.math.exp2(tl.dot(k, qT, input_precision=PREC) * qk_scale - lse2[None, :])   # [BLOCK_N, BLOCK_M]
    if DIAG and ROWS:
        pT = tl.where((cols[:, None] <= rows[None, :]) & m_ok[None, :], pT, 0.0)
    elif DIAG:
        pT = tl.where(cols[:, None] <= rows[None, :], pT, 0.0)
    elif ROWS:
        pT = tl.where(m_ok[None, :], pT, 0.0)
    dv += tl.dot(pT.to(do.dtype), do, input_precision=PREC)
    dsT = pT * (tl.dot(v, tl.trans(do), input_precision=PREC) - delta[None, :])
    dk += tl.dot(dsT.to(qT.dtype), tl.trans(qT), input_precision=PREC)
    return dk, dv


@triton.jit
def attn_bwd_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV,   # as attn_fwd; DK, DV: [BH, Lk, D]
                  qk_scale, sm_scale, Lq, Lk, D: tl.constexpr,
                  CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                  PREC: tl.constexpr, EVEN_Q: tl.constexpr):
    """EVEN_Q: Lq is a multiple of BLOCK_M, so no query block crosses Lq and none needs a row mask
    (the usual case; the other compiles a row select into every block)."""
    start_n = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    cols = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    n_ok, d_ok = cols < Lk, offs_d < D
    q_base, kv_base, lse_base = bh * Lq * D, bh * Lk * D, bh * Lq
    kv_mask = n_ok[:, None] & d_ok[None, :]
    k = tl.load(K + kv_base + cols[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + kv_base + cols[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    mid = 0
    if CAUSAL:  # rows i < j never see key j; from row (start_n + 1) * BLOCK_N - 1 on all of them do
        lo = (start_n * BLOCK_N // BLOCK_M) * BLOCK_M
        mid = lo + tl.cdiv((start_n + 1) * BLOCK_N - 1 - lo, BLOCK_M) * BLOCK_M
        for start_m in range(lo, tl.minimum(mid, Lq), BLOCK_M):
            dk, dv = _dkdv_block(dk, dv, k, v, Q, DO, LSE, DELTA, q_base, lse_base, start_m, cols, offs_m, offs_d,
                                 d_ok, qk_scale, Lq, D, True, not EVEN_Q, PREC)
    for start_m in range(mid, Lq, BLOCK_M):
        dk, dv = _dkdv_block(dk, dv, k, v, Q, DO, LSE, DELTA, q_base, lse_base, start_m, cols, offs_m, offs_d,
                             d_ok, qk_scale, Lq, D, False, not EVEN_Q, PREC)
    tl.store(DK + kv_base + cols[:, None] * D + offs_d[None, :], (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + kv_base + cols[:, None] * D + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _dq_block(dq, q, do, lse2, delta, K, V, kv_base, start_n, rows, offs_n, offs_d, d_ok, qk_scale, Lk,
              D: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, PREC: tl.constexpr):
    """One key block's share of dQ; MASK: the block crosses the end of the keys or the causal
    diagonal. Rows past Lq load as zeros and are never stored."""
    cols = start_n + offs_n
    n_ok = cols < Lk
    kv_mask = d_ok[None, :]
    if MASK:
        kv_mask = kv_mask & n_ok[:, None]
    k = tl.load(K + kv_base + cols[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + kv_base + cols[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
    s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
    p = tl.math.exp2(s - lse2[:, None])
    if MASK:
        valid = n_ok[None, :]
        if CAUSAL:
            valid = valid & (cols[None, :] <= rows[:, None])
        p = tl.where(valid, p, 0.0)
    dp = tl.dot(do, tl.trans(v), input_precision=PREC)
    ds = p * (dp - delta[:, None])
    dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
    return dq


@triton.jit
def attn_bwd_dq(Q, K, V, DO, LSE, DELTA, DQ,          # as attn_fwd; DQ: [BH, Lq, D]
                qk_scale, sm_scale, Lq, Lk, D: tl.constexpr,
                CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                PREC: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    m_ok, d_ok = rows < Lq, offs_d < D
    q_base, kv_base = bh * Lq * D, bh * Lk * D
    q_mask = m_ok[:, None] & d_ok[None, :]
    q = tl.load(Q + q_base + rows[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
    do = tl.load(DO + q_base + rows[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
    lse2 = tl.load(LSE + bh * Lq + rows, mask=m_ok, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + bh * Lq + rows, mask=m_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    n_full, hi = _key_range(start_m, Lk, CAUSAL, BLOCK_M, BLOCK_N)
    for start_n in range(0, n_full, BLOCK_N):
        dq = _dq_block(dq, q, do, lse2, delta, K, V, kv_base, start_n, rows, offs_n, offs_d, d_ok, qk_scale, Lk,
                       D, False, CAUSAL, PREC)
    for start_n in range(n_full, hi, BLOCK_N):
        dq = _dq_block(dq, q, do, lse2, delta, K, V, kv_base, start_n, rows, offs_n, offs_d, d_ok, qk_scale, Lk,
                       D, True, CAUSAL, PREC)
    tl.store(DQ + q_base + rows[:, None] * D + offs_d[None, :], (dq * sm_scale).to(DQ.dtype.element_ty), mask=q_mask)
