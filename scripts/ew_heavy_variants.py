"""Compute-heavy bfloat16 activations: unroll x block size of the contiguous kernels against torch,
interleaved over rounds. One run; medians per variant."""
import statistics

import cupy as cp
import numpy as np
import torch

from cudakit.bench.timing import time_gpu
from cudakit.kernels import elementwise as ew
from cudakit.runtime.compiler import compile_module

n = 1 << 28
V = 8
x = cp.random.standard_normal(n, dtype=cp.float32).astype("bfloat16")
g = cp.random.standard_normal(n, dtype=cp.float32).astype("bfloat16")
out = cp.empty_like(x)
tx, tg = torch.from_dlpack(x), torch.from_dlpack(g)
F = torch.nn.functional
ops = {
    "gelu_tanh_backward": (lambda: torch.ops.aten.gelu_backward(tg, tx, approximate="tanh"), 3),
    "gelu_erf": (lambda: F.gelu(tx), 2),
    "gelu_erf_backward": (lambda: torch.ops.aten.gelu_backward(tg, tx), 3),
    "gelu_tanh": (lambda: F.gelu(tx, approximate="tanh"), 2),
}
for op, (tfn, streams) in ops.items():
    expr = ew._expr("contig", op, "bfloat16", V)
    kernels = {u: compile_module(ew.SOURCE, [f"-DCK_UNROLL={u}"], [expr]).get_kernel(expr) for u in (1, 2, 4)}
    nbytes = streams * n * 2
    args = (g, x, out) if streams == 3 else (x, out)
    res = {}
    for _ in range(3):
        res.setdefault("torch", []).append(nbytes / time_gpu(tfn, 3, 20)["median_ms"] / 1e6)
        for u, k in kernels.items():
            for t in (128, 256, 512):
                grid = (n // V + t * u - 1) // (t * u)
                ms = time_gpu(lambda: k.launch(grid, t, (*args, np.int64(n), np.float64(0))), 3, 20)["median_ms"]
                res.setdefault(f"U={u} T={t}", []).append(nbytes / ms / 1e6)
    base = statistics.median(res["torch"])
    for name, v in res.items():
        m = statistics.median(v)
        print(f"VARIANT {op:<19} {name:<10} {m:6.0f} GB/s  x torch {m / base:.3f}")
