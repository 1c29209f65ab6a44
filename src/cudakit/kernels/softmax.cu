
// ================================================================ forward
// x, y: [rows, nvec*V]; block (tpr, rpb): row blockIdx.x*rpb + threadIdx.y; its thread tx holds
// the packs tx, tx + tpr, ... (NV of them). log != 0: log_softmax.
// Traffic: rows*cols*sizeof(T) read + rows*cols*sizeof(T) written.
template <typename T, int V, int NV>
__global__ void __launch_bounds__(ck_fwd_bound<T, V, NV>::value) ck_softmax_fwd_reg(
    const T* __restrict__ x, T* __restrict__ y, long long rows, int nvec, int is_log) {
  CK_PDL_WAIT();
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
  CK_PDL_WAIT();
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
  CK_PDL_WAIT();
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

// Rows too long for g and y both in registers: one 1-D block per row (blockIdx.x), g in
// registers (NV packs per thread), y in dynamic shared memory (nvec 16-byte packs; each thread
// copies and reads back only its own packs, so no block barrier is needed for them).
// Shapes and traffic as ck_softmax_bwd_reg. V*sizeof(T) must be 16.
template <typename T, int V, int NV>
__global__ void __launch_bounds__(1024) ck_softmax_bwd_smem(
    const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ dx, int nvec, int is_log) {
  CK_PDL_WAIT();
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
  CK_PDL_WAIT();
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
