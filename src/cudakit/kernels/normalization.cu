
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

// Merges the Welford states of the 32 lanes of a warp in a fixed order into lane 0's.
template <typename C>
__device__ __forceinline__ void ck_warp_welford(C& n, C& m, C& m2) {
  for (int off = 16; off > 0; off >>= 1) {
    const C nb = __shfl_down_sync(0xffffffffu, n, off);
    const C mb = __shfl_down_sync(0xffffffffu, m, off);
    const C m2b = __shfl_down_sync(0xffffffffu, m2, off);
    ck_welford_merge(n, m, m2, nb, mb, m2b);
  }
}

// Merges the Welford states of all threads of a 1-D block (blockDim.x <= 1024) in a fixed order;
// every thread gets the result. sh: shared scratch of 3 * 32.
template <typename C>
__device__ __forceinline__ void ck_block_welford(C& n, C& m, C& m2, C* sh) {
  ck_warp_welford(n, m, m2);
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
  CK_PDL_WAIT();
  ck_norm_fwd_reg<T, V, NV, false>(x, w, b, y, mean, rstd, rows, cols, eps);
}

template <typename T, int V, int NV>
__global__ void __launch_bounds__(ck_fwd_bound<T, V, NV>::value, 1) ck_rms_fwd_reg(
    const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
    typename ck_traits<T>::acc* __restrict__ rstd, long long rows, int cols, typename ck_traits<T>::acc eps) {
  CK_PDL_WAIT();
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
  CK_PDL_WAIT();
  ck_norm_fwd_loop<T, V, false>(x, w, b, y, mean, rstd, cols, eps);
}

template <typename T, int V>
__global__ void __launch_bounds__(1024, 1) ck_rms_fwd_loop(
    const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
    typename ck_traits<T>::acc* __restrict__ rstd, int cols, typename ck_traits<T>::acc eps) {
  CK_PDL_WAIT();
  ck_norm_fwd_loop<T, V, true>(x, w, (const T*)0, y, (typename ck_traits<T>::acc*)0, rstd, cols, eps);
}

// ================================================================ layernorm / rmsnorm backward
// dy, x, dx: [rows, cols]; w: [cols] or null; mean (layernorm only), rstd: [rows]; res (RES, the
// *_res kernels): [rows, cols], added to dx before its rounding (a residual path's gradient; a
// template of its own: its registers would make the 1024-thread 16-bit plain kernels spill);
// part: [gridDim.x, NP, cols] partial sums (NP = 2 for layernorm: sum of dy*xhat, sum of dy;
// NP = 1 for rmsnorm: sum of dy*xhat) over the rows of each block.
// Block b takes rows [b*chunk, min(rows, (b+1)*chunk)); its row-lane ty the rows b*chunk + ty,
// + rpb, ...; the row itself sits in registers as in the forward kernel. Each thread accumulates
// its own columns' dweight/dbias in dynamic shared memory: thread (tx, ty) owns the
// S = NP*NV*V + 1 words at (ty*tpr + tx)*S, [p][j][i] inside; compile-time offsets need no
// address registers, and the odd stride S keeps a warp's accesses free of bank conflicts.
// At the end the block sums its row-lanes in order.
// Traffic: (2 + RES) * rows*cols*sizeof(T) read + rows*cols*sizeof(T) written
// + gridDim.x*NP*cols*sizeof(acc).
// Largest block of the fused backward: x and dy (NV*V elements each) stay in registers, so more
// of them per thread leave room for fewer threads. Up to 64 bytes each of float (32 of double,
// whose arithmetic takes register pairs, or of 16-bit types, which unpack to twice the registers)
// it fits in 64 registers (1024 threads); twice that needs about 150 (256 threads).
// Mirrored by _bwd_bound in Python.
template <typename T, int V, int NV> struct ck_bwd_bound {
  enum { bytes = NV * V * (int)sizeof(T), value = bytes <= (sizeof(T) == 4 ? 64 : 32) ? 1024 : 256 };
};

template <typename T, int V, int NV, bool RMS, bool RES>
__device__ __forceinline__ void ck_norm_bwd_reg(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
    const typename ck_traits<T>::acc* __restrict__ mean, const typename ck_traits<T>::acc* __restrict__ rstd,
    const T* __restrict__ res, T* __restrict__ dx, typename ck_traits<T>::acc* __restrict__ part,
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
        ck_pack<T, V> pw, po, pr;
        C xv[V], gv[V], wv[V], ov[V], rv[V];
        if (w) { pw.raw = wr[k]; ck_cvt<T, V>::load(pw, wv); }
        if (RES) { pr.raw = reinterpret_cast<const R*>(res)[base + k]; ck_cvt<T, V>::load(pr, rv); }
        ck_cvt<T, V>::load(px[j], xv);
        ck_cvt<T, V>::load(pg[j], gv);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const C xh = (xv[i] - mu) * rs;
          const C d = gv[i];
          const C g = w ? d * wv[i] : d;
          ov[i] = RMS ? rs * (g - xh * mgx) : rs * (g - mg - xh * mgx);
          if (RES) ov[i] += rv[i];
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
  CK_PDL_WAIT();
  ck_norm_bwd_reg<T, V, NV, false, false>(dy, x, w, mean, rstd, (const T*)0, dx, part, rows, cols, chunk);
}

template <typename T, int V, int NV>
__global__ void __launch_bounds__(ck_bwd_bound<T, V, NV>::value, 1) ck_rms_bwd_reg(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
    const typename ck_traits<T>::acc* __restrict__ rstd,
    T* __restrict__ dx, typename ck_traits<T>::acc* __restrict__ part, long long rows, int cols, long long chunk) {
  CK_PDL_WAIT();
  ck_norm_bwd_reg<T, V, NV, true, false>(dy, x, w, (const typename ck_traits<T>::acc*)0, rstd, (const T*)0, dx, part,
                                         rows, cols, chunk);
}

// The same with res (the residual path's gradient added to dx).
template <typename T, int V, int NV>
__global__ void __launch_bounds__(ck_bwd_bound<T, V, NV>::value, 1) ck_ln_bwd_reg_res(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
    const typename ck_traits<T>::acc* __restrict__ mean, const typename ck_traits<T>::acc* __restrict__ rstd,
    const T* __restrict__ res, T* __restrict__ dx, typename ck_traits<T>::acc* __restrict__ part, long long rows,
    int cols, long long chunk) {
  CK_PDL_WAIT();
  ck_norm_bwd_reg<T, V, NV, false, true>(dy, x, w, mean, rstd, res, dx, part, rows, cols, chunk);
}

template <typename T, int V, int NV>
__global__ void __launch_bounds__(ck_bwd_bound<T, V, NV>::value, 1) ck_rms_bwd_reg_res(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
    const typename ck_traits<T>::acc* __restrict__ rstd, const T* __restrict__ res,
    T* __restrict__ dx, typename ck_traits<T>::acc* __restrict__ part, long long rows, int cols, long long chunk) {
  CK_PDL_WAIT();
  ck_norm_bwd_reg<T, V, NV, true, true>(dy, x, w, (const typename ck_traits<T>::acc*)0, rstd, res, dx, part, rows,
                                        cols, chunk);
}

// Long rows, dx only (dweight/dbias come from ck_*_bwd_cols). dy, x, dx: [rows, cols]; w: [cols]
// or null; mean, rstd: [rows]; res (RES, the *_res kernels): [rows, cols], added to dx before its rounding. One 1-D
// block per row: pass 1 sums w*dy and w*dy*xhat, pass 2 reads the row again (mostly from L2) and
// writes dx.
// Traffic: (4 + RES) * rows*cols*sizeof(T) read (2 of them largely L2 hits)
// + rows*cols*sizeof(T) written.
template <typename T, int V, bool RMS, bool RES>
__device__ __forceinline__ void ck_norm_bwd_loop(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
    const typename ck_traits<T>::acc* __restrict__ mean, const typename ck_traits<T>::acc* __restrict__ rstd,
    const T* __restrict__ res, T* __restrict__ dx, int cols) {
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
  const R* __restrict__ rr = RES ? reinterpret_cast<const R*>(res) + row * nvec : (const R*)0;
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
        ck_pack<T, V> pw, po, pr;
        if (w) pw.raw = wr[k];
        if (RES) pr.raw = rr[k];
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const C xh = (tr::load(px[u].v[i]) - mu) * rs;
          C g = tr::load(pg[u].v[i]);
          if (w) g *= tr::load(pw.v[i]);
          C o = RMS ? rs * (g - xh * mgx) : rs * (g - mg - xh * mgx);
          if (RES) o += tr::load(pr.v[i]);
          po.v[i] = tr::store(o);
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
  CK_PDL_WAIT();
  ck_norm_bwd_loop<T, V, false, false>(dy, x, w, mean, rstd, (const T*)0, dx, cols);
}

template <typename T, int V>
__global__ void __launch_bounds__(1024, 1) ck_rms_bwd_loop(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
    const typename ck_traits<T>::acc* __restrict__ rstd, T* __restrict__ dx, int cols) {
  CK_PDL_WAIT();
  ck_norm_bwd_loop<T, V, true, false>(dy, x, w, (const typename ck_traits<T>::acc*)0, rstd, (const T*)0, dx, cols);
}

