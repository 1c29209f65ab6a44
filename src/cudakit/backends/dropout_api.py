"""The argument policy of dropout with counter-based (Philox) random numbers, forward and backward, shared by every backend as a mixin of Backend."""
from __future__ import annotations


class DropoutOps:
    """dropout with counter-based (Philox) random numbers, forward and backward (mixed into Backend)."""


class CpuDropoutHooks(DropoutOps):
    """NumPy implementations."""


class CudaDropoutHooks(DropoutOps):
    """CUDA kernels."""
