
#define CK_RU 4            // independent vector loads each thread issues before using any
#define CK_SUM 0           // also mean (div = N)
#define CK_MAX 1
#define CK_MIN 2
#define CK_ARGMAX 3
#define CK_ARGMIN 4
#define CK_VAR 5
#define CK_NOIDX 0x7fffffffffffffffLL   // "no element yet" index of an argmax/argmin state

template <typename C> __device__ __forceinline__ C ck_inf();
template <> __device__ __forceinline__ float ck_inf<float>() { return __int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double ck_inf<double>() { return __longlong_as_double(0x7ff0000000000000LL); }

__device__ __forceinline__ long long ck_div(long long a, long long b) {  // a, b >= 0
  if ((((unsigned long long)a | (unsigned long long)b) >> 32) == 0) return (long long)((unsigned)a / (unsigned)b);
  return a / b;
}
__device__ __forceinline__ long long ck_lmin(long long a, long long b) { return a < b ? a : b; }

// A reduction state; the fields an op does not use are dead code.
//   SUM: a = sum. MAX/MIN: a = extreme. ARG*: a = extreme, i = its index (CK_NOIDX: none yet).
//   VAR: a = count, b = mean of (x - shift), c = sum of squared deviations.
template <typename C> struct ck_rs { C a, b, c; long long i; };

template <int OP, typename C> __device__ __forceinline__ void ck_rs_init(ck_rs<C>& s) {
  s.a = (OP == CK_MAX || OP == CK_ARGMAX) ? -ck_inf<C>() : (OP == CK_MIN || OP == CK_ARGMIN) ? ck_inf<C>() : C(0);
  s.b = C(0); s.c = C(0); s.i = CK_NOIDX;
}

// Chan's merge of (count, mean, m2) states; an empty side is skipped.
template <typename C> __device__ __forceinline__ void ck_chan(ck_rs<C>& s, C nb, C mb, C m2b) {
  if (nb == C(0)) return;
  if (s.a == C(0)) { s.a = nb; s.b = mb; s.c = m2b; return; }
  const C nn = s.a + nb;
  const C d = mb - s.b;
  const C f = nb / nn;
  s.b += d * f;
  s.c += m2b + d * d * s.a * f;
  s.a = nn;
}

// is (vb, ib) a better argmax (MAXI) / argmin candidate than (va, ia)? NaN beats everything, the
// first NaN wins, ties go to the lower index.
template <bool MAXI, typename C>
__device__ __forceinline__ bool ck_better(C va, long long ia, C vb, long long ib) {
  if (ib == CK_NOIDX) return false;
  if (ia == CK_NOIDX) return true;
  if (va != va) return vb != vb && ib < ia;
  if (vb != vb) return true;
  if (MAXI ? vb > va : vb < va) return true;
  return vb == va && ib < ia;
}

// One value with its index; a thread adds its values in increasing index order.
template <int OP, typename C> __device__ __forceinline__ void ck_rs_add(ck_rs<C>& s, C v, long long i) {
  if (OP == CK_SUM) s.a += v;
  else if (OP == CK_MAX) s.a = (v > s.a || v != v) ? v : s.a;   // NaN sticks: NaN > v is false
  else if (OP == CK_MIN) s.a = (v < s.a || v != v) ? v : s.a;
  else if (OP == CK_ARGMAX || OP == CK_ARGMIN) {
    // in increasing index order a strict comparison keeps the first extreme; a NaN is kept
    if (s.i == CK_NOIDX || (s.a == s.a && (v != v || (OP == CK_ARGMAX ? v > s.a : v < s.a)))) { s.a = v; s.i = i; }
  } else ck_chan(s, C(1), v, C(0));
}

// N values (masked) of an op without indices: VAR takes their exact mean and squared deviations,
// then one Chan merge; SUM adds their sum.
template <int OP, int N, typename C>
__device__ __forceinline__ void ck_rs_chunk(ck_rs<C>& s, const C (&v)[N], const bool (&m)[N]) {
  if (OP == CK_VAR) {
    C n = C(0), t = C(0);
#pragma unroll
    for (int k = 0; k < N; ++k) if (m[k]) { n += C(1); t += v[k]; }
    if (n == C(0)) return;
    const C pm = t / n;
    C q = C(0);
#pragma unroll
    for (int k = 0; k < N; ++k) if (m[k]) { const C d = v[k] - pm; q += d * d; }
    ck_chan(s, n, pm, q);
  } else if (OP == CK_SUM) {
    C t = C(0);
#pragma unroll
    for (int k = 0; k < N; ++k) t += m[k] ? v[k] : C(0);
    s.a += t;
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) if (m[k]) ck_rs_add<OP>(s, v[k], 0);
  }
}

