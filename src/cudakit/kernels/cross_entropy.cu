
// The target of row i: targets is int64 when t64, else int32 (a runtime flag: half the instantiations).
__device__ __forceinline__ long long ck_target(const void* __restrict__ targets, int t64, long long i) {
  return t64 ? reinterpret_cast<const long long*>(targets)[i] : (long long)reinterpret_cast<const int*>(targets)[i];
}

// targets: [n] (int32 or int64, t64); stat: [4] int64 = (count of targets != ignore, count of those outside
// [0, C), index of the first of those or n, 0: the blocks of the main kernel done). One block. T (the logits' type, unused) gives each
// dtype's kernel family its own instantiation.
// err: the device's error flag (int64 [8]) or null; code: the op's error code written there with
// (first bad row, its target, bad count, C, n, ignore) when some target is out of range and no
// error is pending.
template <typename T>
__global__ void __launch_bounds__(1024) ck_ce_prep(const void* __restrict__ targets, int t64, long long n,
                                                   long long C, long long ignore, long long* __restrict__ stat,
                                                   long long* __restrict__ err, long long code) {
  CK_PDL_WAIT();
  __shared__ long long sh[3][32];
  long long cnt = 0, bad = 0, first = n;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    const long long t = ck_target(targets, t64, i);
    if (t == ignore) continue;
    ++cnt;
    if (t < 0 || t >= C) { ++bad; first = i < first ? i : first; }
  }
  for (int off = 16; off > 0; off >>= 1) {
    cnt += __shfl_xor_sync(0xffffffffu, cnt, off);
    bad += __shfl_xor_sync(0xffffffffu, bad, off);
    const long long f = __shfl_xor_sync(0xffffffffu, first, off);
    first = f < first ? f : first;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  if (lane == 0) { sh[0][warp] = cnt; sh[1][warp] = bad; sh[2][warp] = first; }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < nw; ++w) { cnt += sh[0][w]; bad += sh[1][w]; first = sh[2][w] < first ? sh[2][w] : first; }
    stat[0] = cnt; stat[1] = bad; stat[2] = first; stat[3] = 0;  // stat[3]: the blocks done (ck_ce_total)
    if (bad && err && atomicCAS(reinterpret_cast<unsigned long long*>(err), 0ull, (unsigned long long)code) == 0ull) {
      err[1] = first; err[2] = ck_target(targets, t64, first); err[3] = bad; err[4] = C; err[5] = n; err[6] = ignore;
    }
  }
}

// The weight of row `row`'s gradient: grad_loss (gl: [rows] when gl_rows, else [1]; null: 1),
// divided by the non-ignored count for "mean".
template <typename C>
__device__ __forceinline__ C ck_ce_weight(const C* __restrict__ gl, int gl_rows, int mean,
                                         const long long* __restrict__ stat, long long row) {
  C w = gl ? gl[gl_rows ? row : 0] : C(1);
  if (mean) w /= C(stat[0]);
  return w;
}

