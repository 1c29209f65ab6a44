"""Tiles of the direct depthwise conv2d kernels of kernels/conv.py for 3x3 windows: the forward's
(elements of a row step, output rows, warps) and the weight gradient's (the same, and the programs
aimed for in units of 264). Each variant is first checked on the GPU against float64
(tests/conv_checks.py), then the forward and the weight gradient alone (the kernels launched as
kernels/conv.py does: device time, not the public calls' host time) and the whole backward of a
32x128x56x56 depthwise 3x3 (cudakit.conv2d_backward) are timed interleaved with torch. One run:
    python3 benchmarks/sweeps/depthwise_variants.py
Prints CHECK lines and VARIANT lines (median us, ratio to torch's same pass); the first variant of
each list is the shipped one."""
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, "tests")
import _conv_variants as cv  # noqa: E402
import conv_checks as cc  # noqa: E402

import cudakit  # noqa: E402
from cudakit.kernels import conv  # noqa: E402
# forward: (elements of a row step, output rows, warps) for windows up to 3x3; weight gradient: the
# same and the programs aimed for, in units of 264
FWD = [conv._DW_FWD_TILES[0][1:] + (conv._DW_WARPS,), (128, 8, 4), (512, 8, 4), (256, 4, 4), (256, 16, 4),
       (512, 8, 8)]
WGRAD = [conv._DW_WG_TILES[0][1:] + (conv._DW_WARPS, conv._DW_WG_PROGRAMS // conv._TARGET_PROGRAMS),
         (256, 8, 4, 2), (256, 8, 4, 8), (128, 8, 4, 4), (256, 4, 4, 4), (256, 16, 4, 4), (512, 8, 8, 4)]
GEO = (1, 1, 1, 1, 1, 1, 3, 3, 56, 56)


def use(f=None, wg=None):
    """Set the module's tunables for windows up to 3x3 (the forward's kernels are cached per
    geometry: cleared when they change)."""
    if f and (f[:2], f[2]) != (conv._DW_FWD_TILES[0][1:], conv._DW_WARPS):
        conv._DW_FWD_TILES = ((9,) + f[:2],) + conv._DW_FWD_TILES[1:]
        conv._DW_WARPS = f[2]
        conv._dw_kernel.cache_clear()
    if wg and wg != conv._DW_WG_TILES[0][1:] + (conv._DW_WG_WARPS, conv._DW_WG_PROGRAMS // conv._TARGET_PROGRAMS):
        conv._DW_WG_TILES = ((9,) + wg[:2],) + conv._DW_WG_TILES[1:]
        conv._DW_WG_WARPS = wg[2]
        conv._DW_WG_PROGRAMS = wg[3] * conv._TARGET_PROGRAMS
        conv._dw_wgrad_launch.cache_clear()


def check():
    rng = np.random.default_rng(0)
    for dt in ("bfloat16", "float32"):
        cc.check_conv2d(cp.asarray, cp.asnumpy, rng, 4, 32, 28, 28, 32, 3, 3, 1, 1, 1, dt, groups=32)
        cc.check_conv2d(cp.asarray, cp.asnumpy, rng, 2, 16, 40, 39, 16, 5, 5, 1, 4, 2, dt, groups=16)
        cc.check_conv2d(cp.asarray, cp.asnumpy, rng, 2, 8, 10, 9, 8, 3, 3, 2, 1, 1, dt, groups=8)
        cc.check_conv2d(cp.asarray, cp.asnumpy, rng, 3, 8, 9, 150, 8, 7, 7, 1, 3, 1, dt, groups=8)


shipped = (FWD[0], WGRAD[0])
cv.check_each(FWD, WGRAD, shipped, use, check)
for dt in ("bfloat16", "float32"):
    (x, w, g), fns = cv.data((32, 128, 56, 56), 128, 3, 128, dt)
    for v in FWD:
        fns[f"fwd {v}"] = lambda v=v: (use(f=v), conv._dw_run(x, w, None, GEO, 128, 1))
    for v in WGRAD:
        fns[f"wgrad {v}"] = lambda v=v: (use(wg=v), conv.conv2d_weight_grad(g, x, w.shape, GEO, False, 128))
    fns["bwd shipped"] = lambda: (use(*shipped), cudakit.conv2d_backward(g, x, w, 1, 1, bias=False, groups=128))
    fns["fwd shipped (cudakit.conv2d)"] = lambda: (use(*shipped), cudakit.conv2d(x, w, None, 1, 1, groups=128))
    cv.time_and_report(fns, dt, 28)
    use(*shipped)
