"""cProfile of the host path of composite calls on small shapes (GPU machine): where the
microseconds go. `python3 scripts/host_profile.py` prints the top functions (tottime) per call."""
import cProfile
import io
import pstats
import timeit

import cupy as cp

import cudakit
from cudakit.kernels import cublaslt

x = cp.random.standard_normal((64, 128), dtype=cp.float32)
g = cp.random.standard_normal((64, 128), dtype=cp.float32)
w, b = cp.ones(128, cp.float32), cp.zeros(128, cp.float32)
t = cp.zeros(64, cp.int64)
q = cp.random.standard_normal((2, 4, 64, 32), dtype=cp.float32).astype("bfloat16")
mean, rstd = cudakit.layernorm_with_stats(x, w, b)[1:]
o, lse = cudakit.attention_with_lse(q, q, q, causal=True)
go, kk, vv = o.copy(), q.copy(), q.copy()   # distinct arrays: a trace refuses one array passed twice
W = cp.random.standard_normal((256, 128), dtype=cp.float32)
Wb = cp.zeros(256, cp.float32)
calls = {
    "attention_with_lse": lambda: cudakit.attention_with_lse(q, q, q, causal=True),
    "attention_backward": lambda: cudakit.attention_backward(go, q, kk, vv, o, lse, causal=True),
    "layernorm_backward": lambda: cudakit.layernorm_backward(g, x, w, mean, rstd),
    "permute": lambda: cudakit.permute(q, (0, 2, 1, 3)),
    "cross_entropy_with_grad": lambda: cudakit.cross_entropy_with_grad(x, t),
    "linear": lambda: cudakit.linear(x, W, Wb),
}
for name, fn in calls.items():
    for _ in range(100):
        fn()
    cp.cuda.runtime.deviceSynchronize()
    us = min(timeit.repeat(fn, number=1000, repeat=3)) / 1000 * 1e6
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(300):
        fn()
    pr.disable()
    cp.cuda.runtime.deviceSynchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    print(f"PROFILE ===== {name}: {us:.1f} us/call (300 calls profiled)")
    print("\n".join(l for l in s.getvalue().splitlines() if l.strip() and not l.startswith(("   Ordered", "   List")))[:3500])
# the cuBLASLt call alone, every argument precomputed
out = cp.empty((1, 64, 256), cp.float32)
bp = cublaslt.bound(x.reshape(1, 64, 128), W.reshape(1, 256, 128), out, False, True, Wb)
nat = cublaslt._native()
handle, desc, (la, lb, lc, ld), algo, wsize, scal, _ = bp
args = (nat[1], nat[2], handle.value, desc.value, Wb.data.ptr, 0, cublaslt._scalar_ptr(scal, 1.0), W.data.ptr, la.value,
        x.data.ptr, lb.value, cublaslt._scalar_ptr(scal, 0.0), out.data.ptr, lc.value, out.data.ptr, ld.value, algo, 0, 0,
        cp.cuda.get_current_stream().ptr)
f = nat[0]
for bias in (Wb.data.ptr, 0):
    a = args[:4] + (bias,) + args[5:]
    us = min(timeit.repeat(lambda: f(*a), number=3000, repeat=5)) / 3000 * 1e6
    print(f"LTCALL native lt_matmul bias={'set' if bias else 'none'}: {us:.2f} us/call")
cp.cuda.runtime.deviceSynchronize()
