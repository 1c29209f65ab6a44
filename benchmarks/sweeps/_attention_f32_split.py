"""Experimental float32 attention kernels with the tf32x3 operands split ahead of the products
(attention_f32_variants.py times them). Triton's own tf32x3 (`input_precision="tf32x3"`) splits
both operands of every product inside the loop: a tile read from shared memory into registers,
split into its TF32 part and remainder, and both written back to shared memory for the tensor
cores, on every key block. Here the loaded operands (K, V in the forward; Q, dO, K, V in the
backward) are split once by the shipped `tf32_split` into two float32 arrays (hi: rounded to TF32's 10-bit
mantissa, lo: the exact remainder), so their tiles go from memory to shared memory and to the
tensor cores as they are; only the operands computed in registers (P, dS, and Q when QREG) are
split in registers. Each product is three TF32 products, the small ones first:
a.b ~ a_lo.b_hi + a_hi.b_lo + a_hi.b_hi (a_lo.b_lo, about 2^-22 of the term, dropped).
No masks: L must be a multiple of the tiles; [BH, L, D] contiguous float32, D == BLOCK_D."""
import triton
import triton.language as tl

from cudakit.kernels._attention_triton import _dot3, _tf32_parts as _split   # the shipped forward's helpers


@triton.jit
def fwd_split(Q, QLO, KHI, KLO, VHI, VLO, O, LSE,   # Q: [BH, L, D] (QREG: the input; else its hi part), QLO
              qk_scale, L,                           # (unused with QREG); K split [BH, L, D]; V split and
                                                     # transposed [BH, D, L]; O [BH, L, D]; LSE [BH, L]
              D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, QREG: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    base = bh * L * D
    qp = base + rows[:, None] * D + offs_d[None, :]
    if QREG:
        q_hi, q_lo = _split(tl.load(Q + qp))
    else:
        q_hi = tl.load(Q + qp)
        q_lo = tl.load(QLO + qp)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start_n in range(0, L, BLOCK_N):
        cols = start_n + offs_n
        kp = base + cols[None, :] * D + offs_d[:, None]
        s = _dot3(q_hi, q_lo, tl.load(KHI + kp), tl.load(KLO + kp), tl.zeros([BLOCK_M, BLOCK_N], tl.float32))
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        vp = base + offs_d[None, :] * L + cols[:, None]
        p_hi, p_lo = _split(p)
        acc = _dot3(p_hi, p_lo, tl.load(VHI + vp), tl.load(VLO + vp), acc * alpha[:, None])
        m_i = m_new
    tl.store(O + qp, acc / l_i[:, None])
    tl.store(LSE + bh * L + rows, (m_i + tl.math.log2(l_i)) * 0.6931471805599453)


@triton.jit
def dkdv_split(QHI, QLO, QTHI, QTLO, KHI, KLO, VHI, VLO, DOHI, DOLO, DOTHI, DOTLO, LSE, DELTA, DK, DV,
               KTHI, KTLO, DQ,          # FUSE_DQ: K's parts transposed [BH, D, L]; DQ [BH, L, D] float32, zeroed
               qk_scale, sm_scale, L,   # split [BH, L, D], the *T ones [BH, D, L]; LSE, DELTA [BH, L]
               D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, RELOAD: tl.constexpr = False,
               FUSE_DQ: tl.constexpr = False):
    """RELOAD: the key block's K, V parts loaded again each iteration (from L2, pipelined into shared
    memory) instead of held in registers across the loop: four [BLOCK_N, D] float32 tiles, 128
    registers a thread at D 64 with 4 warps. FUSE_DQ: dQ too, each (key block, query block) pair's
    dS K added to DQ atomically (FlashAttention-2's order): five split products a pair where this
    kernel and dq_split take seven (dq_split recomputes S and dP); atomic traffic BH L D (L / BLOCK_N)
    float32 adds."""
    start_n = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    cols = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    base = bh * L * D
    kp = base + cols[:, None] * D + offs_d[None, :]
    ktp = base + offs_d[None, :] * L + cols[:, None]       # [N, D] tiles of [BH, D, L] arrays (FUSE_DQ)
    if not RELOAD:
        k_hi, k_lo, v_hi, v_lo = tl.load(KHI + kp), tl.load(KLO + kp), tl.load(VHI + kp), tl.load(VLO + kp)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    for start_m in range(0, L, BLOCK_M):
        if RELOAD:
            k_hi, k_lo, v_hi, v_lo = tl.load(KHI + kp), tl.load(KLO + kp), tl.load(VHI + kp), tl.load(VLO + kp)
        rows = start_m + offs_m
        qtp = base + rows[None, :] * D + offs_d[:, None]      # [D, M] tiles of [BH, L, D] arrays
        rp = base + offs_d[None, :] * L + rows[:, None]       # [M, D] tiles of [BH, D, L] arrays
        lse2 = tl.load(LSE + bh * L + rows) * 1.4426950408889634
        delta = tl.load(DELTA + bh * L + rows)
        sT = _dot3(k_hi, k_lo, tl.load(QHI + qtp), tl.load(QLO + qtp), tl.zeros([BLOCK_N, BLOCK_M], tl.float32))
        pT = tl.math.exp2(sT * qk_scale - lse2[None, :])
        dpT = _dot3(v_hi, v_lo, tl.load(DOHI + qtp), tl.load(DOLO + qtp), tl.zeros([BLOCK_N, BLOCK_M], tl.float32))
        p_hi, p_lo = _split(pT)
        dv = _dot3(p_hi, p_lo, tl.load(DOTHI + rp), tl.load(DOTLO + rp), dv)
        ds_hi, ds_lo = _split(pT * (dpT - delta[None, :]))
        dk = _dot3(ds_hi, ds_lo, tl.load(QTHI + rp), tl.load(QTLO + rp), dk)
        if FUSE_DQ:
            dq = _dot3(tl.trans(ds_hi), tl.trans(ds_lo), tl.load(KTHI + ktp), tl.load(KTLO + ktp),
                       tl.zeros([BLOCK_M, D], tl.float32))
            tl.atomic_add(DQ + base + rows[:, None] * D + offs_d[None, :], dq * sm_scale, sem="relaxed")
    tl.store(DK + kp, dk * sm_scale)
    tl.store(DV + kp, dv)


@triton.jit
def dq_split(QHI, QLO, KHI, KLO, KTHI, KTLO, VHI, VLO, DOHI, DOLO, LSE, DELTA, DQ,
             qk_scale, sm_scale, L,   # as dkdv_split
             D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, RELOAD: tl.constexpr = False):
    """RELOAD: q's and dO's parts loaded each iteration (as dkdv_split's)."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    base = bh * L * D
    qp = base + rows[:, None] * D + offs_d[None, :]
    if not RELOAD:
        q_hi, q_lo, do_hi, do_lo = tl.load(QHI + qp), tl.load(QLO + qp), tl.load(DOHI + qp), tl.load(DOLO + qp)
    lse2 = tl.load(LSE + bh * L + rows) * 1.4426950408889634
    delta = tl.load(DELTA + bh * L + rows)
    dq = tl.zeros([BLOCK_M, D], tl.float32)
    for start_n in range(0, L, BLOCK_N):
        if RELOAD:
            q_hi, q_lo, do_hi, do_lo = tl.load(QHI + qp), tl.load(QLO + qp), tl.load(DOHI + qp), tl.load(DOLO + qp)
        cols = start_n + offs_n
        ktp = base + cols[None, :] * D + offs_d[:, None]
        s = _dot3(q_hi, q_lo, tl.load(KHI + ktp), tl.load(KLO + ktp), tl.zeros([BLOCK_M, BLOCK_N], tl.float32))
        p = tl.math.exp2(s * qk_scale - lse2[:, None])
        dp = _dot3(do_hi, do_lo, tl.load(VHI + ktp), tl.load(VLO + ktp), tl.zeros([BLOCK_M, BLOCK_N], tl.float32))
        ds_hi, ds_lo = _split(p * (dp - delta[:, None]))
        kp = base + offs_d[None, :] * L + cols[:, None]       # [N, D] tiles of [BH, D, L] arrays
        dq = _dot3(ds_hi, ds_lo, tl.load(KTHI + kp), tl.load(KTLO + kp), dq)
    tl.store(DQ + qp, dq * sm_scale)

