"""Channels-last conv2d on cuDNN with its weight given as (K, R, S, C) memory (kernels/cudnn.py
NHWC_WEIGHT: a copy a call, dL/dw copied back) or C-contiguous, against torch's channels_last
(which copies its weight to channels-last a call too), in one run, cuDNN forced on cudakit's side:
each call behind an L2 flush, interleaved (bench.timing's cold samples, as `cudakit bench` times).
    python3 benchmarks/sweeps/conv_nhwc_weight_ab.py [--dtype bfloat16] [--shapes N.C.HW.K.R.STRIDE,...]
Default shapes: the ResNet-50 3x3 convolutions at batch 32 (the 1x1 ones: one weight memory).
Prints VARIANT lines: median ms of each provider and x torch, forward and backward."""
import sys

import cupy as cp
import torch

import cudakit
from cudakit import dispatch
from cudakit.bench import timing
from cudakit.kernels import cudnn, paths

argv = sys.argv[1:]
# cuDNN forced (its path choice is keyed by the activations' layout, not the weight's: one layout's
# choice would otherwise carry over to the other)
paths.run = lambda op, key, cands, timer=None: dict(cands).get("cudnn", cands[0][1])()
dtype = argv[argv.index("--dtype") + 1] if "--dtype" in argv else "bfloat16"
shapes = [(32, 64, 56, 64, 3, 1), (32, 128, 56, 128, 3, 2), (32, 128, 28, 128, 3, 1), (32, 256, 28, 256, 3, 2),
          (32, 256, 14, 256, 3, 1), (32, 512, 14, 512, 3, 2), (32, 512, 7, 512, 3, 1)]
if "--shapes" in argv:
    shapes = [tuple(int(v) for v in s.split(".")) for s in argv[argv.index("--shapes") + 1].split(",")]


def with_weight(flag, fn):
    def call():
        old = cudnn.NHWC_WEIGHT
        cudnn.NHWC_WEIGHT = flag
        dispatch.clear()   # (a dispatch plan keeps the weight layout it was built with)
        try:
            return fn()
        finally:
            cudnn.NHWC_WEIGHT = old
    return call


for n, c, hw, k, r, stride in shapes:
    pad = r // 2
    ho = (hw + 2 * pad - r) // stride + 1
    rng = cp.random.default_rng(0)
    cl = lambda a: cp.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)  # noqa: E731
    x = cl(rng.standard_normal((n, c, hw, hw), dtype=cp.float32).astype(dtype))
    w = (rng.standard_normal((k, c, r, r), dtype=cp.float32) * (r * r * c) ** -0.5).astype(dtype)
    g = cl(rng.standard_normal((n, k, ho, ho), dtype=cp.float32).astype(dtype))
    tx, tw, tg = (torch.from_dlpack(a) for a in (x, w, g))
    rx, rw = (t.detach().requires_grad_(True) for t in (tx, tw))
    y = torch.nn.functional.conv2d(rx, rw, None, stride, pad)
    tag = f"{n}x{c}x{hw}x{hw} to {k} {r}x{r} s{stride} {dtype}"
    for kind, fns in (
            ("forward", {"weight KRSC": with_weight(True, lambda: cudakit.conv2d(x, w, None, stride, pad)),
                         "weight KCRS": with_weight(False, lambda: cudakit.conv2d(x, w, None, stride, pad)),
                         "torch": lambda: torch.nn.functional.conv2d(tx, tw, None, stride, pad)}),
            ("backward", {"weight KRSC": with_weight(True, lambda: cudakit.conv2d_backward(g, x, w, stride, pad,
                                                                                            bias=False)),
                          "weight KCRS": with_weight(False, lambda: cudakit.conv2d_backward(g, x, w, stride, pad,
                                                                                             bias=False)),
                          "torch": lambda: torch.autograd.grad(y, (rx, rw), tg, retain_graph=True)})):
        res, err = timing.time_gpu_interleaved(fns, warmup=3, reps=12, rounds=3, cold=True)
        for name, e in err.items():
            print(f"VARIANT {tag} {kind} {name} failed: {type(e).__name__}: {str(e)[:150]}", flush=True)
        base = res.get("torch", {}).get("median_ms", float("nan"))
        for name, m in res.items():
            print(f"VARIANT {tag} {kind:<8} {name:<12} {m['median_ms']:8.4f} ms x torch {base / m['median_ms']:.3f}",
                  flush=True)
