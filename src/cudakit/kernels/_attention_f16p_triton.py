"""Triton source of the float32 attention forward on float16 parts (imported only once Triton is
known to be there; the host side is kernels/attention.py, _f16_candidates).

Each float32 operand row x (a row of Q, a key of K or of V) is taken as s (hi + lo): s the power
of two 2^floor(log2 max|x|) of the row, hi = fp16(x / s) (round to nearest) and lo = fp16(x / s - hi),
22 bits of the mantissa; a.b ~ a_lo.b_hi + a_hi.b_lo + a_hi.b_hi summed on the float16 tensor
cores in float32 (a_lo.b_lo, about 2^-22 of the term, dropped). That is the split of tf32x3 (three
products of parts and remainders) on operands half the size: the float16 products run at twice
TF32's rate, a part takes half the registers, and K's and V's parts, split once ahead (both in
one launch of f16_split_kv) into 4 bytes an element (float32's own size), are read by the loop as
they are, into shared memory without a pass through registers. (Splitting K and V in the loop
instead, each row block its key blocks again, with no pass ahead, ran 1.3-1.8x slower than the
pass and this loop on every small grid timed: H200, 2026-11-28, scripts/gpu_check_attention_f32.sh
parts; it was removed.) A row's parts hold 22 bits of its largest element, so an element far
below that one keeps an absolute error of about 2^-22 of it (float32 keeps 24 bits of every
element); the GPU tests hold it to the float32 bound against float64.

Q's parts and its row scales are made in registers once a program; each key block's scores are
the products times (Q's row scale x K's key scale). The probabilities P (<= 1) take V's key
scales relative to the largest seen so far (c, carried through the loop with the running max),
so that P's parts stay in float16's range: O = c sum_j (p_j vs_j / c) (v_j / vs_j). In that
product P's and V's remainders come times 2^11 (and P's part too, exactly, for the parts'
product; the accumulator holds O in units of 2^-11): a remainder below float16's normal range
would keep only the absolute error 2^-25 of its row's largest element, and an output element of
a row that sees few keys, far below its keys' largest elements, then missed the float32 bound
(H200, 2026-11-28 13:39 UTC: 4 of 147 float32 attention tests, errors 6e-7 where their bound was
below that); with the shift each element keeps 22 bits of itself (a NumPy model of the product,
rows of V from 10^-3 to 10^3: the largest error 0.03 of the tests' bound, against 7.3 without).
The scores keep Q's and K's remainders unshifted: their error, 2^-25 of the row's largest
products, moves the probabilities by a relative 2^-25 of the scores' spread.

Masks, key lengths, grouped-query k, v, a bias and dropout as attn_fwd (_attention_triton.py),
whose helpers this kernel shares (_fwd_probs: the online softmax's step); [BH, L, D] arrays, no
varlen. KSPLIT > 1 writes each part's output for attn_fwd_combine as attn_fwd does.
FLOPs: 4 BH Lq Lk DP (halved with causal) in float16 x 3; memory: Q, K's and V's parts read once a
query block, O written once; f16_split_kv's pass 4 + 4 DP / D bytes an element of K and V besides.
"""
import triton
import triton.language as tl

from ._attention_triton import _bias_base, _fwd_probs, _key_part, _kv_row, _part_blocks, _ranges, _row_block, _row_keys
from ._triton_pdl import _pdl_start


@triton.jit
def _pow2(m):
    """2^floor(log2 m) of m >= 0 (1 where m is 0 or subnormal; inf for inf and NaN)."""
    e = (m.to(tl.uint32, bitcast=True) & 0x7F800000).to(tl.float32, bitcast=True)
    return tl.where(e == 0.0, 1.0, e)


@triton.jit
def _f16_parts(x, SHIFT: tl.constexpr = False):
    """(hi, lo) float16 of x (|x| < 2 where it comes scaled): hi rounded to nearest, lo the rest;
    SHIFT: lo times 2^11, which keeps it clear of float16's subnormals (below 2^-14, 11 bits
    apart from hi), so that an element far below its row's largest keeps 22 bits of itself."""
    hi = x.to(tl.float16)
    lo = x - hi.to(tl.float32)
    if SHIFT:
        lo = lo * 2048.0
    return hi, lo.to(tl.float16)


