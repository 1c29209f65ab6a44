"""Normalization kernels: layernorm, rmsnorm and batch_norm, forward and backward.

Layernorm / rmsnorm normalise each row of a (rows, cols) matrix:
- Rows that fit hold their row in registers (`ck_*_fwd_reg`, `ck_*_bwd_reg`): `tpr` threads per
  row (1..1024, a power of two; several rows per block when tpr < 256), NV vectors of V elements
  per thread, so x is read from memory exactly once. Statistics are an exact two-pass over those
  registers (mean, then the sum of squared deviations), accurate for rows with a large mean.
- Longer rows (`ck_*_fwd_loop`, `ck_*_bwd_loop`) take one block of 1024 threads per row and
  read the row twice (statistics, then output); statistics are a Welford/Chan merge of per-vector
  exact statistics, again accurate for a large mean.
- dweight / dbias are bitwise deterministic: each block sums its own chunk of rows into a
  partial-sum workspace (blocks x cols) in a fixed order, and `ck_norm_colsum` reduces those
  partials in a fixed order. No atomics. The block count depends on the shape and on the device
  (its multiprocessor count and the kernel's occupancy), so results are bitwise the same from run
  to run on one device.
Batch norm views x as (N, C*S) (S = H*W, 1 for 2-D input): per-(column, row-chunk) Welford partials,
a per-channel finalize in a fixed order, then an elementwise apply (2 reads + 1 write of x in
training; backward 2 reads of x and dy + 1 write of dx).

Statistics accumulate in float32 (float64 for float64). Inputs are contiguous CuPy arrays on the
current device of one dtype (float16, bfloat16, float32, float64), validated by the caller.
"""
from __future__ import annotations

import numpy as np

from ..runtime import _cupy
from ..runtime.compiler import _launch_function
from . import _planned
from ._common import _ITEMSIZE, FLOAT_DTYPE_NAMES, PACK_HELPERS, PREAMBLE, KernelFamily, by_template, ctype, dtype_name, vec_width

