"""Device memory: pool statistics and limits on top of CuPy's pool, pinned buffers, transfers.

cudakit does not bring its own pool. It installs a thin allocator in front of CuPy's default
MemoryPool (`cupy.cuda.set_allocator`), so CuPy arrays made anywhere in the process are counted,
and `cupy.get_default_memory_pool()` keeps working as before. The allocator is installed on the
first CUDA use, never at import. It is the native module's `mem_malloc` (runtime/_native.c: the
counting in C, no Python object with a __del__ per array) where that module is available, else
`_malloc` below; both count the same way.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import OutOfMemoryError
from . import _cupy


@dataclass
class MemoryStats(Mapping):
    """Statistics of cudakit's view of one device's memory pool. Bytes unless named otherwise.
    Read as attributes or as a read-only mapping (stats["allocated"], "allocated" in stats,
    stats.get(...), keys(), items(), dict(stats)): its keys are the fields below and "cached"; the
    other pools' names of _STAT_ALIASES read too.

    allocated       bytes in live blocks (each request rounded up to the pool's 512-byte unit)
                    allocated through the pool since cudakit's allocator was installed
    reserved        bytes the pool holds from the driver: allocated + cached free blocks
    peak_allocated  highest `allocated` since the allocator was installed or reset_peak()
    allocations     number of successful allocations
    frees           number of blocks returned to the pool
    oom_retries     times an allocation failed, cached blocks were freed and it was retried
    fragmentation   (reserved - allocated) / reserved: the share of reserved memory that sits in
                    cached free blocks and serves no live array (0 when nothing is reserved)
    limit           the pool's limit in bytes, None when unlimited
    cache_limit     the most bytes of cached free blocks the pool keeps (set_cache_size), None
                    when unlimited
    cache_trims     times an allocation found more than cache_limit cached and freed the cache
    graph_reserved  bytes held from the driver by the private pools of live CUDA graphs
                    (cudakit.graph / CUDAGraph), outside `reserved`
    free            the device's free bytes as the driver reports them when the statistics were
                    taken (other processes' use included; what the pool can still take, besides
                    `cached`); 0 when not measured
    total           the device's total bytes (0 when not measured)
    cached          (a property, also a key of as_dict() and stats["cached"]) reserved - allocated
    """
    device: int
    allocated: int
    reserved: int
    peak_allocated: int
    allocations: int
    frees: int
    oom_retries: int
    fragmentation: float
    limit: int | None
    cache_limit: int | None = None
    cache_trims: int = 0
    graph_reserved: int = 0
    free: int = 0
    total: int = 0

    @property
    def cached(self) -> int:
        """Bytes in cached free blocks: reserved - allocated."""
        return self.reserved - self.allocated

    def as_dict(self) -> dict:
        """Every field, and "cached", as a dict."""
        return dict(self)

    def __getitem__(self, key: str):
        """stats["allocated"] as stats.allocated (the dict-style access Genesis-style code uses),
        also stats["cached"] and the names other pools give: "active_memory" (allocated),
        "allocation_count" (allocations), "total_allocated" (reserved); KeyError naming the keys for
        an unknown key."""
        key = _STAT_ALIASES.get(key, key)
        if key not in self.__dataclass_fields__ and key != "cached":
            raise KeyError(f"{key!r}; MemoryStats keys: {', '.join(list(self) + list(_STAT_ALIASES))}")
        return getattr(self, key)

    def __iter__(self):
        """The keys of as_dict(): every field, then "cached"."""
        return iter(list(self.__dataclass_fields__) + ["cached"])

    def __len__(self) -> int:
        return len(self.__dataclass_fields__) + 1   # (the fields and "cached")


# other pools' names: seed 004's get_stats() has total_allocated (what the pool took from the
# driver), active_memory (in live arrays) and allocation_count
_STAT_ALIASES = {"active_memory": "allocated", "allocation_count": "allocations", "total_allocated": "reserved"}


class _Counters:
    __slots__ = ("allocations", "frees", "oom_retries", "peak", "allocated", "cache_trims", "cache_limit")

    def __init__(self):
        self.allocations = self.frees = self.oom_retries = self.peak = self.allocated = self.cache_trims = 0
        self.cache_limit = None   # bytes of cached free blocks kept at most; None: no cap


_lock = threading.Lock()
_allocator = None    # what ensure_installed made CuPy's allocator (None: not installed yet)
_pool = None
_counters: dict[int, _Counters] = {}
_callback = None     # what the allocator calls: the user's callback, the listeners', or None
_user_callback = None
_listeners: list = []   # internal listeners (the profiler's memory timeline)
_TrackedMemory = None
_mem_mod = None      # cupy.cuda.memory
_native = None       # the native module when its allocator is installed


def _make_tracked_memory_class(cp):
    class TrackedMemory(cp.cuda.memory.BaseMemory):
        """Wraps a pooled block so that its return to the pool is counted."""
        __slots__ = ("_inner", "_counters")

        def __init__(self, inner, counters):
            super().__init__()
            self.ptr, self.size, self.device_id = inner.ptr, inner.mem.size, inner.device_id
            self._inner, self._counters = inner, counters

        def __del__(self):
            c = self._counters
            c.frees += 1
            c.allocated -= self.size
            if _callback is not None:
                _callback("free", self.device_id, self.size)
    return TrackedMemory


def ensure_installed():
    """Install the counting allocator in front of CuPy's pool (once) and apply
    CUDAKIT_GPU_MEMORY_LIMIT and CUDAKIT_GPU_CACHE_SIZE to every device."""
    global _pool, _TrackedMemory, _mem_mod, _allocator
    if _allocator is not None:
        return _pool
    cp = _cupy.cupy()
    with _lock:
        if _allocator is not None:
            return _pool
        _pool = cp.get_default_memory_pool()
        _TrackedMemory = _make_tracked_memory_class(cp)
        _mem_mod = cp.cuda.memory
        allocator = _native_allocator(cp) or _malloc
        cp.cuda.set_allocator(allocator)
        _allocator = allocator   # (published last: a caller seeing it finds the allocator set)
    from ..config import settings
    from .device import device_count
    if settings().memory_limit:
        for d in range(device_count()):
            set_limit(settings().memory_limit, device=d)
    if settings().cache_size:
        for d in range(device_count()):
            set_cache_size(settings().cache_size, device=d)
    _apply_callback()
    return _pool


def pool_allocator_active() -> bool:
    """Whether CuPy allocates through the counting allocator ensure_installed set (cudakit's pool),
    not through an allocator a `cupy.cuda.using_allocator` scope put in front of it on this thread
    (a CUDA graph's private pool during warm-up and capture, a user's own pool). Memory kept past a
    call (kernels/cudnn.py's workspaces) is only taken from cudakit's pool."""
    return _allocator is not None and _mem_mod.get_allocator() is _allocator


def _native_allocator(cp):
    """The native counting allocator set up on CuPy's pool, or None when the module is unavailable."""
    global _native
    from . import native
    from .device import device_count
    mod = native.module()
    if mod is None or device_count() > 64:  # _native.c counts devices 0..63
        return None
    m = cp.cuda.memory
    mod.mem_setup(_pool.malloc, m.UnownedMemory, m.MemoryPointer, m.OutOfMemoryError, _after_oom)
    _native = mod
    return mod.mem_malloc


def _counts(dev: int) -> tuple[int, int, int, int]:
    """(allocations, frees, allocated, peak) of `dev`."""
    if _native is not None:
        return _native.mem_counts(dev)
    c = _counters_for(dev)
    return c.allocations, c.frees, c.allocated, c.peak


def _counters_for(dev: int) -> _Counters:
    c = _counters.get(dev)
    if c is None:
        c = _counters.setdefault(dev, _Counters())
    return c


@functools.lru_cache(maxsize=None)
def _oom_class(cupy_oom: type) -> type:
    """cudakit's OutOfMemoryError made a subclass of CuPy's too (one class per CuPy class), so
    that code written against CuPy (`except cupy.cuda.memory.OutOfMemoryError`) catches it."""
    return type("OutOfMemoryError", (OutOfMemoryError, cupy_oom), {"__module__": OutOfMemoryError.__module__,
                                                                     "__doc__": OutOfMemoryError.__doc__})


def _after_oom(size: int):
    """The pool refused `size` bytes: free its cached blocks and retry once, else raise cudakit's
    OutOfMemoryError with the numbers. Returns the pool's MemoryPointer."""
    cp = _cupy.loaded_cupy()
    dev = cp.cuda.runtime.getDevice()
    c = _counters_for(dev)
    c.oom_retries += 1
    _pool.free_all_blocks()
    try:
        return _pool.malloc(size)
    except _mem_mod.OutOfMemoryError:
        free, total = cp.cuda.runtime.memGetInfo()
        raise _oom_class(_mem_mod.OutOfMemoryError)(size, _counts(dev)[2], _pool.total_bytes(), free, total,
                                                    _pool.get_limit() or None, dev) from None


def _malloc(size: int):
    mem_mod = _mem_mod
    try:
        inner = _pool.malloc(size)
    except mem_mod.OutOfMemoryError:
        inner = _after_oom(size)
    if size == 0:  # CuPy hands out a null pointer for 0 bytes; nothing to count
        return inner
    dev = inner.device_id
    c = _counters.get(dev) or _counters_for(dev)
    c.allocations += 1
    tracked = _TrackedMemory(inner, c)
    c.allocated += tracked.size   # O(1): CuPy's pool.used_bytes() walks every live block
    if c.allocated > c.peak:
        c.peak = c.allocated
    if _callback is not None:
        _callback("alloc", dev, tracked.size)
    if c.cache_limit is not None and _pool.total_bytes() - c.allocated > c.cache_limit:
        _trim_cache(dev)
    return mem_mod.MemoryPointer(tracked, 0)


def _trim_cache(dev: int) -> None:
    """An allocation left more than the cache limit of `dev` (the current device) in cached free
    blocks: return them to the driver (the native allocator calls this too)."""
    _counters_for(dev).cache_trims += 1
    _pool.free_all_blocks()


def _on_device(dev: int | None):
    cp = _cupy.cupy()
    return cp.cuda.Device(cp.cuda.runtime.getDevice() if dev is None else dev)


def stats(device: int | None = None) -> MemoryStats:
    """MemoryStats of `device` (default: current). Installs the counting allocator if needed."""
    pool = ensure_installed()
    with _on_device(device) as d:
        allocations, frees, allocated, peak = _counts(d.id)
        reserved, limit = pool.total_bytes(), pool.get_limit()
        c = _counters_for(d.id)
        free, total = d.mem_info
        return MemoryStats(
            device=d.id, allocated=allocated, reserved=reserved, peak_allocated=max(peak, allocated),
            allocations=allocations, frees=frees, oom_retries=c.oom_retries,
            fragmentation=(reserved - allocated) / reserved if reserved else 0.0,
            limit=limit or None, cache_limit=c.cache_limit, cache_trims=c.cache_trims, free=int(free),
            total=int(total), graph_reserved=_graph_reserved(d.id))


def devices_in_use() -> list[int]:
    """The devices on which cudakit's counting allocator has allocated since it was installed,
    ascending ([] before any allocation); reads its counters only (no device is touched, no CUDA
    context made)."""
    if _allocator is None:
        return []
    if _native is not None:
        from .device import device_count
        return [d for d in range(device_count()) if _native.mem_counts(d)[0]]
    return sorted(d for d, c in _counters.items() if c.allocations)


def _graph_reserved(dev: int) -> int:
    import sys
    graphs = sys.modules.get("cudakit.graphs")   # no graph made: nothing to count, nothing imported
    return graphs.graph_reserved(dev) if graphs is not None else 0


def reset_peak(device: int | None = None) -> None:
    """Set peak_allocated to the bytes allocated now."""
    ensure_installed()
    with _on_device(device) as d:
        if _native is not None:
            _native.mem_reset_peak(d.id)
        else:
            c = _counters_for(d.id)
            c.peak = c.allocated


def memory_info(device: int | None = None) -> tuple[int, int]:
    """(free, total) bytes of `device` (default: current) as the driver reports them (other
    processes included). Without a usable GPU: (0, 0) (a device index raises DeviceError)."""
    if not _cupy.probe()[0]:
        if device is not None:
            from .device import _check_index
            _check_index(device)
        return 0, 0
    cp = _cupy.cupy()
    with _on_device(device):
        free, total = cp.cuda.runtime.memGetInfo()
    return int(free), int(total)


def empty_cache() -> None:
    """Return every cached free block of every device to the driver (live arrays are untouched).
    Without a usable GPU nothing is cached: returns at once."""
    if not _cupy.probe()[0]:
        return
    pool = ensure_installed()
    pool.free_all_blocks()
    _cupy.cupy().get_default_pinned_memory_pool().free_all_blocks()


def _size_arg(op: str, value) -> tuple:
    """config.parse_size(value), its ValueError an ArgumentError naming `op`."""
    from ..config import parse_size
    from ..errors import ArgumentError
    try:
        return parse_size(value)
    except ValueError as e:
        raise ArgumentError(f"{op}: {e}") from None


def set_limit(bytes: int | str | None = None, fraction: float | None = None,
              device: int | None = None) -> None:
    """Cap the pool of `device` (default: current): `bytes` (an int or "8GiB") or `fraction`
    of total device memory (0 < fraction <= 1; "80%" as `bytes` also works). No argument removes
    the cap. Allocations past it raise OutOfMemoryError."""
    import numbers

    from ..errors import ArgumentError, ArgumentTypeError
    if bytes is not None and fraction is not None:
        raise ArgumentError("set_limit: give bytes or fraction, not both")
    if bytes is not None:
        bytes, frac = _size_arg("set_limit", bytes)
        fraction = frac if frac is not None else None
    if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, numbers.Real)):
        raise ArgumentTypeError(f"set_limit: fraction must be a number in (0, 1] (got {fraction!r})")
    if fraction is not None and not 0 < fraction <= 1:
        raise ArgumentError(f"set_limit: fraction must be in (0, 1] (got {fraction})")
    pool = ensure_installed()
    with _on_device(device):
        if fraction is not None:
            pool.set_limit(fraction=fraction)
        else:
            pool.set_limit(size=bytes or 0)


def get_limit(device: int | None = None) -> int | None:
    """The pool limit of `device` in bytes, or None."""
    pool = ensure_installed()
    with _on_device(device):
        return pool.get_limit() or None


def set_cache_size(size: int | str | None = None, device: int | None = None) -> None:
    """Keep at most `size` bytes (an int, "2GB", "512MiB", or "10%" of the device's memory) of
    cached free blocks in the pool of `device` (default: current); None removes the cap.

    The pool keeps freed blocks for reuse (`stats().cached`). With a cap, an allocation that leaves
    more than `size` cached returns the cached blocks to the driver (CuPy's free_all_blocks: every
    free block not split by a live array), counted in `stats().cache_trims`; memory freed after
    the last allocation stays cached until the next one (or `empty_cache()`). 0 keeps nothing
    cached: every allocation past the first frees what the pool holds, like a pool-less allocator.
    """
    from ..errors import ArgumentTypeError
    nbytes = frac = None
    if size is not None:   # (checked before the GPU is asked for, as set_limit's)
        if isinstance(size, bool):
            raise ArgumentTypeError(f"set_cache_size: size must be bytes, a size string or None (got {size!r})")
        nbytes, frac = _size_arg("set_cache_size", size)
    pool = ensure_installed()
    with _on_device(device) as d:
        if size is None:
            cap = None
        else:
            cap = nbytes if frac is None else int(frac * d.mem_info[1])
        _counters_for(d.id).cache_limit = cap
        if _native is not None:
            _native.mem_set_cache_cap(d.id, cap, pool.total_bytes, _trim_cache)


def get_cache_size(device: int | None = None) -> int | None:
    """The cap on cached free bytes of `device` (set_cache_size), or None."""
    ensure_installed()
    with _on_device(device) as d:
        return _counters_for(d.id).cache_limit


def set_callback(fn) -> None:
    """Call fn(event, device, nbytes) on every allocation ("alloc") and free ("free"); None stops.

    The callback runs on the allocating thread, inside the allocator: keep it short.
    """
    global _user_callback
    ensure_installed()
    _user_callback = fn
    _apply_callback()


def _add_listener(fn) -> None:
    """Also call fn(event, device, nbytes) on every counted allocation and free (the profiler's
    memory timeline); applied when the allocator is installed, now or later."""
    _listeners.append(fn)
    _apply_callback()


def _remove_listener(fn) -> None:
    if fn in _listeners:
        _listeners.remove(fn)
    _apply_callback()


def _apply_callback() -> None:
    """Point the allocator at the user's callback and the listeners: the user's own function when
    it is alone (no extra call per event), None when there is neither."""
    global _callback
    listeners, user = tuple(_listeners), _user_callback
    if not listeners:
        cb = user
    else:
        def cb(event, device, nbytes):
            for fn in listeners:
                fn(event, device, nbytes)
            if user is not None:
                user(event, device, nbytes)
    _callback = cb
    if _native is not None:
        _native.mem_set_callback(cb)


# --- host buffers and transfers ------------------------------------------------------------

def pinned_empty(shape, dtype="float32"):
    """A NumPy array in page-locked host memory: copies from and to it can run asynchronously."""
    import numpy as np
    cp = _cupy.cupy()
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    mem = cp.cuda.alloc_pinned_memory(max(count * dtype.itemsize, 1))
    return np.frombuffer(mem, dtype, count).reshape(shape)


def is_pinned(x) -> bool:
    """True when NumPy array `x` lies in page-locked memory."""
    cp = _cupy.cupy()
    try:
        attrs = cp.cuda.runtime.pointerGetAttributes(x.ctypes.data)
    except Exception:
        return False
    return attrs.type == cp.cuda.runtime.memoryTypeHost


def to_device(x, device: int | None = None, stream=None, non_blocking: bool = False):
    """Copy host array `x` to `device` (default: current) and return a CuPy array.

    With non_blocking=True the copy is queued on `stream` (default: the current stream) and the
    call returns at once; that is asynchronous only when `x` is pinned (pinned_empty). Do not
    change `x` until the stream has passed the copy.
    """
    import numpy as np
    from .. import profiler
    cp = _cupy.cupy()
    ensure_installed()
    x = np.asarray(x)
    with _on_device(device):
        out = cp.empty(x.shape, x.dtype)
        with profiler._transfer("HtoD", x.nbytes, stream):
            out.set(np.ascontiguousarray(x), stream=stream)
            if not non_blocking:
                (stream or cp.cuda.get_current_stream()).synchronize()
    return out


def to_host(x, out=None, stream=None, non_blocking: bool = False):
    """Copy CuPy array `x` to the host; into `out` (a NumPy array, pinned for a true asynchronous
    copy) when given. With non_blocking=True, synchronise `stream` before reading the result.

    A NumPy array `x` is already on the host: a copy of it is returned (into `out` when given,
    which must then have x's shape), no GPU needed."""
    import numpy as np
    if x is None:
        from ..errors import ArgumentTypeError
        raise ArgumentTypeError("to_host: x must be an array (got None)")
    if out is not None:   # (checked for both kinds of x: NumPy's and CuPy's own errors were untyped)
        from ..errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError
        if not isinstance(out, np.ndarray):
            raise ArgumentTypeError(f"to_host: out must be a NumPy array (got {type(out).__name__})")
        if tuple(out.shape) != tuple(x.shape):
            raise ShapeError(f"to_host: out must have x's shape {tuple(x.shape)} (got {out.shape})")
        if out.dtype != x.dtype:
            raise DTypeError(f"to_host: out must have x's dtype {x.dtype} (got {out.dtype})")
        if not out.flags.writeable:
            raise ArgumentError("to_host: out is read-only")
    if isinstance(x, np.ndarray):
        if out is None:
            return x.copy()
        np.copyto(out, x)
        return out
    from .. import profiler
    cp = _cupy.cupy()
    if not non_blocking:
        _refuse_in_capture("to_host")
    s = stream or cp.cuda.get_current_stream()
    with profiler._transfer("DtoH", x.nbytes, s):
        res = x.get(stream=s, out=out, blocking=not non_blocking)
    if not non_blocking:   # the host waited anyway: surface errors ops recorded on the device
        from . import device_errors
        device_errors.check_pending(x.data.device_id, synchronized=True)   # its stream waited: read after it
    return res


def _refuse_in_capture(what: str) -> None:
    """GraphCaptureError when this thread is capturing a CUDA graph (what would synchronise)."""
    import sys
    graphs = sys.modules.get("cudakit.graphs")   # no graph module loaded: nothing can be capturing
    if graphs is not None:
        graphs.check_not_capturing(what)
