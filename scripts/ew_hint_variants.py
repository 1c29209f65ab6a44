"""Cache hints and block shapes of the contiguous elementwise kernels, for relu and add float32 on
2^28 elements: loads plain or with a PTX hint (CK_LOAD_HINT: .L2::256B prefetch, .L1::no_allocate,
both), stores plain or streaming (CK_STREAM_STORE, st.global.cs), and (unroll, threads) around the
shipped shape. The kernels are launched directly (cudakit.compile of kernels/elementwise.py's
source), interleaved round by round with torch. One run on the GPU:
    python3 scripts/ew_hint_variants.py
Prints VARIANT lines: median GB/s over the rounds and the ratio to torch in the same rounds.
Measured 2026-11-23 on an H100: a grid capped at 16 or 64 blocks per SM lost 2-4% to one block
per tile, and streaming stores 0.2-0.4%; neither is tried again here."""
import statistics

import cupy as cp
import numpy as np
import torch

import cudakit
from cudakit.bench import timing
from cudakit.kernels import elementwise as ew

N = 1 << 28
ROUNDS = 5
HINTS = {"plain": (), "cs-store": ("-DCK_STREAM_STORE",), "L2::256B": ('-DCK_LOAD_HINT=".L2::256B"',),
         "no_allocate": ('-DCK_LOAD_HINT=".L1::no_allocate"',),
         "both": ('-DCK_LOAD_HINT=".L1::no_allocate.L2::256B"',)}
SHAPES = [(1, 512), (4, 512), (2, 1024), (1, 1024), (2, 256)]

x, y = cp.random.standard_normal(N, dtype=cp.float32), cp.random.standard_normal(N, dtype=cp.float32)
out = cp.empty_like(x)
tx, ty = torch.as_tensor(x, device="cuda"), torch.as_tensor(y, device="cuda")
cases = {"relu": (lambda: torch.relu(tx), (x,), 8 * N), "add": (lambda: torch.add(tx, ty), (x, y), 12 * N)}

for op, (torch_fn, ins, nbytes) in cases.items():
    shipped = ew.contig_config(op, "float32")
    variants = {}
    for label, opts in HINTS.items():
        for shape in [shipped] + (SHAPES if label == "plain" else []):
            expr = ew._expr("contig", op, "float32", 4).rsplit(",", 1)[0] + f", {shape[0]}>"
            variants[(label, shape)] = cudakit.compile(ew.SOURCE, expr, options=opts, name_expressions=[expr])
    gbs = {"torch": []}
    for _ in range(ROUNDS):
        gbs["torch"].append(nbytes / timing.time_gpu(torch_fn, 3, 20)["median_ms"] / 1e6)
        for (label, (unroll, threads)), k in variants.items():
            grid = -(-N // (unroll * threads * 4))

            def run(k=k, grid=grid, threads=threads):
                k.launch((grid, 1, 1), (threads, 1, 1), (*ins, out, np.int64(N), np.float64(0.0)))
            gbs.setdefault((label, (unroll, threads)), []).append(nbytes / timing.time_gpu(run, 3, 20)["median_ms"] / 1e6)
            assert cp.array_equal(out, cp.asarray(torch_fn())), (op, label)
    base = statistics.median(gbs.pop("torch"))
    for (label, (unroll, threads)), v in sorted(gbs.items(), key=lambda kv: -statistics.median(kv[1])):
        m = statistics.median(v)
        mark = " (shipped)" if label == "plain" and (unroll, threads) == shipped else ""
        print(f"VARIANT {op:<5} U={unroll} T={threads:<4} {label:<11} {m:6.0f} GB/s  x torch {m / base:.4f}"
              f"  (torch {base:.0f} GB/s){mark}")
