"""Which implementation runs a call when more than one can: cuDNN (kernels/cudnn.py) or cudakit's
own kernels (Triton implicit GEMMs, flash attention, direct kernels).

`run(op, key, candidates)` takes the candidates in order of preference, each a function returning
the result or None when it declines the call. The first time a signature `key` is seen, every
candidate that accepts it is run once to warm up (graph build, compilation) and then timed with
CUDA events, each call behind an L2 flush (time_per_call); the fastest is kept for that signature,
in memory and on disk (next to the Triton autotuner's choices, per GPU model, cuDNN/Triton/cudakit
version and timing method), so a new process does not time again. With CUDAKIT_AUTOTUNE=0, or while a CUDA graph is being captured (timing would
synchronise), the first candidate that accepts the call runs and nothing is stored.

`last_paths()` says which path each op took last (also in `cudakit info` and in a profile's
records, whose kernel names carry the path).
"""
from __future__ import annotations

import logging

from ..runtime.tuned import TunedTable

log = logging.getLogger("cudakit.paths")

_REPS = 5
_BATCH = 5
# rounds of timing, each candidate once a round, its time the median of its rounds, so that one
# disturbed measurement does not decide. With one measurement a candidate, one after the other,
# two ResNet-50 convolutions ran 20% slower in one benchmark run than in the runs before and after
# (bfloat16 NCHW 256->256 14x14 3x3 backward 0.0888 ms against 0.0736, channels-last 512->512
# 14x14 stride 2 forward 0.0352 against 0.0281; H100, 2026-11-27 17:14 UTC); whether a path or a
# cuDNN plan was chosen wrongly there was not recorded
_ROUNDS = 3
_MARGIN = 0.02
_choice: dict = {}          # (op, key) -> candidate name
_last: dict = {}            # op -> the candidate that ran its last call
_passing = False            # a candidate declined for a passing reason during the current timing
stats = {"tuned": 0}


def declined_for_now() -> None:
    """Called by a candidate that declines for a passing reason (no memory for its workspace at
    that moment), before it returns None: the choice made without it is kept in this process only,
    not on disk, so a later process times it again."""
    global _passing
    _passing = True


def conv_path_key(kind: str, dtype, x_shape, w_shape, geo, groups: int, bias: bool, layout: str = "nchw",
                  weight_cl: bool = False, relu: bool = False) -> tuple:
    """The signature under which conv2d's path is chosen: kind "fwd", "dgrad" or "wgrad", the
    shapes, geometry, groups, bias, dtype, float32 precision and current device, and the layout of
    the activations ("nhwc": channels-last, which cuDNN reads in place and the own kernels copy;
    "krsc" after it where the channels-last weight path is offered, cudnn.krsc_offered: a choice
    kept on disk from before that path existed is not reused; "wcl" after that where the weight
    (or, for "wgrad", dL/dw) is channels-last: the paths that read it C-contiguous copy it; and
    "grouped-cudnn" last for groups > 1, whose choices kept on disk from before cuDNN was a
    candidate for them (2026-11-28) were made among cudakit's own kernels alone); "relu" last for
    the forward with activation="relu" (its candidates fuse it, or cuDNN's runs it after)."""
    from .. import config
    from ..runtime import _cupy
    from .cudnn import krsc_offered
    name = str(dtype)
    prec = config.float32_precision() if name == "float32" else ""
    tags = () if layout == "nchw" else (layout, "krsc") if krsc_offered(layout, w_shape, dtype) else (layout,)
    return (kind, tuple(x_shape), tuple(w_shape), geo, groups, bool(bias), name, prec,
            _cupy.cupy().cuda.runtime.getDevice()) + tags + (("wcl",) if weight_cl else ()) \
        + (("grouped-cudnn",) if groups > 1 else ()) + (("relu",) if relu else ())


def chosen(op: str, key):
    """The candidate chosen for (op, key) in this process, or None (not yet chosen)."""
    return _choice.get((op, key))


def last_paths() -> dict:
    """{op: the path its last checked call took}: "cudnn", "triton" (or a named variant of
    cudakit's Triton kernels), "direct", "im2col", "materialized". A dispatch plan
    (dispatch.py) replays the path its signature's checked call took without recording it again;
    plans decline while the profiler records, whose records name each call's kernels, so a
    profile shows the path of every call."""
    return dict(_last)


def ran(op: str, name: str) -> None:
    """Record that `name` ran op's call where no choice was timed (the only path that takes it)."""
    _last[op] = name


