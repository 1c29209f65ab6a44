"""Shapes of the contiguous elementwise kernels crossed with where the output lies: each (U loads
in flight per thread, threads per block) writes into several separately allocated output buffers,
interleaved round by round with torch. Measured 2026-11-23 on an H100 (GPU-e57f5007): one kernel's
bandwidth moved by up to 1% with its output buffer alone (bfloat16 sigmoid at (1, 512): 0.996-1.007x
torch over 14 placements; add at (4, 256): 1.003-1.005x), so a shape is judged by its worst
placement here, not by one run. One run on the GPU:
    python3 benchmarks/sweeps/ew_placement_sweep.py [op:dtype ...] [--shapes 1x512,4x256] [--buffers 3]
Prints VARIANT lines: per shape the median, worst and best placement's ratio to torch."""
import statistics
import sys

import cupy as cp
import torch
from _ew_direct import TORCH, Case

import cudakit
from cudakit.bench import timing
from cudakit.kernels import elementwise as ew

ROUNDS = 4
argv = sys.argv[1:]


def _opt(flag, default):
    """The value after `flag` in argv (both removed), else default."""
    if flag not in argv:
        return default
    i = argv.index(flag)
    value = argv[i + 1]
    del argv[i:i + 2]
    return value


shapes = [tuple(int(v) for v in s.split("x")) for s in _opt("--shapes", "1x512,1x256,1x128,2x512,2x256,4x256,4x128,8x128,8x256").split(",")]
n_buf = int(_opt("--buffers", "3"))
wanted = [a.split(":") for a in argv] or [["sigmoid", "bfloat16"], ["relu", "bfloat16"]]
for op, dtype in wanted:
    if op not in TORCH:
        raise SystemExit(f"{op}: one of {', '.join(sorted(TORCH))}")
    case = Case(op, dtype)
    outs = [cp.empty_like(case.ins[0]) for _ in range(n_buf)]
    exprs = {u: case.expr(u) for u in sorted({s[0] for s in shapes})}
    mod = cudakit.compile_module(ew.SOURCE, name_expressions=list(exprs.values()), source_name="placement.cu")
    fns = {"torch": case.torch_fn()}
    for unroll, threads in shapes:
        for b, out in enumerate(outs):
            fns[(unroll, threads, b)] = case.launcher(mod.get_kernel(exprs[unroll]), unroll, threads, out)
    gbs = {}
    for _ in range(ROUNDS):
        res, errors = timing.time_gpu_interleaved(fns, warmup=2, reps=10, rounds=2)
        if errors:
            raise SystemExit(f"{op} {dtype}: {errors}")
        for name, r in res.items():
            gbs.setdefault(name, []).append(case.nbytes / r["median_ms"] / 1e6)
    base = statistics.median(gbs.pop("torch"))
    rows = []
    for unroll, threads in shapes:
        per_buf = [statistics.median(gbs[(unroll, threads, b)]) / base for b in range(n_buf)]
        rows.append((min(per_buf), statistics.median(per_buf), max(per_buf), unroll, threads))
    for lo, med, hi, unroll, threads in sorted(rows, reverse=True):
        print(f"VARIANT {op:<18} {dtype:<8} U={unroll} T={threads:<4} x torch worst {lo:.4f} median {med:.4f} "
              f"best {hi:.4f}  (torch {base:.0f} GB/s, {n_buf} output buffers)")
    del case, outs, fns, mod
    cp.get_default_memory_pool().free_all_blocks()
    torch.cuda.empty_cache()
