"""Which kernels the small float32 attention calls of the host-time rows launch, and whether such a
call is bound by the host or by the GPU: B2 H2 S64 D32 float32 (bench/cases/host_time.py), the forward
without and with a (B, H, L, L) bias, cudakit's and torch's SDPA side by side. For each: host time a
call (N back-to-back calls, synchronised before and after: bench.timing.host_time_per_call), GPU time a
call (CUDA events around N calls) and the kernels of 20 calls from torch.profiler (CUPTI sees CuPy's and
Triton's launches too), with their mean device time.
    python3 benchmarks/sweeps/attention_host_kernels.py [--out f.json]
Prints VARIANT lines and writes the rows to --out."""
import sys

import cupy as cp
import torch
from _kernels import kernels
from _results import dump_rows

import cudakit
from cudakit.bench import timing
from cudakit.kernels import paths

argv = sys.argv[1:]
B, H, T, D = 2, 2, 64, 32
N = 2000
rng = cp.random.default_rng(0)
q, k, v = (rng.standard_normal((B, H, T, D), dtype=cp.float32) for _ in range(3))
bias = rng.standard_normal((B, H, T, T), dtype=cp.float32)
tq, tk, tv, tb = (torch.from_dlpack(a) for a in (q, k, v, bias))
sdpa = torch.nn.functional.scaled_dot_product_attention
calls = {"cudakit_fwd": lambda: cudakit.attention_with_lse(q, k, v),
         "torch_fwd": lambda: sdpa(tq, tk, tv),
         "cudakit_fwd_bias": lambda: cudakit.attention_with_lse(q, k, v, attn_bias=bias),
         "torch_fwd_bias": lambda: sdpa(tq, tk, tv, attn_mask=tb)}
stream = cp.cuda.get_current_stream()
rows = []
for name, fn in calls.items():
    host_us = timing.host_time_per_call(fn, calls=N, rounds=1, sync=cp.cuda.Device().synchronize)["median_ms"] * 1e3
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record(stream)
    for _ in range(N):
        fn()
    e1.record(stream)
    e1.synchronize()
    gpu_us = cp.cuda.get_elapsed_time(e0, e1) * 1e3 / N
    launched = [{"kernel": n[:70], "per_call": round(per), "device_us": round(us / per, 2)}
                for n, us, per in kernels(fn, 20, warmup=0) if us > 0]
    row = {"call": name, "host_us": round(host_us, 3), "gpu_us": round(gpu_us, 3), "kernels": launched,
           "path": paths.last_paths().get("attention") if name.startswith("cudakit") else None}
    rows.append(row)
    print(f"VARIANT {name}: host {host_us:.2f} us/call, GPU (events) {gpu_us:.2f} us/call, path {row['path']}",
          flush=True)
    for kern in launched:
        print(f"    {kern['per_call']} x {kern['kernel']}  {kern['device_us']} us", flush=True)
dump_rows(argv, __doc__, rows)
