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
