"""The attention Triton kernels (kernels/_attention_triton.py) run by Triton's interpreter on the CPU,
against the float64 reference (tests/attention_interpreter.py, in a subprocess: the interpreter is
chosen when Triton is imported): the loop bounds and masks of every block kind (full, causal
diagonal, ragged end of the keys or queries) are checked without a GPU."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")


def test_attention_kernels_in_triton_interpreter():
    script = os.path.join(os.path.dirname(__file__), "attention_interpreter.py")
    run = subprocess.run([sys.executable, script], check=False, env=dict(os.environ, TRITON_INTERPRET="1"),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "cases match" in run.stdout
