"""Why softmax on 262144x128 differs between `cudakit bench` and softmax_variants: device time of
the backend call, the kernel with and without a new output, torch; and the host time per call.
Interleaved over rounds; medians."""
import statistics

import cupy as cp
import torch

import cudakit
from cudakit.bench.timing import host_time_per_call, time_gpu
from cudakit.kernels import softmax as sm

be = cudakit.get_backend("cuda")
for dt in ("bfloat16", "float32"):
    x = cp.random.standard_normal((262144, 128), dtype=cp.float32).astype(dt) * 3
    y = cp.empty_like(x)
    tx = torch.from_dlpack(x)
    f = torch.nn.functional
    rows = {"backend softmax": lambda: be.softmax(x), "kernel, new out": lambda: sm.softmax_forward(x),
            "kernel, out=y": lambda: sm.softmax_forward(x, out=y), "torch": lambda: f.softmax(tx, -1),
            "backend log_softmax": lambda: be.log_softmax(x), "torch log": lambda: f.log_softmax(tx, -1)}
    res = {}
    for _ in range(3):
        for k, fn in rows.items():
            res.setdefault(k, []).append(time_gpu(fn, 5, 30)["median_ms"] * 1e3)
    for k, v in res.items():
        print(f"VARIANT diag {dt:<8} {k:<22} {statistics.median(v):7.1f} us device  rounds {', '.join(f'{a:.1f}' for a in v)}")
    s = cp.cuda.get_current_stream()
    for k in ("backend softmax", "torch"):
        h = host_time_per_call(rows[k], calls=300, rounds=3, sync=s.synchronize)["median_ms"] * 1e3
        print(f"VARIANT diag {dt:<8} {k:<22} {h:7.1f} us host per call (back-to-back)")
xs = cp.random.standard_normal((64, 128), dtype=cp.float32)
for k, fn in {"backend softmax 64x128": lambda: be.softmax(xs),
              "torch softmax 64x128": lambda: torch.nn.functional.softmax(torch.from_dlpack(xs), -1)}.items():
    h = host_time_per_call(fn, calls=2000, rounds=3, sync=cp.cuda.get_current_stream().synchronize)["median_ms"] * 1e3
    print(f"VARIANT diag {k:<31} {h:7.1f} us host per call")
import cProfile
import pstats
pr = cProfile.Profile()
pr.enable()
for _ in range(2000):
    be.softmax(xs)
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(25)
