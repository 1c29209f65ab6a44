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


def _dropout_stream(monkeypatch, stream: str):
    """CUDAKIT_ATTENTION_DROPOUT=stream while the fixture lives, the settings re-read before and after
    (config.reload also forgets the dispatch plans, which keep the stream they were made under)."""
    from cudakit import config
    monkeypatch.setenv("CUDAKIT_ATTENTION_DROPOUT", stream)
    config.reload()
    yield
    monkeypatch.delenv("CUDAKIT_ATTENTION_DROPOUT")
    config.reload()


@pytest.fixture
def cudakit_dropout_stream(monkeypatch):
    """Attention's dropout from cudakit.dropout's Philox stream on every call (the CPU backend's
    mask; the default gives the 16-bit calls cuDNN takes to cuDNN's own stream)."""
    yield from _dropout_stream(monkeypatch, "cudakit")


@pytest.fixture
def cudnn_dropout_stream(monkeypatch):
    """CUDAKIT_ATTENTION_DROPOUT=cudnn (the default) set explicitly for one test."""
    yield from _dropout_stream(monkeypatch, "cudnn")
