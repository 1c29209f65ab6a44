
struct ck_pool_geo {   // (H, W) input, (Ho, Wo) output, R x S window, stride, padding
  int h, w, ho, wo, r, s, sh, sw, ph, pw;
};
#define CK_POOL_GEO_ARGS int h, int w, int ho, int wo, int r, int s, int sh, int sw, int ph, int pw
#define CK_POOL_GEO const ck_pool_geo g = {h, w, ho, wo, r, s, sh, sw, ph, pw}

// P: the planes one thread of the NCHW kernels takes, their loads of a tap issued together (the
// host picks it per kernel, pooling.py PLANES).

template <typename A> __device__ __forceinline__ bool ck_pool_isnan(A v) { return v != v; }

// The window (oh, ow): its top-left tap (h0, w0) in x and its in-bounds taps [i0, i1) x [j0, j1).
struct ck_pool_win {
  int h0, w0, i0, i1, j0, j1;
  __device__ __forceinline__ ck_pool_win(const ck_pool_geo& g, int oh, int ow) {
    h0 = oh * g.sh - g.ph; w0 = ow * g.sw - g.pw;
    i0 = max(0, -h0); i1 = min(g.r, g.h - h0); j0 = max(0, -w0); j1 = min(g.s, g.w - w0);
  }
};

// The windows covering element (ih, iw): rows [oh0, oh1], columns [ow0, ow1] (oh with
// oh*sh - ph <= ih <= oh*sh - ph + R - 1, likewise ow; a negative numerator truncates towards 0,
// which the max with 0 makes right).
// a / b, b > 0, without the division's dozens of instructions where b is 1 (a stride of 1: the
// usual overlapping windows; the branch is the same for every thread of a launch)
__device__ __forceinline__ int ck_pool_div(int a, int b) { return b == 1 ? a : a / b; }

struct ck_pool_cover {
  int oh0, oh1, ow0, ow1;
  __device__ __forceinline__ ck_pool_cover(const ck_pool_geo& g, int ih, int iw) {
    oh0 = max(0, ck_pool_div(ih + g.ph - g.r + g.sh, g.sh)); oh1 = min(g.ho - 1, ck_pool_div(ih + g.ph, g.sh));
    ow0 = max(0, ck_pool_div(iw + g.pw - g.s + g.sw, g.sw)); ow1 = min(g.wo - 1, ck_pool_div(iw + g.pw, g.sw));
  }
  // tap index (i * S + j) of (ih, iw) in window (oh, ow)
  static __device__ __forceinline__ int tap(const ck_pool_geo& g, int ih, int iw, int oh, int ow) {
    return (ih - oh * g.sh + g.ph) * g.s + (iw - ow * g.sw + g.pw);
  }
};

// The stride cell of window (oh, ow), which the non-overlapping backward writes whole: rows
// [i0, i1), columns [j0, j1) of x from the window's top-left (h0, w0) (possibly negative) on; the
// last row and column of cells reach to the plane's edge.
struct ck_pool_cell {
  int h0, w0, i0, i1, j0, j1;
  __device__ __forceinline__ ck_pool_cell(const ck_pool_geo& g, int oh, int ow) {
    h0 = oh * g.sh - g.ph; w0 = ow * g.sw - g.pw;
    i0 = max(0, h0); i1 = oh == g.ho - 1 ? g.h : min(g.h, h0 + g.sh);
    j0 = max(0, w0); j1 = ow == g.wo - 1 ? g.w : min(g.w, w0 + g.sw);
  }
};

// The max rule of every kernel here: with bv the best so far (-inf before the first tap) and best
// its tap (the window's first in-bounds tap before any is taken), v takes over when bv is not NaN
// and v is NaN or larger - so the first NaN wins, else the first largest, else (a window of -inf)
// the first in-bounds tap.
template <typename A> __device__ __forceinline__ bool ck_pool_takes(A bv, A v) {
  return !ck_pool_isnan(bv) && (ck_pool_isnan(v) || v > bv);
}

// best[k] = index (i * S + j) of the winner of window (oh, ow) of plane k < np of x (planes hw
// elements apart), by ck_pool_takes.
template <typename T, int P>
__device__ __forceinline__ void ck_pool_argmax(const T* __restrict__ x, long long hw, int np, const ck_pool_geo& g,
                                               int oh, int ow, int (&best)[P]) {
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  const ck_pool_win b(g, oh, ow);
  A bv[P];
#pragma unroll
  for (int k = 0; k < P; ++k) { best[k] = b.i0 * g.s + b.j0; bv[k] = ck_ninf(A(0)); }
  for (int i = b.i0; i < b.i1; ++i) {
    for (int j = b.j0; j < b.j1; ++j) {
      const T* xt = x + (long long)(b.h0 + i) * g.w + (b.w0 + j);
#pragma unroll
      for (int k = 0; k < P; ++k) {
        if (k < np) {
          const A v = tr::load(xt[k * hw]);
          if (ck_pool_takes(bv[k], v)) { best[k] = i * g.s + j; bv[k] = v; }
        }
      }
    }
  }
}

