import os

import numpy as np
import pytest


def _cuda_ok():
    import cudakit
    return cudakit.is_available()


def pytest_collection_modifyitems(config, items):
    need_cuda = [i for i in items if "cuda" in i.keywords or "multi_gpu" in i.keywords]
    if not need_cuda:
        return
    ok = _cuda_ok()
    import cudakit
    n = cudakit.device_count() if ok else 0
    for item in need_cuda:
        if not ok:
            item.add_marker(pytest.mark.skip(reason=f"no usable CUDA GPU: {cudakit.unavailable_reason()}"))
        elif "multi_gpu" in item.keywords and n < 2:
            item.add_marker(pytest.mark.skip(reason=f"needs 2 GPUs, {n} visible"))


@pytest.fixture
def rng():
    """Fresh random inputs every run (seed printed on failure via the fixture value)."""
    seed = int.from_bytes(os.urandom(4), "little")
    return np.random.default_rng(seed)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAKIT_CACHE_DIR", str(tmp_path / "cache"))
    import cudakit.config
    cudakit.config.reload()
    yield tmp_path / "cache"
    monkeypatch.undo()
    cudakit.config.reload()
