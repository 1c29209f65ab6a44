"""Per-launch timing with CUDA events, transfer timing, summaries, JSON and Chrome-trace export.

    with cudakit.profile() as prof:
        y = cudakit.relu(x)
    prof.summary()                           # a text table per kernel
    prof.export_chrome_trace("trace.json")   # open in Perfetto or chrome://tracing

While a profile is active the allocator also reports every counted allocation and free to it
(prof.memory_events, prof.memory_timeline(), a line per device in summary(), a counter track in
the trace). When no profile is active the launch path pays one global read (`_active is None`).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import json
import statistics
import threading
import time
from dataclasses import dataclass, field

from .errors import CudakitError

_active: "Profile | None" = None
_lock = threading.Lock()


@dataclass
class Record:
    """One launch or transfer. Durations in milliseconds, filled in by Profile.resolve()."""
    kind: str            # "kernel", "transfer", "collective" or "range"
    name: str            # kernel name, "HtoD"/"DtoH", or "nccl:all_reduce" ...
    device: int
    stream: int
    host_start_us: float
    grid: tuple = ()
    block: tuple = ()
    nbytes: int = 0
    duration_ms: float | None = None
    bus_factor: float = 0.0   # collectives: bus bandwidth = bytes / time * bus_factor (nccl-tests)
    gpu_start_us: float | None = None   # when the GPU started it, on the profile's host clock (resolve())
    _events: tuple = field(default=(), repr=False)
    _host: object = field(default=None, repr=False)   # a host collective's future (the CPU backend's), until resolve()

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("kind", "name", "device", "stream", "host_start_us",
                                             "grid", "block", "nbytes", "duration_ms", "gpu_start_us")}
        d["grid"], d["block"] = list(self.grid), list(self.block)
        if self.kind in ("transfer", "collective") and self.duration_ms:
            d["gb_per_s"] = self.nbytes / (self.duration_ms * 1e-3) / 1e9
            if self.kind == "collective":
                d["bus_gb_per_s"] = d["gb_per_s"] * self.bus_factor
        return d


class Profile:
    """Collects Records while active; see profile()."""

    def __init__(self, nvtx: bool = False):
        self.records: list[Record] = []
        self.nvtx = nvtx
        self._t0 = time.perf_counter()
        # every counted allocation and free while active: {"t_us" (host, since the start), "event"
        # ("alloc" / "free"), "device", "bytes"} (the pool's block sizes)
        self.memory_events: list[dict] = []
        self._ref: dict = {}   # device -> (CUDA event, host us) recorded before its first record

    def _on_memory(self, event: str, device: int, nbytes: int) -> None:
        self.memory_events.append({"t_us": (time.perf_counter() - self._t0) * 1e6, "event": event,
                                   "device": device, "bytes": nbytes})

    def memory_timeline(self) -> dict:
        """{device: [(t_us, bytes allocated minus freed since the profile began)]}, one point per
        event (frees of blocks allocated before the start make it go below 0)."""
        out: dict = {}
        level: dict = {}
        for e in self.memory_events:
            d = e["device"]
            level[d] = level.get(d, 0) + (e["bytes"] if e["event"] == "alloc" else -e["bytes"])
            out.setdefault(d, []).append((e["t_us"], level[d]))
        return out

    # -- recording (called from the launch path) --
    def _begin(self, kind, name, stream, **kw):
        from .runtime import _cupy
        cp = _cupy.loaded_cupy()
        s = stream or cp.cuda.get_current_stream()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        dev = cp.cuda.runtime.getDevice()
        host_us = (time.perf_counter() - self._t0) * 1e6
        if dev not in self._ref:   # the device's time origin: GPU times of every stream relate to it
            ref = cp.cuda.Event()
            ref.record(s)
            self._ref[dev] = (ref, host_us)
        rec = Record(kind, name, dev, s.ptr, host_us, _events=(start, end), **kw)
        if self.nvtx:
            cp.cuda.nvtx.RangePush(name)
        start.record(s)
        return rec, s

    def _end(self, rec, s):
        rec._events[1].record(s)
        if self.nvtx:
            from .runtime import _cupy
            _cupy.loaded_cupy().cuda.nvtx.RangePop()
        self.records.append(rec)

    def _record_launch(self, name, grid, block, stream, fn):
        rec, s = self._begin("kernel", name, stream, grid=grid, block=block)
        try:
            fn()
        finally:
            self._end(rec, s)

    # -- results --
    def resolve(self) -> list[Record]:
        """Wait for the recorded work and fill in every duration."""
        failed = False
        for r in self.records:
            if r._host is not None:   # a CPU-backend collective issued in the profile: it fills its own times
                concurrent.futures.wait([r._host])   # (the group's watchdog bounds it)
                if r._host.cancelled() or r._host.exception() is not None:
                    failed = True   # (it never completed: no duration to report; left out below)
                else:
                    r._host = None
            if r.duration_ms is None and r._events:
                r._events[1].synchronize()
                from .runtime import _cupy
                cp = _cupy.loaded_cupy()
                r.duration_ms = cp.cuda.get_elapsed_time(*r._events)
                ref = self._ref.get(r.device)
                if ref is not None:
                    r.gpu_start_us = ref[1] + cp.cuda.get_elapsed_time(ref[0], r._events[0]) * 1e3
                r._events = ()
        if failed:
            self.records = [r for r in self.records if r._host is None]
        return self.records

    def table(self) -> list[dict]:
        """Per kernel/transfer name: calls, total, mean and median ms, share of the total time."""
        groups: dict[str, list[float]] = {}
        for r in self.resolve():
            if r.kind != "range":   # a range spans kernels that are rows of their own
                groups.setdefault(r.name, []).append(r.duration_ms)
        total = sum(sum(v) for v in groups.values()) or 1.0
        rows = [{"name": k, "calls": len(v), "total_ms": sum(v), "mean_ms": sum(v) / len(v),
                 "median_ms": statistics.median(v), "share": sum(v) / total} for k, v in groups.items()]
        return sorted(rows, key=lambda r: -r["total_ms"])

    def summary(self) -> str:
        """The per-name table as text."""
        rows = self.table()
        w = max([len(r["name"]) for r in rows] + [4])
        lines = [f"{'name':<{w}}  {'calls':>6}  {'total ms':>10}  {'mean ms':>9}  {'median ms':>9}  {'share':>6}"]
        for r in rows:
            lines.append(f"{r['name']:<{w}}  {r['calls']:>6}  {r['total_ms']:>10.4f}  {r['mean_ms']:>9.4f}  "
                         f"{r['median_ms']:>9.4f}  {r['share']:>6.1%}")
        for d, points in sorted(self.memory_timeline().items()):
            allocs = sum(1 for e in self.memory_events if e["device"] == d and e["event"] == "alloc")
            lines.append(f"memory cuda:{d}: {allocs} allocations, {len(points) - allocs} frees, peak "
                         f"{max(v for _, v in points) / 2**20:+.2f} MiB and end {points[-1][1] / 2**20:+.2f} MiB "
                         "against the start")
        return "\n".join(lines)

    def collective_overlap(self) -> dict:
        """How much of the collectives' time ran while kernels or range()s of other streams ran on
        the same device (data parallel: the all-reduces hidden under the backward pass).

        Returns {"collectives": how many, "overlapped": how many ran while at least one such kernel
        ran, "collective_us": their summed time, "overlap_us": the summed time during which at least
        one such kernel ran}. Times are the GPU's (CUDA events); 0 of 0 without collectives."""
        recs = self.resolve()

        def span(r):
            t = r.gpu_start_us if r.gpu_start_us is not None else r.host_start_us
            return t, t + (r.duration_ms or 0.0) * 1e3
        colls = [r for r in recs if r.kind == "collective"]
        out = {"collectives": len(colls), "overlapped": 0, "collective_us": 0.0, "overlap_us": 0.0}
        for c in colls:
            a, b = span(c)
            busy = sorted(span(k) for k in recs if k.kind in ("kernel", "range") and k.device == c.device
                          and k.stream != c.stream)
            covered, end = 0.0, a   # the union of the kernels' intervals within [a, b]
            for k0, k1 in busy:
                k0, k1 = max(k0, end), min(k1, b)
                if k1 > k0:
                    covered += k1 - k0
                    end = k1
            out["collective_us"] += b - a
            out["overlap_us"] += covered
            out["overlapped"] += covered > 0
        return out

    def export_json(self, path) -> None:
        """Every record and the summary table as JSON."""
        data = {"records": [r.as_dict() for r in self.resolve()], "summary": self.table(),
                "memory_events": self.memory_events}
        with open(path, "w") as f:
            json.dump(data, f, indent=1)

    def chrome_trace(self) -> dict:
        """The records in the Trace Event Format ("X" complete events, microseconds).

        Kernels sit on one track per (device, stream); the start is when the GPU started it
        (CUDA events, relative to an event recorded before the device's first record, placed at
        that record's host time), so work on different streams (a collective on the communication
        stream, the backward's kernels) overlaps in the trace as it did on the GPU. Records
        without events (the CPU backend's collectives) start at their host time."""
        events = []
        for r in self.resolve():
            ts = r.gpu_start_us if r.gpu_start_us is not None else r.host_start_us
            events.append({"name": r.name, "cat": r.kind, "ph": "X", "ts": ts,
                           "dur": (r.duration_ms or 0.0) * 1e3, "pid": r.device, "tid": r.stream,
                           "args": {"grid": list(r.grid), "block": list(r.block), "bytes": r.nbytes,
                                    **({"bus_gb_per_s": r.as_dict().get("bus_gb_per_s", 0.0)}
                                       if r.kind == "collective" else {})}})
        for d, points in self.memory_timeline().items():   # a counter track per device
            events += [{"name": "memory allocated since the start (bytes)", "ph": "C", "ts": t, "pid": d,
                        "args": {"bytes": v}} for t, v in points]
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def export_chrome_trace(self, path) -> None:
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)


