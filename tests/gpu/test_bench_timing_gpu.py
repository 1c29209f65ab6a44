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


def test_check_and_cpu_baseline_of_a_gpu_case():
    """bench --check and --cpu-baseline on one GPU case: the kernel's error against float64 is
    within bfloat16's tolerance, and the GPU beats the CPU backend on 2^22 elements."""
    from cudakit.bench import accuracy, cpu_baseline, runner
    env = runner.make_env(False, False, ("bfloat16",), {"torch"})
    case = next(c for m in runner.discover().values() for c in m.cases(env)
                if c.op == "gelu" and c.dtype == "bfloat16")
    chk = accuracy.check(case)
    assert chk["ok"] and 0 < chk["max_error"] <= chk["tolerance"] and chk["elements"] == 1 << 22
    base = cpu_baseline.measure(case, reps=5)
    assert base["elements"] == 1 << 22 and base["x_cpu"] > 1 and base["gpu_ms"] > 0