template <int OP, typename C> __device__ __forceinline__ void ck_rs_merge(ck_rs<C>& s, const ck_rs<C>& o) {
  if (OP == CK_SUM) s.a += o.a;
  else if (OP == CK_MAX || OP == CK_MIN) ck_rs_add<OP>(s, o.a, 0);
  else if (OP == CK_ARGMAX || OP == CK_ARGMIN) {
    if (ck_better<OP == CK_ARGMAX>(s.a, s.i, o.a, o.i)) { s.a = o.a; s.i = o.i; }
  } else ck_chan(s, o.a, o.b, o.c);
}

template <int OP, typename C> __device__ __forceinline__ ck_rs<C> ck_rs_shfl(const ck_rs<C>& s, int off) {
  ck_rs<C> o;
  o.a = __shfl_xor_sync(0xffffffffu, s.a, off);
  o.b = OP == CK_VAR ? __shfl_xor_sync(0xffffffffu, s.b, off) : C(0);
  o.c = OP == CK_VAR ? __shfl_xor_sync(0xffffffffu, s.c, off) : C(0);
  o.i = (OP == CK_ARGMAX || OP == CK_ARGMIN) ? __shfl_xor_sync(0xffffffffu, s.i, off) : 0LL;
  return o;
}

// Combines the states of aligned groups of G lanes (a power of two <= 32); every lane of the warp
// calls it; the group's first lane ends with the groups's state (a fixed combine order).
template <int OP, typename C> __device__ __forceinline__ void ck_rs_group(ck_rs<C>& s, int G) {
  for (int off = G >> 1; off > 0; off >>= 1) {
    const ck_rs<C> o = ck_rs_shfl<OP>(s, off);
    ck_rs_merge<OP>(s, o);
  }
}

// Partial states: ws arrays [nsplit, n_out] (w0 always; w1, w2 for VAR; wi for ARG*).
template <int OP, typename C>
__device__ __forceinline__ void ck_rs_store(const ck_rs<C>& s, C* w0, C* w1, C* w2, long long* wi, long long p) {
  w0[p] = s.a;
  if (OP == CK_VAR) { w1[p] = s.b; w2[p] = s.c; }
  if (OP == CK_ARGMAX || OP == CK_ARGMIN) wi[p] = s.i;
}
template <int OP, typename C>
__device__ __forceinline__ ck_rs<C> ck_rs_load(const C* w0, const C* w1, const C* w2, const long long* wi, long long p) {
  ck_rs<C> s;
  s.a = w0[p];
  s.b = OP == CK_VAR ? w1[p] : C(0);
  s.c = OP == CK_VAR ? w2[p] : C(0);
  s.i = (OP == CK_ARGMAX || OP == CK_ARGMIN) ? wi[p] : 0LL;
  return s;
}

template <typename O> struct ck_red_out {
  template <typename C> static __device__ __forceinline__ O val(C v) { return ck_traits<O>::store(v); }
  static __device__ __forceinline__ O idx(long long i) { return ck_traits<O>::store((typename ck_traits<O>::acc)i); }
};
template <> struct ck_red_out<long long> {
  template <typename C> static __device__ __forceinline__ long long val(C v) { return (long long)v; }
  static __device__ __forceinline__ long long idx(long long i) { return i; }
};

