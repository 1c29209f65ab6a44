"""Triton source of the implicit-GEMM conv2d (imported only once Triton is known to be there).

y[n, k, p, q] = sum over (r, s, c) of x[n, c, p*sh - ph + r*dh, q*sw - pw + s*dw] * w[r, s, c, k]:
a GEMM of (output positions) x (R S C) x (K) whose left operand is gathered from x tile by tile in
shared memory, never written out (no im2col buffer). One program per (BLOCK_M positions of one
image, BLOCK_N output channels, image); one loop over the R * S * ceil(C / BLOCK_K) reduction
steps, so that Triton pipelines the loads across taps as well as channels. Positions outside the
padded input read as zeros. float32 accumulation; bias added in float32; y rounded once.
FLOPs: 2 N K P Q C R S; memory traffic: x (re-read per tap, mostly from L2), w, y once.
The weight gradient (conv2d_wgrad) is the same gather against dL/dy, its reduction over the
positions split across programs into float32 partial sums.
Groups: x (N, G C, H, W) is read as N G images of C channels (the same memory) and y as N G images
of K channels; image z takes group z % G's weight. The weight is laid out per group (G blocks of
[R, S, C, K]), so a plain convolution is the case G = 1.
"""
import triton
import triton.language as tl


@triton.jit
def _tap(p, q, r, s, m_ok, H, Wd, SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
         DH: tl.constexpr, DW: tl.constexpr, UH: tl.constexpr, UW: tl.constexpr):
    """(ih, iw, ok): the input row and column output position (p, q) reads at tap (r, s), and whether
    it exists. UH, UW > 1: the input read zero-interleaved (UH - 1 zero rows after each row, UW - 1
    zero columns after each column), so only taps landing on a multiple of UH (UW) read anything."""
    ih = p * SH - PH + r * DH
    iw = q * SW - PW + s * DW
    if UH * UW > 1:
        ok = m_ok & (ih >= 0) & (iw >= 0) & (ih % UH == 0) & (iw % UW == 0)
        ih = ih // UH
        iw = iw // UW
        ok = ok & (ih < H) & (iw < Wd)
    else:
        ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < Wd)
    return ih, iw, ok