// The thread's place in the NCHW kernels' flat grid of (plane group, element) pairs: element e of
// `per` elements a plane, planes [p0, p0 + np), np <= P. 32-bit: the host keeps groups * per < 2^31.
struct ck_pool_slot {
  int e, p0, np;
  __device__ __forceinline__ ck_pool_slot(int per, int planes, int P) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int grp = t / per;
    e = t - grp * per;
    p0 = grp * P;
    np = min(P, planes - p0);
  }
};

// y[p, oh, ow] = max (AVG: mean) of window (oh, ow) of plane p of x.
// x: [planes, H, W], y: [planes, Ho, Wo], contiguous; planes = N * C (this launch's). Block 256; the
// flat grid covers ceil(planes / P) * Ho * Wo threads, each one output of P planes.
// Traffic: planes (H W + Ho Wo) elements.
template <typename T, bool AVG, int P>
__global__ void __launch_bounds__(256) ck_pool2d(const T* __restrict__ x, T* __restrict__ y, int planes,
                                                 CK_POOL_GEO_ARGS) {
  CK_PDL_WAIT();
  CK_POOL_GEO;
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  const int per = g.ho * g.wo;
  const ck_pool_slot t(per, planes, P);
  if (t.np <= 0) return;
  const int oh = t.e / g.wo, ow = t.e - oh * g.wo;
  const ck_pool_win b(g, oh, ow);
  const long long hw = (long long)g.h * g.w;
  const T* xp = x + t.p0 * hw;
  A m[P];
#pragma unroll
  for (int k = 0; k < P; ++k) m[k] = AVG ? A(0) : ck_ninf(A(0));
  for (int i = b.i0; i < b.i1; ++i) {
    for (int j = b.j0; j < b.j1; ++j) {
      const T* xt = xp + (long long)(b.h0 + i) * g.w + (b.w0 + j);
#pragma unroll
      for (int k = 0; k < P; ++k) {
        if (k < t.np) {
          const A v = tr::load(xt[k * hw]);
          if (AVG) m[k] += v;
          else if (ck_pool_isnan(v) || v > m[k]) m[k] = v;   // NaN stays: nothing compares greater
        }
      }
    }
  }
  T* yp = y + (long long)t.p0 * per + t.e;
#pragma unroll
  for (int k = 0; k < P; ++k)
    if (k < t.np) yp[(long long)k * per] = tr::store(AVG ? m[k] / A(g.r * g.s) : m[k]);
}

// gx[p, ih, iw] = sum over the windows (oh, ow) covering (ih, iw) of gy[p, oh, ow] / (R S) (AVG) or
// of gy[p, oh, ow] where (ih, iw) wins the window (max).
// x, gx: [planes, H, W], gy: [planes, Ho, Wo], contiguous. Block 256; the flat grid covers
// ceil(planes / P) * H * W threads, each one element of P planes.
template <typename T, bool AVG, int P>
__global__ void __launch_bounds__(256) ck_pool2d_backward(const T* __restrict__ x, const T* __restrict__ gy,
                                                          T* __restrict__ gx, int planes, CK_POOL_GEO_ARGS) {
  CK_PDL_WAIT();
  CK_POOL_GEO;
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  const ck_pool_slot t(g.h * g.w, planes, P);
  if (t.np <= 0) return;
  const int ih = t.e / g.w, iw = t.e - ih * g.w;
  const ck_pool_cover cover(g, ih, iw);
  const long long hw = (long long)g.h * g.w, per = (long long)g.ho * g.wo;
  const T* xp = x + t.p0 * hw;
  const T* gp = gy + t.p0 * per;
  A acc[P];
#pragma unroll
  for (int k = 0; k < P; ++k) acc[k] = A(0);
  for (int oh = cover.oh0; oh <= cover.oh1; ++oh) {
    for (int ow = cover.ow0; ow <= cover.ow1; ++ow) {
      int best[P];
      if (!AVG) ck_pool_argmax<T, P>(xp, hw, t.np, g, oh, ow, best);
      const int tap = ck_pool_cover::tap(g, ih, iw, oh, ow);
#pragma unroll
      for (int k = 0; k < P; ++k)
        if (k < t.np && (AVG || best[k] == tap)) acc[k] += tr::load(gp[k * per + oh * g.wo + ow]);
    }
  }
  T* out = gx + t.p0 * hw + t.e;
#pragma unroll
  for (int k = 0; k < P; ++k)
    if (k < t.np) out[k * hw] = tr::store(AVG ? acc[k] / A(g.r * g.s) : acc[k]);
}

