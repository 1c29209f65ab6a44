"""Softmax and log_softmax kernels, forward and backward, over the rows of a (rows, cols) matrix.

Forward (y = exp(x - max) / sum, or log_softmax y = (x - max) - log(sum)):
- `ck_softmax_fwd_reg`: rows that fit in registers. `tpr` threads per row (a power of two, 1..1024;
  several rows per block when tpr < 256), NV packs of V elements (16 bytes) per thread. The whole
  row is loaded before any reduction (NV loads in flight per thread), converted to the
  accumulation type and kept there: max, then exp once (kept for softmax), then the sum, then the
  write. Traffic: rows*cols*sizeof(T) read + rows*cols*sizeof(T) written (one read, one write).
- `ck_softmax_fwd_loop`: longer rows (more than 32768 float32/bfloat16/float16 or 16384 float64,
  or odd rows past 8192): one block of 1024 threads per row; pass 1 is an online softmax (running
  max and rescaled running sum per thread, merged across the block), pass 2 reads the row again
  (mostly from L2) and writes. Traffic: 2 * rows*cols*sizeof(T) read + rows*cols*sizeof(T) written.
Backward (softmax: dx = y * (g - sum(g*y)); log_softmax: dx = g - exp(y) * sum(g), from the
forward's output y):
- `ck_softmax_bwd_reg`: g and y of the row in registers (raw 16-byte packs, converted in each
  pass). Traffic: 2 * rows*cols*sizeof(T) read + rows*cols*sizeof(T) written.
- `ck_softmax_bwd_smem`: rows too long for both in registers (e.g. 32768 float32): y goes to
  dynamic shared memory (cp.async, 16 bytes per copy, no registers), g stays in registers.
  Same traffic.
- `ck_softmax_bwd_loop`: longer rows: one block per row, the row read twice.
  Traffic: 4 * rows*cols*sizeof(T) read (half mostly L2 hits) + rows*cols*sizeof(T) written.

Accumulation is float32 for 16-bit types (exp of 16-bit inputs is ex2.approx of (x - max) * log2(e):
its error, a few float32 ulps, is far below the output's rounding) and float32 / float64 with the
accurate expf / exp otherwise.
Special values follow the NumPy formula exp(x - max(x)) / sum(...): a row holding NaN or +inf, or
a row of only -inf, gives NaN everywhere; -inf among finite values gives 0 (log_softmax: -inf).
Inputs are contiguous CuPy arrays on the current device of one dtype (float16, bfloat16, float32,
float64), validated by the caller (cudakit.backends.softmax_api).
"""
from __future__ import annotations

import numpy as np

from ..runtime import _cupy
from ..runtime.compiler import _launch_function
from . import _planned
from ._common import FLOAT_DTYPE_NAMES, PACK_HELPERS, PREAMBLE, KernelFamily, by_template, ctype, dtype_name, vec_width

