"""The float32 materialised backward (tf32x3) with grouped-query k, v: dK, dV summed over each group by the
long products themselves (mat_long GROUPS) against per q head and summed after by cudakit's reduction, each
call's device time behind an L2 flush (bench.timing's cold samples), in one run, beside torch's fastest
(enable_gqa=True or k, v repeated). attention_materialized.sum_groups picks one form by a bound (two programs
an SM) that no timing chose: this sweep is the measurement to set it by.
    python3 benchmarks/sweeps/attention_f32_gqa_sum.py [--cases 1x32x8x1024x128c,...] [--out f.json]
A case: BxHxHKVxLxD, a trailing c for causal. Prints VARIANT lines (ms) and writes the rows to --out."""
import math
import sys

import cupy as cp
import numpy as np
import torch

import cudakit
from _results import dump_rows

from cudakit.backends.attention_masks import Masks
from cudakit.bench import timing
from cudakit.kernels import attention as at
from cudakit.kernels import attention_materialized as am
from cudakit.runtime.device import get_device_info

argv = sys.argv[1:]
cases = ["1x32x8x1024x128c", "2x16x4x512x64c", "1x16x1x1024x128c", "4x32x4x512x64", "1x8x2x256x128",
         "2x32x8x2048x128c", "8x16x2x512x64"]
if "--cases" in argv:
    cases = argv[argv.index("--cases") + 1].split(",")
cudakit.set_float32_precision("tf32x3")
sdpa = torch.nn.functional.scaled_dot_product_attention
shipped = am.sum_groups
rows = []
for spec in cases:
    causal = spec.endswith("c")
    b, h, hkv, L, d = (int(x) for x in spec.rstrip("c").split("x"))
    groups = h // hkv
    rng = cp.random.default_rng(0)
    q, g = (rng.standard_normal((b, h, L, d), dtype=cp.float32) for _ in range(2))
    k, v = (rng.standard_normal((b, hkv, L, d), dtype=cp.float32) for _ in range(2))
    out, lse = cudakit.attention_with_lse(q, k, v, None, causal)
    q3, g3, o3 = (x.reshape(b * h, L, d) for x in (q, g, out))
    k3, v3 = (x.reshape(b * hkv, L, d) for x in (k, v))
    l3 = lse.reshape(b * h, L)
    masks, scale = Masks(causal), d ** -0.5

    def form(summed: bool):
        def run():
            am.sum_groups = lambda *a: summed
            try:
                dq, dk, dv = at._materialized_backward(g3, q3, k3, v3, o3, l3, scale, masks, groups)
            finally:
                am.sum_groups = shipped
            if dk.shape[0] != b * hkv:   # per q head: summed over each group as the backend sums them
                dk, dv = (cudakit.sum(x.reshape(b, hkv, groups, L, d), axis=2).reshape(b * hkv, L, d) for x in (dk, dv))
            return dq, dk, dv
        return run
    tq, tk, tv, tg = (torch.from_dlpack(a) for a in (q, k, v, g))
    rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
    y = sdpa(rq, rk, rv, is_causal=causal, enable_gqa=True)
    rk2, rv2 = (x.repeat_interleave(groups, 1).detach().requires_grad_(True) for x in (tk, tv))
    y2 = sdpa(rq, rk2, rv2, is_causal=causal)
    fns = {"torch_gqa": lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True),
           "torch_repeat": lambda: torch.autograd.grad(y2, (rq, rk2, rv2), tg, retain_graph=True),
           "in_kernels": form(True), "per_head": form(False),
           "public": lambda: cudakit.attention_backward(g, q, k, v, out, lse, None, causal)}
    a, c = form(True)(), form(False)()   # the two forms agree (float32 sums in another order)
    for x, y_ in zip(a, c):
        np.testing.assert_allclose(cp.asnumpy(x), cp.asnumpy(y_), rtol=1e-4, atol=1e-4 * float(cp.abs(y_).max()))
    res, err = timing.time_gpu_interleaved(fns, warmup=3, reps=12, rounds=3, cold=True)
    for name, e in err.items():
        print(f"VARIANT failed {spec} {name}: {type(e).__name__}: {str(e)[:150]}", flush=True)
    row = {"case": spec, **{f"{n}_ms": round(r["median_ms"], 4) for n, r in res.items()}}
    sms = get_device_info().multiprocessors
    row["programs"] = math.ceil(L / am.LONG_TILES["BLOCK_M"]) * b * hkv   # the bound's count (one chunk)
    row["bound_sums"] = bool(shipped(groups, row["programs"], sms))
    anchor = min(row[n] for n in ("torch_gqa_ms", "torch_repeat_ms") if n in row)
    for n in ("in_kernels", "per_head", "public"):
        if f"{n}_ms" in row:
            row[f"x_{n}"] = round(anchor / row[f"{n}_ms"], 3)
    rows.append(row)
    print(f"VARIANT gqa-sum {spec:<20} programs {row['programs']:5d} bound sums {row['bound_sums']!s:<5} "
          + " ".join(f"{n} {row.get(n + '_ms', float('nan')):.4f}" for n in fns) + " ms", flush=True)
dump_rows(argv, __doc__, rows)