// The backward when windows do not overlap (stride >= window, the usual 2x2 / stride 2): one thread
// per window (of P planes), writing the whole stride cell (oh*sh - ph + [0, sh)) x
// (ow*sw - pw + [0, sw)) of gx - the window's gradient to its winner (max) or spread over it (AVG),
// 0 elsewhere - so x and gy are read once and gx written once. The last row and column of cells
// reach to the plane's edge: every element of gx is written exactly once. Launch as ck_pool2d.
template <typename T, bool AVG, int P>
__global__ void __launch_bounds__(256) ck_pool2d_backward_cells(const T* __restrict__ x, const T* __restrict__ gy,
                                                                T* __restrict__ gx, int planes, CK_POOL_GEO_ARGS) {
  CK_PDL_WAIT();
  CK_POOL_GEO;
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  const int per = g.ho * g.wo;
  const ck_pool_slot t(per, planes, P);
  if (t.np <= 0) return;
  const int oh = t.e / g.wo, ow = t.e - oh * g.wo;
  const ck_pool_cell cell(g, oh, ow);
  const long long hw = (long long)g.h * g.w;
  const T zero = tr::store(A(0));
  T share[P];
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const A gv = k < t.np ? tr::load(gy[(long long)(t.p0 + k) * per + t.e]) : A(0);
    share[k] = tr::store(AVG ? gv / A(g.r * g.s) : gv);
  }
  int best[P];
  if (!AVG) ck_pool_argmax<T, P>(x + t.p0 * hw, hw, t.np, g, oh, ow, best);
  T* gp = gx + t.p0 * hw;
  for (int ih = cell.i0; ih < cell.i1; ++ih) {
    const int i = ih - cell.h0;
    for (int iw = cell.j0; iw < cell.j1; ++iw) {
      const int j = iw - cell.w0;
      const bool in = i < g.r && j < g.s;
#pragma unroll
      for (int k = 0; k < P; ++k)
        if (k < t.np) gp[k * hw + ih * g.w + iw] = (in && (AVG || i * g.s + j == best[k])) ? share[k] : zero;
    }
  }
}

// The max backward of overlapping windows in two passes (R S <= 256): ck_pool2d_argmax writes each
// window's winner as a byte, then each input element of ck_pool2d_backward_idx sums the gradients
// of the windows (at most ceil(R / sh) x ceil(S / sw)) whose byte names it. One pass recomputing
// every covering window's winner from x read R S elements a window, (R S) x (windows covering an
// element) per element: 36 for ResNet's 3x3 / stride 2, 81 at stride 1 (0.2-0.4x torch, whose
// backward reads the int64 indices its forward saved).
// idx: [planes, Ho, Wo] bytes. Launch as ck_pool2d.
template <typename T, int P>
__global__ void __launch_bounds__(256) ck_pool2d_argmax(const T* __restrict__ x, unsigned char* __restrict__ idx,
                                                        int planes, CK_POOL_GEO_ARGS) {
  CK_PDL_WAIT();
  CK_POOL_GEO;
  const int per = g.ho * g.wo;
  const ck_pool_slot t(per, planes, P);
  if (t.np <= 0) return;
  const int oh = t.e / g.wo, ow = t.e - oh * g.wo;
  const long long hw = (long long)g.h * g.w;
  int best[P];
  ck_pool_argmax<T, P>(x + t.p0 * hw, hw, t.np, g, oh, ow, best);
  unsigned char* ip = idx + (long long)t.p0 * per + t.e;
#pragma unroll
  for (int k = 0; k < P; ++k)
    if (k < t.np) ip[(long long)k * per] = (unsigned char)best[k];
}

