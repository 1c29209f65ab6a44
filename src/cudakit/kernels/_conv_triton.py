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

from ._triton_pdl import _pdl_start


@triton.jit
def _axis(i, n, U: tl.constexpr):
    """(index, exists) of position i on an axis of n elements read zero-interleaved by U (U - 1
    zeros after each element: only multiples of U read anything; U = 1: plain bounds); the direct
    kernels' rule per row and per column (_tap applies it to both at once, its masks and-ed in the
    order its compiled kernels were measured with)."""
    if U > 1:
        ok = (i >= 0) & (i % U == 0)
        i = i // U
        ok = ok & (i < n)
    else:
        ok = (i >= 0) & (i < n)
    return i, ok


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
def conv2d_fwd(X, W, B, Y,      # X: [N G, C, H, Wd]; W: [G, R, S, C, K] ([G K, C, R, S] with W_KCRS);
               C, H, Wd, K, P, Q, G,   # B: [G K] (HAS_BIAS); Y: [N G, K, P, Q]; C, K: channels per group; G: groups
               SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
               DH: tl.constexpr, DW: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
               HAS_BIAS: tl.constexpr, AFFINE: tl.constexpr, UH: tl.constexpr, UW: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PREC: tl.constexpr,
               W_KCRS: tl.constexpr = False, RELU: tl.constexpr = False,
               PDL: tl.constexpr = None):
    """RELU: y = max(conv + bias, 0), in the store's pass (conv2d's activation="relu"). AFFINE: strides 1 and Q == Wd, so an output position pq reads x at pq + a per-tap constant (the
    loads coalesce along the positions); otherwise the row and column are computed per position.
    UH, UW > 1: x is read as if UH - 1 (UW - 1) zero rows (columns) followed each of its rows
    (columns) - the input gradient of a strided convolution (a transposed convolution) - so only the
    taps landing on a multiple of UH (UW) read anything. W_KCRS: the weight read as the caller holds
    it, (G K, C, R, S), with gathered loads: for small weights (kernels/conv.py W_IN_PLACE), where a
    launch reordering it would cost more than the gather."""
    _pdl_start(PDL)
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
        if W_KCRS:
            b = tl.load(w_grp + ks[None, :] * (C * R * S) + c[:, None] * (R * S) + rs,
                        mask=c_ok[:, None] & k_ok[None, :], other=0.0)
        else:
            b = tl.load(w_grp + (rs * C + c)[:, None] * K + ks[None, :], mask=c_ok[:, None] & k_ok[None, :],
                        other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PREC)
    if HAS_BIAS:
        acc += tl.load(B + grp * K + ks, mask=k_ok, other=0.0).to(tl.float32)[None, :]
    if RELU:   # (NaN kept, as cudakit's relu keeps it: maximum's default would return the 0)
        acc = tl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL)
    tl.store(Y + n * K * P * Q + ks[None, :] * (P * Q) + pq[:, None], acc.to(Y.dtype.element_ty),
             mask=m_ok[:, None] & k_ok[None, :])


@triton.jit
def conv2d_wgrad(X, G, GW,     # X: [N NG, C, H, Wd]; G: [N NG, K, P, Q] (dL/dy); GW: [SPLIT, NG K, C, R*S] float32
                 N, C, H, Wd, K, P, Q, STEPS, NG,   # C, K: channels per group; NG: groups
                 SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                 DH: tl.constexpr, DW: tl.constexpr, R: tl.constexpr, S: tl.constexpr, AFFINE: tl.constexpr,
                 BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_M: tl.constexpr, PREC: tl.constexpr,
                 PDL: tl.constexpr = None):
    """GW[k, c, r, s] = sum over (n, p, q) of G[n, k, p, q] * x at tap (r, s): per tap a GEMM
    [K, N P Q] x [N P Q, C]. Program (group and channel tile, tap, split): split `sp` sums STEPS
    blocks of BLOCK_M positions (each within one image) starting at block sp * STEPS into its own
    slice of GW (conv2d_wgrad_finish sums the splits: no atomics, deterministic). Group g reads
    images n NG + g."""
    _pdl_start(PDL)
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
                     N, K, PQ, IMAGES, BLOCK: tl.constexpr,
                     PDL: tl.constexpr = None):
    """GB[sp, k] = sum of G[n, k, :] over the IMAGES images of split sp (program (k, sp))."""
    _pdl_start(PDL)
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
                        SPLIT, SPLIT_B, n_w, K, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr,
                        PDL: tl.constexpr = None):
    """GW = sum of PART over its splits (and GB of PART_B over its), rounded once to GW's dtype."""
    _pdl_start(PDL)
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
                         K, C, RS, G, INPUT_GRAD: tl.constexpr, BLOCK: tl.constexpr,   # K, C: per group
                         PDL: tl.constexpr = None):
    """The weight as conv2d_fwd reads it: OUT[g, rs, c, k] = W[g K + k, c, rs]; for the input gradient
    (the convolution of dL/dy with the flipped weight) OUT[g, rs, k, c] = W[g K + k, c, RS - 1 - rs]."""
    _pdl_start(PDL)
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
def _dw_cols(q, Q, Wd, SW: tl.constexpr, PW: tl.constexpr, DW: tl.constexpr, S: tl.constexpr, UW: tl.constexpr):
    """(columns, in-bounds masks): for each of the S column taps, the [1, BLOCK_Q] input columns
    output columns q read (UW > 1: x zero-interleaved, so only multiples of UW read anything)."""
    cols = ()
    oks = ()
    for s in tl.static_range(S):
        iw, ok = _axis(q * SW - PW + s * DW, Wd, UW)
        cols = cols + (iw[None, :],)
        oks = oks + ((ok & (q < Q))[None, :],)
    return cols, oks


