"""var along rows: device time with the native launcher and with CuPy's binding, torch beside it,
and the host time per call. Interleaved over rounds; medians."""
import statistics

import cupy as cp
import torch

import cudakit
from cudakit.bench.timing import host_time_per_call, time_gpu
from cudakit.runtime import compiler

be = cudakit.get_backend("cuda")
native = compiler._native_launch
for dt in ("bfloat16", "float32"):
    x = cp.random.standard_normal((32768, 4096), dtype=cp.float32).astype(dt)
    tx = torch.from_dlpack(x)
    for axis in (-1, 0):
        res = {}
        for _ in range(3):
            for mode in ("native", "binding"):
                compiler._native_launch = None if mode == "native" else False
                res.setdefault(mode, []).append(time_gpu(lambda: be.var(x, axis=axis), 3, 20)["median_ms"] * 1e3)
            res.setdefault("torch", []).append(time_gpu(lambda: tx.var(dim=axis, correction=0), 3, 20)["median_ms"] * 1e3)
        compiler._native_launch = None
        h = host_time_per_call(lambda: be.var(x, axis=axis), calls=200, rounds=3,
                               sync=cp.cuda.get_current_stream().synchronize)["median_ms"] * 1e3
        print(f"VARIANT var {dt:<8} axis {axis:>2}: " + ", ".join(f"{k} {statistics.median(v):6.1f} us"
                                                           for k, v in res.items()) + f"; host {h:.1f} us/call")
import cProfile
import pstats
for dt, axis in (("bfloat16", -1), ("float32", 0)):
    x = cp.random.standard_normal((32768, 4096), dtype=cp.float32).astype(dt)
    be.var(x, axis=axis)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(200):
        be.var(x, axis=axis)
    pr.disable()
    cp.cuda.get_current_stream().synchronize()
    print(f"PROFILE var {dt} axis {axis}")
    pstats.Stats(pr).sort_stats("tottime").print_stats(18)
