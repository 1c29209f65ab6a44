"""Softmax forward register-kernel plans -- packs per thread (nv) x threads per block shared by short
rows (ROWS_BLOCK) -- against torch and a same-size copy, interleaved over rounds so drift in the
GPU's state hits every variant alike. One run on the GPU:
    python3 benchmarks/sweeps/softmax_variants.py [ROWSxCOLS:dtype ...]    (default 262144x128:float32)
Prints per variant the median time, x torch and x copy; VARIANT-BEST names the fastest next to the
shipped plan (softmax.fwd_target, softmax.ROWS_BLOCK)."""
import statistics
import sys

import cupy as cp
import torch

from cudakit.bench.timing import time_gpu
from cudakit.kernels import softmax as sm

ROUNDS = 3
NVS = (1, 2, 4, 8)
BLOCKS = (64, 128, 256, 512, 1024)
rows_block = sm.ROWS_BLOCK
for spec in sys.argv[1:] or ["262144x128:float32"]:
    shape, dt = spec.split(":")
    rows, cols = map(int, shape.split("x"))
    x = cp.random.standard_normal((rows, cols), dtype=cp.float32).astype(dt)
    y = cp.empty_like(x)
    tx = torch.from_dlpack(x)
    res: dict = {}
    for _ in range(ROUNDS):
        res.setdefault("torch", []).append(time_gpu(lambda: torch.softmax(tx, -1), 3, 20)["median_ms"])
        res.setdefault("copy", []).append(time_gpu(lambda: cp.copyto(y, x), 3, 20)["median_ms"])
        for rb in BLOCKS:
            sm.ROWS_BLOCK = rb
            sm._fwd_plans.clear()
            for nv in NVS:
                ms = time_gpu(lambda: sm.softmax_forward(x, out=y, plan_nv=nv), 3, 20)["median_ms"]
                res.setdefault((nv, rb), []).append(ms)
    sm.ROWS_BLOCK = rows_block
    sm._fwd_plans.clear()
    shipped = (sm.fwd_target(cols // sm.vec_for(cols, dt, x, y), sm.vec_for(cols, dt, x, y)), sm.ROWS_BLOCK)
    med = {k: statistics.median(v) for k, v in res.items()}
    base, copy = med.pop("torch"), med.pop("copy")
    for (nv, rb), m in sorted(med.items(), key=lambda kv: kv[1]):
        print(f"VARIANT softmax {rows}x{cols} {dt:<8} nv={nv} rows_block={rb:<4} {m * 1e3:7.1f} us"
              f"  x torch {base / m:.3f}  x copy {copy / m:.3f}")
    top = min(med, key=med.get)
    print(f"VARIANT-BEST softmax {rows}x{cols} {dt} best nv={top[0]} rows_block={top[1]} x torch {base / med[top]:.3f}; "
          f"shipped x torch {base / med.get(shipped, float('nan')):.3f} (torch {base * 1e3:.1f} us, copy {copy * 1e3:.1f} us)")
