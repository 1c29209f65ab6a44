"""Genesis's CUDA storage and memory pool (seed 002's backends/cuda.py and cuda_memory.py) on
cudakit's pool: blocks are CuPy arrays, never raw pointers, and statistics are cudakit's."""
from __future__ import annotations

import threading

from .._common import check_int
from . import cuda as _cuda_mod


class CUDAStorage:
    """An uninitialised array of `shape` and `dtype` on GPU `device_id` (Genesis's CUDAStorage).

    The memory comes from cudakit's pool when the object is made (no torch involved). `data` is
    the CuPy array, `data_ptr` its device address. Raises RuntimeError (BackendUnavailableError)
    without CUDA, DeviceError naming a device_id that does not exist.
    """

    def __init__(self, shape, dtype, device_id: int = 0):
        from ...backends import get_backend
        self.device_id = check_int(device_id, "device_id")
        self.shape = tuple(shape)
        self.dtype = dtype
        _cuda_mod._cuda("CUDAStorage")
        self.data = get_backend("cuda", device=self.device_id).empty(self.shape, dtype)

    @property
    def data_ptr(self) -> int:
        """The device address of the first element."""
        return int(self.data.data.ptr)

    @property
    def nbytes(self) -> int:
        """The storage's size in bytes."""
        return int(self.data.nbytes)


class CUDAMemoryPool:
    """Genesis's pool interface over cudakit's (get_instance(); allocate(size); deallocate(block)).

    allocate() returns a CuPy uint8 array of `size` bytes, kept alive by the pool until
    deallocate(block) (the array, or its device address) hands it back; its memory returns to
    cudakit's pool once no array refers to it. The statistics are cudakit.memory.stats()'s, in bytes.
    """

    _instance = None
    _instance_lock = threading.Lock()

    def __init__(self, device_id: int | None = None):
        self.device_id = device_id
        self._live: dict[int, object] = {}

    @classmethod
    def get_instance(cls) -> "CUDAMemoryPool":
        """The process's pool (the current device's statistics)."""
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def allocate(self, size: int):
        """A CuPy uint8 array of `size` bytes (>= 1) from cudakit's pool."""
        from ...backends import get_backend
        size = check_int(size, "size", 1)
        _cuda_mod._cuda("CUDAMemoryPool.allocate")
        block = get_backend("cuda", device=self.device_id).empty((size,), "uint8")
        self._live[int(block.data.ptr)] = block
        return block

    def deallocate(self, ptr) -> None:
        """Hand back a block allocate() returned (the array or its address). ValueError naming
        `ptr` when it is not a live block of this pool."""
        key = int(ptr.data.ptr) if hasattr(ptr, "data") and hasattr(ptr.data, "ptr") else ptr
        if self._live.pop(key, None) is None:
            raise ValueError(f"ptr {ptr!r} is not a live block of this pool (double free, or another pool's)")

    def _stats(self):
        return _cuda_mod.memory_stats(self.device_id)

    @property
    def allocated_bytes(self) -> int:
        """Bytes in live arrays (cudakit's count)."""
        return self._stats().allocated

    @property
    def cached_bytes(self) -> int:
        """Bytes in cached free blocks (reserved - allocated)."""
        return self._stats().cached

    @property
    def reserved_bytes(self) -> int:
        """Bytes the pool holds from the driver."""
        return self._stats().reserved

    @property
    def free_bytes(self) -> int:
        """The device's free memory as the driver reports it."""
        return self._stats().free

    @property
    def fragmentation_ratio(self) -> float:
        """(reserved - allocated) / reserved, in [0, 1]."""
        return self._stats().fragmentation

    @property
    def peak_allocated_bytes(self) -> int:
        """The highest allocated_bytes so far."""
        return self._stats().peak_allocated


def get_memory_stats() -> dict:
    """Detailed memory usage statistics of the current GPU: allocated, cached, reserved, free,
    peak_allocated (bytes) and fragmentation (the share of reserved bytes not in live arrays)."""
    s = CUDAMemoryPool.get_instance()._stats()
    return {"allocated": s.allocated, "cached": s.cached, "reserved": s.reserved, "free": s.free,
            "fragmentation": s.fragmentation, "peak_allocated": s.peak_allocated}