# Device helpers shared with cudakit.kernels.cross_entropy: pack conversions, special values,
# exp, row reductions and the online-softmax merge.
HELPERS = PACK_HELPERS + r"""
extern __shared__ __align__(16) unsigned char ck_dyn_smem[];

#define CK_U 4        // independent vector loads a loop kernel issues before it uses any of them
#define CK_RED 512    // shared scratch per block for row reductions: 32 per row, rows of > 32 threads <= 16 per block

__device__ __forceinline__ float ck_ninf(float) { return __int_as_float(0xff800000); }
__device__ __forceinline__ double ck_ninf(double) { return __longlong_as_double(0xfff0000000000000ULL); }
__device__ __forceinline__ float ck_nan(float) { return __int_as_float(0x7fffffff); }
__device__ __forceinline__ double ck_nan(double) { return __longlong_as_double(0x7ff8000000000000ULL); }
// max ignoring NaN: a NaN in a row still reaches every output through the sum of exp.
__device__ __forceinline__ float ck_max(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double ck_max(double a, double b) { return fmax(a, b); }
__device__ __forceinline__ float ck_log(float a) { return logf(a); }
__device__ __forceinline__ double ck_log(double a) { return log(a); }
__device__ __forceinline__ float ck_exp_acc(float a) { return expf(a); }
// 1/s, correctly rounded: a row's outputs are then e * (1/s), one multiply each
__device__ __forceinline__ float ck_rcp(float a) { return __frcp_rn(a); }
__device__ __forceinline__ double ck_rcp(double a) { return __drcp_rn(a); }
__device__ __forceinline__ double ck_exp_acc(double a) { return exp(a); }

// exp(t) for t = x - max of a row of T: the accurate exp for float32 / float64; for 16-bit inputs
// one ex2.approx (2 ulp of float32, far below the 16-bit output's rounding).
template <typename T> __device__ __forceinline__ typename ck_traits<T>::acc ck_exp(typename ck_traits<T>::acc t) {
  if (sizeof(T) == 2) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"((float)t * 1.4426950408889634f));
    return r;
  }
  return ck_exp_acc(t);
}

// Reduces v (max or sum) over the blockDim.x threads of row threadIdx.y; all of them get the
// result. Groups of <= 32 threads use shuffles only; longer rows go through red (CK_RED entries)
// and synchronise the block, so every thread of the block must call it the same number of times.
template <bool MAX, typename C> __device__ __forceinline__ C ck_op(C a, C b) { return MAX ? ck_max(a, b) : a + b; }
template <bool MAX, typename C>
__device__ __forceinline__ C ck_group_red(C v, int G) {
  for (int off = G >> 1; off > 0; off >>= 1) v = ck_op<MAX>(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
template <bool MAX, typename C>
__device__ __forceinline__ C ck_row_red(C v, C* red) {
  const int tpr = blockDim.x;
  if (tpr <= 32) return ck_group_red<MAX>(v, tpr);
  v = ck_group_red<MAX>(v, 32);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = tpr >> 5;
  C* r = red + threadIdx.y * 32;
  if (lane == 0) r[warp] = v;
  __syncthreads();
  v = lane < nw ? r[lane] : (MAX ? ck_ninf(C(0)) : C(0));
  v = ck_group_red<MAX>(v, 32);
  __syncthreads();  // red is reused by the next call
  return v;
}

// Online softmax state (m = running max, s = sum of exp(x - m)). Merge of two states: a side
// below the new max rescales by exp(its max - new max); a side at it (both -inf included) keeps
// its sum, so rows of -inf give s = 0 and NaN only where the formula gives NaN.
template <typename T, typename C>
__device__ __forceinline__ void ck_ms_merge(C& m, C& s, C mb, C sb) {
  const C mn = ck_max(m, mb);
  s = (m == mn ? s : s * ck_exp<T>(m - mn)) + (mb == mn ? sb : sb * ck_exp<T>(mb - mn));
  m = mn;
}
// Adds V values to a thread's online state.
template <typename T, int V, typename C>
__device__ __forceinline__ void ck_ms_add(C& m, C& s, const C (&v)[V]) {
  C mp = m;
#pragma unroll
  for (int i = 0; i < V; ++i) mp = ck_max(mp, v[i]);
  if (mp > m) { s *= ck_exp<T>(m - mp); m = mp; }
  if (m == ck_ninf(C(0))) {  // only -inf (or NaN) so far: exp(x - m) would be NaN for -inf
#pragma unroll
    for (int i = 0; i < V; ++i) if (v[i] != v[i]) s += v[i];
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) s += ck_exp<T>(v[i] - m);
  }
}
// Merges the online states of the threads of a 1-D block; all get the result. red: 2 * 32 entries.
template <typename T, typename C>
__device__ __forceinline__ void ck_block_ms(C& m, C& s, C* red) {
  for (int off = 16; off > 0; off >>= 1) {
    const C mb = __shfl_xor_sync(0xffffffffu, m, off), sb = __shfl_xor_sync(0xffffffffu, s, off);
    ck_ms_merge<T>(m, s, mb, sb);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  if (lane == 0) { red[warp] = m; red[32 + warp] = s; }
  __syncthreads();
  m = lane < nw ? red[lane] : ck_ninf(C(0));
  s = lane < nw ? red[32 + lane] : C(0);
  for (int off = 16; off > 0; off >>= 1) {
    const C mb = __shfl_xor_sync(0xffffffffu, m, off), sb = __shfl_xor_sync(0xffffffffu, s, off);
    ck_ms_merge<T>(m, s, mb, sb);
  }
  __syncthreads();
}

// Largest block of a kernel holding NV*V values of the accumulation type per thread: up to 128
// bytes (32 registers) 1024 threads, up to 256 bytes 512, else 256. Mirrored by _fwd_bound.
template <typename T, int V, int NV> struct ck_fwd_bound {
  enum { bytes = NV * V * (int)sizeof(typename ck_traits<T>::acc),
         value = bytes <= 128 ? 1024 : bytes <= 256 ? 512 : 256 };
};
"""

