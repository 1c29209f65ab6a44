"""The argument policy of transpose and axis permutation, shared by every backend as a mixin of Backend.

Layout ops move raw words: any dtype of itemsize 1, 2, 4 or 8 works (float16, bfloat16, float32,
float64, integers, bool, complex64); other itemsizes and object arrays raise DTypeError. Axes must
be a permutation of range(x.ndim) (negative axes count from the end, as NumPy); anything else
raises ShapeError naming the axes and x's shape. Results are always NEW C-contiguous arrays
(never a view, never x itself), on x's device. Strided (non-contiguous) x is read through its
strides. The work runs in the backend's `_layout_permute(x, axes)` hook.
"""
from __future__ import annotations

import numbers

from ..errors import DTypeError, ShapeError


class LayoutOps:
    """transpose and axis permutation (mixed into Backend)."""

    # ---- hooks a backend fills in ----------------------------------------------------------
    def _layout_permute(self, x, axes: tuple):
        """A new C-contiguous array equal to x.transpose(axes); x and axes already validated."""
        raise NotImplementedError

    # ---- shared checks ---------------------------------------------------------------------
    def _layout_x(self, op: str, x, arg: str = "x"):
        x = self._coerce(x, arg)
        dt = x.dtype
        if dt.hasobject or dt.itemsize not in (1, 2, 4, 8):
            raise DTypeError(f"{op}: {arg} has dtype {dt} (itemsize {dt.itemsize}); layout ops move words of "
                             f"1, 2, 4 or 8 bytes (any numeric, bool or 16-bit float dtype)")
        return x

    @staticmethod
    def _layout_axes(op: str, axes, ndim: int, shape) -> tuple:
        """axes as a tuple of non-negative ints forming a permutation of range(ndim)."""
        if not isinstance(axes, (tuple, list, range)) and not hasattr(axes, "__array__"):
            # a set or a dict iterates in an arbitrary order: the permutation would be a guess
            raise ShapeError(f"{op}: axes must be a sequence of ints, a tuple or a list (got {type(axes).__name__} {axes!r})")
        try:
            items = list(axes)
        except TypeError:
            raise ShapeError(f"{op}: axes must be a sequence of ints (got {axes!r})") from None
        out = []
        for a in items:
            if isinstance(a, bool) or not isinstance(a, numbers.Integral):
                raise ShapeError(f"{op}: axes must be ints (got {axes!r}: {a!r} is a {type(a).__name__})")
            a = int(a)
            if not -ndim <= a < ndim:
                raise ShapeError(f"{op}: axis {a} in axes {tuple(items)!r} is out of range for x of shape "
                                 f"{tuple(shape)} ({ndim}-D: valid axes are {-ndim}..{ndim - 1})")
            out.append(a % ndim if ndim else a)
        if len(out) != ndim:
            raise ShapeError(f"{op}: axes {tuple(items)!r} has {len(out)} entries but x of shape {tuple(shape)} "
                             f"has {ndim} dims; give a permutation of range({ndim})")
        if len(set(out)) != ndim:
            dup = sorted({a for a in out if out.count(a) > 1})
            raise ShapeError(f"{op}: axes {tuple(items)!r} repeats axis {dup[0]}; give a permutation of "
                             f"range({ndim})")
        return tuple(out)

    def _permuted(self, x, axes):
        with self._device_scope(x):
            return self._layout_permute(x, axes)

    # ---- ops -------------------------------------------------------------------------------
    def transpose(self, x, axes=None):
        """numpy.transpose(x, axes) as a NEW C-contiguous array (not a view).

        x: any shape; any dtype of itemsize 1, 2, 4 or 8 (floats including bfloat16, ints, bool);
        any strides. axes: a permutation of range(x.ndim) (negative entries count from the end),
        or None to reverse the axes. Returns y of shape tuple(x.shape[a] for a in axes) and x's
        dtype, with y[i_0, ..., i_n-1] = x[...] at index i_j along axis axes[j]. Raises ShapeError
        (naming the axes) for a wrong length, a repeated or an out-of-range axis; DTypeError for
        other itemsizes. On CUDA: tiled through shared memory when x's fastest axis moves,
        a batched row copy when it stays last; x.nbytes read + x.nbytes written.
        """
        op = "transpose"
        x = self._layout_x(op, x)
        axes = tuple(range(x.ndim - 1, -1, -1)) if axes is None else self._layout_axes(op, axes, x.ndim, x.shape)
        return self._permuted(x, axes)

    def permute(self, x, axes):
        """transpose() with the axes required: a NEW C-contiguous array equal to x.transpose(axes)
        (torch's x.permute(*axes).contiguous()). Errors as transpose()."""
        op = "permute"
        x = self._layout_x(op, x)
        if axes is None:
            raise ShapeError(f"{op}: axes is required (a permutation of range({x.ndim})); use transpose() to "
                             f"reverse the axes")
        return self._permuted(x, self._layout_axes(op, axes, x.ndim, x.shape))

    def permute_backward(self, grad_out, axes):
        """Gradient of permute(x, axes): grad_out permuted by the inverse permutation, a NEW
        C-contiguous array of x's shape. grad_out: the shape permute() returned; axes: as given
        to permute()."""
        op = "permute_backward"
        g = self._layout_x(op, grad_out, "grad_out")
        axes = self._layout_axes(op, axes, g.ndim, g.shape)
        inverse = [0] * len(axes)
        for i, a in enumerate(axes):
            inverse[a] = i
        return self._permuted(g, tuple(inverse))

    def matrix_transpose(self, x):
        """Swap the last two axes (NeuralScript's matrix_transpose, numpy.matrix_transpose): a NEW
        C-contiguous array of shape x.shape[:-2] + (x.shape[-1], x.shape[-2]). x: at least 2-D
        (ShapeError otherwise); dtypes as transpose()."""
        op = "matrix_transpose"
        x = self._layout_x(op, x)
        if x.ndim < 2:
            raise ShapeError(f"{op}: x must have at least 2 dims (got shape {tuple(x.shape)}, {x.ndim}-D)")
        axes = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
        return self._permuted(x, axes)


class CpuLayoutHooks(LayoutOps):
    """NumPy implementations."""

    def _layout_permute(self, x, axes):
        import numpy as np
        return np.transpose(x, axes).copy(order="C")


class CudaLayoutHooks(LayoutOps):
    """CUDA kernels (cudakit.kernels.transpose), run on the device of x."""

    def _layout_permute(self, x, axes):
        from ..kernels import transpose
        return transpose.permute(x, axes)
