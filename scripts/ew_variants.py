"""Shapes of the contiguous elementwise kernels -- U 16-byte loads in flight per thread and input x
threads per block -- for every elementwise and activation case of the benchmark (2^28 elements,
float32 and bfloat16), timed through the public calls (cudakit.relu, ...) against torch, the rounds
interleaved so that drift in the GPU's state hits every variant alike. One run on the GPU:
    python3 scripts/ew_variants.py [case label ...]
Prints per case and shape the median GB/s and the ratio to torch; VARIANT-BEST lines name the
fastest shape of each case next to the shipped one (kernels/elementwise.py TUNED)."""
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor

from cudakit.bench import runner, timing
from cudakit.bench.cases import elementwise as cases_mod
from cudakit.kernels import elementwise as ew
from cudakit.kernels._common import vec_width

OP_OF_LABEL = {"gelu": "gelu_tanh", "gelu_backward": "gelu_tanh_backward"}
SHAPES = [(4, 256), (2, 512), (2, 256), (1, 512), (1, 256), (1, 128)]
HEAVY_SHAPES = [(4, 128), (2, 256), (2, 128), (1, 256), (1, 128)]
ROUNDS = 3

env = runner.make_env(False, False, ("float32", "bfloat16"), {"torch"})
only = set(sys.argv[1:])
cases = [c for c in cases_mod.cases(env)
         if c.family in ("elementwise", "activations") and (not only or c.op in only)]
shipped = dict(ew.TUNED)


def shapes_of(op, dt):
    return HEAVY_SHAPES if ew.contig_config(op, dt)[1] == ew.HEAVY_THREADS else SHAPES


def use(op, dt, shape):
    """Make the public call launch op's kernel with `shape` from its next call on."""
    ew.TUNED[(op, dt)] = shape
    ew._fast.clear()
    ew.EW_TABLES[op].clear()


# every variant instantiation compiled up front, a few NVRTC calls in parallel
exprs = []
for c in cases:
    op = OP_OF_LABEL.get(c.op, c.op)
    for shape in shapes_of(op, c.dtype):
        use(op, c.dtype, shape)
        exprs.append(ew._expr("contig", op, c.dtype, vec_width(c.dtype)))
    ew.TUNED.clear()
    ew.TUNED.update(shipped)
chunks = [exprs[i::8] for i in range(8)]
with ThreadPoolExecutor(8) as pool:
    list(pool.map(ew._family.add, [ch for ch in chunks if ch]))

best = []
for c in cases:
    op = OP_OF_LABEL.get(c.op, c.op)
    provs = c.setup()
    if "torch" not in provs:
        continue
    gbs = {}
    for _ in range(ROUNDS):
        gbs.setdefault("torch", []).append(c.nbytes / timing.time_gpu(provs["torch"], 3, 20)["median_ms"] / 1e6)
        for shape in shapes_of(op, c.dtype):
            use(op, c.dtype, shape)
            ms = timing.time_gpu(provs["cudakit"], 3, 20)["median_ms"]
            gbs.setdefault(shape, []).append(c.nbytes / ms / 1e6)
    ew.TUNED.clear()
    ew.TUNED.update(shipped)
    ew._fast.clear()
    ew.EW_TABLES[op].clear()
    del provs
    base = statistics.median(gbs.pop("torch"))
    med = {s: statistics.median(v) for s, v in gbs.items()}
    for s, m in sorted(med.items(), key=lambda kv: -kv[1]):
        print(f"VARIANT {c.op:<20} {c.dtype:<8} U={s[0]} T={s[1]:<4} {m:6.0f} GB/s  x torch {m / base:.3f}"
              f"  (torch {base:.0f} GB/s)")
    top = max(med, key=med.get)
    now = ew.contig_config(op, c.dtype)
    best.append(f"VARIANT-BEST {c.op:<20} {c.dtype:<8} best U={top[0]} T={top[1]} x torch {med[top] / base:.3f}; "
                f"shipped U={now[0]} T={now[1]} x torch {med.get(now, float('nan')) / base:.3f}")
    env.xp.get_default_memory_pool().free_all_blocks()
print("\n".join(best))
