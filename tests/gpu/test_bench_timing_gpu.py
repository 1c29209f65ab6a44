"""The benchmark's device timing on a real GPU."""
import pytest

from cudakit.bench import timing

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")


def test_interleaved_device_timing_measures_the_bigger_copy_as_slower():
    small, big = cp.ones(1 << 16, cp.float32), cp.ones(1 << 26, cp.float32)
    res, errors = timing.time_gpu_interleaved({"small": lambda: small * 2, "big": lambda: big * 2},
                                              warmup=2, reps=9, rounds=3)
    assert not errors and res["small"]["runs"] == res["big"]["runs"] == 9
    assert res["big"]["median_ms"] > 10 * res["small"]["median_ms"] > 0
