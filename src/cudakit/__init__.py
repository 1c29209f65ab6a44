"""cudakit: a CUDA backend for Python numerical and deep-learning code, with a NumPy fallback.

`import cudakit` does no CUDA work and imports neither CuPy, Triton nor PyTorch; they load on
first use. See README.md for a tour.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import (BackendUnavailableError, CompileError, CudakitError, DeviceError, DTypeError,
                     LaunchError, OutOfMemoryError, ShapeError)
from .runtime.device import (DeviceInfo, current_device, device, device_count, devices, get_device_info,
                             is_available, set_device, synchronize, unavailable_reason)
from .runtime import memory
from .runtime.memory import memory_info, empty_cache, to_device, to_host, pinned_empty
from .runtime.launch import LaunchConfig, launch_config, check
from .runtime.compiler import Kernel, Module, compile, compile_module, load_module
from .runtime.numba import numba_kernel
from .runtime.triton import Config as TritonConfig, TritonKernel, autotune, cdiv, triton_kernel
from .backends import Backend, get_backend
from .profiler import profile
from .ops import add, mul, relu, relu_backward

__all__ = [
    "__version__", "BackendUnavailableError", "CompileError", "CudakitError", "DeviceError",
    "DTypeError", "LaunchError", "OutOfMemoryError", "ShapeError", "DeviceInfo", "current_device",
    "device", "device_count", "devices", "get_device_info", "is_available", "set_device",
    "synchronize", "unavailable_reason", "memory", "memory_info", "empty_cache", "to_device",
    "to_host", "pinned_empty", "LaunchConfig", "launch_config", "check", "Kernel", "Module",
    "compile", "compile_module", "load_module", "numba_kernel", "TritonConfig", "TritonKernel", "autotune",
    "cdiv", "triton_kernel", "Backend", "get_backend", "profile",
    "add", "mul", "relu", "relu_backward",
]
