"""Implicit-GEMM conv2d on the GPU (float16, bfloat16: tensor cores; float32: the products
cudakit.float32_precision() names, three TF32 tensor-core products by default - config.py): the
Triton kernel of kernels/_conv_triton.py
compiled and launched by cudakit's Triton runtime on the current CuPy stream. The input gradient is
the same kernel run on grad_out (zero-interleaved by the strides) with the weight flipped and its
channel axes swapped. Grouped convolutions with few channels a group (depthwise: one; `direct`
decides) take direct float32-FMA kernels instead, forward, input and weight gradients. Shapes the
kernels do not take (float64, or per-image planes of 2^31 elements or more) go through
backends/conv_api.py's im2col + cuBLAS path; `usable` decides.
"""
from __future__ import annotations

import functools
import math

from .. import config
from ._common import dtype_name   # also conv.dtype_name for the CUDA backend
from ..runtime import _cupy

DTYPES = ("float16", "bfloat16", "float32")
_MAX_GRID_Z = 65535
_TARGET_PROGRAMS = 264   # two per SM of an H100: the weight gradient's splits fill the GPU


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """True when Triton imports (the `triton` extra); asked once per process."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True




def usable(dtype_name: str, x_shape, k: int, geo, groups: int = 1) -> bool:
    """True when conv2d runs here: float16, bfloat16 or float32, every per-image plane and each
    group's weight under 2^31 elements (int32 offsets), at most 65535 groups unless the direct
    kernels take them (one implicit-GEMM launch holds whole groups of images), Triton installed.
    Otherwise the im2col + cuBLAS path runs, logged once (cudakit.fallbacks) with why_not()'s reason."""
    why = why_not(dtype_name, x_shape, k, geo, groups)
    if why is not None:
        from .. import fallbacks
        r, s = geo[6:8]
        fallbacks.note(f"conv2d:{why.split(':')[0]}", f"conv2d runs as im2col + cuBLAS, which needs R*S = {r * s} "
                                                     f"times the input's memory: {why}")
    return why is None


