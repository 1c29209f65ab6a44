"""The float32 attention backward (tf32x3) on small problems: the flash kernels, the materialised
kernels (kernels/attention_materialized.py) and torch's float32 SDPA backward, each two ways, in
one run:
- device: each call behind an L2 flush, queued behind a spin (bench.timing's cold samples, as
  kernels/paths.py times the candidates);
- loop: the wall time per call of 200 calls back to back, warm (what a host-bound step sees: the
  host's cost per call where it outlasts the device's).
The public call (`cudakit.attention_backward`, its dispatch plan after the first call) is timed
both ways too, so the path its timing chose shows beside the others.
    python3 benchmarks/sweeps/attention_f32_bwd_small.py [--shapes 1x8x256x80,...] [--out f.json]
Prints VARIANT lines (ms) and writes the rows to --out."""
import sys
import time

import cupy as cp
import torch

import cudakit
from _results import dump_rows

from cudakit.bench import timing
from cudakit.kernels import attention as at

argv = sys.argv[1:]
shapes = [(2, 2, 64, 32), (4, 4, 128, 32), (8, 8, 128, 64), (1, 16, 128, 64), (2, 4, 512, 64), (1, 8, 256, 80),
          (1, 8, 256, 128), (2, 8, 128, 128), (1, 4, 512, 128)]
if "--shapes" in argv:
    shapes = [tuple(int(x) for x in s.split("x")) for s in argv[argv.index("--shapes") + 1].split(",")]
cudakit.set_float32_precision("tf32x3")
sdpa = torch.nn.functional.scaled_dot_product_attention
LOOP = 200


def loop_ms(fn) -> float:
    for _ in range(5):
        fn()
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    for _ in range(LOOP):
        fn()
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - t) * 1e3 / LOOP


rows = []
for b, h, L, d in shapes:
    rng = cp.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((b, h, L, d), dtype=cp.float32) for _ in range(4))
    q3, k3, v3, g3 = (x.reshape(b * h, L, d) for x in (q, k, v, g))
    scale = d ** -0.5
    out, lse = cudakit.attention_with_lse(q, k, v)
    o3, l3 = out.reshape(b * h, L, d), lse.reshape(b * h, L)
    masks = at.Masks(False)
    tq, tk, tv, tg = (torch.from_dlpack(a) for a in (q, k, v, g))
    rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
    y = sdpa(rq, rk, rv)
    fns = {"torch": lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True),
           "flash": lambda: at._triton_backward(g3, q3, k3, v3, o3, l3, scale, masks, "float32"),
           "materialized": lambda: at._materialized_backward(g3, q3, k3, v3, o3, l3, scale, masks),
           "public": lambda: cudakit.attention_backward(g, q, k, v, out, lse)}
    res, err = timing.time_gpu_interleaved(fns, warmup=3, reps=12, rounds=3, cold=True)
    for name, e in err.items():
        print(f"VARIANT failed {name}: {type(e).__name__}: {str(e)[:150]}", flush=True)
    loops = {name: loop_ms(fn) for name, fn in fns.items() if name not in err}
    tag = f"{b}x{h}x{L}x{d}"
    row = {"case": tag, "scores": b * h * L * L}
    for name in fns:
        if name in res:
            row[f"{name}_device_ms"] = round(res[name]["median_ms"], 4)
            row[f"{name}_loop_ms"] = round(loops[name], 4)
    rows.append(row)
    print(f"VARIANT bwd-small {tag:<14} " + " ".join(
        f"{n} {row.get(n + '_device_ms', float('nan')):.4f}/{row.get(n + '_loop_ms', float('nan')):.4f}"
        for n in fns) + "  (device/loop ms)", flush=True)
dump_rows(argv, __doc__, rows)