template <typename T, int V>
__global__ void __launch_bounds__(1024, 1) ck_ln_bwd_loop_res(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
    const typename ck_traits<T>::acc* __restrict__ mean, const typename ck_traits<T>::acc* __restrict__ rstd,
    const T* __restrict__ res, T* __restrict__ dx, int cols) {
  CK_PDL_WAIT();
  ck_norm_bwd_loop<T, V, false, true>(dy, x, w, mean, rstd, res, dx, cols);
}

template <typename T, int V>
__global__ void __launch_bounds__(1024, 1) ck_rms_bwd_loop_res(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
    const typename ck_traits<T>::acc* __restrict__ rstd, const T* __restrict__ res, T* __restrict__ dx, int cols) {
  CK_PDL_WAIT();
  ck_norm_bwd_loop<T, V, true, true>(dy, x, w, (const typename ck_traits<T>::acc*)0, rstd, res, dx, cols);
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
  CK_PDL_WAIT();
  ck_norm_bwd_cols<T, false>(dy, x, mean, rstd, part, rows, cols, chunk);
}

template <typename T>
__global__ void ck_rms_bwd_cols(
    const T* __restrict__ dy, const T* __restrict__ x, const typename ck_traits<T>::acc* __restrict__ rstd,
    typename ck_traits<T>::acc* __restrict__ part, long long rows, int cols, long long chunk) {
  CK_PDL_WAIT();
  ck_norm_bwd_cols<T, true>(dy, x, (const typename ck_traits<T>::acc*)0, rstd, part, rows, cols, chunk);
}

// part: [nparts, NP, cols] partial sums (NP = gridDim.y); out0 (p = 0) and out1 (p = 1): [cols]
// or null. Block (32, CK_COLSUM_Y): thread (tx, ty) sums column blockIdx.x * 32 + tx over parts
// ty, ty + CK_COLSUM_Y, ... in that order, then thread (tx, 0) adds the CK_COLSUM_Y sums in ty
// order: a fixed order, so bitwise the same from run to run. (One thread per column looping over
// every part left a 768-column layernorm's ~1000 parts to 6 blocks: 17 us where the partials are
// 6 MB; CK_COLSUM_Y threads per column keep that many more loads in flight.)
// Traffic: nparts*NP*cols*sizeof(acc) read + NP*cols*sizeof(T) written.
#define CK_COLSUM_Y 32
template <typename T>
__global__ void __launch_bounds__(32 * CK_COLSUM_Y) ck_norm_colsum(
    const typename ck_traits<T>::acc* __restrict__ part, T* __restrict__ out0, T* __restrict__ out1,
    int nparts, int cols) {
  CK_PDL_WAIT();
  typedef typename ck_traits<T>::acc C;
  __shared__ C red[CK_COLSUM_Y][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.x * 32 + tx;
  const int p = blockIdx.y, np = gridDim.y;
  T* out = p == 0 ? out0 : out1;
  if (!out) return;   // the whole block: out depends on blockIdx.y only
  C s = C(0);
  if (c < cols) {
#pragma unroll 8
    for (int g = ty; g < nparts; g += CK_COLSUM_Y) s += part[((long long)g * np + p) * cols + c];
  }
  red[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && c < cols) {
    C t = red[0][tx];
    for (int k = 1; k < CK_COLSUM_Y; ++k) t += red[k][tx];
    out[c] = ck_traits<T>::store(t);
  }
}

// ================================================================ batch norm
// The batch norm of one element before rounding, (x - mean) * scale + beta: the forward's y, and
// the backward of batch_norm(..., activation="relu") recomputes it from x for relu's mask with
// the same expression and the same per-channel values, so its mask is the forward's bit for bit.
template <typename C>
__device__ __forceinline__ C ck_bn_affine(C x, C mu, C sc, C bt) { return (x - mu) * sc + bt; }

// The backward's dx = a*dy + b*(x - mean) + d at one element, its products rounded in a fixed
// order (explicit fmas: left to the compiler, the contraction differed between the plain and the
// relu-masked instantiations, a last-bit difference in dx for the same masked dy).
template <typename C>
__device__ __forceinline__ C ck_bn_dx(C a, C g, C b, C xm, C d) { return fma(a, g, fma(b, xm, d)); }

// The forward's epilogue: + residual (has_res), then relu (NaN kept, as ck_relu) when relu.
template <typename C>
__device__ __forceinline__ C ck_bn_epilogue(C v, C res, bool has_res, int relu) {
  if (has_res) v += res;
  return relu && !(v > C(0)) && v == v ? C(0) : v;
}

// x is viewed as [N, CS/V] vectors, CS = C*S, channel of vector column k = k / (S/V) (V divides S,
// so a vector never straddles two channels). Block (bx, by): vector column blockIdx.x*bx + tx,
// rows blockIdx.y*chunk + ty, + by, ... below min(N, (blockIdx.y+1)*chunk).
// pn, pm, pm2: [CS/V, gridDim.y] Welford partials (count, mean, squared deviations) of each
// vector column and row chunk; channel c's are the contiguous [c*K, (c+1)*K), K = (S/V)*gridDim.y.
// Traffic: N*CS*sizeof(T) read + 3*(CS/V)*gridDim.y*sizeof(acc) written.
// The body reads this thread's vector of row r at src[(r - rb0) * rs + kk]: x itself (src = x,
// rb0 = 0, rs = CS/V, kk = k), or ck_bn_resident's tile of the block's rows in shared memory; rows
// from split on (the rows past a tile that holds only the first of them) at far[r * CS/V + k]
// (x itself; SPLIT only: without it every row is read at src).
template <typename T, int V, bool SPLIT = false>
__device__ __forceinline__ void ck_bn_stats_body(
    const typename ck_raw<sizeof(T) * V>::type* __restrict__ src, long long rb0, long long rs, long long kk,
    const typename ck_raw<sizeof(T) * V>::type* __restrict__ far, long long split,
    typename ck_traits<T>::acc* __restrict__ pn, typename ck_traits<T>::acc* __restrict__ pm,
    typename ck_traits<T>::acc* __restrict__ pm2, long long N, long long csv, long long chunk) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C sh[3][256];
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const bool live = k < csv;
  const long long r0 = (long long)blockIdx.y * chunk;
  const long long r1 = r0 + chunk < N ? r0 + chunk : N;
  C n = C(0), m = C(0), m2 = C(0);
  const long long step = (long long)blockDim.y * CK_U;
  for (long long rb = r0 + threadIdx.y; live && rb < r1; rb += step) {
    ck_pack<T, V> p[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < r1) p[u].raw = !SPLIT || r < split ? src[(r - rb0) * rs + kk] : far[r * csv + k];
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

template <typename T, int V>
__global__ void __launch_bounds__(256, 1) ck_bn_stats(
    const T* __restrict__ x, typename ck_traits<T>::acc* __restrict__ pn, typename ck_traits<T>::acc* __restrict__ pm,
    typename ck_traits<T>::acc* __restrict__ pm2, long long N, long long csv, long long chunk) {
  CK_PDL_WAIT();
  typedef typename ck_raw<sizeof(T) * V>::type R;
  ck_bn_stats_body<T, V>(reinterpret_cast<const R*>(x), 0, csv, (long long)blockIdx.x * blockDim.x + threadIdx.x,
                         reinterpret_cast<const R*>(x), N, pn, pm, pm2, N, csv, chunk);
}

// Channel c's statistics from its merged Welford state (n, m, m2) in training (running_mean and
// running_var, when given, updated in place: the unbiased variance for running_var), or from the
// running statistics in inference: writes save_mean, save_invstd and scale = gamma * invstd.
template <typename T>
__device__ __forceinline__ void ck_bn_finish(
    long long c, int training, typename ck_traits<T>::acc n, typename ck_traits<T>::acc m,
    typename ck_traits<T>::acc m2, const T* __restrict__ gamma, T* __restrict__ running_mean,
    T* __restrict__ running_var, typename ck_traits<T>::acc* __restrict__ save_mean,
    typename ck_traits<T>::acc* __restrict__ save_invstd, typename ck_traits<T>::acc* __restrict__ scale,
    typename ck_traits<T>::acc momentum, typename ck_traits<T>::acc eps) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  C mean, var;
  if (training) {
    mean = m;
    var = m2 / n;
    if (running_mean) running_mean[c] = tr::store((C(1) - momentum) * tr::load(running_mean[c]) + momentum * mean);
    if (running_var) running_var[c] = tr::store((C(1) - momentum) * tr::load(running_var[c]) + momentum * (m2 / (n - C(1))));
  } else {
    mean = tr::load(running_mean[c]);
    var = tr::load(running_var[c]);
  }
  const C inv = ck_rsqrt(var + eps);
  save_mean[c] = mean;
  save_invstd[c] = inv;
  scale[c] = gamma ? tr::load(gamma[c]) * inv : inv;
}

// Channel c = blockIdx.x * blockDim.y + threadIdx.y: a block of 256 threads per channel (blockDim
// (256, 1)), or a warp per channel where the partials are few (blockDim (32, 8)). Training: merges
// channel c's K Welford partials (partial j at c*cs + j*ks: [C, K] from ck_bn_stats, cs = K,
// ks = 1; [K, C] from ck_bn_stats_cl, cs = 1, ks = C) in a fixed order into the batch mean and
// biased variance, updates running_mean and
// running_var (unbiased) in place when given. Inference: takes the running statistics.
// Writes save_mean, save_invstd and scale = gamma * invstd, each [C] of the accumulation type;
// gamma, beta, running_mean, running_var: [C] of T or null.
template <typename T>
__global__ void __launch_bounds__(256, 1) ck_bn_finalize(
    const typename ck_traits<T>::acc* __restrict__ pn, const typename ck_traits<T>::acc* __restrict__ pm,
    const typename ck_traits<T>::acc* __restrict__ pm2, long long K, long long cs, long long ks, long long C_,
    const T* __restrict__ gamma, T* __restrict__ running_mean, T* __restrict__ running_var,
    typename ck_traits<T>::acc* __restrict__ save_mean, typename ck_traits<T>::acc* __restrict__ save_invstd,
    typename ck_traits<T>::acc* __restrict__ scale, int training,
    typename ck_traits<T>::acc momentum, typename ck_traits<T>::acc eps) {
  CK_PDL_WAIT();
  typedef typename ck_traits<T>::acc C;
  __shared__ C sh[96];
  const long long c = (long long)blockIdx.x * blockDim.y + threadIdx.y;
  if (c >= C_) return;   // (a whole warp: blockDim.x is 32 where blockDim.y > 1)
  C n = C(0), m = C(0), m2 = C(0);
  if (training) {
    for (long long i = threadIdx.x; i < K; i += blockDim.x) {
      const long long o = c * cs + i * ks;
      ck_welford_merge(n, m, m2, pn[o], pm[o], pm2[o]);
    }
    if (blockDim.x == 32) ck_warp_welford(n, m, m2);
    else ck_block_welford(n, m, m2, sh);
  }
  if (threadIdx.x == 0)
    ck_bn_finish<T>(c, training, n, m, m2, gamma, running_mean, running_var, save_mean, save_invstd, scale, momentum, eps);
}

// The channel of lane i of vector column k: k / sv (V divides S: one channel a vector), or with
// CL (channels-last, S == 1: a vector holds V adjacent channels) k * V + i.
template <int V, bool CL>
__device__ __forceinline__ long long ck_bn_lane_channel(long long k, long long sv, int i) {
  return CL ? k * V + i : k / sv;
}

// One pack of y from its pack of x (and pr, the residual's, where res, the residual, is not null)
// and its lanes' channel values.
template <typename T, int V, bool EPI>
__device__ __forceinline__ ck_pack<T, V> ck_bn_apply_pack(
    const ck_pack<T, V>& p, const ck_pack<T, V>& pr, const void* res, int relu, const typename ck_traits<T>::acc (&mu)[V],
    const typename ck_traits<T>::acc (&sc)[V], const typename ck_traits<T>::acc (&bt)[V]) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  ck_pack<T, V> po;
  C v[V];
  ck_cvt<T, V>::load(p, v);
#pragma unroll
  for (int i = 0; i < V; ++i) {
    v[i] = ck_bn_affine(v[i], mu[i], sc[i], bt[i]);
    if (EPI) v[i] = ck_bn_epilogue(v[i], res ? tr::load(pr.v[i]) : C(0), res != nullptr, relu);
  }
  ck_cvt<T, V>::store(po, v);
  return po;
}