SOURCE = PREAMBLE + HELPERS + r"""
// ================================================================ forward
// x, y: [rows, nvec*V]; block (tpr, rpb): row blockIdx.x*rpb + threadIdx.y; its thread tx holds
// the packs tx, tx + tpr, ... (NV of them). log != 0: log_softmax.
// Traffic: rows*cols*sizeof(T) read + rows*cols*sizeof(T) written.
template <typename T, int V, int NV>
__global__ void __launch_bounds__(ck_fwd_bound<T, V, NV>::value) ck_softmax_fwd_reg(
    const T* __restrict__ x, T* __restrict__ y, long long rows, int nvec, int is_log) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C red[CK_RED];
  const int tpr = blockDim.x;
  const long long row = (long long)blockIdx.x * blockDim.y + threadIdx.y;
  // packs of this thread: k = threadIdx.x + j*tpr < n (n = 0 past the last row)
  const int n = row < rows ? nvec - (int)threadIdx.x : 0;
  const long long off = (row < rows ? row : 0) * (long long)nvec + threadIdx.x;
  const R* __restrict__ xr = reinterpret_cast<const R*>(x) + off;
  ck_pack<T, V> p[NV];
#pragma unroll
  for (int j = 0; j < NV; ++j) if (j * tpr < n) p[j].raw = xr[j * tpr];  // the whole row first
  // padding past the row's end is -inf: the passes below need no predicates (its exp is 0
  // unless the row's max is -inf, and such a row is NaN anyway)
  C v[NV][V];
  C m = ck_ninf(C(0));
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (j * tpr < n) {
      ck_cvt<T, V>::load(p[j], v[j]);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) v[j][i] = ck_ninf(C(0));
    }
#pragma unroll
    for (int i = 0; i < V; ++i) m = ck_max(m, v[j][i]);
  }
  m = ck_row_red<true>(m, red);
  C s = C(0);
#pragma unroll
  for (int j = 0; j < NV; ++j) {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const C e = ck_exp<T>(v[j][i] - m);
      s += e;
      if (!is_log) v[j][i] = e;
    }
  }
  s = ck_row_red<false>(s, red);
  const C a = is_log ? ck_log(s) : ck_rcp(s);
  R* __restrict__ yr = reinterpret_cast<R*>(y) + off;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (j * tpr < n) {
      C o[V];
#pragma unroll
      for (int i = 0; i < V; ++i) o[i] = is_log ? (v[j][i] - m) - a : v[j][i] * a;
      ck_pack<T, V> po;
      ck_cvt<T, V>::store(po, o);
      yr[j * tpr] = po.raw;
    }
  }
}

// Long rows. x, y: [rows, nvec*V]; one 1-D block per row (blockIdx.x).
// Traffic: 2 * rows*cols*sizeof(T) read (the second mostly from L2) + rows*cols*sizeof(T) written.
template <typename T, int V>
__global__ void __launch_bounds__(1024) ck_softmax_fwd_loop(
    const T* __restrict__ x, T* __restrict__ y, int nvec, int is_log) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C red[64];
  const long long row = blockIdx.x;
  const R* __restrict__ xr = reinterpret_cast<const R*>(x) + row * nvec;
  const int step = blockDim.x * CK_U;
  C m = ck_ninf(C(0)), s = C(0);
  for (int k0 = threadIdx.x; k0 < nvec; k0 += step) {
    ck_pack<T, V> p[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) { const int k = k0 + u * blockDim.x; if (k < nvec) p[u].raw = xr[k]; }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      if (k0 + u * blockDim.x < nvec) {
        C v[V];
        ck_cvt<T, V>::load(p[u], v);
        ck_ms_add<T, V>(m, s, v);
      }
    }
  }
  ck_block_ms<T>(m, s, red);
  const C a = is_log ? ck_log(s) : ck_rcp(s);
  R* __restrict__ yr = reinterpret_cast<R*>(y) + row * nvec;
  for (int k0 = threadIdx.x; k0 < nvec; k0 += step) {
    ck_pack<T, V> p[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) { const int k = k0 + u * blockDim.x; if (k < nvec) p[u].raw = xr[k]; }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const int k = k0 + u * blockDim.x;
      if (k < nvec) {
        C v[V];
        ck_cvt<T, V>::load(p[u], v);
#pragma unroll
        for (int i = 0; i < V; ++i) v[i] = is_log ? (v[i] - m) - a : ck_exp<T>(v[i] - m) * a;
        ck_pack<T, V> po;
        ck_cvt<T, V>::store(po, v);
        yr[k] = po.raw;
      }
    }
  }
}

// ================================================================ backward
// g (grad of y), y (the forward's output), dx: [rows, nvec*V]; layout as ck_softmax_fwd_reg.
// softmax: dx = y * (g - sum(g*y)); log_softmax (log != 0): dx = g - exp(y) * sum(g).
// Traffic: 2 * rows*cols*sizeof(T) read + rows*cols*sizeof(T) written.
// Largest block: the raw packs of g and y, 2*NV*V*sizeof(T) bytes per thread; mirrored by _bwd_bound.
template <typename T, int V, int NV> struct ck_bwd_bound {
  enum { bytes = 2 * NV * V * (int)sizeof(T), value = bytes <= 128 ? 1024 : bytes <= 256 ? 512 : 256 };
};

template <typename T, int V, int NV>
__global__ void __launch_bounds__(ck_bwd_bound<T, V, NV>::value) ck_softmax_bwd_reg(
    const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ dx, long long rows, int nvec, int is_log) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C red[CK_RED];
  const int tpr = blockDim.x;
  const long long row = (long long)blockIdx.x * blockDim.y + threadIdx.y;
  const int n = row < rows ? nvec - (int)threadIdx.x : 0;  // this thread's packs: j*tpr < n
  const long long off = (row < rows ? row : 0) * (long long)nvec + threadIdx.x;
  const R* __restrict__ gr = reinterpret_cast<const R*>(g) + off;
  const R* __restrict__ yr = reinterpret_cast<const R*>(y) + off;
  // padding past the row's end is zero bits (+0.0): it adds nothing to the sum, no predicates
  ck_pack<T, V> pg[NV], py[NV];
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    pg[j].raw = R();
    py[j].raw = R();
    if (j * tpr < n) { pg[j].raw = gr[j * tpr]; py[j].raw = yr[j * tpr]; }
  }
  C s = C(0);
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    C gv[V], yv[V];
    ck_cvt<T, V>::load(pg[j], gv);
    ck_cvt<T, V>::load(py[j], yv);
#pragma unroll
    for (int i = 0; i < V; ++i) s += is_log ? gv[i] : gv[i] * yv[i];
  }
  s = ck_row_red<false>(s, red);
#pragma unroll
  for (int j = 0; j < NV; ++j) { ck_opaque(pg[j].raw); ck_opaque(py[j].raw); }
  R* __restrict__ dr = reinterpret_cast<R*>(dx) + off;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (j * tpr < n) {
      C gv[V], yv[V];
      ck_cvt<T, V>::load(pg[j], gv);
      ck_cvt<T, V>::load(py[j], yv);
#pragma unroll
      for (int i = 0; i < V; ++i) gv[i] = is_log ? gv[i] - ck_exp<T>(yv[i]) * s : yv[i] * (gv[i] - s);
      ck_pack<T, V> po;
      ck_cvt<T, V>::store(po, gv);
      dr[j * tpr] = po.raw;
    }
  }
}

// Copies 16 bytes global -> shared without registers (cp.async, sm_80+).
__device__ __forceinline__ void ck_cp16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned int sa = (unsigned int)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(sa), "l"(gmem) : "memory");
#else
  *reinterpret_cast<uint4*>(smem) = *reinterpret_cast<const uint4*>(gmem);
#endif
}
__device__ __forceinline__ void ck_cp_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// Rows too long for g and y both in registers: one 1-D block per row (blockIdx.x), g in
// registers (NV packs per thread), y in dynamic shared memory (nvec 16-byte packs; each thread
// copies and reads back only its own packs, so no block barrier is needed for them).
// Shapes and traffic as ck_softmax_bwd_reg. V*sizeof(T) must be 16.
template <typename T, int V, int NV>
__global__ void __launch_bounds__(1024) ck_softmax_bwd_smem(
    const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ dx, int nvec, int is_log) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C red[CK_RED];
  R* ys = reinterpret_cast<R*>(ck_dyn_smem) + threadIdx.x;
  const int tpr = blockDim.x;
  const int n = nvec - (int)threadIdx.x;  // this thread's packs: j*tpr < n
  const long long off = (long long)blockIdx.x * nvec + threadIdx.x;
  const R* __restrict__ gr = reinterpret_cast<const R*>(g) + off;
  const R* __restrict__ yr = reinterpret_cast<const R*>(y) + off;
#pragma unroll
  for (int j = 0; j < NV; ++j) if (j * tpr < n) ck_cp16(ys + j * tpr, yr + j * tpr);
  ck_pack<T, V> pg[NV];
#pragma unroll
  for (int j = 0; j < NV; ++j) { pg[j].raw = R(); if (j * tpr < n) pg[j].raw = gr[j * tpr]; }
  ck_cp_wait();
  C s = C(0);
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (j * tpr < n) {
      ck_pack<T, V> py;
      py.raw = ys[j * tpr];
      C gv[V], yv[V];
      ck_cvt<T, V>::load(pg[j], gv);
      ck_cvt<T, V>::load(py, yv);
#pragma unroll
      for (int i = 0; i < V; ++i) s += is_log ? gv[i] : gv[i] * yv[i];
    }
  }
  s = ck_row_red<false>(s, red);
#pragma unroll
  for (int j = 0; j < NV; ++j) ck_opaque(pg[j].raw);
  R* __restrict__ dr = reinterpret_cast<R*>(dx) + off;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (j * tpr < n) {
      ck_pack<T, V> py, po;
      py.raw = ys[j * tpr];
      C gv[V], yv[V];
      ck_cvt<T, V>::load(pg[j], gv);
      ck_cvt<T, V>::load(py, yv);
#pragma unroll
      for (int i = 0; i < V; ++i) gv[i] = is_log ? gv[i] - ck_exp<T>(yv[i]) * s : yv[i] * (gv[i] - s);
      ck_cvt<T, V>::store(po, gv);
      dr[j * tpr] = po.raw;
    }
  }
}

// Long rows: one 1-D block per row; pass 1 sums, pass 2 reads g and y again and writes dx.
// Traffic: 4 * rows*cols*sizeof(T) read (half mostly L2 hits) + rows*cols*sizeof(T) written.
template <typename T, int V>
__global__ void __launch_bounds__(1024) ck_softmax_bwd_loop(
    const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ dx, int nvec, int is_log) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C red[CK_RED];
  const long long base = (long long)blockIdx.x * nvec;
  const R* __restrict__ gr = reinterpret_cast<const R*>(g) + base;
  const R* __restrict__ yr = reinterpret_cast<const R*>(y) + base;
  const int step = blockDim.x * CK_U;
  C s = C(0);
  for (int k0 = threadIdx.x; k0 < nvec; k0 += step) {
    ck_pack<T, V> pg[CK_U], py[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const int k = k0 + u * blockDim.x;
      if (k < nvec) { pg[u].raw = gr[k]; if (!is_log) py[u].raw = yr[k]; }
    }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      if (k0 + u * blockDim.x < nvec) {
        C gv[V], yv[V];
        ck_cvt<T, V>::load(pg[u], gv);
        if (!is_log) ck_cvt<T, V>::load(py[u], yv);
#pragma unroll
        for (int i = 0; i < V; ++i) s += is_log ? gv[i] : gv[i] * yv[i];
      }
    }
  }
  s = ck_row_red<false>(s, red);
  R* __restrict__ dr = reinterpret_cast<R*>(dx) + base;
  for (int k0 = threadIdx.x; k0 < nvec; k0 += step) {
    ck_pack<T, V> pg[CK_U], py[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const int k = k0 + u * blockDim.x;
      if (k < nvec) { pg[u].raw = gr[k]; py[u].raw = yr[k]; }
    }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const int k = k0 + u * blockDim.x;
      if (k < nvec) {
        C gv[V], yv[V];
        ck_cvt<T, V>::load(pg[u], gv);
        ck_cvt<T, V>::load(py[u], yv);
#pragma unroll
        for (int i = 0; i < V; ++i) gv[i] = is_log ? gv[i] - ck_exp<T>(yv[i]) * s : yv[i] * (gv[i] - s);
        ck_pack<T, V> po;
        ck_cvt<T, V>::store(po, gv);
        dr[k] = po.raw;
      }
    }
  }
}
"""

