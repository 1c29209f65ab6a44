"""A compute-sanitizer target for the NCHW max backward's tiles (kernels/pooling.py,
ck_pool2d_backward_tile): max_pool2d_backward of overlapping windows on odd planes, plane counts
that are not a multiple of the tile's 4, planes cut into several tiles, and every dtype, each
against the two-pass form (pooling.TILED off): bitwise where the sums' order cannot matter, else
the largest difference (float32 sums a window's gradients in another order there: last bits). Run it under
`compute-sanitizer --tool memcheck` and `--tool racecheck` (shared-memory hazards between the
tile's phases); prints one line per case and "ok" at the end.
    python3 scripts/pool_tile_sanitize.py"""
import cupy as cp
import numpy as np

import cudakit
from cudakit import dispatch
from cudakit.kernels import pooling
from cudakit.runtime import launch

# (N, C, H, W, kernel, stride, padding)
CASES = [(1, 5, 37, 70, 5, 1, 2), (2, 3, 20, 20, 3, 1, 1), (1, 6, 13, 13, 5, 1, 2), (1, 4, 130, 9, 3, 1, 1),
         (1, 3, 20, 34, 16, 1, 8), (2, 2, 18, 40, (3, 5), (1, 2), (1, 2))]
rng = np.random.default_rng(0)
for dtype in ("float32", "float64", "float16", "bfloat16"):
    for n, c, h, w, k, s, p in CASES:
        x = cp.asarray(rng.standard_normal((n, c, h, w)).round(1), dtype=cp.float32).astype(dtype)
        y = cudakit.max_pool2d(x, k, s, p)
        g = cp.asarray(rng.standard_normal(y.shape), dtype=cp.float32).astype(dtype)
        out = {}
        for tiled in (True, False):
            pooling.TILED = tiled
            dispatch.clear()   # (a plan traced under the other switch would replay its launches)
            launch.recent_launches.clear()
            out[tiled] = cudakit.max_pool2d_backward(g, x, k, s, p)
            names = sorted({name.split("<")[0] for name, _, _ in launch.recent_launches})
            if tiled:
                took = names
        a, b = out[True].get(), out[False].get()
        diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
        print(dtype, (n, c, h, w), k, s, p, took, "same bits" if a.tobytes() == b.tobytes() else f"max |diff| {diff:.3g}")
cp.cuda.runtime.deviceSynchronize()
print("ok")
