"""Column reductions (axis 0 of 32768x4096) -- rows a block reads at once (COLS_BY) x waves of
blocks the split aims at (COLS_WAVES) -- against torch, interleaved over rounds so drift in the
GPU's state hits every variant alike. One run on the GPU:
    python3 benchmarks/sweeps/reduction_variants.py [op:dtype ...]    (default sum, max, var x float32, bfloat16)
Prints per variant the median time, x torch and the read bandwidth; VARIANT-BEST names the fastest
next to the shipped plan."""
import statistics
import sys

import cupy as cp
import torch

import cudakit
from cudakit.bench.timing import time_gpu
from cudakit.kernels import reduction as red

ROUNDS = 3
BYS = (2, 4, 8)
WAVES = (1, 2)
be = cudakit.get_backend("cuda")
shipped = (red.COLS_BY, red.COLS_WAVES)
TORCH = {"sum": lambda t: t.sum(0), "max": lambda t: t.amax(0), "var": lambda t: t.var(0, correction=0),
         "argmax": lambda t: t.argmax(0)}
specs = sys.argv[1:] or [f"{op}:{dt}" for dt in ("float32", "bfloat16") for op in ("sum", "max", "var")]
best = []
for spec in specs:
    op, dt = spec.split(":")
    x = cp.random.standard_normal((32768, 4096), dtype=cp.float32).astype(dt)
    tx = torch.from_dlpack(x)
    fn = getattr(be, op)
    res: dict = {}
    for _ in range(ROUNDS):
        res.setdefault("torch", []).append(time_gpu(lambda: TORCH[op](tx), 3, 20)["median_ms"])
        for by in BYS:
            for w in WAVES:
                red.COLS_BY, red.COLS_WAVES = by, w
                res.setdefault((by, w), []).append(time_gpu(lambda: fn(x, axis=0), 3, 20)["median_ms"])
    red.COLS_BY, red.COLS_WAVES = shipped
    med = {k: statistics.median(v) for k, v in res.items()}
    base = med.pop("torch")
    for (by, w), m in sorted(med.items(), key=lambda kv: kv[1]):
        print(f"VARIANT {op}_axis0 {dt:<8} by={by:<2} waves={w} {m * 1e3:7.1f} us  x torch {base / m:.3f}"
              f"  {x.nbytes / m / 1e6:5.0f} GB/s")
    top = min(med, key=med.get)
    best.append(f"VARIANT-BEST {op}_axis0 {dt} best by={top[0]} waves={top[1]} x torch {base / med[top]:.3f}; "
                f"shipped x torch {base / med[shipped]:.3f} (torch {base * 1e3:.1f} us)")
    del x, tx
    cp.get_default_memory_pool().free_all_blocks()
print("\n".join(best))
