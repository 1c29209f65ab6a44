"""Reduction kernels: sum, mean, max, min, argmax, argmin, var over any set of axes, and the
backward passes of sum, mean, var, max and min.

Layout. x is viewed as (outer, R, inner) with the reduced axes in the middle: a non-C-contiguous x
that is a permutation of a contiguous buffer (x.T) is reduced in that buffer's order (no copy);
any other view is copied to C order. Reduced axes that are not adjacent: sum, mean, max and min
reduce one run of adjacent reduced axes a pass, innermost first, each pass on the previous one's
contiguous result (_pass_plans: x read once, no copy; sums carry float32 partials and round once);
var, argmax and argmin transpose them together (kept axes first, then the reduced ones, inner =
1), one extra copy of x. The copies of x are kernels/transpose.py's permute (not CuPy's strided
copy: a launch of cudakit's, which a dispatch plan traced from the call replays).
- inner == 1, rows (`ck_red_rows`): tpr threads per row (1..256, a power of two; several rows per
  256-thread block when tpr < 256), 16-byte loads, CK_RU loads in flight per thread. Few long rows
  (axis=None is one row): each row is split over `nsplit` blocks that take groups of its vectors
  in turn.
- inner > 1, columns (`ck_red_cols`): block (bx, by): bx threads along inner (16-byte coalesced
  loads of V inner elements), by threads along R, combined through shared memory; R is split over
  blocks when outer * inner is small, in groups of rows dealt round-robin so that the grid reads
  memory front to back together, with the next group's loads in flight while a group is reduced.
Split reductions write per-split partial states ([nsplit, n_out]) that `ck_red_final` combines.
No atomics: every combine happens in a fixed order that depends only on the shape and the device's
occupancy, so results are bitwise the same from run to run on one device.

Accumulation: float32 for 16-bit inputs (rounded once at the end), double for float64. var is a
shifted Welford: every value is taken relative to the first element of its row/column (exact for
data like 1e4 + N(0, 1)), chunks of up to CK_RU*V values get exact statistics, chunks and
threads are combined with Chan's formula. NaN propagates through sum/mean/max/min/var; argmax and
argmin return the first NaN when there is one (as NumPy), else the first extreme value.

Traffic: forward reads outer*R*inner*sizeof(T) once and writes outer*inner outputs (plus the
partial states, outer*inner*nsplit*(4..32) bytes, when split). Backward writes dx once
(outer*R*inner*sizeof(T)), reads grad_out (outer*inner) and, for var, x once more.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..runtime import _cupy
from ..runtime.compiler import _launch_function
from . import _planned
from ._common import FLOAT_DTYPE_NAMES, KernelFamily, by_template, ctype, dtype_name, vec_width, cuda_source
from .transpose import contiguous, permute   # (cudakit's permute: faster than CuPy's strided copy, and traced)

SOURCE_FILES = ("_pdl.cuh", "_preamble.cuh", "reduction.cu")
SOURCE = cuda_source(*SOURCE_FILES)

# ------------------------------------------------------------------------------------------
# Instantiations and launch plans

OP_CODES = {"sum": 0, "mean": 0, "max": 1, "min": 2, "argmax": 3, "argmin": 4, "var": 5}
EXPAND_MODES = {"sum": 0, "var": 1, "select": 2}
THREADS = 256
UNROLL = 4              # CK_RU
COLS_BY = 8             # rows a column-reduction block reads at once (its threads: 256 / COLS_BY per row)
COLS_WAVES = 1          # column reductions split the reduced axis until this many full waves of blocks
_ACC_CTYPE = {"float16": "float", "bfloat16": "float", "float32": "float", "float64": "double"}


def _out_types(dt: str, code: int) -> list[str]:
    t = ctype(dt)
    if code in (3, 4):
        return ["long long"]
    if code == 0 and _ACC_CTYPE[dt] != t:
        return [t, _ACC_CTYPE[dt]]   # mean in the accumulation type (var_backward's mean)
    if code == 0 and dt == "float32":   # float32 partial sums rounded once into a 16-bit result (_pass_plans)
        return [t, ctype("float16"), ctype("bfloat16")]
    return [t]


def name_expressions(dtype=None) -> list[str]:
    """Every template instantiation this module launches (for one dtype name when given)."""
    out = []
    for dt in (FLOAT_DTYPE_NAMES if dtype is None else (dtype,)):
        t = ctype(dt)
        vecs = (vec_width(dt), 1)
        for code in sorted(set(OP_CODES.values())):
            for o in _out_types(dt, code):
                for v in vecs:
                    out += [f"ck_red_rows<{t}, {o}, {code}, {v}>", f"ck_red_cols<{t}, {o}, {code}, {v}>"]
                out.append(f"ck_red_final<{t}, {o}, {code}>")
        for mode in sorted(set(EXPAND_MODES.values())):
            for v in vecs:
                out.append(f"ck_red_expand<{t}, {mode}, {v}>")
    return out


_families = {dt: KernelFamily(SOURCE, (lambda dt=dt: name_expressions(dt)), f"cudakit/reduction_{dt}.cu",
                                group=by_template)
             for dt in FLOAT_DTYPE_NAMES}
_occ_cache: dict = {}
# (op, shape, dtype, axes, ddof, acc_out, 16-byte aligned, device) of a C-contiguous input ->
# (permutation or None, result shape, _run_plan): reduce()'s planning is most of its host time
_plans: dict = {}
_PASSES = object()   # a _plans entry reduced in passes: (_PASSES, result shape, _pass_plans' steps)


def _launch(expr: str, dt: str, grid: tuple, block: tuple, args: tuple) -> None:
    cp = _cupy.loaded_cupy()
    dev = cp.cuda.runtime.getDevice()
    _launch_function(expr, _families[dt].function(dev, expr), grid, block, args, 0, None)


def _target_blocks(dt: str, expr: str) -> int:
    """Blocks of THREADS that fill the device once: resident blocks per SM x SMs (cached)."""
    cp = _cupy.loaded_cupy()
    dev = cp.cuda.runtime.getDevice()
    key = (dev, expr)
    n = _occ_cache.get(key)
    if n is None:
        from ..runtime.device import get_device_info
        f = _families[dt].function(dev, expr)
        per_sm = max(1, int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(f.ptr, THREADS, 0)))
        n = _occ_cache[key] = per_sm * get_device_info().multiprocessors
    return n


def _splits(blocks: int, target: int, cap: int) -> int:
    """How many blocks to split each of `blocks` reductions over (1..cap, <= 65535), `target`
    blocks filling the device once: the count whose last wave is fullest. A few blocks past a full
    wave run as a second, nearly empty one (measured: var over axis 0 of 32768x4096 float32 0.80x
    torch with 272 blocks for 264 slots, 1.13x with 264)."""
    cap = max(1, min(cap, 65535))
    lo = max(1, min(target // blocks, cap))
    hi = max(1, min(-(-target // blocks), cap))

    def fill(n: int) -> float:  # used fraction of the block slots of the waves n splits need
        total = blocks * n
        return total / (-(-total // target) * target)
    return hi if fill(hi) > fill(lo) else lo


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)


def _acc_dtype(dtype):
    """float64 for float64, float32 for the other (float) dtypes."""
    return _F64 if np.dtype(dtype).itemsize == 8 else _F32


def _acc_scalar(dtype, v):
    return np.float64(v) if np.dtype(dtype).itemsize == 8 else np.float32(v)


_NAN_BITS = {2: (np.uint16, {"float16": 0x7E00, "bfloat16": 0x7FC0}), 4: (np.uint32, 0x7FC00000),
             8: (np.uint64, 0x7FF8000000000000)}


def _nan_array(shape, dtype):
    """An array of NaN of a float dtype, filled through its bit pattern (no float kernel needed)."""
    cp = _cupy.loaded_cupy()
    a = cp.empty(shape, dtype)
    ut, bits = _NAN_BITS[a.dtype.itemsize]
    if isinstance(bits, dict):
        bits = bits[dtype_name(a.dtype)]
    a.view(ut).fill(ut(bits))
    return a


def _runs(shape: tuple, axes: tuple) -> list:
    """[reduced?, size] of the runs of adjacent reduced or kept axes of `shape` (size-1 axes do not
    count: they neither separate two runs nor form one)."""
    groups = []
    for d, n in enumerate(shape):
        if n == 1:
            continue
        red = d in axes
        if groups and groups[-1][0] == red:
            groups[-1][1] *= int(n)
        else:
            groups.append([red, int(n)])
    return groups


def plan(shape: tuple, axes: tuple):
    """(perm, outer, R, inner) for reducing `axes` (sorted, non-negative) of a C-ordered array of
    `shape`: perm is None when the reduced axes form one block of the layout (size-1 axes do not
    count), else the permutation (kept axes, then reduced axes) to apply first, and inner is 1."""
    groups = _runs(shape, axes)
    nred = sum(1 for g in groups if g[0])
    if nred <= 1:
        k = next((i for i, g in enumerate(groups) if g[0]), len(groups))
        outer = _prod(g[1] for g in groups[:k])
        r = groups[k][1] if k < len(groups) else 1
        inner = _prod(g[1] for g in groups[k + 1:])
        return None, outer, r, inner
    kept = [d for d in range(len(shape)) if d not in axes]
    perm = tuple(kept) + tuple(axes)
    return perm, _prod(shape[d] for d in kept), _prod(shape[d] for d in axes), 1


def _base_order(x):
    """A permutation p with x.transpose(p) C-contiguous (x itself when C-contiguous), or None."""
    if x._c_contiguous:  # CuPy's flag; x.flags builds an object per call
        return tuple(range(x.ndim))
    order = sorted(range(x.ndim), key=lambda d: (-abs(x.strides[d]), -x.shape[d]))
    return tuple(order) if x.transpose(order)._c_contiguous else None


# ------------------------------------------------------------------------------------------
# the forward on a contiguous (outer, R, inner) view

def _run_plan(code: int, dt: str, aligned: bool, outer: int, R: int, inner: int, odt, div: float) -> tuple:
    """How to reduce the middle axis of a contiguous array of dtype dt viewed as (outer, R, inner),
    R >= 1, outer * inner >= 1, into a flat (outer * inner,) result of dtype odt (aligned: its
    data is 16-byte aligned): the kernel launches and workspace sizes, everything but the arrays
    (_run_exec runs it); one per shape, cached by reduce()."""
    cp = _cupy.loaded_cupy()
    dev = cp.cuda.runtime.getDevice()
    t = ctype(dt)
    odt = np.dtype(odt)
    o = "long long" if odt == np.int64 else ctype(dtype_name(odt))
    n_out = outer * inner
    acc = _F64 if dt == "float64" else _F32   # the accumulation dtype
    d = acc.type(div)
    vw = vec_width(dt)
    if inner == 1:
        v = vw if R % vw == 0 and aligned else 1
        nvec = R // v
        expr = f"ck_red_rows<{t}, {o}, {code}, {v}>"
        tpr = min(THREADS, _pow2_at_least(_cdiv(nvec, UNROLL)))
        rpb = THREADS // tpr
        blocks = _cdiv(outer, rpb)
        nsplit = 1
        target = _target_blocks(dt, expr)
        if blocks < target:  # few long rows: split each over blocks (>= 2 rounds of loads each)
            nsplit = _splits(blocks, target, nvec // (tpr * UNROLL * 2))
        grid, block = (blocks, nsplit, 1), (tpr, rpb, 1)  # nsplit <= nvec / (2 tpr UNROLL): none idle
        tail = (np.int64(outer), np.int64(nvec), d)
    else:
        v = vw if inner % vw == 0 and aligned else 1
        ivec = inner // v
        expr = f"ck_red_cols<{t}, {o}, {code}, {v}>"
        by_want = min(COLS_BY, _pow2_at_least(R))
        bx = min(_pow2_at_least(ivec), THREADS // by_want)
        by = min(THREADS // bx, _pow2_at_least(R))
        tiles = _cdiv(ivec, bx)
        blocks = outer * tiles
        nsplit = 1
        target = _target_blocks(dt, expr) * COLS_WAVES
        if blocks < target:
            nsplit = _splits(blocks, target, R // (by * UNROLL * 2))
        grid, block = (blocks, nsplit, 1), (bx, by, 1)  # nsplit <= R / (2 by UNROLL): no split idle
        tail = (np.int64(outer), np.int64(R), np.int64(ivec), np.int32(tiles), d)
    if grid[0] > 2**31 - 1:
        raise ShapeError(f"reduction of a ({outer}, {R}, {inner}) view needs {grid[0]} blocks, more than "
                         f"a grid holds (2^31 - 1)")
    main = (expr, _families[dt].function(dev, expr), grid, block, tail)
    if nsplit == 1:
        return odt, n_out, main, None
    lanes = min(32, _pow2_at_least(max(1, nsplit // 8)))
    opb = THREADS // lanes
    fexpr = f"ck_red_final<{t}, {o}, {code}>"
    final = (fexpr, _families[dt].function(dev, fexpr), (_cdiv(n_out, opb), 1, 1), (lanes, opb, 1),
             (np.int64(n_out), np.int32(nsplit), d))
    # workspaces: partial values (x3 for var's Welford states), partial indices for argmax/argmin
    ws = (nsplit * n_out, acc, 3 if code == 5 else 1, code in (3, 4))
    return odt, n_out, main, (final, ws)


def _pass_plans(shape: tuple, axes: tuple, code: int, dt: str, aligned: bool, odt, div: float) -> list:
    """The _run_plans reducing `axes` (sorted) of a C-contiguous array of `shape` whose reduced axes
    form several runs (plan() would transpose the array first): one pass a run of adjacent reduced
    axes (size-1 axes do not count), innermost first, each on the previous pass's contiguous result,
    so x is read once and never copied. sum and mean (code 0) carry their partial sums between
    passes in the accumulation dtype and round once into odt at the last pass, which divides by
    `div` (mean: every reduced element); max and min (1, 2) keep x's dtype (exact). aligned: x's
    data is 16-byte aligned (the intermediate arrays are)."""
    groups = _runs(shape, axes)
    sizes = [n for _, n in groups]
    reduced = [i for i, (red, _) in enumerate(groups) if red]
    acc = np.dtype(np.float64 if dt == "float64" else np.float32)   # (code 0's partial sums)
    steps = []
    for k, j in enumerate(reversed(reduced)):   # j: the run's index in sizes (the later ones removed)
        last = k == len(reduced) - 1
        out = np.dtype(odt) if last or code else acc
        steps.append(_run_plan(code, dt, aligned, _prod(sizes[:j]), sizes[j], _prod(sizes[j + 1:]), out,
                               div if last else 1.0))
        del sizes[j]
        dt, aligned = dtype_name(out), True
    return steps


def _run_passes(steps: list, xc):
    """Run _pass_plans' steps on the contiguous array xc; returns the flat result."""
    for rp in steps:
        xc = _run_exec(rp, xc)
    return xc


