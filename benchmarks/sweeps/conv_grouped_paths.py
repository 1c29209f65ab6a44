"""Grouped and depthwise conv2d through the public calls (the path each signature's first call timed:
cuDNN, offered for groups > 1 since 2026-11-28, or cudakit's own kernels) against torch, bfloat16
and float32 (cudakit under precision "tf32" against torch's default, cuDNN's TF32), batch 32:
ResNeXt-50 32x4d's grouped 3x3 convolutions (32 groups; 4, 8, 16 and 32 channels a group, one of
stride 2), 32 groups of 8 at 28x28 (the benchmark's conv2d_grouped), 64 groups of 4, and depthwise
3x3 (MobileNetV2) and 7x7 (ConvNeXt). Forward with a bias; backward dL/dx, dL/dw, dL/db (torch:
torch.autograd.grad of its conv2d). Each pair timed interleaved behind an L2 flush (the bench's
cold timing), in one process, beside cudakit's own kernels called directly (kernels/conv.py: the
path every grouped call took before).
    python3 benchmarks/sweeps/conv_grouped_paths.py [--out f.json] [--dtype bfloat16,float32]
Then the backward's bias gradient alone (dL/dy summed over (N, H, W)): CuPy's sum, cudakit's
reduction.channel_sum and torch's, NCHW and channels-last.
Prints VARIANT lines (ms a call, torch's time over cudakit's, the path conv2d took)."""
import sys

import cupy as cp
import torch
from _results import dump_rows

import cudakit
from cudakit.bench import timing
from cudakit.kernels import conv, paths
from cudakit.kernels.reduction import channel_sum

argv = sys.argv[1:]
DTYPES = argv[argv.index("--dtype") + 1].split(",") if "--dtype" in argv else ["bfloat16", "float32"]
# (name, C = K, H = W, window, stride, groups)
SHAPES = [("resnext s1 4/group", 128, 56, 3, 1, 32), ("resnext s2 8/group", 256, 28, 3, 1, 32),
          ("resnext s3 16/group", 512, 14, 3, 1, 32), ("resnext s4 32/group", 1024, 7, 3, 1, 32),
          ("resnext stride 2", 256, 56, 3, 2, 32), ("64 groups of 4", 256, 28, 3, 1, 64),
          ("depthwise 3x3", 144, 56, 3, 1, 144), ("depthwise 7x7", 96, 56, 7, 1, 96)]
