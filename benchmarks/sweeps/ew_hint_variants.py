"""Cache hints and block shapes of the contiguous elementwise kernels, for relu and add (float32
or bfloat16) on 2^28 elements: loads plain or with a PTX hint (CK_LOAD_HINT: .L2::256B prefetch, .L1::no_allocate,
both), stores plain or streaming (CK_STREAM_STORE, st.global.cs), and (unroll, threads) around the
shipped shape. The kernels are launched directly (cudakit.compile of kernels/elementwise.py's
source), interleaved round by round with torch. One run on the GPU:
    python3 benchmarks/sweeps/ew_hint_variants.py [--shapes-only] [op:dtype ...]   (default: relu:float32 add:float32)
Prints VARIANT lines: median GB/s over the rounds and the ratio to torch in the same rounds.
Measured 2026-11-23 on an H100: a grid capped at 16 or 64 blocks per SM lost 2-4% to one block
per tile, and streaming stores 0.2-0.4%; neither is tried again here. Also measured that day (GPU-2d7b943b,
a probe not kept): coherent ld.global loads, as torch's kernels issue, instead of the read-only
ld.global.nc, and torch's one-pack-per-thread kernel without the grid-stride loop: both within
0.3% of the shipped kernel (sigmoid/relu/tanh/add bfloat16, relu float32)."""
import statistics
import sys

import cupy as cp
import torch
from _ew_direct import Case

import cudakit
from cudakit.bench import timing
from cudakit.kernels import elementwise as ew

ROUNDS = 5
HINTS = {"plain": (), "cs-store": ("-DCK_STREAM_STORE",), "L2::256B": ('-DCK_LOAD_HINT=".L2::256B"',),
         "no_allocate": ('-DCK_LOAD_HINT=".L1::no_allocate"',),
         "both": ('-DCK_LOAD_HINT=".L1::no_allocate.L2::256B"',)}
SHAPES = [(1, 512), (4, 512), (2, 1024), (1, 1024), (2, 256), (1, 256), (4, 256), (1, 128), (2, 128)]

if "--shapes-only" in sys.argv:  # plain loads and stores: the block shapes alone
    HINTS = {"plain": ()}
wanted = [a.split(":") for a in sys.argv[1:] if not a.startswith("--")] or [["relu", "float32"], ["add", "float32"]]
for op, dtype in wanted:
    case = Case(op, dtype)
    out = cp.empty_like(case.ins[0])
    torch_fn = case.torch_fn()
    shipped = ew.contig_config(op, dtype)
    variants = {}
    for label, opts in HINTS.items():
        for shape in [shipped] + (SHAPES if label == "plain" else []):
            expr = case.expr(shape[0])
            variants[(label, shape)] = cudakit.compile(ew.SOURCE, expr, options=opts, name_expressions=[expr])
    gbs = {"torch": []}
    for _ in range(ROUNDS):
        gbs["torch"].append(case.nbytes / timing.time_gpu(torch_fn, 3, 20)["median_ms"] / 1e6)
        for (label, (unroll, threads)), k in variants.items():
            ms = timing.time_gpu(case.launcher(k, unroll, threads, out), 3, 20)["median_ms"]
            gbs.setdefault((label, (unroll, threads)), []).append(case.nbytes / ms / 1e6)
            assert torch.equal(torch.as_tensor(out, device="cuda"), case.bits(torch_fn())), (op, label)
    base = statistics.median(gbs.pop("torch"))
    for (label, (unroll, threads)), v in sorted(gbs.items(), key=lambda kv: -statistics.median(kv[1])):
        m = statistics.median(v)
        mark = " (shipped)" if label == "plain" and (unroll, threads) == shipped else ""
        print(f"VARIANT {op:<5} {dtype:<8} U={unroll} T={threads:<4} {label:<11} {m:6.0f} GB/s  x torch {m / base:.4f}"
              f"  (torch {base:.0f} GB/s){mark}")
