"""The implicit-GEMM conv2d Triton kernels (kernels/_conv_triton.py) run by Triton's interpreter on
the CPU against the CPU backend in float64 (tests/conv_interpreter.py, in a subprocess: the
interpreter is chosen when Triton is imported): padding masks, the affine and the general address
paths, ragged channel and position blocks, the zero-interleaved input gradient of strided
convolutions, the weight gradient's splits and the bias gradient, and the forward's fused relu
(activation="relu", NaN kept)."""
import ast
from pathlib import Path

import pytest
from helpers import run_in_triton_interpreter

pytest.importorskip("triton")


def _script_parts() -> tuple:
    """The keys of conv_interpreter.PARTS, read from its source (importing it would import Triton
    here, outside the interpreter)."""
    tree = ast.parse((Path(__file__).parent / "conv_interpreter.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PARTS":
            return tuple(k.value for k in node.value.keys)
    raise LookupError("conv_interpreter.py has no PARTS")


# one test per part of the script, so that pytest-xdist spreads them over the workers
PARTS = _script_parts()


@pytest.mark.parametrize("part", PARTS)
def test_conv_kernel_in_triton_interpreter(part):
    out = run_in_triton_interpreter("conv_interpreter.py", part)
    assert "cases match" in out and out.rstrip().endswith(part)