// gx[p, ih, iw] = sum of gy[p, oh, ow] over the windows covering (ih, iw) whose winner (idx) it is.
// idx, gy: [planes, Ho, Wo], gx: [planes, H, W]. Launch as ck_pool2d_backward.
template <typename T, int P>
__global__ void __launch_bounds__(256) ck_pool2d_backward_idx(const unsigned char* __restrict__ idx,
                                                              const T* __restrict__ gy, T* __restrict__ gx,
                                                              int planes, CK_POOL_GEO_ARGS) {
  CK_PDL_WAIT();
  CK_POOL_GEO;
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  const ck_pool_slot t(g.h * g.w, planes, P);
  if (t.np <= 0) return;
  const int ih = t.e / g.w, iw = t.e - ih * g.w;
  const ck_pool_cover cover(g, ih, iw);
  const long long hw = (long long)g.h * g.w, per = (long long)g.ho * g.wo;
  const unsigned char* ip = idx + t.p0 * per;
  const T* gp = gy + t.p0 * per;
  A acc[P];
#pragma unroll
  for (int k = 0; k < P; ++k) acc[k] = A(0);
  // 2 x 2 windows at a time, their bytes and gradients loaded before any is used (one window at a
  // time, each gradient's load waited on its byte's: a chain of dependent loads a thread)
  for (int oh = cover.oh0; oh <= cover.oh1; oh += 2) {
    for (int ow = cover.ow0; ow <= cover.ow1; ow += 2) {
      bool ok[4];
      int tap[4];
      unsigned char wi[4][P];
      A gv[4][P];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int wh = oh + (q >> 1), ww = ow + (q & 1);
        ok[q] = wh <= cover.oh1 && ww <= cover.ow1;
        tap[q] = ck_pool_cover::tap(g, ih, iw, wh, ww);
        const int o = wh * g.wo + ww;
#pragma unroll
        for (int k = 0; k < P; ++k) {
          const bool v = ok[q] && k < t.np;
          wi[q][k] = v ? ip[k * per + o] : (unsigned char)0;
          gv[q][k] = v ? tr::load(gp[k * per + o]) : A(0);
        }
      }
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int k = 0; k < P; ++k)
          if (ok[q] && wi[q][k] == tap[q]) acc[k] += gv[q][k];
    }
  }
  T* out = gx + t.p0 * hw + t.e;
#pragma unroll
  for (int k = 0; k < P; ++k)
    if (k < t.np) out[k * hw] = tr::store(acc[k]);
}

// P values of P planes at one place of a tile, adjacent in shared memory (one load for all).
template <typename A, int P> struct __align__(16) ck_pool_lanes { A v[P]; };

// A thread's walk over the (row, col) items of a rows x cols grid, items threadIdx.x + k blockDim.x,
// without a division a step (cols > 0).
struct ck_pool_walk {
  int r, c, dr, dc, cols;
  __device__ __forceinline__ ck_pool_walk(int cols_) : cols(cols_) {
    dr = blockDim.x / cols; dc = blockDim.x - dr * cols;
    r = threadIdx.x / cols; c = threadIdx.x - r * cols;
  }
  __device__ __forceinline__ void next() {
    r += dr; c += dc;
    if (c >= cols) { c -= cols; ++r; }
  }
};

