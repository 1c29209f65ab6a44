"""Each slower path is logged once at INFO with its reason and listed by `cudakit info` (issue 29:
no silent fallback)."""
import logging

import pytest

from cudakit import fallbacks


@pytest.fixture(autouse=True)
def _fresh():
    fallbacks.reset()
    yield
    fallbacks.reset()


def test_a_fallback_is_logged_once_with_its_reason(caplog):
    with caplog.at_level(logging.INFO, logger="cudakit.fallbacks"):
        for _ in range(3):
            fallbacks.note("conv2d:triton", "Triton is not installed")
    lines = [r.getMessage() for r in caplog.records if r.name == "cudakit.fallbacks"]
    assert lines == ["fallback conv2d:triton: Triton is not installed"]
    assert fallbacks.taken() == {"conv2d:triton": "Triton is not installed"}


def test_conv_says_why_its_kernels_do_not_run():
    from cudakit.kernels import conv
    geo = (1, 1, 0, 0, 1, 1, 3, 3, 6, 6)
    assert conv.why_not("float32", (1, 4, 8, 8), 8, geo, triton_ok=True) is None
    assert conv.why_not("float32", (1, 4, 8, 8), 8, geo, triton_ok=False).startswith("triton:")
    assert conv.why_not("float64", (1, 4, 8, 8), 8, geo, triton_ok=True).startswith("dtype:")
    assert conv.why_not("float32", (1, 2**16, 2**8, 2**8), 8, geo, triton_ok=True).startswith("size:")


def test_conv_usable_notes_the_fallback(monkeypatch, caplog):
    from cudakit.kernels import conv
    monkeypatch.setattr(conv, "available", lambda: False)
    with caplog.at_level(logging.INFO, logger="cudakit.fallbacks"):
        assert not conv.usable("float32", (1, 4, 8, 8), 8, (1, 1, 0, 0, 1, 1, 3, 3, 6, 6))
    assert "conv2d:triton" in fallbacks.taken()
    assert "R*S = 9 times the input's memory" in caplog.text and "Triton is not installed" in caplog.text


def test_info_lists_the_fallbacks_taken():
    from cudakit import cli
    fallbacks.note("x:y", "why")
    assert cli.collect_info()["fallbacks"]["x:y"] == "why"