N = 32
rows = []
for dtype in DTYPES:
    cudakit.set_float32_precision("tf32" if dtype == "float32" else None)
    rng = cp.random.default_rng(0)
    for name, c, hw, r, stride, groups in SHAPES:
        pad = r // 2
        ho = (hw + 2 * pad - r) // stride + 1
        x = rng.standard_normal((N, c, hw, hw), dtype=cp.float32).astype(dtype)
        w = rng.standard_normal((c, c // groups, r, r), dtype=cp.float32) * (r * r * c // groups) ** -0.5
        w = w.astype(dtype)
        b = rng.standard_normal((c,), dtype=cp.float32).astype(dtype)
        g = rng.standard_normal((N, c, ho, ho), dtype=cp.float32).astype(dtype)
        tx, tw, tb, tg = (torch.from_dlpack(a) for a in (x, w, b, g))
        rx, rw, rb = (v.detach().requires_grad_(True) for v in (tx, tw, tb))
        ty = torch.nn.functional.conv2d(rx, rw, rb, stride, pad, 1, groups)
        fns = {"ck_fwd": lambda: cudakit.conv2d(x, w, b, stride, pad, 1, groups),
               "torch_fwd": lambda: torch.nn.functional.conv2d(tx, tw, tb, stride, pad, 1, groups),
               "ck_bwd": lambda: cudakit.conv2d_backward(g, x, w, stride, pad, 1, True, groups),
               "torch_bwd": lambda: torch.autograd.grad(ty, (rx, rw, rb), tg, retain_graph=True)}
        geo = (stride, stride, pad, pad, 1, 1, r, r, ho, ho)
        if conv.why_not(dtype, x.shape, c, geo, groups) is None:
            fns["own_fwd"] = lambda: conv.conv2d(x, w, b, geo, groups)
            fns["own_bwd"] = lambda: (conv.conv2d_input_grad(g, w, x.shape, geo, groups),
                                      conv.conv2d_weight_grad(g, x, w.shape, geo, True, groups))
        fns["ck_fwd"]()   # the paths chosen (timed once) before the timing
        fns["ck_bwd"]()
        chosen = {op: paths.last_paths().get(op) for op in ("conv2d", "conv2d_input_grad", "conv2d_weight_grad")}
        res, err = timing.time_gpu_interleaved(fns, reps=30, rounds=3, cold=True)
        for n_, e in err.items():
            print(f"VARIANT failed {name} {dtype} {n_}: {type(e).__name__}: {str(e)[:150]}", flush=True)
        ms = {n_: r_["median_ms"] for n_, r_ in res.items()}
        row = {"shape": name, "c": c, "hw": hw, "window": r, "stride": stride, "groups": groups, "dtype": dtype,
               **{f"{n_}_ms": round(t, 5) for n_, t in ms.items()}, "paths": chosen}
        for kind in ("fwd", "bwd"):
            for who in ("ck", "own"):
                if f"{who}_{kind}" in ms and f"torch_{kind}" in ms:
                    key = f"x_{kind}" if who == "ck" else f"x_own_{kind}"
                    row[key] = round(ms[f"torch_{kind}"] / ms[f"{who}_{kind}"], 3)
        rows.append(row)
        print(f"VARIANT {name:<20} {dtype:<8} fwd {ms.get('ck_fwd', float('nan')):.4f} ms "
              f"(torch {ms.get('torch_fwd', float('nan')):.4f}) x {row.get('x_fwd', float('nan')):.3f}; "
              f"bwd {ms.get('ck_bwd', float('nan')):.4f} ms (torch {ms.get('torch_bwd', float('nan')):.4f}) "
              f"x {row.get('x_bwd', float('nan')):.3f}; own kernels x {row.get('x_own_fwd', float('nan')):.3f} / "
              f"{row.get('x_own_bwd', float('nan')):.3f}; paths {chosen}", flush=True)
cudakit.set_float32_precision(None)
# the backward's bias gradient alone (cuDNN's backward sums dL/dy beside its wgrad): CuPy's sum over
# (0, 2, 3) (cudakit's until 2026-11-28), reduction.channel_sum, torch's sum; NCHW and channels-last
for dtype in DTYPES:
    rng = cp.random.default_rng(1)
    for c, hw in ((256, 28), (64, 56)):
        g = rng.standard_normal((N, c, hw, hw), dtype=cp.float32).astype(dtype)
        for layout, gd in (("nchw", g), ("nhwc", cp.ascontiguousarray(g.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2))):
            tg = torch.from_dlpack(gd)
            fns = {"cupy": lambda gd=gd: gd.sum(axis=(0, 2, 3), dtype=cp.float32).astype(gd.dtype),
                   "channel_sum": lambda gd=gd: channel_sum(gd), "torch": lambda tg=tg: tg.sum((0, 2, 3))}
            res, err = timing.time_gpu_interleaved(fns, reps=30, rounds=3, cold=True)
            us = {n_: r_["median_ms"] * 1e3 for n_, r_ in res.items()}
            rows.append({"bias_grad": f"{N}x{c}x{hw}x{hw} {layout}", "dtype": dtype,
                         **{f"{n_}_ms": round(t / 1e3, 5) for n_, t in us.items()}})
            print(f"VARIANT bias-grad {N}x{c}x{hw}x{hw} {layout} {dtype:<8} "
                  + " ".join(f"{n_} {t:.2f} us" for n_, t in us.items()), flush=True)
dump_rows(argv, __doc__, rows)