// The result: SUM: sum / div (div = 1 for sum, N for mean); VAR: m2 / div (div = N - ddof, as
// NumPy: 0 gives inf or NaN); ARG*: the index; MAX/MIN: the value.
template <int OP, typename O, typename C>
__device__ __forceinline__ void ck_rs_finish(const ck_rs<C>& s, O* out, long long p, C div) {
  if (OP == CK_ARGMAX || OP == CK_ARGMIN) out[p] = ck_red_out<O>::idx(s.i);
  else if (OP == CK_VAR) out[p] = ck_red_out<O>::val(s.c / div);
  else if (OP == CK_SUM) out[p] = ck_red_out<O>::val(s.a / div);
  else out[p] = ck_red_out<O>::val(s.a);
}

// ================================================================ rows (inner == 1)
// x: [outer, nvec * V] contiguous, 16-byte aligned when V > 1. Block (tpr, 256 / tpr): thread
// (tx, ty) reduces row blockIdx.x * blockDim.y + ty. A row is read in groups of G = tpr * CK_RU
// vectors dealt round-robin to the gridDim.y splits (split y: groups y, y + gridDim.y, ...; so a
// split row is read front to back by all its blocks together); thread tx takes vectors tx,
// tx + tpr, ... of a group; sum/max/min issue the next group's loads before reducing the current one.
// gridDim.y == 1: out[outer] gets the results; else the partial states go to
// ws[blockIdx.y * outer + row] (ck_red_final combines them).
// Traffic: outer * nvec * V * sizeof(T) read once; outer results (or outer * nsplit states) written.
// Loads a group: vectors first + u * stride (u < CK_RU) that are < bound, at xr[index * pitch];
// ok[u] says which (the rest read as zero bits).
template <typename T, int V>
__device__ __forceinline__ void ck_load_group(ck_pack<T, V> (&p)[CK_RU], bool (&ok)[CK_RU],
    const typename ck_raw<sizeof(T) * V>::type* __restrict__ xr, long long first, int stride, long long bound,
    long long pitch) {
  typedef typename ck_raw<sizeof(T) * V>::type R;
#pragma unroll
  for (int u = 0; u < CK_RU; ++u) {
    const long long kk = first + (long long)u * stride;
    ok[u] = kk < bound;
    if (ok[u]) p[u].raw = xr[kk * pitch]; else p[u].raw = R();
  }
}

// Adds a group's loaded vectors (k: the thread's first vector index in it) to a row state.
template <int OP, typename T, int V>
__device__ __forceinline__ void ck_rows_reduce(ck_rs<typename ck_traits<T>::acc>& st, const ck_pack<T, V> (&p)[CK_RU],
    const bool (&ok)[CK_RU], long long k, int tpr, typename ck_traits<T>::acc shift) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  if (OP == CK_ARGMAX || OP == CK_ARGMIN) {
#pragma unroll
    for (int u = 0; u < CK_RU; ++u) {
      if (ok[u]) {
        const long long i0 = (k + (long long)u * tpr) * V;
#pragma unroll
        for (int i = 0; i < V; ++i) ck_rs_add<OP>(st, tr::load(p[u].v[i]), i0 + i);
      }
    }
  } else {
    C v[CK_RU * V];
    bool m[CK_RU * V];
#pragma unroll
    for (int u = 0; u < CK_RU; ++u) {
#pragma unroll
      for (int i = 0; i < V; ++i) { v[u * V + i] = tr::load(p[u].v[i]) - shift; m[u * V + i] = ok[u]; }
    }
    ck_rs_chunk<OP>(st, v, m);
  }
}

