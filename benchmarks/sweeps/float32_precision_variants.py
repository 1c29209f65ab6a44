"""float32 conv2d and attention under each cudakit.float32_precision() (ieee, tf32x3, tf32) against
torch (cuDNN with TF32, its default, and with TF32 off), interleaved in one run, and each
precision's largest error against float64. One run on the GPU (2026-11-25, H100: about 3 minutes):
    python3 benchmarks/sweeps/float32_precision_variants.py
Prints VARIANT lines: median ms, TFLOP/s and the ratio to torch's default for each precision."""
import statistics

import cupy as cp
import torch

import cudakit
from _medians import run_medians
from cudakit.kernels import attention as at

PRECS = ("ieee", "tf32x3", "tf32")
ROUNDS = 3


def report(label, fns, flops):
    ms, errors = run_medians(fns, ROUNDS, reps=8)
    base = statistics.median(ms["torch"])
    for name, v in sorted(ms.items(), key=lambda kv: statistics.median(kv[1])):
        m = statistics.median(v)
        print(f"VARIANT {label} {name:<28} {m:8.3f} ms {flops / m / 1e9:6.1f} TFLOP/s x torch(tf32 default) {base / m:.3f}", flush=True)
    for name, e in errors.items():
        print(f"VARIANT {label} {name} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)


def with_prec(p, f):
    def g():
        cudakit.set_float32_precision(p)
        return f()
    return g


def no_tf32(f):
    def g():
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            return f()
    return g


rng = cp.random.default_rng(0)
# accuracy: error / (|x| * |w| sums), worst element, small conv against float64
x64 = rng.standard_normal((4, 64, 20, 20))
w64 = rng.standard_normal((32, 64, 3, 3))
ref = cudakit.conv2d(x64, w64, None, 1, 1)
mag = cudakit.conv2d(cp.abs(x64), cp.abs(w64), None, 1, 1)
for p in PRECS:
    cudakit.set_float32_precision(p)
    y = cudakit.conv2d(x64.astype(cp.float32), w64.astype(cp.float32), None, 1, 1)
    print(f"VARIANT accuracy conv2d {p}: max err/mag {float(cp.max(cp.abs(y - ref) / mag)):.3g}", flush=True)
tx, tw = torch.from_dlpack(x64.astype(cp.float32)), torch.from_dlpack(w64.astype(cp.float32))
print(f"VARIANT accuracy conv2d torch tf32-default: {float(cp.max(cp.abs(cp.from_dlpack(torch.nn.functional.conv2d(tx, tw, None, 1, 1)) - ref) / mag)):.3g}")
q64, k64, v64 = (rng.standard_normal((2, 4, 300, 64)) for _ in range(3))
ref = cudakit.attention(*(cp.asnumpy(a) for a in (q64, k64, v64)))
for p in PRECS:
    cudakit.set_float32_precision(p)
    o = cudakit.attention(*(a.astype(cp.float32) for a in (q64, k64, v64)))
    print(f"VARIANT accuracy attention {p}: max abs err {float(abs(cp.asnumpy(o) - ref).max()):.3g}", flush=True)

for (n, c, hw, k) in [(32, 64, 56, 64), (32, 64, 128, 128)]:
    x = rng.standard_normal((n, c, hw, hw), dtype=cp.float32)
    w = rng.standard_normal((k, c, 3, 3), dtype=cp.float32) * (9 * c) ** -0.5
    b = rng.standard_normal((k,), dtype=cp.float32)
    g = rng.standard_normal((n, k, hw, hw), dtype=cp.float32)
    tx, tw, tb, tg = (torch.from_dlpack(a) for a in (x, w, b, g))
    flops = 2 * n * k * hw * hw * c * 9
    fns = {"torch": lambda: torch.nn.functional.conv2d(tx, tw, tb, 1, 1),
           "torch no-tf32": no_tf32(lambda: torch.nn.functional.conv2d(tx, tw, tb, 1, 1))}
    for p in PRECS:
        fns[p] = with_prec(p, lambda: cudakit.conv2d(x, w, b, 1, 1))
    report(f"conv2d {n}x{c}x{hw}x{hw} k{k}", fns, flops)
    rx, rw, rb = (v.detach().requires_grad_(True) for v in (tx, tw, tb))
    y = torch.nn.functional.conv2d(rx, rw, rb, 1, 1)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        y2 = torch.nn.functional.conv2d(rx, rw, rb, 1, 1)
    fns = {"torch": lambda: torch.autograd.grad(y, (rx, rw, rb), tg, retain_graph=True),
           "torch no-tf32": no_tf32(lambda: torch.autograd.grad(y2, (rx, rw, rb), tg, retain_graph=True))}
    for p in PRECS:
        fns[p] = with_prec(p, lambda: cudakit.conv2d_backward(g, x, w, 1, 1))
    report(f"conv2d_backward {n}x{c}x{hw}x{hw} k{k}", fns, 2 * flops)

sdpa = torch.nn.functional.scaled_dot_product_attention
for d in (64, 128):
    B, H, L = 4, 8, 2048
    q, k, v, g = (rng.standard_normal((B * H, L, d), dtype=cp.float32) for _ in range(4))
    tq, tk, tv, tg = (torch.from_dlpack(a).view(B, H, L, d) for a in (q, k, v, g))
    per = B * H * L * L * d
    fns = {"torch": lambda: sdpa(tq, tk, tv)}
    for p in PRECS:
        fns[p] = with_prec(p, lambda: at.forward(q, k, v, d ** -0.5, False, "float32"))
    report(f"attention f32 d={d}", fns, 4 * per)
    outs = {}
    for p in PRECS:
        cudakit.set_float32_precision(p)
        outs[p] = at.forward(q, k, v, d ** -0.5, False, "float32")
    rq, rk, rv = (t.detach().requires_grad_(True) for t in (tq, tk, tv))
    y = sdpa(rq, rk, rv)
    fns = {"torch": lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True)}
    for p in PRECS:
        fns[p] = with_prec(p, lambda p=p: at.backward(g, q, k, v, outs[p][0], outs[p][1], d ** -0.5, False, "float32"))
    report(f"attention_backward f32 d={d}", fns, 10 * per)
