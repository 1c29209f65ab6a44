"""Tiles of the direct grouped conv2d kernels of kernels/conv.py (groups of up to 8 channels, 3x3):
the forward's (accumulator registers a thread, output rows) and the weight gradient's (filters a
program, accumulator registers a thread, warps, output rows, programs aimed for in units of 264).
Each variant is first checked on the GPU against float64 (tests/conv_checks.py), then the forward
and the weight gradient alone (launched as kernels/conv.py does: device time) and the whole
backward (cudakit.conv2d_backward) of 32x256x28x28 in 32 groups of 8 channels and in 64 groups of
4 are timed interleaved with torch. One run:
    python3 benchmarks/sweeps/grouped_variants.py
Prints VARIANT lines (median us, ratio to torch's same pass); the first of each list is shipped."""
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, "tests")
import _conv_variants as cv  # noqa: E402
import conv_checks as cc  # noqa: E402

import cudakit  # noqa: E402
from cudakit.kernels import conv  # noqa: E402
FWD = [(conv._DW_FWD_ACC_REGS, conv._DW_FWD_TILES[0][2]), (32, 2), (48, 8)]
WGRAD = [(conv._DW_WG_FILTERS, conv._DW_WG_ACC_REGS, conv._DW_WG_WARPS, conv._DW_WG_TILES[0][2],
          conv._DW_WG_PROGRAMS // conv._TARGET_PROGRAMS),
         (2, 18, 4, 8, 4), (4, 36, 4, 4, 4), (8, 72, 4, 4, 4)]
SHIPPED = (FWD[0], WGRAD[0])


def use(f=None, wg=None):
    """Set the module's tunables for 3x3 windows (the kernels are cached per call shape: cleared)."""
    if f:
        conv._DW_FWD_ACC_REGS = f[0]
        conv._DW_FWD_TILES = ((9,) + conv._DW_FWD_TILES[0][1:2] + (f[1],),) + conv._DW_FWD_TILES[1:]
        conv._dw_kernel.cache_clear()
    if wg:
        conv._DW_WG_FILTERS, conv._DW_WG_ACC_REGS, conv._DW_WG_WARPS = wg[:3]
        conv._DW_WG_TILES = ((9,) + conv._DW_WG_TILES[0][1:2] + (wg[3],),) + conv._DW_WG_TILES[1:]
        conv._DW_WG_PROGRAMS = wg[4] * conv._TARGET_PROGRAMS
        conv._dw_wgrad_launch.cache_clear()


def check():
    rng = np.random.default_rng(0)
    for dt in ("bfloat16", "float32"):
        cc.check_conv2d(cp.asarray, cp.asnumpy, rng, 4, 64, 28, 28, 64, 3, 3, 1, 1, 1, dt, groups=8)
        cc.check_conv2d(cp.asarray, cp.asnumpy, rng, 3, 16, 19, 37, 16, 3, 3, 2, 1, 1, dt, groups=4)
        cc.check_conv2d(cp.asarray, cp.asnumpy, rng, 2, 12, 10, 9, 24, 3, 3, 1, 2, 2, dt, groups=4)


cv.check_each(FWD, WGRAD, SHIPPED, use, check)
for dt, groups in (("bfloat16", 32), ("float32", 32), ("bfloat16", 64)):
    (x, w, g), fns = cv.data((32, 256, 28, 28), 256, 3, groups, dt)
    geo = (1, 1, 1, 1, 1, 1, 3, 3, 28, 28)
    for v in FWD:
        fns[f"fwd {v}"] = lambda v=v: (use(f=v), conv._dw_run(x, w, None, geo, groups, 256 // groups))
    for v in WGRAD:
        fns[f"wgrad {v}"] = lambda v=v: (use(wg=v), conv.conv2d_weight_grad(g, x, w.shape, geo, False, groups))
    fns["bwd shipped"] = lambda: (use(*SHIPPED), cudakit.conv2d_backward(g, x, w, 1, 1, bias=False, groups=groups))
    cv.time_and_report(fns, f"{dt} g{groups}")
    use(*SHIPPED)
