"""Shapes of the contiguous elementwise kernels -- U 16-byte loads in flight per thread and input x
threads per block x blocks-per-SM cap -- for every elementwise and activation case of the benchmark (2^28 elements,
float32 and bfloat16), timed through the public calls (cudakit.relu, ...) against torch, the rounds
interleaved so that drift in the GPU's state hits every variant alike. One run on the GPU:
    python3 benchmarks/sweeps/ew_variants.py [case label ...]
The shapes are `cudakit tune`'s candidates (kernels/ew_shapes.py), forced for this process only.
Prints per case and shape the median GB/s and the ratio to torch; VARIANT-BEST lines name the
fastest shape of each case next to the shipped one (kernels/elementwise.py TUNED)."""
import statistics
import sys

from cudakit.bench import runner, timing, tune
from cudakit.bench.cases import elementwise as cases_mod
from cudakit.kernels import elementwise as ew, ew_shapes

ROUNDS = 3

env = runner.make_env(False, False, ("float32", "bfloat16"), {"torch"})
# arguments: case labels (default: all) and extra shapes to try as U:threads:cap (e.g. 4:128:6)
extra = tuple(tuple(int(v) for v in a.split(":")) for a in sys.argv[1:] if a.count(":") == 2)
only = {a for a in sys.argv[1:] if a.count(":") != 2}
cases = [c for c in cases_mod.cases(env)
         if c.family in ("elementwise", "activations") and (not only or c.op in only)]
dev = env.xp.cuda.runtime.getDevice()
tune.compile_candidates(cases, extra)

best = []
for c in cases:
    op = tune.kernel_op(c.op)
    provs = c.setup()
    if "torch" not in provs:
        continue
    gbs = {}
    before = ew_shapes.shapes(dev).get((op, c.dtype))
    for _ in range(ROUNDS):
        gbs.setdefault("torch", []).append(c.nbytes / timing.time_gpu(provs["torch"], 3, 20)["median_ms"] / 1e6)
        for shape in tune.candidates(op, c.dtype, dev) + extra:
            tune.use(dev, op, c.dtype, shape)   # this process only; nothing is stored
            ms = timing.time_gpu(provs["cudakit"], 3, 20)["median_ms"]
            gbs.setdefault(shape, []).append(c.nbytes / ms / 1e6)
    tune.use(dev, op, c.dtype, before)
    del provs
    base = statistics.median(gbs.pop("torch"))
    med = {s: statistics.median(v) for s, v in gbs.items()}
    for s, m in sorted(med.items(), key=lambda kv: -kv[1]):
        print(f"VARIANT {c.op:<20} {c.dtype:<8} U={s[0]} T={s[1]:<4} cap={s[2]} {m:6.0f} GB/s  x torch {m / base:.3f}"
              f"  (torch {base:.0f} GB/s)")
    top = max(med, key=med.get)
    now = ew.contig_config(op, c.dtype, dev)   # what this GPU launches untuned: its model's or TUNED's
    best.append(f"VARIANT-BEST {c.op:<20} {c.dtype:<8} best {top} x torch {med[top] / base:.3f}; "
                f"shipped {now} x torch {med.get(now, float('nan')) / base:.3f}")
    env.xp.get_default_memory_pool().free_all_blocks()
print("\n".join(best))
