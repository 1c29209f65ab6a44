import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def float32_precision():
    """Set cudakit.float32_precision() for one test, restored after it."""
    import cudakit
    old = []

    def set_(prec):
        old.append(cudakit.set_float32_precision(prec))
    yield set_
    if old:
        cudakit.set_float32_precision(old[0])


@pytest.fixture
def cudakit_dropout_stream(monkeypatch):
    """CUDAKIT_ATTENTION_DROPOUT=cudakit for one test: attention's dropout from cudakit.dropout's
    Philox stream on every call (the CPU backend's mask; the default gives the 16-bit calls cuDNN
    takes to cuDNN's own stream), the dispatch plans and settings renewed before and after."""
    from cudakit import config, dispatch
    monkeypatch.setenv("CUDAKIT_ATTENTION_DROPOUT", "cudakit")
    config.reload()
    dispatch.clear()
    yield
    monkeypatch.delenv("CUDAKIT_ATTENTION_DROPOUT")
    config.reload()
    dispatch.clear()
