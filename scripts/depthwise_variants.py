"""Tiles of the direct depthwise conv2d kernels of kernels/conv.py for 3x3 windows: the forward's
(elements of a row step, output rows, warps) and the weight gradient's (the same, and the programs
aimed for in units of 264). Each variant is first checked on the GPU against float64
(tests/conv_checks.py), then the forward and the weight gradient alone (the kernels launched as
kernels/conv.py does: device time, not the public calls' host time) and the whole backward of a
32x128x56x56 depthwise 3x3 (cudakit.conv2d_backward) are timed interleaved with torch. One run:
    python3 scripts/depthwise_variants.py
Prints CHECK lines and VARIANT lines (median us, ratio to torch's same pass); the first variant of
each list is the shipped one."""
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
# forward: (elements of a row step, output rows, warps) for windows up to 3x3; weight gradient: the
# same and the programs aimed for, in units of 264
FWD = [conv._DW_FWD_TILES[0][1:] + (conv._DW_WARPS,), (128, 8, 4), (512, 8, 4), (256, 4, 4), (256, 16, 4),
       (512, 8, 8)]
WGRAD = [conv._DW_WG_TILES[0][1:] + (conv._DW_WARPS, conv._DW_WG_PROGRAMS // conv._TARGET_PROGRAMS),
         (256, 8, 4, 2), (256, 8, 4, 8), (128, 8, 4, 4), (256, 4, 4, 4), (256, 16, 4, 4), (512, 8, 8, 4)]
GEO = (1, 1, 1, 1, 1, 1, 3, 3, 56, 56)


def use(f=None, wg=None):
    """Set the module's tunables for windows up to 3x3 (the forward's kernels are cached per
    geometry: cleared when they change)."""
    if f and (f[:2], f[2]) != (conv._DW_FWD_TILES[0][1:], conv._DW_WARPS):
        conv._DW_FWD_TILES = ((9,) + f[:2],) + conv._DW_FWD_TILES[1:]
        conv._DW_WARPS = f[2]
        conv._dw_kernel.cache_clear()
    if wg and wg != conv._DW_WG_TILES[0][1:] + (conv._DW_WG_WARPS, conv._DW_WG_PROGRAMS // conv._TARGET_PROGRAMS):
        conv._DW_WG_TILES = ((9,) + wg[:2],) + conv._DW_WG_TILES[1:]
        conv._DW_WG_WARPS = wg[2]
        conv._DW_WG_PROGRAMS = wg[3] * conv._TARGET_PROGRAMS
        conv._dw_wgrad_launch.cache_clear()


def check():
    rng = np.random.default_rng(0)
    for dt in ("bfloat16", "float32"):
        cc.check_conv2d(cp.asarray, cp.asnumpy, rng, 4, 32, 28, 28, 32, 3, 3, 1, 1, 1, dt, groups=32)
        cc.check_conv2d(cp.asarray, cp.asnumpy, rng, 2, 16, 40, 39, 16, 5, 5, 1, 4, 2, dt, groups=16)
        cc.check_conv2d(cp.asarray, cp.asnumpy, rng, 2, 8, 10, 9, 8, 3, 3, 2, 1, 1, dt, groups=8)
        cc.check_conv2d(cp.asarray, cp.asnumpy, rng, 3, 8, 9, 150, 8, 7, 7, 1, 3, 1, dt, groups=8)


shipped = (FWD[0], WGRAD[0])
for f, wg in [(v, None) for v in FWD] + [(None, v) for v in WGRAD]:
    use(f or shipped[0], wg or shipped[1])
    try:
        check()
        print(f"VARIANT check fwd {f or '-'} wgrad {wg or '-'}: passed", flush=True)
    except AssertionError as e:
        print(f"VARIANT check fwd {f or '-'} wgrad {wg or '-'}: FAILED {str(e)[:300]}", flush=True)
use(*shipped)
for dt in ("bfloat16", "float32"):
    crng = cp.random.default_rng(0)
    x = crng.standard_normal((32, 128, 56, 56), dtype=cp.float32).astype(DTYPES[dt])
    w = (crng.standard_normal((128, 1, 3, 3), dtype=cp.float32) / 3).astype(x.dtype)
    g = crng.standard_normal((32, 128, 56, 56), dtype=cp.float32).astype(x.dtype)
    tx, tw, tg = (torch.from_dlpack(a) for a in (x, w, g))
    rx, rw = tx.detach().requires_grad_(True), tw.detach().requires_grad_(True)
    y = torch.nn.functional.conv2d(rx, rw, None, 1, 1, 1, 128)
    fns = {"torch fwd": lambda: torch.nn.functional.conv2d(tx, tw, None, 1, 1, 1, 128),
           "torch bwd": lambda: torch.autograd.grad(y, (rx, rw), tg, retain_graph=True),
           "torch wgrad": lambda: torch.autograd.grad(y, (rw,), tg, retain_graph=True)}
    for v in FWD:
        fns[f"fwd {v}"] = lambda v=v: (use(f=v), conv._dw_run(x, w, None, GEO, 128, 1))
    for v in WGRAD:
        fns[f"wgrad {v}"] = lambda v=v: (use(wg=v), conv.conv2d_weight_grad(g, x, w.shape, GEO, False, 128))
    fns["bwd shipped"] = lambda: (use(*shipped), cudakit.conv2d_backward(g, x, w, 1, 1, bias=False, groups=128))
    fns["fwd shipped (cudakit.conv2d)"] = lambda: (use(*shipped), cudakit.conv2d(x, w, None, 1, 1, groups=128))
    ms = {}
    for _ in range(3):
        res, err = timing.time_gpu_interleaved(fns, warmup=2, reps=8, rounds=2)
        for name, r in res.items():
            ms.setdefault(name, []).append(r["median_ms"])
        for name, e in err.items():
            print(f"VARIANT {dt} {name} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
    use(*shipped)
    for name, vals in sorted(ms.items(), key=lambda kv: (kv[0].split()[0], statistics.median(kv[1]))):
        if name.startswith("torch"):
            continue
        base = statistics.median(ms["torch " + name.split()[0]])
        m = statistics.median(vals)
        print(f"VARIANT {dt} {name:<28} {m * 1e3:8.1f} us  torch {base * 1e3:8.1f} us  x torch {base / m:.3f}", flush=True)