template <typename T, typename O, int OP, int V>
__global__ void __launch_bounds__(256) ck_red_rows(
    const T* __restrict__ x, O* __restrict__ out,
    typename ck_traits<T>::acc* __restrict__ w0, typename ck_traits<T>::acc* __restrict__ w1,
    typename ck_traits<T>::acc* __restrict__ w2, long long* __restrict__ wi,
    long long outer, long long nvec, typename ck_traits<T>::acc div) {
  CK_PDL_WAIT();
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ ck_rs<C> sh[8];
  const int tpr = blockDim.x;
  const long long row = (long long)blockIdx.x * blockDim.y + threadIdx.y;
  const bool live = row < outer;
  const long long G = (long long)tpr * CK_RU;          // vectors of a group
  const long long step = G * gridDim.y;                // from one group of this split to its next
  ck_rs<C> st;
  ck_rs_init<OP>(st);
  if (live) {
    const R* __restrict__ xr = reinterpret_cast<const R*>(x) + row * nvec;
    const C shift = OP == CK_VAR ? tr::load(x[row * nvec * V]) : C(0);
    // sum/max/min load the next group before reducing this one; var and arg* do not: that
    // adds a fourth of registers or more to their 40-64 and cuts the threads per SM
    // (measured: argmax over rows 0.47x torch with it)
    long long k = (long long)blockIdx.y * G + threadIdx.x;
    ck_pack<T, V> p[CK_RU];
    bool ok[CK_RU];
    if (OP <= CK_MIN) {
      ck_load_group<T, V>(p, ok, xr, k, tpr, nvec, 1);
      for (; k < nvec; k += step) {
        ck_pack<T, V> q[CK_RU];
        bool okq[CK_RU];
        ck_load_group<T, V>(q, okq, xr, k + step, tpr, nvec, 1);   // the next group, in flight meanwhile
        ck_rows_reduce<OP, T, V>(st, p, ok, k, tpr, shift);
#pragma unroll
        for (int u = 0; u < CK_RU; ++u) { p[u] = q[u]; ok[u] = okq[u]; }
      }
    } else {
      // stepping by G and skipping the other splits' groups only when split keeps argmax at 40-46
      // registers (a stride of step = G * gridDim.y took 80)
      const long long skip = step - G;
      for (; k < nvec; k += G) {
        ck_load_group<T, V>(p, ok, xr, k, tpr, nvec, 1);
        ck_rows_reduce<OP, T, V>(st, p, ok, k, tpr, shift);
        if (skip) k += skip;
      }
    }
  }
  // combine the tpr threads of each row: shuffles within a warp, then the warps in order
  ck_rs_group<OP>(st, tpr < 32 ? tpr : 32);
  if (tpr > 32) {
    const int nw = tpr >> 5, w = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) sh[threadIdx.y * nw + w] = st;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int k = 1; k < nw; ++k) ck_rs_merge<OP>(st, sh[threadIdx.y * nw + k]);
    }
  }
  if (threadIdx.x == 0 && live) {
    if (gridDim.y == 1) ck_rs_finish<OP>(st, out, row, div);
    else ck_rs_store<OP>(st, w0, w1, w2, wi, (long long)blockIdx.y * outer + row);
  }
}

// ================================================================ columns (inner > 1)
// x: [outer, R, ivec * V] contiguous, 16-byte aligned when V > 1. Block (bx, by), bx * by <= 256,
// by a power of two: thread (tx, ty) owns inner vector j = tile * bx + tx of slice o (blockIdx.x =
// o * tiles + tile). R is read in groups of G = by * CK_RU rows dealt round-robin to the gridDim.y
// splits: split y takes groups y, y + gridDim.y, ... and thread ty rows ty, ty + by, ... of each,
// so the whole grid sweeps R from top to bottom together (as a copy does, instead of gridDim.y
// separate streams). The next group's loads are issued before the current group is reduced:
// loads stay in flight while a thread computes. The by partial states are combined by a
// shared-memory tree. gridDim.y == 1: out[outer, ivec * V]; else states to
// ws[blockIdx.y * n_out + output].
// Traffic: outer * R * ivec * V * sizeof(T) read once; outer * ivec * V results written.
// Blocks per SM the column kernel's registers must allow: 4 (<= 64 registers) for sum/max/min,
// whose bytes in flight per SM are set by the threads that fit (16-bit: 74 registers, 3 blocks,
// 0.7 of the copy bandwidth); var and arg* hold 3-4 values per state and are left to the compiler.
template <int OP> struct ck_cols_min_blocks { enum { value = OP <= CK_MIN ? 4 : 1 }; };