def why_not(dtype_name: str, x_shape, k: int, geo, groups: int = 1, triton_ok=None) -> str | None:
    """Why conv2d's own kernels do not take this call (None when they do); see usable().
    triton_ok: whether Triton is available (default: available())."""
    n, c, h, w = x_shape
    r, s, ho, wo = geo[6:]
    if dtype_name not in DTYPES:
        return f"dtype: {dtype_name} (the kernels take {', '.join(DTYPES)})"
    if not (c * h * w < 2**31 and k * ho * wo < 2**31 and r * s * (c // groups) * (k // groups) < 2**31):
        return "size: a per-image plane or a group's weight has 2^31 elements or more (int32 offsets)"
    if not (groups <= _MAX_GRID_Z or direct(x_shape, (k,), groups, geo)):
        return f"groups: {groups} groups, over the {_MAX_GRID_Z} one launch holds"
    if not (available() if triton_ok is None else triton_ok):
        return "triton: Triton is not installed (pip install 'cudakit[triton]')"
    return None


def precision(dtype_name: str) -> str:
    """The kernels' input_precision: float32 follows cudakit.float32_precision(); 16-bit inputs
    take the tensor cores whatever it says."""
    return config.float32_precision() if dtype_name == "float32" else "tf32"


def _channel_block(c: int, cap: int) -> int:
    """The power of two >= c (at least 16, at most cap) a tile spans along a channel axis."""
    return min(cap, max(16, 1 << (c - 1).bit_length()))


def _config(c: int, k: int, dtype_name: str = "bfloat16") -> dict:
    """16-bit: 128 output positions x up to 128 channels (K's power of two, at least 16), reduction
    steps of up to 64 input channels, 4 warps, 3 stages. float32 (twice the bytes): 128 x up to 64
    tiles, steps of up to 32 channels on 8 warps (wider tiles spill compiling for sm_90). K and C are
    per group: a depthwise convolution takes 128 x 16 tiles of 16-channel steps."""
    if dtype_name == "float32":
        return {"BLOCK_M": 128, "BLOCK_N": _channel_block(k, 64), "BLOCK_K": _channel_block(c, 32), "num_warps": 8,
                "num_stages": 3}
    return {"BLOCK_M": 128, "BLOCK_N": _channel_block(k, 128), "BLOCK_K": _channel_block(c, 64),
            "num_warps": 4, "num_stages": 3}


def _window_consts(geo) -> dict:
    """Strides, paddings, dilations and window of geo as every conv kernel's constexprs."""
    sh, sw, ph, pw, dh, dw, r, s = geo[:8]
    return dict(SH=sh, SW=sw, PH=ph, PW=pw, DH=dh, DW=dw, R=r, S=s)


def _geo_consts(x_shape, geo, upsample: tuple = (1, 1)) -> dict:
    """The geometry constexprs conv2d_fwd and conv2d_wgrad share; AFFINE when an output position
    reads x at itself plus a per-tap constant (strides 1, no upsampling, Q == W)."""
    return dict(_window_consts(geo),
                AFFINE=geo[0] == 1 and geo[1] == 1 and geo[9] == x_shape[3] and upsample == (1, 1))


@functools.lru_cache(maxsize=None)
def _base(name: str):
    from ..runtime.triton import TritonKernel, _triton
    _triton()   # BackendUnavailableError naming the extra when Triton is missing
    from . import _conv_triton as src
    return TritonKernel(getattr(src, name))


@functools.lru_cache(maxsize=512)
def _k(name: str, **consts):
    """Kernel `name` of _conv_triton.py with its constexprs and options bound (TritonKernel.specialized),
    so that it launches from the native plans; made on first use per (name, constants)."""
    return _base(name).specialized(**consts)


def plan(x_shape, k: int, geo, has_bias: bool, dtype_name: str = "bfloat16",
         upsample: tuple = (1, 1), prec: str | None = None, w_kcrs: bool = False,
         relu: bool = False) -> tuple[int, int, dict]:
    """(programs over the positions of an image, programs over the K channels, the kernel's
    constexprs and options) for x of x_shape (N, C, H, W) and K output channels; upsample: x read
    zero-interleaved (the input gradient of a strided convolution); prec: the products
    (precision(dtype_name) when None); w_kcrs: the weight read in its own (G K, C, R, S) layout;
    relu: max(y, 0) in the kernel's store (conv2d's activation="relu")."""
    cfg = _config(x_shape[1], k, dtype_name)
    consts = dict(cfg, **_geo_consts(x_shape, geo, upsample), HAS_BIAS=has_bias, UH=upsample[0], UW=upsample[1],
                  PREC=prec or precision(dtype_name))
    if w_kcrs:
        consts["W_KCRS"] = True
    if relu:
        consts["RELU"] = True
    return math.ceil(geo[8] * geo[9] / cfg["BLOCK_M"]), math.ceil(k / cfg["BLOCK_N"]), consts


_LAYOUT_BLOCK = 1024


def _weight(w, input_grad: bool, groups: int = 1):
    """w (G K, C, R, S) as conv2d_fwd reads it: [G, R, S, C, K], or flipped [G, R, S, K, C]
    (input_grad); K, C per group."""
    cp = _cupy.cupy()
    gk, c, r, s = w.shape
    k = gk // groups
    out = cp.empty((groups, r, s, k, c) if input_grad else (groups, r, s, c, k), w.dtype)
    if w.size == 0:   # no filter (K = 0): nothing to reorder, and a grid must not be empty
        return out
    _k("conv2d_weight_layout", INPUT_GRAD=input_grad, BLOCK=_LAYOUT_BLOCK)[
        (math.ceil(w.size / _LAYOUT_BLOCK),)](w, out, k, c, r * s, groups)
    return out


def _run(x, w_grsck, bias, geo, upsample=(1, 1), groups: int = 1, w_kcrs: bool = False, relu: bool = False):
    """y (N, G K, P, Q) of x (N, G C, H, W) with the weight as [G, R, S, C, K] (contiguous), or as
    the caller's (G K, C, R, S) with w_kcrs: x read as N G images of C channels, image z with group
    z % G's weight."""
    cp = _cupy.cupy()
    n, gc, h, wd = x.shape
    c, k = gc // groups, (w_grsck.shape[0] // groups if w_kcrs else w_grsck.shape[-1])
    xz = x.reshape(n * groups, c, h, wd)   # a view: x is C-contiguous
    y = cp.empty((n * groups, k, geo[8], geo[9]), x.dtype)
    if y.size == 0:
        return y.reshape(n, groups * k, geo[8], geo[9])
    name = dtype_name(x.dtype)
    kern, grid_m, grid_n = _fwd_launch(xz.shape, k, geo, bias is not None, name, upsample, precision(name), w_kcrs,
                                       relu)
    b = bias if bias is not None else w_grsck   # any pointer: not read without HAS_BIAS
    images = n * groups
    step = (_MAX_GRID_Z // groups) * groups   # images along grid z, whole groups of them per launch
    for i0 in range(0, images, step):
        i1 = min(images, i0 + step)
        kern[(grid_m, grid_n, i1 - i0)](xz[i0:i1] if images > step else xz, w_grsck, b,
                                        y[i0:i1] if images > step else y, c, h, wd, k, geo[8], geo[9], groups)
    return y.reshape(n, groups * k, geo[8], geo[9])


@functools.lru_cache(maxsize=256)
def _fwd_launch(x_shape, k: int, geo, has_bias: bool, dtype_name: str, upsample: tuple, prec: str,
                w_kcrs: bool = False, relu: bool = False):
    """(kernel, programs over positions, programs over channels) of conv2d_fwd, per call shape and
    precision: the plan is built once (host time per call is on the order of the kernel's at these
    sizes)."""
    grid_m, grid_n, consts = plan(x_shape, k, geo, has_bias, dtype_name, upsample, prec, w_kcrs, relu)
    return _k("conv2d_fwd", **consts), grid_m, grid_n


def flipped(geo, x_shape) -> tuple:
    """The geometry of dx as a convolution of grad_out read with the forward's strides as upsampling
    (`plan(upsample=geo[:2])`): stride 1, padding d * (window - 1) - p (negative when p is larger:
    the kernel takes it), the input's (H, W) out."""
    ph, pw, dh, dw, r, s = geo[2:8]
    return (1, 1, dh * (r - 1) - ph, dw * (s - 1) - pw, dh, dw, r, s, x_shape[2], x_shape[3])


def wgrad_plan(x_shape, k: int, geo, programs: int = _TARGET_PROGRAMS,
               dtype_name: str = "bfloat16", prec: str | None = None, groups: int = 1) -> tuple[tuple, int, dict]:
    """(grid, STEPS, constexprs and options) of conv2d_wgrad: up to 64 x 64 (K x C) tiles (the
    channels' powers of two, at least 16), 128 positions a step (64 for float32), the positions split
    so that about `programs` programs run. x_shape's channels and k: per group."""
    r, s, ho, wo = geo[6:]
    n, c = x_shape[:2]
    prec = prec or precision(dtype_name)
    bk, bc, bm, warps, stages = _channel_block(k, 64), _channel_block(c, 64), 128, 8, 3
    if dtype_name == "float32":
        bm = 64
        if prec != "ieee":   # tensor-core products: timed on an H100 (2026-11-25, GPU-f25e6ffe)
            if k >= 128:     # 128 x 64 (K x C) tiles: 2.2x (tf32x3) and 1.3x (tf32) the 64 x 64 speed
                bk = 128
            else:            # 16 (tf32x3) / 32 (tf32) positions a step on 4 warps: 1.5x / 1.2x
                bm, warps, stages = (16, 4, 4) if prec == "tf32x3" else (32, 4, 3)
    tiles = groups * math.ceil(k / bk) * math.ceil(c / bc)
    blocks = n * math.ceil(ho * wo / bm)
    split = max(1, min(blocks, programs // max(1, tiles * r * s)))
    steps = math.ceil(blocks / split)
    split = math.ceil(blocks / steps)
    consts = dict(_geo_consts(x_shape, geo), BLOCK_K=bk, BLOCK_C=bc, BLOCK_M=bm, PREC=prec,
                  num_warps=warps, num_stages=stages)
    return (tiles, r * s, split), steps, consts


@functools.lru_cache(maxsize=256)
def _wgrad_launch(x_shape, k: int, geo, dtype_name: str, prec: str, groups: int):
    grid, steps, consts = wgrad_plan(x_shape, k, geo, _TARGET_PROGRAMS, dtype_name, prec, groups)
    return _k("conv2d_wgrad", **consts), grid, steps


_FINISH_BLOCK = 512
_BIAS_BLOCK = 1024
_BIAS_SPLIT = 8          # groups of images the bias gradient's partial sums run over


def conv2d_weight_grad(grad_out, x, w_shape, geo, bias: bool, groups: int = 1):
    """(dL/dw (w_shape: (G K, C, R, S)), dL/db (G K,) or None without bias) in x's dtype of conv2d,
    for C-contiguous grad_out (N, G K, P, Q) and x (N, G C, H, W): float32 partial sums per split (and
    per group of images for the bias), summed and rounded once by conv2d_wgrad_finish."""
    cp = _cupy.cupy()
    k, c, r, s = w_shape
    n, _, h, wd = x.shape
    gw = cp.empty(w_shape, x.dtype)
    gb = cp.empty((k,), x.dtype) if bias else None
    if n * geo[8] * geo[9] * k * c == 0:   # no position or channel: nothing to sum
        gw.fill(0)
        if bias:
            gb.fill(0)
        return gw, gb
    if direct(x.shape, w_shape, groups, geo):
        kern, grid, steps = _dw_wgrad_launch(n, x.shape[1], c, k // groups, geo)
        part = cp.empty((grid[1], k * c * r * s), cp.float32)
        kern[grid](x, grad_out, part, n, x.shape[1], k, h, wd, geo[8], geo[9], steps)
    else:
        name = dtype_name(x.dtype)
        kern, grid, steps = _wgrad_launch((n, c, h, wd), k // groups, geo, name, precision(name), groups)
        part = cp.empty((grid[2], k * c * r * s), cp.float32)
        kern[grid](x, grad_out, part, n, c, h, wd, k // groups, geo[8], geo[9], steps, groups)
    part_b = part
    if bias:   # per (channel, group of images) partial sums of dL/dy
        images = math.ceil(n / min(n, _BIAS_SPLIT))
        part_b = cp.empty((math.ceil(n / images), k), cp.float32)
        _k("conv2d_bias_grad", BLOCK=_BIAS_BLOCK)[(k, part_b.shape[0])](
            grad_out, part_b, n, k, geo[8] * geo[9], images)
    _k("conv2d_wgrad_finish", HAS_BIAS=bias, BLOCK=_FINISH_BLOCK)[(math.ceil(gw.size / _FINISH_BLOCK),)](
        part, part_b, gw, gb if bias else gw, part.shape[0], part_b.shape[0], gw.size, k)
    return gw, gb


# ---- few channels a group (depthwise: one): direct kernels, float32 FMAs -------------------------
# A program's tile: BLOCK_Z (image, group) pairs x BLOCK_Q columns (a power of two of the row, up
# to _DW_MAX_COLS; BLOCK_Z BLOCK_Q = the elements of a row step) x BLOCK_P output rows, whose input
# rows are loaded once each. More taps or output channels: fewer rows (the unrolled rows and
# accumulators live in registers). The dw_ names date from the depthwise case, the first they took.
_DW_MAX_TAPS = 49        # depthwise windows up to 7x7 (the kernels unroll their taps)
_DIRECT_MAX_CHANNELS = 8  # other groups: up to 8 input and 8 output channels, windows up to 3x3
_DIRECT_MAX_TAPS = 9
_DW_MAX_COLS = 256
_DW_WARPS = 4
_DW_FWD_ACC_REGS = 32    # forward: at most BLOCK_P CO BLOCK_Z BLOCK_Q / (32 warps) accumulators a thread
# (taps up to, elements of a row step, output rows) for the forward and for the weight gradient
_DW_FWD_TILES = ((9, 256, 8), (25, 256, 4), (49, 128, 4))
_DW_WG_TILES = ((9, 256, 8), (25, 128, 4), (49, 128, 2))
_DW_WG_WARPS = 4
_DW_WG_ACC_REGS = 36     # weight gradient: at most KB taps BLOCK_Z BLOCK_Q / (32 warps) accumulators a thread
_DW_WG_FILTERS = 4       # weight gradient: filters a program (KB) at most
_DW_WG_PROGRAMS = 4 * _TARGET_PROGRAMS   # weight gradient: programs to aim for (splits x filter rows)


def direct(x_shape, w_shape, groups: int, geo) -> bool:
    """True for a grouped convolution the direct kernels take: depthwise (one input and one output
    channel a group) with up to 7 x 7 taps, or up to _DIRECT_MAX_CHANNELS input and output channels
    a group with up to 3 x 3 taps (the implicit-GEMM tiles span at least 16 channels); the (image,
    group) pairs and the whole weight counted in int32, the row and column blocks within grid y
    and z (65535)."""
    n, c, h, wd = x_shape
    if groups <= 1:
        return False
    ci, co, taps = c // groups, w_shape[0] // groups, geo[6] * geo[7]
    small = (taps <= _DW_MAX_TAPS if ci == co == 1 else
             max(ci, co) <= _DIRECT_MAX_CHANNELS and taps <= _DIRECT_MAX_TAPS)
    return (small and n * groups < 2**31 and w_shape[0] * ci * taps < 2**31   # int32 weight offsets
            and max(h, geo[8]) <= 65535 and max(wd, geo[9]) <= 65535 * 128)


def _pow2_floor(v: int) -> int:
    return 1 << max(0, v.bit_length() - 1)


def dw_tile(geo, wgrad: bool = False, co: int = 1) -> tuple[int, int, int]:
    """(BLOCK_Z, BLOCK_P, BLOCK_Q) of a direct kernel (the forward's or the weight gradient's) for
    output rows of geo[9] columns; co: output channels a group (the forward's accumulators: BLOCK_P
    CO), or filters a program (the weight gradient's KB: KB taps accumulators, a row step's
    elements then fewer)."""
    taps = geo[6] * geo[7]
    elems, rows = next((e, r) for t, e, r in (_DW_WG_TILES if wgrad else _DW_FWD_TILES) if taps <= t)
    if wgrad:   # fewer elements a row step, down to one a thread
        elems = min(elems, max(32 * _DW_WG_WARPS, _pow2_floor(_DW_WG_ACC_REGS * 32 * _DW_WG_WARPS // (co * taps))))
    else:       # fewer elements a row step, down to one a thread, then fewer rows
        elems = min(elems, max(32 * _DW_WARPS, _pow2_floor(_DW_FWD_ACC_REGS * 32 * _DW_WARPS // (co * rows))))
        rows = max(1, min(rows, _DW_FWD_ACC_REGS * 32 * _DW_WARPS // (co * elems)))
    bq = min(_DW_MAX_COLS, 1 << max(0, geo[9] - 1).bit_length(), elems)
    return max(1, elems // bq), rows, bq


def _dw_consts(geo, upsample=(1, 1), flip: bool = False, has_bias: bool = False, ci: int = 1, co: int = 1,
               relu: bool = False) -> dict:
    bz, bp, bq = dw_tile(geo, co=co)
    return dict(_window_consts(geo), CI=ci, CO=co, UH=upsample[0], UW=upsample[1], FLIP=flip, HAS_BIAS=has_bias,
                BLOCK_Z=bz, BLOCK_P=bp, BLOCK_Q=bq, num_warps=_DW_WARPS, **({"RELU": True} if relu else {}))


@functools.lru_cache(maxsize=256)
def _dw_kernel(geo, upsample: tuple, flip: bool, has_bias: bool, ci: int = 1, co: int = 1, relu: bool = False):
    """(conv2d_direct_fwd with its constexprs bound, its tile) per geometry and channels a group
    (made once: host time per call matters at these sizes)."""
    consts = _dw_consts(geo, upsample, flip, has_bias, ci, co, relu)
    return _k("conv2d_direct_fwd", **consts), (consts["BLOCK_Z"], consts["BLOCK_P"], consts["BLOCK_Q"])


def _dw_run(x, w, bias, geo, groups: int, co: int, flip: bool = False, upsample=(1, 1), relu: bool = False):
    """y (N, groups co, P, Q) of the grouped convolution of x (N, groups ci, H, W) with w (groups co,
    ci, R, S) by conv2d_direct_fwd; flip, upsample: the input gradient, as _run (w is then the
    forward's weight, (groups ci, co, R, S))."""
    cp = _cupy.cupy()
    n, c, h, wd = x.shape
    y = cp.empty((n, groups * co, geo[8], geo[9]), x.dtype)
    if y.size == 0:
        return y
    kern, (bz, bp, bq) = _dw_kernel(geo, upsample, flip, bias is not None, c // groups, co, relu)
    kern[(math.ceil(n * groups / bz), math.ceil(geo[8] / bp), math.ceil(geo[9] / bq))](
        x, w, w if bias is None else bias, y, n * groups, groups, h, wd, geo[8], geo[9])
    return y


def dw_filters(co: int) -> int:
    """Filters a program of conv2d_direct_wgrad (KB): the largest divisor of co up to _DW_WG_FILTERS."""
    return max(d for d in range(1, min(co, _DW_WG_FILTERS) + 1) if co % d == 0)


def dw_wgrad_split(n: int, channels: int, geo, co: int = 1) -> tuple[int, int]:
    """(splits, STEPS) of conv2d_direct_wgrad: the tiles of each of its channels x co / KB
    (input channel, block of KB filters) programs split so that about _DW_WG_PROGRAMS programs run."""
    kb = dw_filters(co)
    bz, bp, bq = dw_tile(geo, True, kb)
    tiles = math.ceil(n / bz) * math.ceil(geo[8] / bp) * math.ceil(geo[9] / bq)
    split = max(1, min(tiles, math.ceil(_DW_WG_PROGRAMS / (channels * co // kb))))
    steps = math.ceil(tiles / split)
    return math.ceil(tiles / steps), steps


@functools.lru_cache(maxsize=256)
def _dw_wgrad_launch(n: int, c: int, ci: int, co: int, geo):
    """(conv2d_direct_wgrad bound, grid (C co / KB, splits), STEPS) per call shape (host time per
    call matters); c: x's channels."""
    split, steps = dw_wgrad_split(n, c, geo, co)
    return _k("conv2d_direct_wgrad", **dw_wgrad_consts(geo, ci, co)), (c * co // dw_filters(co), split), steps


def dw_wgrad_consts(geo, ci: int = 1, co: int = 1) -> dict:
    kb = dw_filters(co)
    bz, bp, bq = dw_tile(geo, True, kb)
    return dict(_window_consts(geo), CI=ci, CO=co, KB=kb, BLOCK_Z=bz, BLOCK_P=bp, BLOCK_Q=bq, num_warps=_DW_WG_WARPS)


# Weights of up to this many elements are read by conv2d_fwd in their own (K, C, R, S) layout
# (gathered loads, from L2 at this size) instead of being reordered by a launch of their own: one
# launch, not two, for the small convolutions whose time is launches and latency.
W_IN_PLACE = 16384


def conv2d(x, w, bias, geo, groups: int = 1, relu: bool = False):
    """conv_api's conv2d for C-contiguous x (N, C, H, W), w (K, C / groups, R, S), bias (K,) or None;
    relu: max(y, 0) fused into the kernels' store (activation="relu")."""
    if direct(x.shape, w.shape, groups, geo):
        return _dw_run(x, w, bias, geo, groups, w.shape[0] // groups, relu=relu)
    if w.size <= W_IN_PLACE:
        return _run(x, w, bias, geo, groups=groups, w_kcrs=True, relu=relu)
    return _run(x, _weight(w, False, groups), bias, geo, groups=groups, relu=relu)


def conv2d_input_grad(grad_out, w, x_shape, geo, groups: int = 1):
    """dL/dx (x_shape) of conv2d for C-contiguous grad_out (N, K, P, Q): the convolution of grad_out,
    zero-interleaved by the strides, with w flipped in (R, S) and its channel axes swapped per group
    (flipped() gives the geometry)."""
    if direct(x_shape, w.shape, groups, geo):
        return _dw_run(grad_out, w, None, flipped(geo, x_shape), groups, x_shape[1] // groups, True, (geo[0], geo[1]))
    return _run(grad_out, _weight(w, True, groups), None, flipped(geo, x_shape), upsample=(geo[0], geo[1]),
                groups=groups)