SOURCE = PREAMBLE + PACK_HELPERS + r"""
extern __shared__ __align__(16) unsigned char ck_dyn_smem[];

#define CK_U 4   // independent vector loads a loop kernel issues before it uses any of them

__device__ __forceinline__ float ck_rsqrt(float v) { return 1.0f / sqrtf(v); }
__device__ __forceinline__ double ck_rsqrt(double v) { return 1.0 / sqrt(v); }


// Sum over aligned groups of G lanes (G a power of two, <= 32). Every lane of the warp must call
// it. A butterfly adds the same pairs in every lane, so all lanes of a group get the same bits.
template <typename C>
__device__ __forceinline__ C ck_group_sum(C v, int G) {
  for (int off = G >> 1; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Sums a (and b) over the blockDim.x threads of row threadIdx.y; every one of them gets the
// totals. red: shared scratch of 64 * blockDim.y. When blockDim.x > 32 it synchronises the block,
// so every thread of the block must call it the same number of times.
template <typename C>
__device__ __forceinline__ void ck_row_sum2(C& a, C& b, C* red) {
  const int tpr = blockDim.x;
  if (tpr <= 32) { a = ck_group_sum(a, tpr); b = ck_group_sum(b, tpr); return; }
  a = ck_group_sum(a, 32);
  b = ck_group_sum(b, 32);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = tpr >> 5;
  C* r = red + threadIdx.y * 64;
  if (lane == 0) { r[warp] = a; r[32 + warp] = b; }
  __syncthreads();
  a = lane < nw ? r[lane] : C(0);
  b = lane < nw ? r[32 + lane] : C(0);
  a = ck_group_sum(a, 32);
  b = ck_group_sum(b, 32);
  __syncthreads();  // red is reused by the next call
}

template <typename C>
__device__ __forceinline__ C ck_row_sum(C a, C* red) {
  C b = C(0);
  ck_row_sum2(a, b, red);
  return a;
}

// Chan's merge of (count n, mean m, sum of squared deviations m2) with (nb, mb, m2b).
template <typename C>
__device__ __forceinline__ void ck_welford_merge(C& n, C& m, C& m2, C nb, C mb, C m2b) {
  if (nb == C(0)) return;
  const C nn = n + nb;
  const C d = mb - m;
  const C f = nb / nn;
  m += d * f;
  m2 += m2b + d * d * n * f;
  n = nn;
}

// Merges one pack of V values into a running Welford state: the pack's own mean and squared
// deviations are exact, then one Chan merge (one division per pack, not per element).
template <typename T, int V, typename C>
__device__ __forceinline__ void ck_welford_pack(C& n, C& m, C& m2, const ck_pack<T, V>& p, C sc = C(1)) {
  typedef ck_traits<T> tr;
  C s = C(0);
#pragma unroll
  for (int i = 0; i < V; ++i) s += tr::load(p.v[i]) * sc;
  const C pm = s / C(V);
  C q = C(0);
#pragma unroll
  for (int i = 0; i < V; ++i) { const C d = tr::load(p.v[i]) * sc - pm; q += d * d; }
  ck_welford_merge(n, m, m2, C(V), pm, q);
}

// Merges the Welford states of all threads of a 1-D block (blockDim.x <= 1024) in a fixed order;
// every thread gets the result. sh: shared scratch of 3 * 32.
template <typename C>
__device__ __forceinline__ void ck_block_welford(C& n, C& m, C& m2, C* sh) {
  for (int off = 16; off > 0; off >>= 1) {
    const C nb = __shfl_down_sync(0xffffffffu, n, off);
    const C mb = __shfl_down_sync(0xffffffffu, m, off);
    const C m2b = __shfl_down_sync(0xffffffffu, m2, off);
    ck_welford_merge(n, m, m2, nb, mb, m2b);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  if (lane == 0) { sh[warp] = n; sh[32 + warp] = m; sh[64 + warp] = m2; }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < nw; ++w) ck_welford_merge(sh[0], sh[32], sh[64], sh[w], sh[32 + w], sh[64 + w]);
  }
  __syncthreads();
  n = sh[0]; m = sh[32]; m2 = sh[64];
  __syncthreads();
}

// Max over the blockDim.x threads of row threadIdx.y (as ck_row_sum2; every thread of the block
// must call it). fmax ignores NaN; a NaN row stays NaN through its sums.
template <typename C>
__device__ __forceinline__ C ck_row_max(C a, C* red) {
  const int tpr = blockDim.x;
  const int g = tpr < 32 ? tpr : 32;
  for (int off = g >> 1; off > 0; off >>= 1) a = fmax(a, __shfl_xor_sync(0xffffffffu, a, off));
  if (tpr <= 32) return a;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = tpr >> 5;
  C* r = red + threadIdx.y * 64;
  if (lane == 0) r[warp] = a;
  __syncthreads();
  a = lane < nw ? r[lane] : C(0);
  for (int off = 16; off > 0; off >>= 1) a = fmax(a, __shfl_xor_sync(0xffffffffu, a, off));
  __syncthreads();  // red is reused by the next call
  return a;
}

// Whether sums of squares of T values can overflow the accumulation type: not for float16 (at most
// 65504^2 a value, in float32), so its kernels carry no rescaling branch.
template <typename T> struct ck_wide_range { enum { value = 1 }; };
template <> struct ck_wide_range<ck_half> { enum { value = 0 }; };

__device__ __forceinline__ bool ck_isfinite(float v) { return isfinite(v); }
__device__ __forceinline__ bool ck_isfinite(double v) { return isfinite(v); }

// A power of two that brings a (> 0, finite) into [1, 2): multiplying by it is exact. 1 for a
// zero, inf or NaN a (nothing to rescale: the row's inf/NaN propagates as before).
__device__ __forceinline__ float ck_pow2_scale(float a) { return (a > 0.0f && isfinite(a)) ? scalbnf(1.0f, -ilogbf(a)) : 1.0f; }
__device__ __forceinline__ double ck_pow2_scale(double a) { return (a > 0.0 && isfinite(a)) ? scalbn(1.0, -ilogb(a)) : 1.0; }

// Row statistics of the register kernels over the values x * sc: mu, the mean (0 for rmsnorm), and
// q, the sum of squared deviations from it (of squares for rmsnorm); exact two passes over the
// registers. Every thread of the block must call it (ck_row_sum).
template <typename T, int V, int NV, bool RMS>
__device__ __forceinline__ void ck_reg_stats(ck_pack<T, V>* p, bool live, int nvec, int cols,
    typename ck_traits<T>::acc sc, typename ck_traits<T>::acc* red,
    typename ck_traits<T>::acc& mu, typename ck_traits<T>::acc& q) {
  typedef typename ck_traits<T>::acc C;
  C s = C(0);
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int k = threadIdx.x + j * blockDim.x;
    if (live && k < nvec) {
      C v[V];
      ck_cvt<T, V>::load(p[j], v);
#pragma unroll
      for (int i = 0; i < V; ++i) { const C u = v[i] * sc; s += RMS ? u * u : u; }
    }
  }
  s = ck_row_sum(s, red);
#pragma unroll
  for (int j = 0; j < NV; ++j) ck_opaque(p[j].raw);
  if (RMS) { mu = C(0); q = s; return; }
  mu = s / C(cols);
  C d2 = C(0);
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int k = threadIdx.x + j * blockDim.x;
    if (live && k < nvec) {
      C v[V];
      ck_cvt<T, V>::load(p[j], v);
#pragma unroll
      for (int i = 0; i < V; ++i) { const C d = v[i] * sc - mu; d2 += d * d; }
    }
  }
  q = ck_row_sum(d2, red);
#pragma unroll
  for (int j = 0; j < NV; ++j) ck_opaque(p[j].raw);
}

// ================================================================ layernorm / rmsnorm forward
// x, y: [rows, cols]; w, b: [cols] or null (b unused by rmsnorm); mean (layernorm only), rstd:
// [rows] of the accumulation type. V divides cols; x, y, w, b are V*sizeof(T)-aligned.
// Block (tpr, rpb): thread (tx, ty) holds vectors tx, tx + tpr, ... (NV of them) of row
// blockIdx.x * rpb + ty in registers.
// Traffic: rows*cols*sizeof(T) read + the same written + cols*sizeof(T) per row of w and b (L1/L2)
// + rows*sizeof(acc) per statistic written.
template <typename T, int V, int NV, bool RMS>
__device__ __forceinline__ void ck_norm_fwd_reg(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
    typename ck_traits<T>::acc* __restrict__ mean_out, typename ck_traits<T>::acc* __restrict__ rstd_out,
    long long rows, int cols, typename ck_traits<T>::acc eps) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C red[64 * 16];  // rows of > 32 threads: at most 16 per block
  const long long row = (long long)blockIdx.x * blockDim.y + threadIdx.y;
  const bool live = row < rows;
  const int nvec = cols / V;
  const long long base = (live ? row : 0) * (long long)(nvec);
  const R* __restrict__ xr = reinterpret_cast<const R*>(x) + base;
  ck_pack<T, V> p[NV];
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int k = threadIdx.x + j * blockDim.x;
    if (live && k < nvec) p[j].raw = xr[k];
  }
  // Statistics of the row as it is (sc = 1); where a sum overflows (|x| ~ 1e19 and up in float32:
  // the squares pass FLT_MAX), again over x * sc with sc = 2^-ilogb(max |x|) (exact), so that
  // y = (x sc - mu sc) / sqrt(q sc^2 / cols + eps sc^2) is right. The recount is block-uniform
  // (ck_row_sum synchronises the block); blocks without such a row skip it.
  C sc = C(1), mu, q;
  ck_reg_stats<T, V, NV, RMS>(p, live, nvec, cols, sc, red, mu, q);
  const bool bad = ck_wide_range<T>::value && live && !(ck_isfinite(q) && ck_isfinite(mu));
  if (ck_wide_range<T>::value && __syncthreads_or(bad)) {
    C a = C(0);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const int k = threadIdx.x + j * blockDim.x;
      if (live && k < nvec) {
        C v[V];
        ck_cvt<T, V>::load(p[j], v);
#pragma unroll
        for (int i = 0; i < V; ++i) a = fmax(a, fabs(v[i]));
      }
    }
    a = ck_row_max(a, red);
    if (bad) sc = ck_pow2_scale(a);
    ck_reg_stats<T, V, NV, RMS>(p, live, nvec, cols, sc, red, mu, q);
  }
  const C rs = ck_rsqrt(q / C(cols) + eps * sc * sc);   // the rstd of x * sc
  if (live && threadIdx.x == 0) {
    if (!RMS) mean_out[row] = mu / sc;
    rstd_out[row] = rs * sc;
  }
  const R* __restrict__ wr = reinterpret_cast<const R*>(w);
  const R* __restrict__ br = reinterpret_cast<const R*>(b);
  R* __restrict__ yr = reinterpret_cast<R*>(y) + base;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int k = threadIdx.x + j * blockDim.x;
    if (live && k < nvec) {
      ck_pack<T, V> pw, pb, po;
      C v[V], wv[V], bv[V];
      if (w) { pw.raw = wr[k]; ck_cvt<T, V>::load(pw, wv); }
      if (!RMS && b) { pb.raw = br[k]; ck_cvt<T, V>::load(pb, bv); }
      ck_cvt<T, V>::load(p[j], v);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        v[i] = (v[i] * sc - mu) * rs;
        if (w) v[i] *= wv[i];
        if (!RMS && b) v[i] += bv[i];
      }
      ck_cvt<T, V>::store(po, v);
      yr[k] = po.raw;
    }
  }
}

template <typename T, int V, int NV> struct ck_fwd_bound {
  enum { bytes = NV * V * (int)sizeof(T), value = (bytes <= 64 || sizeof(T) < 8) ? 1024 : 512 };
};

template <typename T, int V, int NV>
__global__ void __launch_bounds__(ck_fwd_bound<T, V, NV>::value, 1) ck_ln_fwd_reg(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
    typename ck_traits<T>::acc* __restrict__ mean, typename ck_traits<T>::acc* __restrict__ rstd,
    long long rows, int cols, typename ck_traits<T>::acc eps) {
  ck_norm_fwd_reg<T, V, NV, false>(x, w, b, y, mean, rstd, rows, cols, eps);
}

template <typename T, int V, int NV>
__global__ void __launch_bounds__(ck_fwd_bound<T, V, NV>::value, 1) ck_rms_fwd_reg(
    const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
    typename ck_traits<T>::acc* __restrict__ rstd, long long rows, int cols, typename ck_traits<T>::acc eps) {
  ck_norm_fwd_reg<T, V, NV, true>(x, w, (const T*)0, y, (typename ck_traits<T>::acc*)0, rstd, rows, cols, eps);
}

// Max over a 1-D block (blockDim.x <= 1024, a multiple of 32); every thread gets it. sh: shared
// scratch of >= 32.
template <typename C>
__device__ __forceinline__ C ck_block_max(C a, C* sh) {
  for (int off = 16; off > 0; off >>= 1) a = fmax(a, __shfl_xor_sync(0xffffffffu, a, off));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  if (lane == 0) sh[warp] = a;
  __syncthreads();
  a = lane < nw ? sh[lane] : C(0);
  for (int off = 16; off > 0; off >>= 1) a = fmax(a, __shfl_xor_sync(0xffffffffu, a, off));
  __syncthreads();  // sh is reused next
  return a;
}

// Row statistics of the loop kernels over x * sc (one 1-D block per row): mu, the mean (0 for
// rmsnorm) by a Welford/Chan merge of exact per-pack statistics, and q, the sum of squared
// deviations (of squares for rmsnorm). Every thread gets both. sh: shared scratch of 96.
template <typename T, int V, bool RMS>
__device__ __forceinline__ void ck_loop_stats(const typename ck_raw<sizeof(T) * V>::type* __restrict__ xr,
    int nvec, typename ck_traits<T>::acc sc, typename ck_traits<T>::acc* sh,
    typename ck_traits<T>::acc& mu, typename ck_traits<T>::acc& q) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  const int step = blockDim.x * CK_U;
  C n = C(0), m = C(0), m2 = C(0);
  for (int k0 = threadIdx.x; k0 < nvec; k0 += step) {
    ck_pack<T, V> p[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) { const int k = k0 + u * blockDim.x; if (k < nvec) p[u].raw = xr[k]; }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const int k = k0 + u * blockDim.x;
      if (k < nvec) {
        if (RMS) {
#pragma unroll
          for (int i = 0; i < V; ++i) { const C v = tr::load(p[u].v[i]) * sc; m2 += v * v; }
        } else {
          ck_welford_pack<T, V, C>(n, m, m2, p[u], sc);
        }
      }
    }
  }
  if (RMS) {
    mu = C(0);
    q = ck_row_sum(m2, sh);
  } else {
    ck_block_welford(n, m, m2, sh);
    mu = m;
    q = m2;
  }
}

// Long rows. x, y: [rows, cols]; w, b: [cols] or null; mean, rstd: [rows]. One block (1-D,
// <= 1024 threads) per row; pass 1 reads the row for its statistics (Welford/Chan for layernorm,
// the sum of squares for rmsnorm), pass 2 reads it again (mostly from L2) and writes y.
// Traffic: 2 * rows*cols*sizeof(T) read (the second largely L2 hits) + rows*cols*sizeof(T) written.
template <typename T, int V, bool RMS>
__device__ __forceinline__ void ck_norm_fwd_loop(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
    typename ck_traits<T>::acc* __restrict__ mean_out, typename ck_traits<T>::acc* __restrict__ rstd_out,
    int cols, typename ck_traits<T>::acc eps) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C sh[96];
  const long long row = blockIdx.x;
  const int nvec = cols / V;
  const R* __restrict__ xr = reinterpret_cast<const R*>(x) + row * nvec;
  const int step = blockDim.x * CK_U;
  // As the register kernels: statistics of x, then, where a sum overflowed, of x * sc with
  // sc = 2^-ilogb(max |x|) (two more reads of the row; the whole block takes the same branch).
  C sc = C(1), mu, q;
  ck_loop_stats<T, V, RMS>(xr, nvec, sc, sh, mu, q);
  if (ck_wide_range<T>::value && !(ck_isfinite(q) && ck_isfinite(mu))) {
    C a = C(0);
    for (int k0 = threadIdx.x; k0 < nvec; k0 += step) {
      ck_pack<T, V> p[CK_U];
#pragma unroll
      for (int u = 0; u < CK_U; ++u) { const int k = k0 + u * blockDim.x; if (k < nvec) p[u].raw = xr[k]; }
#pragma unroll
      for (int u = 0; u < CK_U; ++u) {
        const int k = k0 + u * blockDim.x;
        if (k < nvec) {
#pragma unroll
          for (int i = 0; i < V; ++i) a = fmax(a, fabs(tr::load(p[u].v[i])));
        }
      }
    }
    sc = ck_pow2_scale(ck_block_max(a, sh));
    ck_loop_stats<T, V, RMS>(xr, nvec, sc, sh, mu, q);
  }
  const C rs = ck_rsqrt(q / C(cols) + eps * sc * sc);   // the rstd of x * sc
  if (threadIdx.x == 0) {
    if (!RMS) mean_out[row] = mu / sc;
    rstd_out[row] = rs * sc;
  }
  const R* __restrict__ wr = reinterpret_cast<const R*>(w);
  const R* __restrict__ br = reinterpret_cast<const R*>(b);
  R* __restrict__ yr = reinterpret_cast<R*>(y) + row * nvec;
  for (int k0 = threadIdx.x; k0 < nvec; k0 += step) {
    ck_pack<T, V> p[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) { const int k = k0 + u * blockDim.x; if (k < nvec) p[u].raw = xr[k]; }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const int k = k0 + u * blockDim.x;
      if (k < nvec) {
        ck_pack<T, V> pw, pb, po;
        if (w) pw.raw = wr[k];
        if (!RMS && b) pb.raw = br[k];
#pragma unroll
        for (int i = 0; i < V; ++i) {
          C v = (tr::load(p[u].v[i]) * sc - mu) * rs;
          if (w) v *= tr::load(pw.v[i]);
          if (!RMS && b) v += tr::load(pb.v[i]);
          po.v[i] = tr::store(v);
        }
        yr[k] = po.raw;
      }
    }
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(1024, 1) ck_ln_fwd_loop(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
    typename ck_traits<T>::acc* __restrict__ mean, typename ck_traits<T>::acc* __restrict__ rstd,
    int cols, typename ck_traits<T>::acc eps) {
  ck_norm_fwd_loop<T, V, false>(x, w, b, y, mean, rstd, cols, eps);
}

template <typename T, int V>
__global__ void __launch_bounds__(1024, 1) ck_rms_fwd_loop(
    const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
    typename ck_traits<T>::acc* __restrict__ rstd, int cols, typename ck_traits<T>::acc eps) {
  ck_norm_fwd_loop<T, V, true>(x, w, (const T*)0, y, (typename ck_traits<T>::acc*)0, rstd, cols, eps);
}

// ================================================================ layernorm / rmsnorm backward
// dy, x, dx: [rows, cols]; w: [cols] or null; mean (layernorm only), rstd: [rows];
// part: [gridDim.x, NP, cols] partial sums (NP = 2 for layernorm: sum of dy*xhat, sum of dy;
// NP = 1 for rmsnorm: sum of dy*xhat) over the rows of each block.
// Block b takes rows [b*chunk, min(rows, (b+1)*chunk)); its row-lane ty the rows b*chunk + ty,
// + rpb, ...; the row itself sits in registers as in the forward kernel. Each thread accumulates
// its own columns' dweight/dbias in dynamic shared memory: thread (tx, ty) owns the
// S = NP*NV*V + 1 words at (ty*tpr + tx)*S, [p][j][i] inside; compile-time offsets need no
// address registers, and the odd stride S keeps a warp's accesses free of bank conflicts.
// At the end the block sums its row-lanes in order.
// Traffic: 2 * rows*cols*sizeof(T) read + rows*cols*sizeof(T) written + gridDim.x*NP*cols*sizeof(acc).
// Largest block of the fused backward: x and dy (NV*V elements each) stay in registers, so more
// of them per thread leave room for fewer threads. Up to 64 bytes each of float (32 of double,
// whose arithmetic takes register pairs, or of 16-bit types, which unpack to twice the registers)
// it fits in 64 registers (1024 threads); twice that needs about 150 (256 threads).
// Mirrored by _bwd_bound in Python.
template <typename T, int V, int NV> struct ck_bwd_bound {
  enum { bytes = NV * V * (int)sizeof(T), value = bytes <= (sizeof(T) == 4 ? 64 : 32) ? 1024 : 256 };
};

template <typename T, int V, int NV, bool RMS>
__device__ __forceinline__ void ck_norm_bwd_reg(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
    const typename ck_traits<T>::acc* __restrict__ mean, const typename ck_traits<T>::acc* __restrict__ rstd,
    T* __restrict__ dx, typename ck_traits<T>::acc* __restrict__ part,
    long long rows, int cols, long long chunk) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  const int NP = RMS ? 1 : 2;
  __shared__ C red[64 * 16];  // rows of > 32 threads: at most 16 per block
  C* acc = reinterpret_cast<C*>(ck_dyn_smem);
  const int tpr = blockDim.x, rpb = blockDim.y;
  const int E = NV * V, S = NP * E + 1;
  C* my = acc + (threadIdx.y * tpr + threadIdx.x) * S;
  const int nvec = cols / V;
#pragma unroll
  for (int q = 0; q < NP * E; ++q) my[q] = C(0);
  const R* __restrict__ wr = reinterpret_cast<const R*>(w);  // re-read per row from L1: registers go to x and dy
  const long long r0 = (long long)blockIdx.x * chunk;
  const long long r1 = r0 + chunk < rows ? r0 + chunk : rows;
  const long long iters = (chunk + rpb - 1) / rpb;  // the same for every thread of the block
  for (long long it = 0; it < iters; ++it) {
    const long long row = r0 + threadIdx.y + it * rpb;
    const bool live = row < r1;
    const long long base = (live ? row : 0) * (long long)nvec;
    ck_pack<T, V> px[NV], pg[NV];
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const int k = threadIdx.x + j * tpr;
      if (live && k < nvec) {
        px[j].raw = reinterpret_cast<const R*>(x)[base + k];
        pg[j].raw = reinterpret_cast<const R*>(dy)[base + k];
      }
    }
    const C mu = (live && !RMS) ? mean[row] : C(0);
    const C rs = live ? rstd[row] : C(0);
    C sg = C(0), sgx = C(0);  // sum of w*dy, sum of w*dy*xhat over the row
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const int k = threadIdx.x + j * tpr;
      if (live && k < nvec) {
        ck_pack<T, V> pw;
        C xv[V], gv[V], wv[V];
        if (w) { pw.raw = wr[k]; ck_cvt<T, V>::load(pw, wv); }
        ck_cvt<T, V>::load(px[j], xv);
        ck_cvt<T, V>::load(pg[j], gv);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const C xh = (xv[i] - mu) * rs;
          const C g = w ? gv[i] * wv[i] : gv[i];
          sg += g;
          sgx += g * xh;
        }
      }
    }
    if (RMS) sgx = ck_row_sum(sgx, red);
    else ck_row_sum2(sg, sgx, red);
#pragma unroll
    for (int j = 0; j < NV; ++j) { ck_opaque(px[j].raw); ck_opaque(pg[j].raw); }
    const C mg = sg / C(cols), mgx = sgx / C(cols);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const int k = threadIdx.x + j * tpr;
      if (live && k < nvec) {
        ck_pack<T, V> pw, po;
        C xv[V], gv[V], wv[V], ov[V];
        if (w) { pw.raw = wr[k]; ck_cvt<T, V>::load(pw, wv); }
        ck_cvt<T, V>::load(px[j], xv);
        ck_cvt<T, V>::load(pg[j], gv);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const C xh = (xv[i] - mu) * rs;
          const C d = gv[i];
          const C g = w ? d * wv[i] : d;
          ov[i] = RMS ? rs * (g - xh * mgx) : rs * (g - mg - xh * mgx);
          my[j * V + i] += d * xh;
          if (!RMS) my[E + j * V + i] += d;
        }
        ck_cvt<T, V>::store(po, ov);
        reinterpret_cast<R*>(dx)[base + k] = po.raw;
      }
    }
  }
  __syncthreads();
  const int nt = tpr * rpb;
  for (int t = threadIdx.y * tpr + threadIdx.x; t < NP * cols; t += nt) {
    const int p = t / cols, c = t - p * cols;
    const int k = c / V, i = c - k * V, j = k / tpr, tx = k - j * tpr;
    const C* a = acc + tx * S + p * E + j * V + i;
    C s = C(0);
    for (int ty = 0; ty < rpb; ++ty) s += a[ty * tpr * S];
    part[((long long)blockIdx.x * NP + p) * cols + c] = s;
  }
}

template <typename T, int V, int NV>
__global__ void __launch_bounds__(ck_bwd_bound<T, V, NV>::value, 1) ck_ln_bwd_reg(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
    const typename ck_traits<T>::acc* __restrict__ mean, const typename ck_traits<T>::acc* __restrict__ rstd,
    T* __restrict__ dx, typename ck_traits<T>::acc* __restrict__ part, long long rows, int cols, long long chunk) {
  ck_norm_bwd_reg<T, V, NV, false>(dy, x, w, mean, rstd, dx, part, rows, cols, chunk);
}

template <typename T, int V, int NV>
__global__ void __launch_bounds__(ck_bwd_bound<T, V, NV>::value, 1) ck_rms_bwd_reg(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
    const typename ck_traits<T>::acc* __restrict__ rstd,
    T* __restrict__ dx, typename ck_traits<T>::acc* __restrict__ part, long long rows, int cols, long long chunk) {
  ck_norm_bwd_reg<T, V, NV, true>(dy, x, w, (const typename ck_traits<T>::acc*)0, rstd, dx, part, rows, cols, chunk);
}

// Long rows, dx only (dweight/dbias come from ck_*_bwd_cols). dy, x, dx: [rows, cols]; w: [cols]
// or null; mean, rstd: [rows]. One 1-D block per row: pass 1 sums w*dy and w*dy*xhat, pass 2
// reads the row again (mostly from L2) and writes dx.
// Traffic: 4 * rows*cols*sizeof(T) read (half of it largely L2 hits) + rows*cols*sizeof(T) written.
template <typename T, int V, bool RMS>
__device__ __forceinline__ void ck_norm_bwd_loop(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
    const typename ck_traits<T>::acc* __restrict__ mean, const typename ck_traits<T>::acc* __restrict__ rstd,
    T* __restrict__ dx, int cols) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C red[64];
  const long long row = blockIdx.x;
  const int nvec = cols / V;
  const R* __restrict__ xr = reinterpret_cast<const R*>(x) + row * nvec;
  const R* __restrict__ gr = reinterpret_cast<const R*>(dy) + row * nvec;
  const R* __restrict__ wr = reinterpret_cast<const R*>(w);
  const C mu = RMS ? C(0) : mean[row], rs = rstd[row];
  const int step = blockDim.x * CK_U;
  C sg = C(0), sgx = C(0);
  for (int k0 = threadIdx.x; k0 < nvec; k0 += step) {
    ck_pack<T, V> px[CK_U], pg[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const int k = k0 + u * blockDim.x;
      if (k < nvec) { px[u].raw = xr[k]; pg[u].raw = gr[k]; }
    }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const int k = k0 + u * blockDim.x;
      if (k < nvec) {
        ck_pack<T, V> pw;
        if (w) pw.raw = wr[k];
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const C xh = (tr::load(px[u].v[i]) - mu) * rs;
          C g = tr::load(pg[u].v[i]);
          if (w) g *= tr::load(pw.v[i]);
          sg += g;
          sgx += g * xh;
        }
      }
    }
  }
  ck_row_sum2(sg, sgx, red);
  const C mg = sg / C(cols), mgx = sgx / C(cols);
  R* __restrict__ dr = reinterpret_cast<R*>(dx) + row * nvec;
  for (int k0 = threadIdx.x; k0 < nvec; k0 += step) {
    ck_pack<T, V> px[CK_U], pg[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const int k = k0 + u * blockDim.x;
      if (k < nvec) { px[u].raw = xr[k]; pg[u].raw = gr[k]; }
    }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const int k = k0 + u * blockDim.x;
      if (k < nvec) {
        ck_pack<T, V> pw, po;
        if (w) pw.raw = wr[k];
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const C xh = (tr::load(px[u].v[i]) - mu) * rs;
          C g = tr::load(pg[u].v[i]);
          if (w) g *= tr::load(pw.v[i]);
          po.v[i] = tr::store(RMS ? rs * (g - xh * mgx) : rs * (g - mg - xh * mgx));
        }
        dr[k] = po.raw;
      }
    }
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(1024, 1) ck_ln_bwd_loop(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
    const typename ck_traits<T>::acc* __restrict__ mean, const typename ck_traits<T>::acc* __restrict__ rstd,
    T* __restrict__ dx, int cols) {
  ck_norm_bwd_loop<T, V, false>(dy, x, w, mean, rstd, dx, cols);
}

template <typename T, int V>
__global__ void __launch_bounds__(1024, 1) ck_rms_bwd_loop(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
    const typename ck_traits<T>::acc* __restrict__ rstd, T* __restrict__ dx, int cols) {
  ck_norm_bwd_loop<T, V, true>(dy, x, w, (const typename ck_traits<T>::acc*)0, rstd, dx, cols);
}

// Column partial sums for long rows. dy, x: [rows, cols]; mean (layernorm only), rstd: [rows];
// part: [gridDim.y, NP, cols] as in ck_*_bwd_reg. Thread = one column; block y = one chunk of rows,
// summed in row order.
// Traffic: 2 * rows*cols*sizeof(T) read + gridDim.y*NP*cols*sizeof(acc) written.
template <typename T, bool RMS>
__device__ __forceinline__ void ck_norm_bwd_cols(
    const T* __restrict__ dy, const T* __restrict__ x,
    const typename ck_traits<T>::acc* __restrict__ mean, const typename ck_traits<T>::acc* __restrict__ rstd,
    typename ck_traits<T>::acc* __restrict__ part, long long rows, int cols, long long chunk) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  const int NP = RMS ? 1 : 2;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const long long r0 = (long long)blockIdx.y * chunk;
  const long long r1 = r0 + chunk < rows ? r0 + chunk : rows;
  C sdw = C(0), sdb = C(0);
#pragma unroll 4
  for (long long r = r0; r < r1; ++r) {
    const long long i = r * cols + c;
    const C d = tr::load(dy[i]);
    const C xh = (tr::load(x[i]) - (RMS ? C(0) : mean[r])) * rstd[r];
    sdw += d * xh;
    sdb += d;
  }
  part[((long long)blockIdx.y * NP) * cols + c] = sdw;
  if (!RMS) part[((long long)blockIdx.y * NP + 1) * cols + c] = sdb;
}

template <typename T>
__global__ void ck_ln_bwd_cols(
    const T* __restrict__ dy, const T* __restrict__ x,
    const typename ck_traits<T>::acc* __restrict__ mean, const typename ck_traits<T>::acc* __restrict__ rstd,
    typename ck_traits<T>::acc* __restrict__ part, long long rows, int cols, long long chunk) {
  ck_norm_bwd_cols<T, false>(dy, x, mean, rstd, part, rows, cols, chunk);
}

template <typename T>
__global__ void ck_rms_bwd_cols(
    const T* __restrict__ dy, const T* __restrict__ x, const typename ck_traits<T>::acc* __restrict__ rstd,
    typename ck_traits<T>::acc* __restrict__ part, long long rows, int cols, long long chunk) {
  ck_norm_bwd_cols<T, true>(dy, x, (const typename ck_traits<T>::acc*)0, rstd, part, rows, cols, chunk);
}

// part: [nparts, NP, cols] partial sums (NP = gridDim.y); out0 (p = 0) and out1 (p = 1): [cols]
// or null. out_p[c] = sum over parts, in part order.
// Traffic: nparts*NP*cols*sizeof(acc) read + NP*cols*sizeof(T) written.
template <typename T>
__global__ void ck_norm_colsum(const typename ck_traits<T>::acc* __restrict__ part, T* __restrict__ out0,
                               T* __restrict__ out1, int nparts, int cols) {
  typedef typename ck_traits<T>::acc C;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int p = blockIdx.y, np = gridDim.y;
  T* out = p == 0 ? out0 : out1;
  if (c >= cols || !out) return;
  C s = C(0);
#pragma unroll 8
  for (int g = 0; g < nparts; ++g) s += part[((long long)g * np + p) * cols + c];
  out[c] = ck_traits<T>::store(s);
}

// ================================================================ batch norm
// x is viewed as [N, CS/V] vectors, CS = C*S, channel of vector column k = k / (S/V) (V divides S,
// so a vector never straddles two channels). Block (bx, by): vector column blockIdx.x*bx + tx,
// rows blockIdx.y*chunk + ty, + by, ... below min(N, (blockIdx.y+1)*chunk).
// pn, pm, pm2: [CS/V, gridDim.y] Welford partials (count, mean, squared deviations) of each
// vector column and row chunk; channel c's are the contiguous [c*K, (c+1)*K), K = (S/V)*gridDim.y.
// Traffic: N*CS*sizeof(T) read + 3*(CS/V)*gridDim.y*sizeof(acc) written.
template <typename T, int V>
__global__ void __launch_bounds__(256, 1) ck_bn_stats(
    const T* __restrict__ x, typename ck_traits<T>::acc* __restrict__ pn, typename ck_traits<T>::acc* __restrict__ pm,
    typename ck_traits<T>::acc* __restrict__ pm2, long long N, long long csv, long long chunk) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C sh[3][256];
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const bool live = k < csv;
  const long long r0 = (long long)blockIdx.y * chunk;
  const long long r1 = r0 + chunk < N ? r0 + chunk : N;
  const R* __restrict__ xr = reinterpret_cast<const R*>(x);
  C n = C(0), m = C(0), m2 = C(0);
  const long long step = (long long)blockDim.y * CK_U;
  for (long long rb = r0 + threadIdx.y; live && rb < r1; rb += step) {
    ck_pack<T, V> p[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < r1) p[u].raw = xr[r * csv + k];
    }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      if (rb + (long long)u * blockDim.y < r1) ck_welford_pack<T, V, C>(n, m, m2, p[u]);
    }
  }
  if (blockDim.y > 1) {  // merge the row-lanes of this column, in order
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
    sh[0][t] = n; sh[1][t] = m; sh[2][t] = m2;
    __syncthreads();
    if (threadIdx.y != 0) return;
    for (int ty = 1; ty < (int)blockDim.y; ++ty) {
      const int o = ty * blockDim.x + threadIdx.x;
      ck_welford_merge(n, m, m2, sh[0][o], sh[1][o], sh[2][o]);
    }
  }
  if (live) {
    const long long o = k * gridDim.y + blockIdx.y;
    pn[o] = n; pm[o] = m; pm2[o] = m2;
  }
}

// One block of 256 threads per channel c = blockIdx.x. Training: merges channel c's K Welford
// partials in a fixed order into the batch mean and biased variance, updates running_mean and
// running_var (unbiased) in place when given. Inference: takes the running statistics.
// Writes save_mean, save_invstd and scale = gamma * invstd, each [C] of the accumulation type;
// gamma, beta, running_mean, running_var: [C] of T or null.
template <typename T>
__global__ void __launch_bounds__(256, 1) ck_bn_finalize(
    const typename ck_traits<T>::acc* __restrict__ pn, const typename ck_traits<T>::acc* __restrict__ pm,
    const typename ck_traits<T>::acc* __restrict__ pm2, long long K, const T* __restrict__ gamma,
    T* __restrict__ running_mean, T* __restrict__ running_var,
    typename ck_traits<T>::acc* __restrict__ save_mean, typename ck_traits<T>::acc* __restrict__ save_invstd,
    typename ck_traits<T>::acc* __restrict__ scale, int training,
    typename ck_traits<T>::acc momentum, typename ck_traits<T>::acc eps) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  __shared__ C sh[96];
  const int c = blockIdx.x;
  C mean, var;
  if (training) {
    C n = C(0), m = C(0), m2 = C(0);
    const long long o = (long long)c * K;
    for (long long i = threadIdx.x; i < K; i += blockDim.x) ck_welford_merge(n, m, m2, pn[o + i], pm[o + i], pm2[o + i]);
    ck_block_welford(n, m, m2, sh);
    if (threadIdx.x != 0) return;
    mean = m;
    var = m2 / n;
    if (running_mean) running_mean[c] = tr::store((C(1) - momentum) * tr::load(running_mean[c]) + momentum * mean);
    if (running_var) running_var[c] = tr::store((C(1) - momentum) * tr::load(running_var[c]) + momentum * (m2 / (n - C(1))));
  } else {
    if (threadIdx.x != 0) return;
    mean = tr::load(running_mean[c]);
    var = tr::load(running_var[c]);
  }
  const C inv = ck_rsqrt(var + eps);
  save_mean[c] = mean;
  save_invstd[c] = inv;
  scale[c] = gamma ? tr::load(gamma[c]) * inv : inv;
}

// x, y: [N, CS] as in ck_bn_stats; mean, scale: [C] (acc); beta: [C] of T or null.
// y = (x - mean[c]) * scale[c] + beta[c]. Grid-stride over rows, CK_U rows in flight per thread.
// Traffic: N*CS*sizeof(T) read + the same written.
template <typename T, int V>
__global__ void __launch_bounds__(256, 1) ck_bn_apply(
    const T* __restrict__ x, T* __restrict__ y, const typename ck_traits<T>::acc* __restrict__ mean,
    const typename ck_traits<T>::acc* __restrict__ scale, const T* __restrict__ beta,
    long long N, long long csv, long long sv) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= csv) return;
  const long long c = k / sv;
  const C mu = mean[c], sc = scale[c], bt = beta ? tr::load(beta[c]) : C(0);
  const R* __restrict__ xr = reinterpret_cast<const R*>(x);
  R* __restrict__ yr = reinterpret_cast<R*>(y);
  const long long step = (long long)gridDim.y * blockDim.y * CK_U;
  for (long long rb = (long long)blockIdx.y * blockDim.y * CK_U + threadIdx.y; rb < N; rb += step) {
    ck_pack<T, V> p[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < N) p[u].raw = xr[r * csv + k];
    }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < N) {
        ck_pack<T, V> po;
        C v[V];
        ck_cvt<T, V>::load(p[u], v);
#pragma unroll
        for (int i = 0; i < V; ++i) v[i] = (v[i] - mu) * sc + bt;
        ck_cvt<T, V>::store(po, v);
        yr[r * csv + k] = po.raw;
      }
    }
  }
}

// Backward reduction. dy, x: [N, CS] as in ck_bn_stats; mean: [C] (save_mean).
// psg, psgx: [CS/V, gridDim.y] partial sums of dy and dy*(x - mean) per vector column and row chunk.
// Traffic: 2 * N*CS*sizeof(T) read + 2*(CS/V)*gridDim.y*sizeof(acc) written.
template <typename T, int V>
__global__ void __launch_bounds__(256, 1) ck_bn_bwd_reduce(
    const T* __restrict__ dy, const T* __restrict__ x, const typename ck_traits<T>::acc* __restrict__ mean,
    typename ck_traits<T>::acc* __restrict__ psg, typename ck_traits<T>::acc* __restrict__ psgx,
    long long N, long long csv, long long sv, long long chunk) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C sh[2][256];
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const bool live = k < csv;
  const long long r0 = (long long)blockIdx.y * chunk;
  const long long r1 = r0 + chunk < N ? r0 + chunk : N;
  const R* __restrict__ xr = reinterpret_cast<const R*>(x);
  const R* __restrict__ gr = reinterpret_cast<const R*>(dy);
  const C mu = live ? mean[k / sv] : C(0);
  C sg = C(0), sgx = C(0);
  const long long step = (long long)blockDim.y * CK_U;
  for (long long rb = r0 + threadIdx.y; live && rb < r1; rb += step) {
    ck_pack<T, V> px[CK_U], pg[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < r1) { px[u].raw = xr[r * csv + k]; pg[u].raw = gr[r * csv + k]; }
    }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      if (rb + (long long)u * blockDim.y < r1) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const C g = tr::load(pg[u].v[i]);
          sg += g;
          sgx += g * (tr::load(px[u].v[i]) - mu);
        }
      }
    }
  }
  if (blockDim.y > 1) {
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
    sh[0][t] = sg; sh[1][t] = sgx;
    __syncthreads();
    if (threadIdx.y != 0) return;
    sg = C(0); sgx = C(0);
    for (int ty = 0; ty < (int)blockDim.y; ++ty) {
      sg += sh[0][ty * blockDim.x + threadIdx.x];
      sgx += sh[1][ty * blockDim.x + threadIdx.x];
    }
  }
  if (live) {
    const long long o = k * gridDim.y + blockIdx.y;
    psg[o] = sg; psgx[o] = sgx;
  }
}

// One block of 256 threads per channel c = blockIdx.x: sums channel c's K partials in a fixed
// order; writes dgamma[c] = sum(dy * xhat) (when dgamma), dbeta[c] = sum(dy) (T), and the
// coefficients of dx = ka*dy + kb*(x - mean) + kd into ka, kb, kd: [C] (acc). count = N*S.
template <typename T>
__global__ void __launch_bounds__(256, 1) ck_bn_bwd_finalize(
    const typename ck_traits<T>::acc* __restrict__ psg, const typename ck_traits<T>::acc* __restrict__ psgx,
    long long K, const T* __restrict__ gamma, const typename ck_traits<T>::acc* __restrict__ invstd,
    T* __restrict__ dgamma, T* __restrict__ dbeta, typename ck_traits<T>::acc* __restrict__ ka,
    typename ck_traits<T>::acc* __restrict__ kb, typename ck_traits<T>::acc* __restrict__ kd,
    typename ck_traits<T>::acc count) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  __shared__ C red[64];
  const int c = blockIdx.x;
  const long long o = (long long)c * K;
  C sg = C(0), sgx = C(0);
  for (long long i = threadIdx.x; i < K; i += blockDim.x) { sg += psg[o + i]; sgx += psgx[o + i]; }
  ck_row_sum2(sg, sgx, red);
  if (threadIdx.x != 0) return;
  const C inv = invstd[c];
  const C g = gamma ? tr::load(gamma[c]) : C(1);
  if (dgamma) dgamma[c] = tr::store(sgx * inv);
  if (dbeta) dbeta[c] = tr::store(sg);
  const C a = g * inv;
  ka[c] = a;
  kb[c] = -a * inv * inv * (sgx / count);
  kd[c] = -a * (sg / count);
}

// dy, x, dx: [N, CS] as in ck_bn_stats; mean, ka, kb, kd: [C] (acc).
// dx = ka*dy + kb*(x - mean) + kd. Traffic: 2 * N*CS*sizeof(T) read + N*CS*sizeof(T) written.
template <typename T, int V>
__global__ void __launch_bounds__(256, 1) ck_bn_bwd_apply(
    const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
    const typename ck_traits<T>::acc* __restrict__ mean, const typename ck_traits<T>::acc* __restrict__ ka,
    const typename ck_traits<T>::acc* __restrict__ kb, const typename ck_traits<T>::acc* __restrict__ kd,
    long long N, long long csv, long long sv) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= csv) return;
  const long long c = k / sv;
  const C mu = mean[c], a = ka[c], b = kb[c], d = kd[c];
  const R* __restrict__ xr = reinterpret_cast<const R*>(x);
  const R* __restrict__ gr = reinterpret_cast<const R*>(dy);
  R* __restrict__ dr = reinterpret_cast<R*>(dx);
  const long long step = (long long)gridDim.y * blockDim.y * CK_U;
  for (long long rb = (long long)blockIdx.y * blockDim.y * CK_U + threadIdx.y; rb < N; rb += step) {
    ck_pack<T, V> px[CK_U], pg[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < N) { px[u].raw = xr[r * csv + k]; pg[u].raw = gr[r * csv + k]; }
    }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < N) {
        ck_pack<T, V> po;
        C xv[V], gv[V];
        ck_cvt<T, V>::load(px[u], xv);
        ck_cvt<T, V>::load(pg[u], gv);
#pragma unroll
        for (int i = 0; i < V; ++i) xv[i] = a * gv[i] + b * (xv[i] - mu) + d;
        ck_cvt<T, V>::store(po, xv);
        dr[r * csv + k] = po.raw;
      }
    }
  }
}
"""