@triton.jit
def f16_split_kv(K, V,            # K, V: [R, L, D] float32
                 KH, KL, KS,      # KH, KL: [R, L, DP] float16; KS: [R, L] float32 (K's parts and row scales)
                 VH, VL, VS,      # the same of V, its LO times 2^11
                 L, D: tl.constexpr, DP: tl.constexpr, BLOCK_L: tl.constexpr, PDL: tl.constexpr = None):
    """K's and V's rows split in one launch (_split_rows; V's remainders shifted): on small grids
    each launch ahead of the forward costs about as much as its bytes. One program per (BLOCK_L
    rows, matrix r, K or V). Memory traffic: 4 bytes an element read, 4 DP / D written."""
    _pdl_start(PDL)
    if tl.program_id(2) == 0:
        _split_rows(K, KH, KL, KS, L, D, DP, BLOCK_L, False)
    else:
        _split_rows(V, VH, VL, VS, L, D, DP, BLOCK_L, True)


@triton.jit
def _split_rows(X, HI, LO, SC, L, D: tl.constexpr, DP: tl.constexpr, BLOCK_L: tl.constexpr, SHIFT: tl.constexpr):
    """This program's BLOCK_L rows of X [R, L, D] as SC (HI + LO) (the module's parts; zeros in
    columns D..DP; SHIFT: LO times 2^11, _f16_parts)."""
    r = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    cols = tl.arange(0, DP)
    r_ok = rows < L
    x = tl.load(X + r * L * D + rows[:, None] * D + cols[None, :], mask=r_ok[:, None] & (cols < D)[None, :],
                other=0.0)
    s = _pow2(tl.max(tl.abs(x), 1))
    hi, lo = _f16_parts(x * (1.0 / s)[:, None], SHIFT)
    p = r * L * DP + rows[:, None] * DP + cols[None, :]
    tl.store(HI + p, hi, mask=r_ok[:, None])
    tl.store(LO + p, lo, mask=r_ok[:, None])
    tl.store(SC + r * L + rows, s, mask=r_ok)


@triton.jit
def _f16_step(acc, l_i, m_i, c, q_hi, q_lo, rq, KH, KL, KS, VH, VL, VS, kv_base, ks_base, start_n, lo_r, hi_r,
              offs_n, offs_d, qk_scale, Lk, BIAS, b_base, b_rows, sb_k, m_ok, drop_rows, DSEED_LO, DSEED_HI,
              DTHRESH, DSCALE, DP: tl.constexpr, MASK: tl.constexpr, POS_SCALE: tl.constexpr,
              HAS_BIAS: tl.constexpr, DROPOUT: tl.constexpr):
    """One key block: the scores from the parts, the online softmax's step (_fwd_probs), then
    acc += P V on the parts, P scaled by V's key scales over c (the largest so far, returned
    updated). MASK: the block crosses the end of the keys or an end of some row's interval."""
    cols = start_n + offs_n
    n_ok = cols < Lk
    kp = kv_base + cols[None, :] * DP + offs_d[:, None]   # [DP, N]: K^T's tile
    if MASK:
        kh = tl.load(KH + kp, mask=n_ok[None, :], other=0.0)
        kl = tl.load(KL + kp, mask=n_ok[None, :], other=0.0)
        ks = tl.load(KS + ks_base + cols, mask=n_ok, other=0.0)
    else:
        kh = tl.load(KH + kp)
        kl = tl.load(KL + kp)
        ks = tl.load(KS + ks_base + cols)
    s = tl.dot(q_lo, kh)
    s = tl.dot(q_hi, kl, s)
    s = tl.dot(q_hi, kh, s)
    s = s * (rq[:, None] * ks[None, :])   # (the scales' product first: either alone may pass float32's range)
    p, alpha, l_i, m_new = _fwd_probs(s, l_i, m_i, cols, lo_r, hi_r, qk_scale, Lk, BIAS, b_base, b_rows, sb_k, m_ok,
                                      drop_rows, DSEED_LO, DSEED_HI, DTHRESH, DSCALE, MASK, POS_SCALE, HAS_BIAS,
                                      DROPOUT)
    vp = kv_base + cols[:, None] * DP + offs_d[None, :]   # [N, DP]: V's tile
    if MASK:
        vs = tl.load(VS + ks_base + cols, mask=n_ok, other=0.0)
        vh = tl.load(VH + vp, mask=n_ok[:, None], other=0.0)
        vl = tl.load(VL + vp, mask=n_ok[:, None], other=0.0)
    else:
        vs = tl.load(VS + ks_base + cols)
        vh = tl.load(VH + vp)
        vl = tl.load(VL + vp)
    c_new = tl.maximum(c, tl.max(vs, 0))
    p_hi, p_lo = _f16_parts(p * (vs / c_new)[None, :], True)
    acc = acc * (alpha * (c / c_new))[:, None]   # (acc in units of 2^-11: P's and V's remainders come times 2^11)
    acc = tl.dot(p_lo, vh, acc)
    acc = tl.dot(p_hi, vl, acc)
    acc = tl.dot((p_hi.to(tl.float32) * 2048.0).to(tl.float16), vh, acc)   # (exact: p_hi <= 1)
    return acc, l_i, m_new, c_new


