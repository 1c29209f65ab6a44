"""Layout kernels: y = a C-contiguous copy of x with its axes permuted (transpose, permute).

Layout moves raw 1/2/4/8-byte words, whatever the dtype. The host plan (`plan`, pure Python so
tests can check it without a GPU):
1. y's dims with x's strides along them (in elements), merged where contiguous in both and size-1
   dims dropped (`_common.collapse`): at most 8 dims remain, else CuPy's own copy is used.
2. k = y's last dim. If x is also fastest along k (stride 1, or no dim of x is faster), rows of
   y are contiguous runs of x: `ck_tr_rows` copies them, batched over the other dims, in chunks
   of C = 16/8/4/2/1 bytes (the widest that alignment and sizes allow).
3. Otherwise a = the dim of x with the smallest stride; `ck_tr_tile` transposes the (k, a) plane
   through shared memory, the other dims being a batch decomposed from the tile index. A tile is
   TK x TA elements (TK = 128 bytes' worth of y's row for 16-byte chunks, TA ~ 16 KB / TK): each
   thread loads N chunks of x along a (coalesced rows of x), the block syncs, and each thread
   gathers V elements along k from shared memory and stores them as one chunk of y (coalesced
   rows of y). 16-bit and 8-bit elements move in chunks of 16 bytes (8 or 16 elements), so every
   thread issues 16-byte loads and stores. Chunks land in shared memory XOR-swizzled by
   (k / V) mod NC, so both the 16-byte stores of the load phase (a quarter-warp writes 8
   distinct chunk slots) and the V scalar reads of the store phase (a warp reads 8 rows whose
   chunks land in 8 distinct slots) are free of bank conflicts without padding (which would break
   the 16-byte alignment of the chunks).
Traffic: x read once + y written once, 2 * x.nbytes.
"""
from __future__ import annotations

import numpy as np

from ._common import KernelFamily, collapse

SOURCE = r"""
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
  for (long long t = blockIdx.x; t < p.ntiles; t += gridDim.x) ck_tr_rows_tile<C, I>(x, y, p, t, threadIdx.x);
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
  typedef ck_tr_geom<T, C> G;
  __shared__ __align__(16) T tile_smem[G::TK * G::TA];
  for (long long t = blockIdx.x; t < p.ntiles; t += gridDim.x) {
    ck_tr_tile_load<T, C>(x, tile_smem, p, t, threadIdx.x);
    __syncthreads();
    ck_tr_tile_store<T, C>(y, tile_smem, p, t, threadIdx.x);
    __syncthreads();   // the next tile overwrites tile_smem
  }
}
"""

THREADS = 256
TILE_BYTES = 16384
MAX_N = 8
MAX_DIMS = 8
_WORD = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_ROW_CHUNKS = (16, 8, 4, 2, 1)
_INDEX = {32: "unsigned int", 64: "unsigned long long"}
_GRID_MAX = 2**31 - 1


def tile_chunks(itemsize: int) -> tuple:
    """The chunk sizes (bytes) ck_tr_tile is instantiated with for an itemsize: 16, then 8 (for
    1- and 8-byte words) or 4 (2- and 4-byte), then the element itself. (1-byte words in 4-byte
    chunks would need 16 chunks per thread and spill.)"""
    return tuple(dict.fromkeys((16, 8 if itemsize in (1, 8) else 4, itemsize)))


def name_expressions() -> list[str]:
    """Every template instantiation this module launches."""
    out = [f"ck_tr_rows<{c}, {_INDEX[b]}>" for c in _ROW_CHUNKS for b in (32, 64)]
    for e, t in _WORD.items():
        out += [f"ck_tr_tile<{t}, {c}>" for c in tile_chunks(e)]
    return out


_family = KernelFamily(SOURCE, name_expressions, "cudakit/transpose.cu")


