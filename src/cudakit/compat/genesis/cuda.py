"""genesis.cuda (seed 002) on cudakit: memory limits and statistics, kernel cache, profiling.

Genesis's environment variables are honoured at the first genesis.cuda call (or CUDA tensor):
GENESIS_CUDA_MEMORY_FRACTION (0.8: a pool limit of 80% of each GPU's memory, unless
CUDAKIT_GPU_MEMORY_LIMIT is set), GENESIS_CUDA_CACHE_SIZE ("1GB": the cached free bytes a pool keeps,
unless CUDAKIT_GPU_CACHE_SIZE is set) and GENESIS_KERNEL_CACHE_DIR (the compiled-kernel cache,
unless CUDAKIT_CACHE_DIR is set). Calls that need a GPU raise BackendUnavailableError (a
RuntimeError, Genesis's "CUDA not available") without one.
"""
from __future__ import annotations

import functools
import inspect
import logging
import numbers
import os
import threading

from ... import profiler
from ...config import parse_size, reload, settings
from ...runtime import compiler, device, memory
from .._common import check_bool, report, require_cuda

log = logging.getLogger(__name__)
_lock = threading.Lock()
_env_done = False
_cuda_done = False
_fusion = True
_profile = None
_debugging = False


def _fraction(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value <= 1:
        raise ValueError(f"{name} must be a number in (0, 1] (got {value!r})")
    return float(value)


def _env_fraction() -> float | None:
    text = os.environ.get("GENESIS_CUDA_MEMORY_FRACTION")
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"GENESIS_CUDA_MEMORY_FRACTION must be a number in (0, 1] (got {text!r})") from None
    return _fraction(value, "GENESIS_CUDA_MEMORY_FRACTION")


def _configure() -> None:
    """Apply GENESIS_KERNEL_CACHE_DIR (once; no GPU needed) and check the other variables."""
    global _env_done
    if _env_done:
        return
    with _lock:
        if _env_done:
            return
        _env_fraction()
        size = os.environ.get("GENESIS_CUDA_CACHE_SIZE")
        if size:
            parse_size(size)   # ValueError naming the text
        cache = os.environ.get("GENESIS_KERNEL_CACHE_DIR")
        if cache:
            if os.environ.get("CUDAKIT_CACHE_DIR"):
                log.warning("GENESIS_KERNEL_CACHE_DIR=%s ignored: CUDAKIT_CACHE_DIR=%s is set", cache,
                            os.environ["CUDAKIT_CACHE_DIR"])
            else:
                os.environ["CUDAKIT_CACHE_DIR"] = cache
                reload()
                log.info("kernel cache at %s (GENESIS_KERNEL_CACHE_DIR)", settings().cache_dir)
        _env_done = True


def _cuda(what: str) -> None:
    """Require a GPU; on the first call install cudakit's pool statistics and apply the GENESIS_*
    memory variables to every device."""
    global _cuda_done
    _configure()
    require_cuda(what)
    if _cuda_done:
        return
    with _lock:
        if _cuda_done:
            return
        memory.ensure_installed()
        fraction, size = _env_fraction(), os.environ.get("GENESIS_CUDA_CACHE_SIZE")
        for d in range(device.device_count()):
            if fraction is not None and not settings().memory_limit:
                memory.set_limit(fraction=fraction, device=d)
            if size and not settings().cache_size:
                memory.set_cache_size(size, device=d)
        _cuda_done = True


def set_memory_fraction(fraction: float) -> None:
    """Cap every GPU's pool at `fraction` (0 < fraction <= 1) of its memory
    (cudakit.memory.set_limit(fraction=)). ValueError naming `fraction` outside (0, 1]."""
    fraction = _fraction(fraction, "fraction")
    _cuda("set_memory_fraction")
    for d in range(device.device_count()):
        memory.set_limit(fraction=fraction, device=d)


def set_cache_size(size) -> None:
    """Keep at most `size` ("2GB", "512MiB", bytes, or "10%") of cached free blocks in every GPU's
    pool (cudakit.memory.set_cache_size). ValueError naming the text when it is not a size."""
    parse_size(size)
    _cuda("set_cache_size")
    for d in range(device.device_count()):
        memory.set_cache_size(size, device=d)


def enable_lazy_init(enabled: bool = True) -> None:
    """cudakit initialises CUDA lazily in any case (nothing at import); enabled=False initialises
    it now (the pool statistics installed, GENESIS_* memory settings applied), needing a GPU."""
    if not check_bool(enabled, "enabled"):
        _cuda("enable_lazy_init(False)")