// After a block of the main kernel wrote its rows' losses: the last block to finish (its ticket from
// stat[3], which ck_ce_prep zeroed) sums all n row losses into total[0] in a fixed order (each
// thread a strided run, then shuffles and the warps in order: bitwise the same whichever block is
// last), divided by stat[0] for "mean". Every thread of the block calls it (no thread has returned).
template <typename C>
__device__ __forceinline__ void ck_ce_total(const C* loss, long long n, long long* stat, int mean,
                                            C* __restrict__ total) {
  __shared__ C part[32];
  __shared__ int last;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
  __syncthreads();  // this block's losses are written
  if (tid == 0) {
    __threadfence();
    const unsigned long long done = atomicAdd(reinterpret_cast<unsigned long long*>(stat + 3), 1ull);
    last = done == (unsigned long long)(gridDim.x - 1);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  C s = C(0);
  for (long long i = tid; i < n; i += nt) s += __ldcg(loss + i);
  const int lane = tid & 31, cnt = min(32, nt - (tid & ~31));  // this warp's threads (the block may be < 32)
  const unsigned mask = cnt == 32 ? 0xffffffffu : (1u << cnt) - 1u;
  for (int off = 16; off > 0; off >>= 1) {
    const C o = __shfl_down_sync(mask, s, off);
    if (lane + off < cnt) s += o;
  }
  if (lane == 0) part[tid >> 5] = s;
  __syncthreads();
  if (tid == 0) {
    for (int w = 1; w < (nt + 31) >> 5; ++w) s += part[w];
    total[0] = mean ? s / C(stat[0]) : s;
  }
}

// logits, grad: [rows, nvec*V] (C = nvec*V columns); targets: [rows] (int64 when t64, else int32); gl, stat: see
// ck_ce_weight; loss: [rows] (acc) or null; grad: null for the forward only.
// Block (tpr, rpb) as ck_softmax_fwd_reg: the row's logits in registers as the accumulation type
// (padding past the row's end -inf), their exp kept for the gradient.
template <typename T, int V, int NV>
__device__ __forceinline__ void ck_ce_reg_out(
    const T* __restrict__ logits, long long t, bool use, const typename ck_traits<T>::acc* __restrict__ gl, int gl_rows,
    int mean, const long long* __restrict__ stat, typename ck_traits<T>::acc* __restrict__ loss, T* __restrict__ grad,
    long long row, long long ncol, int nvec, long long off, typename ck_traits<T>::acc m, typename ck_traits<T>::acc s,
    typename ck_traits<T>::acc (&v)[NV][V]);

// total: null, or [1] (acc): the rows' losses summed (divided by the count for "mean"), see ck_ce_total.
template <typename T, int V, int NV>
__global__ void __launch_bounds__(ck_fwd_bound<T, V, NV>::value) ck_ce_reg(
    const T* __restrict__ logits, const void* __restrict__ targets, int t64, const typename ck_traits<T>::acc* __restrict__ gl,
    int gl_rows, int mean, long long* __restrict__ stat, typename ck_traits<T>::acc* __restrict__ loss,
    T* __restrict__ grad, long long rows, int nvec, long long ignore, typename ck_traits<T>::acc* __restrict__ total) {
  CK_PDL_WAIT();
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C red[CK_RED];
  const int tpr = blockDim.x;
  const long long ncol = (long long)nvec * V;
  const long long row = (long long)blockIdx.x * blockDim.y + threadIdx.y;
  const bool live = row < rows;
  const long long t = live ? ck_target(targets, t64, row) : ignore;
  const bool use = t != ignore;                  // live and not ignored: the row is read
  const int n = use ? nvec - (int)threadIdx.x : 0;  // this thread's packs: j*tpr < n
  const long long off = (live ? row : 0) * (long long)nvec + threadIdx.x;
  const R* __restrict__ xr = reinterpret_cast<const R*>(logits) + off;
  ck_pack<T, V> p[NV];
#pragma unroll
  for (int j = 0; j < NV; ++j) if (j * tpr < n) p[j].raw = xr[j * tpr];
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
    for (int i = 0; i < V; ++i) { v[j][i] = ck_exp<T>(v[j][i] - m); s += v[j][i]; }
  }
  s = ck_row_red<false>(s, red);
  if (live) ck_ce_reg_out<T, V, NV>(logits, t, use, gl, gl_rows, mean, stat, loss, grad, row, ncol, nvec, off, m, s, v);
  if (total) ck_ce_total(loss, rows, stat, mean, total);
}

// ck_ce_reg's outputs for a live row: its loss and gradient.
template <typename T, int V, int NV>
__device__ __forceinline__ void ck_ce_reg_out(
    const T* __restrict__ logits, long long t, bool use, const typename ck_traits<T>::acc* __restrict__ gl, int gl_rows,
    int mean, const long long* __restrict__ stat, typename ck_traits<T>::acc* __restrict__ loss, T* __restrict__ grad,
    long long row, long long ncol, int nvec, long long off, typename ck_traits<T>::acc m, typename ck_traits<T>::acc s,
    typename ck_traits<T>::acc (&v)[NV][V]) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  const int tpr = blockDim.x;
  const bool ok = t >= 0 && t < ncol;
  if (loss && threadIdx.x == 0) {
    C l = C(0);
    if (use) l = ok ? (m - tr::load(logits[row * ncol + t])) + ck_log(s) : ck_nan(C(0));
    loss[row] = l;
  }
  if (!grad) return;
  R* __restrict__ gr = reinterpret_cast<R*>(grad) + off;
  const C w = use ? ck_ce_weight(gl, gl_rows, mean, stat, row) : C(0);
  const C a = use ? w * ck_rcp(s) : C(0);      // ignored rows: exactly 0
  const long long tl = ok ? t - (long long)threadIdx.x * V : -1;  // t relative to pack 0 of this thread
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if ((long long)j * tpr < (long long)nvec - threadIdx.x) {
      C o[V];
      const long long c0 = (long long)j * tpr * V;  // column of element 0 of pack j, minus threadIdx.x*V
#pragma unroll
      for (int i = 0; i < V; ++i) o[i] = (use ? v[j][i] * a : C(0)) - (c0 + i == tl ? w : C(0));
      ck_pack<T, V> po;
      ck_cvt<T, V>::store(po, o);
      gr[j * tpr] = po.raw;
    }
  }
}

