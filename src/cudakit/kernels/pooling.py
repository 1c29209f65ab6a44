"""2-D max and average pooling (NCHW) forward and backward, one thread per output (forward) or per
input element (backward), with the semantics of backends/conv_api.py: padding of -inf (max) or zeros
(average, counted in the divisor, PyTorch's count_include_pad=True); a window holding a NaN gives
NaN; the backward of max pooling sends each window's gradient to its first NaN, else its first
largest element, else (a window of -inf) its first in-bounds element.

Forward: each output reads its R x S window (neighbouring threads share rows, so the reads
coalesce and repeat in L1). Backward, no atomics (deterministic), the max winner recomputed from x:
windows that do not overlap (stride >= window) take one thread each, which writes its stride cell
of dx; otherwise each input element sums the gradients of the windows that cover it. Arithmetic in ck_traits<T>::acc (float32 for 16-bit data), rounded once.
Traffic: forward N C H W read + N C Ho Wo written; backward N C Ho Wo (+ N C H W for max) read,
N C H W written.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ._common import FLOAT_DTYPE_NAMES, KernelFamily, by_template, ctype, cuda_source

SOURCE_FILES = ("_pdl.cuh", "_preamble.cuh", "pooling.cu")
SOURCE = cuda_source(*SOURCE_FILES)

THREADS = 256


def name_expressions() -> list[str]:
    """Every template instantiation this module launches."""
    return [f"{k}<{ctype(dt)}, {avg}>" for k in ("ck_pool2d", "ck_pool2d_backward", "ck_pool2d_backward_cells")
            for dt in FLOAT_DTYPE_NAMES for avg in ("true", "false")]


_family = KernelFamily(SOURCE, name_expressions, "cudakit/pooling.cu", group=by_template)


def _geo(x_shape, geo) -> tuple:
    """The kernels' ten int32 geometry arguments (CK_POOL_GEO_ARGS) from conv_api's pooling geometry."""
    sh, sw, ph, pw, _, _, r, s, ho, wo = geo
    return tuple(np.int32(v) for v in (x_shape[2], x_shape[3], ho, wo, r, s, sh, sw, ph, pw))


_MAX_GRID_Y = 65535


def _launch(expr: str, x, geo, per_plane: int, args: tuple) -> None:
    """Grid x over the per_plane elements of one plane, y over the N * C planes (striding past
    65535). The kernels index within a padded plane in 32 bits."""
    from ..runtime.compiler import _launch_function
    padded = (x.shape[2] + 2 * geo[2]) * (x.shape[3] + 2 * geo[3])
    if padded >= 2**31:
        raise ShapeError(f"pooling: a padded (H, W) plane must have fewer than 2^31 elements (got {padded})")
    planes = x.shape[0] * x.shape[1]
    f = _family.function(x.data.device_id, expr)
    grid = (-(-per_plane // THREADS), min(planes, _MAX_GRID_Y), 1)
    _launch_function(expr, f, grid, (THREADS, 1, 1), args, 0, None)


def pool2d(x, kind: str, geo):
    """max ("max") or average ("avg") pooling of a C-contiguous (N, C, H, W) CuPy array on the
    current device; geo: conv_api's (sh, sw, ph, pw, 1, 1, R, S, Ho, Wo), validated by the caller."""
    from ..runtime import _cupy
    cp = _cupy.loaded_cupy()
    n, c = x.shape[:2]
    y = cp.empty((n, c, geo[8], geo[9]), x.dtype)
    if y.size and x.size:
        expr = f"ck_pool2d<{ctype(x.dtype.name)}, {'true' if kind == 'avg' else 'false'}>"
        _launch(expr, x, geo, geo[8] * geo[9], (x, y, np.int64(n * c), *_geo(x.shape, geo)))
    return y


def backward_kernel(x_shape, geo) -> tuple[str, int]:
    """(kernel, threads per plane) pool2d_backward launches: one thread per window when the windows
    do not overlap (stride >= window), else one per input element gathering its windows."""
    sh, sw, r, s, ho, wo = geo[0], geo[1], geo[6], geo[7], geo[8], geo[9]
    if sh >= r and sw >= s:
        return "ck_pool2d_backward_cells", ho * wo
    return "ck_pool2d_backward", x_shape[2] * x_shape[3]


def pool2d_backward(grad_out, x, kind: str, geo):
    """dL/dx of pool2d for C-contiguous grad_out (N, C, Ho, Wo) and x of one dtype and device."""
    from ..runtime import _cupy
    cp = _cupy.loaded_cupy()
    gx = cp.empty(x.shape, x.dtype)
    if gx.size == 0:
        return gx
    if grad_out.size == 0:
        gx.fill(0)
        return gx
    kernel, per_plane = backward_kernel(x.shape, geo)
    expr = f"{kernel}<{ctype(x.dtype.name)}, {'true' if kind == 'avg' else 'false'}>"
    n, c = x.shape[:2]
    _launch(expr, x, geo, per_plane, (x, grad_out, gx, np.int64(n * c), *_geo(x.shape, geo)))
    return gx
