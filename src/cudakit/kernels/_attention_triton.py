"""Triton source of the fused attention kernels (imported only once Triton is known to be there).

Forward: one program per (BLOCK_M query rows, batch*head): the scores of a row block against every
key block stay in registers, with the running max / sum rescaling of online softmax; O and the
log-sum-exp of each row (natural log, float32) are written. Memory traffic: Q, K, V read once per
query block, O written once; FLOPs: 4 * BH * Lq * Lk * D (halved with causal).
Backward (FlashAttention-2): delta = rowsum(dO * O); one kernel accumulates dK, dV per key block
over the query blocks, another dQ per query block over the key blocks (no atomics); P is
recomputed from the saved log-sum-exp. FLOPs: 10 * BH * Lq * Lk * D (halved with causal).
All arrays contiguous [BH, L, D]; D may be any size up to BLOCK_D (masked; D is a compile-time
constant, so the mask and the row strides fold away). VARLEN: packed (total, H, D) sequences
(_seq), or with UNIFORM (B, L, H, D) arrays read in place (_uniform: attention's layout "blhd",
q's, k's and v's rows and the gradients' any number of elements apart, row strides as arguments). float32 under tf32x3: each product is three
TF32 products of parts and remainders; Triton splits both operands inside the loop, except in the
forward's SPLIT form, which splits K's and V's tiles once each (V comes transposed, tf32_split).

Masks. Query row i attends the keys j with i + DLO <= j < i + DHI and j < its batch's key length
(LENS[b], b = bh // H, with HAS_LENS; Lk without): one interval a row, which covers causal masks
(DHI = Lk - Lq + 1, aligned bottom-right), sliding windows and padded keys (kernels/attention.py
key_bounds). Each loop over blocks is split three ways: the blocks every row of the block sees
whole run without comparisons and selects, those crossing an interval's ends with them (the
causal diagonal, a window's edges, the ragged end of the keys), and blocks no row sees are never
visited. A row that sees no key at all gets out = 0 and lse = -inf (never NaN: the running max
of such a row is taken as 0 in the exponentials). The dK/dV kernel masks query rows past Lq in
every block unless EVEN_Q says Lq is a multiple of its query block (compiled in, not selected per
block: a select-driven loop ran the causal backward 1.3-1.6x slower on an H100).
"""
import triton
import triton.language as tl

from ._triton_pdl import _pdl_start   # (each kernel's first step)

LOG2E = 1.4426950408889634


@triton.jit
def _key_length(LENS, ERR, bh, H, Lk, start_m, CHECK: tl.constexpr):
    """Batch (bh // H)'s key length, clamped into [0, Lk]; CHECK (the forward): its first program of
    the batch records a length outside [0, Lk] in the device's error flag ERR (code 10,
    kernels/attention.py ERR_KEY_LENGTHS, then the batch, the value and Lk; the first bad call since
    the last check wins)."""
    b = bh // H
    n = tl.load(LENS + b).to(tl.int64)
    if CHECK:
        if ((n < 0) | (n > Lk)) & (start_m == 0) & (bh % H == 0):
            zero = n * 0
            if tl.atomic_cas(ERR, zero, zero + 10) == 0:   # kernels/attention.py ERR_KEY_LENGTHS
                tl.store(ERR + 1, b)
                tl.store(ERR + 2, n)
                tl.store(ERR + 3, zero + Lk)
    return tl.minimum(tl.maximum(n, 0), Lk).to(tl.int32)


