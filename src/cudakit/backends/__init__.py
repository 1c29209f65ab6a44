"""Backends: get_backend("auto" | "cpu" | "cuda"). A Backend is the op table plus array helpers."""
from __future__ import annotations

import logging

from ..errors import BackendUnavailableError
from .base import Backend

log = logging.getLogger(__name__)
_instances: dict[str, Backend] = {}
_NAMES = ("auto", "cpu", "cuda")


def get_backend(name: str | None = None) -> Backend:
    """The backend `name`: "cpu" (NumPy), "cuda" (CuPy + cudakit kernels) or "auto".

    Default: CUDAKIT_BACKEND, else "auto". "auto" picks CUDA when it is usable, else CPU, and logs
    why at INFO. "cuda" without a usable GPU raises BackendUnavailableError with the reason.
    """
    from ..config import settings
    from ..runtime import _cupy
    name = (name or settings().backend).lower()
    if name not in _NAMES:
        raise ValueError(f"backend must be one of {', '.join(_NAMES)} (got {name!r})")
    if name == "auto":
        ok, reason = _cupy.probe()
        name = "cuda" if ok else "cpu"
        log.info("backend 'auto' chose %s: %s", name, reason)
    if name == "cuda":
        ok, reason = _cupy.probe()
        if not ok:
            raise BackendUnavailableError(f"the CUDA backend is unavailable: {reason}")
    be = _instances.get(name)
    if be is None:
        if name == "cuda":
            from .cuda import CudaBackend
            be = CudaBackend()
        else:
            from .cpu import CpuBackend
            be = CpuBackend()
        _instances[name] = be
    return be


__all__ = ["Backend", "get_backend"]
