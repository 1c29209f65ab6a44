"""The slower paths cudakit takes when a faster one is unavailable, each logged once at INFO with
its reason and listed by `cudakit info` (taken()): conv2d by im2col + cuBLAS without Triton, the
unfused linear epilogue after cuBLASLt answers NOT_SUPPORTED, a corrupt autotuning file re-tuned.
No fallback is silent."""
from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)
_taken: dict = {}   # key -> reason
_lock = threading.Lock()


def note(key: str, reason: str) -> None:
    """Record that the fallback `key` was taken, and log `reason` at INFO the first time."""
    with _lock:
        if key in _taken:
            return
        _taken[key] = reason
    log.info("fallback %s: %s", key, reason)


def taken() -> dict:
    """{key: reason} of every fallback this process took (a copy)."""
    with _lock:
        return dict(_taken)


def reset() -> None:
    """Forget the fallbacks taken (tests)."""
    with _lock:
        _taken.clear()