@triton.jit
def attn_fwd_f16p(Q, KH, KL, KS, VH, VL, VS,   # Q: [BH, Lq, D] float32; KH, KL, VH, VL: [BH / G, Lk, DP] float16,
                                              # KS, VS: [BH / G, Lk] float32 (f16_split_kv's parts and scales)
                  O, LSE,                     # O: [BH, Lq, D] float32, LSE: [BH, Lq] float32 (KSPLIT: workspaces)
                  LENS, ERR,                  # LENS: [B] int key lengths (HAS_LENS); ERR: int64 [8] error flag
                  qk_scale, Lq, Lk, DLO, DHI, H,   # qk_scale: softmax scale * log2(e)
                  BIAS, sb_b, sb_h, sb_q, sb_k, HB,   # as attn_fwd
                  G,                          # q heads a k, v head serves (H: q's heads a batch)
                  DSEED_LO, DSEED_HI, DTHRESH, DSCALE,   # DROPOUT: as attn_fwd
                  BH0,                        # the first bh of this launch
                  D: tl.constexpr, DP: tl.constexpr, HAS_LENS: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, POS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr,
                  DROPOUT: tl.constexpr, LEFT: tl.constexpr = True, LPT: tl.constexpr = 0,
                  KSPLIT: tl.constexpr = 1, EVEN: tl.constexpr = False, BIAS_K1: tl.constexpr = False,
                  PDL: tl.constexpr = None):
    """attn_fwd's forward (its masks, program order LPT and key parts KSPLIT) on the module's
    float16 parts; DP: head_dim's power of two (the parts' row length, zeros past D). EVEN: no key
    block needs a mask (no causal mask, window or key lengths, Lk a multiple of BLOCK_N), Lq is a
    multiple of BLOCK_M and D == DP: the masked loop and the row and column masks are not compiled
    (on 128 x 64 tiles its sm_90 SASS, Triton 3.9, held 160 registers against 226 at head dim 64,
    204 against 255 at 128)."""
    _pdl_start(PDL)
    if BIAS_K1:   # the bias's key stride 1 as a constant: its tiles load as vectors (attention._unit_keys)
        sb_k = 1
    start_m, bh = _row_block(LPT)
    start_m, part, O, LSE = _key_part(start_m, O, LSE, Lq, D, KSPLIT)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, DP)
    kvh = _kv_row(bh, BH0, H, G).to(tl.int64)
    q_base = bh * Lq * D
    kv_base = kvh * Lk * DP
    ks_base = kvh * Lk
    m_ok, d_ok = rows < Lq, offs_d < D
    length, lo_r, hi_r = _row_keys(rows, DLO, DHI, Lk, LENS, ERR, bh + BH0, H, Lk, start_m, HAS_LENS)
    if EVEN:
        q = tl.load(Q + q_base + rows[:, None] * D + offs_d[None, :])
    else:
        q = tl.load(Q + q_base + rows[:, None] * D + offs_d[None, :], mask=m_ok[:, None] & d_ok[None, :], other=0.0)
    rq = _pow2(tl.max(tl.abs(q), 1))
    q_hi, q_lo = _f16_parts(q * (1.0 / rq)[:, None])
    b_base = _bias_base(bh + BH0, HB, sb_b, sb_h)
    b_rows = rows.to(tl.int64) * sb_q
    drop_rows = ((bh + BH0) * Lq + rows) * Lk
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, DP], tl.float32)
    c = 1.1754943508222875e-38   # V's largest key scale so far (FLT_MIN before any: c / c_new is then 0)
    a, b, cc, e = _ranges(start_m * BLOCK_M, start_m * BLOCK_M + BLOCK_M - 1, DLO, DHI, length, BLOCK_N)
    klo = 0   # (a compile-time 0 with one part: the loops' start the compiler knows aligned)
    if KSPLIT > 1:   # this part's key blocks
        a, b, cc, e, klo = _part_blocks(a, b, cc, e, part, LEFT, KSPLIT, BLOCK_N)
    if LEFT:
        for start_n in range(a, b, BLOCK_N):
            acc, l_i, m_i, c = _f16_step(acc, l_i, m_i, c, q_hi, q_lo, rq, KH, KL, KS, VH, VL, VS, kv_base, ks_base,
                                         start_n, lo_r, hi_r, offs_n, offs_d, qk_scale, Lk, BIAS, b_base, b_rows,
                                         sb_k, m_ok, drop_rows, DSEED_LO, DSEED_HI, DTHRESH, DSCALE, DP, True,
                                         POS_SCALE, HAS_BIAS, DROPOUT)
    else:   # (from klo: a start the compiler knows aligned, as attn_fwd)
        b = klo
    for start_n in range(b, cc, BLOCK_N):
        acc, l_i, m_i, c = _f16_step(acc, l_i, m_i, c, q_hi, q_lo, rq, KH, KL, KS, VH, VL, VS, kv_base, ks_base,
                                     start_n, lo_r, hi_r, offs_n, offs_d, qk_scale, Lk, BIAS, b_base, b_rows,
                                     sb_k, m_ok, drop_rows, DSEED_LO, DSEED_HI, DTHRESH, DSCALE, DP, False,
                                     POS_SCALE, HAS_BIAS, DROPOUT)
    if not EVEN:
        for start_n in range(cc, e, BLOCK_N):
            acc, l_i, m_i, c = _f16_step(acc, l_i, m_i, c, q_hi, q_lo, rq, KH, KL, KS, VH, VL, VS, kv_base, ks_base,
                                         start_n, lo_r, hi_r, offs_n, offs_d, qk_scale, Lk, BIAS, b_base, b_rows,
                                         sb_k, m_ok, drop_rows, DSEED_LO, DSEED_HI, DTHRESH, DSCALE, DP, True,
                                         POS_SCALE, HAS_BIAS, DROPOUT)
    seen = l_i != 0.0   # rows with at least one key (NaN stays NaN)
    acc = tl.where(seen[:, None], acc * ((c * 0.00048828125) / tl.where(seen, l_i, 1.0))[:, None], 0.0)
    lse = tl.where(seen, (m_i + tl.math.log2(tl.where(seen, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    if EVEN:
        tl.store(O + q_base + rows[:, None] * D + offs_d[None, :], acc)
        tl.store(LSE + bh * Lq + rows, lse)
    else:
        tl.store(O + q_base + rows[:, None] * D + offs_d[None, :], acc, mask=m_ok[:, None] & d_ok[None, :])
        tl.store(LSE + bh * Lq + rows, lse, mask=m_ok)