// The NCHW max backward of overlapping windows in one launch: a block takes a tile of th x tw input
// elements of P planes, stages the x its covering windows read and their gy in shared memory (the P
// planes' values of a place adjacent), finds each window's winner by rows (the first winner of each
// row of the window, then the first row whose winner takes over: ck_pool_takes' order, R + S
// compares a window against R S), then each input element of the tile sums the staged gy over the
// windows it wins, in row-major window order. One load serves the P planes' values (and one 32-bit
// word their winners' bytes), so index arithmetic and loads are shared by P planes, as the
// channels-last kernels share them by channels. The two-pass form was instruction-bound on the
// argmax's R S global loads a window and the gather's R S byte loads (fp32 5 x 5 / 1: 0.70x torch,
// H200); a first tiled form of one plane a block ran 0.61-0.69x.
// x, gx: [planes, H, W], gy: [planes, Ho, Wo], contiguous. Block 256, one block a (plane group of P,
// tile), group-major: blocks = ceil(planes / P) * tiles (< 2^31, the host checks). Dynamic shared
// memory (the host's tile_plan), L = ck_pool_lanes<A, P>: xs L[xr_max][xc_max], rv L[xr_max][ww_max],
// gs L[wh_max][ww_max], then 32-bit words of P <= 4 bytes: rj [xr_max][ww_max], code [wh_max][ww_max].
// Traffic: planes (2 H W + Ho Wo) elements, plus the tiles' halo reads of x and gy (from L2).
template <typename T, int P>
__global__ void __launch_bounds__(256) ck_pool2d_backward_tile(const T* __restrict__ x, const T* __restrict__ gy,
                                                               T* __restrict__ gx, int planes, int th, int tw,
                                                               int tiles_w, int tiles, int xr_max, int xc_max,
                                                               int wh_max, int ww_max, CK_POOL_GEO_ARGS) {
  CK_PDL_WAIT();
  static_assert(P <= 4, "a window's winners are P bytes of one 32-bit word");
  CK_POOL_GEO;
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  typedef ck_pool_lanes<A, P> L;
  extern __shared__ __align__(16) unsigned char ck_pool_smem[];
  L* xs = reinterpret_cast<L*>(ck_pool_smem);                          // [xr_max][xc_max] x
  L* rv = xs + xr_max * xc_max;                                        // [xr_max][ww_max] a row's best value
  L* gs = rv + xr_max * ww_max;                                        // [wh_max][ww_max] gy
  unsigned* rj = reinterpret_cast<unsigned*>(gs + wh_max * ww_max);    // ... the row best's columns j
  unsigned* code = rj + xr_max * ww_max;                               // [wh_max][ww_max] winners i S + j
  const int grp = blockIdx.x / tiles, tile = blockIdx.x - grp * tiles;
  const int p0 = grp * P, np = min(P, planes - p0);
  const int ty = tile / tiles_w;
  const int h0 = ty * th, w0 = (tile - ty * tiles_w) * tw;
  const int h1 = min(g.h, h0 + th), w1 = min(g.w, w0 + tw);
  // the windows covering the tile (those covering its first and last corners) and the x they read
  const ck_pool_cover lo(g, h0, w0), hi(g, h1 - 1, w1 - 1);
  const int oh0 = lo.oh0, oh1 = hi.oh1, ow0 = lo.ow0, ow1 = hi.ow1;
  const int nwh = oh1 - oh0 + 1, nww = ow1 - ow0 + 1;
  const int xr0 = max(0, oh0 * g.sh - g.ph), xr1 = min(g.h, oh1 * g.sh - g.ph + g.r);
  const int xc0 = max(0, ow0 * g.sw - g.pw), xc1 = min(g.w, ow1 * g.sw - g.pw + g.s);
  const int nxr = xr1 - xr0, nxc = xc1 - xc0;
  const long long hw = (long long)g.h * g.w, per = (long long)g.ho * g.wo;
  if (nwh > 0 && nww > 0) {
    // x and gy into shared memory, a thread's loads of both issued before its stores
    const T* xp = x + p0 * hw + (long long)xr0 * g.w + xc0;
    const T* gp = gy + p0 * per + (long long)oh0 * g.wo + ow0;
    for (ck_pool_walk a(nxc), b(nww); a.r < nxr || b.r < nwh; a.next(), b.next()) {
      L xv, gv;
      const bool xa = a.r < nxr, gb = b.r < nwh;
#pragma unroll
      for (int k = 0; k < P; ++k) {
        xv.v[k] = xa && k < np ? tr::load(xp[k * hw + (long long)a.r * g.w + a.c]) : A(0);
        gv.v[k] = gb && k < np ? tr::load(gp[k * per + (long long)b.r * g.wo + b.c]) : A(0);
      }
      if (xa) xs[a.r * xc_max + a.c] = xv;
      if (gb) gs[b.r * ww_max + b.c] = gv;
    }
    __syncthreads();
    // each x row's winner in each window column: the first NaN, else the first largest, else the
    // first in-bounds tap
    for (ck_pool_walk a(nww); a.r < nxr; a.next()) {
      const ck_pool_win cw(g, 0, ow0 + a.c);   // (its columns: first tap w0, in-bounds taps [j0, j1))
      const int j0 = cw.j0, j1 = cw.j1;
      const L* row = xs + a.r * xc_max + (cw.w0 - xc0);
      L bv;
      unsigned bj[P];
#pragma unroll
      for (int k = 0; k < P; ++k) { bv.v[k] = ck_ninf(A(0)); bj[k] = j0; }
      for (int j = j0; j < j1; ++j) {
        const L v = row[j];
#pragma unroll
        for (int k = 0; k < P; ++k)
          if (ck_pool_takes(bv.v[k], v.v[k])) { bv.v[k] = v.v[k]; bj[k] = j; }
      }
      unsigned packed = 0;
#pragma unroll
      for (int k = 0; k < P; ++k) packed |= bj[k] << (8 * k);
      rv[a.r * ww_max + a.c] = bv;
      rj[a.r * ww_max + a.c] = packed;
    }
    __syncthreads();
    // each window's winner: the first of its in-bounds rows whose winner takes over
    for (ck_pool_walk a(nww); a.r < nwh; a.next()) {
      const ck_pool_win b(g, oh0 + a.r, ow0 + a.c);
      A bv[P];
      unsigned best[P];
#pragma unroll
      for (int k = 0; k < P; ++k) { bv[k] = ck_ninf(A(0)); best[k] = b.i0 * g.s + b.j0; }
      for (int i = b.i0; i < b.i1; ++i) {
        const int q = (b.h0 + i - xr0) * ww_max + a.c;
        const L v = rv[q];
        const unsigned js = rj[q];
#pragma unroll
        for (int k = 0; k < P; ++k)
          if (ck_pool_takes(bv[k], v.v[k])) { bv[k] = v.v[k]; best[k] = i * g.s + ((js >> (8 * k)) & 255u); }
      }
      unsigned packed = 0;
#pragma unroll
      for (int k = 0; k < P; ++k) packed |= best[k] << (8 * k);
      code[a.r * ww_max + a.c] = packed;
    }
    __syncthreads();
  }
  T* out = gx + p0 * hw;
  for (ck_pool_walk a(w1 - w0); a.r < h1 - h0; a.next()) {
    const int ih = h0 + a.r, iw = w0 + a.c;
    const ck_pool_cover cover(g, ih, iw);
    A acc[P];
#pragma unroll
    for (int k = 0; k < P; ++k) acc[k] = A(0);
    for (int oh = cover.oh0; oh <= cover.oh1; ++oh) {
      const int q = (oh - oh0) * ww_max - ow0;
      for (int ow = cover.ow0; ow <= cover.ow1; ++ow) {
        // bytes of the P winners equal to this element's tap: zero bytes of m
        const unsigned m = code[q + ow] ^ ((unsigned)ck_pool_cover::tap(g, ih, iw, oh, ow) * 0x01010101u);
        if ((m - 0x01010101u) & ~m & 0x80808080u) {   // some byte of m is zero
          const L gv = gs[q + ow];
#pragma unroll
          for (int k = 0; k < P; ++k)
            if (((m >> (8 * k)) & 255u) == 0) acc[k] += gv.v[k];
        }
      }
    }
#pragma unroll
    for (int k = 0; k < P; ++k)
      if (k < np) out[k * hw + (long long)ih * g.w + iw] = tr::store(acc[k]);
  }
}