def _run_exec(plan: tuple, xc):
    """Run a _run_plan on the contiguous array xc; returns the flat result."""
    cp = _cupy.loaded_cupy()
    odt, n_out, (expr, f, grid, block, tail), split = plan
    out = cp.empty(n_out, odt)
    null = np.uint64(0)
    if split is None:
        _launch_function(expr, f, grid, block, (xc, out, null, null, null, null) + tail, 0, None)
        return out
    (fexpr, ff, fgrid, fblock, ftail), (n_ws, acc, n_val, with_idx) = split
    ws = [cp.empty(n_ws, acc) if i < n_val else null for i in range(3)]
    ws.append(cp.empty(n_ws, np.int64) if with_idx else null)
    _launch_function(expr, f, grid, block, (xc, out, *ws) + tail, 0, None)
    _launch_function(fexpr, ff, fgrid, fblock, (*ws, out) + ftail, 0, None)
    return out


def _layout(x, axes: tuple, keep_index_order: bool):
    """(xc, kept axes of x in xc's order, outer, R, inner): xc contiguous, laid out so the reduced
    axes are one block. keep_index_order: the reduced axes stay in x's order (flattened indices of
    several reduced axes mean the C order of x)."""
    nd = x.ndim
    base = _base_order(x)
    if base is None or (keep_index_order and len(axes) > 1 and base != tuple(sorted(base))):
        x, base = contiguous(x), tuple(range(nd))
    elif not x._c_contiguous:
        x = x.transpose(base)  # C-contiguous: a view
    b_axes = tuple(sorted(i for i, d in enumerate(base) if d in axes))
    perm, outer, R, inner = plan(x.shape, b_axes)
    order = [base[i] for i in range(nd) if base[i] not in axes]
    if perm is not None:
        x = permute(x, perm)
        order = [base[i] for i in perm if base[i] not in axes]
    return x, order, outer, R, inner


