"""2-D max and average pooling, forward and backward, on C-contiguous (N, C, H, W) arrays and on
channels-last ones ((N, C, H, W) views of (N, H, W, C) memory, PyTorch's channels_last), with the
semantics of backends/conv_api.py: padding of -inf (max) or zeros (average, counted in the divisor,
PyTorch's count_include_pad=True); a window holding a NaN gives NaN; the backward of max pooling
sends each window's gradient to its first NaN, else its first largest element, else (a window of
-inf) its first in-bounds element.

NCHW: one thread per output (forward) or per input element (backward) of P planes (PLANES), their
loads of a tap issued together (with one plane a thread, the forward's blocks did too little to cover
launch and DRAM latency: 25% of copy bandwidth on an H100). Channels-last: one thread per position and V
adjacent channels, one load of up to 16 bytes a tap, adjacent threads adjacent channels; the output
comes back channels-last (no copy into NCHW and back).
Backward, no atomics (deterministic), the max winner recomputed from x: windows that do not overlap
(stride >= window) take one thread each, which writes its stride cell of dx; otherwise each input
element sums the gradients of the windows that cover it, for max pooling from a byte a window
naming its winner, written by a first launch (backward_kernel), or, NCHW with many windows an
element, in one launch of tiles of 4 planes that stages x and grad_out in shared memory
(ck_pool2d_backward_tile). Arithmetic in ck_traits<T>::acc (float32
for 16-bit data), rounded once.
Traffic: forward N C H W read + N C Ho Wo written; backward N C Ho Wo (+ N C H W for max) read,
N C H W written.
"""
from __future__ import annotations

import math

import numpy as np

from ..backends.conv_api import _channels_last
from ..errors import ShapeError
from . import transpose
from ._common import _ITEMSIZE, FLOAT_DTYPE_NAMES, KernelFamily, ctype, cuda_source, dtype_name, vec_width

SOURCE_FILES = ("_pdl.cuh", "_preamble.cuh", "pooling.cu")
SOURCE = cuda_source(*SOURCE_FILES)

THREADS = 256
# planes a thread of each NCHW kernel takes (its template argument P): their loads of a tap go out
# together. With one plane a thread the forward's block of 256 threads did so little that launch
# and DRAM latency, not bandwidth, set its time; the backward's one-window-a-thread cells write
# 2 x 2 elements a plane already.
# (name_expressions lists these forms alone: a sweep's other plane counts compile on first use)
PLANES = {"ck_pool2d": 4, "ck_pool2d_backward": 4, "ck_pool2d_backward_cells": 1, "ck_pool2d_argmax": 4,
          "ck_pool2d_backward_idx": 4}
MAX_IDX_TAPS = 256   # the two-pass max backward keeps a window's winner in a byte
# NCHW max backward of overlapping windows of 16-bit data that the tiles do not take (TILED_FROM_WINDOWS)
# through the channels-last kernels (x and grad_out permuted to (N, H, W, C), dx back) from this many
# channels on; None: the NCHW kernels
# always. The NCHW kernels are instruction-bound there (ncu on an H200: SM 69-79%, DRAM 3-4%: one
# plane's loads of a tap are one element each), the channels-last ones move up to 8 channels a
# load. H200, 2026-11-29 (history/pooling/nvidia-h200-pooling-passes.json): bfloat16 0.189 against
# 0.213 ms (3 x 3 / 2, C 64), 0.110 against 0.144 (3 x 3 / 1, C 256), a tie at C 12, 0.039 against
# 0.037 at C 8; float32 pays more for the permutes than it saves (0.320 against 0.192 ms).
VIA_CHANNELS_LAST_FROM = 16
# ... and from this many elements of x: below, the backward takes microseconds of GPU time either way
# and the three permutes' launches would cost more host time than they save (not measured).
VIA_CHANNELS_LAST_MIN_ELEMENTS = 1 << 20
# NCHW max backward of overlapping windows in one launch of tiles (ck_pool2d_backward_tile) where an
# element is in TILED_FROM_WINDOWS windows or more on average (R S / (sh sw)) and a tile's shared
# memory fits TILE_SMEM_BYTES; False: the two passes (the sweep's A/B switch). H200, 2026-11-29
# (history/pooling/nvidia-h200-pooling-tiled.json): tiles 1.2-1.6x torch where the two passes ran
# 0.70-1.01x at 9 and 25 windows an element (3 x 3 / 1, 5 x 5 / 1); at 2.25 (ResNet's 3 x 3 / 2) the
# two passes stay faster (float32 32x64x112x112: 0.2016 ms in that file, the tiles 0.2121 ms in a run
# of 09:38 UTC). 4 lies between, unmeasured.
TILED = True
TILED_FROM_WINDOWS = 4
TILE_SMEM_BYTES = 48 * 1024   # the default dynamic limit: no opt-in needed
TILE_PLANES = 4               # planes a block takes (their values at a place one shared-memory load)
TILE_ELEMENTS = 512           # input elements of a plane a tile aims at (TILE_PLANES x 2 a thread)
TILE_WIDTH = 64               # widest tile row: wider planes are cut into columns of tiles
_NCHW = ("ck_pool2d", "ck_pool2d_backward", "ck_pool2d_backward_cells")
_CL = ("ck_pool2d_cl", "ck_pool2d_cl_backward", "ck_pool2d_cl_backward_cells")
_MAX_THREADS = 2**31 - THREADS   # the kernels index their flat grid (rounded up to whole blocks) in 32 bits