// ---- channels-last (NHWC memory) ------------------------------------------------------------
// x: [N, H, W, C], y / gy: [N, Ho, Wo, C], gx: [N, H, W, C], C-contiguous. A thread takes V adjacent
// channels [c, c + V) of one position: one load of V * sizeof(T) <= 16 bytes a tap, adjacent threads
// adjacent channels (the host picks V with C % V == 0 and every pointer aligned to V elements).
// Flat grid of total = positions * C / V threads, 32-bit: the host keeps total < 2^31.

template <typename T, int V> struct ck_pool_vec {
  typedef typename ck_raw<sizeof(T) * V>::type raw;
  static __device__ __forceinline__ ck_pack<T, V> load(const T* p) {
    ck_pack<T, V> k;
    k.raw = *reinterpret_cast<const raw*>(p);
    return k;
  }
  static __device__ __forceinline__ void store(T* p, const ck_pack<T, V>& k) { *reinterpret_cast<raw*>(p) = k.raw; }
};

// acc (divided by R S for AVG) rounded to T and stored as one pack at p.
template <typename T, int V, bool AVG, typename A>
__device__ __forceinline__ void ck_pool_store_cl(T* p, A (&acc)[V], const ck_pool_geo& g) {
  if (AVG) {
#pragma unroll
    for (int l = 0; l < V; ++l) acc[l] /= A(g.r * g.s);
  }
  ck_pack<T, V> out;
  ck_store_pack<T, V, A>(out, acc);
  ck_pool_vec<T, V>::store(p, out);
}

// The thread's place in the channels-last flat grid: flat position q of an (N, rows, cols) grid,
// (n, row, col), its first channel c of C = cv * V; ok false past the end of total threads.
struct ck_pool_cl_at {
  int q, c, C, n, row, col;
  bool ok;
  __device__ __forceinline__ ck_pool_cl_at(int total, int cv, int V, int rows, int cols) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    ok = t < total;
    q = t / cv;
    c = (t - q * cv) * V;
    C = cv * V;
    const int rq = q / cols;
    col = q - rq * cols;
    n = rq / rows;
    row = rq - n * rows;
  }
};

// best[l] = index (i * S + j) of the winner of window (oh, ow) for channel l of the V at xn (image
// n's origin plus c), by ck_pool_takes.
template <typename T, int V>
__device__ __forceinline__ void ck_pool_argmax_cl(const T* __restrict__ xn, int C, const ck_pool_geo& g, int oh,
                                                  int ow, int (&best)[V]) {
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  const ck_pool_win b(g, oh, ow);
  A bv[V];
#pragma unroll
  for (int l = 0; l < V; ++l) { best[l] = b.i0 * g.s + b.j0; bv[l] = ck_ninf(A(0)); }
  for (int i = b.i0; i < b.i1; ++i) {
    for (int j = b.j0; j < b.j1; ++j) {
      const ck_pack<T, V> p = ck_pool_vec<T, V>::load(xn + ((long long)(b.h0 + i) * g.w + (b.w0 + j)) * C);
#pragma unroll
      for (int l = 0; l < V; ++l) {
        const A v = tr::load(p.v[l]);
        if (ck_pool_takes(bv[l], v)) { best[l] = i * g.s + j; bv[l] = v; }
      }
    }
  }
}