@triton.jit
def _seq(CU_Q, CU_K, ERR, bh, H, G, Lq, Lk, TQ, TK, SQ, SK, DLO, DHI, start, CHECK: tl.constexpr, D: tl.constexpr):
    """Packed variable-length sequences (VARLEN): batch*head bh is sequence b = bh // H, head
    h = bh % H of q (total_q rows of H heads, SQ elements a row) and of k, v (total_k rows of H // G
    heads, SK elements a row; head h // G), the sequence's rows cu[b]..cu[b + 1] of each. Returns
    its (Lq, Lk) clamped to the launch's maxima Lq, Lk, the element offsets of its first q row
    (head h), first row of the (total_q, H, D) arrays the kernels write or take beside q (out, its
    gradient, dq), first k row (head h // G) and first row of an (total_k, H, D) key gradient
    (head h), its mask bounds (DLO, DHI are relative to the bottom-right alignment: this sequence's
    Lk - Lq is added where they bound), and the offset of its first (total_q, H) lse entry. A
    sequence outside the packed arrays (TQ, TK rows) or longer than the launch covers is cut to what
    lies inside both; CHECK (the forward): the first program of the sequence records it in the
    device's error flag ERR (code 11, then b, its Lq and Lk, the launch's Lq and Lk, and what is
    wrong on each side)."""
    b = bh // H
    h = bh % H
    q0 = tl.load(CU_Q + b).to(tl.int64)
    k0 = tl.load(CU_K + b).to(tl.int64)
    lq = tl.load(CU_Q + b + 1).to(tl.int64) - q0
    lk = tl.load(CU_K + b + 1).to(tl.int64) - k0
    if CHECK:   # what is wrong, bits 0-2 for cu_seqlens_q and 3-5 for cu_seqlens_k: decreasing or
        # negative, past max_seqlen, past the packed arrays' rows
        zero = lq * 0
        why = (tl.where((lq < 0) | (q0 < 0), 1, 0) | tl.where(lq > Lq, 2, 0) | tl.where(q0 + lq > TQ, 4, 0)
               | tl.where((lk < 0) | (k0 < 0), 8, 0) | tl.where(lk > Lk, 16, 0) | tl.where(k0 + lk > TK, 32, 0))
        # (nested: the atomic runs only where there is a fault, which `and` would not ensure in Triton)
        if (why != 0) & (start == 0) & (h == 0):  # noqa: SIM102
            if tl.atomic_cas(ERR, zero, zero + 11) == 0:   # kernels/attention.py ERR_CU_SEQLENS
                tl.store(ERR + 1, b)
                tl.store(ERR + 2, lq)
                tl.store(ERR + 3, lk)
                tl.store(ERR + 4, zero + Lq)
                tl.store(ERR + 5, zero + Lk)
                tl.store(ERR + 6, zero + why)
    lq = tl.where(q0 < 0, 0, tl.minimum(tl.maximum(tl.minimum(lq, TQ - q0), 0), Lq)).to(tl.int32)
    lk = tl.where(k0 < 0, 0, tl.minimum(tl.maximum(tl.minimum(lk, TK - k0), 0), Lk)).to(tl.int32)
    q0 = tl.maximum(q0, 0)
    k0 = tl.maximum(k0, 0)
    off = lk - lq
    dlo = tl.where(DLO > -1073741824, DLO + off, DLO)   # -2^30: no bound (attention_masks._UNBOUNDED)
    dhi = tl.where(DHI < 1073741824, DHI + off, DHI)
    return lq, lk, q0 * SQ + h * D, q0 * H * D + h * D, k0 * SK + (h // G) * D, k0 * H * D + h * D, dlo, dhi, q0 * H + h


@triton.jit
def _uniform(bh, H, G, Lq, Lk, SQ, SK, SG, DLO, DHI, D: tl.constexpr):
    """_seq's results for (B, L, H, D) arrays read in place (attention's layout "blhd", VARLEN with
    UNIFORM): batch b = bh // H, head h = bh % H, every batch Lq and Lk long (no cu_seqlens to read
    or check), q's rows SQ elements apart, k's and v's SK, the gradients' (dq; dk, dv of each q head)
    SG (0: C-contiguous, H D), the mask bounds as they are, and lse a [B H, Lq] array (layout
    "blhd" returns it (B, H, Lq)); then the first element of dq and the gradients' row stride."""
    b = bh // H
    h = bh % H
    q0 = b * Lq
    k0 = b * Lk
    gs = tl.where(SG > 0, SG, H * D).to(tl.int64)
    return (Lq, Lk, q0 * SQ + h * D, q0 * H * D + h * D, k0 * SK + (h // G) * D, k0 * gs + h * D, DLO, DHI,
            bh * Lq, q0 * gs + h * D, gs)


@triton.jit
def _keep(idx, seed_lo, seed_hi, thresh):
    """Dropout's keep-mask of the scores with flat indices idx (int64, (bh Lq + i) Lk + j): word
    idx % 4 of Philox4x32-10 at counter (idx // 4, 0, 0) under key (seed_lo, seed_hi), kept iff
    >= thresh. The stream of cudakit.dropout (kernels/dropout.py, backends/cpu_dropout.py)."""
    c0, c1, c2, c3 = _philox(idx >> 2, seed_lo, seed_hi)
    w = idx & 3
    word = tl.where(w == 0, c0, tl.where(w == 1, c1, tl.where(w == 2, c2, c3)))
    return word.to(tl.int64) >= thresh


@triton.jit
def _keep_tile(row_idx, cols, seed_lo, seed_hi, thresh):
    """_keep of the [R, C] tile of scores with flat indices row_idx[r] + cols[c] (row_idx int64,
    cols consecutive from a multiple of 4). Where every row_idx is a multiple of 4 (the flat index's
    key stride is), the four keys 4m .. 4m + 3 of a row share one Philox call, whose four words they
    take in order: a quarter of _keep's work; else _keep's. On an H100 (2026-11-27 22:52 UTC,
    benchmarks/sweeps/attention_dropout.py, history/attention/*-attention-dropout.json, p 0.1, x
    torch's SDPA with dropout_p) bfloat16 B4 H16 S1024 D64 causal ran forward 0.621x (0.374x a
    Philox call a key) and backward 0.370x (0.214x); the float32 backward B2 H16 S512 D64 causal
    1.390x (0.790x)."""
    if tl.max(row_idx % 4, 0) == 0:
        c4 = tl.reshape(cols, [cols.shape[0] // 4, 2, 2])   # (m, a, b): cols[4m + 2a + b]
        first, _ = tl.split(c4)
        first, _ = tl.split(first)                           # cols[4m]
        c0, c1, c2, c3 = _philox((row_idx[:, None] + first[None, :]) >> 2, seed_lo, seed_hi)
        word = tl.reshape(tl.join(tl.join(c0, c2), tl.join(c1, c3)), [row_idx.shape[0], cols.shape[0]])
        keep = word.to(tl.int64) >= thresh
    else:
        keep = _keep(row_idx[:, None] + cols[None, :], seed_lo, seed_hi, thresh)
    return keep


@triton.jit
def _philox(g, seed_lo, seed_hi):
    """The four words of Philox4x32-10 at counter (g, 0, 0) (g int64) under key (seed_lo, seed_hi)."""
    c0 = (g & 0xFFFFFFFF).to(tl.uint32)
    c1 = (g >> 32).to(tl.uint32)
    c2 = c0 * 0
    c3 = c0 * 0
    k0 = (c0.to(tl.int64) * 0 + seed_lo).to(tl.uint32)   # (no .to on the scalars: Triton passes 1 as a constant)
    k1 = (c0.to(tl.int64) * 0 + seed_hi).to(tl.uint32)
    m0 = (c0 * 0 + 0xD2511F53).to(tl.uint32)
    m1 = (c0 * 0 + 0xCD9E8D57).to(tl.uint32)
    w0 = (c0 * 0 + 0x9E3779B9).to(tl.uint32)
    w1 = (c0 * 0 + 0xBB67AE85).to(tl.uint32)
    for r in tl.static_range(10):
        if r > 0:
            k0 = k0 + w0
            k1 = k1 + w1
        hi0 = tl.umulhi(m0, c0)
        lo0 = m0 * c0
        hi1 = tl.umulhi(m1, c2)
        lo1 = m1 * c2
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


@triton.jit
def _kv_row(bh, BH0, H, G):
    """The [BH / G, Lk, D] k, v entry of [BH, Lq, D] entry bh (local to a launch starting at BH0):
    bh itself without grouped-query heads (G == 1); with them (the whole arrays in one launch),
    head (bh % H) // G of batch bh // H, H being q's heads."""
    bhg = bh + BH0
    return tl.where(G == 1, bh, (bhg // H) * (H // G) + (bhg % H) // G)


@triton.jit
def _geometry(CU_Q, CU_K, ERR, bh, BH0, H, G, Lq, Lk, TQ, TK, SQ, SK, SG, DLO, DHI, start, CHECK: tl.constexpr,
              D: tl.constexpr, VARLEN: tl.constexpr, UNIFORM: tl.constexpr):
    """Where a program's rows are, for every kernel: (Lq, Lk, first q element, first element of the
    q-shaped arrays beside q (out, its gradient), first k/v element, first element of a per-q-head
    key gradient, first dq element, mask bounds, first lse entry, and the row strides of q, of the
    arrays beside it, of k and v, of the key gradient, of dq and of lse). VARLEN: packed (total,
    heads, D) arrays (q's rows SQ elements apart, k's and v's SK; the others C-contiguous), this
    program's sequence and head (_seq; CHECK: record a bad cu_seqlens in ERR; UNIFORM: (B, L, H,
    D) arrays, the gradients' rows SG apart, _uniform); else [BH, L, D] (SQ, SK, SG not read)."""
    if VARLEN:
        if UNIFORM:
            lq, lk, q_base, o_base, kv_base, dk_base, dlo, dhi, lse_base, dq_base, gs = _uniform(
                bh + BH0, H, G, Lq, Lk, SQ, SK, SG, DLO, DHI, D)
        else:
            lq, lk, q_base, o_base, kv_base, dk_base, dlo, dhi, lse_base = _seq(
                CU_Q, CU_K, ERR, bh + BH0, H, G, Lq, Lk, TQ, TK, SQ, SK, DLO, DHI, start, CHECK, D)
            dq_base = o_base
            gs = (lse_base * 0 + H) * D
        hq = lse_base * 0 + H   # int64: a packed array's row offsets may pass 2^31 elements
        lrs = hq
        if UNIFORM:   # lse [B H, Lq]
            lrs = hq * 0 + 1
        return lq, lk, q_base, o_base, kv_base, dk_base, dq_base, dlo, dhi, lse_base, hq * 0 + SQ, hq * D, \
            hq * 0 + SK, gs, gs, lrs
    else:
        # dK, dV per q head: [BH, Lk, D] (summed over a group by the caller)
        base = bh * Lq * D
        return (Lq, Lk, base, base, _kv_row(bh, BH0, H, G) * Lk * D, bh * Lk * D, base, DLO, DHI, bh * Lq, D, D, D,
                D, D, 1)


@triton.jit
def _ranges(first, last, lo_off, hi_off, hi_cap, BLOCK: tl.constexpr):
    """(a, b, c, e) for the indices t of a block of rows [first, last] that each see the t with
    t - row in [lo_off, hi_off) and t < hi_cap: blocks from a to e hold every t some row sees, those
    in [b, c) only t every row sees (no mask), those in [a, b) and [c, e) need one."""
    e = tl.maximum(tl.minimum(last + hi_off, hi_cap), 0)
    a = tl.minimum((tl.maximum(first + lo_off, 0) // BLOCK) * BLOCK, e)
    b = tl.minimum(tl.maximum(a, tl.cdiv(tl.maximum(last + lo_off, 0), BLOCK) * BLOCK), e)
    c = tl.maximum(b, tl.minimum((tl.maximum(tl.minimum(first + hi_off, hi_cap), 0) // BLOCK) * BLOCK, e))
    return a, b, c, e


@triton.jit
def _bias_base(bh, HB, sb_b, sb_h):
    """The offset of batch*head bh's bias: batch bh // HB, head bh % HB (strides 0 where broadcast)."""
    return (bh // HB) * sb_b + (bh % HB) * sb_h


@triton.jit
def _bias_tile(BIAS, b_base, row_off, col_off, mask):
    """The bias tile at those offsets, float32, times log2(e) (the kernels' scores are in base 2)."""
    return tl.load(BIAS + b_base + row_off + col_off, mask=mask, other=0.0).to(tl.float32) * 1.4426950408889634


@triton.jit
def _bias_grad(DBIAS, base, row_off, col_off, ds, r_ok, c_ok, DB_MODE: tl.constexpr, DBQ: tl.constexpr,
               DBK: tl.constexpr):
    """A score tile's dS into the bias's gradient at base + row_off + col_off: DB_MODE 1 stored
    (one writer an element), 2 added atomically, summed first over the rows (not DBQ) or keys (not
    DBK) where the bias broadcasts them. DB_MODE 4 (a bias broadcast over its rows or its keys):
    the tile's sums over the dims the bias broadcasts stored into a workspace of per-tile partials
    (one writer an element, no atomics: deterministic), base the tile's place in it and row_off,
    col_off the rows and keys themselves (kernels/attention.py _bias_partials sums them after)."""
    if DB_MODE == 1:
        tl.store(DBIAS + base + row_off[:, None] + col_off[None, :], ds.to(DBIAS.dtype.element_ty),
                 mask=r_ok[:, None] & c_ok[None, :])
    if DB_MODE == 2:
        if DBQ and DBK:
            tl.atomic_add(DBIAS + base + row_off[:, None] + col_off[None, :], ds, mask=r_ok[:, None] & c_ok[None, :])
        if DBQ and not DBK:
            tl.atomic_add(DBIAS + base + row_off, tl.sum(ds, 1), mask=r_ok)
        if DBK and not DBQ:
            tl.atomic_add(DBIAS + base + col_off, tl.sum(ds, 0), mask=c_ok)
        if not DBQ and not DBK:
            tl.atomic_add(DBIAS + base, tl.sum(tl.sum(ds, 1), 0))
    if DB_MODE == 4:
        tl.static_assert(not (DBQ and DBK), "DB_MODE 4 takes a bias broadcast over its rows or its keys")
        if DBK:
            tl.store(DBIAS + base + col_off, tl.sum(ds, 0), mask=c_ok)
        if DBQ:
            tl.store(DBIAS + base + row_off, tl.sum(ds, 1), mask=r_ok)
        if not DBQ and not DBK:
            tl.store(DBIAS + base, tl.sum(tl.sum(ds, 1), 0))


@triton.jit
def _tf32(x):
    """float32 x rounded to TF32's 10-bit mantissa (ties away from zero): a value the tensor cores
    read exactly (of any other they drop the low 13 bits)."""
    return ((x.to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)


@triton.jit
def _tf32_parts(x):
    """(hi, lo): x's TF32 part (rounded) and the remainder x - hi (exact in float32), left for the
    tensor cores to truncate to TF32: that drops at most 2^-21 of the term, the order of the
    product a_lo.b_lo that tf32x3 drops anyway, for two integer operations an element fewer."""
    hi = _tf32(x)
    return hi, x - hi


@triton.jit
def _dot3(a_hi, a_lo, b_hi, b_lo, acc):
    """acc + a.b from TF32 parts and remainders: three tensor-core products, the small ones first
    (a_lo.b_lo, about 2^-22 of the term, dropped): the tf32x3 product."""
    acc = tl.dot(a_lo, b_hi, acc, input_precision="tf32")
    acc = tl.dot(a_hi, b_lo, acc, input_precision="tf32")
    return tl.dot(a_hi, b_hi, acc, input_precision="tf32")


@triton.jit
def tf32_split(X, HI, LO, L,   # X: [R, L, C] float32; HI, LO: like X, or [R, C, L] (TRANS)
               C: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_C: tl.constexpr, TRANS: tl.constexpr,
               PARTS: tl.constexpr = True, PDL: tl.constexpr = None):
    """X's TF32 parts (HI) and remainders (LO, X - HI), or with PARTS False X itself to HI (LO
    not written): the float32 forward's V transposed once per call (SPLIT). One program per
    (matrix r, BLOCK_L rows). TRANS: written transposed, so that the tensor cores, which take
    32-bit operands only contiguous along the reduced axis, read V's [keys, D] tiles in place (the
    tile is transposed on chip: a store of one row per thread, L apart, ran the forward 0.7 ms
    slower at B4 H8 S2048 D128 on an H100). Memory traffic: 12 bytes an element
    (8 without PARTS)."""
    _pdl_start(PDL)
    r = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_L + tl.arange(0, BLOCK_L)
    cols = tl.arange(0, BLOCK_C)
    ok = (rows < L)[:, None] & (cols < C)[None, :]
    base = r * L * C
    x = tl.load(X + base + rows[:, None] * C + cols[None, :], mask=ok, other=0.0)
    hi, lo = x, x
    if PARTS:
        hi, lo = _tf32_parts(x)
    if TRANS:
        p = base + cols[None, :] * L + rows[:, None]
    else:
        p = base + rows[:, None] * C + cols[None, :]
    tl.store(HI + p, hi, mask=ok)
    if PARTS:
        tl.store(LO + p, lo, mask=ok)


@triton.jit
def _fwd_probs(s, l_i, m_i, cols, lo_r, hi_r, qk_scale, Lk, BIAS, b_base, b_rows, sb_k, m_ok, drop_rows,
               DSEED_LO, DSEED_HI, DTHRESH, DSCALE, MASK: tl.constexpr, POS_SCALE: tl.constexpr,
               HAS_BIAS: tl.constexpr, DROPOUT: tl.constexpr):
    """The online softmax's step on one key block's raw scores s [BLOCK_M, BLOCK_N]: (the
    probabilities the product with V takes (dropout applied), the rescale of the accumulator,
    l_i, m_i). MASK: the block crosses the end of the keys or an end of some row's interval
    [lo_r, hi_r). POS_SCALE (qk_scale > 0): the row max is taken on the raw scores and scaled once,
    so each probability is one FMA and an exp2 (s * qk_scale - m), not a multiply, a subtract and
    an exp2: 3-7% faster in bfloat16 on an H100 (.carry A/B, 2026-11-25), where the forward's
    non-matrix work is not overlapped with the products. A zero or negative scale keeps the scaled
    scores (max(s) * c is not max(s * c) for c < 0, and -inf * 0 is NaN). HAS_BIAS (never with
    POS_SCALE): the bias tile (b_rows: the rows' offsets, sb_k: the key stride) is added to the
    scaled scores; its -inf entries may empty a row in any block."""
    if not POS_SCALE:
        s = s * qk_scale
    if HAS_BIAS:
        s += _bias_tile(BIAS, b_base, b_rows[:, None], cols.to(tl.int64)[None, :] * sb_k,
                        m_ok[:, None] & (cols < Lk)[None, :])
    if MASK:
        s = tl.where((cols[None, :] >= lo_r[:, None]) & (cols[None, :] < hi_r[:, None]), s, float("-inf"))
    if POS_SCALE:
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = m_new
    if MASK:   # a row that has seen no key yet: its exponentials against 0 (-inf - -inf is NaN)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    if HAS_BIAS:
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    if POS_SCALE:
        p = tl.math.exp2(s * qk_scale - m_use[:, None])
    else:
        p = tl.math.exp2(s - m_use[:, None])
    alpha = tl.math.exp2(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, 1)
    if DROPOUT:   # the row sums above keep every probability; the product takes the kept ones, scaled
        keep = _keep_tile(drop_rows, cols, DSEED_LO, DSEED_HI, DTHRESH)
        p = tl.where(keep, p * DSCALE, 0.0)
    return p, alpha, l_i, m_new


@triton.jit
def _block_masks(cols, ok, Lk, MASK: tl.constexpr):
    """(K^T tile mask [columns, keys], V tile mask [keys, columns], keys inside Lk) of the key block
    `cols` over head-dim columns `ok`; the keys are masked only with MASK."""
    n_ok = cols < Lk
    k_mask = ok[:, None]
    v_mask = ok[None, :]
    if MASK:
        k_mask = k_mask & n_ok[None, :]
        v_mask = v_mask & n_ok[:, None]
    return k_mask, v_mask, n_ok


@triton.jit
def _fwd_block(acc, l_i, m_i, q, q_lo, K, V, kv_base, start_n, lo_r, hi_r, offs_n, offs_d, d_ok, qk_scale,
               Lk, BIAS, b_base, b_rows, sb_k, m_ok, KRS, drop_rows, DSEED_LO, DSEED_HI, DTHRESH, DSCALE,
               D: tl.constexpr, MASK: tl.constexpr, PREC: tl.constexpr, POS_SCALE: tl.constexpr,
               HAS_BIAS: tl.constexpr, DROPOUT: tl.constexpr, SPLIT: tl.constexpr, OT: tl.constexpr = False):
    """One key block of the online softmax (_fwd_probs). SPLIT (float32 tf32x3): q is q's TF32
    part and q_lo its remainder; V holds v transposed ([D, Lk] a head, as the tensor cores take
    its tiles); K's and V's tiles are split here, once each: tf32x3 products, not Triton's own
    tf32x3, which splits both operands of every product (p and V's tile each twice). OT (SPLIT):
    V as it comes ([Lk, D] a head) and acc transposed, [BLOCK_D, BLOCK_M]: O^T += V^T P^T, whose
    A operand (V's tile, split) the tensor cores take from registers in any order and whose B
    operand (P^T) is contiguous along the keys as P is computed: no transposed copy of V."""
    cols = start_n + offs_n
    kt_mask, v_mask, _ = _block_masks(cols, d_ok, Lk, MASK)
    kt = tl.load(K + kv_base + cols[None, :] * KRS + offs_d[:, None], mask=kt_mask, other=0.0)
    if SPLIT:   # (the tile goes through registers either way at one stage)
        kt, kt_lo = _tf32_parts(kt)
        s = _dot3(q, q_lo, kt, kt_lo, tl.zeros([q.shape[0], kt.shape[1]], tl.float32))
    else:
        s = tl.dot(q, kt, input_precision=PREC)
    p, alpha, l_i, m_new = _fwd_probs(s, l_i, m_i, cols, lo_r, hi_r, qk_scale, Lk, BIAS, b_base, b_rows, sb_k, m_ok,
                                      drop_rows, DSEED_LO, DSEED_HI, DTHRESH, DSCALE, MASK, POS_SCALE, HAS_BIAS,
                                      DROPOUT)
    if SPLIT and OT:
        v = tl.load(V + kv_base + cols[:, None] * KRS + offs_d[None, :], mask=v_mask, other=0.0)
        p_hi, p_lo = _tf32_parts(p)
        v, v_lo = _tf32_parts(v)
        acc = _dot3(tl.trans(v), tl.trans(v_lo), tl.trans(p_hi), tl.trans(p_lo), acc * alpha[None, :])
    elif SPLIT:
        vt = kv_base + offs_d[None, :] * Lk + cols[:, None]   # [keys, D] tiles of [D, Lk] arrays
        v = tl.load(V + vt, mask=v_mask, other=0.0)
        p_hi, p_lo = _tf32_parts(p)
        v, v_lo = _tf32_parts(v)
        acc = _dot3(p_hi, p_lo, v, v_lo, acc * alpha[:, None])
    else:
        v = tl.load(V + kv_base + cols[:, None] * KRS + offs_d[None, :], mask=v_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
    return acc, l_i, m_new


@triton.jit
def _fwd_block_cols2(acc, acc2, l_i, m_i, q, q_lo, q2, q2_lo, K, V, kv_base, start_n, lo_r, hi_r, offs_n, offs_d,
                     offs_d2, d2_ok, qk_scale, Lk, BIAS, b_base, b_rows, sb_k, m_ok, KRS, drop_rows, DSEED_LO,
                     DSEED_HI, DTHRESH, DSCALE, MASK: tl.constexpr, POS_SCALE: tl.constexpr,
                     HAS_BIAS: tl.constexpr, DROPOUT: tl.constexpr, OT: tl.constexpr = False):
    """_fwd_block's SPLIT form with the head dim in two column blocks (attn_fwd's BLOCK_D2): offs_d
    the first BLOCK_D columns (all inside D), offs_d2 the rest (d2_ok: inside D); q, q_lo and acc
    hold the first block's columns, q2, q2_lo and acc2 the second's. The scores sum both blocks'
    products; one set of probabilities multiplies both blocks of V. OT: V as it comes and both
    accumulators transposed (_fwd_block's O^T form)."""
    cols = start_n + offs_n
    k2_mask, v2_mask, n_ok = _block_masks(cols, d2_ok, Lk, MASK)
    if MASK:
        kt = tl.load(K + kv_base + cols[None, :] * KRS + offs_d[:, None], mask=n_ok[None, :], other=0.0)
    else:
        kt = tl.load(K + kv_base + cols[None, :] * KRS + offs_d[:, None])
    kt2 = tl.load(K + kv_base + cols[None, :] * KRS + offs_d2[:, None], mask=k2_mask, other=0.0)
    kt, kt_lo = _tf32_parts(kt)
    s = _dot3(q, q_lo, kt, kt_lo, tl.zeros([q.shape[0], kt.shape[1]], tl.float32))
    kt2, kt2_lo = _tf32_parts(kt2)
    s = _dot3(q2, q2_lo, kt2, kt2_lo, s)
    p, alpha, l_i, m_new = _fwd_probs(s, l_i, m_i, cols, lo_r, hi_r, qk_scale, Lk, BIAS, b_base, b_rows, sb_k, m_ok,
                                      drop_rows, DSEED_LO, DSEED_HI, DTHRESH, DSCALE, MASK, POS_SCALE, HAS_BIAS,
                                      DROPOUT)
    p_hi, p_lo = _tf32_parts(p)
    if OT:   # [keys, columns] tiles of V as it comes
        vt = kv_base + cols[:, None] * KRS + offs_d[None, :]
        vt2 = kv_base + cols[:, None] * KRS + offs_d2[None, :]
    else:    # [keys, columns] tiles of [D, Lk] arrays
        vt = kv_base + offs_d[None, :] * Lk + cols[:, None]
        vt2 = kv_base + offs_d2[None, :] * Lk + cols[:, None]
    if MASK:
        v = tl.load(V + vt, mask=n_ok[:, None], other=0.0)
    else:
        v = tl.load(V + vt)
    v2 = tl.load(V + vt2, mask=v2_mask, other=0.0)
    v, v_lo = _tf32_parts(v)
    v2, v2_lo = _tf32_parts(v2)
    if OT:   # O^T += V^T P^T
        p_hi, p_lo = tl.trans(p_hi), tl.trans(p_lo)
        acc = _dot3(tl.trans(v), tl.trans(v_lo), p_hi, p_lo, acc * alpha[None, :])
        acc2 = _dot3(tl.trans(v2), tl.trans(v2_lo), p_hi, p_lo, acc2 * alpha[None, :])
    else:
        acc = _dot3(p_hi, p_lo, v, v_lo, acc * alpha[:, None])
        acc2 = _dot3(p_hi, p_lo, v2, v2_lo, acc2 * alpha[:, None])
    return acc, acc2, l_i, m_new


@triton.jit
def _fwd_step(acc, acc2, l_i, m_i, q, q_lo, q2, q2_lo, K, V, kv_base, start_n, lo_r, hi_r, offs_n, offs_d, d_ok,
              offs_d2, d2_ok, qk_scale, Lk, BIAS, b_base, b_rows, sb_k, m_ok, KRS, drop_rows, DSEED_LO, DSEED_HI,
              DTHRESH, DSCALE, D: tl.constexpr, MASK: tl.constexpr, PREC: tl.constexpr, POS_SCALE: tl.constexpr,
              HAS_BIAS: tl.constexpr, DROPOUT: tl.constexpr, SPLIT: tl.constexpr, BLOCK_D2: tl.constexpr,
              OT: tl.constexpr = False):
    """One key block: _fwd_block_cols2 with a second column block (BLOCK_D2 > 0), else _fwd_block
    (acc2, q2, q2_lo then unread placeholders, acc2 returned as it came)."""
    if BLOCK_D2 > 0:
        acc, acc2, l_i, m_i = _fwd_block_cols2(acc, acc2, l_i, m_i, q, q_lo, q2, q2_lo, K, V, kv_base, start_n,
                                               lo_r, hi_r, offs_n, offs_d, offs_d2, d2_ok, qk_scale, Lk, BIAS,
                                               b_base, b_rows, sb_k, m_ok, KRS, drop_rows, DSEED_LO, DSEED_HI,
                                               DTHRESH, DSCALE, MASK, POS_SCALE, HAS_BIAS, DROPOUT, OT)
    else:
        acc, l_i, m_i = _fwd_block(acc, l_i, m_i, q, q_lo, K, V, kv_base, start_n, lo_r, hi_r, offs_n, offs_d,
                                   d_ok, qk_scale, Lk, BIAS, b_base, b_rows, sb_k, m_ok, KRS, drop_rows, DSEED_LO,
                                   DSEED_HI, DTHRESH, DSCALE, D, MASK, PREC, POS_SCALE, HAS_BIAS, DROPOUT, SPLIT,
                                   OT)
    return acc, acc2, l_i, m_i


@triton.jit
def _key_part(start_m, O, LSE, Lq, D: tl.constexpr, KSPLIT: tl.constexpr):
    """(row block, key part, O, LSE) of a forward program: with KSPLIT > 1 grid dim x holds row
    block * KSPLIT + part, and O, LSE are [KSPLIT, BH, Lq, D] and [KSPLIT, BH, Lq] workspaces, moved
    to this part's; else (start_m, 0, O, LSE) as they came."""
    part = 0
    if KSPLIT > 1:
        part = start_m % KSPLIT
        start_m = start_m // KSPLIT
        nbh = tl.num_programs(1).to(tl.int64)
        O += part * nbh * Lq * D   # this part's workspace
        LSE += part * nbh * Lq
    return start_m, part, O, LSE


@triton.jit
def _part_blocks(a, b, c, e, part, LEFT: tl.constexpr, KSPLIT: tl.constexpr, BLOCK_N: tl.constexpr):
    """_ranges's (a, b, c, e) narrowed to key part `part` of KSPLIT > 1, and the part's first key
    klo: its blocks are [klo, khi) of those in [a, e), in KSPLIT even shares (without a window's
    left side, not LEFT, a is 0 and the shares start from 0)."""
    if LEFT:
        share = tl.cdiv(tl.cdiv(e - a, BLOCK_N), KSPLIT)
        klo = a + part * share * BLOCK_N
    else:
        share = tl.cdiv(tl.cdiv(e, BLOCK_N), KSPLIT)
        klo = part * share * BLOCK_N
    khi = klo + share * BLOCK_N
    a = tl.minimum(tl.maximum(a, klo), khi)
    b = tl.minimum(tl.maximum(b, klo), khi)
    c = tl.minimum(tl.maximum(c, klo), khi)
    e = tl.minimum(tl.maximum(e, klo), khi)
    return a, b, c, e, klo


@triton.jit
def _row_keys(rows, dlo, dhi, lk, LENS, ERR, bhg, H, Lk, start_m, HAS_LENS: tl.constexpr):
    """(length, lo_r, hi_r) of a forward program's query rows: the keys end at length (lk, or with
    HAS_LENS batch bhg // H's key length, checked into ERR: _key_length), and row i sees the keys
    [i + dlo, min(i + dhi, length))."""
    length = lk
    if HAS_LENS:
        length = _key_length(LENS, ERR, bhg, H, Lk, start_m, True)
    return length, rows + dlo, tl.minimum(rows + dhi, length)


@triton.jit
def _row_block(LPT: tl.constexpr):
    """(row block, batch*head) of this forward program: LPT = 0, the grid's (row blocks along x,
    batch*heads along y); LPT > 0 (causal forwards, whose last row blocks see the most keys), the
    programs in launch order (x fastest, the order the GPU hands them out) over groups of LPT
    batch*heads, each group's row blocks longest first, so that the launch ends on its shortest
    blocks, not on long ones that leave the other SMs idle; a group's keys stay in L2 meanwhile."""
    if LPT == 0:
        return tl.program_id(0), tl.program_id(1).to(tl.int64)
    else:
        n_m = tl.num_programs(0).to(tl.int64)   # (LPT * n_m may pass 2^31)
        nbh = tl.num_programs(1)
        pid = tl.program_id(1).to(tl.int64) * n_m + tl.program_id(0)
        span = LPT * n_m
        g = pid // span
        r = pid - g * span
        size = tl.minimum(nbh - g * LPT, LPT)   # (the last group may be smaller)
        return (n_m - 1 - r // size).to(tl.int32), g * LPT + r % size


@triton.jit
def attn_fwd(Q, K, V, O, LSE,            # Q, O: [BH, Lq, D]; K, V: [BH, Lk, D]; LSE: [BH, Lq] float32;
                                         # SPLIT without OT: V v transposed, [BH, D, Lk]
             LENS, ERR,                  # LENS: [B] int key lengths (HAS_LENS); ERR: int64 [8] error flag
             qk_scale, Lq, Lk, DLO, DHI, H,   # qk_scale: softmax scale * log2(e)
             BIAS, sb_b, sb_h, sb_q, sb_k, HB,  # BIAS (HAS_BIAS): [Bb, Hb, Lq|1, Lk|1], element strides (0 broadcast)
             CU_Q, CU_K, G, TQ, TK,      # VARLEN: [B + 1] int sequence starts, total rows; G q heads per k, v head
                                         # (packed, or [BH / G, Lk, D] k, v: H is then q's heads)
             SQ, SK, SG,                 # VARLEN: q's and k's (v's) row strides, elements (O C-contiguous);
                                         # SG: the backward's gradients' (not read here)
             DSEED_LO, DSEED_HI, DTHRESH, DSCALE,  # DROPOUT: the seed's halves, keep threshold, 1 / (1 - p)
             BH0,                        # the first bh of this launch (grids of more than 65535 bh)
             D: tl.constexpr, HAS_LENS: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
             PREC: tl.constexpr, POS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr, VARLEN: tl.constexpr,
             DROPOUT: tl.constexpr, SPLIT: tl.constexpr = False, LEFT: tl.constexpr = True,
             BLOCK_D2: tl.constexpr = 0, LPT: tl.constexpr = 0, KSPLIT: tl.constexpr = 1,
             OT: tl.constexpr = False, BIAS_K1: tl.constexpr = False, UNIFORM: tl.constexpr = False,
             PDL: tl.constexpr = None):
    """BLOCK_D2 > 0 (SPLIT only): the head dim in two column blocks, BLOCK_D (all inside D) and
    BLOCK_D2 (the rest, masked), not one of BLOCK_D's power of two: at head dims 65..96 the products
    skip the padding a 128-wide block carries (up to 48 of its 128 columns). LPT > 0: the programs'
    order of _row_block (0: the grid's own). KSPLIT > 1 (one launch, not VARLEN): the keys a row
    block sees in KSPLIT parts of whole key blocks, one program each (grid dim x: row block *
    KSPLIT + part, ordered by _row_block as one axis), so that a small grid fills the GPU; O and
    LSE are then float32 workspaces [KSPLIT, BH, Lq, D] and [KSPLIT, BH, Lq], each part's output
    normalised by its own sum and its log-sum-exp (-inf: the part saw no key), which
    attn_fwd_combine merges."""
    _pdl_start(PDL)
    if BIAS_K1:   # the bias's key stride 1 as a constant: its tiles load as vectors (attention._unit_keys)
        sb_k = 1
    start_m, bh = _row_block(LPT)
    start_m, part, O, LSE = _key_part(start_m, O, LSE, Lq, D, KSPLIT)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    lq, lk, q_base, o_base, kv_base, _, _, dlo, dhi, lse_base, QRS, RS, KRS, _, _, LRS = _geometry(
        CU_Q, CU_K, ERR, bh, BH0, H, G, Lq, Lk, TQ, TK, SQ, SK, SG, DLO, DHI, start_m, True, D, VARLEN, UNIFORM)
    m_ok, d_ok = rows < lq, offs_d < D
    length, lo_r, hi_r = _row_keys(rows, dlo, dhi, lk, LENS, ERR, bh + BH0, H, Lk, start_m, HAS_LENS)
    q = tl.load(Q + q_base + rows[:, None] * QRS + offs_d[None, :], mask=m_ok[:, None] & d_ok[None, :], other=0.0)
    q_lo = q
    if SPLIT:   # q split once, in registers (the products' A operand)
        q, q_lo = _tf32_parts(q)
    offs_d2, d2_ok, q2, q2_lo, acc2 = offs_d, d_ok, q, q_lo, 0.0   # (placeholders without a second block)
    if BLOCK_D2 > 0:
        offs_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        d2_ok = offs_d2 < D
        q2 = tl.load(Q + q_base + rows[:, None] * QRS + offs_d2[None, :], mask=m_ok[:, None] & d2_ok[None, :],
                     other=0.0)
        q2, q2_lo = _tf32_parts(q2)
        if OT:
            acc2 = tl.zeros([BLOCK_D2, BLOCK_M], tl.float32)
        else:
            acc2 = tl.zeros([BLOCK_M, BLOCK_D2], tl.float32)
    b_base = _bias_base(bh + BH0, HB, sb_b, sb_h)
    b_rows = rows.to(tl.int64) * sb_q   # int64: a bias's Lq Lk elements may pass 2^31
    drop_rows = ((bh + BH0) * Lq + rows) * Lk   # the scores' flat indices of these rows (DROPOUT)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    if OT:   # (SPLIT: _fwd_block's O^T form, V as it comes)
        tl.static_assert(SPLIT, "OT takes the split forward")
        acc = tl.zeros([BLOCK_D, BLOCK_M], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    a, b, c, e = _ranges(start_m * BLOCK_M, start_m * BLOCK_M + BLOCK_M - 1, dlo, dhi, length, BLOCK_N)
    klo = 0   # (a compile-time 0 with one part: the loops' start the compiler knows aligned)
    if KSPLIT > 1:   # this part's key blocks
        a, b, c, e, klo = _part_blocks(a, b, c, e, part, LEFT, KSPLIT, BLOCK_N)
    if LEFT:   # some row's keys start past key 0 (a window's left side): blocks before them skipped
        for start_n in range(a, b, BLOCK_N):
            acc, acc2, l_i, m_i = _fwd_step(acc, acc2, l_i, m_i, q, q_lo, q2, q2_lo, K, V, kv_base, start_n,
                                            lo_r, hi_r, offs_n, offs_d, d_ok, offs_d2, d2_ok, qk_scale, lk, BIAS,
                                            b_base, b_rows, sb_k, m_ok, KRS, drop_rows, DSEED_LO, DSEED_HI, DTHRESH,
                                            DSCALE, D, True, PREC, POS_SCALE, HAS_BIAS, DROPOUT, SPLIT, BLOCK_D2,
                                            OT)
    else:   # every row's keys start at key 0 (or a part's first block, klo): so does the loop, a start
        b = klo   # the compiler knows aligned (from b, a runtime value, the float32 SPLIT forward spilled
    for start_n in range(b, c, BLOCK_N):   # 4x more registers at head dim 128)
        acc, acc2, l_i, m_i = _fwd_step(acc, acc2, l_i, m_i, q, q_lo, q2, q2_lo, K, V, kv_base, start_n, lo_r,
                                        hi_r, offs_n, offs_d, d_ok, offs_d2, d2_ok, qk_scale, lk, BIAS, b_base,
                                        b_rows, sb_k, m_ok, KRS, drop_rows, DSEED_LO, DSEED_HI, DTHRESH, DSCALE, D,
                                        False, PREC, POS_SCALE, HAS_BIAS, DROPOUT, SPLIT, BLOCK_D2, OT)
    for start_n in range(c, e, BLOCK_N):
        acc, acc2, l_i, m_i = _fwd_step(acc, acc2, l_i, m_i, q, q_lo, q2, q2_lo, K, V, kv_base, start_n, lo_r,
                                        hi_r, offs_n, offs_d, d_ok, offs_d2, d2_ok, qk_scale, lk, BIAS, b_base,
                                        b_rows, sb_k, m_ok, KRS, drop_rows, DSEED_LO, DSEED_HI, DTHRESH, DSCALE, D,
                                        True, PREC, POS_SCALE, HAS_BIAS, DROPOUT, SPLIT, BLOCK_D2, OT)
    seen = l_i != 0.0   # rows with at least one key (their max contributes 1 to l_i; NaN stays NaN)
    if OT:
        acc = tl.trans(acc)
    acc = tl.where(seen[:, None], acc / tl.where(seen, l_i, 1.0)[:, None], 0.0)
    tl.store(O + o_base + rows[:, None] * RS + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=m_ok[:, None] & d_ok[None, :])
    if BLOCK_D2 > 0:
        if OT:
            acc2 = tl.trans(acc2)
        acc2 = tl.where(seen[:, None], acc2 / tl.where(seen, l_i, 1.0)[:, None], 0.0)
        tl.store(O + o_base + rows[:, None] * RS + offs_d2[None, :], acc2.to(O.dtype.element_ty),
                 mask=m_ok[:, None] & d2_ok[None, :])
    lse = tl.where(seen, (m_i + tl.math.log2(tl.where(seen, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    tl.store(LSE + lse_base + rows * LRS, lse, mask=m_ok)


@triton.jit
def attn_fwd_combine(OW, LW, O, LSE, Lq, NBH,   # OW: [KSPLIT, BH, Lq, D], LW: [KSPLIT, BH, Lq] float32
                                                 # (attn_fwd's parts); O: [BH, Lq, D]; LSE: [BH, Lq] float32
                     D: tl.constexpr, KSPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                     PDL: tl.constexpr = None):
    """attn_fwd's KSPLIT parts of each row merged: out = sum_p w_p o_p / sum_p w_p with
    w_p = exp(lse_p - max_p lse_p), lse = max + log(sum_p w_p); a row no part saw gets out 0 and lse
    -inf. Memory traffic: (KSPLIT + 1) (4 D + 4) bytes a row read and written (O in its dtype)."""
    _pdl_start(PDL)
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_ok = rows < Lq
    mask = m_ok[:, None] & (offs_d < D)[None, :]
    part = NBH.to(tl.int64) * Lq   # a part's rows
    top = tl.full([BLOCK_M], float("-inf"), tl.float32)
    for p in tl.static_range(KSPLIT):
        top = tl.maximum(top, tl.load(LW + p * part + bh * Lq + rows, mask=m_ok, other=float("-inf")))
    top = tl.where(top == float("-inf"), 0.0, top)   # (no part saw a key: every weight 0)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    total = tl.zeros([BLOCK_M], tl.float32)
    for p in tl.static_range(KSPLIT):
        w = tl.math.exp(tl.load(LW + p * part + bh * Lq + rows, mask=m_ok, other=float("-inf")) - top)
        o = tl.load(OW + (p * part + bh * Lq + rows)[:, None] * D + offs_d[None, :], mask=mask, other=0.0)
        acc += w[:, None] * o
        total += w
    seen = total != 0.0
    acc = tl.where(seen[:, None], acc / tl.where(seen, total, 1.0)[:, None], 0.0)
    tl.store(O + (bh * Lq + rows)[:, None] * D + offs_d[None, :], acc.to(O.dtype.element_ty), mask=mask)
    tl.store(LSE + bh * Lq + rows, tl.where(seen, top + tl.math.log(tl.where(seen, total, 1.0)), float("-inf")),
             mask=m_ok)


@triton.jit
def attn_bwd_delta(O, DO, DELTA, Lq,    # O, DO: [BH, Lq, D] (UNIFORM: (B, Lq, H, D)); DELTA: [BH, Lq] float32
                   H, BH0,               # UNIFORM: the heads, the launch's first bh (grids past 65535 bh)
                   D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, UNIFORM: tl.constexpr = False,
                   PDL: tl.constexpr = None):
    """delta = rowsum(dO * O) of each query row, in lse's [BH, Lq] order. Memory traffic: 2 D
    elements read and 4 bytes written a row."""
    _pdl_start(PDL)
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (rows < Lq)[:, None] & (offs_d < D)[None, :]
    if UNIFORM:   # batch*head bh + BH0: rows H D elements apart
        bh += BH0
        ptr = ((bh // H) * Lq + rows)[:, None] * (H * D) + (bh % H) * D + offs_d[None, :]
    else:
        ptr = bh * Lq * D + rows[:, None] * D + offs_d[None, :]
    o = tl.load(O + ptr, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO + ptr, mask=mask, other=0.0).to(tl.float32)
    tl.store(DELTA + bh * Lq + rows, tl.sum(o * do, 1), mask=rows < Lq)


@triton.jit
def _dkdv_block(dk, dv, k, v, Q, DO, LSE, DELTA, q_base, o_base, lse_base, start_m, cols, offs_m, offs_d, d_ok,
                qk_scale, Lq, DLO, DHI, length, BIAS, b_base, sb_q, b_cols, n_ok, QRS, RS, LRS,
                drop_base, Lk, DSEED_LO, DSEED_HI, DTHRESH, DSCALE,
                D: tl.constexpr, MASK: tl.constexpr, ROWS: tl.constexpr, PREC: tl.constexpr,
                HAS_BIAS: tl.constexpr, DROPOUT: tl.constexpr):
    """One query block's share of dK, dV, with the scores transposed ([keys, queries]) so that P^T
    and dS^T leave their MMA in the layout the next MMA takes (no trip through shared memory).
    MASK: the block crosses an end of some row's key interval (and rows past Lq are masked too);
    ROWS: it may cross the end of the queries (rows past Lq load as zeros, but 0 * inf in their
    scores would reach dK, dV). Keys past Lk only reach rows of dK, dV that are never stored; rows
    that see no key (lse -inf) only meet masked blocks -- but with a bias, whose -inf entries can
    empty a row anywhere: their probabilities are then set to 0 here."""
    rows = start_m + offs_m
    m_ok = rows < Lq
    qT = tl.load(Q + q_base + rows[None, :] * QRS + offs_d[:, None], mask=m_ok[None, :] & d_ok[:, None], other=0.0)
    do = tl.load(DO + o_base + rows[:, None] * RS + offs_d[None, :], mask=m_ok[:, None] & d_ok[None, :], other=0.0)
    lse2 = tl.load(LSE + lse_base + rows * LRS, mask=m_ok, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + lse_base + rows * LRS, mask=m_ok, other=0.0)
    sT = tl.dot(k, qT, input_precision=PREC) * qk_scale                                  # [BLOCK_N, BLOCK_M]
    if HAS_BIAS:
        sT += _bias_tile(BIAS, b_base, rows.to(tl.int64)[None, :] * sb_q, b_cols[:, None],
                         m_ok[None, :] & n_ok[:, None])
    pT = tl.math.exp2(sT - lse2[None, :])
    if HAS_BIAS:
        pT = tl.where((lse2 == float("-inf"))[None, :], 0.0, pT)
    if MASK:
        hi = tl.minimum(rows + DHI, length)
        ok = (cols[:, None] >= (rows + DLO)[None, :]) & (cols[:, None] < hi[None, :]) & m_ok[None, :]
        pT = tl.where(ok, pT, 0.0)
    elif ROWS:
        pT = tl.where(m_ok[None, :], pT, 0.0)
    dpT = tl.dot(v, tl.trans(do), input_precision=PREC)
    if DROPOUT:   # out = (P o M / (1 - p)) V: dV and dP through the forward's mask
        keep = tl.trans(_keep_tile((drop_base + rows) * Lk, cols, DSEED_LO, DSEED_HI, DTHRESH))
        dv += tl.dot(tl.where(keep, pT * DSCALE, 0.0).to(do.dtype), do, input_precision=PREC)
        dpT = tl.where(keep, dpT * DSCALE, 0.0)
    else:
        dv += tl.dot(pT.to(do.dtype), do, input_precision=PREC)
    dsT = pT * (dpT - delta[None, :])
    dk += tl.dot(dsT.to(qT.dtype), tl.trans(qT), input_precision=PREC)
    return dk, dv


@triton.jit
def attn_bwd_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV,   # as attn_fwd; DK, DV: [BH, Lk, D]
                  LENS, qk_scale, sm_scale, Lq, Lk, DLO, DHI, H,
                  BIAS, sb_b, sb_h, sb_q, sb_k, HB,     # as attn_fwd
                  CU_Q, CU_K, G, TQ, TK, SQ, SK, SG,    # as attn_fwd; VARLEN: DK, DV (total_k, H, D), UNIFORM:
                                                        # (B, Lk, H, D), rows SG apart (0: H D)
                  DSEED_LO, DSEED_HI, DTHRESH, DSCALE,  # as attn_fwd
                  BH0, D: tl.constexpr, HAS_LENS: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                  PREC: tl.constexpr, EVEN_Q: tl.constexpr, HAS_BIAS: tl.constexpr, VARLEN: tl.constexpr,
                  DROPOUT: tl.constexpr, BIAS_K1: tl.constexpr = False, UNIFORM: tl.constexpr = False,
                  PDL: tl.constexpr = None):
    """EVEN_Q: Lq is a multiple of BLOCK_M, so no query block crosses Lq and none needs a row mask
    (the usual case; the other compiles a row select into every block). Key j is seen by the rows
    i with j - DHI < i <= j - DLO (and j below the key length): the query blocks of the key block
    split as the forward's key blocks do."""
    _pdl_start(PDL)
    if BIAS_K1:   # the bias's key stride 1 as a constant: its tiles load as vectors (attention._unit_keys)
        sb_k = 1
    start_n = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    cols = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    lq, lk, q_base, o_base, kv_base, dk_base, _, dlo, dhi, lse_base, QRS, RS, KRS, DKRS, _, LRS = _geometry(
        CU_Q, CU_K, CU_Q, bh, BH0, H, G, Lq, Lk, TQ, TK, SQ, SK, SG, DLO, DHI, start_n, False, D, VARLEN, UNIFORM)
    n_ok, d_ok = cols < lk, offs_d < D
    kv_mask = n_ok[:, None] & d_ok[None, :]
    k = tl.load(K + kv_base + cols[:, None] * KRS + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + kv_base + cols[:, None] * KRS + offs_d[None, :], mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    length = lk
    if HAS_LENS:
        length = _key_length(LENS, LENS, bh + BH0, H, Lk, 0, False)
    b_base = _bias_base(bh + BH0, HB, sb_b, sb_h)
    b_cols = cols.to(tl.int64) * sb_k
    drop_base = (bh + BH0) * Lq
    first = start_n * BLOCK_N
    last = first + BLOCK_N - 1
    # rows seeing some key of the block: (first - DHI, last - DLO]; every key of it: [last - DHI + 1, first - DLO]
    row_cap = tl.where(first < length, lq, 0)   # a block wholly past the key length: no row sees it
    e = tl.maximum(tl.minimum(last - dlo + 1, row_cap), 0)
    a = tl.minimum((tl.maximum(first - dhi + 1, 0) // BLOCK_M) * BLOCK_M, e)
    full_cap = tl.where(last < length, e, a)      # a block crossing the key length: no row sees it whole
    b = tl.minimum(tl.maximum(a, tl.cdiv(tl.maximum(last - dhi + 1, 0), BLOCK_M) * BLOCK_M), full_cap)
    c = tl.maximum(b, tl.minimum((tl.maximum(first - dlo + 1, 0) // BLOCK_M) * BLOCK_M, full_cap))
    for start_m in range(a, b, BLOCK_M):
        dk, dv = _dkdv_block(dk, dv, k, v, Q, DO, LSE, DELTA, q_base, o_base, lse_base, start_m, cols, offs_m,
                             offs_d, d_ok, qk_scale, lq, dlo, dhi, length, BIAS, b_base, sb_q, b_cols, n_ok, QRS, RS,
                             LRS,
                             drop_base, Lk, DSEED_LO, DSEED_HI, DTHRESH, DSCALE, D, True, True,
                             PREC, HAS_BIAS, DROPOUT)
    for start_m in range(b, c, BLOCK_M):
        dk, dv = _dkdv_block(dk, dv, k, v, Q, DO, LSE, DELTA, q_base, o_base, lse_base, start_m, cols, offs_m,
                             offs_d, d_ok, qk_scale, lq, dlo, dhi, length, BIAS, b_base, sb_q, b_cols, n_ok, QRS, RS,
                             LRS,
                             drop_base, Lk, DSEED_LO, DSEED_HI, DTHRESH, DSCALE, D, False,
                             not EVEN_Q, PREC, HAS_BIAS, DROPOUT)
    for start_m in range(c, e, BLOCK_M):
        dk, dv = _dkdv_block(dk, dv, k, v, Q, DO, LSE, DELTA, q_base, o_base, lse_base, start_m, cols, offs_m,
                             offs_d, d_ok, qk_scale, lq, dlo, dhi, length, BIAS, b_base, sb_q, b_cols, n_ok, QRS, RS,
                             LRS,
                             drop_base, Lk, DSEED_LO, DSEED_HI, DTHRESH, DSCALE, D, True, True,
                             PREC, HAS_BIAS, DROPOUT)
    tl.store(DK + dk_base + cols[:, None] * DKRS + offs_d[None, :], (dk * sm_scale).to(DK.dtype.element_ty),
             mask=kv_mask)
    tl.store(DV + dk_base + cols[:, None] * DKRS + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _dq_block(dq, q, do, lse2, delta, K, V, kv_base, start_n, lo_r, hi_r, offs_n, offs_d, d_ok, qk_scale, Lk,
              BIAS, b_base, b_rows, sb_k, m_ok, DBIAS, db_base, db_rows, sd_k, rows, KRS,
              drop_rows, DSEED_LO, DSEED_HI, DTHRESH, DSCALE,
              D: tl.constexpr, MASK: tl.constexpr, PREC: tl.constexpr, HAS_BIAS: tl.constexpr,
              DB_MODE: tl.constexpr, DBQ: tl.constexpr, DBK: tl.constexpr, DROPOUT: tl.constexpr):
    """One key block's share of dQ; MASK: the block crosses the end of the keys or an end of some
    row's interval. Rows past Lq load as zeros and are never stored. With a bias: dS, the bias's
    gradient, goes to DBIAS (db_rows: the rows' offsets, sd_k: the key stride): DB_MODE 1 stores
    it (each element has one writer), 2 adds it atomically, summed first over the rows (not DBQ)
    or keys (not DBK) where the bias broadcasts them."""
    cols = start_n + offs_n
    kv_mask = d_ok[None, :]
    if MASK:
        kv_mask = kv_mask & (cols < Lk)[:, None]
    k = tl.load(K + kv_base + cols[:, None] * KRS + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + kv_base + cols[:, None] * KRS + offs_d[None, :], mask=kv_mask, other=0.0)
    s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
    if HAS_BIAS:
        s += _bias_tile(BIAS, b_base, b_rows[:, None], cols.to(tl.int64)[None, :] * sb_k,
                        m_ok[:, None] & (cols < Lk)[None, :])
    p = tl.math.exp2(s - lse2[:, None])
    if HAS_BIAS:
        p = tl.where((lse2 == float("-inf"))[:, None], 0.0, p)
    if MASK:
        p = tl.where((cols[None, :] >= lo_r[:, None]) & (cols[None, :] < hi_r[:, None]), p, 0.0)
    dp = tl.dot(do, tl.trans(v), input_precision=PREC)
    if DROPOUT:
        keep = _keep_tile(drop_rows, cols, DSEED_LO, DSEED_HI, DTHRESH)
        dp = tl.where(keep, dp * DSCALE, 0.0)
    ds = p * (dp - delta[:, None])
    dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
    if DB_MODE == 4:   # this key block's partials (db_base: the row block's, attn_bwd_dq)
        # (the key block's index in int64, as kb Lq may pass 2^31; tl.cast: in Triton's interpreter
        # start_n is a constexpr)
        kb = tl.cast(start_n // offs_n.shape[0], tl.int64)
        _bias_grad(DBIAS, db_base + kb * sd_k, db_rows, cols.to(tl.int64), ds, m_ok, cols < Lk, DB_MODE, DBQ, DBK)
    elif DB_MODE != 0:
        _bias_grad(DBIAS, db_base, db_rows, cols.to(tl.int64) * sd_k, ds, m_ok, cols < Lk, DB_MODE, DBQ, DBK)
    return dq


@triton.jit
def attn_bwd_dq(Q, K, V, DO, LSE, DELTA, DQ,          # as attn_fwd; DQ: [BH, Lq, D]
                LENS, qk_scale, sm_scale, Lq, Lk, DLO, DHI, H,
                BIAS, sb_b, sb_h, sb_q, sb_k, HB,     # as attn_fwd
                DBIAS, sd_b, sd_h, sd_q, sd_k,        # DBIAS: the bias's gradient (float32, or the bias's dtype
                                                      # for DB_MODE 1), its element strides (0 broadcast);
                                                      # DB_MODE 4: the partials' workspace, the element
                                                      # strides of a bh, a row block and a key block
                CU_Q, CU_K, G, TQ, TK, SQ, SK, SG,    # as attn_fwd; UNIFORM: DQ's rows SG apart (0: H D)
                DSEED_LO, DSEED_HI, DTHRESH, DSCALE,  # as attn_fwd
                BH0, D: tl.constexpr, HAS_LENS: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, PREC: tl.constexpr,
                HAS_BIAS: tl.constexpr, DB_MODE: tl.constexpr, DBQ: tl.constexpr, DBK: tl.constexpr,
                VARLEN: tl.constexpr, DROPOUT: tl.constexpr, BIAS_K1: tl.constexpr = False,
                DB_K1: tl.constexpr = False, UNIFORM: tl.constexpr = False, PDL: tl.constexpr = None):
    _pdl_start(PDL)
    if BIAS_K1:   # the bias's key stride 1 as a constant: its tiles load as vectors (attention._unit_keys)
        sb_k = 1
    tl.static_assert(not DB_K1 or DB_MODE == 1 or DB_MODE == 2, "DB_K1: a per-element gradient (DB_MODE 1, 2)")
    if DB_K1:   # (DB_MODE 1 or 2: the gradient's key stride 1, as BIAS_K1; DB_MODE 4's sd_k strides key blocks)
        sd_k = 1
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    lq, lk, q_base, o_base, kv_base, _, dq_base, dlo, dhi, lse_base, QRS, RS, KRS, _, DQRS, LRS = _geometry(
        CU_Q, CU_K, CU_Q, bh, BH0, H, G, Lq, Lk, TQ, TK, SQ, SK, SG, DLO, DHI, start_m, False, D, VARLEN, UNIFORM)
    m_ok, d_ok = rows < lq, offs_d < D
    length = lk
    if HAS_LENS:
        length = _key_length(LENS, LENS, bh + BH0, H, Lk, 0, False)
    lo_r = rows + dlo
    hi_r = tl.minimum(rows + dhi, length)
    q_mask = m_ok[:, None] & d_ok[None, :]
    q = tl.load(Q + q_base + rows[:, None] * QRS + offs_d[None, :], mask=q_mask, other=0.0)
    do = tl.load(DO + o_base + rows[:, None] * RS + offs_d[None, :], mask=q_mask, other=0.0)
    lse2 = tl.load(LSE + lse_base + rows * LRS, mask=m_ok, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + lse_base + rows * LRS, mask=m_ok, other=0.0)
    b_base = _bias_base(bh + BH0, HB, sb_b, sb_h)
    db_base = _bias_base(bh + BH0, HB, sd_b, sd_h)
    b_rows, db_rows = rows.to(tl.int64) * sb_q, rows.to(tl.int64) * sd_q
    if DB_MODE == 4:   # this row block's partials (_bias_grad), rows and keys as they are
        db_base = (bh + BH0) * sd_b + start_m.to(tl.int64) * sd_q
        db_rows = rows.to(tl.int64)
    drop_rows = ((bh + BH0) * Lq + rows) * Lk
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    a, b, c, e = _ranges(start_m * BLOCK_M, start_m * BLOCK_M + BLOCK_M - 1, dlo, dhi, length, BLOCK_N)
    for start_n in range(a, b, BLOCK_N):
        dq = _dq_block(dq, q, do, lse2, delta, K, V, kv_base, start_n, lo_r, hi_r, offs_n, offs_d, d_ok, qk_scale,
                       lk, BIAS, b_base, b_rows, sb_k, m_ok, DBIAS, db_base, db_rows, sd_k, rows, KRS,
                       drop_rows, DSEED_LO, DSEED_HI, DTHRESH, DSCALE, D, True, PREC,
                       HAS_BIAS, DB_MODE, DBQ, DBK, DROPOUT)
    for start_n in range(b, c, BLOCK_N):
        dq = _dq_block(dq, q, do, lse2, delta, K, V, kv_base, start_n, lo_r, hi_r, offs_n, offs_d, d_ok, qk_scale,
                       lk, BIAS, b_base, b_rows, sb_k, m_ok, DBIAS, db_base, db_rows, sd_k, rows, KRS,
                       drop_rows, DSEED_LO, DSEED_HI, DTHRESH, DSCALE, D, False, PREC,
                       HAS_BIAS, DB_MODE, DBQ, DBK, DROPOUT)
    for start_n in range(c, e, BLOCK_N):
        dq = _dq_block(dq, q, do, lse2, delta, K, V, kv_base, start_n, lo_r, hi_r, offs_n, offs_d, d_ok, qk_scale,
                       lk, BIAS, b_base, b_rows, sb_k, m_ok, DBIAS, db_base, db_rows, sd_k, rows, KRS,
                       drop_rows, DSEED_LO, DSEED_HI, DTHRESH, DSCALE, D, True, PREC,
                       HAS_BIAS, DB_MODE, DBQ, DBK, DROPOUT)
    tl.store(DQ + dq_base + rows[:, None] * DQRS + offs_d[None, :], (dq * sm_scale).to(DQ.dtype.element_ty),
             mask=q_mask)


@triton.jit
def zero_fill(Y, N, BLOCK: tl.constexpr,   # Y: [1, N] (a gradient buffer the kernels add into)
              PDL: tl.constexpr = None):
    """Y = 0, by a launch (kernels/attention.py zeros): 4 bytes or fewer written per element."""
    _pdl_start(PDL)
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + i, tl.zeros([BLOCK], Y.dtype.element_ty), mask=i < N)


@triton.jit
def cast_copy(X, Y, N, BLOCK: tl.constexpr,   # X, Y: [1, N], Y's dtype (a gradient into bfloat16)
              PDL: tl.constexpr = None):
    _pdl_start(PDL)
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + i, tl.load(X + i, mask=i < N).to(Y.dtype.element_ty), mask=i < N)