def _keep_plan(key, entry: tuple) -> None:
    """Keep reduce()'s plan of a C-contiguous call (key None: not kept)."""
    if key is not None:
        _planned.keep(_plans, key, entry)


def reduce(x, op: str, axes: tuple, ddof: float = 0.0, acc_out: bool = False):
    """Reduce `axes` of x with op ("sum", "mean", "max", "min", "argmax", "argmin", "var").

    x: CuPy array, float16/bfloat16/float32/float64, any strides; axes: sorted non-negative axis
    numbers (() reduces nothing). ddof: var's delta degrees of freedom. Returns the result with the
    kept axes' shape: x's dtype (the accumulation dtype with acc_out, for sum/mean), int64 for
    argmax/argmin (the index into the reduced axes flattened in C order). An empty reduction gives
    0 (sum) or NaN (mean, var); max/min/argmax/argmin of an empty reduction raise ShapeError.
    """
    cp = _cupy.loaded_cupy()
    key = None
    if x._c_contiguous:  # the usual case: its plan is cached (host time per call)
        key = (op, x.shape, x.dtype, axes, ddof, acc_out, x.data.ptr % 16 == 0, cp.cuda.runtime.getDevice())
        p = _plans.get(key)
        if p is not None:
            perm, out_shape, rp = p
            if perm is _PASSES:
                return _run_passes(rp, x).reshape(out_shape)
            return _run_exec(rp, x if perm is None else permute(x, perm)).reshape(out_shape)
    code = OP_CODES[op]
    kept = tuple(d for d in range(x.ndim) if d not in axes)
    out_shape = tuple(x.shape[d] for d in kept)
    R = _prod(x.shape[d] for d in axes)
    if code in (3, 4):
        odt = np.dtype(np.int64)
    elif acc_out:
        odt = _acc_dtype(x.dtype)
    else:
        odt = x.dtype
    if _prod(out_shape) == 0:
        return cp.empty(out_shape, odt)
    if R == 0:
        if code == 0 and op == "sum":
            return cp.zeros(out_shape, odt)
        if code in (0, 5):
            return _nan_array(out_shape, odt)
        raise ShapeError(f"{op}: the reduction over axes {axes} of shape {tuple(x.shape)} is empty; "
                         f"{op} of an empty sequence has no value")
    div = {"mean": R, "var": max(R - ddof, 0.0)}.get(op, 1.0)
    base = _base_order(x) if code in (0, 1, 2) else None
    if base is None and code in (0, 1, 2) and len(axes) > 1:   # a view no permutation makes contiguous
        x, base = contiguous(x), tuple(range(x.ndim))           # (x[:, ::2]): one C-order copy, then passes
    if base is not None:   # sum, mean, max, min of a permutation of a contiguous buffer
        xb = x if x._c_contiguous else x.transpose(base)   # (a C-contiguous view)
        b_axes = tuple(sorted(i for i, d in enumerate(base) if d in axes))
        if plan(xb.shape, b_axes)[0] is not None:   # reduced axes in several runs: passes, no copy of x
            steps = _pass_plans(xb.shape, b_axes, code, dtype_name(x.dtype), xb.data.ptr % 16 == 0, odt, div)
            _keep_plan(key, (_PASSES, out_shape, steps))
            order = [base[i] for i in range(x.ndim) if base[i] not in axes]
            res = _run_passes(steps, xb).reshape([x.shape[d] for d in order])
            return res if order == list(kept) else permute(res, [order.index(d) for d in kept])
    xc, order, outer, Rv, inner = _layout(x, axes, keep_index_order=code in (3, 4))
    rp = _run_plan(code, dtype_name(xc.dtype), xc.data.ptr % 16 == 0, outer, Rv, inner, odt, div)
    _keep_plan(key, (plan(x.shape, axes)[0], out_shape, rp))   # (C-contiguous x: xc is x or its copy
                                                                  # permuted by plan(), order == kept)
    flat = _run_exec(rp, xc)
    res = flat.reshape([x.shape[d] for d in order])
    if order != list(kept):  # computed in another layout: back to x's order of the kept axes
        res = permute(res, [order.index(d) for d in kept])
    return res


