"""`cudakit selftest`'s CPU-side logic: the cases cover every family and dtype, the comparison
passes identical backends and fails a wrong one, the compute-sanitizer command and its summary.
(The run on the GPU: `cudakit selftest` and `cudakit selftest --sanitize` on the H100.)"""
import os
import subprocess
import sys

import numpy as np
import pytest

import cudakit
from cudakit import selftest

FAMILIES = {"elementwise", "activations", "reduction", "softmax", "normalization", "layout", "dropout", "linalg",
            "attention", "conv", "optimizers"}


@pytest.fixture(scope="module")
def cases():
    return selftest.cases(quick=True)


def test_every_family_and_dtype_is_covered(cases):
    assert {c.family for c in cases} == FAMILIES
    for fam in FAMILIES:
        labels = " ".join(c.label for c in cases if c.family == fam)
        for dt in selftest.FLOATS:
            assert dt in labels, (fam, dt)
    labels = " ".join(c.label for c in cases)
    for variant in ("misaligned", "strided", "split", "columns", "cols=50001", "cols=65536", "depthwise", "causal=True"):
        assert variant in labels, variant


def test_one_case_per_family_passes_cpu_against_cpu(cases):
    cpu = cudakit.get_backend("cpu")
    seen = set()
    for c in cases:   # the first small case of each family (the CPU is the slow side here)
        if c.family in seen or sum(a.size for a in c.args if isinstance(a, np.ndarray)) > 200_000:
            continue
        seen.add(c.family)
        r = selftest.check(c, cpu, cpu)
        assert r.ok and r.error == 0, (c.label, r.error, r.message)
    assert seen == FAMILIES


class _Off:
    """A backend whose results are off by a relative 1e-2 (a broken kernel)."""
    def __init__(self, be):
        self.be = be

    def asarray(self, a):
        return self.be.asarray(a)

    def to_numpy(self, x):
        x = np.asarray(x)
        return (x.astype(np.float64) * 1.01).astype(x.dtype) if x.dtype.kind == "f" else x

    def synchronize(self):
        pass


def test_a_wrong_backend_fails_and_a_raising_call_is_reported(cases):
    cpu = cudakit.get_backend("cpu")
    c = next(c for c in cases if c.label.startswith("layernorm float32"))
    assert not selftest.check(c, _Off(cpu), cpu).ok
    boom = selftest.Case("x", "raises", lambda a: 1 / 0, (np.ones(3, np.float32),))
    r = selftest.check(boom, cpu, cpu)
    assert not r.ok and r.error is None and "ZeroDivisionError" in r.message


def test_sanitizer_command_and_summary():
    cmd = selftest.sanitizer_command("racecheck", ["--quick"], sanitizer="/opt/cs")
    assert cmd[:3] == ["/opt/cs", "--tool", "racecheck"] and cmd[-3:] == ["cudakit", "selftest", "--quick"]
    assert "--error-exitcode" in cmd and sys.executable in cmd
    with pytest.raises(ValueError, match="memcheck"):
        selftest.sanitizer_command("nosuch", [])
    assert selftest.parse_error_summary("x\n========= ERROR SUMMARY: 0 errors\n") == 0
    assert selftest.parse_error_summary("========= ERROR SUMMARY: 3 errors\n") == 3
    assert selftest.parse_error_summary("========= ERROR SUMMARY: 1 error\n") == 1
    assert selftest.parse_error_summary(
        "========= RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 warnings)\n") == 2
    assert selftest.parse_error_summary("the process crashed") is None


def test_cli_without_a_gpu_says_so():
    r = subprocess.run([sys.executable, "-m", "cudakit", "selftest"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert r.returncode == 2 and "no usable CUDA GPU" in r.stderr
