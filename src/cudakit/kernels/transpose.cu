
template <int C> struct ck_tr_raw;
template <> struct ck_tr_raw<1> { typedef unsigned char type; };
template <> struct ck_tr_raw<2> { typedef unsigned short type; };
template <> struct ck_tr_raw<4> { typedef unsigned int type; };
template <> struct ck_tr_raw<8> { typedef unsigned long long type; };
template <> struct ck_tr_raw<16> { typedef uint4 type; };
template <typename T, int V> union ck_tr_pack { typename ck_tr_raw<sizeof(T) * V>::type raw; T v[V]; };

#define CK_TR_THREADS 256
#define CK_TR_TILE_BYTES 16384
#define CK_TR_MAX_N 8

// ------------------------------------------------------------------ batched row copy
// Every row of y (its last dim, lc chunks of C bytes) is a run of x with stride in_sk chunks.
struct ck_tr_rows_p {
  long long nb;          // batch dims: y's dims but the last (<= 7)
  long long shape[7];    // their sizes, outermost first
  long long in_s[7];     // x's strides along them, in chunks
  long long rows;        // product of shape
  long long lc;          // row length, in chunks
  long long in_sk;       // x's stride along the row, in chunks (1 whenever C > itemsize)
  long long tpr;         // threads per row, a power of two <= 256; each moves <= 4 chunks per tile
  long long tiles_c;     // column tiles per group of 256 / tpr rows
  long long ntiles;      // row groups * tiles_c
};

// One thread's share of tile `tile`: row (tile / tiles_c) * rpb + tid / tpr, chunks
// (tile % tiles_c) * 4 tpr + tid % tpr + u tpr, u < 4 (four loads in flight, then four stores).
// __host__ so the tests can run the grid on the CPU. I: the type of the row decomposition
// (unsigned int when rows < 2^32: 32-bit division is several times cheaper than 64-bit).
template <int C, typename I>
__host__ __device__ __forceinline__ void ck_tr_rows_tile(const typename ck_tr_raw<C>::type* __restrict__ x,
                                                         typename ck_tr_raw<C>::type* __restrict__ y,
                                                         const ck_tr_rows_p& p, long long tile, int tid) {
  typedef typename ck_tr_raw<C>::type W;
  const int tpr = (int)p.tpr;
  const int tx = tid & (tpr - 1), ty = tid / tpr;
  const long long tc = tile % p.tiles_c, tr = tile / p.tiles_c;
  const long long row = tr * (CK_TR_THREADS / tpr) + ty;
  if (row >= p.rows) return;
  I r = (I)row;
  long long off = 0;
  for (int d = (int)p.nb - 1; d >= 0; --d) {
    const I s = (I)p.shape[d];
    off += (long long)(r % s) * p.in_s[d];
    r /= s;
  }
  const long long c0 = tc * 4 * tpr + tx;
  W v[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const long long c = c0 + (long long)u * tpr;
    if (c < p.lc) v[u] = x[off + c * p.in_sk];
  }
  W* yr = y + row * p.lc;
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const long long c = c0 + (long long)u * tpr;
    if (c < p.lc) yr[c] = v[u];
  }
}

// x: strided source, y: [rows, lc] chunks, contiguous. Block 256; grid-stride over p.ntiles.
// Traffic: rows * lc * C bytes read + the same written.
template <int C, typename I>
__global__ void __launch_bounds__(CK_TR_THREADS) ck_tr_rows(const typename ck_tr_raw<C>::type* __restrict__ x,
                                                            typename ck_tr_raw<C>::type* __restrict__ y,
                                                            ck_tr_rows_p p) {
  CK_PDL_WAIT();
  for (long long t = blockIdx.x; t < p.ntiles; t += gridDim.x) ck_tr_rows_tile<C, I>(x, y, p, t, threadIdx.x);
}

// ------------------------------------------------------------------ short runs
// A plane with one short dim s (<= CK_TR_MAX_RUN words, 8 of 8 bytes; a tile would be mostly
// empty) and one long dim l: run i = (batch, l), l fastest, is the s words at one l; a block
// moves 256 consecutive runs. Consecutive threads step along l, a thread's s loads issued before
// its s stores. STAGED (y contiguous over (l, s): s is y's last dim, as a (K, 9, C) weight memory
// to (K, C, 9)): the loads go to shared memory, then the block's 256 s words of y are stored as one
// contiguous run, instead of s stores a thread ns words apart.
#define CK_TR_MAX_RUN 16
struct ck_tr_runs_p {
  long long nb;          // batch dims: y's dims but s and l (<= 6), outermost first
  long long shape[6];    // their sizes
  long long in_s[6];     // x's strides along them, in elements
  long long out_s[6];    // y's strides along them, in elements
  long long nl, ns;      // sizes of l and s (ns <= ck_tr_max_run<T>::N)
  long long in_sl, in_ss, out_sl, out_ss;   // x's and y's strides along l and s
  long long n;           // runs: nl times the batch
  long long ntiles;      // ceil(n / (256 G))
};

