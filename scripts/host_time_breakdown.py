"""Where the host time of a planned linear call goes (GPU machine): each stage alone, best of 5
timeit repeats of 3000 calls. `python3 scripts/host_time_breakdown.py`."""
import timeit

import cupy as cp

import cudakit
from cudakit import dispatch
from cudakit.kernels import cublaslt

x = cp.random.standard_normal((64, 128), dtype=cp.float32)
W = cp.random.standard_normal((256, 128), dtype=cp.float32)
b = cp.zeros(256, cp.float32)
for _ in range(10):
    cudakit.linear(x, W, b)
plan = [p for k, p in dispatch._plans.items() if k[0] == "linear"][0]
out = cp.empty((1, 64, 256), cp.float32)
bp = cublaslt.bound(x.reshape(1, 64, 128), W.reshape(1, 256, 128), out, False, True, b)
stages = {
    "ops.linear (planned)": lambda: cudakit.linear(x, W, b),
    "dispatch.signature": lambda: dispatch.signature((x, W, b)),
    "plan(x, W, b)": lambda: plan(x, W, b),
    "cp.ndarray((64, 256))": lambda: cp.ndarray((64, 256), cp.float32),
    "cublaslt.run": lambda: cublaslt.run(bp, x.data.ptr, W.data.ptr, out.data.ptr, 0.0, b.data.ptr),
    "get_current_stream().ptr": lambda: cp.cuda.get_current_stream().ptr,
    "be.linear (checked)": lambda: cudakit.get_backend("cuda").linear(x, W, b),
}
print("plan:", plan, "workspace bytes:", bp[4], "plan ready:", dispatch._ready())
for name, fn in stages.items():
    for _ in range(200):
        fn()
    cp.cuda.runtime.deviceSynchronize()
    best = min(timeit.repeat(fn, number=3000, repeat=5)) / 3000
    cp.cuda.runtime.deviceSynchronize()
    print(f"BREAKDOWN {name:<28} {best * 1e6:7.2f} us/call", flush=True)