# ------------------------------------------------------------------------------------------
# Instantiations and launch plans

REG_NV = (1, 2, 4, 8)      # vectors per thread of the register-row kernels
# Vectors per thread the launch plans aim at (measured on an H100, 32768x4096 and 4096x16384,
# float32 and bfloat16): 4 for the forward (0.93-0.99x copy bandwidth); 2 for the backward, whose
# x and dy both stay in registers (more threads per row, fewer registers each).
FWD_TARGET_NV = 4
BWD_TARGET_NV = 2
LOOP_THREADS = 1024        # block size of the one-block-per-row kernels
BN_THREADS = 256           # block size of the batch-norm kernels
_MAX_TPR = 1024


def _vecs(dtype_name: str) -> tuple:
    """The vector widths instantiated for a dtype: 16-byte packs and single elements."""
    return (vec_width(dtype_name), 1)


def name_expressions(dtype=None) -> list[str]:
    """Every template instantiation this module launches (for one dtype name when given)."""
    out = []
    for dt in (FLOAT_DTYPE_NAMES if dtype is None else (dtype,)):
        t = ctype(dt)
        for v in _vecs(dt):
            for nv in REG_NV:
                out += [f"ck_ln_fwd_reg<{t}, {v}, {nv}>", f"ck_rms_fwd_reg<{t}, {v}, {nv}>",
                        f"ck_ln_bwd_reg<{t}, {v}, {nv}>", f"ck_rms_bwd_reg<{t}, {v}, {nv}>"]
            out += [f"ck_ln_fwd_loop<{t}, {v}>", f"ck_rms_fwd_loop<{t}, {v}>",
                    f"ck_ln_bwd_loop<{t}, {v}>", f"ck_rms_bwd_loop<{t}, {v}>",
                    f"ck_bn_stats<{t}, {v}>", f"ck_bn_apply<{t}, {v}>",
                    f"ck_bn_bwd_reduce<{t}, {v}>", f"ck_bn_bwd_apply<{t}, {v}>"]
        out += [f"ck_ln_bwd_cols<{t}>", f"ck_rms_bwd_cols<{t}>", f"ck_norm_colsum<{t}>",
                f"ck_bn_finalize<{t}>", f"ck_bn_bwd_finalize<{t}>"]
    return out


