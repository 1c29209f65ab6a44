"""2-D max and average pooling (NCHW) forward and backward, one thread per output (forward) or per
input element (backward), with the semantics of backends/conv_api.py: padding of -inf (max) or zeros
(average, counted in the divisor, PyTorch's count_include_pad=True); a window holding a NaN gives
NaN; the backward of max pooling sends each window's gradient to its first NaN, else its first
largest element, else (a window of -inf) its first in-bounds element.

Forward: each output reads its R x S window (neighbouring threads share rows, so the reads
coalesce and repeat in L1). Backward, no atomics (deterministic), the max winner recomputed from x:
windows that do not overlap (stride >= window) take one thread each, which writes its stride cell
of dx; otherwise each input element sums the gradients of the windows that cover it. Arithmetic in ck_traits<T>::acc (float32 for 16-bit data), rounded once.
Traffic: forward N C H W read + N C Ho Wo written; backward N C Ho Wo (+ N C H W for max) read,
N C H W written.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ._common import FLOAT_DTYPE_NAMES, PREAMBLE, KernelFamily, by_template, ctype

SOURCE = PREAMBLE + r"""
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
"""

THREADS = 256


def name_expressions() -> list[str]:
    """Every template instantiation this module launches."""
    return [f"{k}<{ctype(dt)}, {avg}>" for k in ("ck_pool2d", "ck_pool2d_backward", "ck_pool2d_backward_cells")
            for dt in FLOAT_DTYPE_NAMES for avg in ("true", "false")]


_family = KernelFamily(SOURCE, name_expressions, "cudakit/pooling.cu", group=by_template)


def _geo(x_shape, geo) -> tuple:
    """The kernels' ten int32 geometry arguments (CK_POOL_GEO_ARGS) from conv_api's pooling geometry."""
    sh, sw, ph, pw, _, _, r, s, ho, wo = geo
    return tuple(np.int32(v) for v in (x_shape[2], x_shape[3], ho, wo, r, s, sh, sw, ph, pw))


_MAX_GRID_Y = 65535


def _launch(expr: str, x, geo, per_plane: int, args: tuple) -> None:
    """Grid x over the per_plane elements of one plane, y over the N * C planes (striding past
    65535). The kernels index within a padded plane in 32 bits."""
    from ..runtime.compiler import _launch_function
    padded = (x.shape[2] + 2 * geo[2]) * (x.shape[3] + 2 * geo[3])
    if padded >= 2**31:
        raise ShapeError(f"pooling: a padded (H, W) plane must have fewer than 2^31 elements (got {padded})")
    planes = x.shape[0] * x.shape[1]
    f = _family.function(x.data.device_id, expr)
    grid = (-(-per_plane // THREADS), min(planes, _MAX_GRID_Y), 1)
    _launch_function(expr, f, grid, (THREADS, 1, 1), args, 0, None)


def pool2d(x, kind: str, geo):
    """max ("max") or average ("avg") pooling of a C-contiguous (N, C, H, W) CuPy array on the
    current device; geo: conv_api's (sh, sw, ph, pw, 1, 1, R, S, Ho, Wo), validated by the caller."""
    from ..runtime import _cupy
    cp = _cupy.loaded_cupy()
    n, c = x.shape[:2]
    y = cp.empty((n, c, geo[8], geo[9]), x.dtype)
    if y.size and x.size:
        expr = f"ck_pool2d<{ctype(x.dtype.name)}, {'true' if kind == 'avg' else 'false'}>"
        _launch(expr, x, geo, geo[8] * geo[9], (x, y, np.int64(n * c), *_geo(x.shape, geo)))
    return y


def backward_kernel(x_shape, geo) -> tuple[str, int]:
    """(kernel, threads per plane) pool2d_backward launches: one thread per window when the windows
    do not overlap (stride >= window), else one per input element gathering its windows."""
    sh, sw, r, s, ho, wo = geo[0], geo[1], geo[6], geo[7], geo[8], geo[9]
    if sh >= r and sw >= s:
        return "ck_pool2d_backward_cells", ho * wo
    return "ck_pool2d_backward", x_shape[2] * x_shape[3]


def pool2d_backward(grad_out, x, kind: str, geo):
    """dL/dx of pool2d for C-contiguous grad_out (N, C, Ho, Wo) and x of one dtype and device."""
    from ..runtime import _cupy
    cp = _cupy.loaded_cupy()
    gx = cp.empty(x.shape, x.dtype)
    if gx.size == 0:
        return gx
    if grad_out.size == 0:
        gx.fill(0)
        return gx
    kernel, per_plane = backward_kernel(x.shape, geo)
    expr = f"{kernel}<{ctype(x.dtype.name)}, {'true' if kind == 'avg' else 'false'}>"
    n, c = x.shape[:2]
    _launch(expr, x, geo, per_plane, (x, grad_out, gx, np.int64(n * c), *_geo(x.shape, geo)))
    return gx
