"""The materialised float32 attention forward (tf32x3, kernels/attention_materialized_forward.py) on
other tiles, against torch's float32 SDPA and cudakit.attention's own choice of path, each call
behind an L2 flush (bench.timing's cold samples), interleaved.
    python3 benchmarks/sweeps/attention_f32_matf.py [--shapes 1x16x512x128,...] [--causal] [--out F]
Prints VARIANT lines: median ms, x torch (torch's time / the variant's); --out writes them as rows
of a JSON file (_results.dump_rows). Variants: "public" (cudakit.attention, its path chosen by
the first call's timing, named), "mat <score tile> / <out tile> cols <n>" (the materialised
kernels called directly on [BH, L, D] arrays, everything inside the timed call)."""
import sys

import cupy as cp
import torch

import cudakit
from cudakit.bench import timing
from cudakit.kernels import attention as at
from cudakit.kernels import attention_materialized_forward as amf
from cudakit.kernels import paths
from _results import dump_rows

argv = sys.argv[1:]
shapes = [(1, 16, 256, 80), (2, 8, 256, 96), (1, 16, 512, 128), (8, 8, 256, 128)]
if "--shapes" in argv:
    shapes = [tuple(int(x) for x in s.split("x")) for s in argv[argv.index("--shapes") + 1].split(",")]
cudakit.set_float32_precision("tf32x3")
sdpa = torch.nn.functional.scaled_dot_product_attention
rows = []

# (score tile (BLOCK_M, BLOCK_N, warps), out tile (BLOCK_M, BLOCK_K, warps, stages), column blocks or None: the rule)
VARIANTS = [((64, 64, 4), (64, 32, 4, 3), None), ((64, 64, 8), (64, 32, 4, 3), None),
            ((64, 32, 4), (64, 32, 4, 3), None), ((128, 64, 8), (64, 32, 4, 3), None),
            ((64, 64, 8), (64, 32, 4, 3), 1), ((64, 64, 8), (64, 32, 4, 3), 4),
            ((64, 64, 8), (64, 64, 4, 3), None), ((64, 64, 8), (64, 32, 4, 2), None),
            ((128, 64, 8), (128, 32, 8, 3), None)]
if "--quick" in argv:
    VARIANTS = VARIANTS[:2]


def mat(q, k, v, scale, masks, sms, st, ot, cols):
    def run():
        amf.score_tiles = lambda dp: {"BLOCK_M": st[0], "BLOCK_N": st[1] if dp <= 64 or st[1] <= 64 else 64,
                                      "num_warps": st[2], "num_stages": 1}
        amf.OUT_TILES = {"BLOCK_M": ot[0], "BLOCK_K": ot[1], "num_warps": ot[2], "num_stages": ot[3]}
        if cols is not None:
            amf.out_columns = lambda dp, programs, sms_: cols
        try:
            return at._materialized_forward(q, k, v, scale, masks, 1, 1, sms)
        finally:
            amf.score_tiles, amf.OUT_TILES, amf.out_columns = shipped
    return run


shipped = (amf.score_tiles, amf.OUT_TILES, amf.out_columns)


def case(b, h, L, d, causal):
    from cudakit.runtime.device import get_device_info
    rng = cp.random.default_rng(0)
    q, k, v = (rng.standard_normal((b, h, L, d), dtype=cp.float32) for _ in range(3))
    tq, tk, tv = (torch.from_dlpack(a) for a in (q, k, v))
    qf, kf, vf = (x.reshape(b * h, L, d) for x in (q, k, v))
    tag = f"{b}x{h}x{L}x{d}{' causal' if causal else ''}"
    paths._last.pop("attention", None)
    cudakit.attention(q, k, v, causal=causal)
    took = paths.last_paths().get("attention", "triton")
    scale = d ** -0.5
    masks = at.Masks(causal)
    sms = get_device_info(0).multiprocessors
    fns = {"torch": lambda: sdpa(tq, tk, tv, is_causal=causal),
           f"public ({took})": lambda: cudakit.attention(q, k, v, causal=causal)}
    want = sdpa(tq, tk, tv, is_causal=causal).reshape(b * h, L, d)
    for st, ot, cols in VARIANTS:
        if st[1] > 64 and d > 64:
            continue
        name = f"mat {st[0]}x{st[1]}x{st[2]}w / {ot[0]}x{ot[1]}x{ot[2]}w{ot[3]}s cols {cols or 'rule'}"
        fn = mat(qf, kf, vf, scale, masks, sms, st, ot, cols)
        err = float((torch.from_dlpack(fn()[0]) - want).abs().max())
        if err > 1e-4:
            print(f"VARIANT failed {name}: max error {err:.2e} against torch", flush=True)
            continue
        fns[name] = fn
    res, errors = timing.time_gpu_interleaved(fns, warmup=3, reps=12, rounds=3, cold=True)
    for name, e in errors.items():
        print(f"VARIANT failed {name}: {type(e).__name__}: {str(e)[:150]}", flush=True)
    t = res["torch"]["median_ms"]
    for name, r in sorted(res.items(), key=lambda x: x[1]["median_ms"]):
        m = r["median_ms"]
        rows.append({"case": tag, "variant": name, "cudakit_ms": round(m, 4), "torch_ms": round(t, 4),
                     "x_torch": round(t / m, 3)})
        print(f"VARIANT {tag:<22} {name:<52} {m:8.4f} ms x torch {t / m:.3f}", flush=True)


for shape in shapes:
    for causal in ((False, True) if "--causal" in argv else (False,)):
        case(*shape, causal)
        dump_rows(argv, __doc__, rows)
