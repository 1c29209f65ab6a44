"""A float32 attention forward with its operands in two float16 parts (_attention_f32_f16split.py)
against torch's float32 SDPA and cudakit.attention (tf32x3, its path chosen by the first call),
each call behind an L2 flush (bench.timing's cold samples), interleaved; its error against float64
beside the shipped forward's.
    python3 benchmarks/sweeps/attention_f32_f16split.py [--shapes 1x16x512x128,...] [--out F]
Prints VARIANT lines: median ms, x torch, max |error| against torch's float64 SDPA relative to
max |out|; --out writes them as rows of a JSON file (_results.dump_rows). The f16 variants time
the split pass of K and V and the forward, both inside the call."""
import math
import sys

import cupy as cp
import torch

import cudakit
from cudakit.bench import timing
from cudakit.kernels import paths
from _attention_f32_f16split import f16_split, fwd_f16
from _results import dump_rows

argv = sys.argv[1:]
shapes = [(1, 16, 512, 128), (8, 8, 256, 128), (2, 8, 256, 96), (4, 16, 1024, 128), (16, 16, 1024, 64)]
if "--shapes" in argv:
    shapes = [tuple(int(x) for x in s.split("x")) for s in argv[argv.index("--shapes") + 1].split(",")]
cudakit.set_float32_precision("tf32x3")
sdpa = torch.nn.functional.scaled_dot_product_attention
rows = []
TILES = [(128, 64, 8, 2), (128, 64, 8, 3), (64, 64, 4, 2), (128, 128, 8, 2), (64, 32, 4, 3)]


def f16_forward(q, k, v, scale, tiles):
    bh, L, d = q.shape
    bm, bn, warps, stages = tiles
    parts = [(torch.empty_like(x, dtype=torch.float16), torch.empty_like(x, dtype=torch.float16),
              torch.empty((bh, L), device=x.device, dtype=torch.float32)) for x in (k, v)]
    for x, (hi, lo, sc) in zip((k, v), parts):
        f16_split[(L // 32, bh)](x, hi, lo, sc, L, D=d, BLOCK_L=32, num_warps=4)
    (kh, kl, ks), (vh, vl, vs) = parts
    o = torch.empty_like(q)
    lse = torch.empty((bh, L), device=q.device, dtype=torch.float32)
    fwd_f16[(L // bm, bh)](q, kh, kl, ks, vh, vl, vs, o, lse, scale * math.log2(math.e), L, D=d, BLOCK_M=bm,
                           BLOCK_N=bn, num_warps=warps, num_stages=stages)
    return o


def case(b, h, L, d):
    rng = cp.random.default_rng(0)
    q, k, v = (rng.standard_normal((b, h, L, d), dtype=cp.float32) for _ in range(3))
    tq, tk, tv = (torch.from_dlpack(a) for a in (q, k, v))
    want = sdpa(tq.double(), tk.double(), tv.double())
    top = float(want.abs().max())
    tag = f"{b}x{h}x{L}x{d}"
    paths._last.pop("attention", None)
    got = torch.from_dlpack(cudakit.attention(q, k, v))
    took = paths.last_paths().get("attention", "triton")
    errs = {"torch": float((sdpa(tq, tk, tv).double() - want).abs().max()) / top,
            f"public ({took})": float((got.double() - want).abs().max()) / top}
    fns = {"torch": lambda: sdpa(tq, tk, tv), f"public ({took})": lambda: cudakit.attention(q, k, v)}
    qf, kf, vf = (x.reshape(b * h, L, d) for x in (tq, tk, tv))
    scale = d ** -0.5
    if d in (64, 128):
        for t in TILES:
            if L % t[0] or L % t[1]:
                continue
            name = f"f16 parts {t[0]}x{t[1]} {t[2]}w {t[3]}s"
            try:
                o = f16_forward(qf, kf, vf, scale, t).reshape(b, h, L, d)
            except Exception as e:   # (out of shared memory, ...)
                print(f"VARIANT failed {tag} {name}: {type(e).__name__}: {str(e)[:120]}", flush=True)
                continue
            errs[name] = float((o.double() - want).abs().max()) / top
            fns[name] = lambda t=t: f16_forward(qf, kf, vf, scale, t)
    res, errors = timing.time_gpu_interleaved(fns, warmup=3, reps=12, rounds=3, cold=True)
    for name, e in errors.items():
        print(f"VARIANT failed {name}: {type(e).__name__}: {str(e)[:150]}", flush=True)
    ref = res["torch"]["median_ms"]
    for name, r in sorted(res.items(), key=lambda x: x[1]["median_ms"]):
        m = r["median_ms"]
        rows.append({"case": tag, "variant": name, "cudakit_ms": round(m, 4), "torch_ms": round(ref, 4),
                     "x_torch": round(ref / m, 3), "rel_error": errs.get(name)})
        print(f"VARIANT {tag:<16} {name:<52} {m:8.4f} ms x torch {ref / m:6.3f} err {errs.get(name, 0):.2e}",
              flush=True)


for shape in shapes:
    case(*shape)
    dump_rows(argv, __doc__, rows)
