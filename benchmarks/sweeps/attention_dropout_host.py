"""Host time per call of attention with dropout on a small bfloat16 problem (B2 H2 S64 D32, p 0.1, a new seed
every call): cudakit's attention_with_lse and attention_backward under CUDAKIT_ATTENTION_DROPOUT=cudnn (the
default since 2026-11-28: cuDNN's dropout graphs, planned), then =cudakit (cudakit's stream: the Triton kernels'
traced plans), against
torch's SDPA with dropout_p (forward; torch.autograd.grad for the backward), rounds interleaved
(bench.timing.host_time_interleaved), in one process.
    python3 benchmarks/sweeps/attention_dropout_host.py [--parts] [--out f.json]
A step: the forward, then its backward with the forward's seed (torch: SDPA and torch.autograd.grad).
--parts: also, under cudnn, the parts of the forward's plan timed alone (the seed words: host
memory cuDNN reads by value since 2026-11-28, before that a launch writing device words;
the output allocations, the graph's execution on fixed pointers) beside the forward without
dropout (cuDNN's plan) and torch's SDPA without it.
Prints VARIANT lines (us a call) and writes the rows to --out."""
import itertools
import os
import sys

import cupy as cp
import torch

import cudakit
from _results import dump_rows

from cudakit import config, dispatch
from cudakit.bench import timing

argv = sys.argv[1:]
B, H, T, D, P = 2, 2, 64, 32, 0.1
rng = cp.random.default_rng(0)
q, k, v, g = (rng.standard_normal((B, H, T, D), dtype=cp.float32).astype("bfloat16") for _ in range(4))
tq, tk, tv, tg = (torch.from_dlpack(a) for a in (q, k, v, g))
rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
sdpa = torch.nn.functional.scaled_dot_product_attention
y = sdpa(rq, rk, rv, is_causal=True, dropout_p=P)
seeds = itertools.count(1)
fns = {"torch_fwd": lambda: sdpa(tq, tk, tv, is_causal=True, dropout_p=P),
       "torch_bwd": lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True),
       "torch_step": lambda: torch.autograd.grad(sdpa(rq, rk, rv, is_causal=True, dropout_p=P), (rq, rk, rv), tg)}
rows = []
for stream in ("cudnn", "cudakit"):
    os.environ["CUDAKIT_ATTENTION_DROPOUT"] = stream
    config.reload()
    dispatch.clear()
    out, lse = cudakit.attention_with_lse(q, k, v, causal=True, dropout_p=P, seed=5)
    parts = {}
    if "--parts" in argv and stream == "cudnn":
        from cudakit.kernels import cudnn, path_plans
        run, _ = path_plans._cudnn_dropout_run("fwd", (q, k, v), None, True, "bhld", None, None, None, P)
        words, (s_ptr, o_ptr) = cudnn.dropout_operands(5)
        parts = {"part_seed_words": lambda: cudnn.dropout_operands(next(seeds)),
                 "part_alloc": lambda: (cp.ndarray(q.shape, q.dtype), cp.ndarray((B, H, T), cp.float32)),
                 "part_execute": lambda: run(q.data.ptr, k.data.ptr, v.data.ptr, s_ptr, o_ptr, out.data.ptr,
                                             lse.data.ptr),
                 "plain_fwd": lambda: cudakit.attention_with_lse(q, k, v, causal=True),
                 "torch_plain_fwd": lambda: sdpa(tq, tk, tv, is_causal=True)}
    def step():   # a training step's pair: the forward, then its backward with the forward's seed
        s = next(seeds)
        o, m = cudakit.attention_with_lse(q, k, v, causal=True, dropout_p=P, seed=s)
        return cudakit.attention_backward(g, q, k, v, o, m, causal=True, dropout_p=P, seed=s)
    res, err = timing.host_time_interleaved(
        {f"{stream}_fwd": lambda: cudakit.attention_with_lse(q, k, v, causal=True, dropout_p=P, seed=next(seeds)),
         f"{stream}_bwd": lambda: cudakit.attention_backward(g, q, k, v, out, lse, causal=True, dropout_p=P,
                                                             seed=next(seeds)),
         f"{stream}_step": step, **fns, **parts}, calls=500, rounds=7, sync=cp.cuda.Device().synchronize)
    for name, e in err.items():
        print(f"VARIANT failed {name}: {type(e).__name__}: {str(e)[:150]}", flush=True)
    us = {n: r["median_ms"] * 1e3 for n, r in res.items()}
    row = {"stream": stream, **{f"{n}_us": round(t, 3) for n, t in us.items()}}
    for kind in ("fwd", "bwd", "step"):
        if f"{stream}_{kind}" in us and f"torch_{kind}" in us:
            row[f"x_{kind}"] = round(us[f"torch_{kind}"] / us[f"{stream}_{kind}"], 3)
    kinds = {key[0]: type(p).__name__ for key, p in dispatch._plans.items() if p is not None}
    row["plans"] = kinds
    print(f"VARIANT dropout-host {stream:<8} " + " ".join(f"{n} {t:.2f}" for n, t in us.items())
          + f" us; x torch fwd {row.get('x_fwd', float('nan')):.3f} bwd {row.get('x_bwd', float('nan')):.3f} "
          f"step {row.get('x_step', float('nan')):.3f}; "
          f"plans {kinds}", flush=True)
    rows.append(row)
dump_rows(argv, __doc__, rows)
