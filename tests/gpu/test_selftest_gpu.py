"""`cudakit selftest` on the GPU: every case matches the CPU backend (quick shapes here; the full
shapes with `python -m cudakit selftest`)."""
import pytest

pytestmark = pytest.mark.cuda
pytest.importorskip("cupy")


def test_selftest_quick_matches_the_cpu_backend():
    from cudakit import selftest
    results = selftest.run("cuda", "cpu", quick=True)
    bad = [(r.case.family, r.case.label, r.error, r.message) for r in results if not r.ok]
    assert not bad, bad[:20]
    assert {r.case.family for r in results} == {"elementwise", "activations", "reduction", "softmax", "normalization",
                                                 "layout", "dropout", "linalg", "attention", "conv", "optimizers"}
