"""Normalization kernels: layernorm, rmsnorm and batch_norm, forward and backward.

Layernorm / rmsnorm normalise each row of a (rows, cols) matrix:
- Rows that fit hold their row in registers (`ck_*_fwd_reg`, `ck_*_bwd_reg`): `tpr` threads per
  row (1..1024, a power of two; several rows per block when tpr < 256), NV vectors of V elements
  per thread, so x is read from memory exactly once. Statistics are an exact two-pass over those
  registers (mean, then the sum of squared deviations), accurate for rows with a large mean.
- Longer rows (`ck_*_fwd_loop`, `ck_*_bwd_loop`) take one block of 1024 threads per row and
  read the row twice (statistics, then output); statistics are a Welford/Chan merge of per-vector
  exact statistics, again accurate for a large mean.
- dweight / dbias are bitwise deterministic: each block sums its own chunk of rows into a
  partial-sum workspace (blocks x cols) in a fixed order, and `ck_norm_colsum` reduces those
  partials in a fixed order (32 interleaved slices of the parts, then the slices in turn). No
  atomics. The block count depends on the shape and on the device (its multiprocessor count and
  the kernel's occupancy), so results are bitwise the same from run to run on one device.
Batch norm views x as (N, C*S) (S = H*W, 1 for 2-D input): per-(column, row-chunk) Welford partials,
a per-channel finalize in a fixed order, then an elementwise apply (2 reads + 1 write of x in
training; backward 2 reads of x and dy + 1 write of dx).

Statistics accumulate in float32 (float64 for float64). Inputs are contiguous CuPy arrays on the
current device of one dtype (float16, bfloat16, float32, float64), validated by the caller.
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime import _cupy
from ..runtime.compiler import _launch_function
from . import _planned
from ._common import _ITEMSIZE, FLOAT_DTYPE_NAMES, KernelFamily, by_template, ctype, cuda_source, dtype_name, vec_width

SOURCE_FILES = ("_pdl.cuh", "_preamble.cuh", "_pack_helpers.cuh", "normalization.cu")
SOURCE = cuda_source(*SOURCE_FILES)

# ------------------------------------------------------------------------------------------
# Instantiations and launch plans

REG_NV = (1, 2, 4, 8)      # vectors per thread of the register-row kernels
# Vectors per thread the launch plans aim at (measured on an H100, 32768x4096 and 4096x16384,
# float32 and bfloat16): 4 for the forward (0.93-0.99x copy bandwidth); 2 for the backward, whose
# x and dy both stay in registers (more threads per row, fewer registers each).
FWD_TARGET_NV = 4
BWD_TARGET_NV = 2
LOOP_THREADS = 1024        # block size of the one-block-per-row kernels
BN_THREADS = 256           # block size of the batch-norm kernels
BN_SMALL = 4096            # elements a channel (N*S) up to which one block a channel does a batch norm
                           # (forward or backward) in one launch instead of three (ck_bn_small)
BN_SMALL_ROWS = 65536      # with S == 1 (rows of channels, whose block a channel reads a strided
                           # column): elements in all up to which ck_bn_small still runs
BN_WARP_PARTIALS = 64      # partials a channel up to which the finalize kernels take a warp per channel
                           # (8 channels a block, at most 2 partials a lane) instead of a block of 256
                           # threads: wide, short inputs have thousands of channels of a few partials each
                           # (H200: 32x2048x7x7 channels-last float32 forward 0.0236 -> 0.0199 ms); with
                           # more partials a lane the warp's serial loads cost more than a block's sync
                           # (32x128x28x28, 196 partials: 0.0175 -> 0.0212 ms at 256 here)
BN_CL_LANE_ROWS = 8        # rows each row-lane of the channels-last reductions takes at least, so their
                           # partials ([row chunks, C] of acc) stay a small part of the traffic
_MAX_TPR = 1024


def _vecs(dtype_name: str) -> tuple:
    """The vector widths instantiated for a dtype: 16-byte packs and single elements."""
    return (vec_width(dtype_name), 1)


def name_expressions(dtype=None) -> list[str]:
    """Every template instantiation this module launches (for one dtype name when given)."""
    out = []
    for dt in (FLOAT_DTYPE_NAMES if dtype is None else (dtype,)):
        t = ctype(dt)
        for v in _vecs(dt):
            for nv in REG_NV:
                out += [f"ck_ln_fwd_reg<{t}, {v}, {nv}>", f"ck_rms_fwd_reg<{t}, {v}, {nv}>"]
                out += [f"ck_{k}_bwd_reg{r}<{t}, {v}, {nv}>" for k in ("ln", "rms") for r in ("", "_res")]
            out += [f"ck_ln_fwd_loop<{t}, {v}>", f"ck_rms_fwd_loop<{t}, {v}>"]
            out += [f"ck_{k}_bwd_loop{r}<{t}, {v}>" for k in ("ln", "rms") for r in ("", "_res")]
            out += [
                    f"ck_bn_stats<{t}, {v}>"] + [f"ck_bn_small<{t}, {v}, {st}>" for st in ("false", "true")]
            for f in ("false", "true"):   # batch_norm, and fused with residual= / activation="relu"
                out += [f"ck_bn_apply<{t}, {v}, false, {f}>", f"ck_bn_resident<{t}, {v}, false, {f}>",
                        f"ck_bn_bwd_reduce<{t}, {v}, {f}>",
                        f"ck_bn_bwd_apply<{t}, {v}, false, {f}>", f"ck_bn_bwd_resident<{t}, {v}, false, {f}>"]
                out += [f"ck_bn_bwd_small<{t}, {v}, {f}, {st}>" for st in ("false", "true")]
        v = vec_width(dt)   # channels-last rows (S == 1) of whole vectors of channels
        out += [f"ck_bn_stats_cl<{t}, {v}>"]
        for f in ("false", "true"):
            out += [f"ck_bn_apply<{t}, {v}, true, {f}>", f"ck_bn_resident<{t}, {v}, true, {f}>",
                    f"ck_bn_bwd_reduce_cl<{t}, {v}, {f}>",
                    f"ck_bn_bwd_apply<{t}, {v}, true, {f}>", f"ck_bn_bwd_resident<{t}, {v}, true, {f}>"]
        out += [f"ck_ln_bwd_cols<{t}>", f"ck_rms_bwd_cols<{t}>", f"ck_norm_colsum<{t}>",
                f"ck_bn_finalize<{t}>", f"ck_bn_bwd_finalize<{t}>", f"ck_bn_barrier_zero<{t}>"]
    return out


# one family per dtype: each dtype compiles only its own instantiations
_families = {dt: KernelFamily(SOURCE, (lambda dt=dt: name_expressions(dt)), f"cudakit/normalization_{dt}.cu",
                                group=by_template)
             for dt in FLOAT_DTYPE_NAMES}


def _kernel(dev: int, dtype_name: str, expr: str):
    fam = _families[dtype_name]
    return fam.kernel(expr), fam.function(dev, expr)


def _launch(expr: str, dtype_name: str, grid: tuple, block: tuple, args: tuple, smem: int = 0) -> None:
    cp = _cupy.loaded_cupy()
    dev = cp.cuda.runtime.getDevice()
    k, f = _kernel(dev, dtype_name, expr)
    k.allow_dynamic_shared_memory(smem, dev)
    _launch_function(expr, f, grid, block, args, smem, None)


def _device_info():
    from ..runtime.device import get_device_info
    return get_device_info()


def _occupancy(dtype_name: str, expr: str, threads: int, smem: int, floor: int = 1) -> int:
    """Resident blocks per multiprocessor of `expr` at this block size and dynamic shared memory
    (at least `floor`)."""
    cp = _cupy.loaded_cupy()
    dev = cp.cuda.runtime.getDevice()
    k, f = _kernel(dev, dtype_name, expr)
    k.allow_dynamic_shared_memory(smem, dev)
    return max(floor, int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(f.ptr, threads, smem)))


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p


def _null():
    return np.uint64(0)


def _ptr(a):
    return _null() if a is None else a


def _acc_dtype(x):
    return np.float64 if x.dtype == np.float64 else np.float32


def _acc_scalar(x, v):
    return np.float64(v) if x.dtype == np.float64 else np.float32(v)


def _vec_for(cols: int, dtype_name: str, *arrays) -> int:
    """16-byte packs when cols is a multiple of the pack and every array is 16-byte aligned."""
    v = vec_width(dtype_name)
    if cols % v == 0 and all(a is None or a.data.ptr % 16 == 0 for a in arrays):
        return v
    return 1


def _bwd_bound(nv: int, vec: int, itemsize: int) -> int:
    """Largest block of ck_*_bwd_reg<T, vec, nv> (its __launch_bounds__, ck_bwd_bound)."""
    return 1024 if nv * vec * itemsize <= (64 if itemsize == 4 else 32) else 256


def _fwd_bound(nv: int, vec: int, itemsize: int) -> int:
    """Largest block of ck_*_fwd_reg<T, vec, nv> (its __launch_bounds__, ck_fwd_bound)."""
    return 1024 if nv * vec * itemsize <= 64 or itemsize < 8 else 512


def _reg_plan(nvec: int, target_nv: int = 4, bound=None):
    """(tpr, NV, rpb) for a register-row kernel, or None when the row is too long to hold.

    tpr, the threads per row, is the power of two that gives each thread about `target_nv`
    vectors (at most 1024); NV is the smallest instantiated count covering the row; rows share a
    block of 256 threads when tpr is small. bound(NV) -> the kernel's largest block, if limited.
    """
    tpr = min(_MAX_TPR, _pow2_at_least(max(1, -(-nvec // target_nv))))
    while True:
        need = -(-nvec // tpr)
        nv = next((n for n in REG_NV if n >= need), None)
        if nv is None:
            return None
        limit = bound(nv) if bound else _MAX_TPR
        if tpr <= limit:
            return tpr, nv, max(1, min(256, limit) // tpr)
        tpr = limit  # fewer threads per row, more vectors each: may need a larger NV


# ------------------------------------------------------------------------------------------
# layernorm / rmsnorm

def _norm_forward(kind: str, x2d, weight, bias, eps, out, plan_nv=None):
    cp = _cupy.loaded_cupy()
    rows, cols = x2d.shape
    dt = dtype_name(x2d.dtype)
    acc = _acc_dtype(x2d)
    y = cp.empty(x2d.shape, x2d.dtype) if out is None else out   # x2d is C-contiguous
    mean = cp.empty(rows, acc) if kind == "ln" else None
    rstd = cp.empty(rows, acc)
    if rows == 0 or cols == 0:
        return y, mean, rstd
    v = _vec_for(cols, dt, x2d, y, weight, bias)
    dev = cp.cuda.runtime.getDevice()
    key = (kind, rows, cols, dt, v, plan_nv, dev)
    p = _fwd_plans.get(key)
    if p is None:  # the launch of this shape, planned once (host time per call)
        expr, grid, block, reg = _fwd_launch(kind, rows, cols, dt, v, plan_nv)
        tail = (np.int64(rows), np.int32(cols)) if reg else (np.int32(cols),)
        if len(_fwd_plans) >= 1024:
            _fwd_plans.clear()
        p = _fwd_plans[key] = (expr, _kernel(dev, dt, expr)[1], grid, block, tail)
    expr, f, grid, block, tail = p
    stats = (mean, rstd) if kind == "ln" else (rstd,)
    params = (_ptr(weight), _ptr(bias)) if kind == "ln" else (_ptr(weight),)
    _launch_function(expr, f, grid, block, (x2d, *params, y, *stats, *tail, _acc_scalar(x2d, eps)), 0, None)
    return y, mean, rstd


def _fwd_launch(kind: str, rows: int, cols: int, dt: str, v: int, plan_nv=None):
    """(expr, grid, block, whether it is the register kernel) of the forward over rows x cols."""
    t = ctype(dt)
    plan = _reg_plan(cols // v, plan_nv or FWD_TARGET_NV, lambda nv: _fwd_bound(nv, v, _ITEMSIZE[dt]))
    if plan is not None:
        tpr, nv, rpb = plan
        return f"ck_{kind}_fwd_reg<{t}, {v}, {nv}>", (-(-rows // rpb), 1, 1), (tpr, rpb, 1), True
    return f"ck_{kind}_fwd_loop<{t}, {v}>", (rows, 1, 1), (LOOP_THREADS, 1, 1), False


_fwd_plans: dict = {}   # (kind, rows, cols, dtype, vector width, plan_nv, device) -> the forward's launch


def _bwd_reg_plan(kind, dt, t, v, nvec, rows, itemsize, itemsize_acc, plan_nv=None, res=False):
    """(expr, block, grid blocks, chunk, shared bytes) of the fused backward, or None when its
    accumulators do not fit in shared memory (then the loop + column kernels run)."""
    plan = _reg_plan(nvec, plan_nv or BWD_TARGET_NV, lambda nv: _bwd_bound(nv, v, itemsize))
    if plan is None:
        return None
    tpr, nv, rpb = plan
    n_acc = 2 if kind == "ln" else 1
    smem = rpb * tpr * (n_acc * nv * v + 1) * itemsize_acc
    info = _device_info()
    static = 64 * 16 * itemsize_acc  # the kernel's own reduction scratch
    if smem + static > info.max_shared_memory_per_block_optin:
        return None
    expr = f"ck_{kind}_bwd_reg{'_res' if res else ''}<{t}, {v}, {nv}>"
    per_sm = _occupancy(dt, expr, tpr * rpb, smem)
    lanes = -(-rows // rpb)
    blocks = max(1, min(lanes, per_sm * info.multiprocessors))
    chunk = -(-rows // blocks)
    blocks = -(-rows // chunk)
    return expr, (tpr, rpb, 1), blocks, chunk, smem


_COLSUM_Y = 32   # normalization.cu's CK_COLSUM_Y: threads per column of ck_norm_colsum


def _colsum(part, dt, t, nparts, cols, out0, out1, n_out):
    _launch(f"ck_norm_colsum<{t}>", dt, (-(-cols // 32), n_out, 1), (32, _COLSUM_Y, 1),
            (part, _ptr(out0), _ptr(out1), np.int32(nparts), np.int32(cols)))


def _norm_backward(kind: str, dy, x, weight, mean, rstd, out=None, plan_nv=None, residual=None):
    cp = _cupy.loaded_cupy()
    rows, cols = x.shape
    dt = dtype_name(x.dtype)
    t = ctype(dt)
    acc = _acc_dtype(x)
    dx = cp.empty_like(x) if out is None else out
    dw = cp.empty(cols, x.dtype) if weight is not None else None
    db = cp.empty(cols, x.dtype) if kind == "ln" else None
    if rows == 0 or cols == 0:
        for a in (dw, db):
            if a is not None:
                a.fill(0)
        return dx, dw, db
    n_acc = 2 if kind == "ln" else 1
    stats = (mean, rstd) if kind == "ln" else (rstd,)
    v = _vec_for(cols, dt, dy, x, dx, weight, residual)
    nvec = cols // v
    res = () if residual is None else (residual,)   # the *_res kernels take it after the statistics
    plan = _bwd_reg_plan(kind, dt, t, v, nvec, rows, x.dtype.itemsize, np.dtype(acc).itemsize, plan_nv, bool(res))
    if plan is not None:
        expr, block, blocks, chunk, smem = plan
        part = cp.empty((blocks, n_acc, cols), acc)
        _launch(expr, dt, (blocks, 1, 1), block,
                (dy, x, _ptr(weight), *stats, *res, dx, part, np.int64(rows), np.int32(cols), np.int64(chunk)), smem)
    else:
        _launch(f"ck_{kind}_bwd_loop{'_res' if res else ''}<{t}, {v}>", dt, (rows, 1, 1), (LOOP_THREADS, 1, 1),
                (dy, x, _ptr(weight), *stats, *res, dx, np.int32(cols)))
        col_blocks = -(-cols // 256)
        want = 4 * _device_info().multiprocessors
        blocks = max(1, min(rows, -(-want // col_blocks)))
        chunk = -(-rows // blocks)
        blocks = -(-rows // chunk)
        part = cp.empty((blocks, n_acc, cols), acc)
        _launch(f"ck_{kind}_bwd_cols<{t}>", dt, (col_blocks, blocks, 1), (256, 1, 1),
                (dy, x, *stats, part, np.int64(rows), np.int32(cols), np.int64(chunk)))
    outs = (dw, db) if kind == "ln" else (dw, None)
    if any(o is not None for o in outs):
        _colsum(part, dt, t, part.shape[0], cols, outs[0], outs[1], n_acc)
    return dx, dw, db


def layernorm_forward(x2d, weight, bias, eps: float, out=None):
    """Layer normalisation of each row of `x2d`.

    x2d: (rows, cols) contiguous, float16/bfloat16/float32/float64; weight, bias: (cols,) of the
    same dtype, or None; eps > 0. out: optional (rows, cols) array for y.
    Returns (y, mean, rstd): y like x2d; mean and rstd (rows,) float32 (float64 for float64 x),
    rstd = 1 / sqrt(biased variance + eps).
    """
    return _norm_forward("ln", x2d, weight, bias, eps, out)


def layernorm_backward(dy, x, weight, mean, rstd, out=None, residual=None):
    """Gradients of layernorm_forward.

    dy, x: (rows, cols) of one dtype; weight: (cols,) or None; mean, rstd: (rows,) from the forward;
    residual: (rows, cols) like x or None, added to dx in the pass that writes it (rounded once).
    Returns (dx, dweight, dbias): dx like x (written into `out` when given); dweight (cols,) of x's
    dtype, None when weight is None; dbias (cols,) of x's dtype. dweight and dbias are reduced in a
    fixed order: bitwise the same from run to run on one device.
    """
    return _norm_backward("ln", dy, x, weight, mean, rstd, out, residual=residual)


def rmsnorm_forward(x2d, weight, eps: float, out=None):
    """RMS normalisation of each row: y = x / sqrt(mean(x^2) + eps) * weight.

    x2d: (rows, cols) contiguous; weight: (cols,) or None. Returns (y, rstd), rstd (rows,) float32
    (float64 for float64 x).
    """
    y, _, rstd = _norm_forward("rms", x2d, weight, None, eps, out)
    return y, rstd


def rmsnorm_backward(dy, x, weight, rstd, out=None, residual=None):
    """Gradients of rmsnorm_forward: (dx, dweight), dweight None when weight is None;
    dweight reduced in a fixed order (bitwise reproducible on one device); residual as
    layernorm_backward's."""
    dx, dw, _ = _norm_backward("rms", dy, x, weight, None, rstd, out, residual=residual)
    return dx, dw


