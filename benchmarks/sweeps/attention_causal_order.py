"""Causal forwards of the Triton kernel (kernels/attention.py _triton_forward, not cuDNN) in the
grid's program order and longest first over groups of batch*heads (attn_fwd's LPT), for the forwards
the shipped order does not cover (16-bit; float32 outside the split forward's head dims), against
torch's SDPA and cuDNN's flash forward (kernels/cudnn.py, where installed), interleaved, warm.
    python3 benchmarks/sweeps/attention_causal_order.py [--shapes 16x16x1024x64,...] [--dtypes bfloat16,float32]
Prints VARIANT lines: median ms over 3 runs, TFLOP/s (2 BH L^2 D, causal) and x torch."""
import statistics
import sys

import cupy as cp
import torch

import cudakit
from cudakit.backends.attention_masks import Masks
from cudakit.kernels import attention as at

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _medians import run_medians  # noqa: E402

argv = sys.argv[1:]
shapes = [(16, 16, 1024, 64), (4, 16, 4096, 128), (8, 16, 2048, 64)]
if "--shapes" in argv:
    shapes = [tuple(int(x) for x in s.split("x")) for s in argv[argv.index("--shapes") + 1].split(",")]
dtypes = argv[argv.index("--dtypes") + 1].split(",") if "--dtypes" in argv else ["bfloat16"]
cudakit.set_float32_precision("tf32x3")
sdpa = torch.nn.functional.scaled_dot_product_attention
shipped_order = at._order


def ordered(group):
    """_order giving `group` to every causal forward (0: the grid's order)."""
    def order(dlo, dhi):
        return group if dlo <= -at._UNBOUNDED < dhi < at._UNBOUNDED else 0
    return order


for dtype in dtypes:
    for b, h, L, d in shapes:
        rng = cp.random.default_rng(0)
        q, k, v = (rng.standard_normal((b * h, L, d), dtype=cp.float32).astype(dtype) for _ in range(3))
        tq, tk, tv = (torch.from_dlpack(a).view(b, h, L, d) for a in (q, k, v))
        scale = d ** -0.5
        fns = {"torch": lambda: sdpa(tq, tk, tv, is_causal=True)}
        for group in (0, 16, 32):
            def f(group=group):
                at._order = ordered(group)
                try:
                    return at._triton_forward(q, k, v, scale, Masks(True), dtype)
                finally:
                    at._order = shipped_order
            fns[f"triton, {'longest first, groups of %d' % group if group else 'grid order'}"] = f
        if dtype != "float32" and at._cudnn_candidate(dtype, d, scale):
            from cudakit.kernels import cudnn
            fns["cudnn"] = lambda: cudnn.sdpa_forward(q, k, v, scale, True)
        ref = at._triton_forward(q, k, v, scale, Masks(True), dtype)[0]
        at._order = ordered(16)
        got = at._triton_forward(q, k, v, scale, Masks(True), dtype)[0]
        at._order = shipped_order
        same = bool(cp.array_equal(ref, got))
        ms, errors = run_medians(fns, 3, reps=6)
        base = statistics.median(ms.pop("torch"))
        flops = 2 * b * h * L * L * d
        label = f"{b}x{h}x{L}x{d} {dtype} causal forward"
        print(f"VARIANT {label} torch {base:8.3f} ms {flops / base / 1e9:6.1f} TFLOP/s (orders bitwise equal: {same})",
              flush=True)
        for name, m in sorted(((n, statistics.median(v)) for n, v in ms.items()), key=lambda x: x[1]):
            print(f"VARIANT {label} {name:<40} {m:8.3f} ms {flops / m / 1e9:6.1f} TFLOP/s x torch {base / m:.3f}",
                  flush=True)
        for name, e in errors.items():
            print(f"VARIANT {label} {name} failed: {type(e).__name__}: {str(e)[:150]}", flush=True)
