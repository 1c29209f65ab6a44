"""cudakit.graph / CUDAGraph without a GPU: clear errors, nothing imported at `import cudakit`."""
import subprocess
import sys

import numpy as np
import pytest

import cudakit


def test_graph_needs_cuda():
    if cudakit.is_available():
        pytest.skip("a GPU is usable here")
    with pytest.raises(cudakit.BackendUnavailableError, match="cudakit.graph needs a usable CUDA GPU"):
        cudakit.graph(lambda x: x, np.zeros(3, np.float32))


@pytest.mark.parametrize("bad, match", [(-1, "warmup must be an int >= 0"), (True, "warmup must be"),
                                        (1.5, "warmup must be")])
def test_graph_checks_warmup_first(bad, match):
    with pytest.raises(ValueError, match=match):
        cudakit.graph(lambda: None, warmup=bad)


def test_graph_checks_fn():
    with pytest.raises(TypeError, match="fn must be callable"):
        cudakit.graph(42)


def test_not_capturing_on_cpu():
    from cudakit import graphs
    assert graphs.capturing() is None
    graphs.check_not_capturing("anything")   # no capture: no error
    with pytest.raises(graphs.GraphCaptureError, match="needs a capture in progress"):
        graphs.on_replay(lambda: None)


def test_bad_graph_arguments_are_typed_before_the_gpu_check():
    """graph() and CUDAGraph() check their arguments first, with cudakit's argument errors (still
    TypeError / ValueError)."""
    with pytest.raises(cudakit.ArgumentTypeError, match="fn must be callable"):
        cudakit.graph(5)
    with pytest.raises(cudakit.ArgumentError, match="warmup must be an int >= 0"):
        cudakit.graph(lambda: None, warmup=-1)
    with pytest.raises(cudakit.ArgumentError, match="mode must be one of"):
        cudakit.CUDAGraph(mode="x")


def test_graph_error_is_typed():
    assert issubclass(cudakit.GraphCaptureError, cudakit.CudakitError)
    assert issubclass(cudakit.GraphCaptureError, RuntimeError)


def test_import_does_not_load_graphs():
    code = "import sys, cudakit; assert 'cudakit.graphs' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
