"""NeuralScript's CudaMath (seed 004, `compiler.backend.cuda_math`) on cudakit's ops.

A CudaTensor wraps the array of cudakit's backend (CuPy on a GPU, NumPy in fallback mode); every
operation is the cudakit op of that name (cudakit.add, matmul, matrix_transpose, relu, sigmoid,
reduce_sum), so shapes, dtypes and errors are cudakit's.
"""
from __future__ import annotations

import numbers

import numpy as np

from ... import ops
from ...errors import DeviceError, DTypeError, ShapeError
from .._common import check_int, process_instance
from .cuda_backend import CudaBackend, CudaDataType, get_cuda_backend


class CudaTensor:
    """An array on the backend's device: `data` (a CuPy or NumPy array), `device_id`, and its
    shape, dtype (CudaDataType), size and nbytes. free_tensor() releases it; a freed tensor
    raises ValueError when used."""

    __slots__ = ("_data", "device_id")

    def __init__(self, data, device_id: int = 0):
        self._data, self.device_id = data, device_id

    @property
    def data(self):
        """The backend's array (ValueError once freed)."""
        if self._data is None:
            raise ValueError("the tensor was released by free_tensor()")
        return self._data

    @property
    def shape(self) -> tuple:
        """The tensor's shape."""
        return tuple(self.data.shape)

    @property
    def dtype(self) -> CudaDataType:
        """Its element type."""
        return CudaDataType(np.dtype(self.data.dtype).name)

    @property
    def size(self) -> int:
        """Its number of elements."""
        return int(self.data.size)

    @property
    def nbytes(self) -> int:
        """Its size in bytes."""
        return int(self.data.nbytes)

    def __repr__(self):
        state = "freed" if self._data is None else f"shape={self.shape}, dtype={self.dtype.name}"
        return f"CudaTensor({state}, device_id={self.device_id})"


def _array(t, name: str):
    if not isinstance(t, CudaTensor):
        raise TypeError(f"{name} must be a CudaTensor (got {type(t).__name__}); make one with from_numpy()")
    if t._data is None:
        raise ValueError(f"{name} was released by free_tensor()")
    return t._data


def _dtype(dtype) -> np.dtype:
    """The NumPy dtype of a CudaDataType or a dtype one names; None is FLOAT32, create_tensor's
    default (np.dtype(None) would be float64); DTypeError for any other."""
    if dtype is None:
        return CudaDataType.FLOAT32.numpy
    if isinstance(dtype, CudaDataType):
        return dtype.numpy
    try:
        return CudaDataType(np.dtype(dtype).name).numpy
    except (TypeError, ValueError):
        raise DTypeError(f"dtype must be a CudaDataType ({', '.join(m.name for m in CudaDataType)}); "
                         f"got {dtype!r}") from None


