"""permute (kernels/transpose.py) where a dim on one side of the transposed plane is short: its
short runs (ck_tr_runs; "direct": stores never staged, STAGED off; "single": one run a thread,
GROUPED off) against the shared-memory tile kernel forced (MAX_RUN 0), torch's
x.permute(...).contiguous() and a copy of the bytes (the copy roof), in one run, each call behind
an L2 flush and a spin (bench.timing's cold samples, as `cudakit bench` times).
    python3 benchmarks/sweeps/permute_short_dims.py [--dtype bfloat16]
Prints VARIANT lines: each provider's median us, GB/s (2 x bytes) and x torch; the plan the
default threshold picks is marked."""
import sys

import cupy as cp
import torch

from cudakit.bench import timing
from cudakit.kernels import transpose

argv = sys.argv[1:]
dtype = argv[argv.index("--dtype") + 1] if "--dtype" in argv else "bfloat16"
CASES = [  # (shape, axes, what): the conv weight to and from (K, R, S, C), images, tiles partly full
    ((32, 2, 224, 224), (0, 2, 3, 1), "image 2ch NCHW->NHWC"),
    ((32, 224, 224, 2), (0, 3, 1, 2), "image 2ch NHWC->NCHW"),
    ((512, 512, 3, 3), (0, 2, 3, 1), "weight KCRS->KRSC"),
    ((512, 3, 3, 512), (0, 3, 1, 2), "weight KRSC->KCRS"),
    ((64, 64, 3, 3), (0, 2, 3, 1), "weight 64 KCRS->KRSC"),
    ((2048, 512, 1, 7), (0, 2, 3, 1), "weight 1x7"),
    ((32, 3, 224, 224), (0, 2, 3, 1), "image NCHW->NHWC"),
    ((32, 224, 224, 3), (0, 3, 1, 2), "image NHWC->NCHW"),
    ((64, 24, 4096), (0, 2, 1), "k 24 of 64"),
    ((64, 4096, 24), (0, 2, 1), "a 24 of 64"),
    ((64, 40, 4096), (0, 2, 1), "k 40 of 64"),
    ((256, 4096, 12), (0, 2, 1), "a 12"),
    ((256, 12, 4096), (0, 2, 1), "k 12"),
    ((256, 4, 8192), (0, 2, 1), "k 4"),
    ((256, 6, 8192), (0, 2, 1), "k 6"),
    ((1024, 4096, 16), (0, 2, 1), "a 16"),
]
default = transpose.MAX_RUN
VARIANTS = (("runs", 16, True, True), ("direct", 16, False, True), ("single", 16, True, False),
            ("tile", 0, True, True))   # (name, MAX_RUN, STAGED, GROUPED)
for shape, axes, what in CASES:
    x = cp.random.default_rng(0).standard_normal(shape, dtype=cp.float32).astype(dtype)
    tx = torch.from_dlpack(x)
    plans = {}
    for name, use, staged, grouped in VARIANTS:
        transpose.MAX_RUN, transpose.STAGED, transpose.GROUPED = use, staged, grouped
        plans[name] = transpose.plan(x.shape, x.strides, x.itemsize, axes).kind
    transpose.MAX_RUN, transpose.STAGED, transpose.GROUPED = default, True, True
    transpose._plans.clear()
    chosen = transpose.plan(x.shape, x.strides, x.itemsize, axes).kind
    fns = {}
    for name, use, staged, grouped in VARIANTS:
        if plans[name] != ("tile" if name == "tile" else "runs"):
            continue

        def call(use=use, staged=staged, grouped=grouped, own={}):   # (each variant its own memo of plans)
            kept = transpose._plans
            transpose.MAX_RUN, transpose.STAGED, transpose.GROUPED, transpose._plans = use, staged, grouped, own
            try:
                return transpose.permute(x, axes)
            finally:
                transpose.MAX_RUN, transpose.STAGED, transpose.GROUPED, transpose._plans = default, True, True, kept
        fns[name] = call
    fns["torch"] = lambda: tx.permute(*axes).contiguous()
    y = cp.empty_like(x)
    fns["copy"] = lambda: y.__setitem__(Ellipsis, x)
    res, err = timing.time_gpu_interleaved(fns, warmup=3, reps=30, rounds=3, cold=True)
    transpose._plans.clear()
    for e_name, e in err.items():
        print(f"VARIANT permute {what} {e_name} failed: {type(e).__name__}: {str(e)[:150]}", flush=True)
    t = res.get("torch", {}).get("median_ms")
    for name, r in res.items():
        m = r["median_ms"]
        mark = " (default)" if name == chosen else ""
        print(f"VARIANT permute {what} {shape} {axes} {dtype} {name:<6}{mark} {m * 1000:8.2f} us "
              f"{2 * x.nbytes / m / 1e6:7.0f} GB/s x torch {t / m if t else float('nan'):.3f}", flush=True)
