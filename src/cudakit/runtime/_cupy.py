"""Lazy access to CuPy and the one probe that decides whether CUDA is usable.

CuPy is imported only when a CUDA feature is first used, never at `import cudakit`.
"""
from __future__ import annotations

import logging
import sys

from ..errors import BackendUnavailableError

log = logging.getLogger(__name__)
_probe: tuple[bool, str] | None = None

INSTALL_HINT = "install the CUDA extra: pip install 'cudakit[cuda13]' (or [cuda12])"


def probe() -> tuple[bool, str]:
    """(usable, reason): whether CuPy imports and sees at least one CUDA device.

    The first call initialises CUDA (after which CUDA_VISIBLE_DEVICES no longer changes anything,
    as with every CUDA program); the answer is cached.
    """
    global _probe
    if _probe is None:
        _probe = _run_probe()
        log.info("CUDA usable: %s (%s)", *_probe)
    return _probe


def _run_probe() -> tuple[bool, str]:
    try:
        import cupy
    except ImportError as e:
        return False, f"CuPy is not installed ({e}); {INSTALL_HINT}"
    except Exception as e:  # a broken CuPy install must not break `import cudakit`
        return False, f"CuPy failed to import: {type(e).__name__}: {e}"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return False, f"no usable CUDA driver or device: {_short(e)}"
    if n == 0:
        return False, "no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the driver)"
    return True, f"{n} CUDA device(s) visible, CuPy {cupy.__version__}"


def _short(e: Exception) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0]


def cupy():
    """The cupy module, or BackendUnavailableError saying why CUDA cannot be used."""
    ok, reason = probe()
    if not ok:
        raise BackendUnavailableError(f"the CUDA backend is unavailable: {reason}")
    return sys.modules["cupy"]


def loaded_cupy():
    """The cupy module if something already imported it, else None (no import, no CUDA work)."""
    return sys.modules.get("cupy")
