"""float32 attention (tf32x3) with an additive bias against torch's float32 SDPA with the same
attn_mask: does the bias cost the Triton forward and backward more than it costs torch? Forward
(`cudakit.attention_with_lse`) without a bias and with a full (B, H, L, L), an ALiBi-style (1, H, L, L)
and a padding (B, 1, 1, L) bias; backward (`cudakit.attention_backward`, which returns the bias's
gradient too; torch's with the bias requiring grad) without and with the full bias. Device time,
each call behind an L2 flush (bench.timing's cold samples), interleaved with torch; the smallest
shape (the host-time rows' B2 H2 S64 D32) also back-to-back without flushes (hot), where a call's
launch latency shows. --tiles: at that shape,
the forward with a full bias on other tiles of the kernel (kernels/attention.py forward(tiles=)).
    python3 benchmarks/sweeps/attention_f32_bias.py [--shapes 2x2x64x32,...] [--tiles] [--out F]
Prints VARIANT lines (median ms, x torch = torch's time / cudakit's); --out writes the rows."""
import sys

import cupy as cp
import torch
from _cases import shapes_arg
from _medians import medians
from _results import dump_rows

import cudakit
from cudakit.backends.attention_masks import Masks
from cudakit.kernels import attention as at
from cudakit.kernels import paths

argv = sys.argv[1:]
shapes = shapes_arg(argv, [(2, 2, 64, 32), (4, 8, 512, 32), (4, 8, 512, 64), (4, 16, 1024, 64), (2, 16, 2048, 128)])
cudakit.set_float32_precision("tf32x3")
sdpa = torch.nn.functional.scaled_dot_product_attention
rows = []


def report(tag, kind, m, path):
    if "cudakit" not in m or "torch" not in m:
        return
    rows.append({"case": tag, "pass": kind, "cudakit_ms": round(m["cudakit"], 4), "torch_ms": round(m["torch"], 4),
                 "x_torch": round(m["torch"] / m["cudakit"], 3), "path": path})
    print(f"VARIANT bias {tag:<22} {kind:<16} cudakit {m['cudakit']:8.4f} ms torch {m['torch']:8.4f} ms "
          f"x torch {m['torch'] / m['cudakit']:.3f} path {path}", flush=True)


def case(b, h, L, d):
    rng = cp.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((b, h, L, d), dtype=cp.float32) for _ in range(4))
    biases = {"none": None, "full": rng.standard_normal((b, h, L, L), dtype=cp.float32),
              "alibi": rng.standard_normal((1, h, L, L), dtype=cp.float32),
              "pad": rng.standard_normal((b, 1, 1, L), dtype=cp.float32)}
    tq, tk, tv, tg = (torch.from_dlpack(a) for a in (q, k, v, g))
    tag = f"{b}x{h}x{L}x{d}"
    colds = (True, False) if b * h * L <= 2 * 2 * 64 else (True,)
    for name, bias in biases.items():
        tb = None if bias is None else torch.from_dlpack(bias)
        out, lse = cudakit.attention_with_lse(q, k, v, attn_bias=bias)   # (the first call times the paths offered)
        took = paths.last_paths().get("attention", "triton")
        for cold in colds:
            m = medians({"cudakit": lambda: cudakit.attention_with_lse(q, k, v, attn_bias=bias),
                         "torch": lambda: sdpa(tq, tk, tv, attn_mask=tb)}, cold)
            report(tag, f"fwd {name}{'' if cold else ' hot'}", m, took)
        if name not in ("none", "full"):
            continue
        rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
        wrt = (rq, rk, rv) if tb is None else (rq, rk, rv, tb.detach().requires_grad_(True))
        y = sdpa(*wrt[:3], attn_mask=None if tb is None else wrt[3])
        m = medians({"cudakit": lambda: cudakit.attention_backward(g, q, k, v, out, lse, attn_bias=bias),
                     "torch": lambda: torch.autograd.grad(y, wrt, tg, retain_graph=True)})
        report(tag, f"bwd {name}", m, paths.last_paths().get("attention_backward", "?"))


def tiles(b, h, L, d):
    rng = cp.random.default_rng(0)
    q, k, v = (rng.standard_normal((b * h, L, d), dtype=cp.float32) for _ in range(3))
    bias = rng.standard_normal((b, h, L, L), dtype=cp.float32)
    masks = Masks(False, bias=bias, bias_heads=h)
    tq, tk, tv = (torch.from_dlpack(a).view(b, h, L, d) for a in (q, k, v))
    tb = torch.from_dlpack(bias)
    fns = {"torch": lambda: sdpa(tq, tk, tv, attn_mask=tb),
           "shipped": lambda: at.forward(q, k, v, d ** -0.5, False, "float32", masks=masks)}
    for bm, bn, nw, ns in ((128, 64, 8, 3), (128, 64, 8, 2), (128, 64, 8, 1), (64, 64, 4, 2), (64, 64, 4, 1),
                           (64, 32, 4, 2), (64, 64, 8, 2), (32, 64, 4, 2)):
        t = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": nw, "num_stages": ns}
        fns[f"tiles {(bm, bn, nw, ns)}"] = lambda t=t: at.forward(q, k, v, d ** -0.5, False, "float32", tiles=t,
                                                                  masks=masks)
    for cold in (True, False):
        m = medians(fns, cold)
        for name, ms in m.items():
            rows.append({"case": f"{b}x{h}x{L}x{d} full bias tiles", "variant": name, "cold": cold, "ms": round(ms, 4)})
            print(f"VARIANT tiles {b}x{h}x{L}x{d} {'cold' if cold else 'hot '} {name:<26} {ms:8.4f} ms", flush=True)


if "--tiles" in argv:
    tiles(2, 2, 64, 32)
for shape in shapes:
    case(*shape)
    dump_rows(argv, __doc__, rows)   # (after each case: a call cut off by its time limit keeps what ran)
dump_rows(argv, __doc__, rows)
