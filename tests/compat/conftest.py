import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def no_gpu():
    """Skip a test of the behaviour without a GPU where one is usable."""
    import cudakit
    if cudakit.is_available():
        pytest.skip("tests the behaviour without a usable GPU; one is usable here")


@pytest.fixture
def fresh_cwd(tmp_path, monkeypatch):
    """Run in an empty directory (examples that write files write there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