def channel_sum(g):
    """g (N, K, *spatial) summed over every axis but 1 (a convolution's dL/db from dL/dy): (K,) in
    g's dtype, float32 sums rounded once (double for float64). C-contiguous g: each (image,
    channel) plane's sum, then the images' (reduce()'s passes, no copy); a channels-last view
    reduces its (N H W, K) buffer in place. Traffic: g read once, plus N K float32 partial sums. CuPy's
    g.sum(axis=(0, 2, 3), dtype=float32) in its place (the cuDNN backward's bias gradient until
    2026-11-28) ran slower (Performance, grouped convolutions). A C-contiguous g takes the planned
    launches (reduce_fast, the same passes) where they apply."""
    axes = (0,) + tuple(range(2, g.ndim))
    out = reduce_fast("sum", g, axes, False)
    return reduce(g, "sum", axes) if out is None else out


# ------------------------------------------------------------------------------------------
# backward

def _expand(mode: int, g, x, mean, idx, xshape_c: tuple, outer: int, R: int, inner: int, scale, dtype):
    """dx of shape xshape_c (the (outer, R, inner) layout, C order) from the per-output values."""
    cp = _cupy.loaded_cupy()
    dt = dtype_name(dtype)
    dx = cp.empty(xshape_c, dtype)
    n = outer * R * inner
    if n == 0:
        return dx
    vw = vec_width(dt)
    ok = (R % vw == 0) if inner == 1 else (inner % vw == 0)
    ptrs = [dx.data.ptr] + ([x.data.ptr] if x is not None else [])
    v = vw if ok and all(p % 16 == 0 for p in ptrs) else 1
    npacks = n // v
    from ..runtime.device import get_device_info
    grid = max(1, min(_cdiv(npacks, THREADS), 32 * get_device_info().multiprocessors))
    null = np.uint64(0)
    _launch(f"ck_red_expand<{ctype(dt)}, {mode}, {v}>", dt, (grid, 1, 1), (THREADS, 1, 1),
            (g, null if x is None else x, null if mean is None else mean, null if idx is None else idx, dx,
             np.int64(npacks), np.int64(R), np.int64(inner), _acc_scalar(dtype, scale)))
    return dx


