"""The CPU backend: every op in NumPy. 16-bit floats (float16, ml_dtypes.bfloat16) compute in
float32 and round once, as the CUDA kernels do: the same bits for arithmetic, within an ulp or two
for the activations (the kernels use fast exp/tanh approximations for 16-bit data)."""
from __future__ import annotations

import math

import numpy as np

from ..errors import ArgumentTypeError, DeviceError, ShapeError
from .base import Backend
from .attention_api import CpuAttentionHooks
from .conv_api import CpuConvHooks
from .dropout_api import CpuDropoutHooks
from .layout_api import CpuLayoutHooks
from .linalg_api import CpuLinalgHooks
from .normalization_api import CpuNormalizationHooks
from .reduction_api import CpuReductionHooks
from .softmax_api import CpuSoftmaxHooks


def _acc(x):
    return x.astype(np.float32) if x.dtype.itemsize == 2 else x


def _relu_backward(g, x, out):
    mask = x > 0
    np.multiply(g, mask, out=out)
    if np.isnan(out).any():  # NaN * 0 is NaN, but the gradient where x <= 0 is exactly 0
        out[np.broadcast_to(~mask, out.shape) & np.isnan(out)] = 0


def _sigmoid(x):
    # exp(min(x, 0)) / (1 + exp(-|x|)): e / (1 + e) for x <= 0 (never overflows: sigmoid(-100) is
    # 3.8e-44, not 0), 1 / (1 + e) above; no np.where, whose masked select costs more than the exps
    r = np.abs(x, out=np.empty_like(x))   # (out=: a 0-d x stays an array, so the in-place ops work)
    np.negative(r, out=r)
    np.exp(r, out=r)
    r += 1
    np.reciprocal(r, out=r)
    t = np.minimum(x, 0, out=np.empty_like(x))
    np.exp(t, out=t)
    t *= r
    return t


_erfc_py = np.frompyfunc(math.erfc, 1, 1)
# erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), z >= 0: relative error < 1.2e-7 everywhere
# (Numerical Recipes' erfcc, a Chebyshev fit), about one float32 ulp
_ERFC_P = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
           1.48851587, -0.82215223, 0.17087277)


def _erfc(x):
    """erfc elementwise: exact per element (math.erfc) for float64, the vectorised fit above
    (in float64, then rounded) for float32 arithmetic, where it is within an ulp and ~50x faster."""
    if x.dtype == np.float64:
        return np.asarray(_erfc_py(x), np.float64) if x.size else np.empty_like(x)   # (a 0-d x gives a float)
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.5 * z)
    poly = np.full_like(z, _ERFC_P[-1])
    for c in _ERFC_P[-2::-1]:
        poly = poly * t + c
    r = t * np.exp(-z * z + poly)
    return np.where(x < 0, 2.0 - r, r).astype(x.dtype)


def _phi(x):
    """The normal CDF, 0.5 erfc(-x / sqrt(2)) (NumPy has no erf), without the cancellation of
    1 + erf for large negative x."""
    return (0.5 * _erfc(-x / x.dtype.type(math.sqrt(2)))).astype(x.dtype)


_K0, _K1 = math.sqrt(2 / math.pi), 0.044715


def _sigmoid_bwd(g, x):
    e = np.exp(-np.abs(x))   # s (1 - s) = e / (1 + e)^2: 1 - s would cancel for large positive x
    return g * (e / (1 + e) ** 2)


def _tanh_bwd(g, x):
    e = np.exp(-2 * np.abs(x))   # 1 - tanh^2 = 4 e / (1 + e)^2: no cancellation for large |x|
    return g * (4 * e / (1 + e) ** 2)


def _gelu_z(x):
    """2 u = 2 sqrt(2/pi) (x + 0.044715 x^3), x^3 as x * x * x (NumPy's x ** 3 is a pow() call per
    element: 50x slower)."""
    z = np.multiply(x, x, out=np.empty_like(x))
    z *= x
    z *= _K1
    z += x
    z *= 2 * _K0
    return z


def _gelu_tanh_bwd(g, x):
    z = _gelu_z(x)
    s = _sigmoid(z)   # = (1 + tanh(u)) / 2, as the kernel computes it
    e = np.exp(-np.abs(z))
    d = e / ((1 + e) * (1 + e))   # = s (1 - s) without the cancellation of 1 - s for large x
    # past |x| = 1e4 d is 0 and so is the second term: x clipped there keeps x^2 from overflowing
    xc = np.clip(x, -1e4, 1e4)
    return g * (s + 2 * xc * d * _K0 * (1 + 3 * _K1 * xc * xc))


def _gelu_erf_bwd(g, x):
    return g * (_phi(x) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))


def _set(fn):
    """Wrap fn(*inputs) -> array into the fn(*inputs, out, p) form."""
    def run(*args):
        *inputs, out, _p = args
        out[...] = fn(*inputs)
    return run