# ------------------------------------------------------------------------------------------
# Instantiations and launch plans

REG_NV = (1, 2, 4, 8)     # packs per thread of the register-row kernels (16-byte packs)
REG_NV_SCALAR = (4, 8)    # the same for single elements (odd rows): fewer instantiations to compile
# Packs per thread the plans aim at: the forward keeps NV*V accumulation values per thread; the
# backward keeps the raw packs of g and y (twice the bytes), so it aims at fewer per thread.
FWD_TARGET_NV = 4
# Rows of at most this many packs: one pack per thread (a warp or less per row). Measured on an
# H100 (scripts/softmax_variants.py, 2026-11-23, 262144x128): 1.5% (float32) and 2% (bfloat16)
# faster than FWD_TARGET_NV packs per thread, at the copy bandwidth.
SHORT_ROW_PACKS = 32
BWD_TARGET_NV = 2
LOOP_THREADS = 1024       # block size of the one-block-per-row kernels
SMEM_THREADS = 1024       # block size of ck_softmax_bwd_smem
ROWS_BLOCK = 256          # threads of a block shared by several short rows
_MAX_TPR = 1024
_ACC_ITEM = {"float16": 4, "bfloat16": 4, "float32": 4, "float64": 8}
_ITEM = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def _vecs(dtype_name: str) -> tuple:
    """The vector widths instantiated for a dtype: 16-byte packs and single elements."""
    return (vec_width(dtype_name), 1)


