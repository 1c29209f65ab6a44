"""Timing: CUDA events around each call after warm-up, medians of many runs; host clocks on CPU."""
from __future__ import annotations

import statistics
import time


def _summ(samples_ms: list[float]) -> dict:
    s = sorted(samples_ms)
    q = lambda p: s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]  # noqa: E731
    return {"median_ms": statistics.median(s), "p10_ms": q(0.1), "p90_ms": q(0.9), "runs": len(s)}


# cold samples: where the GPU passed a sample's start event before the host had queued the call,
# the sample is taken again behind a spin twice as long, up to this many times the default (0.3 ms):
# torch's autograd backward outlasted the default spin in more than 5 of 30 samples on 26 of the 88
# ResNet-50 rows (H100, 2026-11-27 15:49 UTC, benchmarks/results/*-conv-r50-bf16.json), which then
# timed its host as well as its kernels
_MAX_LONGER = 16


def _gpu_samples(fn, n: int, cp, cold: bool = False, exposed: list | None = None) -> list[float]:
    """n device-time samples of fn(), in ms: an event pair around each timed call, queued behind
    one untimed call (warm caches) or, with cold=True, behind a write that flushes the L2 cache
    and a spin (see time_gpu_interleaved), lengthened and the sample taken again where the host
    outlasted it (_MAX_LONGER). exposed: a list that gets one True per sample whose start event the
    GPU had already passed when fn() returned (the GPU waited for the host, so that sample holds
    host time too; cold: even behind the longest spin), else False."""
    from ..kernels.paths import cold_start   # (the flush and spin paths.run times candidates behind)
    s = cp.cuda.get_current_stream()
    start = cold_start(cp) if cold else None
    longer = 1
    out = []
    for _ in range(n):
        while True:
            a, b = cp.cuda.Event(), cp.cuda.Event()
            if cold:
                start(longer)
            else:
                fn()
            a.record(s)
            fn()
            late = a.done
            b.record(s)
            b.synchronize()
            if not (cold and late and longer < _MAX_LONGER):
                break
            longer *= 2
        if exposed is not None:
            exposed.append(late)
        out.append(cp.cuda.get_elapsed_time(a, b))
    return out


def time_gpu(fn, warmup: int = 3, reps: int = 20, min_ms: float = 0.0) -> dict:
    """Median time of fn() on the current CuPy stream, from a CUDA event pair around each call.

    One untimed call is queued before the start event of every sample, so the GPU is still busy
    with it while the host records the event and launches the timed call: the sample is the
    device time of the call, not the host's launch latency (ops whose device time is shorter
    than their host cost are measured by host_time_per_call instead)."""
    import cupy as cp
    for _ in range(warmup):
        fn()
    cp.cuda.get_current_stream().synchronize()
    samples, total = [], 0.0
    while len(samples) < reps or total < min_ms:
        ms = _gpu_samples(fn, 1, cp)[0]
        samples.append(ms)
        total += ms
        if len(samples) >= 10 * reps:
            break
    return _summ(samples)