// x, y: [N, CS] as in ck_bn_stats (CL: [N, C] as in ck_bn_stats_cl, sv unused); mean, scale: [C]
// (acc); beta: [C] of T or null; residual: like x, or null. y = (x - mean[c]) * scale[c] + beta[c]
// (+ residual, then relu where relu: EPI, the fused epilogue, whose registers the plain apply does
// without). Grid-stride over rows, CK_U rows in flight per thread.
// Traffic: N*CS*sizeof(T) read + the same written (+ N*CS*sizeof(T) read of residual).
template <typename T, int V, bool CL, bool EPI>
__global__ void __launch_bounds__(256, 1) ck_bn_apply(
    const T* __restrict__ x, T* __restrict__ y, const typename ck_traits<T>::acc* __restrict__ mean,
    const typename ck_traits<T>::acc* __restrict__ scale, const T* __restrict__ beta,
    long long N, long long csv, long long sv, const T* __restrict__ residual, int relu) {
  CK_PDL_WAIT();
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= csv) return;
  C mu[V], sc[V], bt[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const long long c = ck_bn_lane_channel<V, CL>(k, sv, i);
    mu[i] = mean[c]; sc[i] = scale[c]; bt[i] = beta ? tr::load(beta[c]) : C(0);
  }
  const R* __restrict__ xr = reinterpret_cast<const R*>(x);
  const R* __restrict__ rr = reinterpret_cast<const R*>(residual);
  R* __restrict__ yr = reinterpret_cast<R*>(y);
  const long long step = (long long)gridDim.y * blockDim.y * CK_U;
  for (long long rb = (long long)blockIdx.y * blockDim.y * CK_U + threadIdx.y; rb < N; rb += step) {
    ck_pack<T, V> p[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < N) p[u].raw = xr[r * csv + k];
    }
    ck_pack<T, V> pr[CK_U];   // (EPI: batch_norm's residual= and activation=; unused, and gone, without)
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (EPI && rr && r < N) pr[u].raw = rr[r * csv + k];
    }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < N) yr[r * csv + k] = ck_bn_apply_pack<T, V, EPI>(p[u], pr[u], rr, relu, mu, sc, bt).raw;
    }
  }
}

// The [N, C*S/V] offset of channel c's vector i (row i / sv, column i % sv of the channel's sv).
__device__ __forceinline__ long long ck_bn_vec(long long i, long long c, long long sv, long long csv) {
  const long long r = i / sv;
  return r * csv + c * sv + (i - r * sv);
}

// The backward of batch_norm(..., activation="relu"): channel c's forward scale (gamma * invstd,
// as ck_bn_finish) and beta, for relu's mask.
template <typename T>
__device__ __forceinline__ void ck_bn_mask_coefs(long long c, const T* __restrict__ gamma, const T* __restrict__ beta,
                                                 const typename ck_traits<T>::acc* __restrict__ invstd,
                                                 typename ck_traits<T>::acc& sc, typename ck_traits<T>::acc& bt) {
  typedef ck_traits<T> tr;
  const typename tr::acc inv = invstd[c];
  sc = gamma ? tr::load(gamma[c]) * inv : inv;
  bt = beta ? tr::load(beta[c]) : typename tr::acc(0);
}

// dy at one element, or with RELU 0 where the forward's pre-activation was not above 0 (as ck_relu_bwd).
template <bool RELU, typename C>
__device__ __forceinline__ C ck_bn_masked(C g, C x, C mu, C sc, C bt) {
  return RELU && !(ck_bn_affine(x, mu, sc, bt) > C(0)) ? C(0) : g;
}

// Small batches (N*S up to BN_SMALL elements a channel): one launch instead of ck_bn_stats,
// ck_bn_finalize and ck_bn_apply. One block per channel c = blockIdx.x: the
// Welford statistics of its N*S/V vectors (vector i: row i / sv, column i % sv of the channel),
// merged in a fixed order, the running statistics updated as ck_bn_finalize does, then
// y = (x - mean) * scale + beta over the same vectors (a second read, from cache).
// STAGED (training only; channels whose N*S elements fit in one block's shared memory, past
// BN_SMALL): each thread first copies its vectors of x to the dynamic shared memory (cp.async, all
// in flight at once) and both passes read them there, so x is read from memory once; the three
// launches read it twice. A thread reads back only what it copied: no block barrier before the sums.
// x, y: [N, C*S/V] vectors of T; gamma, beta, running_mean, running_var: [C] of T or null;
// save_mean, save_invstd: [C] (acc); residual: like x, or null; relu: y = relu(bn + residual).
// Dynamic shared memory (STAGED): N*S/V vectors.
// Traffic: N*C*S*sizeof(T) read (twice, the second from cache; STAGED once) + the same written
// (+ N*C*S*sizeof(T) of residual).
template <typename T, int V, bool STAGED>
__global__ void __launch_bounds__(STAGED ? 1024 : 256, 1) ck_bn_small(
    const T* __restrict__ x, T* __restrict__ y, const T* __restrict__ gamma, const T* __restrict__ beta,
    T* __restrict__ running_mean, T* __restrict__ running_var,
    typename ck_traits<T>::acc* __restrict__ save_mean, typename ck_traits<T>::acc* __restrict__ save_invstd,
    long long N, long long C_, long long sv, int training,
    typename ck_traits<T>::acc momentum, typename ck_traits<T>::acc eps, const T* __restrict__ residual, int relu) {
  CK_PDL_WAIT();
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C sh[96];
  const long long c = blockIdx.x, csv = C_ * sv, cnt = N * sv;
  const R* __restrict__ xr = reinterpret_cast<const R*>(x);
  const R* __restrict__ rr = reinterpret_cast<const R*>(residual);
  R* __restrict__ yr = reinterpret_cast<R*>(y);
  R* tile = reinterpret_cast<R*>(ck_dyn_smem);   // (STAGED: the channel's vectors)
  if (STAGED) {
    for (long long i = threadIdx.x; i < cnt; i += blockDim.x) ck_cp_async(tile + i, xr + ck_bn_vec(i, c, sv, csv));
    ck_cp_wait();
  }
  C mean, var;
  if (training) {
    C n = C(0), m = C(0), m2 = C(0);
    for (long long i = threadIdx.x; i < cnt; i += blockDim.x) {
      ck_pack<T, V> p;
      p.raw = STAGED ? tile[i] : xr[ck_bn_vec(i, c, sv, csv)];
      ck_welford_pack<T, V, C>(n, m, m2, p);
    }
    ck_block_welford(n, m, m2, sh);   // every thread gets the channel's statistics
    mean = m;
    var = m2 / n;
    if (threadIdx.x == 0) {
      if (running_mean) running_mean[c] = tr::store((C(1) - momentum) * tr::load(running_mean[c]) + momentum * mean);
      if (running_var) running_var[c] = tr::store((C(1) - momentum) * tr::load(running_var[c]) + momentum * (m2 / (n - C(1))));
    }
  } else {
    mean = tr::load(running_mean[c]);
    var = tr::load(running_var[c]);
  }
  const C inv = ck_rsqrt(var + eps);
  const C sc = gamma ? tr::load(gamma[c]) * inv : inv, bt = beta ? tr::load(beta[c]) : C(0);
  if (threadIdx.x == 0) { save_mean[c] = mean; save_invstd[c] = inv; }
  for (long long i = threadIdx.x; i < cnt; i += blockDim.x) {
    const long long o = ck_bn_vec(i, c, sv, csv);
    ck_pack<T, V> p, pr, po;
    p.raw = STAGED ? tile[i] : xr[o];
    if (rr) pr.raw = rr[o];
    C v[V];
    ck_cvt<T, V>::load(p, v);
#pragma unroll
    for (int j = 0; j < V; ++j)
      v[j] = ck_bn_epilogue(ck_bn_affine(v[j], mean, sc, bt), rr ? tr::load(pr.v[j]) : C(0), rr != nullptr, relu);
    ck_cvt<T, V>::store(po, v);
    yr[o] = po.raw;
  }
}

