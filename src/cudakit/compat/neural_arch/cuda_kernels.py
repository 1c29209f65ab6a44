"""neural_arch's CUDA kernel manager (seed 003, `neural_arch.backends.cuda_kernels`) on cudakit.

Each of the manager's kernels is a cudakit op (compiled by cudakit at its first call and cached
on disk); `compiled_kernels` names those that have run in this process.
"""
from __future__ import annotations

from ... import ops
from .._common import process_instance


class CUDAKernelManager:
    """GELU, fused linear + GELU, layer normalisation and flash attention through cudakit's kernels.

    Arrays are CuPy arrays (NumPy arrays run on cudakit's CPU backend); float16, bfloat16,
    float32 and float64. Shapes and errors are cudakit's ops' (ShapeError / DTypeError naming
    the argument).
    """

    def __init__(self):
        self.compiled_kernels: dict[str, object] = {}

    def is_available(self) -> bool:
        """True when CUDA is usable here (CuPy and a visible GPU)."""
        from ...runtime import device
        return device.is_available()

    def _ran(self, name, fn):
        self.compiled_kernels.setdefault(name, fn)

    def gelu_forward(self, x):
        """GELU, tanh form, of any-shaped x (cudakit.gelu)."""
        y = ops.gelu(x)
        self._ran("gelu_forward", ops.gelu)
        return y

    def gelu_backward(self, grad_output, x):
        """grad_output * gelu'(x), tanh form (cudakit.gelu_backward)."""
        g = ops.gelu_backward(grad_output, x)
        self._ran("gelu_backward", ops.gelu_backward)
        return g

    def fused_linear_gelu(self, x, weight, bias=None):
        """gelu(x @ weight^T + bias): x (..., in), weight (out, in), bias (out,) (cudakit.fused_linear_gelu)."""
        y = ops.fused_linear_gelu(x, weight, bias)
        self._ran("fused_linear_gelu", ops.fused_linear_gelu)
        return y

    def layernorm(self, x, weight=None, bias=None, eps: float = 1e-5):
        """Layer normalisation over the last dimension (cudakit.layernorm)."""
        y = ops.layernorm(x, weight, bias, eps)
        self._ran("layernorm", ops.layernorm)
        return y

    def flash_attention(self, q, k, v, scale=None, block_size: int = 64):
        """softmax(q k^T * scale) v over (..., L, D) arrays (cudakit.flash_attention)."""
        y = ops.flash_attention(q, k, v, scale, block_size)
        self._ran("flash_attention", ops.flash_attention)
        return y


get_cuda_kernel_manager = process_instance(
    CUDAKernelManager, "The process's CUDAKernelManager (created on first call; no CUDA work).")


__all__ = ["CUDAKernelManager", "get_cuda_kernel_manager"]
