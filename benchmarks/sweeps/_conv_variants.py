"""What the direct-conv tile sweeps (depthwise_variants.py, grouped_variants.py) share: each
variant checked against float64 first, the data and torch's passes of one shape, and the timing
of every variant interleaved with torch, printed as VARIANT lines."""
import statistics

import cupy as cp
import ml_dtypes
import numpy as np
import torch

from cudakit.bench import timing

DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float32": np.float32}


def check_each(fwd, wgrad, shipped, use, check):
    """Set each forward variant (with the shipped weight gradient), then each weight-gradient
    variant, run check() and print whether it passed; the shipped tiles are set again after."""
    for f, wg in [(v, None) for v in fwd] + [(None, v) for v in wgrad]:
        use(f or shipped[0], wg or shipped[1])
        try:
            check()
            print(f"VARIANT check fwd {f or '-'} wgrad {wg or '-'}: passed", flush=True)
        except AssertionError as e:
            print(f"VARIANT check fwd {f or '-'} wgrad {wg or '-'}: FAILED {str(e)[:300]}", flush=True)
    use(*shipped)


def data(x_shape, k, rs, groups, dtype):
    """(x, w, g) CuPy arrays of a convolution with k filters of rs x rs in `groups` groups, padding
    rs // 2 (g: dL/dy, x's spatial size) and torch's forward, backward and weight-gradient passes
    of it: {"torch fwd": ..., "torch bwd": ..., "torch wgrad": ...}."""
    crng = cp.random.default_rng(0)
    c, pad = x_shape[1], rs // 2
    x = crng.standard_normal(x_shape, dtype=cp.float32).astype(DTYPES[dtype])
    w = (crng.standard_normal((k, c // groups, rs, rs), dtype=cp.float32) / rs / (c // groups) ** 0.5).astype(x.dtype)
    g = crng.standard_normal((x_shape[0], k) + x_shape[2:], dtype=cp.float32).astype(x.dtype)
    tx, tw, tg = (torch.from_dlpack(a) for a in (x, w, g))
    rx, rw = tx.detach().requires_grad_(True), tw.detach().requires_grad_(True)
    y = torch.nn.functional.conv2d(rx, rw, None, 1, pad, 1, groups)
    return (x, w, g), {"torch fwd": lambda: torch.nn.functional.conv2d(tx, tw, None, 1, pad, 1, groups),
                       "torch bwd": lambda: torch.autograd.grad(y, (rx, rw), tg, retain_graph=True),
                       "torch wgrad": lambda: torch.autograd.grad(y, (rw,), tg, retain_graph=True)}


def time_and_report(fns: dict, label: str, width: int = 30):
    """Time fns (named "<pass> <variant>" and "torch <pass>") in 3 interleaved runs and print a
    VARIANT line per variant: median us, torch's same pass, the ratio; fastest first per pass."""
    ms = {}
    for _ in range(3):
        res, err = timing.time_gpu_interleaved(fns, warmup=2, reps=8, rounds=2)
        for name, r in res.items():
            ms.setdefault(name, []).append(r["median_ms"])
        for name, e in err.items():
            print(f"VARIANT {label} {name} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
    for name, vals in sorted(ms.items(), key=lambda kv: (kv[0].split()[0], statistics.median(kv[1]))):
        if name.startswith("torch"):
            continue
        base = statistics.median(ms["torch " + name.split()[0]])
        m = statistics.median(vals)
        print(f"VARIANT {label} {name:<{width}} {m * 1e3:8.1f} us  torch {base * 1e3:8.1f} us  x torch {base / m:.3f}",
              flush=True)
