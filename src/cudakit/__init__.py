"""cudakit: a CUDA backend for Python numerical and deep-learning code, with a NumPy fallback.

`import cudakit` does no CUDA work and imports neither CuPy, Triton nor PyTorch (nor NumPy):
every public name below is loaded on first use (PEP 562). See README.md for a tour.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

from .errors import (ArgumentError, ArgumentTypeError, BackendUnavailableError, CacheError,  # noqa: E402
                     CompileError, ConfigError, CudakitError, DeviceError, DistributedError, DTypeError,
                     LaunchError,
                     OutOfMemoryError, ShapeError, TargetIndexError)

# public name -> (module, attribute); attribute None means the module itself
_LAZY = {
    "memory": ("runtime.memory", None), "config": ("config", None), "profiler": ("profiler", None),
    "ops": ("ops", None), "backends": ("backends", None), "runtime": ("runtime", None),
    "kernels": ("kernels", None), "bench": ("bench", None), "distributed": ("distributed", None),
    "Backend": ("backends", "Backend"), "get_backend": ("backends", "get_backend"),
    "profile": ("profiler", "profile"),
    "LaunchConfig": ("runtime.launch", "LaunchConfig"), "launch_config": ("runtime.launch", "launch_config"),
    "check": ("runtime.launch", "check"),
    "Kernel": ("runtime.compiler", "Kernel"), "Module": ("runtime.compiler", "Module"),
    "compile": ("runtime.compiler", "compile"), "compile_module": ("runtime.compiler", "compile_module"),
    "load_module": ("runtime.compiler", "load_module"), "compile_ptx": ("runtime.compiler", "compile_ptx"),
    "numba_kernel": ("runtime.numba", "numba_kernel"),
    "TritonConfig": ("runtime.triton", "Config"), "TritonKernel": ("runtime.triton", "TritonKernel"),
    "autotune": ("runtime.triton", "autotune"), "cdiv": ("runtime.triton", "cdiv"),
    "triton_kernel": ("runtime.triton", "triton_kernel"),
    "float32_precision": ("config", "float32_precision"),
    "set_float32_precision": ("config", "set_float32_precision"),
    "optim": ("optim", None), "OptimizerState": ("optim", "OptimizerState"),
    "SGD": ("optim", "SGD"), "Adam": ("optim", "Adam"), "AdamW": ("optim", "AdamW"),
    "sgd_update": ("optim", "sgd_update"), "adam_update": ("optim", "adam_update"),
    "warm_up_kernels": ("kernels.warmup", "warm_up_kernels"),
    "clear_kernel_cache": ("runtime.compiler", "cache_clear"),
    "graphs": ("graphs", None), "graph": ("graphs", "graph"), "CUDAGraph": ("graphs", "CUDAGraph"),
    "GraphedStep": ("graphs", "GraphedStep"), "GraphCaptureError": ("graphs", "GraphCaptureError"),
}
for _n in ("DeviceInfo", "current_device", "device", "device_count", "devices", "get_device_info",
           "is_available", "set_device", "synchronize", "unavailable_reason"):
    _LAZY[_n] = ("runtime.device", _n)
for _n in ("memory_info", "empty_cache", "to_device", "to_host", "pinned_empty"):
    _LAZY[_n] = ("runtime.memory", _n)
for _n in ("add", "sub", "mul", "div", "relu", "relu_backward", "leaky_relu", "leaky_relu_backward", "sigmoid",
           "sigmoid_backward", "tanh", "tanh_backward", "silu", "silu_backward", "gelu", "gelu_backward",
           "activation", "layernorm", "layernorm_with_stats", "layernorm_backward",
           "rmsnorm", "rmsnorm_with_stats", "rmsnorm_backward", "batch_norm", "batch_norm_with_stats",
           "batch_norm_backward",
           "sum", "mean", "max", "min", "argmax", "argmin", "var", "reduce_sum", "sum_backward",
           "mean_backward", "var_backward", "max_backward", "min_backward",
           "softmax", "log_softmax", "softmax_backward", "log_softmax_backward", "cross_entropy",
           "cross_entropy_backward", "cross_entropy_with_grad",
           "transpose", "permute", "permute_backward", "matrix_transpose",
           "dropout", "dropout_backward", "dropout_mask",
           "matmul", "matrix_multiply", "matmul_backward", "linear", "linear_backward", "fused_linear_gelu",
           "fused_linear_gelu_with_preact", "fused_linear_gelu_backward",
           "attention", "attention_with_lse", "attention_backward", "flash_attention",
           "attention_varlen", "attention_varlen_with_lse", "attention_varlen_backward",
           "conv1d", "conv1d_backward", "conv2d", "conv2d_backward", "max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward"):
    _LAZY[_n] = ("ops", _n)


def __getattr__(name: str):
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'cudakit' has no attribute {name!r}")
    module = importlib.import_module(f".{target[0]}", __name__)
    value = module if target[1] is None else getattr(module, target[1])
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["__version__", "ArgumentError", "ArgumentTypeError", "CacheError", "ConfigError",
           "BackendUnavailableError", "CompileError", "CudakitError", "DeviceError", "DistributedError", "DTypeError",
           "LaunchError", "OutOfMemoryError", "ShapeError", "TargetIndexError"] + [n for n in _LAZY if n not in
                                                                 ("config", "profiler", "ops", "backends", "runtime",
                                                                  "kernels", "bench", "optim", "graphs",
                                                                  "distributed")]
