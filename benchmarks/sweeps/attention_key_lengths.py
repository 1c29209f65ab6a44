"""Attention with key_lengths (a padded batch): cudakit.attention_with_lse and attention_backward against
torch's SDPA with the same keys masked by a boolean (B, 1, 1, Lk) attn_mask (and the causal triangle
with it), each call's device time behind an L2 flush (bench.timing's cold samples), in one run.
    python3 benchmarks/sweeps/attention_key_lengths.py [--cases bf16:4x16x1024x64,...] [--tag name]
        [--out f.json]
A case: dtype:BxHxLxD[c] (a trailing c for causal). The lengths run evenly from a quarter of L to L
over the batch (one sequence unpadded, one at L/4). Prints VARIANT lines (ms) and writes the rows to
--out; the paths are those each op last ran (paths.last_paths)."""
import sys

import cupy as cp
import numpy as np
import torch

import cudakit
from _cases import attention_case, cases_and_tag, timed_row
from _results import dump_rows


argv = sys.argv[1:]
cases, tag = cases_and_tag(argv, ["bf16:4x16x1024x64", "bf16:4x16x1024x64c", "bf16:8x16x512x128",
                                  "bf16:2x16x2048x128c", "f16:4x12x512x64", "f32:4x16x1024x64"])
cudakit.set_float32_precision("tf32x3")
sdpa = torch.nn.functional.scaled_dot_product_attention
rows = []
for spec in cases:
    dtype, causal, (b, h, L, d), (q, k, v, g) = attention_case(spec)
    lens = cp.asarray(np.linspace(L // 4, L, b).astype(np.int32))
    out, lse = cudakit.attention_with_lse(q, k, v, None, causal, key_lengths=lens)
    tq, tk, tv, tg = (torch.from_dlpack(a) for a in (q, k, v, g))
    mask = (torch.arange(L, device="cuda")[None, :] < torch.from_dlpack(lens)[:, None])[:, None, None, :]
    if causal:
        mask = mask & torch.ones(L, L, dtype=torch.bool, device="cuda").tril()
    rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
    y = sdpa(rq, rk, rv, attn_mask=mask)
    fns = {"torch": lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True),
           "cudakit": lambda: cudakit.attention_backward(g, q, k, v, out, lse, None, causal, key_lengths=lens),
           "torch_fwd": lambda: sdpa(tq, tk, tv, attn_mask=mask),
           "cudakit_fwd": lambda: cudakit.attention_with_lse(q, k, v, None, causal, key_lengths=lens)}
    rows.append(timed_row("key-lengths", spec, tag, fns))
dump_rows(argv, __doc__, rows)
