"""Host time per call of batch_norm_with_stats(training=True)'s plan with and without its
separate-spans check (kernels/trace_plans._separate: running_mean and running_var must not overlap),
called directly with the same arguments, beside the public call and torch's F.batch_norm, rounds
interleaved (bench.timing.host_time_interleaved), in one process; float32 (4, 8, 16, 16).
    python3 benchmarks/sweeps/batch_norm_plan_guard_host.py [--out f.json]
Prints a VARIANT line (us a call) and writes it as a row to --out."""
import sys

import cupy as cp
import torch

import cudakit
from _results import dump_rows

from cudakit import dispatch
from cudakit.bench import timing

argv = sys.argv[1:]
x = cp.random.standard_normal((4, 8, 16, 16), dtype=cp.float32)
g, b = cp.ones(8, cp.float32), cp.zeros(8, cp.float32)
rm, rv = cp.zeros(8, cp.float32), cp.ones(8, cp.float32)
args = (x, g, b, rm, rv, True, 0.1, 1e-5)
dispatch.clear()
for _ in range(4):
    cudakit.batch_norm_with_stats(*args)
checked_plan = next(p for k, p in dispatch._plans.items() if k[0] == "batch_norm_with_stats")
replay = getattr(checked_plan, "plan", checked_plan)
tx, tg, tb, trm, trv = (torch.from_dlpack(a) for a in (x, g, b, rm, rv))
res, err = timing.host_time_interleaved(
    {"with_check": lambda: checked_plan(*args), "plan_alone": lambda: replay(*args),
     "public": lambda: cudakit.batch_norm_with_stats(x, g, b, rm, rv, True),
     "torch": lambda: torch.nn.functional.batch_norm(tx, trm, trv, tg, tb, True)},
    calls=2000, rounds=7, sync=cp.cuda.Device().synchronize)
for name, e in err.items():
    print(f"VARIANT failed {name}: {type(e).__name__}: {str(e)[:150]}", flush=True)
row = {f"{n}_us": round(r["median_ms"] * 1e3, 3) for n, r in res.items()}
row["plan_types"] = [type(checked_plan).__name__, type(replay).__name__]
print("VARIANT bn-plan-guard " + " ".join(f"{n} {t}" for n, t in row.items()), flush=True)
dump_rows(argv, __doc__, [row])
