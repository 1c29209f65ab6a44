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
