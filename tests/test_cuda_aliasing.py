"""When an out= shares memory with an input (backends/cuda.py overlaps_shifted): real CuPy arrays
over fake device memory (CuPy needed, no GPU; skipped in CI, which has no CuPy)."""
import numpy as np
import pytest

cp = pytest.importorskip("cupy")
from cudakit.backends.cuda import overlaps_shifted  # noqa: E402

mem = cp.cuda.memory


def _arr(shape, ptr=0x7B0000000000, dtype=np.float32):
    return cp.ndarray(shape, dtype, mem.MemoryPointer(mem.UnownedMemory(ptr, 1 << 20, None, 0), 0))


def test_in_place_needs_no_temporary_and_a_shifted_view_does():
    x = _arr((64,))
    assert not overlaps_shifted(x, x)
    assert not overlaps_shifted(x[:], x)                      # the same view, another object
    assert overlaps_shifted(x[1:], x[:-1])                    # one element apart
    assert overlaps_shifted(x[::-1], x)                       # same memory, reversed
    assert not overlaps_shifted(_arr((64,), 0x7B0000100000), x)   # disjoint
    m = _arr((8, 8))
    assert overlaps_shifted(m.T, m)                           # same pointer, other strides
    assert overlaps_shifted(cp.broadcast_to(m[0:1], (8, 8)), m)   # row 0 read by every row
    assert not overlaps_shifted(_arr((0,)), x)                # nothing to share
