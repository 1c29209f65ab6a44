"""The argument policy of scaled-dot-product attention (forward and backward), shared by every
backend as a mixin of Backend.

q: (..., Lq, D), k and v: (..., Lk, D) with the same leading dims (batch, heads, ...); one dtype.
out = softmax(q k^T * scale (+ causal mask)) v, scale defaulting to 1 / sqrt(D). The leading dims
are flattened to one [BH, L, D] contiguous batch for the backend module (`_attention_module()`:
matmul_attention or kernels.attention), which runs on the device of q.
"""
from __future__ import annotations

import math


from .checks import check_bool, finite_scalar, require_array
from .normalization_api import is_float
from ..errors import ArgumentError, DTypeError, ShapeError


class AttentionOps:
    """attention, flash_attention and their backward (mixed into Backend)."""

    # ---- hooks a backend fills in ----------------------------------------------------------
    def _attention_module(self, dtype_name: str):
        """The module with forward/backward (signatures of cudakit.kernels.attention), or raise
        DTypeError for a dtype this backend does not take."""
        raise NotImplementedError

    # ---- helpers ---------------------------------------------------------------------------
    def _attn_args(self, op: str, named: dict, scale, causal) -> tuple:
        """(arrays, dtype name, scale as float): shapes checked, q/k/v 3-D contiguous views."""
        arrs, _ = self._norm_arrays(op, named)
        q, k, v = arrs["q"], arrs["k"], arrs["v"]
        for name, x in (("q", q), ("k", k), ("v", v)):
            if x.ndim < 2:
                raise ShapeError(f"{op}: {name} must be (..., length, head_dim) (got shape {tuple(x.shape)})")
        lead, d = tuple(q.shape[:-2]), q.shape[-1]
        lk = k.shape[-2]
        if tuple(k.shape) != lead + (lk, d) or tuple(v.shape) != lead + (lk, d):
            raise ShapeError(f"{op}: k and v must be (..., Lk, D) with q's leading dims and head_dim "
                             f"{lead + ('Lk', d)}; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
        if lk == 0:
            raise ShapeError(f"{op}: k and v need at least one position (got Lk = 0)")
        if d == 0:
            raise ShapeError(f"{op}: head_dim must be >= 1 (got 0)")
        if scale is None:
            scale = 1.0 / math.sqrt(d)
        scale = finite_scalar(op, "scale", scale)  # a 0-d array (cupy.sqrt's result) works too
        check_bool(op, "causal", causal, ints=True)
        name = self._check_dtype(q, "q")
        return arrs, name, scale

    def _as_bhld(self, x, n):
        return self._ascontiguous(x).reshape(n, x.shape[-2], x.shape[-1])

    # ---- ops -------------------------------------------------------------------------------
    def attention(self, q, k, v, scale=None, causal: bool = False):
        """softmax(q @ k^T * scale) @ v, fused: the (Lq, Lk) scores are never written out.

        q: (..., Lq, D); k, v: (..., Lk, D) with q's leading dims (e.g. batch, heads); float16,
        bfloat16 or float32, and float64 (by matrix products, the scores of a chunk of rows
        materialised; on the GPU too); D <= 128 on the GPU but for float64. scale: default
        1 / sqrt(D). causal: query i attends to keys j <= i (top-left aligned, as PyTorch's
        is_causal). Softmax statistics in float32. Returns q's shape and dtype."""
        return self.attention_with_lse(q, k, v, scale, causal)[0]

    def attention_with_lse(self, q, k, v, scale=None, causal: bool = False):
        """attention() that also returns the log-sum-exp of each score row (..., Lq), float32
        (float64 for float64), which attention_backward needs: (out, lse)."""
        return self._attention_fwd("attention", q, k, v, scale, causal, None)

    def flash_attention(self, q, k, v, scale=None, block_size: int = 64, causal: bool = False):
        """attention() with the key block size of the fused kernel named (16, 32, 64 or 128), as
        cuda_backend.flash_attention(q, k, v, scale, block_size=64) is called."""
        from ..kernels.attention import KEY_BLOCKS
        if isinstance(block_size, bool) or block_size not in KEY_BLOCKS:
            raise ArgumentError(f"flash_attention: block_size must be one of {KEY_BLOCKS} (got {block_size!r})")
        return self._attention_fwd("flash_attention", q, k, v, scale, causal, int(block_size))[0]

    def _attention_fwd(self, op, q, k, v, scale, causal, block_n):
        arrs, name, scale = self._attn_args(op, {"q": q, "k": k, "v": v}, scale, causal)
        q, k, v = arrs["q"], arrs["k"], arrs["v"]
        mod = self._attention_module(name)
        lead = tuple(q.shape[:-2])
        n = math.prod(lead)
        with self._device_scope(q):
            out, lse = mod.forward(self._as_bhld(q, n), self._as_bhld(k, n), self._as_bhld(v, n), scale, bool(causal),
                                   name, block_n)
        return out.reshape(q.shape), lse.reshape(lead + (q.shape[-2],))

    def attention_backward(self, grad_out, q, k, v, out, lse, scale=None, causal: bool = False):
        """(grad_q, grad_k, grad_v) of out = attention(q, k, v, scale, causal) for dL/dout =
        grad_out (q's shape), from the forward's out and lse (attention_with_lse); the
        probabilities are recomputed, never stored. Same scale and causal as the forward. Returns
        arrays of q's, k's and v's shapes in their dtype."""
        op = "attention_backward"
        arrs, name, scale = self._attn_args(op, {"q": q, "k": k, "v": v, "grad_out": grad_out, "out": out},
                                            scale, causal)
        q, k, v, g, o = (arrs[a] for a in ("q", "k", "v", "grad_out", "out"))
        for a, x in (("grad_out", g), ("out", o)):
            if tuple(x.shape) != tuple(q.shape):
                raise ShapeError(f"{op}: {a} must have q's shape {tuple(q.shape)} (got {tuple(x.shape)})")
        lead = tuple(q.shape[:-2])
        n = math.prod(lead)
        require_array(op, "lse", lse)
        lse = self._coerce(lse, "lse")
        self._check_devices({"q": q, "lse": lse})
        if tuple(lse.shape) != lead + (q.shape[-2],):
            raise ShapeError(f"{op}: lse must have shape {lead + (q.shape[-2],)} (got {tuple(lse.shape)})")
        acc = "float64" if name == "float64" else "float32"
        if not is_float(lse.dtype):
            raise DTypeError(f"{op}: lse must be a float array: float16, bfloat16, float32 or float64 "
                             f"(got {lse.dtype})")
        mod = self._attention_module(name)
        with self._device_scope(q):
            lse = self._ascontiguous(lse.astype(acc, copy=False)).reshape(n, q.shape[-2])
            dq, dk, dv = mod.backward(self._as_bhld(g, n), self._as_bhld(q, n), self._as_bhld(k, n), self._as_bhld(v, n),
                                      self._as_bhld(o, n), lse, scale, bool(causal), name)
        return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)


class CpuAttentionHooks(AttentionOps):
    def _attention_module(self, dtype_name):
        from . import matmul_attention
        return matmul_attention


class CudaAttentionHooks(AttentionOps):
    def _attention_module(self, dtype_name):
        if dtype_name == "float64":   # the fused kernels run on the tensor cores, which have no float64 path here
            from . import matmul_attention
            return matmul_attention
        from ..kernels import attention
        return attention

    def _attn_args(self, op, named, scale, causal):
        r = super()._attn_args(op, named, scale, causal)
        from ..kernels.attention import MAX_HEAD_DIM
        d = r[0]["q"].shape[-1]
        if d > MAX_HEAD_DIM and r[1] != "float64":
            raise ShapeError(f"{op}: head_dim must be <= {MAX_HEAD_DIM} on the GPU (got {d})")
        return r
