"""Compare elementwise kernel variants (unroll, block size, streaming stores) with torch, one run."""
import numpy as np
import cupy as cp
import torch

from cudakit.bench.timing import time_gpu, copy_bandwidth
from cudakit.kernels import elementwise as ew
from cudakit.runtime.compiler import compile_module

n = 1 << 28
copy = copy_bandwidth(True, 1 << 30)
print(f"VARIANT copy {copy / 1e9:.0f} GB/s")
cases = [("relu", "ck_bf16", 8, cp.dtype("bfloat16")), ("relu", "float", 4, cp.float32), ("add", "float", 4, cp.float32)]
for op, ct, V, dt in cases:
    x = cp.random.standard_normal(n, dtype=cp.float32).astype(dt)
    y = cp.random.standard_normal(n, dtype=cp.float32).astype(dt)
    out = cp.empty_like(x)
    nbytes = (3 if op == "add" else 2) * n * x.itemsize
    tx, ty = torch.from_dlpack(x), torch.from_dlpack(y)
    tf = (lambda: torch.add(tx, ty)) if op == "add" else (lambda: torch.relu(tx))
    tt = time_gpu(tf, 5, 40)["median_ms"]
    print(f"VARIANT {op:<5} torch            {nbytes / tt / 1e6:7.0f} GB/s")
    for unroll in (4, 8, 16):
        for stream in (False,):
            opts = [f"-DCK_UNROLL={unroll}"] + (["-DCK_STREAM_STORE"] if stream else [])
            expr = ew._expr("contig", op, "float32" if ct == "float" else "bfloat16", V)
            k = compile_module(ew.SOURCE, opts, [expr]).get_kernel(expr)
            for threads in (128, 256):
                if threads > k.attributes["max_threads_per_block"]:
                    continue
                tile = threads * unroll
                grid = (n // V + tile - 1) // tile
                args = (x, y, out, np.int64(n)) if op == "add" else (x, out, np.int64(n))
                t = time_gpu(lambda: k.launch(grid, threads, args), 5, 40)["median_ms"]
                print(f"VARIANT {op:<5} U={unroll} T={threads:<4} cs={int(stream)} {nbytes / t / 1e6:7.0f} GB/s  x torch {tt / t:.3f}")