def _grad_layout(x_shape: tuple, axes: tuple):
    """(perm, outer, R, inner, shape of the computed layout) for a backward into x_shape."""
    perm, outer, R, inner = plan(x_shape, axes)
    shape_c = tuple(x_shape) if perm is None else tuple(x_shape[d] for d in perm)
    return perm, outer, R, inner, shape_c


def _unpermute(dx, perm):
    if perm is None:
        return dx
    return permute(dx, [perm.index(d) for d in range(len(perm))])


def sum_backward(g, x_shape: tuple, axes: tuple, divisor: float = 1.0):
    """grad_out of sum (divisor 1) or mean (divisor N) broadcast back to x_shape: g / divisor.

    g: CuPy array with the kept axes' shape (x_shape without `axes`), any float dtype. Returns a
    C-contiguous dx of shape x_shape and g's dtype (16-bit: divided in float32, rounded once)."""
    cp = _cupy.loaded_cupy()
    perm, outer, R, inner, shape_c = _grad_layout(tuple(x_shape), axes)
    g = cp.ascontiguousarray(g)
    dx = _expand(0, g, None, None, None, shape_c, outer, R, inner, divisor, g.dtype)
    return _unpermute(dx, perm)


def var_backward(g, x, axes: tuple, ddof: float):
    """Gradient of var(x, axes, ddof): g * 2 (x - mean) / (N - ddof), g with the kept axes' shape
    and x's dtype. Returns dx like x (C-contiguous)."""
    cp = _cupy.loaded_cupy()
    perm, outer, R, inner, shape_c = _grad_layout(tuple(x.shape), axes)
    N = _prod(x.shape[d] for d in axes)
    if x.size == 0:
        return cp.empty(x.shape, x.dtype)
    mean = cp.ascontiguousarray(reduce(x, "mean", axes, acc_out=True))
    xc = contiguous(x) if perm is None else permute(x, perm)
    scale = 2.0 / (N - ddof) if N - ddof > 0 else float("inf")  # N - ddof <= 0: inf / NaN, as the forward
    dx = _expand(1, cp.ascontiguousarray(g), xc, mean, None, shape_c, outer, R, inner, scale, x.dtype)
    return _unpermute(dx, perm)


