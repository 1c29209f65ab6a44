"""The contiguous elementwise kernels' L2 policy (kernels/elementwise.py, CK_L2_KEEP): loads with an
evict_last policy whose lines each warp hands back to evict_normal after its stores ("keep"), against
plain loads ("plain", -DCK_L2_KEEP=0) and against evict_last without the hand-back ("no-release",
-DCK_L2_RELEASE=0). Two measurements, one run on the GPU:
  1. each variant and torch writing into the SAME output placements (out= views of one buffer at
     MiB offsets; a kernel's bandwidth moves by up to 1% with where its output lies): per variant the
     mean and worst ratio to torch over the placements;
  2. what a variant leaves behind: the time of four sums over a 24 MB array queued right after it
     (the array stays in L2 after the first sum unless stale high-priority lines crowd it out).
    python3 benchmarks/sweeps/ew_l2_policy_ab.py [op:dtype ...] [--shapes 1x512x0,4x128x6]
Prints L2POLICY lines."""
import statistics
import sys

import cupy as cp
import numpy as np
import torch
from _ew_direct import Case, N

import cudakit
from cudakit.bench import timing
from cudakit.kernels import elementwise as ew

A = torch.ops.aten
TORCH_OUT = {  # torch writing into y
    "add": lambda y, a, b: torch.add(a, b, out=y), "mul": lambda y, a, b: torch.mul(a, b, out=y),
    "relu": lambda y, x: torch.clamp_min(x, 0, out=y), "tanh": lambda y, x: torch.tanh(x, out=y),
    "sigmoid": lambda y, x: torch.sigmoid(x, out=y), "silu": lambda y, x: A.silu.out(x, out=y),
    "gelu_tanh": lambda y, x: A.gelu.out(x, approximate="tanh", out=y),
    "gelu_erf": lambda y, x: A.gelu.out(x, out=y),
    "silu_backward": lambda y, g, x: A.silu_backward.grad_input(g, x, grad_input=y),
    "gelu_erf_backward": lambda y, g, x: A.gelu_backward.grad_input(g, x, grad_input=y)}
VARIANTS = {"keep": (), "plain": ("-DCK_L2_KEEP=0",), "no-release": ("-DCK_L2_RELEASE=0",)}
OFFSETS_MIB = (0, 1, 2, 3, 5, 6, 9, 14)

argv = sys.argv[1:]
shapes_arg = None
if "--shapes" in argv:
    i = argv.index("--shapes")
    shapes_arg = [tuple(int(v) for v in s.split("x")) for s in argv[i + 1].split(",")]
    del argv[i:i + 2]
wanted = [a.split(":") for a in argv] or [["silu", "bfloat16"], ["sigmoid", "bfloat16"], ["relu", "bfloat16"],
                                          ["gelu_erf_backward", "bfloat16"], ["add", "float32"]]
dev = cp.cuda.Device().id
stream = cp.cuda.get_current_stream()


def launcher(case, variant, shape, y):
    u, t, cap = shape
    mod = cudakit.compile_module(ew.SOURCE, options=VARIANTS[variant], name_expressions=[case.expr(u)],
                                 source_name=f"l2_{variant}.cu")
    k = mod.get_kernel(case.expr(u))
    smem = ew.cap_shared_memory(dev, cap)
    if smem > 48 * 1024:
        k.set_max_dynamic_shared_memory(smem)
    grid = -(-N // (u * t * case.vec))
    return lambda: k.launch((grid, 1, 1), (t, 1, 1), (*case.ins, y, np.int64(N), np.float64(0.0)), shared_mem=smem)


for op, dtype in wanted:
    case = Case(op, dtype)
    shapes = shapes_arg or [ew.contig_config(op, dtype, dev)]
    big = cp.empty(N + (16 << 20) // case.ins[0].itemsize, dtype=case.ins[0].dtype)
    outs = {o: big[(o << 20) // big.itemsize:(o << 20) // big.itemsize + N] for o in OFFSETS_MIB}
    fns = {}
    for o, y in outs.items():
        ty = torch.from_dlpack(y).view(case.tins[0].dtype)
        fns[("torch", o)] = lambda ty=ty, f=TORCH_OUT[op]: f(ty, *case.tins)
        for shape in shapes:
            for v in VARIANTS:
                fns[(v, shape, o)] = launcher(case, v, shape, y)
    gb = {}
    for _ in range(4):
        res, errors = timing.time_gpu_interleaved(fns, warmup=2, reps=8, rounds=2)
        if errors:
            raise SystemExit(f"{op} {dtype}: {errors}")
        for key, r in res.items():
            gb.setdefault(key, []).append(case.nbytes / r["median_ms"] / 1e6)
    med = {k: statistics.median(v) for k, v in gb.items()}
    torch_gbs = [med[("torch", o)] for o in OFFSETS_MIB]
    print(f"L2POLICY {op} {dtype}: torch {min(torch_gbs):.0f}-{max(torch_gbs):.0f} GB/s over {len(OFFSETS_MIB)} placements")
    for shape in shapes:
        for v in VARIANTS:
            r = [med[(v, shape, o)] / med[("torch", o)] for o in OFFSETS_MIB]
            print(f"L2POLICY {op:<18} {dtype:<8} {str(shape):<14} {v:<10} x torch mean {statistics.mean(r):.4f} "
                  f"worst {min(r):.4f} best {max(r):.4f}")
    # 2. what each variant leaves behind for the next kernel
    w = cp.ones((24 << 20) // 4, dtype=cp.float32)
    s = cp.empty((), dtype=cp.float32)
    after = {v: [] for v in VARIANTS}
    pre = {v: launcher(case, v, shapes[0], outs[0]) for v in VARIANTS}
    for rep in range(30):
        for v, f in pre.items():
            e1, e2 = cp.cuda.Event(), cp.cuda.Event()
            f()
            e1.record(stream)
            for _ in range(4):
                cp.sum(w, out=s)
            e2.record(stream)
            e2.synchronize()
            if rep >= 2:
                after[v].append(cp.cuda.get_elapsed_time(e1, e2) * 1000)
    print(f"L2POLICY {op:<18} {dtype:<8} next kernel (4 sums of 24 MB) after: " +
          ", ".join(f"{v} {statistics.median(t):.1f} us" for v, t in after.items()))
    del case, fns, big, outs, pre
    cp.get_default_memory_pool().free_all_blocks()
    torch.cuda.empty_cache()