template <typename T, int V>
__device__ __forceinline__ void ck_ce_loop_row(
    const T* __restrict__ logits, const void* __restrict__ targets, int t64, const typename ck_traits<T>::acc* __restrict__ gl,
    int gl_rows, int mean, const long long* __restrict__ stat, typename ck_traits<T>::acc* __restrict__ loss,
    T* __restrict__ grad, int nvec, long long ignore);

// Long rows: one 1-D block per row (blockIdx.x). Shapes as ck_ce_reg.
template <typename T, int V>
__global__ void __launch_bounds__(1024) ck_ce_loop(
    const T* __restrict__ logits, const void* __restrict__ targets, int t64, const typename ck_traits<T>::acc* __restrict__ gl,
    int gl_rows, int mean, long long* __restrict__ stat, typename ck_traits<T>::acc* __restrict__ loss,
    T* __restrict__ grad, int nvec, long long ignore, typename ck_traits<T>::acc* __restrict__ total) {
  CK_PDL_WAIT();
  ck_ce_loop_row<T, V>(logits, targets, t64, gl, gl_rows, mean, stat, loss, grad, nvec, ignore);
  if (total) ck_ce_total(loss, (long long)gridDim.x, stat, mean, total);
}

// ck_ce_loop's row (blockIdx.x): its loss and gradient.
template <typename T, int V>
__device__ __forceinline__ void ck_ce_loop_row(
    const T* __restrict__ logits, const void* __restrict__ targets, int t64, const typename ck_traits<T>::acc* __restrict__ gl,
    int gl_rows, int mean, const long long* __restrict__ stat, typename ck_traits<T>::acc* __restrict__ loss,
    T* __restrict__ grad, int nvec, long long ignore) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C red[64];
  const long long row = blockIdx.x;
  const long long ncol = (long long)nvec * V;
  const long long t = ck_target(targets, t64, row);
  const int step = blockDim.x * CK_U;
  R* __restrict__ gr = reinterpret_cast<R*>(grad) + row * nvec;
  if (t == ignore) {  // the whole block: loss 0, gradient 0, nothing read
    if (loss && threadIdx.x == 0) loss[row] = C(0);
    if (grad) {
      ck_pack<T, V> z;
      z.raw = typename ck_raw<sizeof(T) * V>::type();
      for (int k = threadIdx.x; k < nvec; k += blockDim.x) gr[k] = z.raw;
    }
    return;
  }
  const R* __restrict__ xr = reinterpret_cast<const R*>(logits) + row * nvec;
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
  const bool ok = t >= 0 && t < ncol;
  if (loss && threadIdx.x == 0) loss[row] = ok ? (m - tr::load(logits[row * ncol + t])) + ck_log(s) : ck_nan(C(0));
  if (!grad) return;
  const C w = ck_ce_weight(gl, gl_rows, mean, stat, row);
  const C a = w * ck_rcp(s);
  const long long tl = ok ? t : -1;
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
        for (int i = 0; i < V; ++i) v[i] = ck_exp<T>(v[i] - m) * a - ((long long)k * V + i == tl ? w : C(0));
        ck_pack<T, V> po;
        ck_cvt<T, V>::store(po, v);
        gr[k] = po.raw;
      }
    }
  }
}

// loss_rows: [n] (acc); out: [1] = their sum in a fixed order, divided by stat[0] when mean.
template <typename C>
__global__ void __launch_bounds__(1024) ck_ce_reduce(const C* __restrict__ loss_rows, long long n,
                                                     const long long* __restrict__ stat, int mean, C* __restrict__ out) {
  CK_PDL_WAIT();
  __shared__ C red[CK_RED];
  C s = C(0);
  for (long long i = threadIdx.x; i < n; i += blockDim.x) s += loss_rows[i];
  s = ck_row_red<false>(s, red);
  if (threadIdx.x == 0) out[0] = mean ? s / C(stat[0]) : s;
}
