"""Attention with dropout on the probabilities (p = 0.1): cudakit's forward (attention_with_lse) and
backward (attention_backward) against torch's SDPA with dropout_p, each call's device time behind an
L2 flush (bench.timing's cold samples), in one run. Run it twice with PYTHONPATH on two source
trees to compare two forms of the kernels (the ratio to torch is the comparable figure).
    python3 benchmarks/sweeps/attention_dropout.py [--cases bf16:4x16x1024x64c,...] [--tag name] [--out f.json]
A case: dtype:BxHxLxD, a trailing c for causal. Prints VARIANT lines (ms) and writes the rows to --out."""
import sys

import torch

import cudakit
from _cases import attention_case, cases_and_tag
from _results import dump_rows

from cudakit.bench import timing

argv = sys.argv[1:]
cases, tag = cases_and_tag(argv, ["bf16:4x16x1024x64c", "bf16:2x16x2048x128c", "bf16:8x16x512x64",
                                  "f32:2x16x512x64c", "f32:4x16x1024x64"])
cudakit.set_float32_precision("tf32x3")
sdpa = torch.nn.functional.scaled_dot_product_attention
P = 0.1
rows = []
for spec in cases:
    dtype, causal, (b, h, L, d), (q, k, v, g) = attention_case(spec)
    seed = iter(range(1, 1 << 30))
    out, lse = cudakit.attention_with_lse(q, k, v, None, causal, dropout_p=P, seed=5)
    tq, tk, tv, tg = (torch.from_dlpack(a) for a in (q, k, v, g))
    rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
    y = sdpa(rq, rk, rv, is_causal=causal, dropout_p=P)
    fns = {"torch_fwd": lambda: sdpa(tq, tk, tv, is_causal=causal, dropout_p=P),
           "cudakit_fwd": lambda: cudakit.attention_with_lse(q, k, v, None, causal, dropout_p=P, seed=next(seed)),
           "torch_bwd": lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True),
           "cudakit_bwd": lambda: cudakit.attention_backward(g, q, k, v, out, lse, None, causal, dropout_p=P, seed=5)}
    res, err = timing.time_gpu_interleaved(fns, warmup=3, reps=12, rounds=3, cold=True)
    for name, e in err.items():
        print(f"VARIANT failed {spec} {name}: {type(e).__name__}: {str(e)[:150]}", flush=True)
    row = {"case": spec, **{f"{n}_ms": round(r["median_ms"], 4) for n, r in res.items()}}
    for s in ("fwd", "bwd"):
        if f"cudakit_{s}_ms" in row and f"torch_{s}_ms" in row:
            row[f"x_{s}"] = round(row[f"torch_{s}_ms"] / row[f"cudakit_{s}_ms"], 3)
    rows.append(row)
    print(f"VARIANT dropout{tag} {spec:<22} " + " ".join(f"{n} {row.get(n + '_ms', float('nan')):.4f}" for n in fns)
          + f"  ms; x torch fwd {row.get('x_fwd', float('nan')):.3f} bwd {row.get('x_bwd', float('nan')):.3f}",
          flush=True)
dump_rows(argv, __doc__, rows, tag=tag)