@triton.jit
def conv2d_fwd(X, W, B, Y,      # X: [N G, C, H, Wd]; W: [G, R, S, C, K]; B: [G K] (HAS_BIAS); Y: [N G, K, P, Q]
               C, H, Wd, K, P, Q, G,   # C, K: channels per group; G: groups
               SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
               DH: tl.constexpr, DW: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
               HAS_BIAS: tl.constexpr, AFFINE: tl.constexpr, UH: tl.constexpr, UW: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PREC: tl.constexpr):
    """AFFINE: strides 1 and Q == Wd, so an output position pq reads x at pq + a per-tap constant (the
    loads coalesce along the positions); otherwise the row and column are computed per position.
    UH, UW > 1: x is read as if UH - 1 (UW - 1) zero rows (columns) followed each of its rows
    (columns) - the input gradient of a strided convolution (a transposed convolution) - so only the
    taps landing on a multiple of UH (UW) read anything."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    n = tl.program_id(2).to(tl.int64)                     # image n of N G (its group: n % G)
    pq = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)          # output positions of image n
    m_ok = pq < P * Q
    p = pq // Q
    q = pq - p * Q
    ks = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)          # output channels
    k_ok = ks < K
    cs = tl.arange(0, BLOCK_K)
    hw = H * Wd
    x_img = X + n * C * hw
    grp = n % G
    w_grp = W + grp * (R * S * C * K)
    n_c = tl.cdiv(C, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for t in range(0, R * S * n_c):
        rs = t // n_c
        c0 = (t - rs * n_c) * BLOCK_K
        r = rs // S
        s = rs - r * S
        ih, iw, pos_ok = _tap(p, q, r, s, m_ok, H, Wd, SH, SW, PH, PW, DH, DW, UH, UW)
        if AFFINE:
            pos = pq + (r * DH - PH) * Wd + (s * DW - PW)
        else:
            pos = ih * Wd + iw
        c = c0 + cs
        c_ok = c < C
        a = tl.load(x_img + pos[:, None] + c[None, :] * hw, mask=pos_ok[:, None] & c_ok[None, :], other=0.0)
        b = tl.load(w_grp + (rs * C + c)[:, None] * K + ks[None, :], mask=c_ok[:, None] & k_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PREC)
    if HAS_BIAS:
        acc += tl.load(B + grp * K + ks, mask=k_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + n * K * P * Q + ks[None, :] * (P * Q) + pq[:, None], acc.to(Y.dtype.element_ty),
             mask=m_ok[:, None] & k_ok[None, :])


@triton.jit
def conv2d_wgrad(X, G, GW,     # X: [N NG, C, H, Wd]; G: [N NG, K, P, Q] (dL/dy); GW: [SPLIT, NG K, C, R*S] float32
                 N, C, H, Wd, K, P, Q, STEPS, NG,   # C, K: channels per group; NG: groups
                 SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                 DH: tl.constexpr, DW: tl.constexpr, R: tl.constexpr, S: tl.constexpr, AFFINE: tl.constexpr,
                 BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_M: tl.constexpr, PREC: tl.constexpr):
    """GW[k, c, r, s] = sum over (n, p, q) of G[n, k, p, q] * x at tap (r, s): per tap a GEMM
    [K, N P Q] x [N P Q, C]. Program (group and channel tile, tap, split): split `sp` sums STEPS
    blocks of BLOCK_M positions (each within one image) starting at block sp * STEPS into its own
    slice of GW (conv2d_wgrad_finish sums the splits: no atomics, deterministic). Group g reads
    images n NG + g."""
    n_cb = tl.cdiv(C, BLOCK_C)
    n_t = tl.cdiv(K, BLOCK_K) * n_cb
    grp = tl.program_id(0) // n_t
    pid_kc = tl.program_id(0) - grp * n_t
    rs = tl.program_id(1)
    sp = tl.program_id(2)
    kk = (pid_kc // n_cb) * BLOCK_K + tl.arange(0, BLOCK_K)
    cc = (pid_kc % n_cb) * BLOCK_C + tl.arange(0, BLOCK_C)
    k_ok = kk < K
    c_ok = cc < C
    r = rs // S
    s = rs - r * S
    hw = H * Wd
    pqn = P * Q
    n_pb = tl.cdiv(pqn, BLOCK_M)
    offs = tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_K, BLOCK_C], tl.float32)
    first = sp * STEPS
    last = tl.minimum(first + STEPS, N * n_pb)
    for t in range(first, last):
        n = (t // n_pb).to(tl.int64) * NG + grp
        pq = (t % n_pb) * BLOCK_M + offs
        m_ok = pq < pqn
        p = pq // Q
        q = pq - p * Q
        ih, iw, pos_ok = _tap(p, q, r, s, m_ok, H, Wd, SH, SW, PH, PW, DH, DW, 1, 1)
        if AFFINE:
            pos = pq + (r * DH - PH) * Wd + (s * DW - PW)
        else:
            pos = ih * Wd + iw
        g = tl.load(G + n * K * pqn + kk[:, None] * pqn + pq[None, :], mask=k_ok[:, None] & m_ok[None, :], other=0.0)
        x = tl.load(X + n * C * hw + cc[None, :] * hw + pos[:, None], mask=pos_ok[:, None] & c_ok[None, :], other=0.0)
        acc = tl.dot(g, x, acc, input_precision=PREC)
    tl.store(GW + ((sp * NG * K + grp * K + kk[:, None]) * C + cc[None, :]) * (R * S) + rs, acc,
             mask=k_ok[:, None] & c_ok[None, :])


@triton.jit
def conv2d_bias_grad(G, GB,     # G: [N, K, P*Q] (dL/dy); GB: [SPLIT, K] float32 partial sums
                     N, K, PQ, IMAGES, BLOCK: tl.constexpr):
    """GB[sp, k] = sum of G[n, k, :] over the IMAGES images of split sp (program (k, sp))."""
    k = tl.program_id(0)
    sp = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for n in range(sp * IMAGES, tl.minimum(N, sp * IMAGES + IMAGES)):
        row = G + (n * K + k).to(tl.int64) * PQ
        for i in range(0, PQ, BLOCK):
            acc += tl.load(row + i + offs, mask=i + offs < PQ, other=0.0).to(tl.float32)
    tl.store(GB + sp * K + k, tl.sum(acc, 0))


@triton.jit
def conv2d_wgrad_finish(PART, PART_B, GW, GB,   # PART: [SPLIT, n_w] float32; PART_B: [SPLIT_B, K]; GW: [n_w]; GB: [K]
                        SPLIT, SPLIT_B, n_w, K, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    """GW = sum of PART over its splits (and GB of PART_B over its), rounded once to GW's dtype."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n_w
    acc = tl.zeros([BLOCK], tl.float32)
    for sp in range(0, SPLIT):
        acc += tl.load(PART + sp * n_w + i, mask=ok, other=0.0)
    tl.store(GW + i, acc.to(GW.dtype.element_ty), mask=ok)
    if HAS_BIAS:
        if tl.program_id(0) * BLOCK < K:
            b_ok = i < K
            bacc = tl.zeros([BLOCK], tl.float32)
            for sp in range(0, SPLIT_B):
                bacc += tl.load(PART_B + sp * K + i, mask=b_ok, other=0.0)
            tl.store(GB + i, bacc.to(GB.dtype.element_ty), mask=b_ok)


