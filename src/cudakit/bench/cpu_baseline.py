"""`cudakit bench --cpu-baseline`: each checked case's op on the GPU against cudakit's CPU backend
(NumPy) on the same inputs, in the same dtype.

The inputs are the case's check() inputs (like the benchmark's, the leading dimension cut to at
most 2^22 elements an input: a full-size CPU run of every case would take minutes), copied to the
host. The GPU time is a CUDA-event median (bench/timing.time_gpu), the CPU time a wall-clock median
of 3 calls after one warm-up. x cpu = CPU time / GPU time.
"""
from __future__ import annotations

from . import timing
from .accuracy import to_host


def measure(case, reps: int = 10) -> dict:
    """{"elements", "gpu_ms", "cpu_ms", "x_cpu"} of one case on a GPU run."""
    fn, args = case.check()
    host = tuple(to_host(a) if hasattr(a, "dtype") else a for a in args)
    gpu = timing.time_gpu(lambda: fn(*args), warmup=2, reps=reps)["median_ms"]
    cpu = timing.time_cpu(lambda: fn(*host), warmup=1, reps=3)["median_ms"]
    elements = sum(int(a.size) for a in host if hasattr(a, "size"))
    return {"elements": elements, "gpu_ms": gpu, "cpu_ms": cpu, "x_cpu": cpu / gpu if gpu > 0 else None}