// y[n, oh, ow, c] = max (AVG: mean) of window (oh, ow) of channel c of image n; positions N Ho Wo.
// Traffic: N (H W + Ho Wo) C elements.
template <typename T, bool AVG, int V>
__global__ void __launch_bounds__(256) ck_pool2d_cl(const T* __restrict__ x, T* __restrict__ y, int total, int cv,
                                                    CK_POOL_GEO_ARGS) {
  CK_PDL_WAIT();
  CK_POOL_GEO;
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  const ck_pool_cl_at at(total, cv, V, g.ho, g.wo);
  if (!at.ok) return;
  const int q = at.q, c = at.c, C = at.C;
  const int n = at.n, oh = at.row, ow = at.col;
  const ck_pool_win b(g, oh, ow);
  const T* xn = x + (long long)n * g.h * g.w * C + c;
  A m[V];
#pragma unroll
  for (int l = 0; l < V; ++l) m[l] = AVG ? A(0) : ck_ninf(A(0));
  for (int i = b.i0; i < b.i1; ++i) {
    for (int j = b.j0; j < b.j1; ++j) {
      const ck_pack<T, V> p = ck_pool_vec<T, V>::load(xn + ((long long)(b.h0 + i) * g.w + (b.w0 + j)) * C);
#pragma unroll
      for (int l = 0; l < V; ++l) {
        const A v = tr::load(p.v[l]);
        if (AVG) m[l] += v;
        else if (ck_pool_isnan(v) || v > m[l]) m[l] = v;
      }
    }
  }
  ck_pool_store_cl<T, V, AVG, A>(y + (long long)q * C + c, m, g);
}

// gx[n, ih, iw, c]: ck_pool2d_backward's sum for channels-last memory; positions N H W.
template <typename T, bool AVG, int V>
__global__ void __launch_bounds__(256) ck_pool2d_cl_backward(const T* __restrict__ x, const T* __restrict__ gy,
                                                             T* __restrict__ gx, int total, int cv, CK_POOL_GEO_ARGS) {
  CK_PDL_WAIT();
  CK_POOL_GEO;
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  const ck_pool_cl_at at(total, cv, V, g.h, g.w);
  if (!at.ok) return;
  const int q = at.q, c = at.c, C = at.C;
  const int n = at.n, ih = at.row, iw = at.col;
  const ck_pool_cover cover(g, ih, iw);
  const T* xn = x + (long long)n * g.h * g.w * C + c;
  const T* gn = gy + (long long)n * g.ho * g.wo * C + c;
  A acc[V];
#pragma unroll
  for (int l = 0; l < V; ++l) acc[l] = A(0);
  for (int oh = cover.oh0; oh <= cover.oh1; ++oh) {
    for (int ow = cover.ow0; ow <= cover.ow1; ++ow) {
      int best[V];
      if (!AVG) ck_pool_argmax_cl<T, V>(xn, C, g, oh, ow, best);
      const int tap = ck_pool_cover::tap(g, ih, iw, oh, ow);
      const ck_pack<T, V> p = ck_pool_vec<T, V>::load(gn + ((long long)oh * g.wo + ow) * C);
#pragma unroll
      for (int l = 0; l < V; ++l)
        if (AVG || best[l] == tap) acc[l] += tr::load(p.v[l]);
    }
  }
  ck_pool_store_cl<T, V, AVG, A>(gx + (long long)q * C + c, acc, g);
}

