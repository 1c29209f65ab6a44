"""The functional API: cudakit.add(a, b), cudakit.relu(x), ...

Each op dispatches on where its inputs live: CuPy arrays (or objects exposing CUDA memory through
__cuda_array_interface__ / __dlpack__) go to the CUDA backend and return CuPy arrays; NumPy arrays
go to the CPU backend and return NumPy arrays. Mixing host and device inputs raises DeviceError.
"""
from __future__ import annotations

import sys

from .backends import get_backend
from .backends.cpu import _dlpack_on_cuda


import numpy as np

_ndarray = np.ndarray
_backends: dict = {}


def _on_cuda(x) -> bool:
    if type(x) is _ndarray:
        return False
    cp = sys.modules.get("cupy")
    if cp is not None and isinstance(x, cp.ndarray):
        return True
    return hasattr(x, "__cuda_array_interface__") or _dlpack_on_cuda(x)


def backend_for(*arrays):
    """The backend that owns these arrays: CUDA if any lives on a GPU, else CPU."""
    name = "cpu"
    for x in arrays:
        if _on_cuda(x):
            name = "cuda"
            break
    be = _backends.get(name)
    if be is None:
        be = _backends[name] = get_backend(name)
    return be


def add(a, b, out=None):
    """a + b elementwise (see Backend.add)."""
    return backend_for(a, b).add(a, b, out=out)


def mul(a, b, out=None):
    """a * b elementwise (see Backend.mul)."""
    return backend_for(a, b).mul(a, b, out=out)


def relu(x, out=None):
    """max(x, 0) elementwise (see Backend.relu)."""
    return backend_for(x).relu(x, out=out)


def relu_backward(grad_out, x, out=None):
    """grad_out where x > 0, else 0 (see Backend.relu_backward)."""
    return backend_for(grad_out, x).relu_backward(grad_out, x, out=out)
