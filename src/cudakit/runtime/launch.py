"""Launch configuration: validation against the hardware limits, grid helpers, occupancy, and the
single launch path every cudakit kernel goes through (profiling, error attribution)."""
from __future__ import annotations

import collections
import operator
from dataclasses import dataclass

from ..errors import LaunchError

MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)

# The last kernels launched on this process: named by check() when an asynchronous error surfaces.
recent_launches: collections.deque = collections.deque(maxlen=8)
_blocking: bool | None = None


def _refresh() -> None:
    global _blocking
    _blocking = None
    from . import native
    native.close_fast_gate()  # CUDAKIT_LAUNCH_BLOCKING may have changed: the Python path decides again


def _index(x, what: str) -> int:
    """x as an int: an int or an integer type (NumPy's too), not a bool, a float or a string (which
    int() would truncate or split instead of refusing)."""
    if type(x) is int:
        return x
    if type(x).__name__ in ("bool", "bool_"):
        raise LaunchError(f"{what} must be an int (got the bool {x!r})")
    try:
        return operator.index(x)
    except TypeError:
        raise LaunchError(f"{what} must be an int (got {type(x).__name__} {x!r})") from None


def _dim3(v, what: str) -> tuple[int, int, int]:
    if not isinstance(v, (tuple, list)):
        if isinstance(v, (str, bytes)):
            raise LaunchError(f"{what} must be an int or a tuple of up to 3 ints (got {v!r})")
        if getattr(v, "ndim", 0) == 0 and hasattr(v, "__index__"):   # an int, a NumPy integer
            v = (v,)
        else:   # a 1-D array, a range
            try:
                v = tuple(v)
            except TypeError:
                raise LaunchError(f"{what} must be an int or a tuple of up to 3 ints (got {v!r})") from None
    t = tuple(_index(x, what) for x in v)
    if not 1 <= len(t) <= 3:
        raise LaunchError(f"{what} must have 1 to 3 dimensions (got {len(t)})")
    return t + (1,) * (3 - len(t))


def _ints3(t) -> bool:
    return type(t) is tuple and len(t) == 3 and type(t[0]) is int and type(t[1]) is int and type(t[2]) is int


def dims3(grid, block) -> tuple[tuple, tuple]:
    """(grid, block) as 3-tuples of ints (_dim3), the usual 3-tuples of ints as they are."""
    return grid if _ints3(grid) else _dim3(grid, "grid"), block if _ints3(block) else _dim3(block, "block")


@dataclass(frozen=True)
class LaunchConfig:
    """A validated launch configuration: grid and block as 3-tuples, dynamic shared memory in bytes.

    Raises LaunchError naming the value and the limit, e.g. "block must be <= 1024 threads (got 2048)".
    """
    grid: tuple
    block: tuple
    shared_mem: int = 0

    def __post_init__(self):
        g, b = _dim3(self.grid, "grid"), _dim3(self.block, "block")
        object.__setattr__(self, "grid", g)
        object.__setattr__(self, "block", b)
        object.__setattr__(self, "shared_mem", validate(g, b, self.shared_mem))


def validate(grid: tuple, block: tuple, shared_mem: int = 0, max_threads: int = MAX_THREADS_PER_BLOCK,
             max_shared: int | None = None, kernel: str = "?") -> int:
    """Check 3-tuples `grid`, `block` and `shared_mem` against the limits; LaunchError if over.
    Returns shared_mem as an int (_index)."""
    threads = block[0] * block[1] * block[2]
    if threads > max_threads:
        raise LaunchError(f"block must be <= {max_threads} threads (got {threads})", kernel, grid, block)
    for i, (b, lim) in enumerate(zip(block, MAX_BLOCK)):
        if not 1 <= b <= lim:
            raise LaunchError(f"block dimension {i} must be in [1, {lim}] (got {b})", kernel, grid, block)
    for i, (g, lim) in enumerate(zip(grid, MAX_GRID)):
        if not 1 <= g <= lim:
            raise LaunchError(f"grid dimension {i} must be in [1, {lim}] (got {g})", kernel, grid, block)
    if type(shared_mem) is not int:
        shared_mem = _index(shared_mem, "shared_mem")
    if shared_mem < 0 or (max_shared is not None and shared_mem > max_shared):
        limit = f"[0, {max_shared}] bytes" if max_shared is not None else ">= 0 bytes"
        raise LaunchError(f"dynamic shared memory must be in {limit} (got {shared_mem})", kernel, grid, block)
    return shared_mem


def launch_config(n: int, threads: int = 256) -> tuple[int, int]:
    """(grid, block) for a 1-D launch of one thread per element: grid = ceil(n / threads).

    A grid-stride kernel may take fewer blocks; n = 0 gives grid 0: nothing to launch (skip the
    launch: a launch of grid 0 is refused). n and threads: ints (NumPy's too), not floats or bools.
    """
    n, threads = _index(n, "n"), _index(threads, "threads")
    if not 1 <= threads <= MAX_THREADS_PER_BLOCK:
        raise LaunchError(f"threads must be in [1, {MAX_THREADS_PER_BLOCK}] (got {threads})")
    if n < 0:
        raise LaunchError(f"n must be >= 0 (got {n})")
    grid = (n + threads - 1) // threads
    if grid > MAX_GRID[0]:
        raise LaunchError(f"grid must be <= {MAX_GRID[0]} blocks (got {grid}); use a grid-stride kernel")
    return grid, threads


def launch_blocking() -> bool:
    global _blocking
    if _blocking is None:
        from ..config import settings
        _blocking = settings().launch_blocking
    return _blocking


def check() -> None:
    """Synchronise the current device and raise LaunchError if an earlier launch failed, or the
    error an op recorded on the device (runtime/device_errors.py: cross_entropy's
    TargetIndexError) since the last check.

    The error names the kernels launched last. With CUDAKIT_LAUNCH_BLOCKING=1 each launch is
    checked as it happens instead, so the error names exactly the failing kernel. A kernel fault
    leaves the CUDA context unusable: the process must restart to use the GPU again. Without a
    usable GPU nothing can have been launched: check() returns at once.
    """
    from . import _cupy
    if not _cupy.probe()[0]:
        return
    from .memory import _refuse_in_capture
    _refuse_in_capture("check()")
    cp = _cupy.cupy()
    try:
        cp.cuda.runtime.deviceSynchronize()
    except cp.cuda.runtime.CUDARuntimeError as e:
        names = ", ".join(f"{n}{g}x{b}" for n, g, b in recent_launches) or "none recorded"
        raise LaunchError(f"asynchronous CUDA error: {e}; kernels launched last (oldest first): {names}",
                          recent_launches[-1][0] if recent_launches else "?") from None
    from . import device_errors
    device_errors.check_pending()