def time_gpu_interleaved(fns: dict, warmup: int = 5, reps: int = 30, rounds: int = 3,
                         cold: bool = False) -> tuple[dict, dict]:
    """Device time of several providers (time_gpu's samples), taken in `rounds` interleaved rounds
    (A B A B ...) of reps/rounds samples each, so a drift in the GPU's clocks or temperature hits
    every provider alike instead of whichever ran last. cold=True: each timed call follows an L2
    flush instead of an untimed call of its own (inputs read from memory, as a training step's
    next op mostly does), queued while a spin kernel after the flush keeps the GPU busy, so the
    sample is the call's device time alone. Returns ({name: summary in ms},
    {name: exception}) -- a provider that raised (in its warm-up or a later round) is left out of
    the first and named in the second."""
    import cupy as cp
    fns = dict(fns)
    errors = {}
    for name, fn in list(fns.items()):
        try:
            for _ in range(warmup):
                fn()
            cp.cuda.get_current_stream().synchronize()
        except Exception as e:  # noqa: BLE001 -- the caller decides whether this provider may fail
            errors[name] = e
            del fns[name]
    samples = {name: [] for name in fns}
    exposed = {name: [] for name in fns}
    per_round = max(1, -(-reps // rounds))
    for _ in range(rounds):
        for name, fn in list(fns.items()):
            try:
                samples[name] += _gpu_samples(fn, per_round, cp, cold, exposed[name])
            except Exception as e:  # noqa: BLE001 -- e.g. out of memory in a later round
                errors[name] = e
                del fns[name], samples[name]
    out = {}
    for name, v in samples.items():
        out[name] = _summ(v)
        k = sum(exposed[name])
        if k:   # samples that include host time: the call's host cost outlasted what ran ahead of it
            out[name]["host_exposed_runs"] = k
    return out, errors


def time_cpu(fn, warmup: int = 1, reps: int = 10) -> dict:
    """Median wall time of fn() on the host."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return _summ(samples)


def host_time_per_call(fn, calls: int = 2000, rounds: int = 7, sync=None) -> dict:
    """Host time per call of `calls` back-to-back calls (median over rounds), in ms.

    The device is synchronised before each round and at the end, not inside a round, so this is
    the cost the caller's thread pays per call when the GPU keeps up (launch overhead)."""
    res, errors = host_time_interleaved({"fn": fn}, calls, rounds, sync)
    if errors:
        raise errors["fn"]
    return res["fn"]


def host_time_interleaved(fns: dict, calls: int = 2000, rounds: int = 15, sync=None) -> tuple[dict, dict]:
    """Host time per call of several providers, their rounds interleaved (A B C A B C ...), so a
    drift in the host's speed (a busy neighbour, frequency changes) hits every provider alike.
    Returns ({name: summary in ms per call}, {name: exception}) -- a provider that raised during
    warm-up is left out of the first and named in the second."""
    fns = dict(fns)
    errors = {}
    for name, fn in list(fns.items()):
        try:
            for _ in range(calls // 10 + 1):
                fn()
        except Exception as e:  # noqa: BLE001 -- the caller decides whether this provider may fail
            errors[name] = e
            del fns[name]
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            if sync:
                sync()
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - t) * 1e3 / calls)
    if sync:
        sync()
    return {name: _summ(s) for name, s in samples.items()}, errors


def copy_bandwidth(gpu: bool, nbytes: int) -> float:
    """Measured copy bandwidth in bytes/s, counting bytes read plus bytes written.

    GPU: a device-to-device cudaMemcpyAsync of `nbytes`; CPU: numpy.copyto of `nbytes`."""
    if gpu:
        import cupy as cp
        src = cp.empty(nbytes // 4, cp.float32)
        src.fill(1.0)
        dst = cp.empty_like(src)
        rt = cp.cuda.runtime
        s = cp.cuda.get_current_stream()
        t = time_gpu(lambda: rt.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes,
                                            rt.memcpyDeviceToDevice, s.ptr), warmup=3, reps=30)
        del src, dst
        return 2 * nbytes / (t["median_ms"] * 1e-3)
    import numpy as np
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    t = time_cpu(lambda: np.copyto(dst, src), reps=10)
    return 2 * nbytes / (t["median_ms"] * 1e-3)


def matmul_peak(gpu: bool, n: int = 8192) -> tuple[float, str]:
    """Measured dense matrix-multiply rate in FLOP/s and the dtype used: an n x n x n product
    through cuBLAS (CuPy) in bfloat16 (float16 if CuPy refuses bfloat16) on random data;
    float32 NumPy on the CPU."""
    if not gpu:
        import numpy as np
        n = min(n, 1024)
        a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
        t = time_cpu(lambda: a @ a, reps=3)
        return 2 * n**3 / (t["median_ms"] * 1e-3), "float32"
    import cupy as cp
    for dt in ("bfloat16", "float16"):
        try:
            a = cp.random.default_rng(0).standard_normal((n, n), dtype=cp.float32).astype(dt)
            b = cp.random.default_rng(1).standard_normal((n, n), dtype=cp.float32).astype(dt)
            t = time_gpu(lambda: cp.matmul(a, b), warmup=3, reps=10)
            return 2 * n**3 / (t["median_ms"] * 1e-3), dt
        except Exception:  # this CuPy has no cuBLAS path for the dtype: try the next one
            continue
    return float("nan"), "none"