@contextlib.contextmanager
def profile(nvtx: bool = False, kernels: bool = True):
    """Record every cudakit launch and transfer inside the block; yields the Profile.

    nvtx=True also pushes an NVTX range per launch so Nsight Systems shows cudakit's kernels by name.
    kernels=False records only collectives and range()s, no launches or transfers: the code runs
    at its own speed (recording a launch costs host time, and a host-bound step shows a different
    timeline), e.g. to see a data-parallel step's all-reduces against its backward pass.
    """
    prof = start(nvtx, kernels)
    try:
        yield prof
    finally:
        stop()


class ProfilerStateError(CudakitError, RuntimeError):
    """start() while a profile is active, or stop() while none is."""


_light: "Profile | None" = None   # the active profile of start(kernels=False): collectives and ranges only


def start(nvtx: bool = False, kernels: bool = True) -> Profile:
    """Begin recording as profile() does, until stop() (for code that cannot wrap a with block);
    returns the Profile. ProfilerStateError (a RuntimeError) while one is active."""
    global _active, _light
    from .runtime import memory, native
    with _lock:
        if _active is not None or _light is not None:
            raise ProfilerStateError("a cudakit.profile() is already active")
        prof = Profile(nvtx)
        if not kernels:
            _light = prof
            return prof
        native.hold_fast_paths(1)  # the native fast paths would not record their launches
        _active = prof
        memory._add_listener(prof._on_memory)   # the allocator reports to it (once installed)
    return prof


