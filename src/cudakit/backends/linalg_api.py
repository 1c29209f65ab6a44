"""The argument policy of matmul, linear and fused_linear_gelu (forward and backward), shared by
every backend as a mixin of Backend.

Shapes follow NumPy's matmul (1-D operands promoted and their dim removed again, batch dims
broadcast); linear follows PyTorch (weight is (out_features, in_features)). Inputs share one
supported dtype and one device. Every product goes through the backend module's `gemm` (cuBLAS or
NumPy), with transposed views passed as transposes rather than copied; 16-bit products accumulate
in float32 and are rounded once.
"""
from __future__ import annotations

import math

import numpy as np

from .checks import check_same_shape, check_size, check_writeable, require_out_array
from ..errors import ArgumentError, DTypeError, ShapeError


def _pad(batch: tuple, ndim: int) -> tuple:
    return (1,) * (ndim - len(batch)) + tuple(batch)


def _check_flag(op: str, name: str, v) -> bool:
    """A yes/no argument: a bool (None counts as False); an array here is a mistake worth naming."""
    if v is None:
        return False
    if not isinstance(v, (bool, np.bool_)):
        raise ArgumentError(f"{op}: {name} must be a bool (got {type(v).__name__}); pass {name}=True when the "
                            f"forward had one")
    return bool(v)