def current_device() -> int:
    """Index of the current GPU of this thread."""
    _cuda("current_device")
    return device.current_device()


def memory_allocated(device: int | None = None) -> int:
    """Bytes in live arrays on `device` (default: current) counted by cudakit's pool."""
    _cuda("memory_allocated")
    return memory.stats(device).allocated


def memory_stats(device: int | None = None) -> memory.MemoryStats:
    """cudakit.memory.stats(device): read as a dict too (stats["allocated"], ["cached"], ["free"],
    ["reserved"], ["fragmentation"], ["peak_allocated"]); bytes, fragmentation a share in [0, 1]."""
    _cuda("memory_stats")
    return memory.stats(device)


def _adapt(fn):
    """Genesis's callback takes no arguments; cudakit's allocator passes (event, device, nbytes)."""
    if fn is None:
        return None
    if not callable(fn):
        raise TypeError(f"callback must be callable or None (got {type(fn).__name__})")
    try:
        inspect.signature(fn).bind("alloc", 0, 0)
        return fn
    except TypeError:
        pass
    except ValueError:   # no signature to inspect (a builtin): call it as Genesis does
        pass
    return lambda event, dev, nbytes: fn()


def set_memory_callback(fn) -> None:
    """Call `fn()` (or fn(event, device, nbytes)) after every allocation and free of GPU memory
    (cudakit.memory.set_callback); None removes it. It runs inside the allocator: keep it short."""
    cb = _adapt(fn)
    _cuda("set_memory_callback")
    memory.set_callback(cb)


def _log_memory_event(event: str, dev: int, nbytes: int) -> None:
    log.debug("memory %s of %d bytes on cuda:%d", event, nbytes, dev)


def enable_memory_debugging(enabled: bool = True) -> None:
    """Log every GPU allocation and free at DEBUG on this module's logger (True), or stop (False)."""
    global _debugging
    enabled = check_bool(enabled, "enabled")
    _cuda("enable_memory_debugging")
    with _lock:
        if enabled and not _debugging:
            memory._add_listener(_log_memory_event)
        elif not enabled and _debugging:
            memory._remove_listener(_log_memory_event)
        _debugging = enabled


def enable_profiling(enabled: bool = True):
    """True: record every cudakit launch and transfer (cudakit.profiler.start()); returns the
    Profile (a new one where the last was stopped through cudakit.profiler). False: stop, log the
    per-kernel summary at INFO and return the finished Profile (None when none was running).
    RuntimeError when another cudakit profile is already active."""
    global _profile
    enabled = check_bool(enabled, "enabled")
    with _lock:
        if enabled:
            if _profile is None or profiler._active is not _profile:   # (none, or stopped through cudakit.profiler)
                _profile = profiler.start()
            return _profile
        if _profile is None:
            return None
        prof, _profile = _profile, None
        if profiler._active is prof:
            prof = profiler.stop()
    report(log, prof.summary())
    return prof


def empty_cache() -> None:
    """Return every cached free GPU block to the driver (nothing to do without a GPU)."""
    memory.empty_cache()


def clear_kernel_cache() -> int:
    """Delete cudakit's compiled kernels on disk and in memory; returns the files removed."""
    _configure()
    return compiler.cache_clear()


def set_kernel_fusion(enabled: bool) -> bool:
    """Accepted for Genesis code; returns the previous value. cudakit fuses only where the caller
    asks for a fused op (cudakit.fused_linear_gelu): no Genesis op here fuses implicitly, so there is
    nothing to switch off (docs/compat.md)."""
    global _fusion
    previous, _fusion = _fusion, check_bool(enabled, "enabled")
    return previous


def warm_up_kernels(families=None, dtypes=None) -> dict:
    """Compile cudakit's kernel families now (cudakit.warm_up_kernels); {family: seconds}, {}
    without a GPU."""
    _configure()
    from ...kernels.warmup import warm_up_kernels as _warm
    return _warm(families, dtypes)


__all__ = ["set_memory_fraction", "set_cache_size", "enable_lazy_init", "current_device", "memory_allocated",
           "memory_stats", "set_memory_callback", "enable_memory_debugging", "enable_profiling", "empty_cache",
           "clear_kernel_cache", "set_kernel_fusion", "warm_up_kernels"]


def _configured_first(fn):
    """fn, applying the GENESIS_* variables (_configure) before it runs: the docstring above
    promises them at the first genesis.cuda call, whichever call that is."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        _configure()
        return fn(*args, **kwargs)
    return call


for _name in __all__:
    globals()[_name] = _configured_first(globals()[_name])
del _name
