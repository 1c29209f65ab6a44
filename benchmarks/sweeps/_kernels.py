"""The sweeps' kernel breakdown of a call: which kernels it launches and how long each runs on the
device (CUPTI's records through torch.profiler, which sees CuPy's and Triton's launches too)."""
import collections

import torch
from torch.profiler import ProfilerActivity, profile


def kernels(fn, reps: int = 20, warmup: int = 3) -> list:
    """[(kernel name, us a call, launches a call)] of fn over `reps` calls after `warmup`, largest
    first."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    total, count = collections.Counter(), collections.Counter()
    for e in prof.events():
        if e.device_type.name == "CUDA":
            total[e.name] += e.device_time
            count[e.name] += 1
    return sorted(((n[:90], round(t / reps, 2), count[n] / reps) for n, t in total.items()), key=lambda r: -r[1])
