"""The attention Triton kernels (kernels/_attention_triton.py) run by Triton's interpreter on the CPU,
against the float64 reference (tests/attention_interpreter.py, in a subprocess: the interpreter is
chosen when Triton is imported): the loop bounds and masks of every block kind (full, causal
diagonal, ragged end of the keys or queries) are checked without a GPU."""
import pytest
from helpers import run_in_triton_interpreter

pytest.importorskip("triton")


def test_attention_kernels_in_triton_interpreter():
    assert "cases match" in run_in_triton_interpreter("attention_interpreter.py")
