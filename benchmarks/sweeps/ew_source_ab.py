"""The contiguous elementwise kernels of this tree against those of another source (a file holding
kernels/elementwise.py's SOURCE as it was, e.g. at an earlier commit), same shapes, launched
directly, interleaved round by round with torch: was a change to the kernel source a gain?
Comparing two runs on two lent GPUs cannot say (their ratios differ by up to 0.5%). Write the old
source here first, then run on the GPU:
    python3 benchmarks/sweeps/ew_source_ab.py --dump-source REV OLD.cu   (here: the source at git revision REV)
    python3 benchmarks/sweeps/ew_source_ab.py OLD.cu [op:dtype ...] [--shapes 1x512,4x256]
2^28 elements; default cases: add, relu_backward, silu_backward, gelu_tanh, tanh in bfloat16 and
add in float32. Prints VARIANT lines: median GB/s of each source and shape and the ratio to torch."""
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

if sys.argv[1:2] == ["--dump-source"]:   # runs where git is: import the module as it was at REV
    rev, dest = sys.argv[2], sys.argv[3]
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["git", "worktree", "add", "--detach", d, rev], check=True, capture_output=True)
        try:
            src = subprocess.run([sys.executable, "-c", "import cudakit.kernels.elementwise as e; print(e.SOURCE)"],
                                 cwd=d, env={"PYTHONPATH": f"{d}/src"}, check=True, capture_output=True, text=True).stdout
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", d], check=True)
    Path(dest).write_text(src)
    sys.exit(0)

import cupy as cp
import torch
from _ew_direct import TORCH, Case

import cudakit
from cudakit.bench import timing
from cudakit.kernels import elementwise as ew

ROUNDS = 5

argv = sys.argv[1:]
shapes_arg = "1x512,1x256,2x256,4x256,1x128"
if "--shapes" in argv:
    i = argv.index("--shapes")
    shapes_arg = argv[i + 1]
    del argv[i:i + 2]
shapes = [tuple(int(v) for v in s.split("x")) for s in shapes_arg.split(",")]
old_source = Path(argv[0]).read_text()
wanted = [a.split(":") for a in argv[1:]] or [["add", "bfloat16"], ["relu_backward", "bfloat16"],
                                             ["silu_backward", "bfloat16"], ["gelu_tanh", "bfloat16"],
                                             ["tanh", "bfloat16"], ["add", "float32"]]
for op, dtype in wanted:
    case = Case(op, dtype)
    outs = {"new": cp.empty_like(case.ins[0]), "old": cp.empty_like(case.ins[0])}
    fns = {"torch": case.torch_fn()} if op in TORCH else {}
    exprs = {u: case.expr(u) for u in sorted({s[0] for s in shapes})}
    for label, source in (("new", ew.SOURCE), ("old", old_source)):
        mod = cudakit.compile_module(source, name_expressions=list(exprs.values()), source_name=f"ab_{label}.cu")
        for unroll, threads in shapes:
            fns[(label, unroll, threads)] = case.launcher(mod.get_kernel(exprs[unroll]), unroll, threads, outs[label])
    gbs = {}
    for _ in range(ROUNDS):   # each round: every variant interleaved, the rounds' medians kept
        res, errors = timing.time_gpu_interleaved(fns, warmup=2, reps=10, rounds=2)
        if errors:
            raise SystemExit(f"{op} {dtype}: {errors}")
        for name, r in res.items():
            gbs.setdefault(name, []).append(case.nbytes / r["median_ms"] / 1e6)
    new_f, old_f = (torch.as_tensor(outs[k], device="cuda") for k in ("new", "old"))
    if dtype == "bfloat16":
        new_f, old_f = (t.view(torch.bfloat16) for t in (new_f, old_f))
    diff = (new_f.float() - old_f.float()).abs().max().item()
    base = statistics.median(gbs.pop("torch")) if "torch" in gbs else float("nan")
    for (label, unroll, threads), v in sorted(gbs.items(), key=lambda kv: -statistics.median(kv[1])):
        m = statistics.median(v)
        print(f"VARIANT {op:<18} {dtype:<8} {label} U={unroll} T={threads:<4} {m:6.0f} GB/s  x torch {m / base:.4f}"
              f"  (torch {base:.0f} GB/s; new vs old max |diff| {diff:.3g})")
    del case, outs, fns
    cp.get_default_memory_pool().free_all_blocks()
