"""Which kernels a float32 attention call launches and how long each runs on the device (CUPTI's
records through torch.profiler), cudakit's public call beside torch's float32 SDPA, forward and
backward: where the time of the short, small-grid cases goes.
    python3 benchmarks/sweeps/attention_f32_kernels.py [--cases 1x16x256x80,...] [--reps 20] [--out f.json]
A case: BxHxLxD, a trailing c for causal. Inputs stay in L2 between calls (warm: the breakdown, not
the cold figure the benchmark reports). Prints per-kernel lines (us a call) and writes the rows to --out."""
import sys

import cupy as cp
import torch
from _kernels import kernels
from _results import dump_rows

import cudakit
from cudakit import config

argv = sys.argv[1:]
cases = ["1x16x256x80", "2x8x256x96c", "8x8x256x128", "1x16x512x128"]
if "--cases" in argv:
    cases = argv[argv.index("--cases") + 1].split(",")
reps = int(argv[argv.index("--reps") + 1]) if "--reps" in argv else 20
sdpa = torch.nn.functional.scaled_dot_product_attention


rows = []
for spec in cases:
    causal = spec.endswith("c")
    b, h, L, d = (int(x) for x in spec.rstrip("c").split("x"))
    rng = cp.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((b, h, L, d), dtype=cp.float32) for _ in range(4))
    out, lse = cudakit.attention_with_lse(q, k, v, None, causal)
    tq, tk, tv, tg = (torch.from_dlpack(a) for a in (q, k, v, g))
    rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
    y = sdpa(rq, rk, rv, is_causal=causal)
    fns = {"cudakit_fwd": lambda: cudakit.attention_with_lse(q, k, v, None, causal),
           "torch_fwd": lambda: sdpa(tq, tk, tv, is_causal=causal),
           "cudakit_bwd": lambda: cudakit.attention_backward(g, q, k, v, out, lse, None, causal),
           "torch_bwd": lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True)}
    for name, fn in fns.items():
        ks = kernels(fn, reps)
        rows.append({"case": spec, "call": name, "device_us": round(sum(r[1] for r in ks), 2),
                     "kernels": [{"name": n, "us": t, "launches": c} for n, t, c in ks]})
        print(f"KERNELS {spec:<14} {name:<12} {rows[-1]['device_us']:8.2f} us in {sum(r[2] for r in ks):.0f} launches",
              flush=True)
        for n, t, c in ks:
            print(f"    {t:8.2f} us  x{c:.0f}  {n}", flush=True)
dump_rows(argv, __doc__, rows, precision=config.float32_precision())