// The backward of small batches in one launch (ck_bn_bwd_reduce, _finalize and _apply's work):
// one block per channel sums dy and dy*(x - mean) over its vectors in a fixed
// order, writes dgamma, dbeta and dx = ka*dy + kb*(x - mean) + kd as ck_bn_bwd_finalize/_apply.
// dy, x, dx: [N, C*S/V] vectors of T; gamma: [C] of T or null; mean, invstd: [C] (acc);
// dgamma (or null), dbeta: [C] of T; beta: [C] of T or null (read with RELU only).
// RELU (the backward of batch_norm(..., activation="relu")): dy where the forward's
// pre-activation, recomputed from x (ck_bn_affine), is above 0, else 0, in place of dy.
// STAGED (past BN_SMALL, where a channel's dy and x fit in one block's shared memory): dy and x
// copied to the dynamic shared memory first, as ck_bn_small's x, so both are read from memory once.
// Dynamic shared memory (STAGED): 2 * N*S/V vectors (x's, then dy's).
// Traffic: 2 * N*C*S*sizeof(T) read (twice, the second from cache; STAGED once) + N*C*S*sizeof(T) written.
template <typename T, int V, bool RELU, bool STAGED>
__global__ void __launch_bounds__(STAGED ? 1024 : 256, 1) ck_bn_bwd_small(
    const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx, const T* __restrict__ gamma,
    const typename ck_traits<T>::acc* __restrict__ mean, const typename ck_traits<T>::acc* __restrict__ invstd,
    T* __restrict__ dgamma, T* __restrict__ dbeta, long long N, long long C_, long long sv,
    const T* __restrict__ beta) {
  CK_PDL_WAIT();
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C red[64];
  const long long c = blockIdx.x, csv = C_ * sv, cnt = N * sv;
  const R* __restrict__ xr = reinterpret_cast<const R*>(x);
  const R* __restrict__ gr = reinterpret_cast<const R*>(dy);
  R* __restrict__ dr = reinterpret_cast<R*>(dx);
  const C mu = mean[c];
  C msc = C(0), mbt = C(0);   // (RELU: the forward's scale and beta of channel c)
  if (RELU) ck_bn_mask_coefs<T>(c, gamma, beta, invstd, msc, mbt);
  R* tx = reinterpret_cast<R*>(ck_dyn_smem);   // (STAGED: the channel's vectors of x, then of dy)
  R* tg = tx + cnt;
  if (STAGED) {
    for (long long i = threadIdx.x; i < cnt; i += blockDim.x) {
      const long long o = ck_bn_vec(i, c, sv, csv);
      ck_cp_async(tx + i, xr + o);
      ck_cp_async(tg + i, gr + o);
    }
    ck_cp_wait();
  }
  C sg = C(0), sgx = C(0);
  for (long long i = threadIdx.x; i < cnt; i += blockDim.x) {
    ck_pack<T, V> px, pg;
    if (STAGED) {
      px.raw = tx[i];
      pg.raw = tg[i];
    } else {
      const long long o = ck_bn_vec(i, c, sv, csv);
      px.raw = xr[o];
      pg.raw = gr[o];
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const C xv = tr::load(px.v[j]);
      const C g = ck_bn_masked<RELU>(tr::load(pg.v[j]), xv, mu, msc, mbt);
      sg += g;
      sgx += g * (xv - mu);
    }
  }
  ck_row_sum2(sg, sgx, red);   // every thread gets the channel's sums
  const C inv = invstd[c], count = C(cnt * V);
  const C g = gamma ? tr::load(gamma[c]) : C(1);
  if (threadIdx.x == 0) {
    if (dgamma) dgamma[c] = tr::store(sgx * inv);
    dbeta[c] = tr::store(sg);
  }
  const C a = g * inv, b = -a * inv * inv * (sgx / count), d = -a * (sg / count);
  for (long long i = threadIdx.x; i < cnt; i += blockDim.x) {
    const long long o = ck_bn_vec(i, c, sv, csv);
    ck_pack<T, V> px, pg, po;
    px.raw = STAGED ? tx[i] : xr[o];
    pg.raw = STAGED ? tg[i] : gr[o];
    C xv[V], gv[V];
    ck_cvt<T, V>::load(px, xv);
    ck_cvt<T, V>::load(pg, gv);
#pragma unroll
    for (int j = 0; j < V; ++j) xv[j] = ck_bn_dx(a, ck_bn_masked<RELU>(gv[j], xv[j], mu, msc, mbt), b, xv[j] - mu, d);
    ck_cvt<T, V>::store(po, xv);
    dr[o] = po.raw;
  }
}

// Backward reduction. dy, x: [N, CS] as in ck_bn_stats; mean: [C] (save_mean).
// psg, psgx: [CS/V, gridDim.y] partial sums of dy and dy*(x - mean) per vector column and row chunk.
// RELU: dy masked as ck_bn_bwd_small's (gamma, beta: [C] of T or null; invstd: [C], acc).
// Traffic: 2 * N*CS*sizeof(T) read + 2*(CS/V)*gridDim.y*sizeof(acc) written.
// The body reads this thread's vectors of row r at sx / sg[(r - rb0) * rs + kk], and from split on
// at fx / fg[r * CS/V + k] (as ck_bn_stats_body).
template <typename T, int V, bool RELU, bool SPLIT = false>
__device__ __forceinline__ void ck_bn_bwd_reduce_body(
    const typename ck_raw<sizeof(T) * V>::type* __restrict__ sg_src, const typename ck_raw<sizeof(T) * V>::type* __restrict__ sx,
    long long rb0, long long rs, long long kk, const typename ck_raw<sizeof(T) * V>::type* __restrict__ fg,
    const typename ck_raw<sizeof(T) * V>::type* __restrict__ fx, long long split,
    const typename ck_traits<T>::acc* __restrict__ mean,
    typename ck_traits<T>::acc* __restrict__ psg, typename ck_traits<T>::acc* __restrict__ psgx,
    long long N, long long csv, long long sv, long long chunk, const T* __restrict__ gamma,
    const T* __restrict__ beta, const typename ck_traits<T>::acc* __restrict__ invstd) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  __shared__ C sh[2][256];
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const bool live = k < csv;
  const long long r0 = (long long)blockIdx.y * chunk;
  const long long r1 = r0 + chunk < N ? r0 + chunk : N;
  const C mu = live ? mean[k / sv] : C(0);
  C msc = C(0), mbt = C(0);
  if (RELU && live) ck_bn_mask_coefs<T>(k / sv, gamma, beta, invstd, msc, mbt);
  C sg = C(0), sgx = C(0);
  const long long step = (long long)blockDim.y * CK_U;
  for (long long rb = r0 + threadIdx.y; live && rb < r1; rb += step) {
    ck_pack<T, V> px[CK_U], pg[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < r1 && (!SPLIT || r < split)) { px[u].raw = sx[(r - rb0) * rs + kk]; pg[u].raw = sg_src[(r - rb0) * rs + kk]; }
      else if (SPLIT && r < r1) { px[u].raw = fx[r * csv + k]; pg[u].raw = fg[r * csv + k]; }
    }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      if (rb + (long long)u * blockDim.y < r1) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const C xv = tr::load(px[u].v[i]);
          const C g = ck_bn_masked<RELU>(tr::load(pg[u].v[i]), xv, mu, msc, mbt);
          sg += g;
          sgx += g * (xv - mu);
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