def extreme_backward(g, x, axes: tuple, kind: str):
    """Gradient of max (kind "max") or min ("min") over `axes`: g at the first position of the
    extreme value of each reduced group (the first NaN if any), 0 elsewhere. g: kept axes' shape,
    x's dtype. Returns dx like x (C-contiguous)."""
    cp = _cupy.loaded_cupy()
    perm, outer, R, inner, shape_c = _grad_layout(tuple(x.shape), axes)
    if x.size == 0:
        return cp.empty(x.shape, x.dtype)
    idx = cp.ascontiguousarray(reduce(x, "argmax" if kind == "max" else "argmin", axes))
    dx = _expand(2, cp.ascontiguousarray(g), None, None, idx, shape_c, outer, R, inner, 1.0, x.dtype)
    return _unpermute(dx, perm)


# ------------------------------------------------------------------------------------------
# the host-time path of the common call: sum/mean/max/min over all axes, one axis or a tuple of
# axes of a C-contiguous array (ops.sum & co. and the Backend methods)

_fast: dict = {}   # (op, shape, dtype, axis, keepdims, device, 16-byte aligned) -> launches, or None
_FAST_OPS = frozenset(("sum", "mean", "max", "min"))
_CODES = {np.int64: "Q", np.int32: "i", np.float32: "f", np.float64: "d"}


