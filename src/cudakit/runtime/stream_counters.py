"""Zeroed int32 counters per (device, stream), for kernels whose last program of a group finishes
the group's work (the float32 attention forward's key parts: the last part merges them,
kernels/_attention_triton.py attn_fwd's MERGE).

Why per stream: a kernel takes tickets from its counters and its last program of each group puts
the counter back to 0, so launches that follow one another on a stream find them zero; launches on
two streams may run at once, so each stream has its own. A kernel launched while a CUDA graph is
being captured must not take them (a replay may run on any stream, beside an eager call on this
one): callers launch their two-kernel form there instead (`available()`).

The buffers are made on first use from the current allocator and kept (SLOTS * 4 bytes a stream).
"""
from __future__ import annotations

import threading

from . import _cupy

SLOTS = 4096
_lock = threading.Lock()
_counters: dict = {}       # (device, stream pointer) -> CuPy int32 array [SLOTS]


def available(slots: int) -> bool:
    """Whether a launch that needs `slots` counters may take them now: not while a graph is being
    captured (by cudakit.graph, or on the current stream by CuPy's own capture)."""
    from ..graphs import capturing
    return (0 < slots <= SLOTS and capturing() is None
            and not _cupy.cupy().cuda.get_current_stream().is_capturing())


def counters(device: int):
    """The int32 [SLOTS] counters of the current stream on `device` (the current device), all zero
    between launches."""
    cp = _cupy.cupy()
    key = (device, cp.cuda.get_current_stream().ptr)
    c = _counters.get(key)
    if c is None:
        with _lock:
            c = _counters.get(key)
            if c is None:
                c = _counters[key] = cp.zeros(SLOTS, cp.int32)
    return c