class CudaMath:
    """Linear algebra, elementwise ops and reductions on CudaTensors through cudakit."""

    def __init__(self, backend: CudaBackend | None = None):
        self.backend = backend or get_cuda_backend()

    def _be(self):
        from ...backends import get_backend
        return get_backend("cpu" if self.backend.fallback else "cuda")

    def _wrap(self, arr) -> CudaTensor:
        if isinstance(arr, np.ndarray):   # (a NumPy array's .data is a memoryview, which bfloat16 cannot make)
            return CudaTensor(arr, 0)
        dev = getattr(getattr(arr, "data", None), "device_id", 0)
        return CudaTensor(arr, int(dev) if isinstance(dev, int) else 0)

    def create_tensor(self, shape: tuple, dtype: CudaDataType = CudaDataType.FLOAT32) -> CudaTensor:
        """A zero-filled tensor of `shape` on the current device. ShapeError / DTypeError naming
        the argument."""
        if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
            shape = (shape,)
        if not isinstance(shape, (tuple, list)) or not all(
                isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ShapeError(f"shape must be a tuple of ints >= 0 (got {shape!r})")
        return self._wrap(self._be().zeros(tuple(int(d) for d in shape), _dtype(dtype)))

    def from_numpy(self, array: np.ndarray, device_id: int = 0) -> CudaTensor:
        """A copy of NumPy `array` (of a CudaDataType's dtype, else DTypeError) on GPU `device_id`
        (the host in fallback mode, where only device 0 exists)."""
        if not isinstance(array, np.ndarray):
            raise TypeError(f"array must be a NumPy array (got {type(array).__name__})")
        if array.dtype.name not in {m.value for m in CudaDataType}:   # (a CudaTensor's dtype is one of them)
            raise DTypeError(f"array: dtype {array.dtype} is not a CudaDataType "
                             f"({', '.join(m.value for m in CudaDataType)})")
        device_id = check_int(device_id, "device_id")
        if self.backend.fallback:
            if device_id != 0:
                raise DeviceError(f"device_id {device_id}: fallback mode has only device 0 (the host)")
            return CudaTensor(self._be().to_device(array), 0)
        from ...backends import get_backend
        return CudaTensor(get_backend("cuda", device=device_id).to_device(array), device_id)

    def to_numpy(self, tensor: CudaTensor) -> np.ndarray:
        """A NumPy copy of `tensor`."""
        return self._be().to_host(_array(tensor, "tensor"))

    def _integer(self, op: str, *named):
        """The array module for an op on CudaDataType.INT32 / INT64 tensors (cudakit's ops take
        floats: NumPy's or CuPy's own integer arithmetic runs them), None for float tensors;
        DTypeError for integer and float tensors, or two integer dtypes, mixed."""
        kinds = {a.dtype.kind in "iu" for _, a in named}
        if kinds == {False}:
            return None
        if len(kinds) > 1 or len({a.dtype for _, a in named}) > 1:
            got = ", ".join(f"{n} {a.dtype}" for n, a in named)
            raise DTypeError(f"{op}: the tensors must have one dtype (got {got})")
        return self._be()._xp()

    def vector_add(self, a: CudaTensor, b: CudaTensor) -> CudaTensor:
        """a + b elementwise (cudakit.add: broadcasting, one float dtype; INT32 / INT64 tensors by
        NumPy's or CuPy's integer add, wrapping on overflow as they do)."""
        x, y = _array(a, "a"), _array(b, "b")
        xp = self._integer("vector_add", ("a", x), ("b", y))
        return self._wrap(ops.add(x, y) if xp is None else xp.add(x, y))

    def matrix_multiply(self, a: CudaTensor, b: CudaTensor) -> CudaTensor:
        """a @ b (cudakit.matmul: cuBLAS on the GPU; INT32 / INT64 tensors by NumPy's or CuPy's
        integer matmul)."""
        x, y = _array(a, "a"), _array(b, "b")
        xp = self._integer("matrix_multiply", ("a", x), ("b", y))
        return self._wrap(ops.matmul(x, y) if xp is None else xp.matmul(x, y))

    def matrix_transpose(self, tensor: CudaTensor) -> CudaTensor:
        """The contiguous transpose of the last two axes (cudakit.matrix_transpose)."""
        return self._wrap(ops.matrix_transpose(_array(tensor, "tensor")))

    def relu(self, tensor: CudaTensor) -> CudaTensor:
        """max(x, 0) elementwise (cudakit.relu; INT32 / INT64 tensors by NumPy's or CuPy's maximum)."""
        x = _array(tensor, "tensor")
        xp = self._integer("relu", ("tensor", x))
        return self._wrap(ops.relu(x) if xp is None else xp.maximum(x, x.dtype.type(0)))

    def sigmoid(self, tensor: CudaTensor) -> CudaTensor:
        """1 / (1 + exp(-x)) elementwise (cudakit.sigmoid)."""
        return self._wrap(ops.sigmoid(_array(tensor, "tensor")))

    def reduce_sum(self, tensor: CudaTensor, axis: int = None) -> CudaTensor:
        """The sum over `axis` (None: all; a 0-d tensor) (cudakit.reduce_sum; INT32 / INT64 tensors
        by NumPy's or CuPy's sum in the tensor's dtype)."""
        x = _array(tensor, "tensor")
        xp = self._integer("reduce_sum", ("tensor", x))
        if xp is None:
            return self._wrap(ops.reduce_sum(x, axis))
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, numbers.Integral)):
            raise TypeError(f"reduce_sum: axis must be an int or None (got {axis!r})")
        return self._wrap(xp.asarray(xp.sum(x, axis=axis, dtype=x.dtype)))

    def free_tensor(self, tensor: CudaTensor) -> None:
        """Release `tensor`'s memory to cudakit's pool (once no other array refers to it); a
        later use of it, or a second free, raises ValueError."""
        _array(tensor, "tensor")
        tensor._data = None

    def benchmark_operations(self, sizes, iterations: int = 50) -> dict:
        """Time vector_add, matrix_multiply ((m, n) @ (n, m)), matrix_transpose and relu on random
        float32 inputs of each (m, n) in `sizes`: {operation: {size: {"average_time_ms",
        "median_ms", "gflops" (where the op has FLOPs), "bandwidth_gbs"}}}. Times are the median
        of `iterations` calls (CUDA events on a GPU, the host clock otherwise), through
        cudakit's Backend.benchmark_kernel."""
        iterations = check_int(iterations, "iterations", 1)
        checked = []
        for i, s in enumerate(sizes):
            if not (isinstance(s, (tuple, list)) and len(s) == 2 and all(
                    isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 1 for d in s)):
                raise ShapeError(f"sizes[{i}] must be a pair of ints >= 1 (got {s!r})")
            checked.append(tuple(int(d) for d in s))
        be = self._be()
        rng = np.random.default_rng()
        results: dict = {"vector_add": {}, "matrix_multiply": {}, "matrix_transpose": {}, "relu": {}}
        for m, n in checked:
            a = self.from_numpy(rng.standard_normal((m, n), dtype=np.float32))
            b = self.from_numpy(rng.standard_normal((m, n), dtype=np.float32))
            bt = self.from_numpy(rng.standard_normal((n, m), dtype=np.float32))
            e = m * n
            cases = {"vector_add": (self.vector_add, (a, b), e, 12 * e),
                     "matrix_multiply": (self.matrix_multiply, (a, bt), 2 * m * n * m, 4 * (2 * e + m * m)),
                     "matrix_transpose": (self.matrix_transpose, (a,), None, 8 * e),
                     "relu": (self.relu, (a,), e, 8 * e)}
            for op, (fn, args, flops, nbytes) in cases.items():
                ms = be.benchmark_kernel(fn, *args, num_runs=iterations)
                r = {"average_time_ms": ms, "median_ms": ms, "bandwidth_gbs": nbytes / ms / 1e6}
                if flops is not None:
                    r["gflops"] = flops / ms / 1e6
                results[op][(m, n)] = r
            for t in (a, b, bt):
                self.free_tensor(t)
        return results


get_cuda_math = process_instance(CudaMath, "The process's CudaMath, on get_cuda_backend().")


__all__ = ["CudaTensor", "CudaMath", "get_cuda_math"]
