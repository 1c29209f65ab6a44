"""neural_arch's backends (seed 003, `neural_arch.backends`) on cudakit.

    from cudakit.compat.neural_arch import get_backend
    from cudakit.compat.neural_arch.cuda_kernels import get_cuda_kernel_manager

get_backend("cuda") is cudakit's CUDA backend (its gelu, fused_linear_gelu, flash_attention,
layernorm, benchmark_kernel, is_available and has_custom_kernels are neural_arch's calls), or,
where CuPy is installed but no GPU is usable, an object whose is_available and
has_custom_kernels are False and whose ops raise BackendUnavailableError. Without CuPy it raises
CuPyNotInstalledError, an ImportError, as the seed documents. Differences: docs/compat.md.
"""
from __future__ import annotations

import importlib.util

from ...errors import BackendUnavailableError

_NAMES = ("cuda", "numpy", "cpu")


class CuPyNotInstalledError(BackendUnavailableError, ImportError):
    """The CUDA backend needs CuPy (cudakit's `cuda13` / `cuda12` extra); an ImportError, as
    neural_arch documents, and cudakit's BackendUnavailableError."""


class UnavailableCudaBackend:
    """The CUDA backend where CuPy imports but no GPU is usable: is_available and
    has_custom_kernels are False; every op raises BackendUnavailableError with the reason."""

    name = "cuda"
    is_available = False
    has_custom_kernels = False

    def __init__(self, reason: str):
        self.reason = reason

    def _unavailable(self, *args, **kwargs):
        raise BackendUnavailableError(f"the CUDA backend is unavailable: {self.reason}")

    gelu = fused_linear_gelu = flash_attention = layernorm = benchmark_kernel = _unavailable

    def __getattr__(self, name: str):
        """Every other op of cudakit's backends raises as the seed's ones do (not AttributeError)."""
        from ...backends.base import Backend
        if not name.startswith("_") and callable(getattr(Backend, name, None)):
            return self._unavailable
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self):
        return f"<cudakit.compat.neural_arch CUDA backend, unavailable: {self.reason}>"


def get_backend(name: str = "cuda"):
    """The backend `name`: "cuda" (cudakit's CUDA backend), "numpy" or "cpu" (cudakit's CPU
    backend). Raises CuPyNotInstalledError (an ImportError) for "cuda" without CuPy, ValueError
    naming `name` for another name."""
    if not isinstance(name, str) or name not in _NAMES:
        raise ValueError(f"name must be one of {', '.join(map(repr, _NAMES))} (got {name!r})")
    from ...backends import get_backend as _get
    if name != "cuda":
        return _get("cpu")
    if importlib.util.find_spec("cupy") is None:
        raise CuPyNotInstalledError("the CUDA backend needs CuPy, which is not installed; "
                                    "pip install 'cudakit[cuda13]' (or [cuda12])")
    from ...runtime import device
    reason = device.unavailable_reason()
    if reason is not None:
        return UnavailableCudaBackend(reason)
    return _get("cuda")


__all__ = ["get_backend", "CuPyNotInstalledError", "UnavailableCudaBackend"]
