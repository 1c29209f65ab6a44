"""Channels-last conv2d on cuDNN with its weight given as (K, R, S, C) memory (the path "cudnn-krsc"
of kernels/cudnn.py: a copy a call, dL/dw copied back) or C-contiguous ("cudnn"), against torch's channels_last
(which copies its weight to channels-last a call too), in one run, cuDNN forced on cudakit's side:
each call behind an L2 flush and a spin, interleaved with torch's (bench.timing's cold samples, as
`cudakit bench` times), each weight layout in its own rounds.
    python3 benchmarks/sweeps/conv_nhwc_weight_ab.py [--dtype bfloat16] [--shapes N.C.HW.K.R.STRIDE,...]
Default shapes: the ResNet-50 3x3 convolutions at batch 32 (the 1x1 ones: one weight memory).
Prints VARIANT lines: median ms of each provider and x torch, forward and backward."""
import sys

import cupy as cp
import torch

import cudakit
from cudakit import dispatch
from cudakit.bench import timing
from cudakit.kernels import paths

argv = sys.argv[1:]
# each cuDNN path forced in its own rounds
want = ["cudnn"]
def forced(op, key, cands, timer=None):   # (recorded as paths.run records it: the dispatch plans replay it)
    name = want[0] if want[0] in dict(cands) else cands[0][0]
    paths._choice[(op, key)] = paths._last[op] = name
    return dict(cands)[name]()
paths.run = forced
dtype = argv[argv.index("--dtype") + 1] if "--dtype" in argv else "bfloat16"
shapes = [(32, 64, 56, 64, 3, 1), (32, 128, 56, 128, 3, 2), (32, 128, 28, 128, 3, 1), (32, 256, 28, 256, 3, 2),
          (32, 256, 14, 256, 3, 1), (32, 512, 14, 512, 3, 2), (32, 512, 7, 512, 3, 1)]
if "--shapes" in argv:
    shapes = [tuple(int(v) for v in s.split(".")) for s in argv[argv.index("--shapes") + 1].split(",")]


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
    ours = {"forward": lambda: cudakit.conv2d(x, w, None, stride, pad),
            "backward": lambda: cudakit.conv2d_backward(g, x, w, stride, pad, bias=False)}
    theirs = {"forward": lambda: torch.nn.functional.conv2d(tx, tw, None, stride, pad),
              "backward": lambda: torch.autograd.grad(y, (rx, rw), tg, retain_graph=True)}
    for kind in ("forward", "backward"):
        for flag in (True, False):   # (the path set outside the timed calls)
            want[0] = "cudnn-krsc" if flag else "cudnn"
            dispatch.clear()
            name = "weight KRSC" if flag else "weight KCRS"
            res, err = timing.time_gpu_interleaved({name: ours[kind], "torch": theirs[kind]}, warmup=3, reps=12,
                                                   rounds=3, cold=True)
            for e_name, e in err.items():
                print(f"VARIANT {tag} {kind} {e_name} failed: {type(e).__name__}: {str(e)[:150]}", flush=True)
            if name in res and "torch" in res:
                m, t = res[name]["median_ms"], res["torch"]["median_ms"]
                print(f"VARIANT {tag} {kind:<8} {name} {m:8.4f} ms torch {t:8.4f} ms x torch {t / m:.3f}"
                      f"{' (host exposed)' if res[name].get('host_exposed_runs') else ''}", flush=True)
