"""NeuralScript's CudaBackend (seed 004, `compiler.backend.cuda_backend`) on cudakit.

Where no GPU is usable the backend runs in NeuralScript's "fallback mode": cudakit's CPU backend
(NumPy), said once at INFO. Device memory handed out by allocate_memory() is a cudakit array kept
in a table: the int it returns is checked (and bounds-checked) by free_memory() and the copies,
never dereferenced blindly.
"""
from __future__ import annotations

import enum
import json
import logging
import numbers
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ... import profiler
from ...errors import DeviceError
from ...runtime import compiler, device, memory
from .._common import SharedProfile, check_bool, check_int, cuda_usable, require_cuda

log = logging.getLogger(__name__)
_PROFILE = SharedProfile()   # the one cudakit profile the recording CudaBackends share


class CudaDataType(enum.Enum):
    """Element types of NeuralScript tensors (the value is the NumPy dtype's name)."""
    FLOAT16 = "float16"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    INT32 = "int32"
    INT64 = "int64"

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype."""
        return np.dtype(self.value)


@dataclass(frozen=True)
class CudaDeviceInfo:
    """One GPU: name, compute capability, memory_total (bytes), multiprocessor_count and limits."""
    device_id: int
    name: str
    compute_capability: tuple
    memory_total: int
    multiprocessor_count: int
    max_threads_per_block: int
    warp_size: int
    l2_cache_size: int

    @classmethod
    def from_cudakit(cls, d) -> "CudaDeviceInfo":
        return cls(d.index, d.name, d.compute_capability, d.total_memory, d.multiprocessors,
                   d.max_threads_per_block, d.warp_size, d.l2_cache_size)


@dataclass
class CudaKernel:
    """A kernel compile_kernel() built: its name, cudakit Kernel, source, and the block size the
    source was generated for (None: launch_kernel's block_size, default 256 threads)."""
    name: str
    kernel: object
    source: str
    block_size: tuple | None = None
    check_args: object = None   # validates the arguments of a generated kernel before its launch


class _PoolView:
    """The memory pool of one GPU: get_stats() is cudakit.memory.stats(device) (a MemoryStats that
    reads as a dict: total_allocated, active_memory, peak_allocated, allocation_count, ...)."""

    def __init__(self, device_id: int):
        self.device_id = device_id

    def get_stats(self) -> memory.MemoryStats:
        """cudakit.memory.stats(device_id)."""
        return memory.stats(self.device_id)


class NoSuchPoolError(DeviceError, KeyError):
    """memory_pools[device_id] of a GPU that is not there: a DeviceError, as the backend's other
    device calls raise, and a KeyError, as a Mapping's lookup (`in`, .get()) expects."""


class _HostPoolView:
    """Fallback mode's device 0, the host: get_stats() counts the raw buffers of the backend's
    allocate_memory() (a MemoryStats as the GPU pools give, reserved = allocated: no cache)."""

    def __init__(self, backend: CudaBackend):
        self.device_id = 0
        self._backend = backend

    def get_stats(self) -> memory.MemoryStats:
        c = self._backend._host_counts
        return memory.MemoryStats(0, c["allocated"], c["allocated"], c["peak"], c["allocations"], c["frees"], 0, 0.0,
                                  None)


class _Pools(Mapping):
    """{device id: its pool}, one per visible GPU; in fallback mode {0: the host's}."""

    def __init__(self, backend: CudaBackend):
        self._backend = backend

    def _count(self) -> int:
        return 1 if self._backend.fallback else device.device_count()

    def __getitem__(self, device_id):
        n = self._count()
        if isinstance(device_id, numbers.Integral) and not isinstance(device_id, bool):
            device_id = int(device_id)
        if isinstance(device_id, bool) or not isinstance(device_id, int) or not 0 <= device_id < n:
            raise NoSuchPoolError(f"device_id {device_id!r}: " + ("fallback mode has only device 0 (the host)"
                                                                  if self._backend.fallback else f"{n} GPU(s) visible"))
        return _HostPoolView(self._backend) if self._backend.fallback else _PoolView(device_id)

    def __iter__(self):
        return iter(range(self._count()))

    def __len__(self):
        return self._count()


class CudaBackend:
    """Device management, kernel compilation and launch, raw-buffer memory and performance
    statistics (NeuralScript's CudaBackend).

    enable_profiling: record every cudakit launch and transfer (cudakit.profiler) for
    get_performance_stats(); each launch then pays for two CUDA events. Backends that record share
    one profile (set_profiling). RuntimeError when a cudakit profile other than theirs is active.
    In fallback mode nothing launches on a GPU, so the statistics stay empty.
    """

    def __init__(self, enable_profiling: bool = True):
        self.fallback = not cuda_usable()
        if self.fallback:
            log.info("CUDA unavailable (%s); the CUDA backend runs in fallback mode on cudakit's CPU backend",
                     device.unavailable_reason())
        self._allocations: dict[int, tuple] = {}
        self._host_counts = {"allocated": 0, "peak": 0, "allocations": 0, "frees": 0}   # (fallback: memory_pools[0])
        self._kernels: dict[str, CudaKernel] = {}
        self._recording = False   # holding _PROFILE
        self._lock = threading.Lock()
        self.set_profiling(check_bool(enable_profiling, "enable_profiling"))

    # -- devices --
    @property
    def devices(self) -> list[CudaDeviceInfo]:
        """Every visible GPU ([] in fallback mode)."""
        return [CudaDeviceInfo.from_cudakit(d) for d in device.devices()]

    @property
    def memory_pools(self) -> Mapping:
        """{device id: pool} with get_stats() per GPU; in fallback mode {0: the host}, whose
        statistics count allocate_memory()'s buffers."""
        return _Pools(self)

    @property
    def enable_profiling(self) -> bool:
        """Whether the backend records: it holds the shared profile and that profile is cudakit's
        active one (not stopped through cudakit.profiler)."""
        return self._recording and _PROFILE.profile is not None and profiler._active is _PROFILE.profile

    def set_profiling(self, enabled: bool) -> None:
        """Start (True) or stop (False) recording. Backends that record share cudakit's one
        profile (_PROFILE): it starts with the first and stops after the last stops or is
        garbage-collected, so each one's statistics include the others' launches. True after the
        profile was stopped through cudakit.profiler starts a new one."""
        with self._lock:
            if enabled and self._recording and not self.enable_profiling:   # (stopped from outside)
                self._recording = False
                self._release()
            if enabled and not self._recording:
                _PROFILE.hold()
                self._recording = True
                self._release = weakref.finalize(self, _PROFILE.release)   # (a backend dropped while recording)
            elif not enabled and self._recording:
                self._recording = False
                self._release()

    def get_device_info(self, device_id: int) -> CudaDeviceInfo:
        """CudaDeviceInfo of GPU `device_id`; DeviceError naming it when it does not exist (in
        fallback mode every id: device 0 is the host, which is no GPU; `devices` is empty)."""
        if self.fallback:
            raise DeviceError(f"device_id {device_id!r}: no GPU is usable (fallback mode: device 0 is the host, "
                              f"which has no CudaDeviceInfo)")
        return CudaDeviceInfo.from_cudakit(device.get_device_info(device._check_index(device_id)))

    def set_device(self, device_id: int) -> None:
        """Make GPU `device_id` current for this thread; DeviceError naming it when it does not exist
        (in fallback mode device 0, the host, is always current: set_device(0) does nothing)."""
        if self.fallback:
            if isinstance(device_id, numbers.Integral) and not isinstance(device_id, bool) and device_id == 0:
                return
            raise DeviceError(f"device_id {device_id!r}: fallback mode has only device 0 (the host)")
        device.set_device(device_id)

    # -- raw buffers --
    def allocate_memory(self, size: int, device_id: int | None = None) -> int:
        """Allocate `size` bytes (>= 1) on `device_id` (default: current; the host in fallback
        mode); returns its address, the handle free_memory() and the copies take."""
        size = check_int(size, "size", 1)
        if self.fallback:
            if device_id not in (None, 0):
                raise DeviceError(f"device_id {device_id!r}: no GPU is usable (fallback mode)")
            buf = np.empty(size, np.uint8)
            ptr = int(buf.ctypes.data)
            c = self._host_counts
            c["allocated"] += size
            c["allocations"] += 1
            c["peak"] = max(c["peak"], c["allocated"])
        else:
            from ...backends import get_backend
            buf = get_backend("cuda", device=device_id).empty((size,), "uint8")
            ptr = int(buf.data.ptr)
        self._allocations[ptr] = (buf, device_id)
        return ptr

    def _buffer(self, ptr, name: str = "device_ptr"):
        entry = self._allocations.get(ptr) if isinstance(ptr, int) else None
        if entry is None:
            raise ValueError(f"{name} {ptr!r} is not a live allocation of this backend (allocate_memory())")
        return entry[0]

    def free_memory(self, ptr: int, device_id: int | None = None) -> None:
        """Release an allocation (ValueError naming `ptr` when it is not live: a double free)."""
        buf = self._buffer(ptr, "ptr")
        if self.fallback:
            self._host_counts["allocated"] -= buf.nbytes
            self._host_counts["frees"] += 1
        del self._allocations[ptr]

    @staticmethod
    def _host_bytes(host_data, name: str, writable: bool = False) -> np.ndarray:
        if not isinstance(host_data, np.ndarray):
            raise TypeError(f"{name} must be a NumPy array (got {type(host_data).__name__})")
        if not host_data.flags.c_contiguous or (writable and not host_data.flags.writeable):
            raise ValueError(f"{name} must be a C-contiguous{' writable' if writable else ''} array")
        return host_data.reshape(-1).view(np.uint8)

    def _timed(self, fn) -> float:
        """Milliseconds fn() took: CUDA events on the current stream, or the host clock in fallback mode."""
        if self.fallback:
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1e3
        from ...runtime import _cupy
        cp = _cupy.cupy()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(cp.cuda.get_elapsed_time(start, end))

    def _check_fits(self, src, dst, buf_name: str, host_name: str):
        if src.nbytes > dst.nbytes:
            raise ValueError(f"{host_name} has {src.nbytes} bytes but the allocation at {buf_name} holds "
                             f"{dst.nbytes}")

    def copy_to_device(self, host_data: np.ndarray, device_ptr: int) -> float:
        """Copy host_data's bytes to the start of the allocation `device_ptr`; returns the
        milliseconds it took (synchronous). ValueError when they do not fit."""
        buf = self._buffer(device_ptr)
        src = self._host_bytes(host_data, "host_data")
        self._check_fits(src, buf, "device_ptr", "host_data")
        if self.fallback:
            return self._timed(lambda: np.copyto(buf[:src.size], src))
        with profiler._transfer("HtoD", src.nbytes, None):
            return self._timed(lambda: buf[:src.size].set(src))

    def copy_from_device(self, device_ptr: int, host_data: np.ndarray) -> float:
        """Fill host_data with the first host_data.nbytes bytes of allocation `device_ptr`;
        returns the milliseconds it took. ValueError when they do not fit."""
        buf = self._buffer(device_ptr)
        dst = self._host_bytes(host_data, "host_data", writable=True)
        self._check_fits(dst, buf, "device_ptr", "host_data")
        if self.fallback:
            return self._timed(lambda: np.copyto(dst, buf[:dst.size]))
        with profiler._transfer("DtoH", dst.nbytes, None):
            return self._timed(lambda: buf[:dst.size].get(out=dst))

    # -- kernels --
    def compile_kernel(self, kernel_name: str, source_code: str) -> CudaKernel:
        """Compile CUDA C++ `source_code` with NVRTC for the current GPU and keep it as
        `kernel_name`. A plain source's kernel is the `extern "C"` function named kernel_name; a
        source from the kernel generator names its own (a template instance). Its launches are
        recorded under kernel_name (get_performance_stats' kernel_execution_times). Raises CompileError
        (a RuntimeError) with the compiler log, BackendUnavailableError in fallback mode."""
        if not isinstance(kernel_name, str) or not kernel_name:
            raise TypeError(f"kernel_name must be a non-empty str (got {kernel_name!r})")
        if not isinstance(source_code, str):
            raise TypeError(f"source_code must be a str (got {type(source_code).__name__})")
        require_cuda("compile_kernel")
        entry = getattr(source_code, "entry", kernel_name)
        k = compiler.compile(str(source_code), entry, name_expressions=getattr(source_code, "name_expressions", ()),
                             source_name=f"{kernel_name}.cu")
        k.name = kernel_name   # (its launches recorded, and get_performance_stats keyed, by the name the seed gives)
        kernel = CudaKernel(kernel_name, k, str(source_code), getattr(source_code, "block_size", None),
                            getattr(source_code, "check_args", None))
        self._kernels[kernel_name] = kernel
        return kernel

    def launch_kernel(self, kernel_name: str, grid_size: tuple, *args, block_size=None) -> float:
        """Launch compiled kernel `kernel_name` on `grid_size` blocks of `block_size` threads
        (default: the block its generator names, else 256) with `args` (CuPy arrays, NumPy
        scalars); returns its milliseconds (waits for it). A generated kernel's arguments are
        checked against its sizes first (ShapeError / DTypeError naming the argument)."""
        kernel = self._kernels.get(kernel_name)
        if kernel is None:
            raise ValueError(f"kernel_name {kernel_name!r} was not compiled; compiled: "
                             f"{', '.join(self._kernels) or 'none'}")
        block = block_size or kernel.block_size or (256,)
        if kernel.check_args is not None:
            args = kernel.check_args(args, grid_size, block)
        return self._timed(lambda: kernel.kernel.launch(grid_size, block, args))

    # -- statistics --
    def get_performance_stats(self) -> dict:
        """{"kernel_execution_times": {kernel: {average_ms, total_ms, min_ms, max_ms,
        total_executions}}, "memory_transfer_times": {"HtoD"/"DtoH": {average_ms, total_ms,
        total_transfers, total_bytes, gb_per_s}}, "memory_usage": {device id: its pool's statistics
        (cudakit.memory.stats(...).as_dict(): allocated, reserved, peak_allocated, free, total, ...)
        of the current GPU and of every GPU cudakit has allocated on (no other GPU is touched)},
        "profiling_enabled", "fallback_mode", "devices"}: every cudakit launch and transfer since
        profiling began (waits for them); memory_usage is {} in fallback mode."""
        kernels: dict = {}
        transfers: dict = {}
        prof = _PROFILE.profile if self._recording else None
        if prof is not None:
            for r in prof.resolve():
                group = kernels if r.kind == "kernel" else transfers
                g = group.setdefault(r.name, [])
                g.append(r)
        stats = {"kernel_execution_times": {k: _timing(v, "total_executions") for k, v in kernels.items()},
                 "memory_transfer_times": {k: _timing(v, "total_transfers") for k, v in transfers.items()},
                 "memory_usage": {} if self.fallback else {d: memory.stats(d).as_dict() for d in sorted(
                     {device.current_device(), *memory.devices_in_use()})},
                 "profiling_enabled": self.enable_profiling, "fallback_mode": self.fallback,
                 "devices": [asdict(d) for d in self.devices]}
        for name, recs in transfers.items():
            t = stats["memory_transfer_times"][name]
            t["total_bytes"] = sum(r.nbytes for r in recs)
            t["gb_per_s"] = t["total_bytes"] / (t["total_ms"] * 1e6) if t["total_ms"] else None
        return stats

    def export_performance_report(self, filename: str = "cuda_report.json") -> Path:
        """Write get_performance_stats() as JSON to `filename` (atomically); returns its path."""
        if not isinstance(filename, (str, os.PathLike)):
            raise TypeError(f"filename must be a str or a path (got {type(filename).__name__})")
        path = Path(filename)
        data = json.dumps(self.get_performance_stats(), indent=1, default=list)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:   # (filename a folder, say: no temporary file left beside it)
            os.unlink(tmp)
            raise
        return path


def _timing(records: list, count_key: str) -> dict:
    ms = [r.duration_ms or 0.0 for r in records]
    return {"average_ms": sum(ms) / len(ms), "total_ms": sum(ms), "min_ms": min(ms), "max_ms": max(ms),
            count_key: len(ms)}


_backend: CudaBackend | None = None
_lock = threading.Lock()


def get_cuda_backend(enable_profiling: bool = False) -> CudaBackend:
    """The process's CudaBackend (created on first call); enable_profiling=True turns its
    profiling on (it stays on until backend.set_profiling(False))."""
    global _backend
    check_bool(enable_profiling, "enable_profiling")
    with _lock:
        if _backend is None:
            _backend = CudaBackend(enable_profiling)
        elif enable_profiling:
            _backend.set_profiling(True)
        return _backend


__all__ = ["CudaDataType", "CudaDeviceInfo", "CudaKernel", "CudaBackend", "get_cuda_backend"]
