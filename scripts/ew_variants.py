"""relu kernel variants (unroll x block size x streaming stores, and a one-wave grid-stride grid)
against torch, interleaved over rounds so drift in the GPU's state hits every variant alike. One
run; medians per variant. The shipped kernel is U=4 T=256, one block per tile, plain stores."""
import statistics

import cupy as cp
import numpy as np
import torch

from cudakit.bench.timing import time_gpu
from cudakit.kernels import elementwise as ew
from cudakit.runtime.compiler import compile_module

n = 1 << 28
sms = cp.cuda.Device().attributes["MultiProcessorCount"]
for dt, V in (("float32", 4), ("bfloat16", 8)):
    x = cp.random.standard_normal(n, dtype=cp.float32).astype(dt)
    out = cp.empty_like(x)
    tx = torch.from_dlpack(x)
    nbytes = 2 * n * x.itemsize
    expr = ew._expr("contig", "relu", dt, V)
    kernels = {(u, cs): compile_module(ew.SOURCE, [f"-DCK_UNROLL={u}"] + (["-DCK_STREAM_STORE"] if cs else []),
                                       [expr]).get_kernel(expr)
               for u in (2, 4, 8) for cs in (False, True)}
    res = {}
    for _ in range(3):
        res.setdefault("torch", []).append(nbytes / time_gpu(lambda: torch.relu(tx), 3, 30)["median_ms"] / 1e6)
        for (u, cs), k in kernels.items():
            for t in (128, 256, 512):
                tiles = (n // V + t * u - 1) // (t * u)
                for wave in (False, True):  # wave: a grid of one full wave, grid-stride over the tiles
                    grid = min(tiles, sms * (2048 // t)) if wave else tiles
                    ms = time_gpu(lambda: k.launch(grid, t, (x, out, np.int64(n), np.float64(0.0))), 3, 30)["median_ms"]
                    res.setdefault(f"U={u} T={t}{' cs' if cs else ''}{' wave' if wave else ''}", []).append(nbytes / ms / 1e6)
    base = statistics.median(res["torch"])
    for name, v in sorted(res.items(), key=lambda kv: -statistics.median(kv[1])):
        m = statistics.median(v)
        print(f"VARIANT relu {dt:<8} {name:<18} {m:6.0f} GB/s  x torch {m / base:.3f}  (rounds: {', '.join(f'{a:.0f}' for a in v)})")