def reg_nvs(v: int) -> tuple:
    """The packs-per-thread counts instantiated for vector width v."""
    return REG_NV if v > 1 else REG_NV_SCALAR


def name_expressions(dtype=None) -> list[str]:
    """Every template instantiation this module launches (for one dtype name when given)."""
    out = []
    for dt in (FLOAT_DTYPE_NAMES if dtype is None else (dtype,)):
        t = ctype(dt)
        for v in _vecs(dt):
            for nv in reg_nvs(v):
                out += [f"ck_softmax_fwd_reg<{t}, {v}, {nv}>", f"ck_softmax_bwd_reg<{t}, {v}, {nv}>"]
            out += [f"ck_softmax_fwd_loop<{t}, {v}>", f"ck_softmax_bwd_loop<{t}, {v}>"]
        vw = vec_width(dt)
        out += [f"ck_softmax_bwd_smem<{t}, {vw}, {nv}>" for nv in REG_NV]
    return out


# one family per dtype: each dtype compiles only its own instantiations
_families = {dt: KernelFamily(SOURCE, (lambda dt=dt: name_expressions(dt)), f"cudakit/softmax_{dt}.cu",
                                group=by_template)
             for dt in FLOAT_DTYPE_NAMES}
_smem_set: dict = {}      # (device, expr) -> dynamic shared memory limit set so far


