"""The implicit-GEMM conv2d Triton kernel (kernels/_conv_triton.py) run by Triton's interpreter on
the CPU against the CPU backend in float64 (tests/conv_interpreter.py, in a subprocess: the
interpreter is chosen when Triton is imported): padding masks, the affine and the general address
paths, ragged channel and position blocks, and the flipped convolution of the input gradient."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")


def test_conv_kernel_in_triton_interpreter():
    script = os.path.join(os.path.dirname(__file__), "conv_interpreter.py")
    run = subprocess.run([sys.executable, script], check=False, env=dict(os.environ, TRITON_INTERPRET="1"),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "cases match" in run.stdout
