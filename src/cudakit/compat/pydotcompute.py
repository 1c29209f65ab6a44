"""pydotcompute's CUDA backend (seed 001, `pydotcompute.backends.cuda`) on cudakit.

    from cudakit.compat.pydotcompute import CUDABackend

CUDABackend raises RuntimeError (cudakit's BackendUnavailableError) without CUDA, as documented;
CPUBackend is the fallback the seed names, on cudakit's CPU backend. Kernels compile with Numba
through cudakit.numba_kernel (the `numba` extra) and launch on the backend's GPU; arrays are CuPy
arrays. Differences from the seed: docs/compat.md.
"""
from __future__ import annotations

import abc
import numbers
from typing import Any, Callable

import numpy as np

from ..errors import ArgumentTypeError, DTypeError, ShapeError
from ._common import check_bool, check_int, numeric_dtype, require_cuda


def _shape(shape, name: str = "shape") -> tuple[int, ...]:
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise ShapeError(f"{name} must be a tuple of ints >= 0 (got {shape!r})") from None
    if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise ShapeError(f"{name} must be a tuple of ints >= 0 (got {shape!r})")
    return tuple(int(d) for d in dims)


def _host_data(data, name: str = "data"):
    """data unless it is None, a string or something NumPy makes an array of objects of (a dict,
    say): arrays, memoryviews, ranges and sequences of numbers pass."""
    if data is None or isinstance(data, (str, bytes)):
        raise ArgumentTypeError(f"{name} must be an array (got {type(data).__name__})")
    if not (hasattr(data, "__cuda_array_interface__") or hasattr(data, "__array_interface__")):
        try:
            kind = np.asarray(data).dtype.kind
        except (TypeError, ValueError):
            kind = "O"
        if kind == "O":
            raise ArgumentTypeError(f"{name} must be an array (got {type(data).__name__})")
    return data


class Backend(abc.ABC):
    """A compute backend: where arrays live and how they get there (pydotcompute's base class)."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The backend's name."""

    @property
    @abc.abstractmethod
    def is_available(self) -> bool:
        """Whether the backend can run here."""

    def _backend(self):
        """The cudakit Backend the arrays of this one live on."""
        raise NotImplementedError

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype = np.float32) -> Any:
        """An uninitialised array of `shape` (ints >= 0) and `dtype` on this backend. Raises
        ShapeError / DTypeError naming the argument."""
        return self._backend().empty(_shape(shape), numeric_dtype(dtype, "dtype"))

    def to_device(self, data: np.ndarray) -> Any:
        """A copy of host array `data` on this backend's device."""
        return self._backend().to_device(_host_data(data))

    def to_host(self, data: Any) -> np.ndarray:
        """A NumPy copy of `data`."""
        return self._backend().to_host(_host_data(data))

    def synchronize(self) -> None:
        """Wait for all queued work to complete."""
        self._backend().synchronize()


class CPUBackend(Backend):
    """The fallback where CUDA is unavailable: NumPy arrays through cudakit's CPU backend."""

    @property
    def name(self) -> str:
        """Returns 'cpu'."""
        return "cpu"

    @classmethod
    def check_available(cls) -> bool:
        """Always True: the CPU backend runs anywhere (CUDABackend.check_available's counterpart,
        so code may ask either class)."""
        return True

    @property
    def is_available(self) -> bool:
        """Always True."""
        return True

    def _backend(self):
        from ..backends import get_backend
        return get_backend("cpu")

    # CUDABackend's device calls, so that code written for it (`backend = CUDABackend() if
    # CUDABackend.check_available() else CPUBackend()`) runs on the fallback too
    @property
    def device_id(self) -> int:
        """-1: no GPU (the host)."""
        return -1

    @property
    def device_name(self) -> str:
        """'cpu'."""
        return "cpu"

    @property
    def compute_capability(self) -> tuple[int, int]:
        """(0, 0): no GPU."""
        return (0, 0)

    def get_memory_info(self) -> tuple[int, int]:
        """(free_bytes, total_bytes) of the host's memory (available and physical pages), where the
        fallback's arrays live; (0, 0) where the system does not say."""
        import os
        try:
            page = os.sysconf("SC_PAGE_SIZE")
            return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page
        except (ValueError, OSError, AttributeError):
            return (0, 0)

    def compile_kernel(self, func: Callable, signature: tuple[type, ...]) -> Callable:
        """CUDA kernels need a GPU: raises BackendUnavailableError (a RuntimeError)."""
        raise _no_kernels("compile_kernel")

    def launch_kernel(self, kernel: Callable, grid: tuple[int, ...], block: tuple[int, ...], *args: Any) -> None:
        """CUDA kernels need a GPU: raises BackendUnavailableError (a RuntimeError)."""
        raise _no_kernels("launch_kernel")


def _no_kernels(op: str):
    from ..errors import BackendUnavailableError
    return BackendUnavailableError(f"CPUBackend.{op}: CUDA kernels run on a GPU, and this is the CPU fallback; "
                                   f"write the CPU path with NumPy, or run where CUDABackend.check_available()")


