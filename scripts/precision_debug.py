"""Debug: conv2d float32 under each precision, in a fresh process: error against float64 and the path."""
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, "tests")
import conv_checks as cc  # noqa: E402

import cudakit  # noqa: E402
from cudakit import dispatch  # noqa: E402
from cudakit.kernels import paths  # noqa: E402

rng = np.random.default_rng(0)
x, w = cc.data(rng, (4, 64, 20, 20), "float32"), cc.data(rng, (32, 64, 3, 3), "float32")
want = cc.conv_reference(x, w, None, (1, 1), (1, 1), (1, 1))[0]
for order in (("ieee", "tf32x3", "tf32"), ("tf32", "ieee", "tf32x3")):
    dispatch.clear()
    for prec in order * 2:
        cudakit.set_float32_precision(prec)
        y = cp.asnumpy(cudakit.conv2d(cp.asarray(x), cp.asarray(w), padding=1)).astype(np.float64)
        plans = [(op, p is not None) for (op, _), p in dispatch._plans.items() if op == "conv2d"]
        print("PREC-DEBUG", prec, f"{np.abs(y - want).max():.3g}", paths.last_paths().get("conv2d"), plans)
