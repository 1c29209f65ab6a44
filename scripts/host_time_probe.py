"""Host time per call of cudakit's functional ops on a small input (64x128 float32, where the host
decides), against torch's, back to back: `python3 scripts/host_time_probe.py` on a GPU machine.
Prints `HOST <call> <us>/call` lines (best of 5 timeit repeats of 3000 calls, after 200 warm-up
calls, which also fill the plan caches and native dispatch tables)."""
import timeit

import cupy as cp

import cudakit

x = cp.random.standard_normal((64, 128), dtype=cp.float32)
g = cp.random.standard_normal((64, 128), dtype=cp.float32)
t = cp.zeros(64, cp.int64)
be = cudakit.get_backend("cuda")
w, b = cp.ones(128, cp.float32), cp.zeros(128, cp.float32)
calls = {
    "cudakit.add": lambda: cudakit.add(x, g), "cudakit.sub": lambda: cudakit.sub(x, g),
    "cudakit.mul(x, 0.5)": lambda: cudakit.mul(x, 0.5), "cudakit.sub(1.0, x)": lambda: cudakit.sub(1.0, x),
    "cudakit.relu": lambda: cudakit.relu(x), "cudakit.gelu": lambda: cudakit.gelu(x),
    "cudakit.sigmoid": lambda: cudakit.sigmoid(x), "cudakit.leaky_relu": lambda: cudakit.leaky_relu(x, 0.2),
    "cudakit.silu_backward": lambda: cudakit.silu_backward(g, x),
    "cudakit.softmax": lambda: cudakit.softmax(x), "cudakit.softmax_backward": lambda: cudakit.softmax_backward(g, x),
    "backend.softmax": lambda: be.softmax(x), "cudakit.layernorm": lambda: cudakit.layernorm(x),
    "cudakit.layernorm(x, w, b)": lambda: cudakit.layernorm(x, w, b), "cudakit.rmsnorm": lambda: cudakit.rmsnorm(x),
    "cudakit.layernorm_with_stats": lambda: cudakit.layernorm_with_stats(x),
    "cudakit.sum": lambda: cudakit.sum(x), "cudakit.sum(axis=-1)": lambda: cudakit.sum(x, axis=-1),
    "cudakit.max(axis=0)": lambda: cudakit.max(x, axis=0), "backend.sum": lambda: be.sum(x),
    "cudakit.transpose": lambda: cudakit.transpose(x),
    "cudakit.cross_entropy": lambda: cudakit.cross_entropy(x, t),
}
try:
    import torch
    tx, tg, tw, tb = (torch.from_dlpack(a) for a in (x, g, w, b))
    calls.update({"torch.add": lambda: torch.add(tx, tg), "torch.mul(x, 0.5)": lambda: tx * 0.5,
                  "torch.sigmoid": lambda: torch.sigmoid(tx), "torch.gelu": lambda: torch.nn.functional.gelu(tx),
                  "torch.softmax": lambda: torch.softmax(tx, -1),
                  "torch._softmax_backward_data": lambda: torch._softmax_backward_data(tg, tx, -1, tx.dtype),
                  "torch.layer_norm": lambda: torch.nn.functional.layer_norm(tx, (128,)),
                  "torch.layer_norm(x, w, b)": lambda: torch.nn.functional.layer_norm(tx, (128,), tw, tb),
                  "torch.rms_norm": lambda: torch.nn.functional.rms_norm(tx, (128,)),
                  "torch.sum": lambda: tx.sum(), "torch.sum(dim=-1)": lambda: tx.sum(-1),
                  "torch.amax(dim=0)": lambda: tx.amax(0)})
except ImportError:
    pass
for name, fn in calls.items():
    for _ in range(200):
        fn()
    cp.cuda.runtime.deviceSynchronize()
    best = min(timeit.repeat(fn, number=3000, repeat=5)) / 3000
    cp.cuda.runtime.deviceSynchronize()
    print(f"HOST {name:<24} {best * 1e6:7.2f} us/call", flush=True)