# op -> fn(*inputs, out, p): inputs in float32/float64, out of the accumulation dtype, p the op's
# scalar parameter. The formulas are the kernels' (kernels/elementwise.py), in the same order.
_OPS = {
    "add": lambda a, b, out, p: np.add(a, b, out=out),
    "sub": lambda a, b, out, p: np.subtract(a, b, out=out),
    "mul": lambda a, b, out, p: np.multiply(a, b, out=out),
    "div": lambda a, b, out, p: np.divide(a, b, out=out),
    # scalar operand p (already rounded to the array's dtype): x op p, or p op x for r*
    "add_scalar": lambda x, out, p: np.add(x, x.dtype.type(p), out=out),
    "sub_scalar": lambda x, out, p: np.subtract(x, x.dtype.type(p), out=out),
    "rsub_scalar": lambda x, out, p: np.subtract(x.dtype.type(p), x, out=out),
    "mul_scalar": lambda x, out, p: np.multiply(x, x.dtype.type(p), out=out),
    "div_scalar": lambda x, out, p: np.divide(x, x.dtype.type(p), out=out),
    "rdiv_scalar": lambda x, out, p: np.divide(x.dtype.type(p), x, out=out),
    "relu": lambda x, out, p: np.maximum(x, 0, out=out),   # maximum propagates NaN
    "relu_backward": lambda g, x, out, p: _relu_backward(g, x, out),
    "leaky_relu": lambda x, out, p: _set(lambda x: np.where(x > 0, x, x * x.dtype.type(p)))(x, out, p),
    "leaky_relu_backward": lambda g, x, out, p: _set(lambda g, x: np.where(x > 0, g, g * g.dtype.type(p)))(g, x, out, p),
    "sigmoid": _set(_sigmoid),
    "sigmoid_backward": _set(_sigmoid_bwd),
    "tanh": _set(np.tanh),
    "tanh_backward": _set(_tanh_bwd),
    "silu": _set(lambda x: x * _sigmoid(x)),
    "silu_backward": _set(lambda g, x: g * _sigmoid(x) * (1 + x * (1 - _sigmoid(x)))),
    "gelu_tanh": _set(lambda x: np.multiply(_sigmoid(_gelu_z(x)), x)),
    "gelu_tanh_backward": _set(_gelu_tanh_bwd),
    "gelu_erf": _set(lambda x: x * _phi(x)),
    "gelu_erf_backward": _set(_gelu_erf_bwd),
}


def _dtype(dt):
    if isinstance(dt, str) and dt == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dt)


class CpuBackend(CpuNormalizationHooks, CpuReductionHooks, CpuSoftmaxHooks, CpuLayoutHooks, CpuDropoutHooks,
                 CpuLinalgHooks, CpuAttentionHooks, CpuConvHooks, Backend):
    """NumPy implementations of every op."""

    name = "cpu"
    _array_type = np.ndarray

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def devices(self) -> list:
        """The GPUs this backend runs on: none."""
        return []

    def set_device(self, i: int) -> None:
        raise DeviceError(f"the CPU backend has no GPU to select (asked for device {i}); "
                          "get_backend('cuda') runs on GPUs")

    def _xp(self):
        return np

    def _coerce(self, x, arg):
        if isinstance(x, np.ndarray):
            return x
        if x is None:   # (an object array would be reported as a dtype)
            raise ArgumentTypeError(f"{arg} is required: an array (got None)")
        if hasattr(x, "__cuda_array_interface__") or _dlpack_on_cuda(x):
            raise DeviceError(f"{arg} is on a CUDA device but this is the CPU backend; "
                              f"copy it with cudakit.to_host() or use the CUDA backend")
        try:
            return np.asarray(x)
        except (ValueError, TypeError) as e:   # a ragged list, an object NumPy cannot hold
            raise ArgumentTypeError(f"{arg} must be an array (got {type(x).__name__} that NumPy cannot make "
                                    f"one of: {e})") from None

    def _scalar_array(self, value, dtype):
        return np.asarray(value, dtype=dtype)

    def _elementwise(self, op, inputs, out, p=0.0):
        with np.errstate(all="ignore"):
            if out.dtype.itemsize == 2:  # 16-bit: compute in float32, round once
                tmp = np.empty(out.shape, np.float32)
                _OPS[op](*(_acc(x) for x in inputs), tmp, p)
                out[...] = tmp.astype(out.dtype)
            else:
                _OPS[op](*inputs, out, p)
        return out

    def asarray(self, x, dtype=None):
        return np.asarray(x, dtype=None if dtype is None else _dtype(dtype))

    def to_numpy(self, x):
        return np.asarray(x)

    def to_device(self, x):
        """A NumPy copy of host array `x`: the CPU backend's device is the host. A CUDA array
        raises DeviceError (cudakit.to_host copies it)."""
        return np.array(self._coerce(x, "x"), copy=True)

    def to_host(self, x):
        """A NumPy copy of `x`: a NumPy array (or anything np.asarray takes) is copied; a CuPy
        array is copied from its GPU (cudakit.to_host)."""
        if _dlpack_on_cuda(x) or hasattr(x, "__cuda_array_interface__"):
            from ..runtime.memory import to_host
            return to_host(x)
        return np.array(x, copy=True)

    def empty(self, shape, dtype="float32"):
        try:
            return np.empty(shape, _dtype(dtype))
        except ValueError as e:   # ("array is too big", a negative dimension: NumPy's own ValueError)
            raise ShapeError(f"empty: cannot make an array of shape {shape!r}: {e}") from None

    def zeros(self, shape, dtype="float32"):
        try:
            return np.zeros(shape, _dtype(dtype))
        except ValueError as e:
            raise ShapeError(f"zeros: cannot make an array of shape {shape!r}: {e}") from None


def _dlpack_on_cuda(x) -> bool:
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return False
    try:
        return dev()[0] in (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
    except Exception:
        return False
