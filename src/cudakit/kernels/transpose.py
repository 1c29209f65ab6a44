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
4. Where k or a is short (at most max_run() elements and under half the tile's side along it, so
   the tiles of step 3 would be mostly empty: a convolution weight's (K, C, 9) taps to (K, 9, C)
   and back, a 3-channel image to channels-last and back), `ck_tr_runs` instead gives each thread
   the short dim's elements at one index of the other (long) dim; consecutive threads step along
   the long dim; runs short enough go 4 a thread (RUN_GROUP). Where k is the short dim and y holds
   a block's runs as one contiguous run, the stores go through shared memory as that whole run
   (STAGED: runs of STAGED_FROM words or more, and grouped ones).
Traffic: x read once + y written once, 2 * x.nbytes.
"""
from __future__ import annotations

import math

import numpy as np

from ._common import KernelFamily, collapse, cuda_source

SOURCE_FILES = ("_pdl.cuh", "transpose.cu")
SOURCE = cuda_source(*SOURCE_FILES)

THREADS = 256
TILE_BYTES = 16384
MAX_N = 8
MAX_DIMS = 8
_WORD = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_ROW_CHUNKS = (16, 8, 4, 2, 1)
_INDEX = {32: "unsigned int", 64: "unsigned long long"}
_GRID_MAX = 2**31 - 1
# the longest dim ck_tr_runs moves a thread (CK_TR_MAX_RUN): shorter than half a tile's side along
# it, the tile kernel leaves most of its slots empty. A (512, 512, 3, 3) bfloat16 weight to
# (K, R, S, C) (9 taps along a tile's 64-element side) took 45.3 us on the tiles, 8.9 in short runs
# (torch 12.4; H100, 2026-11-27, the 16:58 UTC call, benchmarks/sweeps/permute_short_dims.py);
# (64, 24, 4096) to (0, 2, 1) (24 of 64) took 17.2 us on the tiles against 31.2 for a gather by
# elements (torch 23.7; the 16:30 call)
MAX_RUN = 16
_KERNEL_MAX_RUN = 16   # CK_TR_MAX_RUN of transpose.cu: the kernel's register array, a longer run would lose words


def max_run(itemsize: int) -> int:
    """The longest short dim ck_tr_runs moves (ck_tr_max_run): MAX_RUN words (at most the kernel's
    CK_TR_MAX_RUN), half that of 8 bytes."""
    m = min(MAX_RUN, _KERNEL_MAX_RUN)
    return m // 2 if itemsize > 4 else m


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
        out += [f"ck_tr_runs<{t}, {_INDEX[b]}, {m}, {g}>" for b in (32, 64) for m in ("false", "true")
                for g in ((1, RUN_GROUP) if b == 32 else (1,))]   # (grouped with a 64-bit index, it spilled)
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
RUNS_DTYPE = np.dtype([("nb", "<i8"), ("shape", "<i8", (6,)), ("in_s", "<i8", (6,)), ("out_s", "<i8", (6,)),
                       ("nl", "<i8"), ("ns", "<i8"), ("in_sl", "<i8"), ("in_ss", "<i8"), ("out_sl", "<i8"),
                       ("out_ss", "<i8"), ("n", "<i8"), ("ntiles", "<i8")])
TILE_DTYPE = np.dtype([("nb", "<i8"), ("shape", "<i8", (6,)), ("in_s", "<i8", (6,)), ("out_s", "<i8", (6,)),
                       ("na", "<i8"), ("nk", "<i8"), ("in_sa", "<i8"), ("in_sk", "<i8"), ("out_sa", "<i8"),
                       ("tiles_a", "<i8"), ("tiles_k", "<i8"), ("ntiles", "<i8")])


class Plan:
    """One launch: kernel `expr` (kind "rows", "tile" or "runs", chunk bytes), its parameter
    struct `params` (a 1-element structured array of ROWS_DTYPE / TILE_DTYPE / RUNS_DTYPE) and
    the 1-D grid."""

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
    short = [(n, d) for n, d, side in ((na, a, g["TA"]), (nk, k, g["TK"])) if n <= max_run(itemsize) and 2 * n < side]
    if short:
        return _runs_plan(cshape, cx, cy, min(short)[1], k + a - min(short)[1], itemsize)
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


# ck_tr_runs stages its stores through shared memory where y holds a block's runs as one run (s
# y's last dim, l the one before) and s has at least STAGED_FROM words; STAGED False: nowhere (the
# sweep's comparison). On an H100 (2026-11-27, the 16:43 UTC call, benchmarks/sweeps/permute_short_dims.py,
# bfloat16, staged against direct, torch's in brackets): (512, 3, 3, 512) to (0, 3, 1, 2) 10.1 us
# against 21.4 (10.6), (256, 12, 4096) to (0, 2, 1) 31.6 against 107.1 (32.9); an NCHW image of 3
# channels to NHWC 30.5 against 26.8 (17.0); in the 16:48 call (256, 4, 8192) to (0, 2, 1) 37.3 against
# 35.7 (29.3), (256, 6, 8192) 38.5 against 53.4 (35.4). Staging the loads of a short x-fastest dim
# the same way (x holding a block's runs as one run) ran slower than direct: (512, 512, 3, 3) to
# (0, 2, 3, 1) 9.7 us against 9.2 (12.2), (256, 4096, 12) to (0, 2, 1) 27.5 against 24.6 (42.2).
STAGED = True
STAGED_FROM = 6
# runs a thread takes where they are short (RUN_GROUP of them, 256 runs apart, where as many fit
# max_run()): an NCHW image of 3 channels to NHWC, one run of 3 words a thread, took 26.9 us against
# torch's 17.0 (bfloat16, H100, 2026-11-27, the 16:48 UTC call); 4 consecutive runs a thread (so 4
# words apart along l) ran it in 12.6 us staged, but a float32 NHWC image to NCHW in 35 us against
# 22.5 for one run a thread (16:54). 256 apart (16:58, torch's in brackets): bfloat16 14.8 us (17.3),
# back 14.1 (18.1); float32 18.1 (22.4), back 18.8 (22.2); (256, 4, 8192) to (0, 2, 1) 19.3 against
# 29.2 one a thread (29.3). GROUPED False: one run a thread everywhere (the sweep's comparison)
RUN_GROUP = 4
GROUPED = True


def _runs_plan(cshape, cx, cy, sd, ld, itemsize):
    """ck_tr_runs over y's collapsed dims: sd the short dim of the plane, ld the long one."""
    batch = [d for d in range(len(cshape)) if d not in (sd, ld)]
    ns, nl = cshape[sd], cshape[ld]
    n = nl * math.prod(cshape[d] for d in batch)
    idx = 32 if n < 2**32 else 64
    g = RUN_GROUP if GROUPED and ns * RUN_GROUP <= max_run(itemsize) and idx == 32 else 1
    ntiles = _cdiv(n, THREADS * g)
    p = np.zeros(1, RUNS_DTYPE)
    p["nb"] = len(batch)
    p["shape"][0, :len(batch)] = [cshape[d] for d in batch]
    p["in_s"][0, :len(batch)] = [cx[d] for d in batch]
    p["out_s"][0, :len(batch)] = [cy[d] for d in batch]
    p["nl"], p["ns"], p["in_sl"], p["in_ss"] = nl, ns, cx[ld], cx[sd]
    p["out_sl"], p["out_ss"], p["n"], p["ntiles"] = cy[ld], cy[sd], n, ntiles
    staged = STAGED and (ns >= STAGED_FROM or g > 1) and cy[sd] == 1 and cy[ld] == ns
    return Plan("runs", f"ck_tr_runs<{_WORD[itemsize]}, {_INDEX[idx]}, {'true' if staged else 'false'}, {g}>",
                itemsize, p, (min(ntiles, _GRID_MAX), 1, 1))


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


def contiguous(x):
    """x itself where C-contiguous, else a C-contiguous copy by permute (read through x's strides;
    one of cudakit's launches, which a dispatch plan traced from the call replays, where CuPy's
    copy would keep the call off the plans: kernels/trace_plans.py)."""
    return x if x.flags.c_contiguous else permute(x, tuple(range(x.ndim)))


def to_channels_last(a):
    """The (N, C, H, W) channels-last view of a copy of 4-D a: permute to (N, H, W, C) memory (one
    launch, which a traced plan replays)."""
    return permute(a, (0, 2, 3, 1)).transpose(0, 3, 1, 2)


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
