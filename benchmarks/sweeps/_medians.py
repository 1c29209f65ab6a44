"""The sweeps' repeated timing: `runs` interleaved timings of the same providers (bench.timing's
time_gpu_interleaved), each provider's median per run collected, so a sweep reports the median of
run medians and the spread between runs."""
from cudakit.bench import timing


def medians(fns: dict, cold: bool = True) -> dict:
    """{name: median ms} of one interleaved timing of fns (3 rounds of 12 samples, each call behind
    an L2 flush where cold); a provider that failed is printed as a VARIANT failed line and left out."""
    res, err = timing.time_gpu_interleaved(fns, warmup=3, reps=12, rounds=3, cold=cold)
    for name, e in err.items():
        print(f"VARIANT failed {name}: {type(e).__name__}: {str(e)[:150]}", flush=True)
    return {name: r["median_ms"] for name, r in res.items()}


def run_medians(fns: dict, runs: int, reps: int, warmup: int = 2, rounds: int = 2,
                cold: bool = False) -> tuple[dict, dict]:
    """({name: [median ms of each run]}, {name: the exception of a provider that failed}); cold:
    each call behind an L2 flush, queued behind a spin kernel (device time alone, as `cudakit bench`
    times): warm samples of calls shorter than their host cost time the host instead."""
    ms, errors = {}, {}
    for _ in range(runs):
        res, err = timing.time_gpu_interleaved(fns, warmup=warmup, reps=reps, rounds=rounds, cold=cold)
        errors.update(err)
        for name, r in res.items():
            ms.setdefault(name, []).append(r["median_ms"])
    return ms, errors
