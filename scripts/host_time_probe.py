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
# the composite calls of a model step (issue 25's list), small shapes where the host decides
W = cp.random.standard_normal((256, 128), dtype=cp.float32)
Wb = cp.zeros(256, cp.float32)
G = cp.random.standard_normal((64, 256), dtype=cp.float32)
q4 = cp.random.standard_normal((2, 4, 64, 32), dtype=cp.float32).astype("bfloat16")
mean, rstd = cudakit.layernorm_with_stats(x, w, b)[1:]
ao, alse = cudakit.attention_with_lse(q4, q4, q4, causal=True)
calls.update({
    "cudakit.linear": lambda: cudakit.linear(x, W, Wb), "cudakit.matmul": lambda: cudakit.matmul(x, W.T),
    "cudakit.linear_backward": lambda: cudakit.linear_backward(G, x, W),
    "cudakit.fused_linear_gelu_with_preact": lambda: cudakit.fused_linear_gelu_with_preact(x, W, Wb),
    "cudakit.permute": lambda: cudakit.permute(q4, (0, 2, 1, 3)),
    "cudakit.attention_with_lse": lambda: cudakit.attention_with_lse(q4, q4, q4, causal=True),
    "cudakit.attention_backward": lambda: cudakit.attention_backward(ao, q4, q4, q4, ao, alse, causal=True),
    "cudakit.layernorm_backward": lambda: cudakit.layernorm_backward(g, x, w, mean, rstd),
    "cudakit.cross_entropy_with_grad": lambda: cudakit.cross_entropy_with_grad(x, t),
})
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
    F = torch.nn.functional
    tW, tWb, tG = (torch.from_dlpack(a) for a in (W, Wb, G))
    tq = torch.from_dlpack(q4)
    txr = tx.clone().requires_grad_(True)
    tqr = tq.clone().requires_grad_(True)
    to = F.scaled_dot_product_attention(tqr, tqr, tqr, is_causal=True)
    ty = F.layer_norm(txr, (128,), tw, tb)
    tlog = tx.clone().requires_grad_(True)
    tt = torch.from_dlpack(t)
    calls.update({
        "torch.linear": lambda: F.linear(tx, tW, tWb), "torch.matmul": lambda: torch.matmul(tx, tW.T),
        # linear's backward as autograd runs it: two GEMMs and a sum
        "torch.linear_backward(3 ops)": lambda: (tG @ tW, tG.T @ tx, tG.sum(0)),
        "torch.linear+gelu": lambda: F.gelu(F.linear(tx, tW, tWb), approximate="tanh"),
        "torch.permute.contiguous": lambda: tq.permute(0, 2, 1, 3).contiguous(),
        "torch.sdpa": lambda: F.scaled_dot_product_attention(tq, tq, tq, is_causal=True),
        "torch.sdpa_backward(autograd)": lambda: torch.autograd.grad(to, (tqr,), to, retain_graph=True),
        "torch.layer_norm_backward(autograd)": lambda: torch.autograd.grad(ty, (txr,), tg, retain_graph=True),
        "torch.cross_entropy fwd+bwd": lambda: torch.autograd.grad(F.cross_entropy(tlog, tt), (tlog,)),
    })
except ImportError:
    pass
for name, fn in calls.items():
    for _ in range(200):
        fn()
    cp.cuda.runtime.deviceSynchronize()
    best = min(timeit.repeat(fn, number=3000, repeat=5)) / 3000
    cp.cuda.runtime.deviceSynchronize()
    print(f"HOST {name:<38} {best * 1e6:7.2f} us/call", flush=True)