@triton.jit
def conv2d_weight_layout(W, OUT,   # W: [G K, C, R*S] (conv2d's weight); OUT: [G, R*S, C, K], or [G, R*S, K, C] (INPUT_GRAD)
                         K, C, RS, G, INPUT_GRAD: tl.constexpr, BLOCK: tl.constexpr):   # K, C: per group
    """The weight as conv2d_fwd reads it: OUT[g, rs, c, k] = W[g K + k, c, rs]; for the input gradient
    (the convolution of dL/dy with the flipped weight) OUT[g, rs, k, c] = W[g K + k, c, RS - 1 - rs]."""
    j = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = j < G * K * C * RS
    grp = j // (K * C * RS)
    i = j - grp * (K * C * RS)
    if INPUT_GRAD:
        c = i % C
        k = (i // C) % K
        src_rs = RS - 1 - i // (C * K)
    else:
        k = i % K
        c = (i // K) % C
        src_rs = i // (K * C)
    tl.store(OUT + j, tl.load(W + ((grp * K + k) * C + c) * RS + src_rs, mask=ok), mask=ok)


@triton.jit
def conv2d_dw_fwd(X, W, B, Y,   # X: [N, K, H, Wd]; W: [K, R*S]; B: [K] (HAS_BIAS); Y: [N, K, P, Q]
                  K, H, Wd, P, Q, ROWS,   # ROWS: N K P, the output rows of all planes
                  SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                  DH: tl.constexpr, DW: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
                  UH: tl.constexpr, UW: tl.constexpr, FLIP: tl.constexpr, HAS_BIAS: tl.constexpr,
                  BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr):
    """Depthwise (groups = channels = filters): y[n, k] = sum over taps of x[n, k] at the tap times
    w[k, tap]; one program per tile of BLOCK_P output rows (of any planes: row m is row m % P of
    plane m // P = n K + k) x BLOCK_Q columns, the taps unrolled; float32 FMAs. Rows and columns are
    separate axes, so a tap's input row, column and bounds are per-row and per-column vectors and
    each element costs an address add, a masked load and an FMA. UH, UW and FLIP: the input gradient
    (dL/dy read zero-interleaved, the taps reversed), as conv2d_fwd.
    Memory traffic: x once from DRAM (its R S re-reads hit L1/L2), y once."""
    m = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    q = tl.program_id(1) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    m_in = m < ROWS
    z = m // P
    p = m - z * P
    k = z % K
    m_ok = m_in[:, None] & (q < Q)[None, :]
    x_row = X + (z.to(tl.int64) * H * Wd)[:, None]
    acc = tl.zeros([BLOCK_P, BLOCK_Q], tl.float32)
    for r in tl.static_range(R):
        for s in tl.static_range(S):
            ih, iw, ok = _tap(p[:, None], q[None, :], r, s, m_ok, H, Wd, SH, SW, PH, PW, DH, DW, UH, UW)
            tap = (R * S - 1 - (r * S + s)) if FLIP else (r * S + s)
            wv = tl.load(W + k * (R * S) + tap, mask=m_in, other=0.0).to(tl.float32)
            acc += tl.load(x_row + ih * Wd + iw, mask=ok, other=0.0).to(tl.float32) * wv[:, None]
    if HAS_BIAS:
        acc += tl.load(B + k, mask=m_in, other=0.0).to(tl.float32)[:, None]
    tl.store(Y + m.to(tl.int64)[:, None] * Q + q[None, :], acc.to(Y.dtype.element_ty), mask=m_ok)


@triton.jit
def conv2d_dw_wgrad(X, G, PART,   # X: [N, K, H, Wd]; G: [N, K, P, Q] (dL/dy); PART: [SPLIT, K, R*S] float32
                    N, K, H, Wd, P, Q, STEPS,
                    SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                    DH: tl.constexpr, DW: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
                    BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr):
    """Depthwise weight gradient: PART[sp, k, tap] = sum of dL/dy[n, k] times x[n, k] at the tap over
    the STEPS tiles of split sp; program (k, sp); conv2d_wgrad_finish sums the splits. A tile is
    BLOCK_P rows (of any images: row m is row m % P of image m // P) x BLOCK_Q columns; the tiles of
    channel k run rows-major over its N P rows and ceil(Q / BLOCK_Q) column blocks. One float32
    [BLOCK_P, BLOCK_Q] accumulator per tap (a tuple, unrolled), reduced once at the end.
    Memory traffic: x and dL/dy once from DRAM (x's R S re-reads hit L1/L2), R S floats a program."""
    k = tl.program_id(0)
    sp = tl.program_id(1)
    rows = tl.arange(0, BLOCK_P)
    cols = tl.arange(0, BLOCK_Q)
    n_qb = tl.cdiv(Q, BLOCK_Q)
    n_tiles = tl.cdiv(N * P, BLOCK_P) * n_qb
    accs = ()
    for t in tl.static_range(R * S):
        accs = accs + (tl.zeros([BLOCK_P, BLOCK_Q], tl.float32),)
    for i in range(sp * STEPS, tl.minimum(sp * STEPS + STEPS, n_tiles)):
        m = (i // n_qb) * BLOCK_P + rows
        q = (i % n_qb) * BLOCK_Q + cols
        m_in = m < N * P
        n = m // P
        p = m - n * P
        z = n.to(tl.int64) * K + k
        m_ok = m_in[:, None] & (q < Q)[None, :]
        g = tl.load(G + (z * P * Q + p * Q)[:, None] + q[None, :], mask=m_ok, other=0.0).to(tl.float32)
        x_row = X + (z * H * Wd)[:, None]
        new = ()
        for r in tl.static_range(R):
            for s in tl.static_range(S):
                ih, iw, ok = _tap(p[:, None], q[None, :], r, s, m_ok, H, Wd, SH, SW, PH, PW, DH, DW, 1, 1)
                xv = tl.load(x_row + ih * Wd + iw, mask=ok, other=0.0).to(tl.float32)
                new = new + (accs[r * S + s] + xv * g,)
        accs = new
    for t in tl.static_range(R * S):
        tl.store(PART + (sp * K + k) * (R * S) + t, tl.sum(tl.sum(accs[t], 1), 0))