class LinalgOps:
    """matmul, linear, fused_linear_gelu and their backward passes (mixed into Backend)."""

    # ---- hooks a backend fills in ----------------------------------------------------------
    def _linalg_module(self):
        """The module with `gemm`, `linear_epilogue`, `dgrad_gelu`, `wgrad_bias` and `broadcast_copy`
        (signatures of cudakit.kernels.linalg)."""
        raise NotImplementedError

    # ---- helpers ---------------------------------------------------------------------------
    def _operand(self, x, batch: tuple):
        """(3-D C-contiguous array, transposed) holding x's matrices for the broadcast `batch`: x
        itself or its transposed view when one of them is C-contiguous (no copy), else a copy;
        its leading dim is 1 when x has one matrix, prod(batch) otherwise."""
        r, c = x.shape[-2:]
        xb = _pad(x.shape[:-2], len(batch))
        if math.prod(xb) != 1 and xb != tuple(batch):  # partly broadcast: materialise the batch
            x = self._linalg_module().broadcast_copy(x, tuple(batch) + (r, c))
        n = math.prod(x.shape[:-2])
        if x.flags.c_contiguous:
            return x.reshape(n, r, c), False
        t = x.swapaxes(-1, -2)
        if t.flags.c_contiguous:
            return t.reshape(n, c, r), True
        return self._ascontiguous(x).reshape(n, r, c), False

    def _mm_shapes(self, op: str, a, b):
        """(a as >= 2-D, b as >= 2-D, batch, M, K, N, result shape) of a @ b."""
        for name, x in (("a", a), ("b", b)):
            if x.ndim == 0:
                raise ShapeError(f"{op}: {name} must have at least 1 dim (got a 0-d array); use mul for scalars")
        a2 = a.reshape(1, a.shape[0]) if a.ndim == 1 else a
        b2 = b.reshape(b.shape[0], 1) if b.ndim == 1 else b
        m, k = a2.shape[-2:]
        k2, n = b2.shape[-2:]
        if k != k2:
            where = "dim" if b.ndim == 1 else "second-to-last dim"
            raise ShapeError(f"{op}: a's last dim ({k}) must equal b's {where} ({k2}); "
                             f"a is {tuple(a.shape)}, b is {tuple(b.shape)}")
        try:
            batch = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
        except ValueError:
            raise ShapeError(f"{op}: batch dims do not broadcast: a {tuple(a.shape)}, b {tuple(b.shape)}") from None
        shape = batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
        return a2, b2, batch, m, k, n, shape

    def _product(self, a3, ta, b3, tb, batch: int, rows: int, cols: int, dtype):
        """op(a3) @ op(b3) into a new (batch, rows, cols) array of `dtype`; one GEMM over all rows
        when b3 is shared and a3 is batched and not transposed."""
        gemm = self._linalg_module().gemm
        if b3.shape[0] == 1 and batch > 1 and not ta and batch * rows <= 2**31 - 1:
            out = self.empty((1, batch * rows, cols), dtype)
            gemm(a3.reshape(1, batch * rows, a3.shape[2]), b3, out, False, tb)
            return out.reshape(batch, rows, cols)
        out = self.empty((batch, rows, cols), dtype)
        return gemm(a3, b3, out, ta, tb)

    def _check_out(self, op: str, out, shape, dtype):
        require_out_array(op, out)
        out = self._coerce(out, "out")
        if tuple(out.shape) != tuple(shape):
            raise ShapeError(f"{op}: out must have shape {tuple(shape)} (got {tuple(out.shape)})")
        if out.dtype != dtype:
            raise DTypeError(f"{op}: out must have dtype {dtype} (got {out.dtype})")
        check_writeable(op, "out", out)
        return out

    # ---- matmul ----------------------------------------------------------------------------
    def matmul(self, a, b, out=None):
        """a @ b with NumPy's matmul rules.

        a: (..., M, K) or (K,); b: (..., K, N) or (K,); batch dims broadcast; one float dtype
        (float16, bfloat16, float32, float64). 16-bit inputs multiply in float32 (tensor cores on
        the GPU) and round once; float32 is not reduced to TF32. Returns (..., M, N) (a 1-D
        operand's dim removed), into `out` when given. CUDA: cuBLAS, transposed views without a copy.
        """
        op = "matmul"
        arrs, _ = self._norm_arrays(op, {"a": a, "b": b})
        a, b = arrs["a"], arrs["b"]
        a2, b2, batch, m, _k, n, shape = self._mm_shapes(op, a, b)
        check_size(op, "the result", shape, np.dtype(a.dtype).itemsize)   # (batch dims broadcast into it)
        if out is not None:
            out = self._check_out(op, out, shape, a.dtype)
            self._check_devices({"a": a, "out": out})
        with self._device_scope(a):
            a3, ta = self._operand(a2, batch)
            b3, tb = self._operand(b2, batch)
            r = self._product(a3, ta, b3, tb, math.prod(batch), m, n, a.dtype).reshape(shape)
            if out is None:
                return r
            out[...] = r
        return out

    def matrix_multiply(self, a, b):
        """matmul(a, b) (the name of CudaMath's API)."""
        return self.matmul(a, b)

    def matmul_backward(self, grad_out, a, b):
        """(grad_a, grad_b) of y = matmul(a, b) for dL/dy = grad_out (y's shape): grad_a =
        grad_out @ b^T and grad_b = a^T @ grad_out, summed over the batch dims each operand was
        broadcast along, with a's and b's shapes. One dtype; 16-bit accumulates in float32."""
        op = "matmul_backward"
        arrs, _ = self._norm_arrays(op, {"grad_out": grad_out, "a": a, "b": b})
        g, a, b = arrs["grad_out"], arrs["a"], arrs["b"]
        a2, b2, batch, m, k, n, shape = self._mm_shapes(op, a, b)
        if tuple(g.shape) != shape:
            raise ShapeError(f"{op}: grad_out must have the product's shape {shape} (got {tuple(g.shape)})")
        with self._device_scope(a):
            g3, tg = self._operand(g.reshape(batch + (m, n)), batch)
            a3, ta = self._operand(a2, batch)
            b3, tb = self._operand(b2, batch)
            nb = math.prod(batch)
            ga = self._grad_operand(a2, batch, lambda dt: self._product(g3, tg, b3, not tb, nb, m, k, dt))
            if b3.shape[0] == 1 and nb > 1 and not ta and not tg and nb * m <= 2**31 - 1:
                # b shared by every batch index: sum_i a_i^T g_i as one GEMM over all B * M rows
                gb = self.empty((1, k, n), a.dtype)
                rows = nb * m
                self._linalg_module().gemm(a3.reshape(1, rows, k), g3.reshape(1, rows, n), gb, True, False)
                gb = gb.reshape(b2.shape)
            else:
                gb = self._grad_operand(b2, batch, lambda dt: self._product(a3, not ta, g3, tg, nb, k, n, dt))
        return ga.reshape(a.shape), gb.reshape(b.shape)

    def _grad_operand(self, x2, batch, product):
        """The gradient of operand x2 from `product(dtype)` (one (rows, cols) matrix per batch
        index): as is when x2 has the full batch, else summed over the broadcast dims in float32
        (float64 for float64) and rounded once."""
        xb = _pad(x2.shape[:-2], len(batch))
        if xb == tuple(batch):
            return product(x2.dtype).reshape(x2.shape)
        acc = "float64" if x2.dtype == np.float64 else "float32"
        full = product(acc).reshape(tuple(batch) + tuple(x2.shape[-2:]))
        axes = tuple(i for i, (d, e) in enumerate(zip(xb, batch)) if d == 1 and e != 1)
        red = self.sum(full, axis=axes, keepdims=True) if axes else full
        # (copy=False: a float32 or float64 operand takes the sum as it is, no copy by CuPy's astype,
        # which a traced plan would not record)
        return red.reshape(x2.shape).astype(x2.dtype, copy=False)

    # ---- linear ----------------------------------------------------------------------------
    def _linear_args(self, op: str, named: dict) -> dict:
        """named coerced and checked: x (..., in_features), weight 2-D, bias (out_features,)."""
        arrs, _ = self._norm_arrays(op, named, optional=frozenset({"bias"}))
        x, w, bias = arrs["x"], arrs["weight"], arrs.get("bias")
        if w.ndim != 2:
            raise ShapeError(f"{op}: weight must be 2-D (out_features, in_features) (got {tuple(w.shape)})")
        if x.ndim < 1 or x.shape[-1] != w.shape[1]:
            raise ShapeError(f"{op}: x's last dim must be in_features = {w.shape[1]} (weight {tuple(w.shape)}); "
                             f"got x {tuple(x.shape)}")
        if bias is not None and tuple(bias.shape) != (w.shape[0],):
            raise ShapeError(f"{op}: bias must have shape ({w.shape[0]},) (out_features) (got {tuple(bias.shape)})")
        return arrs

    def _weight_operand(self, w):
        """(weight as a 3-D operand, transposed) for x @ weight^T."""
        w3, t = self._operand(w, ())
        return w3, not t

    def linear(self, x, weight, bias=None, *, residual=None):
        """x @ weight^T + bias (PyTorch's nn.Linear).

        x: (..., in_features); weight: (out_features, in_features) (its transposed view works
        without a copy); bias: (out_features,) or None; one float dtype. Returns (..., out_features).
        The bias is added to the float32 accumulator (cuBLASLt's bias epilogue on the GPU where
        out_features is a multiple of 8, else a float32 GEMM, the add, one rounding).

        residual: None, or an array of the result's shape and x's dtype added to it the same way,
        rounded once: a residual block's x + linear(h) without the add pass (a read of both and a
        write); on the GPU cuBLASLt reads it as the GEMM's C operand."""
        named = {"x": x, "weight": weight, "bias": bias}
        if residual is not None:
            named["residual"] = residual
        arrs = self._linear_args("linear", named)
        res = arrs.get("residual")
        if res is not None:
            check_same_shape("linear", "residual", res, tuple(arrs["x"].shape[:-1]) + (arrs["weight"].shape[0],),
                             "the result's shape")
        return self._linear(arrs["x"], arrs["weight"], arrs["bias"], False, False, res)[0]

    def _linear(self, x, w, bias, gelu: bool, want_pre: bool, residual=None):
        """(epilogue(x @ w^T + bias (+ residual)), the pre-activation or None): one GEMM with the bias
        (and residual) and GELU (tanh) in its epilogue where the backend module can
        (kernels/cublaslt.py says where), else the GEMM with the bias and a GELU pass, else a float32
        (float64) GEMM, the bias, residual and GELU applied to it and one rounding at the end
        (residual only without gelu)."""
        lead, fin, fout = tuple(x.shape[:-1]), w.shape[1], w.shape[0]
        rows = math.prod(lead)
        mod = self._linalg_module()
        with self._device_scope(x):
            x3 = self._ascontiguous(x).reshape(1, rows, fin)
            w3, tw = self._weight_operand(w)      # tw: w3 is stored (fout, fin)
            bias = None if bias is None else self._ascontiguous(bias)
            out = self.empty((1, rows, fout), x.dtype)
            pre = self.empty((1, rows, fout), x.dtype) if want_pre else None
            res3 = None if residual is None else self._ascontiguous(residual).reshape(1, rows, fout)
            done = mod.linear_epilogue(x3, w3, tw, out, bias, gelu, pre, res3)
            if not done and gelu and mod.linear_epilogue(x3, w3, tw, out, bias, False, None):
                if pre is not None:  # the GEMM with its bias epilogue is the pre-activation; one GELU pass
                    pre, out = out, self.gelu(out, "tanh")
                else:
                    self.gelu(out, "tanh", out=out)
                done = True
            if not done:
                acc = "float64" if x.dtype == np.float64 else "float32"
                h = mod.gemm(x3, w3, self.empty((1, rows, fout), acc), False, tw)
                if bias is not None:
                    self.add(h, bias.astype(acc), out=h)
                if res3 is not None:
                    self.add(h, res3.astype(acc), out=h)
                if pre is not None:
                    pre[...] = h
                if gelu:
                    self.gelu(h, "tanh", out=h)
                out[...] = h
        shape = lead + (fout,)
        return out.reshape(shape), (pre.reshape(shape) if want_pre else None)

    def linear_backward(self, grad_out, x, weight, bias: bool = True, *, gelu_pre=None):
        """(grad_x, grad_weight, grad_bias) of y = linear(x, weight, bias) for dL/dy = grad_out
        (..., out_features): grad_x = grad_out @ weight, x's shape; grad_weight = grad_out^T @ x over
        all rows, (out_features, in_features); grad_bias = grad_out summed over the rows,
        (out_features,), or None when `bias` (a bool: did the forward have one) is False. All in
        x's dtype; each is one GEMM or one reduction, 16-bit accumulating in float32.

        gelu_pre: None, or the pre-activation p of x = gelu(p) (tanh form; x's shape and dtype, as
        fused_linear_gelu_with_preact returns it): the first result is then the gradient of p,
        grad_x * gelu'(p), which an MLP's second linear hands to its first. On the GPU for 16-bit
        data and in_features a multiple of 8 that product is the grad_x GEMM's cuBLASLt epilogue
        (DGELU), rounded once, saving gelu_backward's pass (two reads and a write of grad_x's
        size); elsewhere the GEMM and then gelu_backward (the CPU: in float32, rounded once)."""
        op = "linear_backward"
        bias = _check_flag(op, "bias", bias)
        named = {"x": x, "weight": weight, "grad_out": grad_out}
        if gelu_pre is not None:
            named["gelu_pre"] = gelu_pre
        arrs = self._linear_args(op, named)
        x, w, g = arrs["x"], arrs["weight"], arrs["grad_out"]
        lead, fin, fout = tuple(x.shape[:-1]), w.shape[1], w.shape[0]
        if tuple(g.shape) != lead + (fout,):
            raise ShapeError(f"{op}: grad_out must have shape {lead + (fout,)} (got {tuple(g.shape)})")
        pre = arrs.get("gelu_pre")
        if pre is not None:
            check_same_shape(op, "gelu_pre", pre, x.shape)
        rows = math.prod(lead)
        mod = self._linalg_module()
        gemm = mod.gemm
        with self._device_scope(x):
            g3 = self._ascontiguous(g).reshape(1, rows, fout)
            x3 = self._ascontiguous(x).reshape(1, rows, fin)
            w3, tw = self._weight_operand(w)     # op(w3) = weight^T
            gx = self.empty((1, rows, fin), x.dtype)
            pre3 = None if pre is None else self._ascontiguous(pre).reshape(1, rows, fin)
            if pre3 is None or not mod.dgrad_gelu(g3, w3, tw, gx, pre3):
                gemm(g3, w3, gx, False, not tw)
                if pre3 is not None:
                    self.gelu_backward(gx, pre3, "tanh", out=gx)
            gw = self.empty((1, fout, fin), x.dtype)
            gb = mod.wgrad_bias(g3, x3, gw) if bias else None   # both in the weight-gradient GEMM
            if gb is None:
                gemm(g3, x3, gw, True, False)
                gb = self.sum(g3.reshape(rows, fout), axis=0) if bias else None
        return gx.reshape(x.shape), gw.reshape(w.shape), gb

    # ---- linear + GELU ---------------------------------------------------------------------
    def fused_linear_gelu(self, x, weight, bias=None, approximate: str = "tanh"):
        """gelu(linear(x, weight, bias)), x's shape with out_features last. approximate="tanh" (the
        default): on the GPU for 16-bit data and out_features a multiple of 8, one GEMM with the
        bias and GELU in its cuBLASLt epilogue (within one ulp of the correctly rounded tanh form,
        see kernels/cublaslt.py); for float32/float64 there, the GEMM with its bias epilogue and one
        GELU pass in place; elsewhere a float32 (float64) GEMM, bias and GELU, rounded once.
        approximate="none" (exact erf): linear(), then one GELU pass in place."""
        return self._linear_gelu(x, weight, bias, approximate, False)[0]

    def fused_linear_gelu_with_preact(self, x, weight, bias=None, approximate: str = "tanh"):
        """fused_linear_gelu() that also returns the pre-activation linear(x, weight, bias) its
        backward needs: (y, pre), both x's dtype; with the cuBLASLt epilogue both come out of the
        one GEMM."""
        return self._linear_gelu(x, weight, bias, approximate, True)

    def _linear_gelu(self, x, weight, bias, approximate, want_pre: bool):
        from .base import _gelu_op
        arrs = self._linear_args("fused_linear_gelu", {"x": x, "weight": weight, "bias": bias})
        if _gelu_op(approximate) == "gelu_tanh":
            return self._linear(arrs["x"], arrs["weight"], arrs["bias"], True, want_pre)
        pre = self._linear(arrs["x"], arrs["weight"], arrs["bias"], False, False)[0]
        if want_pre:
            return self.gelu(pre, approximate), pre
        return self.gelu(pre, approximate, out=pre), None

    def fused_linear_gelu_backward(self, grad_out, x, weight, pre, approximate: str = "tanh",
                                   bias: bool = True):
        """(grad_x, grad_weight, grad_bias) of y = fused_linear_gelu(x, weight, bias) for dL/dy =
        grad_out, from the pre-activation `pre` the forward returned: gelu_backward, then
        linear_backward (shapes and dtypes as there, pre's as grad_out's; grad_bias None when `bias`
        is False)."""
        op = "fused_linear_gelu_backward"
        arrs = self._linear_args(op, {"x": x, "weight": weight, "grad_out": grad_out, "pre": pre})
        want = tuple(arrs["x"].shape[:-1]) + (arrs["weight"].shape[0],)
        for name in ("grad_out", "pre"):   # (gelu_backward would broadcast one against the other)
            if tuple(arrs[name].shape) != want:
                raise ShapeError(f"{op}: {name} must have shape {want} (x's rows, out_features) "
                                 f"(got {tuple(arrs[name].shape)})")
        return self.linear_backward(self.gelu_backward(arrs["grad_out"], arrs["pre"], approximate), arrs["x"],
                                    arrs["weight"], bias)



class CpuLinalgHooks(LinalgOps):
    def _linalg_module(self):
        from . import cpu_linalg
        return cpu_linalg


class CudaLinalgHooks(LinalgOps):
    def _linalg_module(self):
        from ..kernels import linalg
        return linalg
