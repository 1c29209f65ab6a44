"""The benchmark's host-time measurement (CPU: no device needed)."""
import pytest

from cudakit.bench import timing


def test_interleaved_rounds_alternate_providers_and_skip_failures():
    order, syncs = [], []

    def make(name):
        def fn():
            order.append(name)
        return fn

    def broken():
        raise ValueError("no such dtype")

    res, errors = timing.host_time_interleaved({"a": make("a"), "b": make("b"), "bad": broken},
                                               calls=5, rounds=3, sync=lambda: syncs.append(1))
    assert set(res) == {"a", "b"} and set(errors) == {"bad"}
    assert isinstance(errors["bad"], ValueError)
    timed = order[2 * (5 // 10 + 1):]  # after each provider's warm-up
    assert timed == (["a"] * 5 + ["b"] * 5) * 3  # A B A B A B, not A A A B B B
    assert len(syncs) == 2 * 3 + 1
    for s in res.values():
        assert s["runs"] == 3 and s["median_ms"] >= 0


def test_interleaved_rounds_measure_the_slower_provider_as_slower():
    import time
    res, _ = timing.host_time_interleaved({"fast": lambda: None, "slow": lambda: time.sleep(2e-4)},
                                          calls=20, rounds=3)
    assert res["slow"]["median_ms"] > res["fast"]["median_ms"] + 0.1
    with pytest.raises(KeyError):
        res["missing"]


@pytest.fixture
def clock(monkeypatch):
    """A stand-in CuPy whose events read a fake clock (ms) that the timed functions advance."""
    import sys
    import types
    now = _Clock([0.0])

    class Event:
        done = False   # the host is always ahead here

        def record(self, stream):
            self.t = now[0]

        def synchronize(self):
            pass

    stream = types.SimpleNamespace(synchronize=lambda: None, ptr=7)
    flushes = []

    def memset(ptr, value, n, stream_ptr):   # the L2 flush: device time before the start event
        flushes.append((ptr, value, n, stream_ptr))
        now[0] += 0.05

    runtime = types.SimpleNamespace(getDevice=lambda: 0, cudaDevAttrL2CacheSize=1, memsetAsync=memset,
                                    deviceGetAttribute=lambda attr, dev: 50 << 20)
    cuda = types.SimpleNamespace(Event=Event, get_current_stream=lambda: stream, runtime=runtime,
                                 get_elapsed_time=lambda a, b: b.t - a.t)
    empty = lambda n, dtype: types.SimpleNamespace(data=types.SimpleNamespace(ptr=4096), nbytes=n)  # noqa: E731
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda, empty=empty, uint8="uint8",
                                                                   int64=int))
    spins = []

    def spin(grid, block, args):   # the spin after the flush: device time before the start event
        spins.append(args)
        now[0] += 0.3
    from cudakit.kernels import paths
    monkeypatch.setattr(paths, "_spinner", lambda: spin)
    monkeypatch.setattr(paths, "_flush_buffers", {})
    now.flushes, now.spins = flushes, spins
    return now


class _Clock(list):
    pass


def _timed(order: list, clock):
    """make(name, ms): a provider that logs its name in `order` and advances the fake clock by ms."""
    def make(name, ms):
        def fn():
            order.append(name)
            clock[0] += ms
        return fn
    return make


def test_device_rounds_alternate_providers_and_skip_failures(clock):
    """time_gpu_interleaved over a stand-in CuPy whose events read a fake clock: rounds go A B A B,
    a provider failing its warm-up is named in errors, every provider gets `reps` samples."""
    order = []
    make = _timed(order, clock)

    def broken():
        raise ValueError("no such dtype")

    res, errors = timing.time_gpu_interleaved({"a": make("a", 1.0), "b": make("b", 3.0), "bad": broken},
                                              warmup=2, reps=6, rounds=3)
    assert set(res) == {"a", "b"} and isinstance(errors["bad"], ValueError)
    timed = order[4:]  # after the warm-ups
    assert timed == (["a"] * 4 + ["b"] * 4) * 3  # 2 samples a round, each an untimed + a timed call
    assert res["a"]["runs"] == res["b"]["runs"] == 6
    assert res["a"]["median_ms"] == 1.0 and res["b"]["median_ms"] == 3.0
    assert "host_exposed_runs" not in res["a"]   # the start event was still ahead of the GPU every time


def test_device_rounds_drop_a_provider_that_fails_in_a_later_round(clock):
    """A provider raising after its warm-up (say out of memory in round 2) is named in errors; the
    others keep all their samples."""
    calls = {"n": 0}

    def good():
        clock[0] += 1.0

    def flaky():
        calls["n"] += 1
        if calls["n"] > 6:  # 2 warm-up calls + 2 samples of 2 calls, then it fails
            raise MemoryError("out of memory")
        clock[0] += 2.0

    res, errors = timing.time_gpu_interleaved({"good": good, "flaky": flaky}, warmup=2, reps=6, rounds=3)
    assert set(res) == {"good"} and isinstance(errors["flaky"], MemoryError)
    assert res["good"]["runs"] == 6