// a thread's words in flight: 16, or 8 of 8 bytes (16 of them spilled: 16 bytes of stack on sm_90)
template <typename T> struct ck_tr_max_run { static const int N = sizeof(T) > 4 ? CK_TR_MAX_RUN / 2 : CK_TR_MAX_RUN; };

// The offsets of run i (< n) into x and y. I: the type of the decomposition (unsigned int when
// n < 2^32: 32-bit division is several times cheaper).
template <typename I>
__host__ __device__ __forceinline__ void ck_tr_run_offsets(const ck_tr_runs_p& p, long long i, long long& xo,
                                                           long long& yo) {
  I r = (I)i;
  const I nl = (I)p.nl;
  const long long l = (long long)(r % nl);
  r /= nl;
  xo = l * p.in_sl;
  yo = l * p.out_sl;
  for (int d = (int)p.nb - 1; d >= 0; --d) {
    const I s = (I)p.shape[d];
    const long long j = (long long)(r % s);
    r /= s;
    xo += j * p.in_s[d];
    yo += j * p.out_s[d];
  }
}

// Load phase of tile `tile` (runs i0 = tile 256 G onwards) for thread tid (the whole move unless
// STAGED). G: runs a thread, i0 + r 256 + tid for r < G (1, or 4 where runs are short: one short
// run leaves a thread too little to do), so consecutive threads still step along l.
// buf: 256 N words (STAGED), run i0 + q at words q ns onwards.
template <typename T, typename I, bool STAGED, int G>
__host__ __device__ __forceinline__ void ck_tr_runs_load(const T* __restrict__ x, T* __restrict__ y, T* buf,
                                                         const ck_tr_runs_p& p, long long tile, int tid) {
  const int M = ck_tr_max_run<T>::N / G, ns = (int)p.ns;
  const long long i0 = tile * CK_TR_THREADS * G;
  long long xo[G], yo[G];
  T v[G][M];
#pragma unroll
  for (int r = 0; r < G; ++r) {
    if (i0 + r * CK_TR_THREADS + tid < p.n) {
      ck_tr_run_offsets<I>(p, i0 + r * CK_TR_THREADS + tid, xo[r], yo[r]);
#pragma unroll
      for (int j = 0; j < M; ++j)
        if (j < ns) v[r][j] = x[xo[r] + j * p.in_ss];
    }
  }
#pragma unroll
  for (int r = 0; r < G; ++r) {
    if (i0 + r * CK_TR_THREADS + tid < p.n) {
#pragma unroll
      for (int j = 0; j < M; ++j) {
        if (j < ns) {
          if (STAGED) buf[(r * CK_TR_THREADS + tid) * ns + j] = v[r][j];
          else y[yo[r] + j * p.out_ss] = v[r][j];
        }
      }
    }
  }
}

// Store phase (STAGED), after the block's load phase: its 256 G runs are one contiguous run of y.
template <typename T, int G>
__host__ __device__ __forceinline__ void ck_tr_runs_store(T* __restrict__ y, const T* buf, const ck_tr_runs_p& p,
                                                          long long tile, int tid) {
  const int N = ck_tr_max_run<T>::N;
  const long long i0 = tile * CK_TR_THREADS * G;
  const long long m = (p.n - i0 < CK_TR_THREADS * G ? p.n - i0 : CK_TR_THREADS * G) * p.ns;   // <= 256 N
  T* yr = y + i0 * p.ns;
#pragma unroll
  for (int u = 0; u < N; ++u)
    if (tid + u * CK_TR_THREADS < m) yr[tid + u * CK_TR_THREADS] = buf[tid + u * CK_TR_THREADS];
}

// x: strided source (T: a raw word of x's itemsize); y: contiguous. Block 256; grid-stride over
// p.ntiles (256 G runs each); shared memory 256 N words (<= 16 KB) where STAGED. Traffic: x.nbytes
// read + the same written.
template <typename T, typename I, bool STAGED, int G>
__global__ void __launch_bounds__(CK_TR_THREADS) ck_tr_runs(const T* __restrict__ x, T* __restrict__ y,
                                                            ck_tr_runs_p p) {
  CK_PDL_WAIT();
  __shared__ T buf[STAGED ? CK_TR_THREADS * ck_tr_max_run<T>::N : 1];
  for (long long t = blockIdx.x; t < p.ntiles; t += gridDim.x) {
    ck_tr_runs_load<T, I, STAGED, G>(x, y, buf, p, t, threadIdx.x);
    if (STAGED) {
      __syncthreads();
      ck_tr_runs_store<T, G>(y, buf, p, t, threadIdx.x);
      __syncthreads();   // the next tile overwrites buf
    }
  }
}

