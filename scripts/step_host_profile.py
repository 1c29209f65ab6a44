"""Host time of one eager GPT training step (the `train` bench family's model, bf16): which ops
leave the C plan path (runtime/_native.c plan_call) for Python's dispatch.call, how often each
signature is planned, and the top functions of a cProfile. Prints lines starting STEP-HOST.
    python scripts/step_host_profile.py [preset]   (default: host-bound)"""
import collections
import cProfile
import dataclasses
import io
import pstats
import sys
import time

import cupy as cp

from cudakit import dispatch
from cudakit.bench.cases import train as tr


def main(preset="host-bound"):
    gpt = tr.load_example("train_gpt")
    cfg = dataclasses.replace(gpt.PRESETS[preset], dropout=0.0)
    model = tr._Model("gpt", cfg)
    device = model.ex.common.Device("cuda")
    batch = tuple(device.asarray(a) for a in model.batch())
    trainer = model.trainer(device, "bfloat16", False)
    for _ in range(5):
        trainer.step(*batch)
    cp.cuda.Device().synchronize()
    misses, plans = collections.Counter(), collections.Counter()
    real_call = dispatch.call

    def counted(op, planner, args, checked):
        misses[op] += 1
        key = dispatch._signature(dispatch._masked(op, args))
        if key is not None and (op, key) not in dispatch._plans:
            plans[op] += 1
        return real_call(op, planner, args, checked)
    dispatch.call = counted
    steps = 20
    t = time.perf_counter()
    for _ in range(steps):
        trainer.step(*batch)
    cp.cuda.Device().synchronize()
    print(f"STEP-HOST {preset}: {(time.perf_counter() - t) / steps * 1e3:.3f} ms per eager step; "
          f"{len(dispatch._plans)} plans ({sum(p is None for p in dispatch._plans.values())} checked)")
    for op, n in misses.most_common():
        print(f"STEP-HOST python dispatch {op}: {n / steps:.1f} per step, {plans[op]} new signatures")
    dispatch.call = real_call
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(5):
        trainer.step(*batch)
    pr.disable()
    cp.cuda.Device().synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
    for line in s.getvalue().splitlines():
        if line.strip():
            print("STEP-HOST " + line[:200])


if __name__ == "__main__":
    main(*sys.argv[1:])