@triton.jit
def _dw_rows(x_pl, z_ok, top, H, Wd, cols, oks, NROWS: tl.constexpr, S: tl.constexpr, UH: tl.constexpr):
    """The NROWS input rows from row `top` on (UH > 1: in zero-interleaved coordinates), each as S
    float32 [BLOCK_Z, BLOCK_Q] tiles (one per column tap), rows outside x read as zeros: every input
    row a tile of output rows needs is loaded once, not once per (output row, row tap). top: the
    same row for each of the BLOCK_Z planes (a vector: Triton's interpreter mistypes a scalar
    condition and-ed into a mask)."""
    rows = ()
    for i in tl.static_range(NROWS):
        ih, ok = _axis(top + i, H, UH)
        row = ()
        for s in tl.static_range(S):
            m = oks[s] & (z_ok & ok)[:, None]
            row = row + (tl.load(x_pl + (ih * Wd)[:, None] + cols[s], mask=m, other=0.0).to(tl.float32),)
        rows = rows + (row,)
    return rows


@triton.jit
def conv2d_direct_fwd(X, W, B, Y,   # X: [NG CI, H, Wd]; W: [G CO, CI, R*S] ([G CI, CO, R*S] if FLIP); B: [G CO]; Y: [NG CO, P, Q]
                      NG, G, H, Wd, P, Q,   # NG: N G (image, group) pairs
                      CI: tl.constexpr, CO: tl.constexpr,   # input and output channels a group
                      SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                      DH: tl.constexpr, DW: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
                      UH: tl.constexpr, UW: tl.constexpr, FLIP: tl.constexpr, HAS_BIAS: tl.constexpr,
                      BLOCK_Z: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr,
                      RELU: tl.constexpr = False, PDL: tl.constexpr = None):
    """Grouped convolution with few channels a group (depthwise: CI = CO = 1) by direct float32
    FMAs: y[n, g CO + co] = sum over ci and taps of x[n, g CI + ci] at the tap times
    w[g CO + co, ci, tap]. Program (BLOCK_Z (image, group) pairs z = n G + g, BLOCK_P output rows,
    BLOCK_Q columns): for each input channel the (BLOCK_P - 1) SH + (R - 1) DH + 1 input rows the
    tile needs are loaded once each, as S column-shifted [BLOCK_Z, BLOCK_Q] tiles, and feed the
    BLOCK_P CO accumulators (unrolled), so an output costs about CI ((BLOCK_P - 1) SH + R) S /
    (BLOCK_P CO) loads (3.75 for a 3x3 depthwise, BLOCK_P 8); each weight is loaded once a program.
    UH, UW and FLIP: the input gradient (dL/dy read zero-interleaved, the taps reversed and the
    weight's channel axes swapped), as conv2d_fwd.
    Memory traffic: x once from DRAM (re-reads of its rows by neighbouring programs from L2), y once."""
    _pdl_start(PDL)
    z = tl.program_id(0) * BLOCK_Z + tl.arange(0, BLOCK_Z)
    p0 = tl.program_id(1) * BLOCK_P
    q = tl.program_id(2) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    z_ok = z < NG
    g = z % G
    cols, oks = _dw_cols(q, Q, Wd, SW, PW, DW, S, UW)
    accs = ()
    for t in tl.static_range(BLOCK_P * CO):
        accs = accs + (tl.zeros([BLOCK_Z, BLOCK_Q], tl.float32),)
    for ci in range(CI):   # a loop, not unrolled: CI CO taps unrolled bodies took minutes to compile
        rows = _dw_rows(X + ((z.to(tl.int64) * CI + ci) * H * Wd)[:, None], z_ok, p0 * SH - PH + 0 * z, H, Wd,
                        cols, oks, (BLOCK_P - 1) * SH + (R - 1) * DH + 1, S, UH)
        for co in tl.static_range(CO):
            for r in tl.static_range(R):
                for s in tl.static_range(S):
                    if FLIP:
                        w_at = ((g * CI + ci) * CO + co) * (R * S) + (R * S - 1 - (r * S + s))
                    else:
                        w_at = ((g * CO + co) * CI + ci) * (R * S) + r * S + s
                    wv = tl.load(W + w_at, mask=z_ok, other=0.0).to(tl.float32)[:, None]
                    new = ()
                    for j in tl.static_range(BLOCK_P):
                        for c2 in tl.static_range(CO):
                            if c2 == co:
                                new = new + (accs[j * CO + c2] + rows[j * SH + r * DH][s] * wv,)
                            else:
                                new = new + (accs[j * CO + c2],)
                    accs = new
    out_ok = z_ok[:, None] & (q < Q)[None, :]
    p_left = P - p0 + 0 * z   # output rows from p0 to the plane's end (a vector, as _dw_rows' top)
    for co in tl.static_range(CO):
        y_pl = Y + ((z.to(tl.int64) * CO + co) * P * Q)[:, None] + q[None, :]
        if HAS_BIAS:
            bias = tl.load(B + g * CO + co, mask=z_ok, other=0.0).to(tl.float32)[:, None]
        for j in tl.static_range(BLOCK_P):
            acc = accs[j * CO + co]
            if HAS_BIAS:
                acc += bias
            if RELU:   # (conv2d's activation="relu": max(., 0) before the one rounding, NaN kept)
                acc = tl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL)
            tl.store(y_pl + (p0 + j) * Q, acc.to(Y.dtype.element_ty), mask=out_ok & (j < p_left)[:, None])