template <typename T, int V, bool RELU>
__global__ void __launch_bounds__(256, 1) ck_bn_bwd_reduce(
    const T* __restrict__ dy, const T* __restrict__ x, const typename ck_traits<T>::acc* __restrict__ mean,
    typename ck_traits<T>::acc* __restrict__ psg, typename ck_traits<T>::acc* __restrict__ psgx,
    long long N, long long csv, long long sv, long long chunk, const T* __restrict__ gamma,
    const T* __restrict__ beta, const typename ck_traits<T>::acc* __restrict__ invstd) {
  CK_PDL_WAIT();
  typedef typename ck_raw<sizeof(T) * V>::type R;
  ck_bn_bwd_reduce_body<T, V, RELU>(reinterpret_cast<const R*>(dy), reinterpret_cast<const R*>(x), 0, csv,
                                    (long long)blockIdx.x * blockDim.x + threadIdx.x, reinterpret_cast<const R*>(dy),
                                    reinterpret_cast<const R*>(x), N, mean, psg, psgx, N, csv, sv,
                                    chunk, gamma, beta, invstd);
}

// Channel c's backward from its sums sg = sum(dy) and sgx = sum(dy * (x - mean)): dgamma[c] =
// sgx * invstd (when dgamma), dbeta[c] = sg (when dbeta), and the coefficients of
// dx = ka*dy + kb*(x - mean) + kd. count = N*S.
template <typename T>
__device__ __forceinline__ void ck_bn_bwd_finish(
    long long c, typename ck_traits<T>::acc sg, typename ck_traits<T>::acc sgx, const T* __restrict__ gamma,
    const typename ck_traits<T>::acc* __restrict__ invstd, T* __restrict__ dgamma, T* __restrict__ dbeta,
    typename ck_traits<T>::acc* __restrict__ ka, typename ck_traits<T>::acc* __restrict__ kb,
    typename ck_traits<T>::acc* __restrict__ kd, typename ck_traits<T>::acc count) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  const C inv = invstd[c];
  const C g = gamma ? tr::load(gamma[c]) : C(1);
  if (dgamma) dgamma[c] = tr::store(sgx * inv);
  if (dbeta) dbeta[c] = tr::store(sg);
  const C a = g * inv;
  ka[c] = a;
  kb[c] = -a * inv * inv * (sgx / count);
  kd[c] = -a * (sg / count);
}

// Channel c = blockIdx.x * blockDim.y + threadIdx.y, a block or a warp per channel as in
// ck_bn_finalize: sums channel c's K partials (partial j at c*cs + j*ks, as ck_bn_finalize reads
// them) in a fixed order; writes dgamma[c] = sum(dy * xhat) (when dgamma), dbeta[c] = sum(dy) (T), and the
// coefficients of dx = ka*dy + kb*(x - mean) + kd into ka, kb, kd: [C] (acc). count = N*S.
template <typename T>
__global__ void __launch_bounds__(256, 1) ck_bn_bwd_finalize(
    const typename ck_traits<T>::acc* __restrict__ psg, const typename ck_traits<T>::acc* __restrict__ psgx,
    long long K, long long cs, long long ks, long long C_, const T* __restrict__ gamma,
    const typename ck_traits<T>::acc* __restrict__ invstd, T* __restrict__ dgamma, T* __restrict__ dbeta,
    typename ck_traits<T>::acc* __restrict__ ka, typename ck_traits<T>::acc* __restrict__ kb,
    typename ck_traits<T>::acc* __restrict__ kd, typename ck_traits<T>::acc count) {
  CK_PDL_WAIT();
  typedef typename ck_traits<T>::acc C;
  __shared__ C red[64];
  const long long c = (long long)blockIdx.x * blockDim.y + threadIdx.y;
  if (c >= C_) return;   // (a whole warp: blockDim.x is 32 where blockDim.y > 1)
  C sg = C(0), sgx = C(0);
  for (long long i = threadIdx.x; i < K; i += blockDim.x) { sg += psg[c * cs + i * ks]; sgx += psgx[c * cs + i * ks]; }
  ck_row_sum2(sg, sgx, red);   // (a warp: its lanes' butterfly, no shared memory)
  if (threadIdx.x == 0) ck_bn_bwd_finish<T>(c, sg, sgx, gamma, invstd, dgamma, dbeta, ka, kb, kd, count);
}

// One pack of dx from its packs of x and dy and its lanes' channel values.
template <typename T, int V, bool RELU>
__device__ __forceinline__ ck_pack<T, V> ck_bn_bwd_apply_pack(
    const ck_pack<T, V>& px, const ck_pack<T, V>& pg, const typename ck_traits<T>::acc (&mu)[V],
    const typename ck_traits<T>::acc (&a)[V], const typename ck_traits<T>::acc (&b)[V],
    const typename ck_traits<T>::acc (&d)[V], const typename ck_traits<T>::acc (&msc)[V],
    const typename ck_traits<T>::acc (&mbt)[V]) {
  typedef typename ck_traits<T>::acc C;
  ck_pack<T, V> po;
  C xv[V], gv[V];
  ck_cvt<T, V>::load(px, xv);
  ck_cvt<T, V>::load(pg, gv);
#pragma unroll
  for (int i = 0; i < V; ++i)
    xv[i] = ck_bn_dx(a[i], ck_bn_masked<RELU>(gv[i], xv[i], mu[i], msc[i], mbt[i]), b[i], xv[i] - mu[i], d[i]);
  ck_cvt<T, V>::store(po, xv);
  return po;
}

// dx of this thread's vector column k over rows rb, rb + step, ... below r1, CK_U rows of dy and x
// in flight: ck_bn_bwd_apply's loop, and ck_bn_bwd_resident's over the rows past its tiles.
template <typename T, int V, bool RELU>
__device__ __forceinline__ void ck_bn_bwd_apply_rows(
    const typename ck_raw<sizeof(T) * V>::type* __restrict__ xr, const typename ck_raw<sizeof(T) * V>::type* __restrict__ gr,
    typename ck_raw<sizeof(T) * V>::type* __restrict__ dr, long long k, long long csv, long long rb, long long r1,
    long long step, const typename ck_traits<T>::acc (&mu)[V], const typename ck_traits<T>::acc (&a)[V],
    const typename ck_traits<T>::acc (&b)[V], const typename ck_traits<T>::acc (&d)[V],
    const typename ck_traits<T>::acc (&msc)[V], const typename ck_traits<T>::acc (&mbt)[V]) {
  for (; rb < r1; rb += step) {
    ck_pack<T, V> px[CK_U], pg[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < r1) { px[u].raw = xr[r * csv + k]; pg[u].raw = gr[r * csv + k]; }
    }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < r1) dr[r * csv + k] = ck_bn_bwd_apply_pack<T, V, RELU>(px[u], pg[u], mu, a, b, d, msc, mbt).raw;
    }
  }
}

// dy, x, dx: [N, CS] as in ck_bn_stats (CL: [N, C] as in ck_bn_stats_cl, sv unused); mean, ka,
// kb, kd: [C] (acc). dx = ka*dy + kb*(x - mean) + kd; RELU: dy masked as ck_bn_bwd_small's
// (gamma, beta: [C] of T or null; invstd: [C], acc).
// Traffic: 2 * N*CS*sizeof(T) read + N*CS*sizeof(T) written.
template <typename T, int V, bool CL, bool RELU>
__global__ void __launch_bounds__(256, 1) ck_bn_bwd_apply(
    const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
    const typename ck_traits<T>::acc* __restrict__ mean, const typename ck_traits<T>::acc* __restrict__ ka,
    const typename ck_traits<T>::acc* __restrict__ kb, const typename ck_traits<T>::acc* __restrict__ kd,
    long long N, long long csv, long long sv, const T* __restrict__ gamma, const T* __restrict__ beta,
    const typename ck_traits<T>::acc* __restrict__ invstd) {
  CK_PDL_WAIT();
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= csv) return;
  C mu[V], a[V], b[V], d[V], msc[V], mbt[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const long long c = ck_bn_lane_channel<V, CL>(k, sv, i);
    mu[i] = mean[c]; a[i] = ka[c]; b[i] = kb[c]; d[i] = kd[c]; msc[i] = mbt[i] = C(0);
    if (RELU) ck_bn_mask_coefs<T>(c, gamma, beta, invstd, msc[i], mbt[i]);
  }
  const long long step = (long long)gridDim.y * blockDim.y * CK_U;
  ck_bn_bwd_apply_rows<T, V, RELU>(reinterpret_cast<const R*>(x), reinterpret_cast<const R*>(dy), reinterpret_cast<R*>(dx),
                                   k, csv, (long long)blockIdx.y * blockDim.y * CK_U + threadIdx.y, N, step,
                                   mu, a, b, d, msc, mbt);
}