// ck_pool2d_backward_cells for channels-last memory: one thread per window (V channels), positions
// N Ho Wo; launch as ck_pool2d_cl.
template <typename T, bool AVG, int V>
__global__ void __launch_bounds__(256) ck_pool2d_cl_backward_cells(const T* __restrict__ x, const T* __restrict__ gy,
                                                                   T* __restrict__ gx, int total, int cv,
                                                                   CK_POOL_GEO_ARGS) {
  CK_PDL_WAIT();
  CK_POOL_GEO;
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  const ck_pool_cl_at at(total, cv, V, g.ho, g.wo);
  if (!at.ok) return;
  const int q = at.q, c = at.c, C = at.C;
  const int n = at.n, oh = at.row, ow = at.col;
  const ck_pool_cell cell(g, oh, ow);
  const T* xn = x + (long long)n * g.h * g.w * C + c;
  T* gn = gx + (long long)n * g.h * g.w * C + c;
  const ck_pack<T, V> gv = ck_pool_vec<T, V>::load(gy + (long long)q * C + c);
  ck_pack<T, V> share, zero;
#pragma unroll
  for (int l = 0; l < V; ++l) {
    share.v[l] = AVG ? tr::store(tr::load(gv.v[l]) / A(g.r * g.s)) : gv.v[l];
    zero.v[l] = tr::store(A(0));
  }
  int best[V];
  if (!AVG) ck_pool_argmax_cl<T, V>(xn, C, g, oh, ow, best);
  for (int ih = cell.i0; ih < cell.i1; ++ih) {
    const int i = ih - cell.h0;
    for (int iw = cell.j0; iw < cell.j1; ++iw) {
      const int j = iw - cell.w0;
      const bool in = i < g.r && j < g.s;
      ck_pack<T, V> out;
#pragma unroll
      for (int l = 0; l < V; ++l) out.v[l] = (in && (AVG || i * g.s + j == best[l])) ? share.v[l] : zero.v[l];
      ck_pool_vec<T, V>::store(gn + ((long long)ih * g.w + iw) * C, out);
    }
  }
}

// The two passes of the overlapping max backward (see ck_pool2d_argmax) for channels-last memory:
// idx [N, Ho, Wo, C] bytes; ck_pool2d_cl_argmax launches as ck_pool2d_cl, ck_pool2d_cl_backward_idx
// as ck_pool2d_cl_backward.
template <typename T, int V>
__global__ void __launch_bounds__(256) ck_pool2d_cl_argmax(const T* __restrict__ x, unsigned char* __restrict__ idx,
                                                           int total, int cv, CK_POOL_GEO_ARGS) {
  CK_PDL_WAIT();
  CK_POOL_GEO;
  const ck_pool_cl_at at(total, cv, V, g.ho, g.wo);
  if (!at.ok) return;
  const int q = at.q, c = at.c, C = at.C;
  const int n = at.n, oh = at.row, ow = at.col;
  int best[V];
  ck_pool_argmax_cl<T, V>(x + (long long)n * g.h * g.w * C + c, C, g, oh, ow, best);
  unsigned char* ip = idx + (long long)q * C + c;
#pragma unroll
  for (int l = 0; l < V; ++l) ip[l] = (unsigned char)best[l];
}

template <typename T, int V>
__global__ void __launch_bounds__(256) ck_pool2d_cl_backward_idx(const unsigned char* __restrict__ idx,
                                                                 const T* __restrict__ gy, T* __restrict__ gx,
                                                                 int total, int cv, CK_POOL_GEO_ARGS) {
  CK_PDL_WAIT();
  CK_POOL_GEO;
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  const ck_pool_cl_at at(total, cv, V, g.h, g.w);
  if (!at.ok) return;
  const int q = at.q, c = at.c, C = at.C;
  const int n = at.n, ih = at.row, iw = at.col;
  const ck_pool_cover cover(g, ih, iw);
  const long long base = (long long)n * g.ho * g.wo * C + c;
  A acc[V];
#pragma unroll
  for (int l = 0; l < V; ++l) acc[l] = A(0);
  // 2 x 2 windows at a time, their loads before any use (as ck_pool2d_backward_idx)
  for (int oh = cover.oh0; oh <= cover.oh1; oh += 2) {
    for (int ow = cover.ow0; ow <= cover.ow1; ow += 2) {
      bool ok[4];
      int tap[4];
      ck_pack<unsigned char, V> wi[4];   // V winner bytes (ck_pool2d_cl_argmax's) a load
      ck_pack<T, V> gv[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int wh = oh + (q >> 1), ww = ow + (q & 1);
        ok[q] = wh <= cover.oh1 && ww <= cover.ow1;
        tap[q] = ck_pool_cover::tap(g, ih, iw, wh, ww);
        const long long o = base + ((long long)wh * g.wo + ww) * C;
        if (ok[q]) {
          wi[q] = ck_pool_vec<unsigned char, V>::load(idx + o);
          gv[q] = ck_pool_vec<T, V>::load(gy + o);
        }
      }
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int l = 0; l < V; ++l)
          if (ok[q] && wi[q].v[l] == tap[q]) acc[l] += tr::load(gv[q].v[l]);
    }
  }
  ck_pool_store_cl<T, V, false, A>(gx + (long long)q * C + c, acc, g);
}