def widths(dtype_name: str) -> tuple:
    """The channel widths V of the channels-last kernels for a dtype: 1, 2, 4, 8 up to 16 bytes."""
    return tuple(v for v in (1, 2, 4, 8) if v <= vec_width(dtype_name))


def name_expressions() -> list[str]:
    """Every template instantiation this module launches."""
    avgs = ("true", "false")
    dts = FLOAT_DTYPE_NAMES
    return ([f"{k}<{ctype(dt)}, {a}, {PLANES[k]}>" for k in _NCHW for dt in dts for a in avgs]
            + [f"{k}<{ctype(dt)}, {PLANES[k]}>" for k in ("ck_pool2d_argmax", "ck_pool2d_backward_idx") for dt in dts]
            + [f"ck_pool2d_backward_tile<{ctype(dt)}, {TILE_PLANES}>" for dt in dts]
            + [f"{k}<{ctype(dt)}, {a}, {v}>" for k in _CL for dt in dts for a in avgs for v in widths(dt)]
            + [f"{k}<{ctype(dt)}, {v}>" for k in ("ck_pool2d_cl_argmax", "ck_pool2d_cl_backward_idx") for dt in dts
               for v in widths(dt)])


def _by_kernel_and_dtype(expr: str) -> str:
    """A KernelFamily group: one kernel template of one dtype (its AVG and width forms, at most 8)."""
    return expr.split(",", 1)[0]


_family = KernelFamily(SOURCE, name_expressions, "cudakit/pooling.cu", group=_by_kernel_and_dtype)


def _geo(x_shape, geo) -> tuple:
    """The kernels' ten int32 geometry arguments (CK_POOL_GEO_ARGS) from conv_api's pooling geometry."""
    sh, sw, ph, pw, _, _, r, s, ho, wo = geo
    return tuple(np.int32(v) for v in (x_shape[2], x_shape[3], ho, wo, r, s, sh, sw, ph, pw))


channels_last = _channels_last   # a is a 4-D (N, C, H, W) view of (N, H, W, C) C-contiguous memory, C > 1


