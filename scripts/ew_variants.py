"""relu kernel variants (unroll x block size) against torch, interleaved over rounds so drift in
the GPU's state hits every variant alike. One run; medians per variant."""
import statistics

import cupy as cp
import numpy as np
import torch

from cudakit.bench.timing import time_gpu
from cudakit.kernels import elementwise as ew
from cudakit.runtime.compiler import compile_module

n = 1 << 28
for dt, V in (("float32", 4), ("bfloat16", 8)):
    x = cp.random.standard_normal(n, dtype=cp.float32).astype(dt)
    out = cp.empty_like(x)
    tx = torch.from_dlpack(x)
    nbytes = 2 * n * x.itemsize
    expr = ew._expr("contig", "relu", dt, V)
    kernels = {u: compile_module(ew.SOURCE, [f"-DCK_UNROLL={u}"], [expr]).get_kernel(expr) for u in (2, 4, 8)}
    res = {}
    for _ in range(3):
        res.setdefault("torch", []).append(nbytes / time_gpu(lambda: torch.relu(tx), 3, 30)["median_ms"] / 1e6)
        for u, k in kernels.items():
            for t in (128, 256):
                grid = (n // V + t * u - 1) // (t * u)
                ms = time_gpu(lambda: k.launch(grid, t, (x, out, np.int64(n))), 3, 30)["median_ms"]
                res.setdefault(f"U={u} T={t}", []).append(nbytes / ms / 1e6)
    base = statistics.median(res["torch"])
    for name, v in res.items():
        m = statistics.median(v)
        print(f"VARIANT relu {dt:<8} {name:<10} {m:6.0f} GB/s  x torch {m / base:.3f}  (rounds: {', '.join(f'{a:.0f}' for a in v)})")