def kept() -> dict:
    """{op: {path: signatures}} of the choices made in this process and those kept on disk for this
    GPU model and these library versions (a path chosen by an earlier process is taken without
    timing): which paths a program's signatures run, as `cudakit info` prints them."""
    import re
    from collections import Counter
    seen = {**_on_disk.table(), **{repr(k): v for k, v in _choice.items()}}   # (keys: repr((op, key)), as run() stores)
    out: dict = {}
    for k, v in seen.items():
        m = re.match(r"\('(\w+)', ", k)
        if m:
            out.setdefault(m.group(1), Counter())[v] += 1
    return {op: dict(c) for op, c in out.items()}


def reset() -> None:
    """Forget every choice made in this process (the disk file stays)."""
    _choice.clear()
    _last.clear()
    _on_disk.forget()


def run(op: str, key, candidates, timer=None):
    """The result of the chosen candidate for signature `key`, or None when every candidate declines.
    candidates: [(name, fn)] in order of preference, fn() -> result or None (declined).
    timer(fn) -> milliseconds replaces the CUDA-event timing (tests)."""
    name = _choice.get((op, key))
    if name is not None:
        for n, fn in candidates:
            if n == name:
                out = fn()
                if out is not None:
                    _last[op] = n
                    return out
        _choice.pop((op, key), None)   # the chosen one declined this call (e.g. a misaligned operand)
    stored = _on_disk.get(repr((op, key)))
    from ..config import settings
    from ..graphs import capturing
    in_capture = capturing() is not None
    tune = settings().autotune and not in_capture and len(candidates) > 1
    if stored is not None or not tune:
        for n, fn in sorted(candidates, key=lambda c: c[0] != stored):
            out = fn()
            if out is not None:
                _last[op] = n
                if stored is not None or not in_capture:   # a capture's pick is timed on a later call
                    _choice[(op, key)] = n
                return out
        return None
    global _passing
    results, fns = {}, dict(candidates)
    _passing = False
    for n, fn in candidates:
        out = fn()               # warm-up: builds, compiles, autotunes the candidate's own tiles
        if out is not None:
            results[n] = out
    samples: dict = {n: [] for n in results}
    last = None
    for _ in range(_ROUNDS):     # interleaved (A B A B ...): a drift of the GPU's clocks hits all alike
        for n in list(samples):
            declined = []

            def timed(fn=fns[n], declined=declined):
                r = fn()
                if r is None:
                    declined.append(True)
                return r
            t = (timer or time_per_call)(timed)
            last = n
            if declined:         # (e.g. no memory for its workspace beside the flush buffer): not
                _passing = True  # chosen on a time it did not run, and the choice kept in this process only
                del samples[n], results[n]
                continue
            samples[n].append(t)
    timings = {n: sorted(v)[len(v) // 2] for n, v in samples.items()}
    if settings().autotune_log:
        for n, t in timings.items():
            log.warning("autotune path %s %r: %s -> %.4f ms (rounds %s)", op, key, n, t,
                        ", ".join(f"{v:.4f}" for v in samples[n]))
    if not timings:
        return None
    best = None   # the first in preference order unless another is _MARGIN faster (timing noise)
    for n in timings:
        if best is None or timings[n] < timings[best] * (1 - _MARGIN):
            best = n
    stats["tuned"] += 1
    _choice[(op, key)] = _last[op] = best
    if not _passing:
        _on_disk.put(repr((op, key)), best)
    if best != last:                # candidates may write the same outputs (the attention forward's key
        again = fns[best]()         # parts): the result is the chosen one's own, as every later call's
        if again is not None:
            return again
    return results[best]


def time_per_call(fn) -> float:
    """Device milliseconds of one call of fn with its inputs out of the L2 cache (the benchmark's
    cold timing): the median of _REPS x _BATCH calls, each queued behind cold_start's L2 flush and
    spin and between its own event pair. The spin keeps the GPU busy while the host queues the
    call, so a sample is GPU time alone, not the host's launch latency; a sample whose start event
    the GPU passed before fn() returned (the host was slower than the spin) is dropped while
    enough others remain (the benchmark keeps such samples and counts them: host_exposed_runs).
    Back-to-back calls on warm inputs had chosen the Triton kernels for the bfloat16 1x1
    1024->256 14x14 convolution (0.0279 ms a call against cuDNN's 0.0286), which ran
    0.0401 ms a call behind a flush against cuDNN's 0.0305; and a batch of calls behind one spin
    measured the host time of cuDNN's checked path wherever five calls took the host longer than
    the spin, which chose the Triton kernels of the channels-last 1x1 64->64 56x56 convolution
    (0.0985 ms a call against cuDNN's 0.0132; H100, 2026-11-27, scripts/cudnn_plan_probe.py and
    scripts/path_timing_probe.py)."""
    from ..runtime import _cupy
    cp = _cupy.cupy()
    s = cp.cuda.get_current_stream()
    before = cold_start(cp, keep=False)   # (the buffer back to the pool after the timing)
    clean, late = [], []
    for _ in range(_REPS):
        calls = []
        for _ in range(_BATCH):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            before()
            a.record(s)
            fn()
            exposed = a.done
            b.record(s)
            calls.append((a, b, exposed))
        calls[-1][1].synchronize()
        for a, b, exposed in calls:
            (late if exposed else clean).append(cp.cuda.get_elapsed_time(a, b))
    samples = clean if len(clean) >= _REPS else clean + late
    return sorted(samples)[len(samples) // 2]


_SPIN_AFTER_FLUSH = 600_000   # clock cycles (about 0.3 ms at an H100's 1.98 GHz)
_flush_buffers: dict = {}   # device -> the buffer whose write evicts the L2 cache


def l2_flush_buffer(cp, keep: bool = True):
    """A buffer of twice the current GPU's L2 cache (at least 64 MiB) whose write evicts a call's
    inputs from the L2 cache (as triton.testing.do_bench flushes). keep: made once per device and
    held (the benchmark's timing); else a new one from the pool, freed with its last reference (a
    path's one-time timing: the memory goes back to the pool for the program's arrays)."""
    dev = cp.cuda.runtime.getDevice()
    buf = _flush_buffers.get(dev)
    if buf is None:
        l2 = cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrL2CacheSize, dev)
        buf = cp.empty(max(2 * l2, 64 << 20), cp.uint8)
        if keep:
            _flush_buffers[dev] = buf
    return buf


def cold_start(cp, keep: bool = True):
    """A function queueing, on the current stream, a write of l2_flush_buffer (the next call's
    inputs then come from memory) and a one-thread spin kernel of about 0.3 ms, which touches no
    memory: the host queues the timed call while the GPU spins, so the call's events measure its
    device time, not its host time (a flush alone covers only its own tens of microseconds: on
    2026-11-27 a grouped-query attention call whose checked path costs more host time than that was
    timed 16-23% slow). Where the flush buffer does not fit in memory, the spin alone (warm inputs).
    keep: as l2_flush_buffer's. start(longer): the spin `longer` times as long (bench.timing's cold
    samples lengthen it where the host outlasted it)."""
    try:
        buf = l2_flush_buffer(cp, keep)
    except (MemoryError, cp.cuda.memory.OutOfMemoryError):
        buf = None
    spin = _spinner()

    def start(longer: int = 1):
        if buf is not None:
            cp.cuda.runtime.memsetAsync(buf.data.ptr, 0, buf.nbytes, cp.cuda.get_current_stream().ptr)
        spin((1,), (1,), (cp.int64(_SPIN_AFTER_FLUSH * longer),))
    return start


def time_once(fn) -> float:
    """Device milliseconds of one call of fn (launch latency included): enough to tell a candidate
    many times slower than the best so far, which then needs no batches."""
    from ..runtime import _cupy
    cp = _cupy.cupy()
    s = cp.cuda.get_current_stream()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record(s)
    fn()
    b.record(s)
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b)


_SPIN_SRC = r"""
extern "C" __global__ void ck_spin(long long cycles) {   // keeps the stream busy: one thread waits
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
"""
_spinners: dict = {}


def _spinner():
    """The spin kernel (cupy.RawKernel, compiled by NVRTC once per device)."""
    from ..runtime import _cupy
    cp = _cupy.cupy()
    dev = cp.cuda.runtime.getDevice()
    k = _spinners.get(dev)
    if k is None:
        k = _spinners[dev] = cp.RawKernel(_SPIN_SRC, "ck_spin")
    return k


_TIMING = "cold-1"   # how candidates are timed: choices kept on disk by another timing are not reused


def _ident():
    from .. import __version__
    from ..runtime.device import get_device_info
    from . import cudnn
    try:
        import triton
        tv = triton.__version__
    except ImportError:
        tv = None
    return [get_device_info().name, cudnn.version(), tv, __version__, _TIMING]


_on_disk = TunedTable("paths", _ident)   # repr((op, key)) -> path name
