"""Where a float32 attention forward's GPU time goes on the small grids that stay under 1.5x torch
(issue 27): per call, each kernel's duration and the idle gaps between kernels
(cudakit.profile's per-launch events), next to the whole call behind an L2 flush and torch's
float32 SDPA on the same inputs. Prints lines starting with F32-BREAKDOWN.

    python3 scripts/attention_f32_breakdown.py [BxHxSxD[c],...]   (c: causal)

On calls of a few tens of microseconds the per-launch events measure the profiler, not the kernels:
on an H200 (2026-11-28 18:25 UTC, 2x8x256x96) the call took 22.0 us behind an L2 flush, its
profiled span 145.5 us, the three kernels 6.5, 20.4 and 11.2 us by their events.
"""
import statistics
import sys

import cupy as cp
import numpy as np
import torch

import cudakit
from cudakit.kernels import paths

SHAPES = [(1, 16, 512, 128, False), (1, 16, 512, 128, True), (1, 8, 1024, 128, False), (4, 32, 512, 128, False)]


def _shapes(arg: str) -> list:
    """[(B, H, S, D, causal)] of BxHxSxD[c],..."""
    return [(*(int(x) for x in s.rstrip("c").split("x")), s.endswith("c")) for s in arg.split(",")]


def main(shapes=SHAPES):
    rng = np.random.default_rng(0)
    for b, h, s, d, causal in shapes:
        q, k, v = (cp.asarray(rng.standard_normal((b, h, s, d)).astype(np.float32)) for _ in range(3))
        run = lambda: cudakit.attention_with_lse(q, k, v, causal=causal)   # noqa: E731
        for _ in range(3):   # the path choice (autotuned), then the plan
            run()
        cp.cuda.Device().synchronize()
        tq, tk, tv = (torch.from_dlpack(x) for x in (q, k, v))
        ours, theirs = paths.time_per_call(run), paths.time_per_call(   # (each call behind an L2 flush)
            lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal))
        per_kernel, gaps, spans = {}, [], []
        flush = paths.cold_start(cp)
        for _ in range(10):
            cp.cuda.Device().synchronize()
            flush()   # the GPU spins while the host queues the profiled call: the gaps are the device's
            with cudakit.profile() as prof:
                run()
            recs = [r for r in prof.resolve() if r.kind == "kernel" and r.gpu_start_us is not None]
            recs.sort(key=lambda r: r.gpu_start_us)
            for r in recs:
                per_kernel.setdefault(r.name[:70], []).append(r.duration_ms * 1e3)
            for r0, r1 in zip(recs, recs[1:]):
                gaps.append(r1.gpu_start_us - (r0.gpu_start_us + r0.duration_ms * 1e3))
            if recs:
                spans.append(recs[-1].gpu_start_us + recs[-1].duration_ms * 1e3 - recs[0].gpu_start_us)
        label = f"{b}x{h}x{s}x{d}{' causal' if causal else ''}"
        print(f"F32-BREAKDOWN {label}: cudakit {ours * 1e3:.1f} us, torch {theirs * 1e3:.1f} us "
              f"({theirs / ours:.3f}x), path {paths.last_paths().get('attention')}; profiled span "
              f"{statistics.median(spans) if spans else float('nan'):.1f} us, gaps between kernels "
              f"{[round(g, 1) for g in gaps[:4]]} us", flush=True)
        for name, us in per_kernel.items():
            print(f"F32-BREAKDOWN   {statistics.median(us):8.1f} us x{len(us) // 10}  {name}", flush=True)


if __name__ == "__main__":
    main(_shapes(sys.argv[1]) if len(sys.argv) > 1 else SHAPES)