// ------------------------------------------------------------------ tiled transpose
struct ck_tr_tile_p {
  long long nb;          // batch dims: y's dims but a and k (<= 6)
  long long shape[6];    // their sizes, outermost first (in y's order)
  long long in_s[6];     // x's strides along them, in elements
  long long out_s[6];    // y's strides along them, in elements
  long long na, nk;      // sizes of a (x's fastest dim) and k (y's last dim)
  long long in_sa;       // x's stride along a (1 whenever V > 1)
  long long in_sk;       // x's stride along k
  long long out_sa;      // y's stride along a (along k it is 1)
  long long tiles_a, tiles_k, ntiles;   // tiles along a, along k, and in all (times the batch)
};

// Tile geometry for elements T moved in chunks of C bytes (V elements).
template <typename T, int C> struct ck_tr_geom {
  static const int V = C / (int)sizeof(T);
  static const int NC = (128 / C < 32) ? 128 / C : 32;   // chunks of one swizzle row
  static const int TK = NC * V;                          // tile extent along k: one 128-byte run of y
  static const int W0 = CK_TR_TILE_BYTES / (TK * TK * (int)sizeof(T));      // ~16 KB of tile
  static const int W1 = CK_TR_MAX_N * CK_TR_THREADS / (TK * NC);            // <= 8 chunks per thread
  static const int W = (W0 < W1 ? W0 : W1) < 1 ? 1 : ((W0 < W1 ? W0 : W1) > 8 ? 8 : (W0 < W1 ? W0 : W1));
  static const int TA = W * TK;                          // tile extent along a
  static const int ROWCH = W * NC;                       // chunks of one tile row (one k)
  static const int N = TK * ROWCH / CK_TR_THREADS;       // chunks per thread and phase
};

// The tile's (ta, tk) and its batch offsets into x and y.
__host__ __device__ __forceinline__ void ck_tr_tile_origin(const ck_tr_tile_p& p, long long tile, long long& ta,
                                                           long long& tk, long long& xoff, long long& yoff) {
  ta = tile % p.tiles_a;
  long long r = tile / p.tiles_a;
  tk = r % p.tiles_k;
  r /= p.tiles_k;
  xoff = 0;
  yoff = 0;
  for (int d = (int)p.nb - 1; d >= 0; --d) {
    const long long i = r % p.shape[d];
    r /= p.shape[d];
    xoff += i * p.in_s[d];
    yoff += i * p.out_s[d];
  }
}

// Load phase: chunk q = tid + i * 256 of the tile is (k = q / ROWCH, chunk g = q % ROWCH along a);
// ROWCH divides 256, so g is the thread's own and k steps by KSTEP = 256 / ROWCH.
template <typename T, int C>
__host__ __device__ __forceinline__ void ck_tr_tile_load(const T* __restrict__ x, T* tile_smem, const ck_tr_tile_p& p,
                                                         long long tile, int tid) {
  typedef ck_tr_geom<T, C> G;
  typedef typename ck_tr_raw<C>::type W;
  static_assert(CK_TR_THREADS % G::ROWCH == 0, "a tile row must divide the block");
  const int KSTEP = CK_TR_THREADS / G::ROWCH;
  long long ta, tk, xoff, yoff;
  ck_tr_tile_origin(p, tile, ta, tk, xoff, yoff);
  const int k0 = tid / G::ROWCH, g = tid % G::ROWCH;
  const long long a = ta * G::TA + (long long)g * G::V, k = tk * G::TK + k0;
  if (a >= p.na) return;
  const long long k_left = p.nk - k;                 // row i is in range iff i * KSTEP < k_left
  const T* xp = x + xoff + k * p.in_sk + a * p.in_sa;
  const long long xstep = (long long)KSTEP * p.in_sk;
  W v[G::N];
#pragma unroll
  for (int i = 0; i < G::N; ++i) {
    if (i * KSTEP < k_left) v[i] = *reinterpret_cast<const W*>(xp);
    xp += xstep;
  }
  W* s = reinterpret_cast<W*>(tile_smem) + (g / G::NC) * G::NC;
#pragma unroll
  for (int i = 0; i < G::N; ++i) {
    const int kr = k0 + i * KSTEP;
    if (i * KSTEP < k_left) s[kr * G::ROWCH + ((g % G::NC) ^ ((kr / G::V) & (G::NC - 1)))] = v[i];
  }
}

