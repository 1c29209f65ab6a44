"""The attention backward with an attn_bias broadcast over its rows or keys (a padding bias (B, 1, 1, L), a
per-query one (1, H, L, 1)) or over the batch alone (ALiBi's (1, H, L, L)): cudakit.attention_backward, the bias's gradient asked for, against torch's SDPA
backward with the same float attn_mask requiring grad (a per-query bias expanded over the keys first, as
torch's SDPA takes it), each call's device time behind an L2 flush
(bench.timing's cold samples), in one run. Run it twice with PYTHONPATH on two source trees to compare two
forms of the kernels (the ratio to torch is the comparable figure).
    python3 benchmarks/sweeps/attention_bias_backward.py [--cases bf16:pad:4x16x1024x64,...] [--tag name] [--fwd]
        [--out f.json]
--fwd: the forward too (attention_with_lse against SDPA with the same mask, no grad).
A case: dtype:kind:BxHxLxD[gHKV][c], kind pad ((B, 1, 1, L)), rows ((1, H, L, 1)), alibi ((1, H, L, L)) or
bmask ((B, 1, L, L), a grouped-query model's float mask), gHKV grouped-query k, v of HKV heads (torch:
enable_gqa=True), a trailing c for causal. Prints
VARIANT lines (ms) and writes the rows to --out."""
import sys

import cupy as cp
import torch

import cudakit
from _cases import cases_and_tag, timed_row
from _results import dump_rows


argv = sys.argv[1:]
cases, tag = cases_and_tag(argv, ["bf16:pad:4x16x1024x64", "bf16:pad:2x16x2048x128c", "bf16:rows:4x16x1024x64",
                                  "f32:pad:4x16x1024x64", "f32:pad:2x8x2048x128c"])
cudakit.set_float32_precision("tf32x3")
sdpa = torch.nn.functional.scaled_dot_product_attention
rows = []
for spec in cases:
    dt, kind, dims = spec.split(":")
    causal = dims.endswith("c")
    dims, _, hkv = dims.rstrip("c").partition("g")
    b, h, L, d = (int(x) for x in dims.split("x"))
    hkv = int(hkv) if hkv else h
    dtype = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[dt]
    rng = cp.random.default_rng(0)
    q, g = (rng.standard_normal((b, h, L, d), dtype=cp.float32).astype(dtype) for _ in range(2))
    k, v = (rng.standard_normal((b, hkv, L, d), dtype=cp.float32).astype(dtype) for _ in range(2))
    shape = {"pad": (b, 1, 1, L), "rows": (1, h, L, 1), "alibi": (1, h, L, L), "bmask": (b, 1, L, L)}[kind]
    bias = rng.standard_normal(shape, dtype=cp.float32).astype(dtype)
    out, lse = cudakit.attention_with_lse(q, k, v, None, causal, attn_bias=bias)
    tq, tk, tv, tg, tb = (torch.from_dlpack(a) for a in (q, k, v, g, bias))
    if causal:   # torch takes one mask: the bias with the causal -inf above the diagonal
        tb = tb.masked_fill(~torch.ones(L, L, dtype=torch.bool, device="cuda").tril(), float("-inf"))
    if kind == "rows":   # (torch's SDPA wants the mask's last dim contiguous: the bias expanded over the keys)
        tb = tb.expand(1, h, L, L).contiguous()
    rq, rk, rv, rb = (x.detach().requires_grad_(True) for x in (tq, tk, tv, tb))
    gqa = {"enable_gqa": True} if hkv != h else {}
    y = sdpa(rq, rk, rv, attn_mask=rb, **gqa)
    fns = {"torch": lambda: torch.autograd.grad(y, (rq, rk, rv, rb), tg, retain_graph=True),
           "cudakit": lambda: cudakit.attention_backward(g, q, k, v, out, lse, None, causal, attn_bias=bias)}
    if "--fwd" in argv:   # the forward too (attention_with_lse against SDPA with the mask, no grad)
        fns.update(torch_fwd=lambda: sdpa(tq, tk, tv, attn_mask=tb, **gqa),
                   cudakit_fwd=lambda: cudakit.attention_with_lse(q, k, v, None, causal, attn_bias=bias))
    rows.append(timed_row("bias-bwd", spec, tag, fns))
dump_rows(argv, __doc__, rows)