# one family per dtype: each dtype compiles only its own instantiations
_families = {dt: KernelFamily(SOURCE, (lambda dt=dt: name_expressions(dt)), f"cudakit/normalization_{dt}.cu",
                                group=by_template)
             for dt in FLOAT_DTYPE_NAMES}
_smem_set: dict = {}     # (device, expr) -> dynamic shared memory limit set so far


def _kernel(dev: int, dtype_name: str, expr: str):
    fam = _families[dtype_name]
    return fam.kernel(expr), fam.function(dev, expr)


def _launch(expr: str, dtype_name: str, grid: tuple, block: tuple, args: tuple, smem: int = 0) -> None:
    cp = _cupy.loaded_cupy()
    dev = cp.cuda.runtime.getDevice()
    k, f = _kernel(dev, dtype_name, expr)
    if smem > 48 * 1024 and _smem_set.get((dev, expr), 0) < smem:
        k.set_max_dynamic_shared_memory(smem)
        _smem_set[(dev, expr)] = smem
    _launch_function(expr, f, grid, block, args, smem, None)


def _device_info():
    from ..runtime.device import get_device_info
    return get_device_info()


def _occupancy(dtype_name: str, expr: str, threads: int, smem: int) -> int:
    """Resident blocks per multiprocessor of `expr` at this block size and dynamic shared memory."""
    cp = _cupy.loaded_cupy()
    dev = cp.cuda.runtime.getDevice()
    k, f = _kernel(dev, dtype_name, expr)
    if smem > 48 * 1024 and _smem_set.get((dev, expr), 0) < smem:
        k.set_max_dynamic_shared_memory(smem)
        _smem_set[(dev, expr)] = smem
    return max(1, int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(f.ptr, threads, smem)))


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p


