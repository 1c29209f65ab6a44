"""Experimental float32 attention forward with each operand in two float16 parts (attention_f32_f16split.py
times it): x = s (hi + lo), s a power of two per row (Q's rows, K's and V's keys) that brings the
row's largest magnitude into [1, 2), hi = fp16(x / s), lo = fp16(x / s - hi): 22 bits of the
mantissa, and the products a.b ~ a_lo.b_hi + a_hi.b_lo + a_hi.b_hi on the float16 tensor cores
(twice TF32's rate, half the registers an operand). K and V are split ahead by f16_split (4 bytes an
element, as float32 itself) and loaded as they are; Q once and P on each key block in registers.
P's columns take V's key scales relative to the largest seen so far (c), so that P stays <= 1.
No masks: L a multiple of the tiles; [BH, L, D] contiguous float32, D == the head-dim block."""
import triton
import triton.language as tl

# the shipped kernel's helpers (kernels/_attention_f16p_triton.py): the row scale, and the parts
# unshifted (SHIFT's default), as this first form took them
from cudakit.kernels._attention_f16p_triton import _f16_parts as _parts, _pow2


@triton.jit
def f16_split(X, HI, LO, SC, L, D: tl.constexpr, BLOCK_L: tl.constexpr):
    """X [R, L, D] float32 -> HI, LO [R, L, D] float16 and SC [R, L] float32 (each row's scale).
    Memory: 8 bytes an element."""
    r = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    cols = tl.arange(0, D)
    p = r * L * D + rows[:, None] * D + cols[None, :]
    x = tl.load(X + p)
    s = _pow2(tl.max(tl.abs(x), 1))
    hi, lo = _parts(x * (1.0 / s)[:, None])
    tl.store(HI + p, hi)
    tl.store(LO + p, lo)
    tl.store(SC + r * L + rows, s)


@triton.jit
def fwd_f16(Q, KH, KL, KS, VH, VL, VS, O, LSE,   # Q, O: [BH, L, D] float32; KH, KL, VH, VL: [BH, L, D] float16;
            qk_scale, L,                          # KS, VS, LSE: [BH, L] float32
            D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    base = bh * L * D
    qp = base + rows[:, None] * D + offs_d[None, :]
    q = tl.load(Q + qp)
    rq = _pow2(tl.max(tl.abs(q), 1))
    q_hi, q_lo = _parts(q * (1.0 / rq)[:, None])
    rowf = rq * qk_scale
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    c = 1.1754943508222875e-38   # the largest V key scale seen (FLT_MIN before any)
    for start_n in range(0, L, BLOCK_N):
        cols = start_n + offs_n
        kp = base + cols[None, :] * D + offs_d[:, None]   # [D, N]: K^T's tile
        kh = tl.load(KH + kp)
        kl = tl.load(KL + kp)
        s = tl.dot(q_lo, kh)
        s = tl.dot(q_hi, kl, s)
        s = tl.dot(q_hi, kh, s)
        ks = tl.load(KS + bh * L + cols)
        t = s * ks[None, :] * rowf[:, None]
        m_new = tl.maximum(m_i, tl.max(t, 1))
        p = tl.math.exp2(t - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        vs = tl.load(VS + bh * L + cols)
        c_new = tl.maximum(c, tl.max(vs, 0))
        p_hi, p_lo = _parts(p * (vs / c_new)[None, :])
        vp = base + cols[:, None] * D + offs_d[None, :]
        vh = tl.load(VH + vp)
        vl = tl.load(VL + vp)
        acc = acc * (alpha * (c / c_new))[:, None]
        acc = tl.dot(p_lo, vh, acc)
        acc = tl.dot(p_hi, vl, acc)
        acc = tl.dot(p_hi, vh, acc)
        m_i = m_new
        c = c_new
    tl.store(O + qp, acc * (c / l_i)[:, None])
    tl.store(LSE + bh * L + rows, (m_i + tl.math.log2(l_i)) * 0.6931471805599453)