# ------------------------------------------------------------------------------------------
# batch norm

def _bn_layout(x):
    """(N, C, S) of a (N, C) or (N, C, *spatial) array."""
    n, c = x.shape[0], x.shape[1]
    s = 1
    for d in x.shape[2:]:
        s *= d
    return n, c, s


def _bn_blocks(csv: int, n: int, lanes: bool = False):
    """(block, grid x, grid y for the reductions, rows per reduction chunk) for an [n, csv] view.
    lanes (the channels-last kernels, whose rows are short): at most 32 vector columns a block,
    spread evenly over the blocks across (under 32 too: no thread idles on a narrow row), the rest
    of the block on rows, and row chunks of at least BN_CL_LANE_ROWS rows a row-lane."""
    if lanes:
        bx = -(-csv // -(-csv // 32))
    else:
        bx = min(BN_THREADS, max(32, _pow2_at_least(csv)))
    by = BN_THREADS // bx
    gx = -(-csv // bx)
    want = 4 * _device_info().multiprocessors
    gy = max(1, min(-(-n // by), -(-want // gx)))
    if lanes:
        gy = max(1, min(gy, n // (by * BN_CL_LANE_ROWS)))
    chunk = -(-n // gy)
    gy = -(-n // chunk)
    return (bx, by, 1), gx, gy, chunk


def _bn_small(n: int, c: int, s: int) -> bool:
    """The one-launch kernels (a block a channel) for this [n, c, s] batch norm."""
    return n * s <= BN_SMALL and (s > 1 or n * c <= BN_SMALL_ROWS)


# The single-read training forward and backward (ck_bn_resident, ck_bn_bwd_resident): x (and dy)
# kept in shared memory between the channel sums and the elementwise pass, so read from memory
# once. Their grid barriers need every block resident at once, so they run where x (and dy) fit in
# the shared memory of the blocks the device holds together (about 29 MB on an H100 or H200);
# False: always the three launches (a benchmark's A/B switch).
BN_RESIDENT = True
# channels-last rows (lanes) take it from this many bytes of x: below, its fixed cost (the counters'
# zeroing launch, two grid barriers, the finalize inside: about 5 us on an H200) outweighs the
# second read of x it saves, their three-launch statistics merging few partials a channel
# (H200, 2026-11-29, benchmarks/sweeps/batch_norm.py --resident-ab: 6.4 MB bfloat16 rows 4-6%
# slower, 12.8 MB 5-15% faster); NCHW views, whose three-launch finalize merges hundreds of partials
# a channel, take it whenever x fits (6.4 MB bfloat16 21% faster)
BN_RESIDENT_LANES_MIN_BYTES = 8 << 20
# Where dy and x do not fit on chip whole, the single-read backward still takes them when its tiles
# hold at least this fraction of each block's rows: the rest is read twice, as by the three
# launches, the tiles' part once. None: whole tiles only. H200, 2026-11-29 10:02 UTC
# (history/normalization/nvidia-h200-batch-norm-partial.json against -partial-whole.json, one call):
# at fractions 0.36-0.71 the backward ran 1.04-1.26x the three launches (channels-last 32x512x28x28
# bfloat16 1.2x, 32x1024x14x14 float32 1.14x, (8192, 1024) bfloat16 1.26x), at 0.26 0.89-0.97x;
# with this rule at 10:07 UTC (nvidia-h200-batch-norm-partial-backward*.json) 1.14x, 1.2x, 1.25x.
BN_RESIDENT_PARTIAL_FROM = 0.35
# ... and the forward: None, never (its tiles gained nothing reliable: 0.92-1.04x at 0.26-0.79).
BN_RESIDENT_PARTIAL_FROM_FORWARD = None
BN_RESIDENT_TILE_ROWS_MAX = None   # (tests: a tile holds at most this many rows, to take the partial form)
# The single-read kernels (ck_bn_resident's and the staged ones) copy x (and dy) to shared memory
# with cp.async, whose smallest copy is 4 bytes: 2-byte single elements (16-bit planes whose S is no
# multiple of 8) go through registers one at a time, latency-bound, and take the three launches
# (bfloat16 32x256x14x14 on ck_bn_resident: forward 0.0358 ms, backward 0.032, against 0.0183 and
# 0.0162 for the three launches; H200, 2026-11-29 11:42 UTC, nvidia-h200-batch-norm-order.json).
BN_TILE_MIN_BYTES = 4
BN_BARRIER_WORDS = 8 * 32      # ck_bn_resident's barrier counters (CK_BAR_LANES of CK_BAR_STRIDE words)
_BN_RESIDENT_BLOCKS = (2, 1)   # blocks a multiprocessor it tries, most first (its launch bounds allow 2)
_resident_plans: dict = {}   # (device, kernel, n, vector columns, lanes, vector bytes) -> _bn_resident's answer


def _bn_resident(dt: str, expr: str, n: int, csv: int, lanes: bool, vbytes: int, nbytes: int,
                 partial_from: float | None = None) -> tuple | None:
    """(block, grid x, grid y, rows a block, rows a block's tiles hold, dynamic shared memory) of the
    single-read kernel `expr` (ck_bn_resident, ck_bn_bwd_resident) on an [n, csv] view of vectors of
    vbytes bytes (the bytes of all its tiles' vectors of a column), or None where the tiles do not
    fit the shared memory of the blocks the device holds at once, whole or (partial_from, a
    fraction) that fraction of each block's rows at least (or it is off: CUDAKIT_BN_SINGLE_READ,
    BN_RESIDENT; channels-last rows of x under BN_RESIDENT_LANES_MIN_BYTES (nbytes: x's); or the
    device is older than compute capability 7.0, whose barrier has no acquire loads). Worked out
    once per (device, kernel, shape), so every call of a shape takes the same grid (and sums)."""
    from ..config import settings
    if not BN_RESIDENT or not settings().bn_single_read or (lanes and nbytes < BN_RESIDENT_LANES_MIN_BYTES):
        return None
    cp = _cupy.loaded_cupy()
    dev = cp.cuda.runtime.getDevice()
    key = (dev, expr, n, csv, lanes, vbytes, partial_from, BN_RESIDENT_TILE_ROWS_MAX)
    if key not in _resident_plans:
        _resident_plans[key] = _bn_resident_plan(dev, dt, expr, n, csv, lanes, vbytes, partial_from)
    return _resident_plans[key]


def _bn_resident_plan(dev: int, dt: str, expr: str, n: int, csv: int, lanes: bool, vbytes: int,
                      partial_from: float | None) -> tuple | None:
    info = _device_info()
    if not info.max_shared_memory_per_multiprocessor or tuple(info.compute_capability) < (7, 0):
        return None
    static = _kernel(dev, dt, expr)[0].attributes["shared_memory"]   # (static, bytes)
    block, gx, _, _ = _bn_blocks(csv, n, lanes)
    bx, by = block[0], block[1]
    # whole tiles at either count of blocks a multiprocessor first, then tiles of part of the rows
    for whole in (True, False) if partial_from is not None else (True,):
        for per_sm in _BN_RESIDENT_BLOCKS:
            gy = min(n, per_sm * info.multiprocessors // gx)
            if gy < 1:
                continue
            chunk = -(-n // gy)
            gy = -(-n // chunk)
            room = min(info.max_shared_memory_per_block_optin,
                       info.max_shared_memory_per_multiprocessor // per_sm - info.reserved_shared_memory_per_block) - static
            cap = max(0, room) // (bx * vbytes)
            if BN_RESIDENT_TILE_ROWS_MAX is not None:
                cap = min(cap, BN_RESIDENT_TILE_ROWS_MAX)
            rows = min(chunk, cap)
            if rows < (chunk if whole else max(1, chunk * partial_from)):
                continue
            smem = rows * bx * vbytes
            # (the occupancy as the driver answers it: 0 where it refuses the block, which no grid fits)
            if _occupancy(dt, expr, bx * by, smem, floor=0) * info.multiprocessors >= gx * gy:
                return block, gx, gy, chunk, rows, smem
    return None


# Channels past BN_SMALL whose N*S elements (the backward: x's and dy's) fit in one block's shared
# memory, where ck_bn_resident's tiles do not fit on chip (NCHW views with more than two
# multiprocessors' worth of column blocks, as ResNet-50's 32x512x28x28): ck_bn_small and
# ck_bn_bwd_small STAGED, a block a channel reading x (and dy) once, with no partials, finalize or
# second launch. A block a channel leaves multiprocessors idle where the channels are few: taken
# where the channels fit in one round of the blocks the device holds at once (its slots) and give
# at least BN_STAGED_FILL of the multiprocessors a block, or, over several rounds, where their last
# round is full enough that the rounds are used to at least BN_STAGED_ROUNDS (channels / slots over
# that rounded up). BN_STAGED_FIRST: where both run, the staged kernels rather than
# ck_bn_resident's grid-barrier ones (which fit on chip whole).
# NCHW planes (S > 1) only: (N, C) rows whose C takes no channel vectors would read a strided column
# of single elements a channel, as ck_bn_small does only up to BN_SMALL_ROWS, and were not measured
# staged. Vectors of BN_TILE_MIN_BYTES at least (2-byte elements copied through registers one at a
# time left it latency-bound, bfloat16 32x1024x14x14 forward 0.0663 ms against 0.0376 for the
# three launches), and for the backward elements of BN_STAGED_BWD_ITEMSIZE bytes at
# least: its 16-bit forms ran 0.88-1.01x the three launches. H200, 2026-11-29 11:14 UTC, against
# the three launches in the same run (history/normalization/nvidia-h200-batch-norm-staged-rounds.json):
# float32 forward 1.09-1.27x (one round of 0.73 of the slots to 1.94 rounds), backward 1.37-1.47x
# (1.94 and 2.9 rounds), bfloat16 forward 0.94-1.2x; at 1.45 rounds float32 backward 0.9x, bfloat16
# backward 0.88x.
# H200, 2026-11-29 11:42 UTC (history/normalization/nvidia-h200-batch-norm-order.json, --order-ab:
# both orders and the three launches in one run): the staged kernels first ran 1.14-1.76x the
# grid-barrier ones where both could (32x256x14x14 float32 forward 0.0119 against 0.0194 ms,
# backward 0.0111 against 0.0185; 32x128x28x28 bfloat16 forward 0.0137 against 0.0172), and the
# same where the grid-barrier ones did not fit (64x128x28x28); a block on 0.73 of the
# multiprocessors (32x96x28x28 float32) 1.18x the grid-barrier forward.
# False: never (a benchmark's A/B switch); off too wherever BN_RESIDENT or CUDAKIT_BN_SINGLE_READ is.
BN_STAGED = True
BN_STAGED_FIRST = True
BN_STAGED_FILL = 0.7
BN_STAGED_ROUNDS = 0.8
BN_STAGED_BWD_ITEMSIZE = 4
BN_STAGED_VECS = 4   # vectors a thread of the staged kernels copies, aimed at (blocks of 128 to 1024 threads)
_staged_plans: dict = {}   # (device, kernel, n, c, vectors a channel's row, vector bytes, tiles, rules) -> its plan


def _bn_staged(dt: str, expr: str, n: int, c: int, sv: int, vbytes: int, tiles: int) -> tuple | None:
    """(threads, dynamic shared memory) of the staged one-block-a-channel kernel `expr` (ck_bn_small,
    ck_bn_bwd_small STAGED) on c channels of n*sv vectors of vbytes bytes, `tiles` arrays of them
    staged (x; the backward's x and dy); None where it does not run (off, vectors under 4 bytes, a
    channel past one block's shared memory, or channels too few for the blocks the device holds at
    once). Worked out once per (device, kernel, shape)."""
    from ..config import settings
    if not (BN_STAGED and BN_RESIDENT and settings().bn_single_read) or vbytes < BN_TILE_MIN_BYTES:
        return None
    dev = _cupy.loaded_cupy().cuda.runtime.getDevice()
    key = (dev, expr, n, c, sv, vbytes, tiles, BN_STAGED_FILL, BN_STAGED_ROUNDS, BN_STAGED_VECS)
    if key not in _staged_plans:
        _staged_plans[key] = _bn_staged_plan(dev, dt, expr, n, c, sv, vbytes * tiles)
    return _staged_plans[key]


def _bn_staged_plan(dev: int, dt: str, expr: str, n: int, c: int, sv: int, vbytes: int) -> tuple | None:
    info = _device_info()
    cnt = n * sv
    smem = cnt * vbytes
    if smem + _kernel(dev, dt, expr)[0].attributes["shared_memory"] > info.max_shared_memory_per_block_optin:
        return None
    threads = min(1024, max(128, 32 * -(-cnt // (32 * BN_STAGED_VECS))))
    slots = _occupancy(dt, expr, threads, smem, floor=0) * info.multiprocessors
    if not slots:
        return None
    rounds = c / slots
    if rounds <= 1 and min(c, info.multiprocessors) < BN_STAGED_FILL * info.multiprocessors:
        return None
    if rounds > 1 and rounds < BN_STAGED_ROUNDS * math.ceil(rounds):
        return None
    return threads, smem


def _bn_partials(count: int, lanes: bool, gy: int, c: int, csv: int, sv: int, acc) -> tuple:
    """`count` arrays of per-(row chunk, channel or vector column) partials ([row chunks, C] for
    channels-last rows, else [vector columns, row chunks]) and (K, cs, ks): channel c's partial j is
    at c*cs + j*ks of each, K of them."""
    cp = _cupy.loaded_cupy()
    arrays = tuple(cp.empty((gy, c) if lanes else (csv, gy), acc) for _ in range(count))
    k = gy if lanes else sv * gy
    return arrays, ((k, 1, c) if lanes else (k, k, 1))


def _barrier_counters(dt: str):
    """The single-read kernels' grid-barrier counters, zeroed by their own launch before the kernel."""
    count = _cupy.loaded_cupy().empty(BN_BARRIER_WORDS, np.uint32)
    _launch(f"ck_bn_barrier_zero<{ctype(dt)}>", dt, (1, 1, 1), (32, 1, 1), (count,))
    return count


def _finalize_launch(c: int, k: int) -> tuple:
    """(grid, block) of ck_bn_finalize / ck_bn_bwd_finalize for c channels of k partials each. A block
    a channel must have a grid of exactly c blocks: the kernels return before their block's
    __syncthreads where a channel is past c, which only a whole warp of the warp mode may do."""
    if k <= BN_WARP_PARTIALS:
        return (-(-c // 8), 1, 1), (32, 8, 1)
    return (c, 1, 1), (256, 1, 1)


def _apply_grid(gx: int, n: int, by: int):
    return (gx, max(1, min(-(-n // (by * 4)), 65535)), 1)


def _bn_vec(s: int, dt: str, arrays) -> int:
    """Elements a vector of one channel's S holds: the 16-byte width where it divides S and every
    array is 16-byte aligned, else 1."""
    v = vec_width(dt)
    return v if not s % v and not any(a.data.ptr % 16 for a in arrays) else 1


def _bn_vectors(n: int, c: int, s: int, dt: str, arrays) -> tuple:
    """(V, lanes, vector columns, vectors a channel holds) of the batch-norm launches on [n, c*s]:
    V channels a vector (lanes: the channels-last kernels) where S == 1 and V divides C, a
    channel's V adjacent elements where V divides S (_bn_vec); single elements otherwise or unaligned."""
    v = vec_width(dt)
    if s == 1 and v > 1 and not c % v and not any(a.data.ptr % 16 for a in arrays):
        return v, True, c // v, 0
    v = _bn_vec(s, dt, arrays)
    return v, False, c * s // v, s // v


def batch_norm_forward(x, gamma, beta, running_mean, running_var, training: bool, momentum: float,
                       eps: float, out=None, residual=None, relu: bool = False):
    """Batch normalisation over every axis but 1 of x (N, C) or (N, C, *spatial).

    gamma, beta, running_mean, running_var: (C,) of x's dtype, or None (running statistics are
    required when not training). Training: batch statistics; running_mean and running_var are
    updated in place (running_var with the unbiased variance, as PyTorch). Inference: the running
    statistics. residual (like x) is added to the normalised x, then relu applied where relu, in
    the same pass (y = relu(bn(x) + residual), rounded once). Returns (y, save_mean, save_invstd);
    the last two (C,) float32 (float64 for float64), invstd = 1 / sqrt(var + eps).
    """
    cp = _cupy.loaded_cupy()
    dt = dtype_name(x.dtype)
    t = ctype(dt)
    acc = _acc_dtype(x)
    n, c, s = _bn_layout(x)
    y = cp.empty_like(x) if out is None else out
    save_mean, save_invstd = cp.empty(c, acc), cp.empty(c, acc)
    if c == 0:
        return y, save_mean, save_invstd
    a = _acc_scalar
    arrays = (x, y) if residual is None else (x, y, residual)   # (their alignment picks the vector width)
    small = lambda v: (x, y, _ptr(gamma), _ptr(beta), _ptr(running_mean), _ptr(running_var),
                       save_mean, save_invstd, np.int64(n), np.int64(c), np.int64(s // v), np.int32(bool(training)),
                       a(x, momentum), a(x, eps), _ptr(residual), np.int32(bool(relu)))
    if x.size and _bn_small(n, c, s):   # one launch: statistics, running statistics and y per channel block
        v = _bn_vec(s, dt, arrays)
        _launch(f"ck_bn_small<{t}, {v}, false>", dt, (c, 1, 1), (BN_THREADS, 1, 1), small(v))
        return y, save_mean, save_invstd
    v, lanes, csv, sv = _bn_vectors(n, c, s, dt, arrays)
    scale = cp.empty(c, acc)
    fused = "true" if residual is not None or relu else "false"
    cl = "true" if lanes else "false"
    staged_expr, staged = f"ck_bn_small<{t}, {v}, true>", None   # (a block a channel, x staged: NCHW planes)
    if training and x.size and s > 1:
        staged = _bn_staged(dt, staged_expr, n, c, sv, v * _ITEMSIZE[dt], 1)
    plan = None
    if training and x.size and v * _ITEMSIZE[dt] >= BN_TILE_MIN_BYTES and (staged is None or not BN_STAGED_FIRST):
        expr = f"ck_bn_resident<{t}, {v}, {cl}, {fused}>"
        plan = _bn_resident(dt, expr, n, csv, lanes, v * _ITEMSIZE[dt], x.nbytes, BN_RESIDENT_PARTIAL_FROM_FORWARD)
    if plan is not None:   # x read once (see ck_bn_resident)
        block, gx, gy, chunk, rows, smem = plan
        (pn, pm, pm2), (k, cs, ks) = _bn_partials(3, lanes, gy, c, csv, sv, acc)
        count = _barrier_counters(dt)
        _launch(expr, dt, (gx, gy, 1), block,
                (x, y, pn, pm, pm2, np.int64(n), np.int64(csv), np.int64(sv), np.int64(chunk), np.int64(rows), np.int64(k),
                 np.int64(cs), np.int64(ks), np.int64(c), _ptr(gamma), _ptr(beta), _ptr(running_mean),
                 _ptr(running_var), save_mean, save_invstd, scale, a(x, momentum), a(x, eps), _ptr(residual),
                 np.int32(bool(relu)), count), smem)
        return y, save_mean, save_invstd
    if staged is not None:
        _launch(staged_expr, dt, (c, 1, 1), (staged[0], 1, 1), small(v), staged[1])
        return y, save_mean, save_invstd
    block, gx, gy, chunk = _bn_blocks(csv, n, lanes)
    if training:
        (pn, pm, pm2), (k, cs, ks) = _bn_partials(3, lanes, gy, c, csv, sv, acc)
        if x.size:
            _launch(f"ck_bn_stats{'_cl' if lanes else ''}<{t}, {v}>", dt, (gx, gy, 1), block,
                    (x, pn, pm, pm2, np.int64(n), np.int64(csv), np.int64(chunk)))
        else:
            pn.fill(0)
    else:   # (the running statistics: no partials)
        pn = pm = pm2 = _null()
        k, cs, ks = 0, 1, 1
    _launch(f"ck_bn_finalize<{t}>", dt, *_finalize_launch(c, k),
            (pn, pm, pm2, np.int64(k), np.int64(cs), np.int64(ks), np.int64(c), _ptr(gamma), _ptr(running_mean),
             _ptr(running_var), save_mean, save_invstd, scale, np.int32(bool(training)), a(x, momentum), a(x, eps)))
    if x.size:
        _launch(f"ck_bn_apply<{t}, {v}, {cl}, {fused}>", dt, _apply_grid(gx, n, block[1]),
                block, (x, y, save_mean, scale, _ptr(beta), np.int64(n), np.int64(csv), np.int64(sv),
                        _ptr(residual), np.int32(bool(relu))))
    return y, save_mean, save_invstd


def batch_norm_backward(dy, x, gamma, save_mean, save_invstd, out=None, beta=None, relu: bool = False):
    """Gradients of batch_norm_forward in training mode.

    dy, x: (N, C, ...) of one dtype; gamma: (C,) or None; save_mean, save_invstd: (C,) from the
    forward. relu: the gradients of relu(batch_norm(x)) (the forward's relu without residual): dy
    counts only where the forward's pre-activation, recomputed from x, gamma, beta (the forward's,
    (C,) or None) and the statistics exactly as the forward computed it, was above 0. Returns (dx,
    dgamma, dbeta): dx like x; dgamma (C,) of x's dtype, None when gamma is None; dbeta (C,).
    Channel sums are reduced in a fixed order (bitwise reproducible on one device).
    """
    cp = _cupy.loaded_cupy()
    dt = dtype_name(x.dtype)
    t = ctype(dt)
    acc = _acc_dtype(x)
    n, c, s = _bn_layout(x)
    dx = cp.empty_like(x) if out is None else out
    dgamma = cp.empty(c, x.dtype) if gamma is not None else None
    dbeta = cp.empty(c, x.dtype)
    if c == 0:
        return dx, dgamma, dbeta
    r = "true" if relu else "false"
    mask = (_ptr(gamma), _ptr(beta), save_invstd)   # (read by the kernels' relu mask only)
    small = lambda v: (dy, x, dx, _ptr(gamma), save_mean, save_invstd, _ptr(dgamma), dbeta,
                       np.int64(n), np.int64(c), np.int64(s // v), _ptr(beta))
    if x.size and _bn_small(n, c, s):   # one launch: the channel sums, dgamma, dbeta and dx per channel block
        v = _bn_vec(s, dt, (dy, x, dx))
        _launch(f"ck_bn_bwd_small<{t}, {v}, {r}, false>", dt, (c, 1, 1), (BN_THREADS, 1, 1), small(v))
        return dx, dgamma, dbeta
    v, lanes, csv, sv = _bn_vectors(n, c, s, dt, (dy, x, dx))
    cl = "true" if lanes else "false"
    ka, kb, kd = (cp.empty(c, acc) for _ in range(3))
    staged_expr, staged = f"ck_bn_bwd_small<{t}, {v}, {r}, true>", None   # (a block a channel, dy and x staged)
    if x.size and s > 1 and _ITEMSIZE[dt] >= BN_STAGED_BWD_ITEMSIZE:
        staged = _bn_staged(dt, staged_expr, n, c, sv, v * _ITEMSIZE[dt], 2)
    plan = None
    if x.size and v * _ITEMSIZE[dt] >= BN_TILE_MIN_BYTES and (staged is None or not BN_STAGED_FIRST):
        expr = f"ck_bn_bwd_resident<{t}, {v}, {cl}, {r}>"
        plan = _bn_resident(dt, expr, n, csv, lanes, 2 * v * _ITEMSIZE[dt], x.nbytes,   # (dy's tile and x's)
                            BN_RESIDENT_PARTIAL_FROM)
    if plan is not None:   # dy and x read once (see ck_bn_bwd_resident)
        block, gx, gy, chunk, rows, smem = plan
        (psg, psgx), (k, cs, ks) = _bn_partials(2, lanes, gy, c, csv, sv, acc)
        count = _barrier_counters(dt)
        _launch(expr, dt, (gx, gy, 1), block,
                (dy, x, dx, save_mean, psg, psgx, np.int64(n), np.int64(csv), np.int64(sv), np.int64(chunk), np.int64(rows),
                 np.int64(k), np.int64(cs), np.int64(ks), np.int64(c)) + mask + (_ptr(dgamma), dbeta, ka, kb, kd,
                                                                                  _acc_scalar(x, n * s), count), smem)
        return dx, dgamma, dbeta
    if staged is not None:
        _launch(staged_expr, dt, (c, 1, 1), (staged[0], 1, 1), small(v), staged[1])
        return dx, dgamma, dbeta
    block, gx, gy, chunk = _bn_blocks(csv, n, lanes)
    (psg, psgx), (k, cs, ks) = _bn_partials(2, lanes, gy, c, csv, sv, acc)   # (as the forward's)
    if not x.size:   # (the reductions write every partial: no memset launches on the common path)
        psg.fill(0)
        psgx.fill(0)
    else:
        if lanes:
            _launch(f"ck_bn_bwd_reduce_cl<{t}, {v}, {r}>", dt, (gx, gy, 1), block,
                    (dy, x, save_mean, psg, psgx, np.int64(n), np.int64(csv), np.int64(chunk)) + mask)
        else:
            _launch(f"ck_bn_bwd_reduce<{t}, {v}, {r}>", dt, (gx, gy, 1), block,
                    (dy, x, save_mean, psg, psgx, np.int64(n), np.int64(csv), np.int64(sv), np.int64(chunk)) + mask)
    _launch(f"ck_bn_bwd_finalize<{t}>", dt, *_finalize_launch(c, k),
            (psg, psgx, np.int64(k), np.int64(cs), np.int64(ks), np.int64(c), _ptr(gamma), save_invstd, _ptr(dgamma),
             dbeta, ka, kb, kd, _acc_scalar(x, max(n * s, 1))))
    if x.size:
        _launch(f"ck_bn_bwd_apply<{t}, {v}, {cl}, {r}>", dt, _apply_grid(gx, n, block[1]),
                block, (dy, x, dx, save_mean, ka, kb, kd, np.int64(n), np.int64(csv), np.int64(sv)) + mask)
    return dx, dgamma, dbeta


# ------------------------------------------------------------------------------------------
# the host-time path of the common forward call (ops.layernorm/rmsnorm and the Backend methods)

_fast: dict = {}   # (kind, shape, dtype, device, 16-byte aligned) -> launch plan, or None: not this path
_INF = float("inf")
_EPS_MIN = float(np.finfo(np.float32).smallest_subnormal)   # (backends/normalization_api.py EPS_MIN_F32)


def _plan_fast(kind: str, shape: tuple, dtype, dev: int, aligned: bool):
    """(expr, function pointer, grid, block, codes, tail, statistics dtype, rows) of the launch
    _norm_forward makes for a C-contiguous x of this shape normalised over its last axis; None for
    an empty x or a dtype the kernels lack."""
    dt = dtype_name(dtype)
    cols = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    if dt not in FLOAT_DTYPE_NAMES or cols == 0 or rows == 0:
        return None
    vw = vec_width(dt)
    v = vw if aligned and cols % vw == 0 else 1
    expr, grid, block, reg = _fwd_launch(kind, rows, cols, dt, v)
    arrays = "QQQQQQ" if kind == "ln" else "QQQQ"   # x, weight, [bias,] y, [mean,] rstd
    acc = np.float64 if dt == "float64" else np.float32
    codes = (arrays + ("Qi" if reg else "i") + ("d" if acc is np.float64 else "f")).encode()
    tail = (rows, cols) if reg else (cols,)
    return expr, _kernel(dev, dt, expr)[1].ptr, grid, block, codes, tail, acc, rows


def forward_fast(kind: str, x, weight, bias, eps, stats: bool = False):
    """layernorm (kind "ln") or rmsnorm ("rms", bias None) of x over its last axis through a launch
    planned once per (shape, dtype, device, alignment): y, or with stats (y, mean, rstd) / (y, rstd),
    the statistics shaped x.shape[:-1]. None where this path does not apply and the caller takes the
    checked one: x not a C-contiguous CuPy array on the current device, a parameter not None or a
    contiguous (cols,) array like x, eps not a positive finite float, an empty x, or
    _planned.ready() declines."""
    env = _planned.ready()
    if env is None:
        return None
    _, ndarray, get_device, _ = env
    if type(x) is not ndarray or type(eps) is not float or not _EPS_MIN <= eps < _INF or not x._c_contiguous:
        return None   # (an eps float32 rounds to 0: the checked path refuses it for 16- and 32-bit data)
    shape, dtype = x.shape, x.dtype
    dev = get_device()
    if not shape or x.data.device_id != dev:
        return None
    cols = shape[-1]
    al = x.data.ptr
    for p in (weight, bias):
        if p is not None:
            if (type(p) is not ndarray or p.shape != (cols,) or p.dtype != dtype or not p._c_contiguous
                    or p.data.device_id != dev):
                return None
            al |= p.data.ptr
    y, p = _planned.output_and_plan(_fast, (kind, shape, dtype, dev), ndarray, shape, dtype, al,
                                    lambda aligned: _plan_fast(kind, shape, dtype, dev, aligned))
    if p is None:
        return None
    expr, fptr, grid, block, codes, tail, acc, rows = p
    wp = 0 if weight is None else weight.data.ptr
    if stats:
        lead = shape[:-1]
        rstd = ndarray(lead, acc)
        mean = ndarray(lead, acc) if kind == "ln" else None
        sp = rstd.data.ptr
        mp = mean.data.ptr if mean is not None else 0
    else:   # the statistics are written but not returned: one buffer for both
        st = ndarray((2 * rows,) if kind == "ln" else (rows,), acc)
        mp = st.data.ptr
        sp = mp + rows * st.itemsize if kind == "ln" else mp
    if kind == "ln":
        ptrs = (x.data.ptr, wp, 0 if bias is None else bias.data.ptr, y.data.ptr, mp, sp)
    else:
        ptrs = (x.data.ptr, wp, y.data.ptr, sp)
    _planned.run(env, expr, fptr, grid, block, 0, codes, *ptrs, *tail, eps)
    if not stats:
        return y
    return (y, mean, rstd) if kind == "ln" else (y, rstd)
