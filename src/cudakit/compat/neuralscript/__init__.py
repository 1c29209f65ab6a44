"""NeuralScript's CUDA backend (seed 004, `compiler.backend.cuda_*`) on cudakit.

Every documented name is here and in the submodule named like the seed's module:
cuda_backend (get_cuda_backend, CudaBackend), cuda_math (get_cuda_math, CudaMath, CudaTensor),
cuda_ml (get_cuda_ml, CudaML, ConvolutionConfig, ActivationType, OptimizerState), cuda_kernels
(get_kernel_generator) and performance (CudaPerformanceTester, TestConfiguration; the seed's
test_cuda_performance). Without a usable GPU everything runs in NeuralScript's fallback mode on
cudakit's CPU backend, said at INFO. Differences from the seed: docs/compat.md.
"""
from __future__ import annotations

from .cuda_backend import CudaBackend, CudaDataType, CudaDeviceInfo, CudaKernel, get_cuda_backend
from .cuda_kernels import CudaKernelGenerator, GeneratedKernel, get_kernel_generator
from .cuda_math import CudaMath, CudaTensor, get_cuda_math
from .cuda_ml import ActivationType, ConvolutionConfig, CudaML, OptimizerState, get_cuda_ml
from .performance import CudaPerformanceTester, TestConfiguration

__all__ = ["CudaBackend", "CudaDataType", "CudaDeviceInfo", "CudaKernel", "get_cuda_backend",
           "CudaKernelGenerator", "GeneratedKernel", "get_kernel_generator", "CudaMath", "CudaTensor",
           "get_cuda_math", "ActivationType", "ConvolutionConfig", "CudaML", "OptimizerState", "get_cuda_ml",
           "CudaPerformanceTester", "TestConfiguration"]
