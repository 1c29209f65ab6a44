"""A compute-sanitizer target for the NCHW max backward's tiles (kernels/pooling.py,
ck_pool2d_backward_tile): max_pool2d_backward of overlapping windows on odd planes, plane counts
that are not a multiple of the tile's 4, planes cut into several tiles, and every dtype, each
checked bitwise against the two-pass form (pooling.TILED off). Run it under
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
        same = out[True].get().tobytes() == out[False].get().tobytes()
        print(dtype, (n, c, h, w), k, s, p, took, "same" if same else "DIFFERENT")
cp.cuda.runtime.deviceSynchronize()
print("ok")