def _codes(head: str, tail: tuple) -> bytes:
    return (head + "".join(_CODES[type(v)] for v in tail)).encode()


def _fast_axes(axis, nd: int):
    """The sorted axes `axis` (None, an int or a tuple of ints) names for nd dims, or None where
    the checked path must judge it (out of range, repeated, another type: its error)."""
    if axis is None:
        return tuple(range(nd))
    items = (axis,) if type(axis) is int else axis
    if type(items) is not tuple or not items:
        return None
    out = set()
    for a in items:
        if type(a) is not int or not -nd <= a < nd or a % nd in out:
            return None
        out.add(a % nd)
    return tuple(sorted(out))


def _launch_spec(rp: tuple) -> tuple:
    """(result dtype, result elements, main launch, final launch or None, workspace elements and
    dtype or None) of a _run_plan for the planned launches."""
    odt, n_out, (expr, f, grid, block, tail), split = rp
    main = (expr, f.ptr, grid, block, _codes("QQQQQQ", tail), tail)   # x, out, w0, w1, w2, wi
    if split is None:
        return odt, n_out, main, None, None
    (fexpr, ff, fgrid, fblock, ftail), (n_ws, acc, _, _) = split   # sum/mean/max/min: one workspace
    return odt, n_out, main, (fexpr, ff.ptr, fgrid, fblock, _codes("QQQQQ", ftail), ftail), (n_ws, acc)