def _null():
    return np.uint64(0)


def _ptr(a):
    return _null() if a is None else a


def _acc_dtype(x):
    return np.float64 if x.dtype == np.float64 else np.float32


def _acc_scalar(x, v):
    return np.float64(v) if x.dtype == np.float64 else np.float32(v)


def _vec_for(cols: int, dtype_name: str, *arrays) -> int:
    """16-byte packs when cols is a multiple of the pack and every array is 16-byte aligned."""
    v = vec_width(dtype_name)
    if cols % v == 0 and all(a is None or a.data.ptr % 16 == 0 for a in arrays):
        return v
    return 1


def _bwd_bound(nv: int, vec: int, itemsize: int) -> int:
    """Largest block of ck_*_bwd_reg<T, vec, nv> (its __launch_bounds__, ck_bwd_bound)."""
    return 1024 if nv * vec * itemsize <= (64 if itemsize == 4 else 32) else 256


def _fwd_bound(nv: int, vec: int, itemsize: int) -> int:
    """Largest block of ck_*_fwd_reg<T, vec, nv> (its __launch_bounds__, ck_fwd_bound)."""
    return 1024 if nv * vec * itemsize <= 64 or itemsize < 8 else 512


def _reg_plan(nvec: int, target_nv: int = 4, bound=None):
    """(tpr, NV, rpb) for a register-row kernel, or None when the row is too long to hold.

    tpr, the threads per row, is the power of two that gives each thread about `target_nv`
    vectors (at most 1024); NV is the smallest instantiated count covering the row; rows share a
    block of 256 threads when tpr is small. bound(NV) -> the kernel's largest block, if limited.
    """
    tpr = min(_MAX_TPR, _pow2_at_least(max(1, -(-nvec // target_nv))))
    while True:
        need = -(-nvec // tpr)
        nv = next((n for n in REG_NV if n >= need), None)
        if nv is None:
            return None
        limit = bound(nv) if bound else _MAX_TPR
        if tpr <= limit:
            return tpr, nv, max(1, min(256, limit) // tpr)
        tpr = limit  # fewer threads per row, more vectors each: may need a larger NV


# ------------------------------------------------------------------------------------------
# layernorm / rmsnorm

def _norm_forward(kind: str, x2d, weight, bias, eps, out, plan_nv=None):
    cp = _cupy.loaded_cupy()
    rows, cols = x2d.shape
    dt = dtype_name(x2d.dtype)
    acc = _acc_dtype(x2d)
    y = cp.empty(x2d.shape, x2d.dtype) if out is None else out   # x2d is C-contiguous
    mean = cp.empty(rows, acc) if kind == "ln" else None
    rstd = cp.empty(rows, acc)
    if rows == 0 or cols == 0:
        return y, mean, rstd
    v = _vec_for(cols, dt, x2d, y, weight, bias)
    dev = cp.cuda.runtime.getDevice()
    key = (kind, rows, cols, dt, v, plan_nv, dev)
    p = _fwd_plans.get(key)
    if p is None:  # the launch of this shape, planned once (host time per call)
        expr, grid, block, reg = _fwd_launch(kind, rows, cols, dt, v, plan_nv)
        tail = (np.int64(rows), np.int32(cols)) if reg else (np.int32(cols),)
        if len(_fwd_plans) >= 1024:
            _fwd_plans.clear()
        p = _fwd_plans[key] = (expr, _kernel(dev, dt, expr)[1], grid, block, tail)
    expr, f, grid, block, tail = p
    stats = (mean, rstd) if kind == "ln" else (rstd,)
    params = (_ptr(weight), _ptr(bias)) if kind == "ln" else (_ptr(weight),)
    _launch_function(expr, f, grid, block, (x2d, *params, y, *stats, *tail, _acc_scalar(x2d, eps)), 0, None)
    return y, mean, rstd


def _fwd_launch(kind: str, rows: int, cols: int, dt: str, v: int, plan_nv=None):
    """(expr, grid, block, whether it is the register kernel) of the forward over rows x cols."""
    t = ctype(dt)
    plan = _reg_plan(cols // v, plan_nv or FWD_TARGET_NV, lambda nv: _fwd_bound(nv, v, _ITEMSIZE[dt]))
    if plan is not None:
        tpr, nv, rpb = plan
        return f"ck_{kind}_fwd_reg<{t}, {v}, {nv}>", (-(-rows // rpb), 1, 1), (tpr, rpb, 1), True
    return f"ck_{kind}_fwd_loop<{t}, {v}>", (rows, 1, 1), (LOOP_THREADS, 1, 1), False


_fwd_plans: dict = {}   # (kind, rows, cols, dtype, vector width, plan_nv, device) -> the forward's launch


def _bwd_reg_plan(kind, dt, t, v, nvec, rows, itemsize, itemsize_acc, plan_nv=None):
    """(expr, block, grid blocks, chunk, shared bytes) of the fused backward, or None when its
    accumulators do not fit in shared memory (then the loop + column kernels run)."""
    plan = _reg_plan(nvec, plan_nv or BWD_TARGET_NV, lambda nv: _bwd_bound(nv, v, itemsize))
    if plan is None:
        return None
    tpr, nv, rpb = plan
    n_acc = 2 if kind == "ln" else 1
    smem = rpb * tpr * (n_acc * nv * v + 1) * itemsize_acc
    info = _device_info()
    static = 64 * 16 * itemsize_acc  # the kernel's own reduction scratch
    if smem + static > info.max_shared_memory_per_block_optin:
        return None
    expr = f"ck_{kind}_bwd_reg<{t}, {v}, {nv}>"
    per_sm = _occupancy(dt, expr, tpr * rpb, smem)
    lanes = -(-rows // rpb)
    blocks = max(1, min(lanes, per_sm * info.multiprocessors))
    chunk = -(-rows // blocks)
    blocks = -(-rows // chunk)
    return expr, (tpr, rpb, 1), blocks, chunk, smem


def _colsum(part, dt, t, nparts, cols, out0, out1, n_out):
    _launch(f"ck_norm_colsum<{t}>", dt, (-(-cols // 256), n_out, 1), (256, 1, 1),
            (part, _ptr(out0), _ptr(out1), np.int32(nparts), np.int32(cols)))


def _norm_backward(kind: str, dy, x, weight, mean, rstd, out=None, plan_nv=None):
    cp = _cupy.loaded_cupy()
    rows, cols = x.shape
    dt = dtype_name(x.dtype)
    t = ctype(dt)
    acc = _acc_dtype(x)
    dx = cp.empty_like(x) if out is None else out
    dw = cp.empty(cols, x.dtype) if weight is not None else None
    db = cp.empty(cols, x.dtype) if kind == "ln" else None
    if rows == 0 or cols == 0:
        for a in (dw, db):
            if a is not None:
                a.fill(0)
        return dx, dw, db
    n_acc = 2 if kind == "ln" else 1
    stats = (mean, rstd) if kind == "ln" else (rstd,)
    v = _vec_for(cols, dt, dy, x, dx, weight)
    nvec = cols // v
    plan = _bwd_reg_plan(kind, dt, t, v, nvec, rows, x.dtype.itemsize, np.dtype(acc).itemsize, plan_nv)
    if plan is not None:
        expr, block, blocks, chunk, smem = plan
        part = cp.empty((blocks, n_acc, cols), acc)
        _launch(expr, dt, (blocks, 1, 1), block,
                (dy, x, _ptr(weight), *stats, dx, part, np.int64(rows), np.int32(cols), np.int64(chunk)), smem)
    else:
        _launch(f"ck_{kind}_bwd_loop<{t}, {v}>", dt, (rows, 1, 1), (LOOP_THREADS, 1, 1),
                (dy, x, _ptr(weight), *stats, dx, np.int32(cols)))
        col_blocks = -(-cols // 256)
        want = 4 * _device_info().multiprocessors
        blocks = max(1, min(rows, -(-want // col_blocks)))
        chunk = -(-rows // blocks)
        blocks = -(-rows // chunk)
        part = cp.empty((blocks, n_acc, cols), acc)
        _launch(f"ck_{kind}_bwd_cols<{t}>", dt, (col_blocks, blocks, 1), (256, 1, 1),
                (dy, x, *stats, part, np.int64(rows), np.int32(cols), np.int64(chunk)))
    outs = (dw, db) if kind == "ln" else (dw, None)
    if any(o is not None for o in outs):
        _colsum(part, dt, t, part.shape[0], cols, outs[0], outs[1], n_acc)
    return dx, dw, db


def layernorm_forward(x2d, weight, bias, eps: float, out=None):
    """Layer normalisation of each row of `x2d`.

    x2d: (rows, cols) contiguous, float16/bfloat16/float32/float64; weight, bias: (cols,) of the
    same dtype, or None; eps > 0. out: optional (rows, cols) array for y.
    Returns (y, mean, rstd): y like x2d; mean and rstd (rows,) float32 (float64 for float64 x),
    rstd = 1 / sqrt(biased variance + eps).
    """
    return _norm_forward("ln", x2d, weight, bias, eps, out)


def layernorm_backward(dy, x, weight, mean, rstd, out=None):
    """Gradients of layernorm_forward.

    dy, x: (rows, cols) of one dtype; weight: (cols,) or None; mean, rstd: (rows,) from the forward.
    Returns (dx, dweight, dbias): dx like x (written into `out` when given); dweight (cols,) of x's
    dtype, None when weight is None; dbias (cols,) of x's dtype. dweight and dbias are reduced in a
    fixed order: bitwise the same from run to run on one device.
    """
    return _norm_backward("ln", dy, x, weight, mean, rstd, out)


def rmsnorm_forward(x2d, weight, eps: float, out=None):
    """RMS normalisation of each row: y = x / sqrt(mean(x^2) + eps) * weight.

    x2d: (rows, cols) contiguous; weight: (cols,) or None. Returns (y, rstd), rstd (rows,) float32
    (float64 for float64 x).
    """
    y, _, rstd = _norm_forward("rms", x2d, weight, None, eps, out)
    return y, rstd


def rmsnorm_backward(dy, x, weight, rstd, out=None):
    """Gradients of rmsnorm_forward: (dx, dweight), dweight None when weight is None;
    dweight reduced in a fixed order (bitwise reproducible on one device)."""
    dx, dw, _ = _norm_backward("rms", dy, x, weight, None, rstd, out)
    return dx, dw


# ------------------------------------------------------------------------------------------
# batch norm

def _bn_layout(x):
    """(N, C, S) of a (N, C) or (N, C, *spatial) array."""
    n, c = x.shape[0], x.shape[1]
    s = 1
    for d in x.shape[2:]:
        s *= d
    return n, c, s


def _bn_blocks(csv: int, n: int):
    """(block, grid x, grid y for the reductions, rows per reduction chunk) for an [n, csv] view."""
    bx = min(BN_THREADS, max(32, _pow2_at_least(csv)))
    by = BN_THREADS // bx
    gx = -(-csv // bx)
    want = 4 * _device_info().multiprocessors
    gy = max(1, min(-(-n // by), -(-want // gx)))
    chunk = -(-n // gy)
    gy = -(-n // chunk)
    return (bx, by, 1), gx, gy, chunk


def _apply_grid(gx: int, n: int, by: int):
    return (gx, max(1, min(-(-n // (by * 4)), 65535)), 1)


def batch_norm_forward(x, gamma, beta, running_mean, running_var, training: bool, momentum: float,
                       eps: float, out=None):
    """Batch normalisation over every axis but 1 of x (N, C) or (N, C, *spatial).

    gamma, beta, running_mean, running_var: (C,) of x's dtype, or None (running statistics are
    required when not training). Training: batch statistics; running_mean and running_var are
    updated in place (running_var with the unbiased variance, as PyTorch). Inference: the running
    statistics. Returns (y, save_mean, save_invstd); the last two (C,) float32 (float64 for
    float64), invstd = 1 / sqrt(var + eps).
    """
    cp = _cupy.loaded_cupy()
    dt = dtype_name(x.dtype)
    t = ctype(dt)
    acc = _acc_dtype(x)
    n, c, s = _bn_layout(x)
    y = cp.empty_like(x) if out is None else out
    save_mean, save_invstd, scale = (cp.empty(c, acc) for _ in range(3))
    if c == 0:
        return y, save_mean, save_invstd
    v = vec_width(dt)
    if s % v or x.data.ptr % 16 or y.data.ptr % 16:
        v = 1
    csv, sv = c * s // v, s // v
    block, gx, gy, chunk = _bn_blocks(csv, n)
    a = _acc_scalar
    if training:
        pn, pm, pm2 = (cp.empty((csv, gy), acc) for _ in range(3))
        if x.size:
            _launch(f"ck_bn_stats<{t}, {v}>", dt, (gx, gy, 1), block,
                    (x, pn, pm, pm2, np.int64(n), np.int64(csv), np.int64(chunk)))
        else:
            pn.fill(0)
        k = sv * gy
    else:
        pn = pm = pm2 = _null()
        k = 0
    _launch(f"ck_bn_finalize<{t}>", dt, (c, 1, 1), (256, 1, 1),
            (pn, pm, pm2, np.int64(k), _ptr(gamma), _ptr(running_mean), _ptr(running_var),
             save_mean, save_invstd, scale, np.int32(bool(training)), a(x, momentum), a(x, eps)))
    if x.size:
        _launch(f"ck_bn_apply<{t}, {v}>", dt, _apply_grid(gx, n, block[1]), block,
                (x, y, save_mean, scale, _ptr(beta), np.int64(n), np.int64(csv), np.int64(sv)))
    return y, save_mean, save_invstd


def batch_norm_backward(dy, x, gamma, save_mean, save_invstd, out=None):
    """Gradients of batch_norm_forward in training mode.

    dy, x: (N, C, ...) of one dtype; gamma: (C,) or None; save_mean, save_invstd: (C,) from the
    forward. Returns (dx, dgamma, dbeta): dx like x; dgamma (C,) of x's dtype, None when gamma is
    None; dbeta (C,). Channel sums are reduced in a fixed order (bitwise reproducible on one device).
    """
    cp = _cupy.loaded_cupy()
    dt = dtype_name(x.dtype)
    t = ctype(dt)
    acc = _acc_dtype(x)
    n, c, s = _bn_layout(x)
    dx = cp.empty_like(x) if out is None else out
    dgamma = cp.empty(c, x.dtype) if gamma is not None else None
    dbeta = cp.empty(c, x.dtype)
    if c == 0:
        return dx, dgamma, dbeta
    v = vec_width(dt)
    if s % v or any(a.data.ptr % 16 for a in (dy, x, dx)):
        v = 1
    csv, sv = c * s // v, s // v
    block, gx, gy, chunk = _bn_blocks(csv, n)
    psg, psgx = cp.zeros((csv, gy), acc), cp.zeros((csv, gy), acc)
    if x.size:
        _launch(f"ck_bn_bwd_reduce<{t}, {v}>", dt, (gx, gy, 1), block,
                (dy, x, save_mean, psg, psgx, np.int64(n), np.int64(csv), np.int64(sv), np.int64(chunk)))
    ka, kb, kd = (cp.empty(c, acc) for _ in range(3))
    _launch(f"ck_bn_bwd_finalize<{t}>", dt, (c, 1, 1), (256, 1, 1),
            (psg, psgx, np.int64(sv * gy), _ptr(gamma), save_invstd, _ptr(dgamma), dbeta, ka, kb, kd,
             _acc_scalar(x, max(n * s, 1))))
    if x.size:
        _launch(f"ck_bn_bwd_apply<{t}, {v}>", dt, _apply_grid(gx, n, block[1]), block,
                (dy, x, dx, save_mean, ka, kb, kd, np.int64(n), np.int64(csv), np.int64(sv)))
    return dx, dgamma, dbeta


# ------------------------------------------------------------------------------------------
# the host-time path of the common forward call (ops.layernorm/rmsnorm and the Backend methods)

_fast: dict = {}   # (kind, shape, dtype, device, 16-byte aligned) -> launch plan, or None: not this path
_INF = float("inf")


def _plan_fast(kind: str, shape: tuple, dtype, dev: int, aligned: bool):
    """(expr, function pointer, grid, block, codes, tail, statistics dtype, rows) of the launch
    _norm_forward makes for a C-contiguous x of this shape normalised over its last axis; None for
    an empty x or a dtype the kernels lack."""
    dt = dtype_name(dtype)
    cols = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    if dt not in FLOAT_DTYPE_NAMES or cols == 0 or rows == 0:
        return None
    vw = vec_width(dt)
    v = vw if aligned and cols % vw == 0 else 1
    expr, grid, block, reg = _fwd_launch(kind, rows, cols, dt, v)
    arrays = "QQQQQQ" if kind == "ln" else "QQQQ"   # x, weight, [bias,] y, [mean,] rstd
    acc = np.float64 if dt == "float64" else np.float32
    codes = (arrays + ("Qi" if reg else "i") + ("d" if acc is np.float64 else "f")).encode()
    tail = (rows, cols) if reg else (cols,)
    return expr, _kernel(dev, dt, expr)[1].ptr, grid, block, codes, tail, acc, rows


def forward_fast(kind: str, x, weight, bias, eps, stats: bool = False):
    """layernorm (kind "ln") or rmsnorm ("rms", bias None) of x over its last axis through a launch
    planned once per (shape, dtype, device, alignment): y, or with stats (y, mean, rstd) / (y, rstd),
    the statistics shaped x.shape[:-1]. None where this path does not apply and the caller takes the
    checked one: x not a C-contiguous CuPy array on the current device, a parameter not None or a
    contiguous (cols,) array like x, eps not a positive finite float, an empty x, or
    _planned.ready() declines."""
    env = _planned.ready()
    if env is None:
        return None
    _, ndarray, get_device, _ = env
    if type(x) is not ndarray or type(eps) is not float or not 0.0 < eps < _INF or not x._c_contiguous:
        return None
    shape, dtype = x.shape, x.dtype
    dev = get_device()
    if not shape or x.data.device_id != dev:
        return None
    cols = shape[-1]
    al = x.data.ptr
    for p in (weight, bias):
        if p is not None:
            if (type(p) is not ndarray or p.shape != (cols,) or p.dtype != dtype or not p._c_contiguous
                    or p.data.device_id != dev):
                return None
            al |= p.data.ptr
    y, p = _planned.output_and_plan(_fast, (kind, shape, dtype, dev), ndarray, shape, dtype, al,
                                    lambda aligned: _plan_fast(kind, shape, dtype, dev, aligned))
    if p is None:
        return None
    expr, fptr, grid, block, codes, tail, acc, rows = p
    wp = 0 if weight is None else weight.data.ptr
    if stats:
        lead = shape[:-1]
        rstd = ndarray(lead, acc)
        mean = ndarray(lead, acc) if kind == "ln" else None
        sp = rstd.data.ptr
        mp = mean.data.ptr if mean is not None else 0
    else:   # the statistics are written but not returned: one buffer for both
        st = ndarray((2 * rows,) if kind == "ln" else (rows,), acc)
        mp = st.data.ptr
        sp = mp + rows * st.itemsize if kind == "ln" else mp
    if kind == "ln":
        ptrs = (x.data.ptr, wp, 0 if bias is None else bias.data.ptr, y.data.ptr, mp, sp)
    else:
        ptrs = (x.data.ptr, wp, y.data.ptr, sp)
    _planned.run(env, expr, fptr, grid, block, 0, codes, *ptrs, *tail, eps)
    if not stats:
        return y
    return (y, mean, rstd) if kind == "ln" else (y, rstd)