// ================================================================ batch norm, channels-last
// S == 1 ((N, C) input, or a channels-last (N, C, *spatial) array seen as [N*spatial, C]): x is
// viewed as [N, C/V] vectors of V adjacent channels, lane i of vector column k being channel
// k*V + i, so each row is read whole with 16-byte loads. Block (bx, by), bx*by <= 256 (bx may be
// under 32: warps then span several rows, still reading contiguous memory): vector column
// blockIdx.x*bx + tx, rows as ck_bn_stats. Each lane keeps its own Welford state; the lanes share
// the row count, so a group of CK_U rows costs one division for all V lanes.
// pn, pm, pm2: [gridDim.y, C] Welford partials of each row chunk and channel (row-major: a warp
// writes adjacent channels; ck_bn_finalize reads them with a stride of C).
// Traffic: N*C*sizeof(T) read + 3*C*gridDim.y*sizeof(acc) written.
// src, rb0, rs, kk, far, split: as ck_bn_stats_body's (rs = C/V for x itself).
template <typename T, int V, bool SPLIT = false>
__device__ __forceinline__ void ck_bn_stats_cl_body(
    const typename ck_raw<sizeof(T) * V>::type* __restrict__ src, long long rb0, long long rs, long long kk,
    const typename ck_raw<sizeof(T) * V>::type* __restrict__ far, long long split,
    typename ck_traits<T>::acc* __restrict__ pn, typename ck_traits<T>::acc* __restrict__ pm,
    typename ck_traits<T>::acc* __restrict__ pm2, long long N, long long cv, long long chunk) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C sh[2 * V + 1][256];
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const bool live = k < cv;
  const long long r0 = (long long)blockIdx.y * chunk;
  const long long r1 = r0 + chunk < N ? r0 + chunk : N;
  C n = C(0), m[V], m2[V];
#pragma unroll
  for (int i = 0; i < V; ++i) { m[i] = C(0); m2[i] = C(0); }
  const long long step = (long long)blockDim.y * CK_U;
  for (long long rb = r0 + threadIdx.y; live && rb < r1; rb += step) {
    ck_pack<T, V> p[CK_U];
    int cnt = 0;   // rows of this group below r1 (a prefix of the CK_U)
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < r1) { p[u].raw = !SPLIT || r < split ? src[(r - rb0) * rs + kk] : far[r * cv + k]; cnt = u + 1; }
    }
    // each lane: the group's exact mean and squared deviations, then one Chan merge
    const C nb = C(cnt), inb = C(1) / nb, f = nb / (n + nb);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      C s = C(0);
#pragma unroll
      for (int u = 0; u < CK_U; ++u) if (u < cnt) s += tr::load(p[u].v[i]);
      const C gm = s * inb;
      C q = C(0);
#pragma unroll
      for (int u = 0; u < CK_U; ++u) if (u < cnt) { const C e = tr::load(p[u].v[i]) - gm; q += e * e; }
      const C d = gm - m[i];
      m[i] += d * f;
      m2[i] += q + d * d * n * f;
    }
    n += nb;
  }
  if (blockDim.y > 1) {  // merge the row-lanes of this column, in order
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
    sh[0][t] = n;
#pragma unroll
    for (int i = 0; i < V; ++i) { sh[1 + i][t] = m[i]; sh[1 + V + i][t] = m2[i]; }
    __syncthreads();
    if (threadIdx.y != 0) return;
    for (int ty = 1; ty < (int)blockDim.y; ++ty) {
      const int o = ty * blockDim.x + threadIdx.x;
      const C nb = sh[0][o];
      if (nb == C(0)) continue;
      const C f = nb / (n + nb);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const C d = sh[1 + i][o] - m[i];
        m[i] += d * f;
        m2[i] += sh[1 + V + i][o] + d * d * n * f;
      }
      n += nb;
    }
  }
  if (live) {
    const long long o = (long long)blockIdx.y * cv * V + k * V;
#pragma unroll
    for (int i = 0; i < V; ++i) { pn[o + i] = n; pm[o + i] = m[i]; pm2[o + i] = m2[i]; }
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(256, 1) ck_bn_stats_cl(
    const T* __restrict__ x, typename ck_traits<T>::acc* __restrict__ pn, typename ck_traits<T>::acc* __restrict__ pm,
    typename ck_traits<T>::acc* __restrict__ pm2, long long N, long long cv, long long chunk) {
  CK_PDL_WAIT();
  typedef typename ck_raw<sizeof(T) * V>::type R;
  ck_bn_stats_cl_body<T, V>(reinterpret_cast<const R*>(x), 0, cv, (long long)blockIdx.x * blockDim.x + threadIdx.x,
                            reinterpret_cast<const R*>(x), N, pn, pm, pm2, N, cv, chunk);
}

// ================================================================ batch norm, x resident on chip
#define CK_BAR_LANES 8     // arrival counters of a grid barrier (blocks b % 8 on counter b % 8)
#define CK_BAR_STRIDE 32   // unsigned ints between them: one 128-byte line each

// Zeroes the arrival counters of ck_bn_resident's grid barriers (its own launch before it: a memset
// would not be recorded in a traced plan, and no value in memory is safe to assume, as %gridid
// would be were it not repeated by a CUDA graph's replays). T: the dtype of the family compiling it.
// count: [CK_BAR_LANES * CK_BAR_STRIDE].
template <typename T>
__global__ void ck_bn_barrier_zero(unsigned* __restrict__ count) {
  CK_PDL_WAIT();
  if (threadIdx.x < CK_BAR_LANES) count[threadIdx.x * CK_BAR_STRIDE] = 0u;
}

// Barrier number `phase` (1, 2, ...) of the whole grid, whose blocks must all be resident at once
// (the host sizes the grid from the occupancy): block b adds 1 to counter b % CK_BAR_LANES (so the
// arrivals' atomics spread over as many lines), then waits until every counter holds phase times
// the blocks that count on it.
__device__ __forceinline__ void ck_grid_barrier(unsigned* count, unsigned phase) {
  __syncthreads();
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  if (t < 32) {
    const unsigned nb = gridDim.x * gridDim.y, b = blockIdx.y * gridDim.x + blockIdx.x;
    if (t == 0) {
      __threadfence();
      atomicAdd(count + (b % CK_BAR_LANES) * CK_BAR_STRIDE, 1u);
    }
    __syncwarp();
    if (t < CK_BAR_LANES) {   // lane i watches counter i
      const unsigned want = phase * ((nb + CK_BAR_LANES - 1 - t) / CK_BAR_LANES);
      for (;;) {
        unsigned v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(count + t * CK_BAR_STRIDE) : "memory");
#else   // (not launched there: the host takes the three launches below compute capability 7.0)
        v = *(volatile unsigned*)(count + t * CK_BAR_STRIDE);
#endif
        if (v >= want) break;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
        __nanosleep(32);
#endif
      }
      __threadfence();
    }
  }
  __syncthreads();
}

#define CK_BN_KEEP 4   // partials a thread of ck_bn_resident's finalize keeps in registers between its two sums

// Sums a and b over a channel's threads of ck_bn_resident's finalize: the whole block's (per_block:
// the nw whole warps', a partial last warp adding nothing, every thread of the block calling it) or
// the warp's (every lane of a whole warp calling it). Each warp's butterfly, then the warps' sums
// in warp order: a fixed order, the same bits in every thread. red: 64 of shared scratch.
template <typename C>
__device__ __forceinline__ void ck_bn_group_sum2(C& a, C& b, bool per_block, int nw, C* red) {
  const int t = threadIdx.y * blockDim.x + threadIdx.x, lane = t & 31, warp = t >> 5;
  if (warp < nw) {
    a = ck_group_sum(a, 32);
    b = ck_group_sum(b, 32);
  }
  if (!per_block) return;
  if (warp < nw && lane == 0) { red[warp] = a; red[32 + warp] = b; }
  __syncthreads();
  a = C(0);
  b = C(0);
  for (int w = 0; w < nw; ++w) { a += red[w]; b += red[32 + w]; }
  __syncthreads();
}

// The channel loop of the single-read kernels' finalize: f(c, on, gi, gsz, per_block) for each
// channel c, by a whole block (per_block; the nw whole warps: gi = the thread's index, gsz = nw*32)
// where the grid has a block for each channel, else by a warp (gi = lane, gsz = 32; nw channels a
// block at a time). Every thread of the block makes the same calls (on: this thread's warp takes a
// channel), so f may call ck_bn_group_sum2 with per_block.
template <typename F>
__device__ __forceinline__ void ck_bn_each_channel(long long C_, int nw, F&& f) {
  const unsigned nb = gridDim.x * gridDim.y, b = blockIdx.y * gridDim.x + blockIdx.x;
  const int t = threadIdx.y * blockDim.x + threadIdx.x, lane = t & 31, warp = t >> 5;
  const bool per_block = C_ <= (long long)nb;
  const int gsz = per_block ? nw * 32 : 32, gi = per_block ? t : lane;
  const int per = per_block ? 1 : nw;   // channels a block takes at a time
  for (long long c0 = (long long)b * per; c0 < C_; c0 += (long long)nb * per) {
    const long long c = c0 + (per_block ? 0 : warp);
    f(c, warp < nw && c < C_, gi, gsz, per_block);
  }
}

// The channels [c_lo, c_lo + nc) of this block's vector columns (at most 256: 256 columns of one
// channel or more each, or 32 vectors of up to 8 channels).
template <int V, bool CL>
__device__ __forceinline__ void ck_bn_block_channels(long long csv, long long sv, long long& c_lo, long long& nc) {
  const long long k_lo = (long long)blockIdx.x * blockDim.x;
  const long long k_hi = (k_lo + blockDim.x < csv ? k_lo + blockDim.x : csv) - 1;
  c_lo = ck_bn_lane_channel<V, CL>(k_lo, sv, 0);
  nc = ck_bn_lane_channel<V, CL>(k_hi, sv, V - 1) + 1 - c_lo;
}

