"""Device-side error flags: bad input that only the device can see, reported without a host sync.

Why: an op that copied its own input check back to the host (cross_entropy's out-of-range targets
did) synchronises on every call, which costs host time and cannot be captured in a CUDA graph.
Instead the kernel that finds the problem records it in a small per-device buffer, and the
error surfaces at the next point where the host waits for the device anyway:
`cudakit.check()`, `cudakit.synchronize()` and `cudakit.to_host()` (and `check_pending()` for
callers of their own). The first bad call since the last check wins; later ones are counted
only in their own flag write being skipped.

Buffer layout (int64 [8] per device): code (0 = clear, else an index into _KINDS), then the
kind's fields. The buffer is allocated on first use per device, from the current allocator;
`cudakit.graph` makes it before capturing so a graph never owns it.
"""
from __future__ import annotations

import threading

from . import _cupy

WORDS = 8
_lock = threading.Lock()
_flags: dict = {}          # device -> CuPy int64 array [WORDS]

# code -> (op name, formatter(fields) -> (exception type, message))
_KINDS: dict = {}


def register(code: int, op: str, make_error) -> int:
    """Declare error code `code` (1..2^31) raised as make_error(op, fields) (fields: the 7 int64
    words after the code). Returns code."""
    if code in _KINDS and _KINDS[code][0] != op:
        raise ValueError(f"device error code {code} is already registered for {_KINDS[code][0]!r}")
    _KINDS[code] = (op, make_error)
    return code


def flag(device: int):
    """The int64 [8] flag buffer of `device` (zeroed when made), for a kernel argument."""
    f = _flags.get(device)
    if f is None:
        with _lock:
            f = _flags.get(device)
            if f is None:
                cp = _cupy.cupy()
                with cp.cuda.Device(device):
                    f = cp.zeros(WORDS, cp.int64)
                _flags[device] = f
    return f


def devices_with_flags() -> list:
    return list(_flags)


def check_pending(device: int | None = None, synchronized: bool = False) -> None:
    """Raise the error a kernel recorded on `device` (default: every device with a flag) since the
    last check, and clear it. The flag is read after the device's queued work (synchronized: the
    caller has just waited for it, no second device-wide wait) or, always, after the work queued
    on the current stream."""
    if not _flags:
        return
    from .memory import _refuse_in_capture
    _refuse_in_capture("reading the device error flag (check, synchronize, to_host)")
    cp = _cupy.cupy()
    for dev in ([device] if device is not None else list(_flags)):
        f = _flags.get(dev)
        if f is None:
            continue
        with cp.cuda.Device(dev):
            if not synchronized:
                cp.cuda.runtime.deviceSynchronize()
            words = f.get()
            if not words[0]:
                continue
            f.fill(0)
            cp.cuda.runtime.deviceSynchronize()
        kind = _KINDS.get(int(words[0]))
        if kind is None:   # pragma: no cover - a kernel wrote a code nobody registered
            from ..errors import CudakitError
            raise CudakitError(f"cuda:{dev}: a kernel reported device error code {int(words[0])}")
        op, make = kind
        raise make(op, [int(w) for w in words[1:]])