def launch(families: dict, expr: str, dtype_name: str, grid: tuple, block: tuple, args: tuple,
           smem: int = 0) -> None:
    """Launch `expr` of the per-dtype KernelFamily dict `families` on the current device, raising
    the kernel's dynamic shared-memory limit first when it needs more than 48 KB."""
    dev = _cupy.loaded_cupy().cuda.runtime.getDevice()
    _launch_function(expr, _function(families, dev, dtype_name, expr, smem), grid, block, args, smem, None)


def _function(families: dict, dev: int, dtype_name: str, expr: str, smem: int = 0):
    """The compiled `expr` on device dev, its dynamic shared-memory limit raised to smem when that
    is more than 48 KB."""
    fam = families[dtype_name]
    f = fam.function(dev, expr)
    if smem > 48 * 1024 and _smem_set.get((dev, expr), 0) < smem:
        fam.kernel(expr).set_max_dynamic_shared_memory(smem)
        _smem_set[(dev, expr)] = smem
    return f


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p


def fwd_bound(nv: int, v: int, dtype_name: str) -> int:
    """Largest block of a kernel holding nv*v accumulation values per thread (ck_fwd_bound)."""
    b = nv * v * _ACC_ITEM[dtype_name]
    return 1024 if b <= 128 else 512 if b <= 256 else 256


def bwd_bound(nv: int, v: int, dtype_name: str) -> int:
    """Largest block of ck_softmax_bwd_reg<T, v, nv> (ck_bwd_bound)."""
    b = 2 * nv * v * _ITEM[dtype_name]
    return 1024 if b <= 128 else 512 if b <= 256 else 256