def _launch(expr: str, device_id: int, threads: int, args: tuple, smem: int = 0) -> None:
    from ..runtime.compiler import _launch_function
    f = _family.function(device_id, expr)
    _launch_function(expr, f, (-(-threads // THREADS), 1, 1), (THREADS, 1, 1), args, smem, None)


def _check_plane(x, geo) -> None:
    padded = (x.shape[2] + 2 * geo[2]) * (x.shape[3] + 2 * geo[3])
    if padded >= 2**31:
        raise ShapeError(f"pooling: a padded (H, W) plane must have fewer than 2^31 elements (got {padded})")


def chunks(units: int, threads_per_unit: int, group: int = 1, limit: int = _MAX_THREADS) -> list:
    """(first, count) ranges of `units` (planes, images) for launches of at most `limit` threads, a
    unit taking threads_per_unit threads and a thread `group` units (NCHW: PLANES planes)."""
    if threads_per_unit > limit:
        raise ShapeError(f"pooling: a launch's threads must be <= {limit} (one image needs {threads_per_unit})")
    # (units a launch takes stay under 2^31 too: the kernels count them, and a thread's first unit,
    # in 32 bits, threads past the end included)
    step = min((limit // threads_per_unit) * group, 2**31 - 1 - THREADS * group)
    return [(u, min(step, units - u)) for u in range(0, units, step)]


def _nchw(kernel: str, targs: str, arrays: tuple, planes: int, per_plane: int, geo_args: tuple) -> None:
    """Launch NCHW kernel<targs, P> (P = PLANES[kernel]) over `planes` planes of per_plane threads
    each (a thread P planes), in chunks of planes whose threads fit 32-bit indices; arrays: (array,
    elements a plane) pairs, each chunk's offset by its first plane."""
    p = PLANES[kernel]
    expr = f"{kernel}<{targs}, {p}>"
    for p0, n in chunks(planes, per_plane, p):
        ptrs = tuple(a if p0 == 0 else a.ravel()[p0 * per:] for a, per in arrays)
        _launch(expr, arrays[0][0].data.device_id, -(-n // p) * per_plane, (*ptrs, np.int32(n), *geo_args))


def _cl(expr: str, arrays: tuple, images: int, per_image: int, cv: int, geo_args: tuple) -> None:
    """Launch a channels-last kernel over `images` images of per_image positions x cv channel packs,
    in chunks of images whose threads fit 32-bit indices; arrays: (NHWC array, elements an image)."""
    for n0, n in chunks(images, per_image * cv):
        ptrs = tuple(a if n0 == 0 else a.ravel()[n0 * e:] for a, e in arrays)
        total = n * per_image * cv
        _launch(expr, arrays[0][0].data.device_id, total, (*ptrs, np.int32(total), np.int32(cv), *geo_args))


def _width(dtype_name: str, c: int, arrays) -> int:
    """The widest V of the channels-last kernels dividing C with every array aligned to V elements."""
    item = _ITEMSIZE[dtype_name]
    for v in reversed(widths(dtype_name)):
        if c % v == 0 and all(a.data.ptr % (v * item) == 0 for a in arrays):
            return v
    return 1


def _nhwc(a):
    """The (N, H, W, C) C-contiguous array under channels-last view `a`."""
    return a.transpose(0, 2, 3, 1)


def pool2d(x, kind: str, geo):
    """max ("max") or average ("avg") pooling of x (N, C, H, W), C-contiguous or channels-last, a
    CuPy array on the current device; geo: conv_api's (sh, sw, ph, pw, 1, 1, R, S, Ho, Wo),
    validated by the caller. The output has x's layout."""
    from ..runtime import _cupy
    cp = _cupy.loaded_cupy()
    n, c, h, w = x.shape
    ho, wo = geo[8], geo[9]
    avg = "true" if kind == "avg" else "false"
    dt = dtype_name(x.dtype)
    cl = channels_last(x)
    if cl and not cl_fits(x.shape, geo):   # NCHW kernels on a copy, the result back
        return transpose.to_channels_last(pool2d(transpose.contiguous(x), kind, geo))
    if cl:
        yt = cp.empty((n, ho, wo, c), x.dtype)
        if yt.size:
            xt = _nhwc(x)
            v = _width(dt, c, (xt, yt))
            _cl(f"ck_pool2d_cl<{ctype(dt)}, {avg}, {v}>", ((xt, h * w * c), (yt, ho * wo * c)), n, ho * wo,
                c // v, _geo(x.shape, geo))
        return yt.transpose(0, 3, 1, 2)
    y = cp.empty((n, c, ho, wo), x.dtype)
    if y.size and x.size:
        _check_plane(x, geo)
        _nchw("ck_pool2d", f"{ctype(dt)}, {avg}", ((x, h * w), (y, ho * wo)), n * c, ho * wo, _geo(x.shape, geo))
    return y


def backward_kernel(x_shape, geo, kind: str = "avg") -> tuple[str, int]:
    """(kernel, threads per plane) of the launch writing pool2d_backward's dx (NCHW names; the
    channels-last kernels add "_cl" after "ck_pool2d"): one thread per window when the windows do
    not overlap (stride >= window). Else one thread per input element gathering the gradients of
    the windows covering it: for max pooling of windows of at most MAX_IDX_TAPS taps, reading each
    window's winner as a byte written by a first launch (ck_pool2d_argmax, one thread per window);
    otherwise recomputing max winners from x (R S loads a window, for each window covering the
    element: 0.05-0.3x torch where this was the only form)."""
    sh, sw, r, s, ho, wo = geo[0], geo[1], geo[6], geo[7], geo[8], geo[9]
    if sh >= r and sw >= s:
        return "ck_pool2d_backward_cells", ho * wo
    if kind == "max" and r * s <= MAX_IDX_TAPS:
        return "ck_pool2d_backward_idx", x_shape[2] * x_shape[3]
    return "ck_pool2d_backward", x_shape[2] * x_shape[3]


def _spread(n: int, most: int) -> int:
    """The tile edge cutting n into the fewest parts of at most `most`, as even as they go."""
    return -(-n // -(-n // most))


def tile_plan(x_shape, geo, dtype_name: str):
    """ck_pool2d_backward_tile's launch for x (N, C, H, W) and geo, or None where a tile's shared
    memory would pass TILE_SMEM_BYTES even one row high: (th, tw, tiles_w, tiles, xr_max, xc_max,
    wh_max, ww_max, shared bytes). A tile of th x tw inputs is covered by at most
    (th + R - 2) // sh + 1 window rows, which read at most (that - 1) sh + R rows of x (columns
    likewise); the kernel's arrays are laid out with these bounds: three of TILE_PLANES values of
    the accumulation type a place (x, a row's best, gy), two of a 32-bit word (winners' bytes)."""
    _, _, h, w = x_shape
    sh, sw, r, s, ho, wo = geo[0], geo[1], geo[6], geo[7], geo[8], geo[9]
    lanes = TILE_PLANES * (8 if dtype_name == "float64" else 4)
    tw = _spread(w, TILE_WIDTH)
    th = _spread(h, max(1, TILE_ELEMENTS // tw))
    while True:
        wh, ww = min(ho, (th + r - 2) // sh + 1), min(wo, (tw + s - 2) // sw + 1)
        xr, xc = min(h, (wh - 1) * sh + r), min(w, (ww - 1) * sw + s)
        smem = (xr * xc + xr * ww + wh * ww) * lanes + (xr * ww + wh * ww) * 4
        if smem <= TILE_SMEM_BYTES:
            break
        if th == 1:
            return None
        th = max(1, th // 2)
    tiles_w = -(-w // tw)
    return th, tw, tiles_w, tiles_w * -(-h // th), xr, xc, wh, ww, smem


def tile_chunks(planes: int, tiles: int) -> list:
    """(first plane, planes) of ck_pool2d_backward_tile's launches: whole groups of TILE_PLANES
    planes, each launch under 2^31 blocks (groups x tiles) and 2^31 planes (its int32 count, and
    the kernel's first plane of a group in 32 bits)."""
    step = min((2**31 - 1) // tiles, (2**31 - 1) // TILE_PLANES - 1) * TILE_PLANES
    return [(p0, min(step, planes - p0)) for p0 in range(0, planes, step)]


def _tiled_backward(x, grad_out, gx, geo) -> bool:
    """dx of NCHW max pooling by ck_pool2d_backward_tile (TILE_PLANES planes a block), in chunks of
    planes whose blocks fit 32-bit grids; False (nothing launched) where an element is in fewer
    than TILED_FROM_WINDOWS windows on average or tile_plan has no tile."""
    if geo[6] * geo[7] < TILED_FROM_WINDOWS * geo[0] * geo[1]:
        return False
    dt = dtype_name(x.dtype)
    plan = tile_plan(x.shape, geo, dt)
    if plan is None:
        return False
    th, tw, tiles_w, tiles, xr, xc, wh, ww, smem = plan
    expr = f"ck_pool2d_backward_tile<{ctype(dt)}, {TILE_PLANES}>"
    n, c, h, w = x.shape
    arrays = ((x, h * w), (grad_out, geo[8] * geo[9]), (gx, h * w))   # (array, elements a plane)
    ints = tuple(np.int32(v) for v in (th, tw, tiles_w, tiles, xr, xc, wh, ww))
    for p0, k in tile_chunks(n * c, tiles):
        ptrs = tuple(a if p0 == 0 else a.ravel()[p0 * e:] for a, e in arrays)
        _launch(expr, x.data.device_id, -(-k // TILE_PLANES) * tiles * THREADS,
                (*ptrs, np.int32(k), *ints, *_geo(x.shape, geo)), smem)
    return True


def cl_fits(shape, geo) -> bool:
    """Whether the channels-last kernels can take an image of x (N, C, H, W) in one launch: their
    flat grid counts positions x channel packs of an image in 32 bits (at worst one channel a pack)."""
    _, c, h, w = shape
    return max(h * w, geo[8] * geo[9]) * c <= _MAX_THREADS


def via_channels_last(shape, geo, dtype_name: str) -> bool:
    """Whether the NCHW max backward of overlapping windows of x (shape) goes through the
    channels-last kernels (VIA_CHANNELS_LAST_FROM, VIA_CHANNELS_LAST_MIN_ELEMENTS, cl_fits)."""
    c = shape[1]
    return VIA_CHANNELS_LAST_FROM is not None and vec_width(dtype_name) == 8 and c >= VIA_CHANNELS_LAST_FROM \
        and math.prod(shape) >= VIA_CHANNELS_LAST_MIN_ELEMENTS and cl_fits(shape, geo)


def _via_channels_last(grad_out, x, kind: str, geo):
    """pool2d_backward of C-contiguous x and grad_out by the channels-last kernels: both permuted
    to (N, H, W, C) memory and dx permuted back (kernels/transpose.py, 2 x (x, grad_out, dx) bytes
    more traffic)."""
    return transpose.contiguous(pool2d_backward(transpose.to_channels_last(grad_out), transpose.to_channels_last(x),
                                                kind, geo))


def pool2d_backward(grad_out, x, kind: str, geo):
    """dL/dx of pool2d for grad_out (N, C, Ho, Wo) and x of one dtype and device: x C-contiguous (and
    grad_out then too), or channels-last (dL/dx then channels-last too; grad_out in either layout,
    copied into x's where the kernels need it)."""
    from ..runtime import _cupy
    cp = _cupy.loaded_cupy()
    n, c, h, w = x.shape
    ho, wo = geo[8], geo[9]
    cl = channels_last(x)
    if cl and not cl_fits(x.shape, geo):   # NCHW kernels on copies, the result back
        return transpose.to_channels_last(pool2d_backward(transpose.contiguous(grad_out), transpose.contiguous(x),
                                                          kind, geo))
    if cl and not channels_last(grad_out):
        grad_out = transpose.to_channels_last(grad_out)
    gx = cp.empty((n, h, w, c) if cl else x.shape, x.dtype)
    out = gx.transpose(0, 3, 1, 2) if cl else gx
    if gx.size == 0:
        return out
    if grad_out.size == 0:
        gx.fill(0)
        return out
    kernel, per_plane = backward_kernel(x.shape, geo, kind)
    two_pass = kernel == "ck_pool2d_backward_idx"
    dt = dtype_name(x.dtype)
    if not cl:
        _check_plane(x, geo)
    if two_pass and not cl:
        if TILED and _tiled_backward(x, grad_out, gx, geo):
            return out
        if via_channels_last(x.shape, geo, dt):
            return _via_channels_last(grad_out, x, kind, geo)
    avg = "true" if kind == "avg" else "false"
    ga = _geo(x.shape, geo)
    if cl:
        xt, gt = _nhwc(x), _nhwc(grad_out)
        v = _width(dt, c, (xt, gt, gx))
        name = kernel.replace("ck_pool2d", "ck_pool2d_cl", 1)
        img, out_img = h * w * c, ho * wo * c
        if two_pass:
            idx = cp.empty((n, ho, wo, c), cp.uint8)
            _cl(f"ck_pool2d_cl_argmax<{ctype(dt)}, {v}>", ((xt, img), (idx, out_img)), n, ho * wo, c // v, ga)
            _cl(f"{name}<{ctype(dt)}, {v}>", ((idx, out_img), (gt, out_img), (gx, img)), n, per_plane, c // v, ga)
        else:   # (a plane's threads are an image's positions)
            _cl(f"{name}<{ctype(dt)}, {avg}, {v}>", ((xt, img), (gt, out_img), (gx, img)), n, per_plane, c // v, ga)
        return out
    if two_pass:
        idx = cp.empty((n, c, ho, wo), cp.uint8)
        _nchw("ck_pool2d_argmax", ctype(dt), ((x, h * w), (idx, ho * wo)), n * c, ho * wo, ga)
        _nchw(kernel, ctype(dt), ((idx, ho * wo), (grad_out, ho * wo), (gx, h * w)), n * c, per_plane, ga)
    else:
        _nchw(kernel, f"{ctype(dt)}, {avg}", ((x, h * w), (grad_out, ho * wo), (gx, h * w)), n * c, per_plane, ga)
    return out