// Training batch norm reading x once, where it fits in the shared memory of the co-resident blocks
// (the three launches ck_bn_stats, ck_bn_finalize and ck_bn_apply read it twice). Layout, blocks
// and partials as ck_bn_stats (CL: ck_bn_stats_cl, channels-last rows); dynamic shared memory:
// the block's tile of x, [tile_rows, blockDim.x] vectors: the block's first tile_rows rows (all of
// its chunk where they fit; the rest read from x twice, in step 1 and step 3).
// 1. Each thread copies its rows of its column into the tile (cp.async: all of them in flight at
//    once), then computes its Welford partials from the tile as ck_bn_stats(_cl) does from x.
// 2. Grid barrier; channel c's K partials (n_j, m_j, m2_j at c*cs + j*ks) are combined by sums,
//    mean = sum(n_j m_j) / sum(n_j), then m2 = sum(m2_j + n_j (m_j - mean)^2) (no chain of
//    divisions as Chan's pairwise merges; each sum in a fixed order: ck_bn_group_sum2), by a
//    block a channel where there are at least C blocks, else a warp a channel; save_mean,
//    save_invstd, scale and the running statistics written as ck_bn_finalize.
// 3. Grid barrier; the block's channel values to shared memory, and y from the tile as
//    ck_bn_apply (EPI: + residual, then relu).
// Data another block wrote is read through L2 (__ldcg). count: the barriers' arrival counters,
// zeroed by ck_bn_barrier_zero.
// Traffic: N*CS*sizeof(T) read (+ the rows past the tiles again) + the same written (+ the
// residual read) + the partials.
template <typename T, int V, bool CL, bool EPI>
__global__ void __launch_bounds__(256, 2) ck_bn_resident(
    const T* __restrict__ x, T* __restrict__ y, typename ck_traits<T>::acc* pn, typename ck_traits<T>::acc* pm,
    typename ck_traits<T>::acc* pm2, long long N, long long csv, long long sv, long long chunk, long long tile_rows,
    long long K, long long cs, long long ks, long long C_, const T* __restrict__ gamma, const T* __restrict__ beta,
    T* __restrict__ running_mean, T* __restrict__ running_var, typename ck_traits<T>::acc* save_mean,
    typename ck_traits<T>::acc* save_invstd, typename ck_traits<T>::acc* scale, typename ck_traits<T>::acc momentum,
    typename ck_traits<T>::acc eps, const T* __restrict__ residual, int relu, unsigned* count) {
  CK_PDL_WAIT();
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  extern __shared__ __align__(16) unsigned char ck_bn_tile[];
  __shared__ C part[3][256];   // 2: ck_bn_group_sum2's scratch; 3: the block's channel values
  R* tile = reinterpret_cast<R*>(ck_bn_tile);
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  const int nw = (int)(blockDim.x * blockDim.y) >> 5;   // whole warps (a CL block may end in a partial one)
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long r0 = (long long)blockIdx.y * chunk;
  const long long r1 = r0 + chunk < N ? r0 + chunk : N;
  const long long split = r0 + tile_rows;   // rows from here on are read from x, twice
  const R* __restrict__ xr = reinterpret_cast<const R*>(x);
  // 1. the tile (each thread reads back only what it copied: no block barrier), then the partials
  for (long long r = r0 + threadIdx.y; k < csv && r < r1 && r < split; r += blockDim.y)
    ck_cp_async(tile + (r - r0) * blockDim.x + threadIdx.x, xr + r * csv + k);
  ck_cp_wait();
  if (CL) ck_bn_stats_cl_body<T, V, true>(tile, r0, blockDim.x, threadIdx.x, xr, split, pn, pm, pm2, N, csv, chunk);
  else ck_bn_stats_body<T, V, true>(tile, r0, blockDim.x, threadIdx.x, xr, split, pn, pm, pm2, N, csv, chunk);
  ck_grid_barrier(count, 1);
  // 2. the channels' statistics
  ck_bn_each_channel(C_, nw, [&](long long c, bool on, int gi, int gsz, bool per_block) {
    C sn = C(0), snm = C(0), q = C(0);
    C kn[CK_BN_KEEP], km[CK_BN_KEEP], km2[CK_BN_KEEP];   // this thread's first partials, kept for the second sum
#pragma unroll
    for (int u = 0; u < CK_BN_KEEP; ++u) {
      const long long j = gi + (long long)u * gsz, o = c * cs + j * ks;
      const bool in = on && j < K;
      kn[u] = in ? __ldcg(pn + o) : C(0);
      km[u] = in ? __ldcg(pm + o) : C(0);
      km2[u] = in ? __ldcg(pm2 + o) : C(0);
    }
#pragma unroll
    for (int u = 0; u < CK_BN_KEEP; ++u) { sn += kn[u]; snm += kn[u] * km[u]; }
    for (long long j = gi + (long long)CK_BN_KEEP * gsz; on && j < K; j += gsz) {
      const long long o = c * cs + j * ks;
      const C nj = __ldcg(pn + o);
      sn += nj;
      snm += nj * __ldcg(pm + o);
    }
    ck_bn_group_sum2(sn, snm, per_block, nw, &part[0][0]);
    const C mean = snm / sn;
#pragma unroll
    for (int u = 0; u < CK_BN_KEEP; ++u) { const C d = km[u] - mean; q += km2[u] + kn[u] * d * d; }
    for (long long j = gi + (long long)CK_BN_KEEP * gsz; on && j < K; j += gsz) {
      const long long o = c * cs + j * ks;
      const C d = __ldcg(pm + o) - mean;
      q += __ldcg(pm2 + o) + __ldcg(pn + o) * d * d;
    }
    C unused = C(0);
    ck_bn_group_sum2(q, unused, per_block, nw, &part[0][0]);
    if (on && gi == 0)
      ck_bn_finish<T>(c, 1, sn, mean, q, gamma, running_mean, running_var, save_mean, save_invstd, scale, momentum, eps);
  });
  ck_grid_barrier(count, 2);
  // 3. the block's channels' values to shared memory, once a block rather than once a thread
  long long c_lo, nc;
  ck_bn_block_channels<V, CL>(csv, sv, c_lo, nc);
  if (t < nc) {
    part[0][t] = __ldcg(save_mean + c_lo + t);
    part[1][t] = __ldcg(scale + c_lo + t);
    part[2][t] = beta ? tr::load(beta[c_lo + t]) : C(0);
  }
  __syncthreads();
  if (k >= csv) return;
  C mu[V], sc[V], bt[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const long long c = ck_bn_lane_channel<V, CL>(k, sv, i) - c_lo;
    mu[i] = part[0][c]; sc[i] = part[1][c]; bt[i] = part[2][c];
  }
  const R* __restrict__ rr = reinterpret_cast<const R*>(residual);
  R* __restrict__ yr = reinterpret_cast<R*>(y);
  const long long step = (long long)blockDim.y * CK_U;
  for (long long rb = r0 + threadIdx.y; rb < r1; rb += step) {
    ck_pack<T, V> pr[CK_U];   // (EPI's residual; unused, and gone, without)
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (EPI && rr && r < r1) pr[u].raw = rr[r * csv + k];
    }
    ck_pack<T, V> p[CK_U];   // (from the tile, or from x past it: all of them in flight)
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < r1) p[u].raw = r < split ? tile[(r - r0) * blockDim.x + threadIdx.x] : xr[r * csv + k];
    }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < r1) yr[r * csv + k] = ck_bn_apply_pack<T, V, EPI>(p[u], pr[u], rr, relu, mu, sc, bt).raw;
    }
  }
}

// Backward reduction, channels-last: dy, x: [N, C/V] vectors as in ck_bn_stats_cl; mean: [C]
// (save_mean). psg, psgx: [gridDim.y, C] partial sums of dy and dy*(x - mean) per row chunk and
// channel (laid out as ck_bn_stats_cl's partials). RELU: dy masked as ck_bn_bwd_small's (gamma,
// beta: [C] of T or null; invstd: [C], acc).
// Traffic: 2 * N*C*sizeof(T) read + 2*C*gridDim.y*sizeof(acc) written.
// sg_src, sx, rb0, rs, kk, fg, fx, split: as ck_bn_bwd_reduce_body's.
template <typename T, int V, bool RELU, bool SPLIT = false>
__device__ __forceinline__ void ck_bn_bwd_reduce_cl_body(
    const typename ck_raw<sizeof(T) * V>::type* __restrict__ sg_src, const typename ck_raw<sizeof(T) * V>::type* __restrict__ sx,
    long long rb0, long long rs, long long kk, const typename ck_raw<sizeof(T) * V>::type* __restrict__ fg,
    const typename ck_raw<sizeof(T) * V>::type* __restrict__ fx, long long split,
    const typename ck_traits<T>::acc* __restrict__ mean,
    typename ck_traits<T>::acc* __restrict__ psg, typename ck_traits<T>::acc* __restrict__ psgx,
    long long N, long long cv, long long chunk, const T* __restrict__ gamma, const T* __restrict__ beta,
    const typename ck_traits<T>::acc* __restrict__ invstd) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  __shared__ C sh[2 * V][256];
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const bool live = k < cv;
  const long long r0 = (long long)blockIdx.y * chunk;
  const long long r1 = r0 + chunk < N ? r0 + chunk : N;
  C mu[V], sg[V], sgx[V], msc[V], mbt[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    mu[i] = live ? mean[k * V + i] : C(0); sg[i] = C(0); sgx[i] = C(0);
    msc[i] = mbt[i] = C(0);
    if (RELU && live) ck_bn_mask_coefs<T>(k * V + i, gamma, beta, invstd, msc[i], mbt[i]);
  }
  const long long step = (long long)blockDim.y * CK_U;
  for (long long rb = r0 + threadIdx.y; live && rb < r1; rb += step) {
    ck_pack<T, V> px[CK_U], pg[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const long long r = rb + (long long)u * blockDim.y;
      if (r < r1 && (!SPLIT || r < split)) { px[u].raw = sx[(r - rb0) * rs + kk]; pg[u].raw = sg_src[(r - rb0) * rs + kk]; }
      else if (SPLIT && r < r1) { px[u].raw = fx[r * cv + k]; pg[u].raw = fg[r * cv + k]; }
    }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      if (rb + (long long)u * blockDim.y < r1) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const C xv = tr::load(px[u].v[i]);
          const C g = ck_bn_masked<RELU>(tr::load(pg[u].v[i]), xv, mu[i], msc[i], mbt[i]);
          sg[i] += g;
          sgx[i] += g * (xv - mu[i]);
        }
      }
    }
  }
  if (blockDim.y > 1) {  // the row-lanes of this column, summed in order
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
    for (int i = 0; i < V; ++i) { sh[i][t] = sg[i]; sh[V + i][t] = sgx[i]; }
    __syncthreads();
    if (threadIdx.y != 0) return;
    for (int ty = 1; ty < (int)blockDim.y; ++ty) {
      const int o = ty * blockDim.x + threadIdx.x;
#pragma unroll
      for (int i = 0; i < V; ++i) { sg[i] += sh[i][o]; sgx[i] += sh[V + i][o]; }
    }
  }
  if (live) {
    const long long o = (long long)blockIdx.y * cv * V + k * V;
#pragma unroll
    for (int i = 0; i < V; ++i) { psg[o + i] = sg[i]; psgx[o + i] = sgx[i]; }
  }
}

