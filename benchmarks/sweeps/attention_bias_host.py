"""Host time per call of attention with an ALiBi-style (1, H, L, L) bfloat16 bias whose calls cuDNN's graphs take
(B2 H4 S128 D64, its gradient asked for): cudakit's attention_with_lse and attention_backward with the path forced
to cuDNN (the dispatch plans replaying its graphs, kernels/path_plans.py _bias_cudnn), against torch's SDPA
with the bias as attn_mask (forward; torch.autograd.grad with the mask requiring grad for the backward), rounds
interleaved (bench.timing.host_time_interleaved), `--blocks` times in one process (the first block of a fresh
process ran slower for torch too: compare within a block). The checked call: run it again with
CUDAKIT_DISPATCH_PLANS=0 in the environment (read once, when the CUDA backend comes up).
    python3 benchmarks/sweeps/attention_bias_host.py [--blocks 2] [--out f.json]
Prints VARIANT lines (us a call) and writes the rows to --out."""
import os
import sys

import cupy as cp
import torch

import cudakit
from _results import dump_rows

from cudakit import dispatch
from cudakit.bench import timing
from cudakit.kernels import paths

argv = sys.argv[1:]
B, H, T, D = 2, 4, 128, 64
rng = cp.random.default_rng(0)
q, k, v, g = (rng.standard_normal((B, H, T, D), dtype=cp.float32).astype("bfloat16") for _ in range(4))
bias = rng.standard_normal((1, H, T, T), dtype=cp.float32).astype("bfloat16")
tq, tk, tv, tg, tb = (torch.from_dlpack(a) for a in (q, k, v, g, bias))
rq, rk, rv, rb = (x.detach().requires_grad_(True) for x in (tq, tk, tv, tb))
sdpa = torch.nn.functional.scaled_dot_product_attention
y = sdpa(rq, rk, rv, attn_mask=rb)
fns = {"torch_fwd": lambda: sdpa(tq, tk, tv, attn_mask=tb),
       "torch_bwd": lambda: torch.autograd.grad(y, (rq, rk, rv, rb), tg, retain_graph=True)}
real_run = paths.run


def cudnn_first(op, key, candidates, timer=None):   # the cuDNN candidate, as a signature timed to it would run
    return real_run(op, key, [c for c in candidates if c[0] == "cudnn"] or candidates, timer)


paths.run = cudnn_first
rows = []
plans = os.environ.get("CUDAKIT_DISPATCH_PLANS", "1")
for block in range(int(argv[argv.index("--blocks") + 1]) if "--blocks" in argv else 2):
    dispatch.clear()
    out, lse = cudakit.attention_with_lse(q, k, v, attn_bias=bias)
    res, err = timing.host_time_interleaved(
        {"cudakit_fwd": lambda: cudakit.attention_with_lse(q, k, v, attn_bias=bias),
         "cudakit_bwd": lambda: cudakit.attention_backward(g, q, k, v, out, lse, attn_bias=bias),
         **fns}, calls=500, rounds=7, sync=cp.cuda.Device().synchronize)
    for name, e in err.items():
        print(f"VARIANT failed {name}: {type(e).__name__}: {str(e)[:150]}", flush=True)
    us = {n: r["median_ms"] * 1e3 for n, r in res.items()}
    row = {"block": block, "dispatch_plans": plans, **{f"{n}_us": round(t, 3) for n, t in us.items()},
           "paths": {op: paths.last_paths().get(op) for op in ("attention", "attention_backward")}}
    for kind in ("fwd", "bwd"):
        if f"cudakit_{kind}" in us and f"torch_{kind}" in us:
            row[f"x_{kind}"] = round(us[f"torch_{kind}"] / us[f"cudakit_{kind}"], 3)
    row["plans"] = {key[0]: getattr(p, "__module__", type(p).__name__) for key, p in dispatch._plans.items()
                    if p is not None}
    print(f"VARIANT bias-host block {block} plans={plans} " + " ".join(f"{n} {t:.2f}" for n, t in us.items())
          + f" us; x torch fwd {row.get('x_fwd', float('nan')):.3f} bwd {row.get('x_bwd', float('nan')):.3f}; "
          f"paths {row['paths']} plans {row['plans']}", flush=True)
    rows.append(row)
dump_rows(argv, __doc__, rows)
