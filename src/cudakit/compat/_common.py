"""Helpers the facades share: the GPU requirement, argument checks and text reports."""
from __future__ import annotations

import logging
import numbers
import threading

from ..errors import BackendUnavailableError, DTypeError


def cuda_usable() -> bool:
    """True when cudakit's CUDA backend can run here (CuPy imports and a GPU is visible)."""
    from ..runtime import device
    return device.is_available()


def require_cuda(what: str) -> None:
    """Raise BackendUnavailableError (a RuntimeError) naming `what` and why CUDA is unusable."""
    from ..runtime import device
    reason = device.unavailable_reason()
    if reason is not None:
        raise BackendUnavailableError(f"{what} needs a usable CUDA GPU: {reason}")


def check_int(value, name: str, minimum: int = 0) -> int:
    """`value` as an int >= minimum; TypeError for a non-integer, ValueError below the minimum,
    each naming the argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int (got {type(value).__name__} {value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum} (got {value})")
    return int(value)


def check_bool(value, name: str) -> bool:
    """`value` as a bool; TypeError naming the argument otherwise."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False (got {type(value).__name__} {value!r})")
    return value


def report(log: logging.Logger, text: str) -> str:
    """Log a report's lines at INFO (library code does not print) and return the text, for the
    seeds' print_* functions: `print(print_memory_info())` shows it on stdout."""
    for line in text.splitlines():
        log.info("%s", line)
    return text


def process_instance(factory, doc: str):
    """A function returning the process's one `factory()`, made on its first call (thread-safe);
    `doc` is its docstring. The seeds' get_* accessors."""
    lock, made = threading.Lock(), []

    def get():
        with lock:
            if not made:
                made.append(factory())
            return made[0]
    get.__doc__ = doc
    return get


class SharedProfile:
    """cudakit's one active profile shared by a facade's objects that record (cudakit runs one
    profile at a time, so a second object starting its own would raise): hold() starts it for the
    first holder, or again where it was stopped through cudakit.profiler; release() stops it after
    the last. RuntimeError from hold() where another cudakit profile is active."""

    def __init__(self):
        self._lock = threading.RLock()   # (a holder's finalizer may run release() inside hold(), from a GC there)
        self.profile = None
        self.holders = 0

    def hold(self):
        from .. import profiler
        with self._lock:
            if self.profile is None or profiler._active is not self.profile:
                self.profile = profiler.start()
            self.holders += 1
            return self.profile

    def release(self) -> None:
        from .. import profiler
        with self._lock:
            if self.holders == 0:
                return
            self.holders -= 1
            if self.holders == 0:
                prof, self.profile = self.profile, None
                if prof is not None and profiler._active is prof:
                    profiler.stop()


def numeric_dtype(dtype, name: str, complex_ok: bool = True):
    """dtype as a NumPy dtype of numbers: bool, an integer, a float (bfloat16 by name too) or, with
    complex_ok, a complex type. None is float32, the facades' default (np.dtype(None) would be
    float64). DTypeError naming `name` otherwise."""
    import numpy as np
    if dtype is None:
        return np.dtype(np.float32)
    if isinstance(dtype, str) and dtype == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"{name}: {dtype!r} is not a NumPy dtype") from None
    if dt.kind not in ("biufc" if complex_ok else "biuf") and dt.name != "bfloat16":
        raise DTypeError(f"{name}: {dt} is not a numeric dtype (bool, integer, float"
                         f"{' or complex' if complex_ok else ''})")
    return dt