template <typename T, int V, bool RELU>
__global__ void __launch_bounds__(256, 1) ck_bn_bwd_reduce_cl(
    const T* __restrict__ dy, const T* __restrict__ x, const typename ck_traits<T>::acc* __restrict__ mean,
    typename ck_traits<T>::acc* __restrict__ psg, typename ck_traits<T>::acc* __restrict__ psgx,
    long long N, long long cv, long long chunk, const T* __restrict__ gamma, const T* __restrict__ beta,
    const typename ck_traits<T>::acc* __restrict__ invstd) {
  CK_PDL_WAIT();
  typedef typename ck_raw<sizeof(T) * V>::type R;
  ck_bn_bwd_reduce_cl_body<T, V, RELU>(reinterpret_cast<const R*>(dy), reinterpret_cast<const R*>(x), 0, cv,
                                       (long long)blockIdx.x * blockDim.x + threadIdx.x, reinterpret_cast<const R*>(dy),
                                       reinterpret_cast<const R*>(x), N, mean, psg, psgx, N, cv,
                                       chunk, gamma, beta, invstd);
}

// The training backward reading dy and x once (ck_bn_resident's scheme for ck_bn_bwd_reduce(_cl),
// ck_bn_bwd_finalize and ck_bn_bwd_apply, which read them twice), where both fit in the shared
// memory of the co-resident blocks: dynamic shared memory [2, tile_rows, blockDim.x] vectors, dy's
// tile then x's (the block's first tile_rows rows: all of its chunk where they fit; the rest read
// twice, as ck_bn_resident's). 1. Each thread copies its rows of both (cp.async), then its partial sums of dy and
// dy*(x - mean) from the tiles as ck_bn_bwd_reduce(_cl) (RELU: dy masked likewise); grid barrier.
// 2. Each channel's sums of its K partials (partial j at c*cs + j*ks) in a fixed order
// (ck_bn_each_channel, ck_bn_group_sum2): dgamma, dbeta and dx's coefficients ka, kb, kd
// ([C], acc) as ck_bn_bwd_finalize; grid barrier. 3. The block's channel values to shared memory
// and dx from the tiles as ck_bn_bwd_apply. count: as ck_bn_resident's. count_n: N*S.
// Traffic: 2 * N*CS*sizeof(T) read + N*CS*sizeof(T) written + the partials.
template <typename T, int V, bool CL, bool RELU>
__global__ void __launch_bounds__(256, 2) ck_bn_bwd_resident(
    const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx, const typename ck_traits<T>::acc* __restrict__ mean,
    typename ck_traits<T>::acc* psg, typename ck_traits<T>::acc* psgx, long long N, long long csv, long long sv,
    long long chunk, long long tile_rows, long long K, long long cs, long long ks, long long C_, const T* __restrict__ gamma,
    const T* __restrict__ beta, const typename ck_traits<T>::acc* __restrict__ invstd, T* __restrict__ dgamma,
    T* __restrict__ dbeta, typename ck_traits<T>::acc* ka, typename ck_traits<T>::acc* kb,
    typename ck_traits<T>::acc* kd, typename ck_traits<T>::acc count_n, unsigned* count) {
  CK_PDL_WAIT();
  typedef typename ck_traits<T>::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  extern __shared__ __align__(16) unsigned char ck_bn_tile[];
  __shared__ C part[6][256];   // 2: ck_bn_group_sum2's scratch; 3: the block's channel values
  R* tg = reinterpret_cast<R*>(ck_bn_tile);
  R* tx = tg + tile_rows * blockDim.x;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  const int nw = (int)(blockDim.x * blockDim.y) >> 5;
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long r0 = (long long)blockIdx.y * chunk;
  const long long r1 = r0 + chunk < N ? r0 + chunk : N;
  const long long split = r0 + tile_rows;   // rows from here on are read from dy and x, twice
  const R* __restrict__ gr = reinterpret_cast<const R*>(dy);
  const R* __restrict__ xr = reinterpret_cast<const R*>(x);
  // 1. the tiles, then the partial sums
  for (long long r = r0 + threadIdx.y; k < csv && r < r1 && r < split; r += blockDim.y) {
    const long long o = (r - r0) * blockDim.x + threadIdx.x;
    ck_cp_async(tg + o, gr + r * csv + k);
    ck_cp_async(tx + o, xr + r * csv + k);
  }
  ck_cp_wait();
  if (CL) ck_bn_bwd_reduce_cl_body<T, V, RELU, true>(tg, tx, r0, blockDim.x, threadIdx.x, gr, xr, split, mean, psg, psgx, N, csv,
                                               chunk, gamma, beta, invstd);
  else ck_bn_bwd_reduce_body<T, V, RELU, true>(tg, tx, r0, blockDim.x, threadIdx.x, gr, xr, split, mean, psg, psgx, N, csv, sv,
                                         chunk, gamma, beta, invstd);
  ck_grid_barrier(count, 1);
  // 2. the channels' sums, dgamma, dbeta and dx's coefficients
  ck_bn_each_channel(C_, nw, [&](long long c, bool on, int gi, int gsz, bool per_block) {
    C sg = C(0), sgx = C(0);
    for (long long j = gi; on && j < K; j += gsz) {
      const long long o = c * cs + j * ks;
      sg += __ldcg(psg + o);
      sgx += __ldcg(psgx + o);
    }
    ck_bn_group_sum2(sg, sgx, per_block, nw, &part[0][0]);
    if (on && gi == 0) ck_bn_bwd_finish<T>(c, sg, sgx, gamma, invstd, dgamma, dbeta, ka, kb, kd, count_n);
  });
  ck_grid_barrier(count, 2);
  // 3. the block's channels' values to shared memory, then dx from the tiles
  long long c_lo, nc;
  ck_bn_block_channels<V, CL>(csv, sv, c_lo, nc);
  if (t < nc) {
    const long long c = c_lo + t;
    part[0][t] = mean[c]; part[1][t] = __ldcg(ka + c); part[2][t] = __ldcg(kb + c); part[3][t] = __ldcg(kd + c);
    part[4][t] = part[5][t] = C(0);
    if (RELU) ck_bn_mask_coefs<T>(c, gamma, beta, invstd, part[4][t], part[5][t]);
  }
  __syncthreads();
  if (k >= csv) return;
  C mu[V], a[V], b[V], d[V], msc[V], mbt[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const long long c = ck_bn_lane_channel<V, CL>(k, sv, i) - c_lo;
    mu[i] = part[0][c]; a[i] = part[1][c]; b[i] = part[2][c]; d[i] = part[3][c]; msc[i] = part[4][c]; mbt[i] = part[5][c];
  }
  R* __restrict__ dr = reinterpret_cast<R*>(dx);
  for (long long r = r0 + threadIdx.y; r < r1 && r < split; r += blockDim.y) {
    const long long o = (r - r0) * blockDim.x + threadIdx.x;
    ck_pack<T, V> px, pg;
    px.raw = tx[o];
    pg.raw = tg[o];
    dr[r * csv + k] = ck_bn_bwd_apply_pack<T, V, RELU>(px, pg, mu, a, b, d, msc, mbt).raw;
  }
  // (the rows past the tiles, as ck_bn_bwd_apply)
  ck_bn_bwd_apply_rows<T, V, RELU>(xr, gr, dr, k, csv, (split > r0 ? split : r0) + threadIdx.y, r1,
                                   (long long)blockDim.y * CK_U, mu, a, b, d, msc, mbt);
}
