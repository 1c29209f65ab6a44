"""The contiguous elementwise kernels of this tree against those of another source (a file holding
kernels/elementwise.py's SOURCE as it was, e.g. at an earlier commit), same shapes, launched
directly, interleaved round by round with torch: was a change to the kernel source a gain?
Comparing two runs on two lent GPUs cannot say (their ratios differ by up to 0.5%). Write the old
source here first, then run on the GPU:
    python3 scripts/ew_source_ab.py --dump-source REV OLD.cu   (here: the source at git revision REV)
    python3 scripts/ew_source_ab.py OLD.cu [op:dtype ...] [--shapes 1x512,4x256]
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
import numpy as np
import torch

import cudakit
from cudakit.bench import timing
from cudakit.kernels import elementwise as ew

N = 1 << 28
ROUNDS = 5
F = torch.nn.functional
TORCH = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "relu": torch.relu, "tanh": torch.tanh,
         "sigmoid": torch.sigmoid, "silu": F.silu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
         "gelu_erf": F.gelu,
         "relu_backward": lambda g, x: torch.ops.aten.threshold_backward(g, x, 0),
         "silu_backward": torch.ops.aten.silu_backward,
         "gelu_tanh_backward": lambda g, x: torch.ops.aten.gelu_backward(g, x, approximate="tanh"),
         "gelu_erf_backward": torch.ops.aten.gelu_backward}

argv = sys.argv[1:]
shapes_arg = "1x512,1x256,2x256,4x256,1x128"
if "--shapes" in argv:
    i = argv.index("--shapes")
    shapes_arg = argv[i + 1]
    del argv[i:i + 2]
shapes = [tuple(int(v) for v in s.split("x")) for s in shapes_arg.split(",")]
args = argv
old_source = Path(args[0]).read_text()
wanted = [a.split(":") for a in args[1:]] or [["add", "bfloat16"], ["relu_backward", "bfloat16"],
                                             ["silu_backward", "bfloat16"], ["gelu_tanh", "bfloat16"],
                                             ["tanh", "bfloat16"], ["add", "float32"]]
for op, dtype in wanted:
    if dtype not in ("float32", "bfloat16"):
        raise SystemExit(f"{op}:{dtype}: float32 or bfloat16 only")
    tdt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    arity = 2 if op in ew.BINARY_OPS else 1
    tins = [torch.randn(N, dtype=tdt, device="cuda") for _ in range(arity)]
    bits = (lambda t: t.view(torch.int16)) if dtype == "bfloat16" else (lambda t: t)
    ins = tuple(cp.asarray(bits(t)) for t in tins)     # the same memory; 16-bit types as int16
    outs = {"new": cp.empty_like(ins[0]), "old": cp.empty_like(ins[0])}
    vec = 16 // ins[0].itemsize
    nbytes = (arity + 1) * N * ins[0].itemsize
    fns = {}
    if op in TORCH:
        fns["torch"] = lambda tins=tins, f=TORCH[op]: f(*tins)
    exprs = {u: ew._expr("contig", op, dtype, vec, u) for u in sorted({s[0] for s in shapes})}
    for label, source in (("new", ew.SOURCE), ("old", old_source)):
        mod = cudakit.compile_module(source, name_expressions=list(exprs.values()), source_name=f"ab_{label}.cu")
        for unroll, threads in shapes:
            k = mod.get_kernel(exprs[unroll])
            grid = -(-N // (unroll * threads * vec))
            fns[(label, unroll, threads)] = (
                lambda k=k, grid=grid, threads=threads, out=outs[label], ins=ins:
                k.launch((grid, 1, 1), (threads, 1, 1), (*ins, out, np.int64(N), np.float64(0.0))))
    gbs = {}
    for _ in range(ROUNDS):   # each round: every variant interleaved, the rounds' medians kept
        res, errors = timing.time_gpu_interleaved(fns, warmup=2, reps=10, rounds=2)
        if errors:
            raise SystemExit(f"{op} {dtype}: {errors}")
        for name, r in res.items():
            gbs.setdefault(name, []).append(nbytes / r["median_ms"] / 1e6)
    new_f, old_f = (torch.as_tensor(outs[k], device="cuda") for k in ("new", "old"))
    if dtype == "bfloat16":
        new_f, old_f = (t.view(torch.bfloat16) for t in (new_f, old_f))
    diff = (new_f.float() - old_f.float()).abs().max().item()
    base = statistics.median(gbs.pop("torch")) if "torch" in gbs else float("nan")
    for (label, unroll, threads), v in sorted(gbs.items(), key=lambda kv: -statistics.median(kv[1])):
        m = statistics.median(v)
        print(f"VARIANT {op:<18} {dtype:<8} {label} U={unroll} T={threads:<4} {m:6.0f} GB/s  x torch {m / base:.4f}"
              f"  (torch {base:.0f} GB/s; new vs old max |diff| {diff:.3g})")
    del ins, outs, tins, fns
    cp.get_default_memory_pool().free_all_blocks()
