"""The CPU backend: every op in NumPy. 16-bit floats (float16, ml_dtypes.bfloat16) compute in
float32 and round once, as the CUDA kernels do, so both backends give the same bits."""
from __future__ import annotations

import numpy as np

from ..errors import DeviceError
from .base import Backend
from .normalization_api import CpuNormalizationHooks


def _acc(x):
    return x.astype(np.float32) if x.dtype.itemsize == 2 else x


def _relu_backward(g, x, out):
    mask = x > 0
    np.multiply(g, mask, out=out)
    if np.isnan(out).any():  # NaN * 0 is NaN, but the gradient where x <= 0 is exactly 0
        out[np.broadcast_to(~mask, out.shape) & np.isnan(out)] = 0


# op -> fn(*inputs, out): inputs in float32/float64, out of the accumulation dtype
_OPS = {
    "add": lambda a, b, out: np.add(a, b, out=out),
    "mul": lambda a, b, out: np.multiply(a, b, out=out),
    "relu": lambda x, out: np.maximum(x, 0, out=out),   # maximum propagates NaN
    "relu_backward": _relu_backward,
}


def _dtype(dt):
    if isinstance(dt, str) and dt == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dt)


class CpuBackend(CpuNormalizationHooks, Backend):
    """NumPy implementations of every op."""

    name = "cpu"
    _array_type = np.ndarray

    @property
    def device(self) -> str:
        return "cpu"

    def _coerce(self, x, arg):
        if isinstance(x, np.ndarray):
            return x
        if hasattr(x, "__cuda_array_interface__") or _dlpack_on_cuda(x):
            raise DeviceError(f"{arg} is on a CUDA device but this is the CPU backend; "
                              f"copy it with cudakit.to_host() or use the CUDA backend")
        return np.asarray(x)

    def _scalar_array(self, value, dtype):
        return np.asarray(value, dtype=dtype)

    def _elementwise(self, op, inputs, out):
        with np.errstate(all="ignore"):
            if out.dtype.itemsize == 2:  # 16-bit: compute in float32, round once
                tmp = np.empty(out.shape, np.float32)
                _OPS[op](*(_acc(x) for x in inputs), tmp)
                out[...] = tmp.astype(out.dtype)
            else:
                _OPS[op](*inputs, out)
        return out

    def asarray(self, x, dtype=None):
        return np.asarray(x, dtype=None if dtype is None else _dtype(dtype))

    def to_numpy(self, x):
        return np.asarray(x)

    def empty(self, shape, dtype="float32"):
        return np.empty(shape, _dtype(dtype))

    def zeros(self, shape, dtype="float32"):
        return np.zeros(shape, _dtype(dtype))


def _dlpack_on_cuda(x) -> bool:
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return False
    try:
        return dev()[0] in (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
    except Exception:
        return False
