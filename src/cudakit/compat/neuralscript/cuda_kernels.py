"""NeuralScript's kernel generator (seed 004, `compiler.backend.cuda_kernels`) on cudakit.

generate_matrix_multiply_kernel() returns real CUDA C++: a template over the element type, its
accumulator and the tile size (shared-memory tiles of TILE x TILE, one thread per output
element), for CudaBackend.compile_kernel() to compile with NVRTC and launch_kernel() to run.
It exists for code that wants the source; cudakit.matmul (cuBLAS) is what CudaMath.matrix_multiply
runs, and is faster.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import DTypeError, ShapeError
from ...runtime.launch import _dim3, launch_config
from .._common import check_bool, check_int, process_instance
from .cuda_backend import CudaDataType

# the element types a generated matmul takes, with the C++ type of the element and its accumulator
_CTYPES = {CudaDataType.FLOAT32: ("float", "float"), CudaDataType.FLOAT64: ("double", "double")}
TILE_SIZES = (8, 16, 32)   # TILE x TILE threads a block: at most 1024
NAIVE_BLOCK = 16

MATMUL_SOURCE = r"""
// C (M x N) = A (M x K) @ B (K x N), row-major, one thread per element of C.
// Tiled: each block stages TILE x TILE tiles of A and B in shared memory (TILE + 1 columns for B's
// tile: no bank conflicts when a column is read) and accumulates in Acc.
template <typename T, typename Acc, int TILE>
__global__ void __launch_bounds__(TILE * TILE)
ns_matmul_tiled(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K) {
    __shared__ Acc As[TILE][TILE];
    __shared__ Acc Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long row = (long long)blockIdx.y * TILE + ty;
    const long long col = (long long)blockIdx.x * TILE + tx;
    Acc acc = Acc(0);
    for (int t = 0; t < K; t += TILE) {
        As[ty][tx] = (row < M && t + tx < K) ? Acc(A[row * K + t + tx]) : Acc(0);
        Bs[ty][tx] = (t + ty < K && col < N) ? Acc(B[(long long)(t + ty) * N + col]) : Acc(0);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = T(acc);
}

// The untiled form: each thread reads its row of A and column of B from global memory.
template <typename T, typename Acc>
__global__ void ns_matmul_naive(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                int M, int N, int K) {
    const long long row = (long long)blockIdx.y * blockDim.y + threadIdx.y;
    const long long col = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    Acc acc = Acc(0);
    for (int k = 0; k < K; ++k) acc += Acc(A[row * K + k]) * Acc(B[(long long)k * N + col]);
    C[row * N + col] = T(acc);
}
"""


class GeneratedKernel(str):
    """CUDA C++ source (a str) with what compiling and launching it needs: `entry` (the template
    instance to compile, also in `name_expressions`), `block_size`, `dtype`, `tile_size` (None
    for the untiled form), and check_args(), which validates a launch's (A, B, C, M, N, K)."""

    entry: str
    name_expressions: tuple
    block_size: tuple
    dtype: CudaDataType
    tile_size: int | None

    def __new__(cls, source: str, entry: str, block_size: tuple, dtype: CudaDataType, tile_size):
        s = super().__new__(cls, source)
        s.entry, s.name_expressions, s.block_size = entry, (entry,), block_size
        s.dtype, s.tile_size = dtype, tile_size
        return s

    def grid_size(self, m: int, n: int) -> tuple:
        """The grid that covers an M x N result with this kernel's blocks."""
        bx, by = self.block_size[0], self.block_size[1]
        return (max(1, math.ceil(n / bx)), max(1, math.ceil(m / by)), 1)

    def check_args(self, args: tuple, grid, block) -> tuple:
        """(A, B, C, M, N, K) checked before a launch: A, B, C CuPy arrays of the kernel's dtype,
        C-contiguous, holding at least M*K, K*N and M*N elements; M, N, K ints in [1, 2^31); the
        grid and block covering C with the kernel's block. Returns the arguments with M, N, K as
        int32. Raises ShapeError / DTypeError naming the argument."""
        if len(args) != 6:
            raise ShapeError(f"args: the matmul kernel takes (A, B, C, M, N, K) (got {len(args)} arguments)")
        a, b, c, m, n, k = args
        dims = {}
        for name, v in (("M", m), ("N", n), ("K", k)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= int(v) < 2**31:
                raise ShapeError(f"{name} must be an int in [1, 2**31) (got {v!r})")
            dims[name] = int(v)
        need = {"A": dims["M"] * dims["K"], "B": dims["K"] * dims["N"], "C": dims["M"] * dims["N"]}
        for name, arr in (("A", a), ("B", b), ("C", c)):
            if not hasattr(arr, "__cuda_array_interface__"):
                raise TypeError(f"{name} must be a CuPy array (got {type(arr).__name__})")
            if np.dtype(arr.dtype) != self.dtype.numpy:
                raise DTypeError(f"{name} must be {self.dtype.value} (got {arr.dtype})")
            if not arr.flags.c_contiguous or arr.size < need[name]:
                raise ShapeError(f"{name} must be C-contiguous with at least {need[name]} elements "
                                 f"(got shape {tuple(arr.shape)})")
        b3, g = _dim3(block, "block_size"), _dim3(grid, "grid_size")
        if b3[:2] != tuple(self.block_size[:2]):
            raise ShapeError(f"block_size must be {self.block_size} for this kernel (got {tuple(block)})")
        want = self.grid_size(dims["M"], dims["N"])
        if g[0] < want[0] or g[1] < want[1]:
            raise ShapeError(f"grid_size {tuple(grid)} does not cover the {dims['M']} x {dims['N']} result "
                             f"(needs at least {want[:2]})")
        return a, b, c, np.int32(dims["M"]), np.int32(dims["N"]), np.int32(dims["K"])


class CudaKernelGenerator:
    """CUDA C++ source for NeuralScript's kernels, and their launch geometry."""

    def generate_matrix_multiply_kernel(self, dtype: CudaDataType = CudaDataType.FLOAT32, use_tiled: bool = True,
                                        tile_size: int = 32) -> GeneratedKernel:
        """A matmul kernel for `dtype` (FLOAT32 or FLOAT64): tiled with tile_size x tile_size
        shared-memory tiles (tile_size 8, 16 or 32; the block is tile_size x tile_size threads),
        or untiled (16 x 16 blocks). DTypeError / ValueError naming the argument."""
        if not isinstance(dtype, CudaDataType) or dtype not in _CTYPES:
            raise DTypeError(f"dtype must be one of {', '.join('CudaDataType.' + d.name for d in _CTYPES)} "
                             f"(got {dtype!r}); cudakit.matmul covers float16 and bfloat16")
        use_tiled = check_bool(use_tiled, "use_tiled")
        t, acc = _CTYPES[dtype]
        if use_tiled:
            tile = check_int(tile_size, "tile_size", 1)
            if tile not in TILE_SIZES:
                raise ValueError(f"tile_size must be one of {TILE_SIZES} (got {tile})")
            return GeneratedKernel(MATMUL_SOURCE, f"ns_matmul_tiled<{t}, {acc}, {tile}>", (tile, tile, 1), dtype, tile)
        return GeneratedKernel(MATMUL_SOURCE, f"ns_matmul_naive<{t}, {acc}>", (NAIVE_BLOCK, NAIVE_BLOCK, 1), dtype,
                               None)

    def optimize_kernel_parameters(self, kernel_type: str, problem_size, tile_size: int = 32) -> tuple:
        """(block_size, grid_size) as 3-tuples for `kernel_type`:
        "matrix_multiply" with problem_size (M, N, K): tile_size x tile_size blocks covering M x N
        (what the tiled kernel needs; not measured or tuned);
        "vector_add" / "elementwise" with problem_size n (or (n,)): 256-thread blocks, one thread an element.
        ValueError naming kernel_type or problem_size otherwise."""
        if kernel_type == "matrix_multiply":
            if not (isinstance(problem_size, (tuple, list)) and len(problem_size) == 3):
                raise ValueError(f"problem_size must be (M, N, K) for matrix_multiply (got {problem_size!r})")
            m, n, _k = (check_int(v, f"problem_size[{i}]", 1) for i, v in enumerate(problem_size))
            tile = check_int(tile_size, "tile_size", 1)
            if tile not in TILE_SIZES:
                raise ValueError(f"tile_size must be one of {TILE_SIZES} (got {tile})")
            return (tile, tile, 1), (math.ceil(n / tile), math.ceil(m / tile), 1)
        if kernel_type in ("vector_add", "elementwise"):
            n = problem_size[0] if isinstance(problem_size, (tuple, list)) and len(problem_size) == 1 else problem_size
            grid, block = launch_config(check_int(n, "problem_size", 0))
            return (block, 1, 1), (grid, 1, 1)
        raise ValueError(f"kernel_type must be 'matrix_multiply', 'vector_add' or 'elementwise' (got {kernel_type!r})")


get_kernel_generator = process_instance(CudaKernelGenerator, "The process's CudaKernelGenerator.")


__all__ = ["CudaKernelGenerator", "GeneratedKernel", "get_kernel_generator", "CudaDataType", "MATMUL_SOURCE",
           "TILE_SIZES"]