def _plan_fast(op: str, shape: tuple, dtype, axis, keepdims: bool, aligned: bool):
    """(result shape, the launch specs of reduce()'s passes for this call, first to last) or None
    where it takes the checked path: a bad axis, an empty reduction or result, a dtype the kernels
    lack. Reduced axes in one run: one pass; in several (sum over (0, 2, 3) of NCHW data): one pass
    a run (_pass_plans), as reduce() runs them on a C-contiguous array."""
    nd = len(shape)
    dt = dtype_name(dtype)
    if dt not in FLOAT_DTYPE_NAMES or nd == 0:
        return None
    axes = _fast_axes(axis, nd)
    if axes is None:
        return None
    perm, outer, R, inner = plan(shape, axes)
    kept = [n for d, n in enumerate(shape) if d not in axes]
    if R == 0 or _prod(kept) == 0:
        return None
    div = R if op == "mean" else 1.0
    if perm is None:
        steps = [_run_plan(OP_CODES[op], dt, aligned, outer, R, inner, dtype, div)]
    else:
        steps = _pass_plans(shape, axes, OP_CODES[op], dt, aligned, dtype, div)
    out_shape = tuple(1 if d in axes else n for d, n in enumerate(shape)) if keepdims else tuple(kept)
    return out_shape, tuple(_launch_spec(rp) for rp in steps)


def reduce_fast(op: str, x, axis, keepdims):
    """op ("sum", "mean", "max" or "min") of x over all axes (axis None), one int axis or a tuple
    of int axes through launches planned once per (op, shape, dtype, axis, keepdims, device,
    alignment), bitwise reduce()'s result (reduced axes in several runs: its passes, one a run);
    None where this path does not apply and the caller takes the checked one (another op, x not a
    C-contiguous CuPy array on the current device, a non-bool keepdims, _plan_fast's cases, or
    _planned.ready() declines)."""
    env = _planned.ready()
    if env is None or op not in _FAST_OPS:
        return None
    _, ndarray, get_device, _ = env
    if type(x) is not ndarray or not x._c_contiguous or type(keepdims) is not bool:
        return None
    dev = get_device()
    if x.data.device_id != dev:
        return None
    try:
        key = (op, x.shape, x.dtype, axis, keepdims, dev, not x.data.ptr & 15)
        hash(key)
    except TypeError:   # (an axis list: the checked path)
        return None
    p = _planned.plan(_fast, key, lambda: _plan_fast(op, x.shape, x.dtype, axis, keepdims, key[6]))
    if p is None:
        return None
    out_shape, steps = p
    src, last = x, len(steps) - 1
    for i, (odt, n_out, main, final, ws_spec) in enumerate(steps):
        out = ndarray(out_shape if i == last else (n_out,), odt)
        expr, fptr, grid, block, codes, tail = main
        if final is None:
            _planned.run(env, expr, fptr, grid, block, 0, codes, src.data.ptr, out.data.ptr, 0, 0, 0, 0, *tail)
        else:
            ws = ndarray((ws_spec[0],), ws_spec[1])
            _planned.run(env, expr, fptr, grid, block, 0, codes, src.data.ptr, out.data.ptr, ws.data.ptr, 0, 0, 0,
                         *tail)
            fexpr, ffptr, fgrid, fblock, fcodes, ftail = final
            _planned.run(env, fexpr, ffptr, fgrid, fblock, 0, fcodes, ws.data.ptr, 0, 0, 0, out.data.ptr, *ftail)
        src = out
    return src
