"""CuPy in and out for the GPU tests that share their checks with the CPU tests (import it after
pytest.importorskip("cupy"))."""
import cupy as cp


def to_dev(x):
    return cp.asarray(x)


def to_host(x):
    """NumPy copy of a result, which must be a CuPy array (the CUDA backend's output type)."""
    assert isinstance(x, cp.ndarray)
    return cp.asnumpy(x)
