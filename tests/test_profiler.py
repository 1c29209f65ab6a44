"""Profiler output formats and backend.benchmark_kernel, without a GPU."""
import json

import numpy as np
import pytest

import cudakit
from cudakit.profiler import Profile, Record


def _profile_with_records():
    p = Profile()
    p.records = [Record("kernel", "k_add", 0, 0, 10.0, grid=(4, 1, 1), block=(256, 1, 1), duration_ms=0.5),
                 Record("kernel", "k_add", 0, 0, 20.0, grid=(4, 1, 1), block=(256, 1, 1), duration_ms=1.5),
                 Record("transfer", "HtoD", 0, 7, 30.0, nbytes=4096, duration_ms=0.25)]
    return p


def test_summary_table():
    rows = _profile_with_records().table()
    assert rows[0] == {"name": "k_add", "calls": 2, "total_ms": 2.0, "mean_ms": 1.0, "median_ms": 1.0,
                       "share": pytest.approx(2.0 / 2.25)}
    assert "k_add" in _profile_with_records().summary()


def test_chrome_trace_follows_trace_event_format(tmp_path):
    path = tmp_path / "trace.json"
    _profile_with_records().export_chrome_trace(path)
    t = json.loads(path.read_text())
    assert isinstance(t["traceEvents"], list) and len(t["traceEvents"]) == 3
    for e in t["traceEvents"]:
        # complete events: name, category, phase X, timestamp and duration in microseconds, pid/tid
        assert set(e) >= {"name", "cat", "ph", "ts", "dur", "pid", "tid"}
        assert e["ph"] == "X" and isinstance(e["ts"], float) and e["dur"] > 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    assert t["traceEvents"][0]["dur"] == 500.0
    j = tmp_path / "p.json"
    _profile_with_records().export_json(j)
    d = json.loads(j.read_text())
    assert d["records"][2]["gb_per_s"] == pytest.approx(4096 / 0.25e-3 / 1e9)


def test_nested_profiles_refused():
    with cudakit.profile():
        with pytest.raises(RuntimeError, match="already active"):
            with cudakit.profile():
                pass


def test_profiler_state_errors_are_typed():
    """stop() without a profile and start() inside one raise ProfilerStateError: a CudakitError (as
    every error cudakit raises) and still a RuntimeError."""
    from cudakit import profiler
    with pytest.raises(profiler.ProfilerStateError, match="no cudakit profile is active") as e:
        profiler.stop()
    assert isinstance(e.value, cudakit.CudakitError) and isinstance(e.value, RuntimeError)
    with cudakit.profile():
        with pytest.raises(profiler.ProfilerStateError, match="already active"):
            profiler.start()


def test_benchmark_kernel_cpu():
    be = cudakit.get_backend("cpu")
    x = np.ones(1 << 16, np.float32)
    ms = be.benchmark_kernel("relu", x, num_runs=5)
    assert ms > 0
    assert be.benchmark_kernel(lambda: x + 1, num_runs=3) > 0
    with pytest.raises(ValueError, match="unknown op 'nosuch'.*relu"):
        be.benchmark_kernel("nosuch", x)


def test_record_call_returns_the_result_and_records_only_when_active(monkeypatch):
    from cudakit import profiler
    assert profiler.record_call("x", lambda: 7) == 7   # no profile active: called, nothing kept
    monkeypatch.setattr(profiler, "_gpu", lambda: True)   # (without a GPU nothing is recorded)
    calls = []

    class Prof:
        def _record_launch(self, name, grid, block, stream, fn):
            calls.append((name, grid, block, stream))
            fn()

    saved, profiler._active = profiler._active, Prof()
    try:
        assert profiler.record_call("cublas_gemm[float32]", lambda: "status", None, (1,), (2,)) == "status"
    finally:
        profiler._active = saved
    assert calls == [("cublas_gemm[float32]", (1,), (2,), None)]


def test_start_and_stop():
    """start()/stop() as profile() without a with block: one active at a time, stop() once."""
    from cudakit import profiler
    prof = profiler.start()
    try:
        with pytest.raises(RuntimeError, match="already active"):
            profiler.start()
        cudakit.relu(np.ones(8, np.float32))   # the CPU backend launches nothing
    finally:
        assert profiler.stop() is prof
    assert prof.records == [] and profiler._active is None
    with pytest.raises(RuntimeError, match="no cudakit profile is active"):
        profiler.stop()
    with cudakit.profile() as p2:
        assert profiler._active is p2
    assert profiler._active is None


def test_profile_records_the_allocators_events(monkeypatch, tmp_path):
    """While a profile is active the allocator's callback reaches it (and still the user's); after
    stop() the allocator calls only the user's callback, or nothing."""
    from cudakit.runtime import memory
    seen = []
    monkeypatch.setattr(memory, "_user_callback", lambda ev, dev, n: seen.append((ev, dev, n)))
    monkeypatch.setattr(memory, "_listeners", [])
    memory._apply_callback()
    user = memory._callback
    prof = cudakit.profiler.start()
    try:
        assert memory._callback is not user
        for ev, n in (("alloc", 4096), ("alloc", 1024), ("free", 4096), ("alloc", 512)):
            memory._callback(ev, 1, n)
    finally:
        cudakit.profiler.stop()
    assert memory._callback is user and len(seen) == 4
    assert [(e["event"], e["device"], e["bytes"]) for e in prof.memory_events] == [
        ("alloc", 1, 4096), ("alloc", 1, 1024), ("free", 1, 4096), ("alloc", 1, 512)]
    assert [v for _, v in prof.memory_timeline()[1]] == [4096, 5120, 1024, 1536]
    assert "memory cuda:1: 3 allocations, 1 frees, peak +0.00 MiB" in prof.summary()
    counters = [e for e in prof.chrome_trace()["traceEvents"] if e["ph"] == "C"]
    assert [c["args"]["bytes"] for c in counters] == [4096, 5120, 1024, 1536] and counters[0]["pid"] == 1
    prof.export_json(tmp_path / "p.json")
    assert len(json.loads((tmp_path / "p.json").read_text())["memory_events"]) == 4
    monkeypatch.setattr(memory, "_user_callback", None)
    memory._apply_callback()
    assert memory._callback is None


def test_collective_overlap_counts_the_union_of_other_streams_kernels():
    from cudakit.profiler import Profile, Record
    prof = Profile()

    def rec(kind, stream, start, dur_us, device=0):
        return Record(kind, kind, device, stream, 0.0, duration_ms=dur_us / 1e3, gpu_start_us=start)
    prof.records = [
        rec("collective", 7, 100.0, 50.0),     # [100, 150]: kernels cover [90, 120] and [110, 140]
        rec("kernel", 1, 90.0, 30.0),
        rec("kernel", 2, 110.0, 30.0),         # overlaps the first kernel: counted once
        rec("kernel", 7, 100.0, 50.0),         # the collective's own stream: not counted
        rec("kernel", 1, 100.0, 50.0, device=1),   # another device: not counted
        rec("collective", 7, 300.0, 10.0),     # nothing runs beside it
    ]
    o = prof.collective_overlap()
    assert o["collectives"] == 2 and o["overlapped"] == 1
    assert abs(o["overlap_us"] - 40.0) < 1e-9 and abs(o["collective_us"] - 60.0) < 1e-9
    assert Profile().collective_overlap() == {"collectives": 0, "overlapped": 0, "collective_us": 0.0,
                                              "overlap_us": 0.0}
