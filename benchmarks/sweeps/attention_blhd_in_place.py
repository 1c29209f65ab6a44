"""Layout "blhd" with masks: q, k, v the views of one qkv projection (B, L, 3, H, D), read in place by
the Triton kernels (kernels/attention.py triton_forward_blhd, triton_backward_blhd) against the
path on transposed copies (each forced through kernels/paths.py's "attention_layout" choice) and
against torch's SDPA on the same views (permuted to (B, H, L, D), the window as a boolean mask),
and the public call as it runs (auto: kernels/paths.py's timed choice between the two), the backward
with qkv_packed=True too (*_bwd_packed), each call's device time behind an L2 flush (bench.timing's
cold samples), in one run.
    python3 benchmarks/sweeps/attention_blhd_in_place.py [--cases bf16:4x16x1024x64c,...] [--window N]
        [--tag name] [--out f.json]
A case: dtype:BxHxLxD, a trailing c for causal; every case takes window=(N, 0) (default 256: keys
from N before each query to the query). Prints VARIANT lines (ms; x_copy: the transposing path's
time over in place's) and writes the rows to --out."""
import os
import sys

os.environ.setdefault("CUDAKIT_DISPATCH_PLANS", "0")   # (a plan would replay the first path it saw, not the forced one)
import cupy as cp  # noqa: E402
import torch  # noqa: E402

import cudakit  # noqa: E402
from _cases import DTYPES, cases_and_tag  # noqa: E402
from _results import dump_rows  # noqa: E402

from cudakit.bench import timing  # noqa: E402
from cudakit.kernels import paths  # noqa: E402

argv = sys.argv[1:]
cases, tag = cases_and_tag(argv, ["bf16:4x16x1024x64c", "bf16:2x16x2048x128c", "f16:8x16x512x64c",
                                  "f32:4x16x1024x64c", "f32:2x16x2048x128c"])
window = int(argv[argv.index("--window") + 1]) if "--window" in argv else 256
sdpa = torch.nn.functional.scaled_dot_product_attention
run = paths.run


def forced(name):
    """paths.run taking `name` for the layout choice (the other choices as they are)."""
    def choose(op, key, candidates, timer=None):
        if op == "attention_layout":
            return dict(candidates)[name]()
        return run(op, key, candidates, timer)
    return choose


rows = []
for spec in cases:
    dt, dims = spec.split(":")
    causal = dims.endswith("c")
    b, h, L, d = (int(x) for x in dims.rstrip("c").split("x"))
    rng = cp.random.default_rng(0)
    qkv = rng.standard_normal((b, L, 3, h, d), dtype=cp.float32).astype(DTYPES[dt])
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    g = rng.standard_normal((b, L, h, d), dtype=cp.float32).astype(DTYPES[dt])
    kw = {"causal": causal, "window": (window, 0)}
    outs = {}
    for name in ("in-place", "copy"):
        paths.run = forced(name)
        outs[name] = cudakit.attention_with_lse(q, k, v, layout="blhd", **kw)
    paths.run = run
    tq, tk, tv = (torch.from_dlpack(x).permute(0, 2, 1, 3) for x in (q, k, v))
    tg = torch.from_dlpack(g).permute(0, 2, 1, 3)
    i = torch.arange(L, device=tq.device)
    mask = (i[None, :] <= i[:, None]) & (i[None, :] >= i[:, None] - window)   # (causal or not: the window's right is 0)
    rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
    y = sdpa(rq, rk, rv, attn_mask=mask)

    def call(name, fn):
        def timed():
            paths.run = forced(name)
            try:
                return fn()
            finally:
                paths.run = run
        return timed
    out, lse = outs["in-place"]
    fns = {"torch_fwd": lambda: sdpa(tq, tk, tv, attn_mask=mask),
           "in_place_fwd": call("in-place", lambda: cudakit.attention_with_lse(q, k, v, layout="blhd", **kw)),
           "copy_fwd": call("copy", lambda: cudakit.attention_with_lse(q, k, v, layout="blhd", **kw)),
           "torch_bwd": lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True),
           "in_place_bwd": call("in-place", lambda: cudakit.attention_backward(g, q, k, v, out, lse, layout="blhd",
                                                                               **kw)),
           "copy_bwd": call("copy", lambda: cudakit.attention_backward(g, q, k, v, out, lse, layout="blhd", **kw)),
           # qkv_packed=True: one (B, L, 3, H, D) gradient (the in-place kernels write its thirds)
           "in_place_bwd_packed": call("in-place", lambda: cudakit.attention_backward(
               g, q, k, v, out, lse, layout="blhd", qkv_packed=True, **kw)),
           "copy_bwd_packed": call("copy", lambda: cudakit.attention_backward(g, q, k, v, out, lse, layout="blhd",
                                                                             qkv_packed=True, **kw)),
           # the public call as it runs: kernels/paths.py's choice, timed on its first call (made here)
           "auto_fwd": lambda: cudakit.attention_with_lse(q, k, v, layout="blhd", **kw),
           "auto_bwd": lambda: cudakit.attention_backward(g, q, k, v, out, lse, layout="blhd", **kw)}
    cudakit.attention_with_lse(q, k, v, layout="blhd", **kw)
    cudakit.attention_backward(g, q, k, v, out, lse, layout="blhd", **kw)
    res, err = timing.time_gpu_interleaved(fns, warmup=3, reps=12, rounds=3, cold=True)
    for name, e in err.items():
        print(f"VARIANT failed {spec} {name}: {type(e).__name__}: {str(e)[:150]}", flush=True)
    row = {"case": spec, "window": window, **{f"{n}_ms": round(r["median_ms"], 4) for n, r in res.items()},
           "chosen": {key[0]: n for (op, key), n in paths._choice.items() if op == "attention_layout"}}
    paths.reset()
    for s in ("fwd", "bwd", "bwd_packed"):
        if f"auto_{s}_ms" in row and f"torch_{s}_ms" in row:
            row[f"x_torch_auto_{s}"] = round(row[f"torch_{s}_ms"] / row[f"auto_{s}_ms"], 3)
        if f"in_place_{s}_ms" in row:
            for other in ("copy", "torch"):
                if f"{other}_{s}_ms" in row:
                    row[f"x_{other}_{s}"] = round(row[f"{other}_{s}_ms"] / row[f"in_place_{s}_ms"], 3)
    diff = float(cp.abs(outs["in-place"][0].astype(cp.float32) - outs["copy"][0].astype(cp.float32)).max())
    row["max_abs_diff_out"] = diff
    rows.append(row)
    print(f"VARIANT blhd{tag} {spec:<22} " + " ".join(f"{n} {row.get(n + '_ms', float('nan')):.4f}" for n in fns)
          + "  ms; chosen {}; in place x copy fwd {:.3f} bwd {:.3f}, x torch fwd {:.3f} bwd {:.3f}; |out diff| {:.2e}".format(
              " ".join(f"{k} {n}" for k, n in sorted(row["chosen"].items())),
              *(row.get(f"x_{o}_{s}", float("nan")) for o, s in (("copy", "fwd"), ("copy", "bwd"), ("torch", "fwd"),
                                                                  ("torch", "bwd"))), diff), flush=True)
dump_rows(argv, __doc__, rows, tag=tag)
