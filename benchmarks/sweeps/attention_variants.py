"""Tile sizes of the fused attention kernels (kernels/attention.py) against torch's SDPA, in one run:
bfloat16 (B, H, L, D) = (8, 16, 4096, D), each variant interleaved round by round with torch.
    python3 benchmarks/sweeps/attention_variants.py [--d 64,128] [--causal]
Prints VARIANT lines: median ms, TFLOP/s and the ratio to torch for each forward and backward tile
set (the shipped one marked), and the error of a variant that fails to compile or launch. FLOPs:
4 B H L^2 D forward, 10 B H L^2 D backward (halved with causal)."""
import statistics
import sys

import cupy as cp
import ml_dtypes
import torch

from _medians import run_medians
from cudakit.kernels import attention as at

B, H, L = 8, 16, 4096
ROUNDS = 3
FWD = [{}, {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3},
       {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 4},
       {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 4},
       {"BLOCK_M": 128, "BLOCK_N": 32, "num_warps": 4, "num_stages": 4},
       {"BLOCK_M": 256, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}]
KV = [{"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2},   # shipped at head_dim 128
      {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
      {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
      {"BLOCK_M": 32, "BLOCK_N": 64, "num_warps": 4, "num_stages": 4}]
QC = [{"BLOCK_M": 128, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3},
      {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
      {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}]

argv = sys.argv[1:]
dims = [64, 128]
if "--d" in argv:
    dims = [int(v) for v in argv[argv.index("--d") + 1].split(",")]
causal = "--causal" in argv
sdpa = torch.nn.functional.scaled_dot_product_attention


def report(label, fns, flops):
    ms, errors = run_medians(fns, ROUNDS, reps=6)
    base = statistics.median(ms.pop("torch"))
    for name, v in sorted(ms.items(), key=lambda kv: statistics.median(kv[1])):
        m = statistics.median(v)
        print(f"VARIANT {label} {name:<60} {m:8.3f} ms {flops / m / 1e9:6.0f} TFLOP/s  x torch {base / m:.3f}")
    for name, e in errors.items():
        print(f"VARIANT {label} {name:<60} failed: {type(e).__name__}: {str(e)[:120]}")


for d in dims:
    q, k, v, g = (cp.random.default_rng(i).standard_normal((B * H, L, d), dtype=cp.float32).astype(ml_dtypes.bfloat16)
                  for i in range(4))
    scale = d ** -0.5
    tq, tk, tv, tg = (torch.from_dlpack(a).view(B, H, L, d) for a in (q, k, v, g))
    per = B * H * L * L * d * (0.5 if causal else 1.0)
    fns = {"torch": lambda: sdpa(tq, tk, tv, is_causal=causal)}
    for t in FWD:
        fns[f"fwd {t or 'shipped'}"] = lambda t=t: at.forward(q, k, v, scale, causal, "bfloat16", tiles=t)
    report(f"d={d} causal={causal} forward", fns, 4 * per)
    out, lse = at.forward(q, k, v, scale, causal, "bfloat16")
    rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
    y = sdpa(rq, rk, rv, is_causal=causal)
    fns = {"torch": lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True),
           "bwd shipped": lambda: at.backward(g, q, k, v, out, lse, scale, causal, "bfloat16")}
    for kv in KV:
        for qc in QC:
            fns[f"bwd kv{tuple(kv.values())} q{tuple(qc.values())}"] = (
                lambda kv=kv, qc=qc: at.backward(g, q, k, v, out, lse, scale, causal, "bfloat16", tiles=(kv, qc)))
    report(f"d={d} causal={causal} backward", fns, 10 * per)