class CUDABackend(Backend):
    """NVIDIA CUDA compute backend: CuPy arrays on GPU `device_id`, Numba kernels.

    device_id: GPU to use (an index of cudakit.devices()); enable_caching: keep compiled kernels
    (in this object, and on disk through Numba's cache for functions defined in files).
    Raises RuntimeError (BackendUnavailableError, with the reason) when CUDA is not available,
    DeviceError (a ValueError) for a device_id that does not exist.
    """

    def __init__(self, *, device_id: int = 0, enable_caching: bool = True) -> None:
        check_int(device_id, "device_id")
        self._enable_caching = check_bool(enable_caching, "enable_caching")
        require_cuda("CUDABackend")
        from ..backends import get_backend
        self._cuda = get_backend("cuda", device=device_id)
        self._device_id = int(device_id)
        self._kernels: dict = {}

    def _backend(self):
        return self._cuda

    @classmethod
    def check_available(cls) -> bool:
        """True if CUDA is available (CuPy imports and a GPU is visible)."""
        from ..runtime import device
        return device.is_available()

    @property
    def name(self) -> str:
        """Returns 'cuda'."""
        return "cuda"

    @property
    def is_available(self) -> bool:
        """Whether CUDA is available."""
        return self.check_available()

    @property
    def device_id(self) -> int:
        """Current GPU device ID."""
        return self._device_id

    @property
    def device_name(self) -> str:
        """Name of the current GPU."""
        from ..runtime import device
        return device.get_device_info(self._device_id).name

    @property
    def compute_capability(self) -> tuple[int, int]:
        """GPU compute capability (major, minor)."""
        from ..runtime import device
        return device.get_device_info(self._device_id).compute_capability

    def synchronize(self) -> None:
        """Wait for all GPU operations on this backend's device to complete (every stream's, as
        cudakit.synchronize(device_id)); raises the error a kernel recorded there since the last check."""
        from ..runtime import device
        device.synchronize(self._device_id)

    def compile_kernel(self, func: Callable, signature: tuple[type, ...]) -> Callable:
        """Compile Python function `func` as a CUDA kernel with Numba for the argument types
        `signature` (NumPy scalar types such as np.float32, Numba types such as float32[:], or a
        Numba signature string). Returns a kernel for launch_kernel() (also `kernel[grid, block](*args)`).
        Cached per (func, signature) when enable_caching. Raises BackendUnavailableError without
        the `numba` extra, DTypeError naming signature[i] for a type Numba cannot take.
        """
        from ..runtime.numba import _numba_cuda, numba_kernel
        _numba_cuda()
        key = (func, signature if isinstance(signature, str) else tuple(signature))
        if self._enable_caching and key in self._kernels:
            return self._kernels[key]
        from ..runtime import device
        with device.device(self._device_id):
            kernel = numba_kernel(func, _numba_signature(signature), cache=self._enable_caching)
        if self._enable_caching:
            self._kernels[key] = kernel
        return kernel

    def get_memory_info(self) -> tuple[int, int]:
        """(free_bytes, total_bytes) of this backend's GPU, as the driver reports them."""
        from ..runtime import memory
        return memory.memory_info(self._device_id)

    def launch_kernel(self, kernel: Callable, grid: tuple[int, ...], block: tuple[int, ...], *args: Any) -> None:
        """Launch `kernel` on this backend's GPU with `grid` blocks of `block` threads (ints or
        tuples of up to 3) and `args` (CuPy arrays and scalars). `kernel`: what compile_kernel
        returned, a @numba.cuda.jit function, or a cudakit Kernel. Asynchronous: synchronize()
        waits for it. Raises LaunchError naming the grid or block over the device's limits,
        TypeError naming `kernel` when it is none of these."""
        from ..runtime import device
        k = _as_kernel(kernel)
        with device.device(self._device_id):
            k.launch(grid, block, args)


def _numba_signature(signature):
    """pydotcompute's signature (a tuple of NumPy or Numba types, or a Numba string) as Numba's."""
    if isinstance(signature, str):
        return signature
    import numba
    out = []
    for i, t in enumerate(signature):
        if isinstance(t, numba.core.types.Type):
            out.append(t)
            continue
        try:
            dt = np.dtype(t)
            if dt.kind not in "biufc":   # object, strings, ...: Numba would type them as a Python object
                raise TypeError(dt)
            out.append(numba.from_dtype(dt))
        except (TypeError, NotImplementedError, numba.core.errors.NumbaError):
            raise DTypeError(f"signature[{i}]: {t!r} is neither a numeric NumPy type nor a Numba type") from None
    # a kernel's signature: void(arg types). A bare tuple would be read by numba-cuda's jit as a list
    # of signatures (seen on the H100 image: the argument was then typed as a Python object)
    return numba.void(*out)


def _as_kernel(kernel):
    """A kernel with cudakit's launch(grid, block, args) from what launch_kernel() accepts."""
    if type(kernel).__module__.startswith("numba"):   # a @cuda.jit dispatcher
        from ..runtime.numba import NumbaKernel
        return NumbaKernel(kernel, getattr(getattr(kernel, "py_func", None), "__name__", "kernel"))
    if hasattr(kernel, "launch"):   # cudakit's Kernel, NumbaKernel, ...
        return kernel
    raise TypeError(f"kernel must be a compiled kernel (compile_kernel(), @numba.cuda.jit or a cudakit Kernel); "
                    f"got {type(kernel).__name__}")


__all__ = ["Backend", "CPUBackend", "CUDABackend"]