template <typename T, typename O, int OP, int V>
__global__ void __launch_bounds__(256, ck_cols_min_blocks<OP>::value) ck_red_cols(
    const T* __restrict__ x, O* __restrict__ out,
    typename ck_traits<T>::acc* __restrict__ w0, typename ck_traits<T>::acc* __restrict__ w1,
    typename ck_traits<T>::acc* __restrict__ w2, long long* __restrict__ wi,
    long long outer, long long R_, long long ivec, int tiles, typename ck_traits<T>::acc div) {
  CK_PDL_WAIT();
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ ck_rs<C> sh[256];
  const int bx = blockDim.x, by = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
  const long long o = blockIdx.x / tiles;
  const long long j = (long long)(blockIdx.x - o * tiles) * bx + tx;
  const bool live = j < ivec;
  const long long G = (long long)by * CK_RU;          // rows of a group
  const long long step = G * gridDim.y;               // from one group of this split to its next
  ck_rs<C> st[V];
#pragma unroll
  for (int i = 0; i < V; ++i) ck_rs_init<OP>(st[i]);
  if (live) {
    const R* __restrict__ xr = reinterpret_cast<const R*>(x) + o * R_ * ivec + j;
    C shift[V];
    if (OP == CK_VAR) {  // row 0 of the slice: the same shift for every split
      ck_pack<T, V> p0;
      p0.raw = xr[0];
#pragma unroll
      for (int i = 0; i < V; ++i) shift[i] = tr::load(p0.v[i]);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) shift[i] = C(0);
    }
    long long r = (long long)blockIdx.y * G + ty;      // this thread's first row of the group
    ck_pack<T, V> p[CK_RU];
    bool ok[CK_RU];
    ck_load_group<T, V>(p, ok, xr, r, by, R_, ivec);
    while (r < R_) {
      ck_pack<T, V> q[CK_RU];
      bool okq[CK_RU];
      ck_load_group<T, V>(q, okq, xr, r + step, by, R_, ivec);   // the next group, in flight meanwhile
#pragma unroll
      for (int i = 0; i < V; ++i) {
        if (OP == CK_ARGMAX || OP == CK_ARGMIN) {
#pragma unroll
          for (int u = 0; u < CK_RU; ++u)
            if (ok[u]) ck_rs_add<OP>(st[i], tr::load(p[u].v[i]), r + (long long)u * by);
        } else {
          C v[CK_RU];
#pragma unroll
          for (int u = 0; u < CK_RU; ++u) v[u] = tr::load(p[u].v[i]) - shift[i];
          ck_rs_chunk<OP>(st[i], v, ok);
        }
      }
#pragma unroll
      for (int u = 0; u < CK_RU; ++u) { p[u] = q[u]; ok[u] = okq[u]; }
      r += step;
    }
  }
  if (by > 1) {  // tree over ty, one vector lane at a time (fixed order)
#pragma unroll
    for (int i = 0; i < V; ++i) {
      sh[ty * bx + tx] = st[i];
      __syncthreads();
      for (int s = by >> 1; s > 0; s >>= 1) {
        if (ty < s) {
          ck_rs_merge<OP>(st[i], sh[(ty + s) * bx + tx]);
          sh[ty * bx + tx] = st[i];
        }
        __syncthreads();
      }
    }
  }
  if (ty == 0 && live) {
    const long long n_out = outer * ivec * V;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const long long q = (o * ivec + j) * V + i;
      if (gridDim.y == 1) ck_rs_finish<OP>(st[i], out, q, div);
      else ck_rs_store<OP>(st[i], w0, w1, w2, wi, (long long)blockIdx.y * n_out + q);
    }
  }
}

