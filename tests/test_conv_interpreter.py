"""The implicit-GEMM conv2d Triton kernels (kernels/_conv_triton.py) run by Triton's interpreter on
the CPU against the CPU backend in float64 (tests/conv_interpreter.py, in a subprocess: the
interpreter is chosen when Triton is imported): padding masks, the affine and the general address
paths, ragged channel and position blocks, the zero-interleaved input gradient of strided
convolutions, the weight gradient's splits and the bias gradient."""
import pytest
from helpers import run_in_triton_interpreter

pytest.importorskip("triton")


def test_conv_kernel_in_triton_interpreter():
    assert "cases match" in run_in_triton_interpreter("conv_interpreter.py")
