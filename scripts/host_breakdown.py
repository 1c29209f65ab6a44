"""Where each host-time row's microseconds go (GPU machine): per `cudakit bench` host_time row, the
call's time next to torch's, which dispatch plan it replays, the cost of the signature and of the
plan alone, and the top functions of a cProfile. `python3 scripts/host_breakdown.py [row ...]`."""
import cProfile
import io
import pstats
import sys

import cupy as cp
import torch

from cudakit import dispatch
from cudakit.bench.cases import host_time as ht
from cudakit.bench.timing import host_time_per_call
from cudakit.kernels.paths import time_per_call

a = ht._arrays(type("E", (), {"xp": cp, "gpu": True})())
calls = ht._cudakit_calls(a)
tcalls = ht._torch_calls(torch, a)
rows = sys.argv[1:] or list(calls)
seen = {}
_call = dispatch.call


def spy(op, planner, args, checked):
    seen["last"] = (op, args)
    return _call(op, planner, args, checked)


dispatch.call = spy


def per_call(fn, n=2000):
    """Host microseconds per back-to-back call (the bench's own measure, cudakit.bench.timing)."""
    return host_time_per_call(fn, n, 5, cp.cuda.runtime.deviceSynchronize)["median_ms"] * 1e3


table = []
for name in rows:
    fn, tf = calls[name], tcalls[name]
    seen.clear()
    us, tus = per_call(fn), per_call(tf)
    gus, gtus = time_per_call(fn) * 1e3, time_per_call(tf) * 1e3   # GPU time alone (queued behind a spin kernel)
    plan, sig_us, plan_us = "-", 0.0, 0.0
    if "last" in seen:
        op, args = seen["last"]
        masked = dispatch._masked(op, args)
        key = dispatch.signature(masked)
        p = dispatch._plans.get((op, key), "missing") if key is not None else "no signature"
        plan = p if isinstance(p, str) else ("checked" if p is None else getattr(p, "__qualname__", type(p).__name__))
        sig_us = per_call(lambda: dispatch._signature(masked))   # the signature in use (C where built)
        if callable(p):
            plan_us = per_call(lambda: p(*args))
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(300):
        fn()
    pr.disable()
    cp.cuda.runtime.deviceSynchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(10)
    print(f"BREAKDOWN ===== {name}: {us:.1f} us (torch {tus:.1f}), GPU {gus:.1f} us (torch {gtus:.1f}); plan {plan}; signature {sig_us:.1f} us, "
          f"plan alone {plan_us:.1f} us")
    print("\n".join("BREAKDOWN   " + l for l in s.getvalue().splitlines()
                    if l.strip() and not l.startswith(("   Ordered", "   List")))[:2500])
    table.append((name, us, tus, gus, gtus, plan, sig_us, plan_us))
print("BREAKDOWN-TABLE row | cudakit us | torch us | ratio | GPU us | torch GPU us | plan | signature us | plan alone us")
for name, us, tus, gus, gtus, plan, sig_us, plan_us in table:
    print(f"BREAKDOWN-TABLE {name} | {us:.1f} | {tus:.1f} | {tus / us:.2f} | {gus:.1f} | {gtus:.1f} | {plan[:32]} | "
          f"{sig_us:.1f} | {plan_us:.1f}")

# the floor under the GEMM rows: one cublasLtMatmul through the native binding, every argument precomputed
from cudakit.kernels import cublaslt  # noqa: E402

x, W, Wb = a["x"], a["w"], a["b"]
out = cp.empty((1, x.shape[0], W.shape[0]), cp.float32)
handle, desc, (la, lb, lc, ld), algo, wsize, scal, _ = cublaslt.bound(
    x.reshape(1, *x.shape), W.reshape(1, *W.shape), out, False, True, Wb)
nat = cublaslt._native()
lt_args = (nat[1], nat[2], handle.value, desc.value, Wb.data.ptr, 0, cublaslt._scalar_ptr(scal, 1.0), W.data.ptr,
           la.value, x.data.ptr, lb.value, cublaslt._scalar_ptr(scal, 0.0), out.data.ptr, lc.value, out.data.ptr,
           ld.value, algo, 0, 0, cp.cuda.get_current_stream().ptr)
print(f"BREAKDOWN-TABLE lt_matmul alone (native, args precomputed) | {per_call(lambda: nat[0](*lt_args)):.1f} | "
      f"GPU {time_per_call(lambda: nat[0](*lt_args)) * 1e3:.1f}")
