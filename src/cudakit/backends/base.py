"""The Backend base class: every op's argument policy lives here, once; backends fill in hooks.

Policy: inputs are coerced to the backend's arrays (or rejected with DeviceError), dtypes must be
supported and agree (DTypeError), shapes must broadcast (ShapeError), `out` must have the result's
shape and dtype. Only then does a hook (`_elementwise`) run, so a bad argument never reaches a kernel.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError
from .attention_api import AttentionOps
from .attention_varlen import VarlenAttentionOps
from .conv_api import ConvOps
from .dropout_api import DropoutOps
from .layout_api import LayoutOps
from .linalg_api import LinalgOps
from .normalization_api import NormalizationOps
from .reduction_api import ReductionOps
from .softmax_api import SoftmaxOps
from .checks import (check_size, check_writeable, empty_in_order, finite_scalar, float_scalar, require_array,
                     require_out_array, shared_dense_order)

SUPPORTED_DTYPES = ("float16", "bfloat16", "float32", "float64")
_supported: dict = {}  # np.dtype -> name; dtype hashing is cheap, dtype.name is not


def supported_dtypes() -> dict:
    """{np.dtype: name} of the float dtypes every op takes (bfloat16 from ml_dtypes)."""
    if not _supported:
        import ml_dtypes
        for n in SUPPORTED_DTYPES:
            _supported[np.dtype(ml_dtypes.bfloat16 if n == "bfloat16" else n)] = n
    return _supported


def dtype_name(dt) -> str:
    return np.dtype(dt).name


_SLOPE_MAX = float(np.finfo(np.float32).max)


def _slope(v, x=None, op: str = "leaky_relu") -> float:
    """leaky_relu's slope: finite, and for data x other than float64 float32's too (16- and 32-bit
    data multiply in float32, where a larger slope is inf and 0 * inf turned x = 0 into NaN)."""
    s = finite_scalar(op, "negative_slope", v)
    dt = getattr(getattr(x, "dtype", None), "name", None)
    if abs(s) > _SLOPE_MAX and dt != "float64":
        raise ArgumentError(f"{op}: negative_slope must be at most {_SLOPE_MAX:.6g} in magnitude for "
                            f"{dt or 'this'} data (got {v!r})")
    return s


def _gelu_op(approximate: str) -> str:
    if not isinstance(approximate, str):   # (an array compared with a string is an array: no truth value)
        raise ArgumentTypeError(f"approximate must be 'tanh' or 'none' ('erf' too) (got "
                                f"{type(approximate).__name__} {approximate!r})")
    if approximate == "tanh":
        return "gelu_tanh"
    if approximate in ("none", "erf"):
        return "gelu_erf"
    raise ArgumentError(f"approximate must be 'tanh' or 'none' ('erf' too) (got {approximate!r})")


# op -> (its form for `array op scalar`, its form for `scalar op array`)
_SCALAR_FORMS = {"add": ("add_scalar", "add_scalar"), "sub": ("sub_scalar", "rsub_scalar"),
                 "mul": ("mul_scalar", "mul_scalar"), "div": ("div_scalar", "rdiv_scalar")}


def scalar_param(scalar, dtype, op: str = "op", arg: str = "scalar") -> float:
    """A Python scalar operand as the kernels' parameter: rounded to the array's dtype first, as
    NumPy rounds it (1e6 against float16 is inf). An integer beyond float range (10**400) raises
    ArgumentError naming `arg`."""
    if -65504.0 <= scalar <= 65504.0:   # within every dtype's range: no overflow to silence
        return float(dtype.type(scalar))
    scalar = float_scalar(op, arg, scalar)
    with np.errstate(over="ignore"):
        return float(np.asarray(scalar).astype(dtype))


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


class Backend(NormalizationOps, ReductionOps, SoftmaxOps, LayoutOps, DropoutOps, LinalgOps, AttentionOps,
              VarlenAttentionOps, ConvOps):
    """An op table plus array helpers. Obtain one with cudakit.get_backend()."""

    name = "?"
    # A backend object exists only where it can run (get_backend raises otherwise): always True.
    is_available = True
    has_custom_kernels = False  # True where ops run cudakit's own kernels (CUDA), not NumPy

    # ---- hooks a backend fills in ----------------------------------------------------------
    def _coerce(self, x, arg: str):
        """Return `x` as this backend's array without copying across devices, or raise DeviceError."""
        raise NotImplementedError

    def _scalar_array(self, value, dtype):
        """A 0-d array of `dtype` holding a Python scalar."""
        raise NotImplementedError

    def _elementwise(self, op: str, inputs: tuple, out, p: float = 0.0):
        """Compute op(*inputs) into `out` (allocated and validated by the caller); `p` is the op's
        scalar parameter (leaky_relu's slope)."""
        raise NotImplementedError

    def _check_devices(self, arrays: dict) -> None:
        """Raise DeviceError when the arrays are not on one device."""

    # ---- array helpers ---------------------------------------------------------------------
    def asarray(self, x, dtype=None):
        raise NotImplementedError

    def to_numpy(self, x) -> np.ndarray:
        raise NotImplementedError

    def to_device(self, x):
        """A copy of host array `x` (any shape and dtype) on this backend's device: a CuPy array on
        the CUDA backend, a NumPy array on the CPU backend."""
        raise NotImplementedError

    def to_host(self, x) -> np.ndarray:
        """A NumPy copy of `x` (this backend's array, or a NumPy array)."""
        raise NotImplementedError

    def empty(self, shape, dtype="float32"):
        raise NotImplementedError

    def zeros(self, shape, dtype="float32"):
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for queued work (a no-op on the CPU)."""

    @property
    def device(self) -> str:
        raise NotImplementedError

    # ---- shared policy ---------------------------------------------------------------------
    _array_type: type = type(None)   # the backend's native array class (fast path)

    @staticmethod
    def _check_dtype(x, arg: str, op: str | None = None) -> str:
        name = (_supported or supported_dtypes()).get(x.dtype)
        if name is None:
            raise DTypeError(f"{op + ': ' if op else ''}{arg}: dtype {x.dtype} is not supported; use one of "
                             f"{', '.join(SUPPORTED_DTYPES)}")
        return name

    def _prepare(self, op: str, named: dict, out):
        """Validate and coerce the inputs of an elementwise op; returns (inputs, out)."""
        if out is None:  # fast path: native arrays of one supported dtype and one shape
            vals = tuple(named.values())
            x0 = vals[0]
            t = self._array_type
            if type(x0) is t and x0.dtype in (_supported or supported_dtypes()):
                dt, shape = x0.dtype, x0.shape
                if all(type(v) is t and v.dtype == dt and v.shape == shape for v in vals[1:]):
                    if len(vals) > 1:
                        self._check_devices(named)
                    return vals, self._result_in_layout(vals, shape, dt)
        arrays, scalars = {}, {}
        for arg, x in named.items():
            if isinstance(x, numbers.Real) and not isinstance(x, bool):
                scalars[arg] = x
            else:
                require_array(op, arg, x)
                arrays[arg] = self._coerce(x, arg)
        if not arrays:   # NumPy scalars alone are 0-d arrays of their dtype (as sum() takes them)
            for arg in [a for a, v in scalars.items() if isinstance(v, np.generic)]:
                arrays[arg] = self._coerce(np.asarray(scalars.pop(arg)), arg)
            if not arrays:
                raise DTypeError(f"{op}: at least one argument must be an array (got only scalars)")
        dts = {arg: self._check_dtype(x, arg, op) for arg, x in arrays.items()}
        if len(set(dts.values())) > 1:
            desc = ", ".join(f"{a} is {d}" for a, d in dts.items())
            raise DTypeError(f"{op}: arguments must have one dtype ({desc}); cast one with .astype()")
        self._check_devices(arrays)
        dtype = next(iter(arrays.values())).dtype
        for arg, v in scalars.items():
            arrays[arg] = self._scalar_array(scalar_param(v, dtype, op, arg), dtype)
        inputs = tuple(arrays[a] for a in named)
        try:
            shape = np.broadcast_shapes(*(x.shape for x in inputs))
        except ValueError:
            desc = ", ".join(f"{a} {tuple(x.shape)}" for a, x in zip(named, inputs))
            raise ShapeError(f"{op}: shapes do not broadcast: {desc}") from None
        if out is None:
            check_size(op, "the result", shape, np.dtype(dtype).itemsize)   # (inputs broadcast into it)
            out = self._result_in_layout(inputs, shape, dtype)
        else:
            require_out_array(op, out)
            out = self._coerce(out, "out")
            if tuple(out.shape) != tuple(shape):
                raise ShapeError(f"{op}: out must have shape {tuple(shape)} (got {tuple(out.shape)})")
            if out.dtype != dtype:
                raise DTypeError(f"{op}: out must have dtype {dtype_name(dtype)} (got {dtype_name(out.dtype)})")
            check_writeable(op, "out", out)
            self._check_devices({**arrays, "out": out})
        return inputs, out

    def _result_in_layout(self, inputs: tuple, shape: tuple, dtype):
        """A new array for an elementwise result of this shape: in the inputs' memory layout when
        every input has the result's shape and the same strides, covering its memory densely but not
        C-contiguously (a channels-last view, a transpose), as PyTorch keeps a memory format; then
        the kernels run over the flat memory. C-contiguous otherwise."""
        if inputs[0].flags.c_contiguous or len(shape) < 2:
            return self.empty(shape, dtype)
        order = shared_dense_order(inputs, shape)
        return self.empty(shape, dtype) if order is None else empty_in_order(self.empty, shape, dtype, order)

    def _elementwise_op(self, op: str, named: dict, out, p: float = 0.0):
        if op in _SCALAR_FORMS:
            r = self._scalar_operand_op(op, named, out)
            if r is not None:
                return r
        inputs, out = self._prepare(op, named, out)
        return self._elementwise(op, inputs, out, p)

    def _scalar_operand_op(self, op: str, named: dict, out):
        """array op scalar (or scalar op array) as a one-input kernel with the scalar as its
        parameter, rounded to the array's dtype first (as NumPy does); None unless exactly one
        operand is a Python real."""
        (an, a), (bn, b) = named.items()
        sa, sb = _is_real(a), _is_real(b)
        if sa == sb:
            return None
        name, arr, scalar, form = (an, a, b, 0) if sb else (bn, b, a, 1)
        op_s = _SCALAR_FORMS[op][form]
        inputs, out = self._prepare(op, {name: arr}, out)
        return self._elementwise(op_s, inputs, out, scalar_param(scalar, inputs[0].dtype, op, bn if sb else an))

    # ---- ops -------------------------------------------------------------------------------
    def add(self, a, b, out=None):
        """a + b elementwise with NumPy broadcasting. a, b: arrays (or one Python scalar) of one
        float dtype (float16, bfloat16, float32, float64); 16-bit inputs are added in float32 and
        rounded once. Returns `out` (allocated when None) of the broadcast shape."""
        return self._elementwise_op("add", {"a": a, "b": b}, out)

    def mul(self, a, b, out=None):
        """a * b elementwise with NumPy broadcasting; dtypes and rounding as add()."""
        return self._elementwise_op("mul", {"a": a, "b": b}, out)

    def relu(self, x, out=None):
        """max(x, 0) elementwise; NaN stays NaN (as numpy.maximum). Any float dtype, any shape."""
        return self._elementwise_op("relu", {"x": x}, out)

    def sub(self, a, b, out=None):
        """a - b elementwise with NumPy broadcasting; dtypes and rounding as add()."""
        return self._elementwise_op("sub", {"a": a, "b": b}, out)

    def div(self, a, b, out=None):
        """a / b elementwise with NumPy broadcasting (IEEE: x/0 = +-inf, 0/0 = NaN)."""
        return self._elementwise_op("div", {"a": a, "b": b}, out)

    def leaky_relu(self, x, negative_slope: float = 0.01, out=None):
        """x where x > 0, else negative_slope * x. Any float dtype and shape; |negative_slope| at
        most float32's largest value but for float64 x."""
        return self._elementwise_op("leaky_relu", {"x": x}, out, _slope(negative_slope, x))

    def leaky_relu_backward(self, grad_out, x, negative_slope: float = 0.01, out=None):
        """grad_out where x > 0, else negative_slope * grad_out."""
        return self._elementwise_op("leaky_relu_backward", {"grad_out": grad_out, "x": x}, out,
                                    _slope(negative_slope, x, "leaky_relu_backward"))

    def sigmoid(self, x, out=None):
        """1 / (1 + exp(-x)) elementwise."""
        return self._elementwise_op("sigmoid", {"x": x}, out)

    def sigmoid_backward(self, grad_out, x, out=None):
        """grad_out * s * (1 - s) with s = sigmoid(x) (from the input x, not the output)."""
        return self._elementwise_op("sigmoid_backward", {"grad_out": grad_out, "x": x}, out)

    def tanh(self, x, out=None):
        """tanh(x) elementwise."""
        return self._elementwise_op("tanh", {"x": x}, out)

    def tanh_backward(self, grad_out, x, out=None):
        """grad_out * (1 - tanh(x)^2)."""
        return self._elementwise_op("tanh_backward", {"grad_out": grad_out, "x": x}, out)

    def silu(self, x, out=None):
        """x * sigmoid(x) (swish) elementwise."""
        return self._elementwise_op("silu", {"x": x}, out)

    def silu_backward(self, grad_out, x, out=None):
        """grad_out * s * (1 + x (1 - s)) with s = sigmoid(x)."""
        return self._elementwise_op("silu_backward", {"grad_out": grad_out, "x": x}, out)

    def gelu(self, x, approximate: str = "tanh", out=None):
        """GELU elementwise. approximate="tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the
        form neural_arch uses (the default here); approximate="none": x * Phi(x) with the exact erf
        (PyTorch's default)."""
        return self._elementwise_op(_gelu_op(approximate), {"x": x}, out)

    def gelu_backward(self, grad_out, x, approximate: str = "tanh", out=None):
        """grad_out * d gelu(x) / dx, for the same `approximate` as the forward."""
        return self._elementwise_op(_gelu_op(approximate) + "_backward", {"grad_out": grad_out, "x": x}, out)

    def activation(self, x, kind, out=None):
        """Apply the activation named by `kind` ("relu", "leaky_relu", "sigmoid", "tanh", "silu",
        "gelu" (tanh form), "gelu_erf"); an enum member works too (its name is used), as
        NeuralScript's ActivationType."""
        name = str(getattr(kind, "name", kind)).lower()
        ops = {"relu": self.relu, "leaky_relu": self.leaky_relu, "sigmoid": self.sigmoid, "tanh": self.tanh,
               "silu": self.silu, "swish": self.silu, "gelu": self.gelu,
               "gelu_erf": lambda x, out=None: self.gelu(x, "none", out=out)}
        if name not in ops:
            raise ArgumentError(f"unknown activation {kind!r}; known: {', '.join(sorted(ops))}")
        return ops[name](x, out=out)

    def relu_backward(self, grad_out, x, out=None):
        """Gradient of relu: grad_out where x > 0, else 0 (also where x is NaN). grad_out and x
        broadcast against each other; one float dtype."""
        return self._elementwise_op("relu_backward", {"grad_out": grad_out, "x": x}, out)

    # ---- measurement -----------------------------------------------------------------------
    def benchmark_kernel(self, name_or_fn, *args, num_runs: int = 20, warmup: int = 3, **kwargs) -> float:
        """Median milliseconds of one call of op `name_or_fn` (an op name such as "relu", or any
        callable) on `args`: CUDA-event timing on the CUDA backend, wall clock on the CPU."""
        ops = [n for n in dir(Backend)
               if not n.startswith("_") and n != "benchmark_kernel" and callable(getattr(Backend, n))]
        if isinstance(name_or_fn, str):   # (an op's name only: not __init__, nor another attribute)
            fn = getattr(self, name_or_fn) if name_or_fn in ops else None
        else:
            fn = name_or_fn
        if not callable(fn):
            raise ArgumentError(f"unknown op {name_or_fn!r}; known: {', '.join(sorted(ops))}")
        for arg, v, least in (("num_runs", num_runs, 1), ("warmup", warmup, 0)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
                raise ArgumentTypeError(f"benchmark_kernel: {arg} must be an int (got {type(v).__name__} {v!r})")
            if v < least:
                raise ArgumentError(f"benchmark_kernel: {arg} must be >= {least} (got {v})")
        num_runs, warmup = int(num_runs), int(warmup)
        from ..bench import timing
        run = lambda: fn(*args, **kwargs)  # noqa: E731
        if self.name == "cuda":
            return timing.time_gpu(run, warmup=warmup, reps=num_runs)["median_ms"]
        return timing.time_cpu(run, warmup=warmup, reps=num_runs)["median_ms"]

    def __repr__(self):
        return f"<cudakit {self.name} backend>"
