
struct ck_pool_geo {   // (H, W) input, (Ho, Wo) output, R x S window, stride, padding
  int h, w, ho, wo, r, s, sh, sw, ph, pw;
};
#define CK_POOL_GEO_ARGS int h, int w, int ho, int wo, int r, int s, int sh, int sw, int ph, int pw
#define CK_POOL_GEO const ck_pool_geo g = {h, w, ho, wo, r, s, sh, sw, ph, pw}

template <typename A> __device__ __forceinline__ bool ck_pool_isnan(A v) { return v != v; }

// Index (i * S + j) of the winner of window (oh, ow) of plane x: the first NaN, else the first
// largest, else the first in-bounds tap (every window holds one: padding <= half the window).
template <typename T>
__device__ __forceinline__ int ck_pool_argmax(const T* __restrict__ x, const ck_pool_geo& g, int oh, int ow) {
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  int best = -1;
  A bv = A(0);
  for (int i = 0; i < g.r; ++i) {
    const int ih = oh * g.sh - g.ph + i;
    if (ih < 0 || ih >= g.h) continue;
    for (int j = 0; j < g.s; ++j) {
      const int iw = ow * g.sw - g.pw + j;
      if (iw < 0 || iw >= g.w) continue;
      const A v = tr::load(x[ih * g.w + iw]);
      if (best < 0 || (!ck_pool_isnan(bv) && (ck_pool_isnan(v) || v > bv))) { best = i * g.s + j; bv = v; }
    }
  }
  return best;
}

// y[p, oh, ow] = max (AVG: mean) of window (oh, ow) of plane p of x.
// x: [planes, H, W], y: [planes, Ho, Wo], contiguous; planes = N * C. Block 256; grid x covers the
// Ho * Wo outputs of a plane (32-bit index arithmetic: 64-bit divisions cost more than the loads),
// grid y strides over the planes.
template <typename T, bool AVG>
__global__ void __launch_bounds__(256) ck_pool2d(const T* __restrict__ x, T* __restrict__ y, long long planes,
                                                 CK_POOL_GEO_ARGS) {
  CK_PDL_WAIT();
  CK_POOL_GEO;
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= g.ho * g.wo) return;
  const int oh = o / g.wo, ow = o - oh * g.wo;
  const int h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
  const int i0 = max(0, -h0), i1 = min(g.r, g.h - h0), j0 = max(0, -w0), j1 = min(g.s, g.w - w0);
  for (long long p = blockIdx.y; p < planes; p += gridDim.y) {
    const T* xp = x + p * g.h * g.w + (long long)h0 * g.w + w0;
    A m = AVG ? A(0) : A(-__int_as_float(0x7f800000));
    for (int i = i0; i < i1; ++i) {
      for (int j = j0; j < j1; ++j) {
        const A v = tr::load(xp[i * g.w + j]);
        if (AVG) m += v;
        else if (ck_pool_isnan(v) || v > m) m = v;   // NaN stays: nothing compares greater
      }
    }
    y[p * g.ho * g.wo + o] = tr::store(AVG ? m / A(g.r * g.s) : m);
  }
}

// gx[p, ih, iw] = sum over the windows (oh, ow) covering (ih, iw) of gy[p, oh, ow] / (R S) (AVG) or
// of gy[p, oh, ow] where (ih, iw) wins the window (max).
// x, gx: [planes, H, W], gy: [planes, Ho, Wo], contiguous. Block 256; grid x covers the H * W
// elements of a plane, grid y strides over the planes.
template <typename T, bool AVG>
__global__ void __launch_bounds__(256) ck_pool2d_backward(const T* __restrict__ x, const T* __restrict__ gy,
                                                          T* __restrict__ gx, long long planes,
                                                          CK_POOL_GEO_ARGS) {
  CK_PDL_WAIT();
  CK_POOL_GEO;
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= g.h * g.w) return;
  const int ih = e / g.w, iw = e - ih * g.w;
  // windows oh with oh*sh - ph <= ih <= oh*sh - ph + R - 1, likewise ow (a negative numerator
  // truncates towards 0, which the max with 0 makes right)
  const int oh0 = max(0, (ih + g.ph - g.r + g.sh) / g.sh), oh1 = min(g.ho - 1, (ih + g.ph) / g.sh);
  const int ow0 = max(0, (iw + g.pw - g.s + g.sw) / g.sw), ow1 = min(g.wo - 1, (iw + g.pw) / g.sw);
  for (long long p = blockIdx.y; p < planes; p += gridDim.y) {
    const T* xp = x + p * g.h * g.w;
    const T* gp = gy + p * g.ho * g.wo;
    A acc = A(0);
    for (int oh = oh0; oh <= oh1; ++oh) {
      for (int ow = ow0; ow <= ow1; ++ow) {
        if (AVG || ck_pool_argmax(xp, g, oh, ow) == (ih - oh * g.sh + g.ph) * g.s + (iw - ow * g.sw + g.pw))
          acc += tr::load(gp[oh * g.wo + ow]);
      }
    }
    gx[p * g.h * g.w + e] = tr::store(AVG ? acc / A(g.r * g.s) : acc);
  }
}

// The backward when windows do not overlap (stride >= window, the usual 2x2 / stride 2): one thread
// per window, writing the whole stride cell (oh*sh - ph + [0, sh)) x (ow*sw - pw + [0, sw)) of gx -
// the window's gradient to its winner (max) or spread over it (AVG), 0 elsewhere - so x and gy are
// read once and gx written once. The last row and column of cells reach to the plane's edge: every
// element of gx is written exactly once. Launch as ck_pool2d.
template <typename T, bool AVG>
__global__ void __launch_bounds__(256) ck_pool2d_backward_cells(const T* __restrict__ x, const T* __restrict__ gy,
                                                                T* __restrict__ gx, long long planes,
                                                                CK_POOL_GEO_ARGS) {
  CK_PDL_WAIT();
  CK_POOL_GEO;
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= g.ho * g.wo) return;
  const int oh = o / g.wo, ow = o - oh * g.wo;
  const int h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
  const int i0 = max(0, h0), i1 = oh == g.ho - 1 ? g.h : min(g.h, h0 + g.sh);
  const int j0 = max(0, w0), j1 = ow == g.wo - 1 ? g.w : min(g.w, w0 + g.sw);
  const T zero = tr::store(A(0));
  for (long long p = blockIdx.y; p < planes; p += gridDim.y) {
    const A gv = tr::load(gy[p * g.ho * g.wo + o]);
    const T share = tr::store(AVG ? gv / A(g.r * g.s) : gv);
    const int best = AVG ? -1 : ck_pool_argmax(x + p * g.h * g.w, g, oh, ow);
    T* gp = gx + p * g.h * g.w;
    for (int ih = i0; ih < i1; ++ih) {
      const int i = ih - h0;
      for (int iw = j0; iw < j1; ++iw) {
        const int j = iw - w0;
        gp[ih * g.w + iw] = (i < g.r && j < g.s && (AVG || i * g.s + j == best)) ? share : zero;
      }
    }
  }
}
