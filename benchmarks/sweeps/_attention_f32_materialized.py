"""Experimental float32 attention backward (tf32x3 products) that materialises the probabilities:
instead of the flash backward's recomputation in two fused kernels (the shipped kernels, and
_attention_f32_split.py's dkdv_split / dq_split), one score kernel computes each (query block, key
block) tile of S = Q K^T and dP = dO V^T once (the reduction over D in one step) and writes
P = exp(S - lse) and dS = P (dP - delta) to memory; three long-K products then give
dQ = dS K, dK = dS^T Q and dV = P^T dO. Five tf32x3 products per tile pair, as FlashAttention-2's
order, without its atomics, at the cost of 2 BH L^2 float32 of workspace (written once, read
twice) -- bounded by processing heads in chunks (attention_f32_variants.py --materialized).

Operands the products read from memory are split once into TF32 parts and remainders (the shipped
tf32_split): K and V in their own layout (the score kernel's B operands, reduced over D), K^T, Q^T
and dO^T (the long products' B operands, reduced over keys or queries: 32-bit tensor-core operands
must be contiguous along the reduced axis). Q, dO and the P / dS tiles are split in registers
(A operands). No masks: L must be a multiple of the tiles; [BH, L, D] contiguous float32."""
import triton
import triton.language as tl

from cudakit.kernels._attention_triton import _dot3  # the shipped forward's helpers
from cudakit.kernels._attention_triton import _tf32_parts as _split


@triton.jit
def scores_split(Q, DO, KHI, KLO, VHI, VLO, LSE, DELTA, P, DS,   # Q, DO: [BH, L, D]; K*, V*: split [BH, L, D];
                 qk_scale, L,                                   # LSE, DELTA: [BH, L]; P, DS: [BH, L, L]
                 D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """P and dS of one (BLOCK_M queries, BLOCK_N keys) tile: two tf32x3 products over D, then
    P = exp2(S qk_scale - lse log2(e)), dS = P (dP - delta), both stored in float32.
    FLOPs: 2 x 2 BLOCK_M BLOCK_N D x 3 (tf32x3); memory: 8 BLOCK_M BLOCK_N bytes written."""
    start_m = tl.program_id(0)
    start_n = tl.program_id(1)
    bh = tl.program_id(2).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    base = bh * L * D
    qp = base + rows[:, None] * D + offs_d[None, :]
    kt = base + cols[None, :] * D + offs_d[:, None]           # [D, N] tiles of [BH, L, D] arrays
    q_hi, q_lo = _split(tl.load(Q + qp))
    s = _dot3(q_hi, q_lo, tl.load(KHI + kt), tl.load(KLO + kt), tl.zeros([BLOCK_M, BLOCK_N], tl.float32))
    lse2 = tl.load(LSE + bh * L + rows) * 1.4426950408889634
    p = tl.math.exp2(s * qk_scale - lse2[:, None])
    do_hi, do_lo = _split(tl.load(DO + qp))
    dp = _dot3(do_hi, do_lo, tl.load(VHI + kt), tl.load(VLO + kt), tl.zeros([BLOCK_M, BLOCK_N], tl.float32))
    ds = p * (dp - tl.load(DELTA + bh * L + rows)[:, None])
    out = bh * L * L + rows[:, None].to(tl.int64) * L + cols[None, :]
    tl.store(P + out, p)
    tl.store(DS + out, ds)


@triton.jit
def long_product_split(A, BHI, BLO, C,   # A: [BH, L, L] float32 (P or dS); BHI, BLO: split [BH, D, L]; C: [BH, L, D]
                       scale, L,
                       D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, TRANS_A: tl.constexpr):
    """C = scale * op(A) B over all L of the reduced axis: op(A) = A (dQ = dS K) or A^T (TRANS_A:
    dK = dS^T Q, dV = P^T dO; the [BLOCK_M, BLOCK_K] tile read from A's columns), B given as its
    transpose's TF32 parts ([D, L]: contiguous along the reduced axis). A's tiles are split in
    registers. FLOPs: 2 BLOCK_M L D x 3 per program; memory: A read once (4 L^2 bytes a head)."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    offs_d = tl.arange(0, D)
    a_base = bh * L * L
    b_base = bh * L * D
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for k0 in range(0, L, BLOCK_K):
        ks = k0 + offs_k
        if TRANS_A:
            a = tl.load(A + a_base + ks[None, :].to(tl.int64) * L + rows[:, None])
        else:
            a = tl.load(A + a_base + rows[:, None].to(tl.int64) * L + ks[None, :])
        a_hi, a_lo = _split(a)
        bp = b_base + offs_d[None, :] * L + ks[:, None]       # [K, D] tiles of [BH, D, L] arrays
        acc = _dot3(a_hi, a_lo, tl.load(BHI + bp), tl.load(BLO + bp), acc)
    tl.store(C + b_base + rows[:, None] * D + offs_d[None, :], acc * scale)
