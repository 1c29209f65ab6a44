
extern __shared__ __align__(16) unsigned char ck_dyn_smem[];

#define CK_U 4        // independent vector loads a loop kernel issues before it uses any of them
#define CK_RED 512    // shared scratch per block for row reductions: 32 per row, rows of > 32 threads <= 16 per block

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
