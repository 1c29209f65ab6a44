"""The float32 attention backward (tf32x3) with grouped-query k, v, key lengths, a bias or dropout: the flash
kernels, the materialised kernels (kernels/attention_materialized.py) and the public call
(`cudakit.attention_backward`, which times the two once per signature and keeps the faster)
against torch's float32 SDPA backward, each call's device time behind an L2 flush (bench.timing's
cold samples), in one run. torch's anchor is its fastest way: for grouped k, v the faster of
`enable_gqa=True` and k, v repeated over each group; for key lengths a boolean (B, 1, 1, Lk) mask;
for a bias the same float attn_mask, its gradient asked for too; for dropout dropout_p = 0.1.
    python3 benchmarks/sweeps/attention_f32_bwd_masks.py [--cases gqa:2x32x8x1024x128c,len:4x16x1024x64] [--out f.json]
A case: gqa:BxHxHKVxLxD, len:BxHxLxD, bias:BxHxLxD (a (1, H, L, L) bias, as ALiBi's) or
pad:BxHxLxD (a (B, 1, 1, L) bias) or drop:BxHxLxD (dropout 0.1), a trailing c for causal. Prints VARIANT lines (ms) and
writes the rows to --out."""
import sys

import cupy as cp
import numpy as np
import torch

import cudakit
from _results import dump_rows

from cudakit.bench import timing
from cudakit.kernels import attention as at

argv = sys.argv[1:]
cases = ["gqa:1x32x8x1024x128c", "gqa:2x16x4x512x64c", "gqa:1x8x2x256x128", "len:4x16x1024x64", "len:2x8x2048x128c",
         "len:2x8x256x96", "bias:4x16x1024x64", "bias:2x8x2048x128c", "pad:4x16x1024x64", "bias:1x8x256x96",
         "drop:4x16x1024x64", "drop:2x8x2048x128c", "drop:1x8x256x96"]
if "--cases" in argv:
    cases = argv[argv.index("--cases") + 1].split(",")
cudakit.set_float32_precision("tf32x3")
sdpa = torch.nn.functional.scaled_dot_product_attention


def case_fns(spec: str):
    kind, dims = spec.split(":")
    causal = dims.endswith("c")
    n = [int(x) for x in dims.rstrip("c").split("x")]
    b, h, hkv, L, d = n if kind == "gqa" else (n[0], n[1], n[1], n[2], n[3])
    rng = cp.random.default_rng(0)
    q, g = (rng.standard_normal((b, h, L, d), dtype=cp.float32) for _ in range(2))
    k, v = (rng.standard_normal((b, hkv, L, d), dtype=cp.float32) for _ in range(2))
    lens = bias = None
    if kind == "len":   # lengths from a quarter of L to L
        lens = cp.asarray(np.linspace(L // 4, L, b).astype(np.int64))
    if kind in ("bias", "pad"):
        bias = rng.standard_normal((1, h, L, L) if kind == "bias" else (b, 1, 1, L), dtype=cp.float32)
    drop = {"dropout_p": 0.1, "seed": 5} if kind == "drop" else {}
    out, lse = cudakit.attention_with_lse(q, k, v, None, causal, key_lengths=lens, attn_bias=bias, **drop)
    groups = h // hkv
    from cudakit.backends.dropout_api import threshold
    masks = at.Masks(causal, lengths=lens, heads=h, bias=bias, bias_heads=1 if bias is None else bias.shape[1],
                     dropout=(threshold(0.1), 1 / 0.9, 5) if drop else None)
    q3, g3, o3 = (x.reshape(b * h, L, d) for x in (q, g, out))
    k3, v3 = (x.reshape(b * hkv, L, d) for x in (k, v))
    l3 = lse.reshape(b * h, L)
    scale = d ** -0.5
    tq, tk, tv, tg = (torch.from_dlpack(a) for a in (q, k, v, g))
    rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
    fns = {}
    if kind == "gqa":
        y = sdpa(rq, rk, rv, is_causal=causal, enable_gqa=True)
        fns["torch_gqa"] = lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True)
        rk2, rv2 = (x.repeat_interleave(groups, 1).detach().requires_grad_(True) for x in (tk, tv))
        y2 = sdpa(rq, rk2, rv2, is_causal=causal)
        fns["torch_repeat"] = lambda: torch.autograd.grad(y2, (rq, rk2, rv2), tg, retain_graph=True)
    elif kind == "drop":
        y = sdpa(rq, rk, rv, is_causal=causal, dropout_p=0.1)
        fns["torch_dropout"] = lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True)
    elif kind == "len":
        mask = (torch.arange(L, device="cuda")[None, :] < torch.from_dlpack(lens)[:, None])[:, None, None, :]
        if causal:
            mask = mask & torch.ones(L, L, dtype=torch.bool, device="cuda").tril()
        y = sdpa(rq, rk, rv, attn_mask=mask)
        fns["torch_mask"] = lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True)
    else:
        tb = torch.from_dlpack(bias)
        if causal:
            tb = tb.masked_fill(~torch.ones(L, L, dtype=torch.bool, device="cuda").tril(), float("-inf"))
        rb = tb.detach().requires_grad_(True)
        y = sdpa(rq, rk, rv, attn_mask=rb)
        fns["torch_bias"] = lambda: torch.autograd.grad(y, (rq, rk, rv, rb), tg, retain_graph=True)
    fns["flash"] = lambda: at._triton_backward(g3, q3, k3, v3, o3, l3, scale, masks, "float32", None, False,
                                               groups, h)
    fns["materialized"] = lambda: at._materialized_backward(g3, q3, k3, v3, o3, l3, scale, masks, groups)
    fns["public"] = lambda: cudakit.attention_backward(g, q, k, v, out, lse, None, causal, key_lengths=lens,
                                                       attn_bias=bias, **drop)
    return fns


rows = []
for spec in cases:
    fns = case_fns(spec)
    res, err = timing.time_gpu_interleaved(fns, warmup=3, reps=12, rounds=3, cold=True)
    for name, e in err.items():
        print(f"VARIANT failed {spec} {name}: {type(e).__name__}: {str(e)[:150]}", flush=True)
    row = {"case": spec}
    for name in fns:
        if name in res:
            row[f"{name}_ms"] = round(res[name]["median_ms"], 4)
    anchor = min(row[n] for n in row if n.startswith("torch") and n.endswith("_ms"))
    for name in ("flash", "materialized", "public"):
        if f"{name}_ms" in row:
            row[f"x_{name}"] = round(anchor / row[f"{name}_ms"], 3)
    rows.append(row)
    print(f"VARIANT bwd-masks {spec:<22} " + " ".join(f"{n} {row.get(n + '_ms', float('nan')):.4f}" for n in fns)
          + "  ms;  x torch's fastest: " + " ".join(f"{n} {row.get('x_' + n, float('nan')):.3f}"
                                                     for n in ("flash", "materialized", "public")), flush=True)
dump_rows(argv, __doc__, rows)
