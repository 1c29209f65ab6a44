"""Backends: get_backend("auto" | "cpu" | "cuda"). A Backend is the op table plus array helpers."""
from __future__ import annotations

import logging

from ..errors import ArgumentError, BackendUnavailableError, DeviceError
from .base import Backend

log = logging.getLogger(__name__)
_instances: dict = {}   # name, or (name, device) -> Backend
_NAMES = ("auto", "cpu", "cuda")


def get_backend(name: str | None = None, device: int | None = None) -> Backend:
    """The backend `name`: "cpu" (NumPy), "cuda" (CuPy + cudakit kernels) or "auto".

    Default: CUDAKIT_BACKEND, else "auto". "auto" picks CUDA when it is usable, else CPU, and logs
    why at INFO. "cuda" without a usable GPU raises BackendUnavailableError with the reason.
    device: for the CUDA backend, a GPU (index or "cuda:N") whose backend creates its arrays (asarray, empty,
    zeros) there and reports it as `device` (one object per index); None follows the current
    device. Ops run on their inputs' device either way. A device for the CPU backend (asked for,
    or chosen by "auto") raises DeviceError.
    """
    from ..config import settings
    from ..runtime import _cupy
    configured = settings().backend   # read (and checked: ConfigError) even when `name` is given
    if name is not None and not isinstance(name, str):
        raise ArgumentError(f"backend must be one of {', '.join(_NAMES)} (got {name!r})")
    name = (name or configured).lower()
    if name not in _NAMES:
        raise ArgumentError(f"backend must be one of {', '.join(_NAMES)} (got {name!r})")
    if name == "auto":
        ok, reason = _cupy.probe()
        name = "cuda" if ok else "cpu"
        log.info("backend 'auto' chose %s: %s", name, reason)
    if name == "cuda":
        ok, reason = _cupy.probe()
        if not ok:
            raise BackendUnavailableError(f"the CUDA backend is unavailable: {reason}")
        if device is not None:   # one object per GPU, however it was named (1, "cuda:1")
            from ..runtime.device import _check_index
            device = _check_index(device)
    elif device is not None:
        raise DeviceError(f"the CPU backend has no GPU devices (got device={device!r})")
    key = name if device is None else (name, device)
    be = _instances.get(key)
    if be is None:
        if name == "cuda":
            from .cuda import CudaBackend
            be = CudaBackend(device)
        else:
            from .cpu import CpuBackend
            be = CpuBackend()
        _instances[key] = be
    return be


__all__ = ["Backend", "get_backend"]
