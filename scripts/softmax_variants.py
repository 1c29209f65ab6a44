"""Softmax register-kernel plans (packs per thread) against torch, interleaved over rounds so drift
in the GPU's state hits every variant alike. One run; medians per variant."""
import statistics

import cupy as cp
import torch

from cudakit.bench.timing import time_gpu
from cudakit.kernels import softmax as sm

for rows, cols in ((262144, 128), (131072, 256), (32768, 4096)):
    for dt in ("bfloat16", "float32"):
        x = cp.random.standard_normal((rows, cols), dtype=cp.float32).astype(dt)
        y = cp.empty_like(x)
        g = cp.random.standard_normal((rows, cols), dtype=cp.float32).astype(dt)
        tx, ty, tg = torch.from_dlpack(x), torch.from_dlpack(y), torch.from_dlpack(g)
        f = torch.nn.functional
        res = {}
        for _ in range(3):
            for log in (False, True):
                nm = "log" if log else "fwd"
                tf = (lambda: f.log_softmax(tx, -1)) if log else (lambda: f.softmax(tx, -1))
                res.setdefault((nm, "torch"), []).append(time_gpu(tf, 3, 20)["median_ms"])
                for nv in (1, 2, 4, 8):
                    res.setdefault((nm, f"nv={nv}"), []).append(
                        time_gpu(lambda: sm.softmax_forward(x, log, out=y, plan_nv=nv), 3, 20)["median_ms"])
            res.setdefault(("bwd", "torch"), []).append(
                time_gpu(lambda: torch.ops.aten._softmax_backward_data(tg, ty, -1, ty.dtype), 3, 20)["median_ms"])
            for nv in (1, 2, 4):
                res.setdefault(("bwd", f"nv={nv}"), []).append(
                    time_gpu(lambda: sm.softmax_backward(g, y, out=x, plan_nv=nv), 3, 20)["median_ms"])
        for (nm, var), v in res.items():
            m = statistics.median(v)
            base = statistics.median(res[(nm, "torch")])
            print(f"VARIANT softmax {nm} {rows}x{cols} {dt:<8} {var:<6} {m * 1e3:8.1f} us  x torch {base / m:.3f}")