@triton.jit
def conv2d_direct_wgrad(X, G, PART,   # X: [N, C, H, Wd]; G: [N, K, P, Q] (dL/dy); PART: [SPLIT, K CI, R*S] float32
                        N, C, K, H, Wd, P, Q, STEPS,
                        CI: tl.constexpr, CO: tl.constexpr,   # input and output channels a group
                        KB: tl.constexpr,   # filters a program (divides CO)
                        SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                        DH: tl.constexpr, DW: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
                        BLOCK_Z: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr,
                        PDL: tl.constexpr = None):
    """Weight gradient of conv2d_direct_fwd: PART[sp, k CI + ci, tap] = sum of dL/dy[n, k] times
    x[n, (k // CO) CI + ci] at the tap over the STEPS tiles of split sp; program (input channel
    c = g CI + ci and block b of KB filters, sp) makes the rows of filters k = g CO + b KB + f, so
    each x tile is loaded once for KB filters; conv2d_wgrad_finish sums the splits. A tile is BLOCK_Z
    images x BLOCK_P output rows x BLOCK_Q columns (columns fastest, then rows, then images); its
    input rows are loaded once each, as in conv2d_direct_fwd. One float32 [BLOCK_Z, BLOCK_Q]
    accumulator per (filter, tap) (a tuple, unrolled), reduced once at the end.
    Memory traffic: x and dL/dy from DRAM once (x's planes re-read by the CO / KB filter blocks
    and dL/dy's by the CI channels of a group, from L2), KB R S floats a program."""
    _pdl_start(PDL)
    xc = tl.program_id(0) // (CO // KB)   # a channel's filter blocks run next to each other (x from L2)
    sp = tl.program_id(1)
    k0 = (xc // CI) * CO + (tl.program_id(0) % (CO // KB)) * KB
    n_qb = tl.cdiv(Q, BLOCK_Q)
    n_pb = tl.cdiv(P, BLOCK_P)
    accs = ()
    for t in tl.static_range(KB * R * S):
        accs = accs + (tl.zeros([BLOCK_Z, BLOCK_Q], tl.float32),)
    for i in range(sp * STEPS, tl.minimum(sp * STEPS + STEPS, tl.cdiv(N, BLOCK_Z) * n_pb * n_qb)):
        q = (i % n_qb) * BLOCK_Q + tl.arange(0, BLOCK_Q)
        p0 = ((i // n_qb) % n_pb) * BLOCK_P
        n = (i // (n_qb * n_pb)) * BLOCK_Z + tl.arange(0, BLOCK_Z)
        z_ok = n < N
        cols, oks = _dw_cols(q, Q, Wd, SW, PW, DW, S, 1)
        rows = _dw_rows(X + ((n.to(tl.int64) * C + xc) * H * Wd)[:, None], z_ok, p0 * SH - PH + 0 * n, H, Wd,
                        cols, oks, (BLOCK_P - 1) * SH + (R - 1) * DH + 1, S, 1)
        g_pl = G + ((n.to(tl.int64) * K + k0) * P * Q)[:, None] + q[None, :]
        g_ok = z_ok[:, None] & (q < Q)[None, :]
        p_left = P - p0 + 0 * n
        for j in tl.static_range(BLOCK_P):
            for f in tl.static_range(KB):
                g = tl.load(g_pl + (f * P + p0 + j) * Q, mask=g_ok & (j < p_left)[:, None], other=0.0).to(tl.float32)
                new = ()
                for t in tl.static_range(KB * R * S):
                    if t // (R * S) == f:
                        new = new + (accs[t] + rows[j * SH + (t % (R * S)) // S * DH][t % S] * g,)
                    else:
                        new = new + (accs[t],)
                accs = new
    for t in tl.static_range(KB * R * S):
        row = (k0 + t // (R * S)) * CI + xc % CI   # the weight's (filter, input channel) row
        tl.store(PART + (sp * (K * CI) + row) * (R * S) + t % (R * S), tl.sum(tl.sum(accs[t], 1), 0))
