"""float32 attention (tf32x3) through the public API against torch's float32 SDPA on shapes the
benchmark does not time: does the 1.5x of the benchmark's two shapes hold elsewhere? Forward
(`cudakit.attention`) and backward (`cudakit.attention_backward`), plain and causal, on (B, H, L, D)
CuPy arrays, each timed call behind an L2 flush (bench.timing's cold samples, as `cudakit bench`),
interleaved with torch.
    python3 benchmarks/sweeps/attention_f32_shapes.py [--shapes 8x16x1024x64,...] [--fwd-only] [--out F]
Prints VARIANT lines: median ms of cudakit and torch, x torch (torch's time / cudakit's), and the
paths the forward and the backward took (paths.last_paths; a forward that asked paths.run nothing,
no key parts offered: "triton"); --out writes them as rows of a JSON file (_results.dump_rows)."""
import sys

import cupy as cp
import torch
from _cases import shapes_arg
from _medians import medians
from _results import dump_rows

import cudakit
from cudakit.kernels import paths

argv = sys.argv[1:]
shapes = shapes_arg(argv, [(8, 16, 1024, 64), (2, 16, 4096, 64), (4, 16, 1024, 128), (8, 8, 1024, 32),
                           (4, 32, 512, 96), (1, 16, 2048, 80)])
cudakit.set_float32_precision("tf32x3")
sdpa = torch.nn.functional.scaled_dot_product_attention
rows = []


def report(tag, kind, m, path):
    rows.append({"case": tag, "pass": kind, "cudakit_ms": round(m["cudakit"], 4), "torch_ms": round(m["torch"], 4),
                 "x_torch": round(m["torch"] / m["cudakit"], 3), "path": path})
    print(f"VARIANT shapes {tag:<24} {kind:<8} cudakit {m['cudakit']:8.3f} ms torch {m['torch']:8.3f} ms "
          f"x torch {m['torch'] / m['cudakit']:.3f} path {path}", flush=True)


def case(b, h, L, d, causal):
    rng = cp.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((b, h, L, d), dtype=cp.float32) for _ in range(4))
    tq, tk, tv, tg = (torch.from_dlpack(a) for a in (q, k, v, g))
    tag = f"{b}x{h}x{L}x{d}{' causal' if causal else ''}"
    paths._last.pop("attention", None)
    cudakit.attention(q, k, v, causal=causal)   # (the first call times the paths offered, if any)
    took_fwd = paths.last_paths().get("attention", "triton")
    fwd = medians({"cudakit": lambda: cudakit.attention(q, k, v, causal=causal),
                   "torch": lambda: sdpa(tq, tk, tv, is_causal=causal)})
    if "--fwd-only" in argv:
        if "cudakit" not in fwd or "torch" not in fwd:
            return
        report(tag, "forward", fwd, took_fwd)
        return
    out, lse = cudakit.attention_with_lse(q, k, v, causal=causal)
    rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
    y = sdpa(rq, rk, rv, is_causal=causal)
    bwd = medians({"cudakit": lambda: cudakit.attention_backward(g, q, k, v, out, lse, causal=causal),
                   "torch": lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True)})
    took = paths.last_paths().get("attention_backward", "?")
    for kind, m in (("forward", fwd), ("backward", bwd)):
        if "cudakit" in m and "torch" in m:
            report(tag, kind, m, took if kind == "backward" else took_fwd)


for shape in shapes:
    for causal in (False, True):
        case(*shape, causal)
        dump_rows(argv, __doc__, rows)   # (after each case: a call cut off by its time limit keeps what ran)