// ================================================================ second pass of split reductions
// ws: [nsplit, n_out] partial states; out: [n_out]. Block (lanes, 256 / lanes): `lanes` threads
// per output read splits lane, lane + lanes, ... in order, then combine by shuffles.
// Traffic: n_out * nsplit states read, n_out results written.
template <typename T, typename O, int OP>
__global__ void __launch_bounds__(256) ck_red_final(
    const typename ck_traits<T>::acc* __restrict__ w0, const typename ck_traits<T>::acc* __restrict__ w1,
    const typename ck_traits<T>::acc* __restrict__ w2, const long long* __restrict__ wi,
    O* __restrict__ out, long long n_out, int nsplit, typename ck_traits<T>::acc div) {
  CK_PDL_WAIT();
  typedef typename ck_traits<T>::acc C;
  const long long q = (long long)blockIdx.x * blockDim.y + threadIdx.y;
  const bool live = q < n_out;
  ck_rs<C> st;
  ck_rs_init<OP>(st);
  if (live) {
    for (int s = threadIdx.x; s < nsplit; s += blockDim.x)
      ck_rs_merge<OP>(st, ck_rs_load<OP>(w0, w1, w2, wi, (long long)s * n_out + q));
  }
  ck_rs_group<OP>(st, blockDim.x);
  if (threadIdx.x == 0 && live) ck_rs_finish<OP>(st, out, q, div);
}

// ================================================================ backward: expand to x's shape
// dx: [outer, R, inner] (x's layout); g: [outer, inner] of dx's type; x: like dx (MODE 1);
// mean: [outer, inner] of the accumulation type (MODE 1); idx: [outer, inner] int64 (MODE 2).
//   MODE 0: dx = g / scale                      (sum: scale 1; mean: scale N)
//   MODE 1: dx = g * (x - mean) * scale         (var: scale 2 / (N - ddof))
//   MODE 2: dx = g where r == idx, else 0       (max / min: the gradient goes to the arg position)
// Thread f writes the pack of V elements of dx at [f * V, f * V + V): with inner == 1 they share
// (o, i) and have consecutive r (R % V == 0); else they share (o, r), consecutive i (inner % V == 0).
// Traffic: dx written once, x read once (MODE 1), g / mean / idx read (outer * inner, cached).
template <typename T, int MODE, int V>
__global__ void __launch_bounds__(256) ck_red_expand(
    const T* __restrict__ g, const T* __restrict__ x, const typename ck_traits<T>::acc* __restrict__ mean,
    const long long* __restrict__ idx, T* __restrict__ dx, long long npacks, long long R_, long long inner,
    typename ck_traits<T>::acc scale) {
  CK_PDL_WAIT();
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long f = (long long)blockIdx.x * blockDim.x + threadIdx.x; f < npacks; f += step) {
    const long long e0 = f * V;
    const long long row = ck_div(e0, inner);        // o * R + r
    const long long i = e0 - row * inner;
    const long long o = ck_div(row, R_);
    const long long r = row - o * R_;
    const long long q = o * inner + i;
    const bool same = inner == 1;                    // the pack runs along r, not along i
    ck_pack<T, V> px, py;
    if (MODE == 1) px.raw = reinterpret_cast<const R*>(x)[f];
#pragma unroll
    for (int l = 0; l < V; ++l) {
      const long long gq = same ? q : q + l;
      C y;
      if (MODE == 0) y = tr::load(g[gq]) / scale;
      else if (MODE == 1) y = tr::load(g[gq]) * (tr::load(px.v[l]) - mean[gq]) * scale;
      else y = (r + (same ? l : 0)) == idx[gq] ? tr::load(g[gq]) : C(0);
      py.v[l] = tr::store(y);
    }
    reinterpret_cast<R*>(dx)[f] = py.raw;
  }
}