def stop() -> Profile:
    """End the recording start() or profile() began; returns its Profile with every duration
    filled in. ProfilerStateError (a RuntimeError) when none is active."""
    global _active, _light
    from .runtime import memory, native
    with _lock:
        prof = _active or _light
        if prof is None:
            raise ProfilerStateError("no cudakit profile is active (cudakit.profiler.start() begins one)")
        if prof is _light:
            _light = None
        else:
            _active = None
            native.hold_fast_paths(-1)
            memory._remove_listener(prof._on_memory)
    prof.resolve()
    return prof


def range(name: str, stream=None):  # noqa: A001 - a named range, as NVTX and torch.profiler call it
    """Context manager: while a profile is active (kernels=True or False), a record of kind "range"
    named `name` covering the GPU work queued on `stream` (default: the current one) inside the
    block, timed by two CUDA events; a shared no-op otherwise (and on the CPU backend)."""
    prof = _active or _light
    if prof is None or not _gpu():
        return _null
    return _timed_transfer(prof, name, 0, stream, kind="range")


def _gpu() -> bool:
    """Whether a CUDA device is usable (CuPy imported and a GPU there): no CUDA work otherwise."""
    from .runtime import _cupy
    if _cupy.loaded_cupy() is None:
        return False
    from .runtime import device
    return device.is_available()


def record_call(name: str, fn, stream=None, grid: tuple = (), block: tuple = ()):
    """fn()'s result; while a profile is active, its device time on `stream` (default: the current
    one) is recorded under `name`: the launches that do not pass the kernel launch paths (cuBLAS
    and cuBLASLt calls, Numba kernels). Without a usable GPU nothing is recorded (fn() runs)."""
    prof = _active
    if prof is None or not _gpu():
        return fn()
    out = []
    prof._record_launch(name, grid, block, stream, lambda: out.append(fn()))
    return out[0]


_null = contextlib.nullcontext()


def _transfer(direction: str, nbytes: int, stream):
    """Context manager timing a transfer while a profile is active; a shared no-op otherwise."""
    prof = _active
    if prof is None:
        return _null
    return _timed_transfer(prof, direction, nbytes, stream)


@contextlib.contextmanager
def _timed_transfer(prof, direction, nbytes, stream, kind="transfer", **kw):
    rec, s = prof._begin(kind, direction, stream, nbytes=nbytes, **kw)
    try:
        yield
    finally:
        prof._end(rec, s)


def _collective(name: str, nbytes: int, bus_factor: float, stream):
    """Context manager timing a collective on `stream` (CUDA events) while a profile is active; a
    shared no-op otherwise. nbytes: the bytes nccl-tests counts for the op (all_gather: the whole
    output); the record's bus bandwidth is nbytes / time * bus_factor."""
    prof = _active or _light
    if prof is None:
        return _null
    return _timed_transfer(prof, name, nbytes, stream, kind="collective", bus_factor=bus_factor)


def _begin_host_collective(name: str, nbytes: int, bus_factor: float):
    """(profile, record) for a collective the host runs later (the CPU backend's worker thread),
    issued while a profile is active, else None: it belongs to the profile active when it was
    issued, as a GPU collective's events do. The caller sets the record's _host to the op's future,
    which the profile's resolve() waits for; _end_host_collective fills in its times."""
    prof = _active or _light
    if prof is None:
        return None
    rec = Record("collective", name, -1, 0, (time.perf_counter() - prof._t0) * 1e6, nbytes=nbytes,
                 bus_factor=bus_factor)
    prof.records.append(rec)
    return prof, rec


def _end_host_collective(begun, host_start: float, host_end: float) -> None:
    """The times (perf_counter() seconds) of the collective _begin_host_collective recorded."""
    if begun is not None:
        prof, rec = begun
        rec.host_start_us = (host_start - prof._t0) * 1e6
        rec.duration_ms = (host_end - host_start) * 1e3
