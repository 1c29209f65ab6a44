"""Depthwise conv2d weight-gradient settings of kernels/conv.py (positions a step, warps, programs
aimed for in units of 264): each first checked on the GPU against float64 (tests/conv_checks.py),
then conv2d_backward of a 32x128x56x56 depthwise 3x3 timed interleaved with torch. One run:
    python3 scripts/depthwise_variants.py
Prints CHECK lines and VARIANT lines (median us, ratio to torch's input + weight gradients); the
first variant is the shipped one."""
import statistics
import sys

import cupy as cp
import ml_dtypes
import numpy as np
import torch

sys.path.insert(0, "tests")
import conv_checks as cc  # noqa: E402

import cudakit  # noqa: E402
from cudakit.bench import timing  # noqa: E402
from cudakit.kernels import conv  # noqa: E402

DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float32": np.float32}
VARIANTS = [(128, 4, 16), (64, 4, 16), (128, 4, 32), (128, 8, 16), (256, 4, 16), (256, 4, 4)]


def use(v):
    conv._DW_WG_BLOCK, conv._DW_WG_WARPS, conv._DW_WG_PROGRAMS = v[0], v[1], v[2] * conv._TARGET_PROGRAMS


rng = np.random.default_rng(0)
dev = cp.asarray
host = cp.asnumpy
for v in VARIANTS:
    use(v)
    try:
        for dt in ("bfloat16", "float32"):
            cc.check_conv2d(dev, host, rng, 4, 32, 28, 28, 32, 3, 3, 1, 1, 1, dt, groups=32)
            cc.check_conv2d(dev, host, rng, 2, 16, 40, 39, 16, 5, 5, 1, 4, 2, dt, groups=16)
            cc.check_conv2d(dev, host, rng, 2, 8, 10, 9, 8, 3, 3, 2, 1, 1, dt, groups=8)
        print(f"VARIANT check {v}: passed", flush=True)
    except AssertionError as e:
        print(f"VARIANT check {v}: FAILED {str(e)[:300]}", flush=True)
for dt in ("bfloat16", "float32"):
    crng = cp.random.default_rng(0)
    x = crng.standard_normal((32, 128, 56, 56), dtype=cp.float32).astype(DTYPES[dt])
    w = (crng.standard_normal((128, 1, 3, 3), dtype=cp.float32) / 3).astype(x.dtype)
    g = crng.standard_normal((32, 128, 56, 56), dtype=cp.float32).astype(x.dtype)
    tx, tw, tg = (torch.from_dlpack(a) for a in (x, w, g))
    rx, rw = tx.detach().requires_grad_(True), tw.detach().requires_grad_(True)
    y = torch.nn.functional.conv2d(rx, rw, None, 1, 1, 1, 128)
    fns = {"torch": lambda: torch.autograd.grad(y, (rx, rw), tg, retain_graph=True),
           "torch wgrad only": lambda: torch.autograd.grad(y, (rw,), tg, retain_graph=True)}
    for v in VARIANTS:
        def f(v=v):
            use(v)
            return cudakit.conv2d_backward(g, x, w, 1, 1, bias=False, groups=128)
        fns[f"bwd {v}"] = f
    fns["forward (as the input gradient)"] = lambda: cudakit.conv2d(g, w, None, 1, 1, groups=128)
    ms = {}
    for _ in range(3):
        res, err = timing.time_gpu_interleaved(fns, warmup=2, reps=8, rounds=2)
        for name, r in res.items():
            ms.setdefault(name, []).append(r["median_ms"])
        for name, e in err.items():
            print(f"VARIANT {dt} {name} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
    base = statistics.median(ms["torch"])
    for name, vals in sorted(ms.items(), key=lambda kv: statistics.median(kv[1])):
        m = statistics.median(vals)
        print(f"VARIANT {dt} {name:<34} {m * 1e3:8.1f} us  x torch (input + weight gradients) {base / m:.3f}", flush=True)
