"""Reductions over axes that are not adjacent (a per-channel sum of NCHW data, axes (0, 2, 3)),
whose input kernels/reduction.py transposes once: the copy by CuPy's strided copy (cudakit's until
2026-11-28) against kernels/transpose.py's permute (since), each alone, and the public
cudakit.sum against torch's sum, device time behind an L2 flush; then host time a call of
cudakit.sum (a dispatch plan traced from the call, now that the copy is one of cudakit's launches)
against torch on a small array.
    python3 benchmarks/sweeps/reduction_axes_copy.py [--out f.json]
Prints VARIANT lines (us a call)."""
import sys

import cupy as cp
import torch
from _results import dump_rows

import cudakit
from cudakit.bench import timing
from cudakit.kernels.transpose import permute

argv = sys.argv[1:]
rows = []
rng = cp.random.default_rng(0)
for dtype in ("bfloat16", "float32"):
    for shape in ((32, 256, 28, 28), (32, 64, 112, 112)):
        x = rng.standard_normal(shape, dtype=cp.float32).astype(dtype)
        tx = torch.from_dlpack(x)
        perm = (1, 0, 2, 3)   # kept axis first, the reduced ones after it (reduction.plan's order)
        fns = {"copy_cupy": lambda x=x: cp.ascontiguousarray(x.transpose(perm)),
               "copy_permute": lambda x=x: permute(x, perm),
               "cudakit_sum": lambda x=x: cudakit.sum(x, axis=(0, 2, 3)),
               "torch_sum": lambda tx=tx: tx.sum((0, 2, 3))}
        res, err = timing.time_gpu_interleaved(fns, reps=30, rounds=3, cold=True)
        for n, e in err.items():
            print(f"VARIANT failed {n}: {type(e).__name__}: {str(e)[:150]}", flush=True)
        us = {n: r["median_ms"] * 1e3 for n, r in res.items()}
        row = {"case": "x".join(map(str, shape)) + " sum (0, 2, 3)", "dtype": dtype,
               **{f"{n}_ms": round(t / 1e3, 5) for n, t in us.items()}}
        if "cudakit_sum" in us and "torch_sum" in us:
            row["x_torch"] = round(us["torch_sum"] / us["cudakit_sum"], 3)
        rows.append(row)
        print(f"VARIANT {row['case']} {dtype:<8} " + " ".join(f"{n} {t:.2f} us" for n, t in us.items())
              + f"; x torch {row.get('x_torch', float('nan')):.3f}", flush=True)
small = rng.standard_normal((4, 8, 16, 16), dtype=cp.float32)
ts = torch.from_dlpack(small)
res, err = timing.host_time_interleaved({"cudakit_sum": lambda: cudakit.sum(small, axis=(0, 2, 3)),
                                         "torch_sum": lambda: ts.sum((0, 2, 3))},
                                        calls=500, rounds=7, sync=cp.cuda.Device().synchronize)
us = {n: r["median_ms"] * 1e3 for n, r in res.items()}
row = {"case": "4x8x16x16 sum (0, 2, 3) host", "dtype": "float32",
       **{f"{n}_ms": round(t / 1e3, 6) for n, t in us.items()}}
if len(us) == 2:
    row["x_torch"] = round(us["torch_sum"] / us["cudakit_sum"], 3)
rows.append(row)
print("VARIANT host 4x8x16x16 float32 " + " ".join(f"{n} {t:.2f} us" for n, t in us.items())
      + f"; x torch {row.get('x_torch', float('nan')):.3f}", flush=True)
dump_rows(argv, __doc__, rows)