def tile_geometry(itemsize: int, chunk: int) -> dict:
    """ck_tr_geom<T, C> in Python: V, NC, TK, TA, N (the kernel's compile-time constants)."""
    v = chunk // itemsize
    nc = min(128 // chunk, 32)
    tk = nc * v
    w = max(1, min(8, TILE_BYTES // (tk * tk * itemsize), MAX_N * THREADS // (tk * nc)))
    return {"V": v, "NC": nc, "TK": tk, "TA": w * tk, "W": w, "N": tk * w * nc // THREADS}


ROWS_DTYPE = np.dtype([("nb", "<i8"), ("shape", "<i8", (7,)), ("in_s", "<i8", (7,)), ("rows", "<i8"),
                       ("lc", "<i8"), ("in_sk", "<i8"), ("tpr", "<i8"), ("tiles_c", "<i8"), ("ntiles", "<i8")])
TILE_DTYPE = np.dtype([("nb", "<i8"), ("shape", "<i8", (6,)), ("in_s", "<i8", (6,)), ("out_s", "<i8", (6,)),
                       ("na", "<i8"), ("nk", "<i8"), ("in_sa", "<i8"), ("in_sk", "<i8"), ("out_sa", "<i8"),
                       ("tiles_a", "<i8"), ("tiles_k", "<i8"), ("ntiles", "<i8")])


class Plan:
    """One launch: kernel `expr` (kind "rows" or "tile", chunk bytes), its parameter struct
    `params` (a 1-element structured array of ROWS_DTYPE / TILE_DTYPE) and the 1-D grid."""

    def __init__(self, kind, expr, chunk, params, grid):
        self.kind, self.expr, self.chunk, self.params, self.grid = kind, expr, chunk, params, grid

    def __repr__(self):
        return f"Plan({self.expr}, grid={self.grid})"


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def plan(shape, strides, itemsize: int, axes, x_ptr: int = 0, y_ptr: int = 0):
    """The launch that writes y = x.transpose(axes) (C-contiguous) from x of `shape` and byte
    `strides` (each a multiple of itemsize), or None when y is empty, or "copy" when more than
    8 dims remain after merging (the caller copies another way). x_ptr, y_ptr: the addresses
    (only their alignment matters)."""
    if itemsize not in _WORD:
        raise ValueError(f"itemsize must be 1, 2, 4 or 8 (got {itemsize})")
    yshape = tuple(int(shape[a]) for a in axes)
    n = 1
    for d in yshape:
        n *= d
    if n == 0:
        return None
    xs = [int(strides[a]) // itemsize for a in axes]
    ys, acc = [0] * len(yshape), 1
    for d in range(len(yshape) - 1, -1, -1):
        ys[d] = acc
        acc *= yshape[d]
    cshape, (cy, cx) = collapse(yshape, [tuple(ys), tuple(xs)])
    if len(cshape) > MAX_DIMS:
        return "copy"
    k = len(cshape) - 1
    others = [d for d in range(k) if cx[d] != 0]   # a broadcast dim cannot be x's fastest
    a = min(others, key=lambda d: abs(cx[d])) if others else None
    if cx[k] == 1 or a is None or abs(cx[a]) >= abs(cx[k]):
        return _rows_plan(cshape, cx, itemsize, x_ptr, y_ptr)
    return _tile_plan(cshape, cx, cy, a, itemsize, x_ptr, y_ptr)


def _rows_plan(cshape, cx, itemsize, x_ptr, y_ptr):
    k = len(cshape) - 1
    nk, sk = cshape[k], cx[k]
    batch = list(range(k))
    chunk = itemsize
    for c in _ROW_CHUNKS:
        if c < itemsize:
            break
        v = c // itemsize
        if c == itemsize or (sk == 1 and nk % v == 0 and all(cx[d] % v == 0 for d in batch)
                             and x_ptr % c == 0 and y_ptr % c == 0):
            chunk = c
            break
    v = chunk // itemsize
    lc = nk // v
    rows = 1
    for d in batch:
        rows *= cshape[d]
    # 4 chunks per thread, but at least 128 contiguous bytes of a row per warp instruction (whole
    # cache lines: a (32, 2048, 32, 128) bf16 permute has 256-byte rows -> 8 threads per row)
    tpr = min(THREADS, max(_pow2_at_least(_cdiv(lc, 4)), min(_pow2_at_least(lc), max(1, 128 // chunk))))
    tiles_c = _cdiv(lc, 4 * tpr)
    ntiles = _cdiv(rows, THREADS // tpr) * tiles_c
    p = np.zeros(1, ROWS_DTYPE)
    p["nb"] = len(batch)
    p["shape"][0, :len(batch)] = [cshape[d] for d in batch]
    p["in_s"][0, :len(batch)] = [cx[d] // v for d in batch]
    p["rows"], p["lc"], p["in_sk"] = rows, lc, (1 if v > 1 else sk)
    p["tpr"], p["tiles_c"], p["ntiles"] = tpr, tiles_c, ntiles
    idx = 32 if rows < 2**32 else 64
    return Plan("rows", f"ck_tr_rows<{chunk}, {_INDEX[idx]}>", chunk, p, (min(ntiles, _GRID_MAX), 1, 1))


def _tile_plan(cshape, cx, cy, a, itemsize, x_ptr, y_ptr):
    k = len(cshape) - 1
    na, nk = cshape[a], cshape[k]
    batch = [d for d in range(k) if d != a]
    chunk = itemsize
    for c in tile_chunks(itemsize):
        v = c // itemsize
        if c == itemsize or (cx[a] == 1 and na % v == 0 and nk % v == 0 and cx[k] % v == 0
                             and all(cx[d] % v == 0 for d in batch) and x_ptr % c == 0 and y_ptr % c == 0):
            chunk = c
            break
    g = tile_geometry(itemsize, chunk)
    tiles_a, tiles_k = _cdiv(na, g["TA"]), _cdiv(nk, g["TK"])
    nbatch = 1
    for d in batch:
        nbatch *= cshape[d]
    ntiles = tiles_a * tiles_k * nbatch
    p = np.zeros(1, TILE_DTYPE)
    p["nb"] = len(batch)
    p["shape"][0, :len(batch)] = [cshape[d] for d in batch]
    p["in_s"][0, :len(batch)] = [cx[d] for d in batch]
    p["out_s"][0, :len(batch)] = [cy[d] for d in batch]
    p["na"], p["nk"], p["in_sa"], p["in_sk"], p["out_sa"] = na, nk, cx[a], cx[k], cy[a]
    p["tiles_a"], p["tiles_k"], p["ntiles"] = tiles_a, tiles_k, ntiles
    return Plan("tile", f"ck_tr_tile<{_WORD[itemsize]}, {chunk}>", chunk, p, (min(ntiles, _GRID_MAX), 1, 1))


# ------------------------------------------------------------------------------------------
# host wrapper

def _function(dev: int, expr: str):
    return _family.function(dev, expr)


_plans: dict = {}   # (shape, strides, itemsize, axes, x and y addresses mod 16) -> plan()'s result
_MAX_PLANS = 512


def _cached_plan(x, y, itemsize: int, axes):
    """plan() for x -> y, memoised: it depends on the addresses only through their alignment (up
    to 16-byte chunks), and building its parameter struct cost tens of microseconds a call."""
    key = (x.shape, x.strides, itemsize, axes, x.data.ptr % 16, y.data.ptr % 16)
    pl = _plans.get(key)
    if pl is None:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        pl = _plans[key] = plan(x.shape, x.strides, itemsize, axes, x.data.ptr, y.data.ptr)
    return pl


def permute(x, axes):
    """y = x.transpose(axes) as a new C-contiguous CuPy array on x's device (the current one).

    x: a CuPy array of any dtype of itemsize 1, 2, 4 or 8, any strides (negative and zero
    too); axes: a permutation of range(x.ndim), validated by the caller. Non-contiguous x is
    read through its strides (no intermediate copy). Traffic: x.nbytes read + x.nbytes written.
    """
    from ..runtime import _cupy
    from ..runtime.compiler import _launch_function
    cp = _cupy.loaded_cupy()
    axes = tuple(int(a) for a in axes)
    yshape = tuple(x.shape[a] for a in axes)
    y = cp.empty(yshape, x.dtype)
    e = x.dtype.itemsize
    if any(s % e for s in x.strides):   # a byte-strided view: no word-aligned reading of it
        x = cp.ascontiguousarray(x)
    pl = _cached_plan(x, y, e, axes)
    if pl is None:
        return y
    if pl == "copy":   # more than 8 dims that no merging removes: CuPy's strided copy
        y[...] = x.transpose(axes)
        return y
    dev = x.data.device_id
    _launch_function(pl.expr, _function(dev, pl.expr), pl.grid, (THREADS, 1, 1), (x, y, pl.params), 0, None)
    return y