def reg_plan(nvec: int, target_nv: int, bound, nvs=REG_NV):
    """(tpr, NV, rpb) for a register-row kernel, or None when the row is too long to hold.

    tpr, the threads per row, is the power of two giving each thread about `target_nv` packs (at
    most 1024); NV is the smallest of the instantiated counts `nvs` covering the row; short rows
    share a block of ROWS_BLOCK threads. bound(NV) -> the kernel's largest block.
    """
    tpr = min(_MAX_TPR, _pow2_at_least(max(1, -(-nvec // target_nv))))
    while True:
        need = -(-nvec // tpr)
        nv = next((n for n in nvs if n >= need), None)
        if nv is None:
            return None
        limit = bound(nv)
        if tpr <= limit:
            rpb = max(1, min(ROWS_BLOCK, limit) // tpr)
            if tpr > 32:
                rpb = min(rpb, 16)  # CK_RED: 32 reduction slots per row
            return tpr, nv, rpb
        tpr = limit  # fewer threads per row, more packs each: may need a larger NV


def vec_for(cols: int, dtype_name: str, *arrays) -> int:
    """16-byte packs when cols is a multiple of the pack and every array is 16-byte aligned."""
    v = vec_width(dtype_name)
    if cols % v == 0 and all(a.data.ptr % 16 == 0 for a in arrays):
        return v
    return 1


# ------------------------------------------------------------------------------------------
# host wrappers

_fwd_plans: dict = {}  # (dtype name, v, nvec, target) -> (expr, threads per row, rows per block)


def _fwd_plan(dt: str, v: int, nvec: int, target: int):
    key = (dt, v, nvec, target)
    p = _fwd_plans.get(key)
    if p is None:
        t = ctype(dt)
        plan = reg_plan(nvec, target, lambda nv: fwd_bound(nv, v, dt), reg_nvs(v))
        if plan is not None:
            tpr, nv, rpb = plan
            p = (f"ck_softmax_fwd_reg<{t}, {v}, {nv}>", tpr, rpb)
        else:
            p = (f"ck_softmax_fwd_loop<{t}, {v}>", LOOP_THREADS, 0)
        _fwd_plans[key] = p
    return p


def fwd_target(nvec: int, v: int) -> int:
    """Packs per thread the forward plan aims at for rows of nvec packs of v elements (single
    elements have no one-pack instantiation: see REG_NV_SCALAR)."""
    return 1 if nvec <= SHORT_ROW_PACKS and v > 1 else FWD_TARGET_NV


def softmax_forward(x2d, log: bool = False, out=None, plan_nv=None):
    """softmax (log=False) or log_softmax (log=True) of each row of `x2d`.

    x2d: (rows, cols) contiguous, float16/bfloat16/float32/float64. out: optional (rows, cols)
    array of x2d's dtype for the result. Returns y like x2d.
    """
    cp = _cupy.loaded_cupy()
    rows, cols = x2d.shape
    dt = dtype_name(x2d.dtype)
    y = cp.ndarray(x2d.shape, x2d.dtype) if out is None else out
    if rows == 0 or cols == 0:
        return y
    v = vec_for(cols, dt, x2d, y)
    nvec = cols // v
    expr, grid, block, smem, with_rows = _fwd_launch(dt, v, nvec, rows, plan_nv)
    tail = (np.int32(nvec), np.int32(bool(log)))
    launch(_families, expr, dt, grid, block, (x2d, y, *((np.int64(rows),) if with_rows else ()), *tail), smem)
    return y


def _fwd_launch(dt: str, v: int, nvec: int, rows: int, plan_nv=None):
    """(expr, grid, block, shared bytes, whether the kernel takes `rows`) of the forward over rows
    of nvec packs of v elements."""
    expr, tpr, rpb = _fwd_plan(dt, v, nvec, plan_nv or fwd_target(nvec, v))
    if rpb:
        return expr, (-(-rows // rpb), 1, 1), (tpr, rpb, 1), 0, True
    return expr, (rows, 1, 1), (tpr, 1, 1), 0, False


def _smem_plan(nvec: int, v: int, dtype_name: str):
    """(tpr, NV, bytes) for ck_softmax_bwd_smem, or None: 16-byte packs, the row's g in at most
    8 packs per thread of SMEM_THREADS, its y (nvec*16 bytes) in at most 128 KB of shared memory."""
    if v * _ITEM[dtype_name] != 16:
        return None
    need = -(-nvec // SMEM_THREADS)
    nv = next((n for n in REG_NV if n >= need), None)
    if nv is None or nvec * 16 > 128 * 1024:
        return None
    tpr = min(SMEM_THREADS, max(32, _pow2_at_least(-(-nvec // nv))))
    return tpr, nv, nvec * 16


def softmax_backward(g2d, y2d, log: bool = False, out=None, plan_nv=None):
    """Gradient of softmax_forward from its output: log=False: dx = y * (g - sum(g*y));
    log=True (y = log_softmax output): dx = g - exp(y) * sum(g), sums over each row.

    g2d, y2d: (rows, cols) contiguous of one dtype. Returns dx like y2d (into `out` when given).
    """
    cp = _cupy.loaded_cupy()
    rows, cols = y2d.shape
    dt = dtype_name(y2d.dtype)
    dx = cp.ndarray(y2d.shape, y2d.dtype) if out is None else out
    if rows == 0 or cols == 0:
        return dx
    v = vec_for(cols, dt, g2d, y2d, dx)
    nvec = cols // v
    expr, grid, block, smem, with_rows = _bwd_launch(dt, v, nvec, rows, plan_nv)
    tail = (np.int32(nvec), np.int32(bool(log)))
    launch(_families, expr, dt, grid, block, (g2d, y2d, dx, *((np.int64(rows),) if with_rows else ()), *tail), smem)
    return dx


def _bwd_launch(dt: str, v: int, nvec: int, rows: int, plan_nv=None):
    """(expr, grid, block, shared bytes, whether the kernel takes `rows`) of the backward: register
    rows, else the row's y in shared memory, else the loop."""
    t = ctype(dt)
    plan = reg_plan(nvec, plan_nv or BWD_TARGET_NV, lambda nv: bwd_bound(nv, v, dt), reg_nvs(v))
    if plan is not None:
        tpr, nv, rpb = plan
        return f"ck_softmax_bwd_reg<{t}, {v}, {nv}>", (-(-rows // rpb), 1, 1), (tpr, rpb, 1), 0, True
    sp = _smem_plan(nvec, v, dt)
    if sp is not None:
        tpr, nv, smem = sp
        return f"ck_softmax_bwd_smem<{t}, {v}, {nv}>", (rows, 1, 1), (tpr, 1, 1), smem, False
    return f"ck_softmax_bwd_loop<{t}, {v}>", (rows, 1, 1), (LOOP_THREADS, 1, 1), 0, False


# ------------------------------------------------------------------------------------------
# the host-time path of the common call (ops.softmax, Backend.softmax, their backward)

_fast: dict = {}   # (kind, shape, dtype, device, 16-byte aligned) -> launch plan, or None: not this path


def _plan_fast(kind: str, shape: tuple, dtype, dev: int, aligned: bool):
    """(expr, function pointer, grid, block, shared bytes, codes, tail values) of the launch that
    softmax_forward (kind "fwd") or softmax_backward ("bwd", "fwd_log", "bwd_log") makes for a
    C-contiguous array of this shape over its last axis; None when the shape takes no kernel (empty)
    or the dtype is not one of the kernels'."""
    dt = dtype_name(dtype)
    if dt not in FLOAT_DTYPE_NAMES or not shape or shape[-1] == 0:
        return None
    cols = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    if rows == 0:
        return None
    vw = vec_width(dt)
    v = vw if aligned and cols % vw == 0 else 1
    nvec = cols // v
    fwd = kind.startswith("fwd")
    expr, grid, block, smem, with_rows = (_fwd_launch if fwd else _bwd_launch)(dt, v, nvec, rows)
    arrays = b"QQ" if fwd else b"QQQ"   # the inputs and the result
    codes, tail = arrays + (b"Qii" if with_rows else b"ii"), (nvec, int(kind.endswith("_log")))
    if with_rows:
        tail = (rows, *tail)
    f = _function(_families, dev, dt, expr, smem)
    return expr, f.ptr, grid, block, smem, codes, tail


def _run_fast(kind: str, arrays: tuple):
    """The kernel of `kind` over `arrays` (the inputs, C-contiguous, one shape and dtype) into a new
    array, through the planned launch; None where the path does not apply (the caller takes the
    checked one): not all CuPy arrays on the current device, an empty or unsupported array, or
    _planned.ready() declines."""
    env = _planned.ready()
    if env is None:
        return None
    _, ndarray, get_device, _ = env
    x = arrays[0]
    if type(x) is not ndarray:
        return None
    dev = get_device()
    shape, dtype = x.shape, x.dtype
    al = 0
    for a in arrays:
        if type(a) is not ndarray or not a._c_contiguous or a.data.device_id != dev or (
                a is not x and (a.shape != shape or a.dtype != dtype)):
            return None
        al |= a.data.ptr
    out, p = _planned.output_and_plan(_fast, (kind, shape, dtype, dev), ndarray, shape, dtype, al,
                                      lambda aligned: _plan_fast(kind, shape, dtype, dev, aligned))
    if p is None:
        return None
    expr, fptr, grid, block, smem, codes, tail = p
    _planned.run(env, expr, fptr, grid, block, smem, codes, *[a.data.ptr for a in arrays], out.data.ptr, *tail)
    return out


def forward_fast(x, log: bool = False):
    """softmax_forward over the last axis of x (any shape), as a new array of x's shape, through a
    launch planned once per (shape, dtype, device, alignment); None where that path does not apply
    (see _run_fast). Rows need no (rows, cols) view: the kernels see x's memory as rows."""
    return _run_fast("fwd_log" if log else "fwd", (x,))


def backward_fast(grad_out, y, log: bool = False):
    """softmax_backward over the last axis (grad_out and y of one shape and dtype, else None), as
    forward_fast."""
    return _run_fast("bwd_log" if log else "bwd", (grad_out, y))