// V elements of 1 or 2 bytes gathered into 32-bit words (shifts, not byte stores into a union,
// which would go through local memory), or V whole words.
template <typename T, int C, bool SUB = (sizeof(T) < 4 && C >= 4)> struct ck_tr_gather {
  typedef ck_tr_geom<T, C> G;
  static __host__ __device__ __forceinline__ typename ck_tr_raw<C>::type go(const T* s) {   // s: element j at s[j TA]
    ck_tr_pack<T, G::V> pk;
#pragma unroll
    for (int j = 0; j < G::V; ++j) pk.v[j] = s[j * G::TA];
    return pk.raw;
  }
};
template <typename T, int C> struct ck_tr_gather<T, C, true> {
  typedef ck_tr_geom<T, C> G;
  static __host__ __device__ __forceinline__ typename ck_tr_raw<C>::type go(const T* s) {
    const int PER = 4 / (int)sizeof(T);
    union { typename ck_tr_raw<C>::type raw; unsigned int w[C / 4]; } u;
#pragma unroll
    for (int m = 0; m < C / 4; ++m) {
      unsigned int w = 0;
#pragma unroll
      for (int b = 0; b < PER; ++b) w |= (unsigned int)s[(m * PER + b) * G::TA] << (8 * (int)sizeof(T) * b);
      u.w[m] = w;
    }
    return u.raw;
  }
};

// Store phase: chunk q = tid + i * 256 is (a = q / NC, kv = q % NC): elements k = kv V + j of
// column a, gathered from V rows of the tile, go to y as one chunk. NC divides 256, so kv is the
// thread's own and a steps by ASTEP = 256 / NC (a multiple of V: a % V is the thread's own too).
template <typename T, int C>
__host__ __device__ __forceinline__ void ck_tr_tile_store(T* __restrict__ y, const T* tile_smem, const ck_tr_tile_p& p,
                                                          long long tile, int tid) {
  typedef ck_tr_geom<T, C> G;
  static_assert(CK_TR_THREADS % G::NC == 0 && (CK_TR_THREADS / G::NC) % G::V == 0, "store-phase layout");
  const int ASTEP = CK_TR_THREADS / G::NC;
  long long ta, tk, xoff, yoff;
  ck_tr_tile_origin(p, tile, ta, tk, xoff, yoff);
  const int a0 = tid / G::NC, kv = tid % G::NC;
  const long long a = ta * G::TA + a0, k = tk * G::TK + (long long)kv * G::V;
  if (k >= p.nk) return;
  const long long a_left = p.na - a;                 // column i is in range iff i * ASTEP < a_left
  T* yp = y + yoff + a * p.out_sa + k;
  const long long ystep = (long long)ASTEP * p.out_sa;
  const T* s = tile_smem + (kv * G::V) * G::TA + a0 % G::V;
#pragma unroll 4   // all N gathers at once would hold N * V shared-memory loads in registers
  for (int i = 0; i < G::N; ++i) {
    if (i * ASTEP < a_left) {
      const int g = (a0 + i * ASTEP) / G::V;        // (k / V) == kv for all V rows read
      const int col = ((g / G::NC) * G::NC + ((g % G::NC) ^ kv)) * G::V;
      *reinterpret_cast<typename ck_tr_raw<C>::type*>(yp) = ck_tr_gather<T, C>::go(s + col);
    }
    yp += ystep;
  }
}

// x: strided source (element type T: a raw word of x's itemsize); y: contiguous destination.
// Block 256, one tile per block (grid-stride over p.ntiles), 4 blocks per SM (<= 64 registers).
// Shared memory: TK * TA * sizeof(T) <= 16 KB. Traffic: x.nbytes read + x.nbytes written.
template <typename T, int C>
__global__ void __launch_bounds__(CK_TR_THREADS, 4) ck_tr_tile(const T* __restrict__ x, T* __restrict__ y, ck_tr_tile_p p) {
  CK_PDL_WAIT();
  typedef ck_tr_geom<T, C> G;
  __shared__ __align__(16) T tile_smem[G::TK * G::TA];
  for (long long t = blockIdx.x; t < p.ntiles; t += gridDim.x) {
    ck_tr_tile_load<T, C>(x, tile_smem, p, t, threadIdx.x);
    __syncthreads();
    ck_tr_tile_store<T, C>(y, tile_smem, p, t, threadIdx.x);
    __syncthreads();   // the next tile overwrites tile_smem
  }
}
