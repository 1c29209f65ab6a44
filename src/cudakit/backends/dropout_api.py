"""The argument policy of dropout with counter-based (Philox) random numbers, forward and backward, shared by every backend as a mixin of Backend.

The mask is a pure function of (seed, p, the element's C-order index): never stored, regenerated
by the backward, bit-identical on the CPU (NumPy) and CUDA backends. Random numbers: Philox4x32-10
with key = (seed & 0xffffffff, seed >> 32) and counter = (g & 0xffffffff, g >> 32, 0, 0) for the
group g = i // 4 of element i, which uses output word i % 4. Element i is kept iff its word >=
threshold(p) = round(p * 2^32) clipped to [0, 2^32 - 1] (an integer compare: the kept fraction
is (2^32 - threshold) / 2^32, within 2^-33 of 1 - p).

Kept elements are multiplied by scale = 1 / (1 - p) rounded to float32 (float64 for float64 x),
in float32 for 16-bit and float32 inputs, once rounded to x's dtype; dropped elements are
multiplied by 0 (so a dropped NaN or inf gives NaN, as x * mask / (1 - p) in NumPy and torch).

p must be a real number in [0, 1) (ValueError naming p); seed an int in [0, 2^64) (TypeError
when not an int, ValueError when out of range). x: float16, bfloat16, float32 or float64 (DTypeError
otherwise); non-contiguous x is copied to a contiguous one first (the mask follows the logical
C-order index, not the memory layout). Results are new C-contiguous arrays on x's device.
"""
from __future__ import annotations

import numbers

import numpy as np

from .checks import check_bool, check_same_shape, check_shape, check_size, float_scalar
from ..errors import ArgumentError, ArgumentTypeError

_TWO32 = 1 << 32


def check_p(op: str, p) -> float:
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, numbers.Real):
        raise ArgumentTypeError(f"{op}: p must be a real number in [0, 1) (got p={p!r} of type {type(p).__name__})")
    if not 0.0 <= float_scalar(op, "p", p) < 1.0:
        raise ArgumentError(f"{op}: p must be a real number in [0, 1) (got p={p!r})")
    return float(p)


def check_seed(op: str, seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ArgumentTypeError(f"{op}: seed must be an int in [0, 2**64) (got {seed!r} of type {type(seed).__name__})")
    seed = int(seed)
    if not 0 <= seed < 1 << 64:
        raise ArgumentError(f"{op}: seed must be in [0, 2**64) (got seed={seed})")
    return seed


def threshold(p: float) -> int:
    """The integer keep threshold of p: round(p * 2^32) (Python's round, half to even; p * 2^32
    is exact in double) clipped to [0, 2^32 - 1]. Element kept iff its Philox word >= it."""
    return min(max(int(round(p * _TWO32)), 0), _TWO32 - 1)


def scale(p: float, dtype) -> np.floating:
    """1 / (1 - p) computed in double, rounded to float64 for float64 x, else to float32."""
    s = 1.0 / (1.0 - p)
    return np.float64(s) if np.dtype(dtype) == np.float64 else np.float32(s)


def _shape(op: str, shape) -> tuple:
    dims = check_shape(op, "shape", shape)
    check_size(op, "the mask", dims, 1)
    return dims


class DropoutOps:
    """dropout with counter-based (Philox) random numbers, forward and backward (mixed into Backend)."""

    # ---- hooks a backend fills in ----------------------------------------------------------
    def _dropout_module(self):
        """The module with dropout(x, threshold, scale, seed) and mask(shape, threshold, seed)."""
        raise NotImplementedError

    def _copy(self, x):
        """A new C-contiguous copy of x."""
        raise NotImplementedError

    # ---- shared ----------------------------------------------------------------------------
    def _dropout_apply(self, op: str, x, p, seed, arg: str, residual=None):
        p, seed = check_p(op, p), check_seed(op, seed)
        x = self._coerce(x, arg)
        self._check_dtype(x, arg, op)
        res = self._dropout_residual(op, x, residual)
        with self._device_scope(x):
            if p == 0.0:
                return self._copy(x) if res is None else self.add(x, res)
            y = self._dropout_module().dropout(self._ascontiguous(x), threshold(p), scale(p, x.dtype), seed,
                                               None if res is None else self._ascontiguous(res))
            return y if y.shape == x.shape else y.reshape(x.shape)   # a 0-d x gives a 0-d result

    def _dropout_residual(self, op: str, x, residual):
        """residual checked against x (dtype and device as the norms' arrays, then shape), or None."""
        if residual is None:
            return None
        r = self._norm_arrays(op, {"x": x, "residual": residual})[0]["residual"]
        check_same_shape(op, "residual", r, x.shape)
        return r

    # ---- ops -------------------------------------------------------------------------------
    def dropout(self, x, p: float = 0.5, seed: int = 0, training: bool = True, *, residual=None):
        """Dropout: y = x * mask / (1 - p), mask[i] kept with probability 1 - p.

        x: any shape, float16/bfloat16/float32/float64, any strides. p: the drop probability, a
        real in [0, 1). seed: an int in [0, 2^64); the mask is a pure function of (seed, p, the
        C-order index of each element): the same seed and shape give the same mask on the CPU
        and CUDA backends, bit for bit (see dropout_mask). training=False or p == 0: a copy of x.
        Computed as x * (kept ? float32(1 / (1 - p)) : 0) in float32 (float64 for float64),
        rounded once. Returns a new C-contiguous array of x's shape and dtype. On CUDA: one
        Philox call per 4 elements, x.nbytes read + x.nbytes written, no mask stored.

        residual: None, or an array of x's shape and dtype: the result is residual + dropout(x), the
        product and the sum in float32 (float64 for float64) and rounded once, in the same pass (a
        residual stream's update x + dropout(branch) without the add pass: a read of both and a
        write). Its gradient with respect to residual is the incoming gradient itself; with respect
        to x, dropout_backward's.
        """
        op = "dropout"
        if not check_bool(op, "training", training):
            check_p(op, p)   # (checked, then unused: the p == 0 path copies x)
            p = 0.0
        return self._dropout_apply(op, x, p, seed, "x", residual)

    def dropout_backward(self, grad_out, p: float, seed: int):
        """Gradient of dropout(x, p, seed): grad_out * mask / (1 - p) with the mask REGENERATED
        from (seed, element index) exactly as the forward drew it. grad_out: x's shape, a float
        dtype; p and seed: those given to the forward (p == 0: a copy of grad_out)."""
        return self._dropout_apply("dropout_backward", grad_out, p, seed, "grad_out")

    def dropout_mask(self, shape, p: float, seed: int):
        """The keep-mask dropout(x, p, seed) uses for any x of `shape`: a bool array (True =
        kept) on this backend's device. shape: an int or a sequence of non-negative ints."""
        op = "dropout_mask"
        p, seed = check_p(op, p), check_seed(op, seed)
        return self._dropout_module().mask(_shape(op, shape), threshold(p), seed)


class CpuDropoutHooks(DropoutOps):
    """NumPy implementations."""

    def _dropout_module(self):
        from . import cpu_dropout
        return cpu_dropout

    def _copy(self, x):
        import numpy
        return numpy.array(x, order="C", copy=True)


class CudaDropoutHooks(DropoutOps):
    """CUDA kernels (cudakit.kernels.dropout), run on the device of x."""

    def _dropout_module(self):
        from ..kernels import dropout
        return dropout

    def _copy(self, x):
        from ..runtime import _cupy
        return _cupy.cupy().array(x, order="C", copy=True)

