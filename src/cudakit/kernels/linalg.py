"""Matrix products on the GPU: one strided-batched GEMM per call on the current CuPy stream,
transposes as GEMM operations instead of copies. Through cuBLASLt (kernels/cublaslt.py: plans
cached per case, a native call, safe to capture in a CUDA graph); through CuPy's cuBLAS binding
only where cuBLASLt is not loadable or has no algorithm for the case (logged once at INFO; CuPy
refuses that path during graph capture).

float16 and bfloat16 operands are multiplied on the tensor cores with float32 accumulation
(CUBLAS_COMPUTE_32F) and rounded once to the output's dtype, which may also be float32 (the
backward passes accumulate partial products that way); float32 uses CUBLAS_COMPUTE_32F (no TF32,
as PyTorch's default), float64 CUBLAS_COMPUTE_64F. FLOPs: 2 * batch * M * N * K.
"""
from __future__ import annotations

import numpy as np

from .. import profiler
from ..errors import ShapeError
from ..runtime import _cupy
from .cublaslt import COMPUTE_32F as _COMPUTE_32F
from .cublaslt import COMPUTE_64F as _COMPUTE_64F
from .cublaslt import CUDA_R as _CUDA_R
from . import cublaslt as _cublaslt
from .cublaslt import dgrad_gelu, linear_epilogue, wgrad_bias  # noqa: F401  (the backend's hooks: fused epilogues)

_OP_N, _OP_T = 0, 1                      # cublasOperation_t
_GEMM_DEFAULT = -1                       # cublasGemmAlgo_t: the heuristic's choice
_INT_MAX = 2**31 - 1                     # cuBLAS's int dimensions and leading dimensions


def _log_fallback(a, out) -> None:
    from .. import fallbacks   # logged once at INFO, listed by `cudakit info`
    fallbacks.note(f"cublas:{a.dtype}->{out.dtype}",
                   f"cuBLASLt did not take a {a.dtype} -> {out.dtype} product (not loadable, or no algorithm): "
                   f"CuPy's cuBLAS binding runs it (not capturable in a CUDA graph)")


def _dtype_name(a) -> str:
    from ..backends.base import supported_dtypes
    return supported_dtypes()[a.dtype]


def gemm(a, b, out, trans_a: bool = False, trans_b: bool = False, beta: float = 0.0):
    """out[i] = op(a[i]) @ op(b[i]) + beta * out[i] for each batch index i, row-major.

    a: (Ba, Ra, Ca), b: (Bb, Rb, Cb), out: (B, M, N), all C-contiguous, on one device; Ba and Bb
    are 1 (the one matrix is used for every i) or B. op(a) is a, or a's transpose when trans_a:
    (M, K); op(b) likewise (K, N). a and b share a dtype; out has it, or float32 for 16-bit a.
    """
    batch, m, n = out.shape
    k = a.shape[1] if trans_a else a.shape[2]
    if batch == 0 or m == 0 or n == 0:
        return out
    if k == 0:  # an empty sum: cuBLAS is not asked to define it
        if beta == 0.0:
            out.fill(0)
        else:
            out *= out.dtype.type(beta)
        return out
    for name, v in (("M", m), ("N", n), ("K", k), ("batch", batch)):
        if v > _INT_MAX:
            raise ShapeError(f"matrix product: {name} must be <= {_INT_MAX} for cuBLAS (got {v})")
    if _cublaslt.matmul(a, b, out, trans_a, trans_b, beta):   # sizes checked above
        return out
    _log_fallback(a, out)
    cp = _cupy.cupy()
    in_t = _CUDA_R[_dtype_name(a)]
    out_t = _CUDA_R[_dtype_name(out)]
    f64 = a.dtype == np.float64
    scal = np.float64 if f64 else np.float32
    alpha_h, beta_h = np.array([1.0], scal), np.array([beta], scal)
    # Row-major C = op(a) op(b) is column-major C^T = op(b)^T op(a)^T: b's buffer comes first. A
    # row-major (R, C) buffer read column-major is its transpose with leading dimension C.
    with cp.cuda.Device(out.data.device_id):
        from cupy_backends.cuda.libs import cublas
        handle = cp.cuda.device.get_cublas_handle()
        profiler.record_call(f"cublas_gemm[{_dtype_name(a)}]", lambda: cublas.gemmStridedBatchedEx(
            handle, _OP_T if trans_b else _OP_N, _OP_T if trans_a else _OP_N,
            n, m, k, alpha_h.ctypes.data,
            b.data.ptr, in_t, b.shape[2], b.shape[1] * b.shape[2] if b.shape[0] > 1 else 0,
            a.data.ptr, in_t, a.shape[2], a.shape[1] * a.shape[2] if a.shape[0] > 1 else 0,
            beta_h.ctypes.data, out.data.ptr, out_t, n, m * n, batch,
            _COMPUTE_64F if f64 else _COMPUTE_32F, _GEMM_DEFAULT))
    return out


def broadcast_copy(x, shape):
    """x broadcast to `shape` as a new C-contiguous array."""
    cp = _cupy.cupy()
    return cp.ascontiguousarray(cp.broadcast_to(x, shape))