def test_cold_timing_flushes_the_l2_cache_before_each_timed_call(clock):
    """cold=True: every sample is one timed call behind a write of twice the L2 cache (100 MiB for
    a 50 MiB L2) and a spin kernel on the current stream, not behind an untimed call; neither is in
    the time."""
    order = []
    make = _timed(order, clock)

    res, errors = timing.time_gpu_interleaved({"a": make("a", 1.0), "b": make("b", 3.0)}, warmup=2, reps=6,
                                              rounds=3, cold=True)
    assert not errors
    assert order[4:] == (["a"] * 2 + ["b"] * 2) * 3   # one timed call a sample, no untimed ones
    assert len(clock.flushes) == 12 and len(clock.spins) == 12   # a flush, then a spin, before each sample
    assert {f[1:] for f in clock.flushes} == {(0, 100 << 20, 7)}
    assert res["a"]["median_ms"] == 1.0 and res["b"]["median_ms"] == 3.0
    assert "host_exposed_runs" not in res["a"]   # the start event was still ahead of the GPU every time


def test_path_timing_measures_each_call_behind_a_flush(clock, monkeypatch):
    """paths.time_per_call (how a path or cuDNN plan is chosen): every call behind an L2 flush and
    a spin, between its own events, so neither counts."""
    import sys

    from cudakit.kernels import paths
    from cudakit.runtime import _cupy
    monkeypatch.setattr(_cupy, "cupy", lambda: sys.modules["cupy"])
    calls = []

    def fn():
        calls.append(clock[0])
        clock[0] += 0.2
    assert paths.time_per_call(fn) == pytest.approx(0.2)
    assert len(calls) == len(clock.flushes) == paths._REPS * paths._BATCH
    assert len(clock.spins) == len(calls) and clock.flushes[0][2] == 100 << 20   # twice the fake 50 MiB L2
    assert paths._flush_buffers == {}   # a path's timing does not hold its flush buffer
    paths.cold_start(sys.modules["cupy"])   # the benchmark's cold timing
    assert list(paths._flush_buffers) == [0]   # the benchmark's is held


def test_path_timing_drops_samples_that_waited_for_the_host(clock, monkeypatch):
    """A sample whose start event the GPU passed before the call was queued holds host time: left
    out while enough others remain."""
    import sys

    from cudakit.kernels import paths
    from cudakit.runtime import _cupy
    cp = sys.modules["cupy"]
    monkeypatch.setattr(_cupy, "cupy", lambda: cp)
    n = [0]
    real = cp.cuda.Event

    class Event(real):
        @property
        def done(self):   # two calls in three: the host was late (and the call looks 5x slower)
            return n[0] % 3 != 0

    monkeypatch.setattr(cp.cuda, "Event", Event)

    def fn():   # kept: 8 of the 25, more than _REPS; all 25 would have a median of 1.0
        n[0] += 1
        clock[0] += 0.2 if n[0] % 3 == 0 else 1.0
    assert paths.time_per_call(fn) == pytest.approx(0.2)


def test_cold_samples_lengthen_the_spin_the_host_outlasted(clock, monkeypatch):
    """A cold sample whose start event the GPU passed before the call was queued (the host outlasted
    the spin) is taken again behind a spin twice as long, which later samples keep; past
    _MAX_LONGER times the default the sample is kept and counted as host-exposed."""
    import sys

    from cudakit.kernels import paths
    cp = sys.modules["cupy"]
    real = cp.cuda.Event

    def host_slower_than(cycles):
        class Event(real):
            @property
            def done(self):   # late while the last spin was shorter than `cycles`
                return clock.spins[-1][0] < cycles
        return Event
    monkeypatch.setattr(cp.cuda, "Event", host_slower_than(4 * paths._SPIN_AFTER_FLUSH))
    exposed = []
    timing._gpu_samples(lambda: None, 3, cp, cold=True, exposed=exposed)
    base = paths._SPIN_AFTER_FLUSH
    assert [s[0] for s in clock.spins] == [base, 2 * base, 4 * base, 4 * base, 4 * base]
    assert exposed == [False] * 3
    clock.spins.clear()
    monkeypatch.setattr(cp.cuda, "Event", host_slower_than(1 << 62))   # no spin long enough
    exposed = []
    timing._gpu_samples(lambda: None, 2, cp, cold=True, exposed=exposed)
    assert [s[0] for s in clock.spins] == [base * m for m in (1, 2, 4, 8, 16, 16)]
    assert exposed == [True, True]
