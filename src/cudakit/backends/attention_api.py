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

    def _attention_blhd_fwd(self, q, k, v, scale, causal, dtype_name):
        """(out (B, Lq, H, D) C-contiguous, lse (B, H, Lq)) of (B, L, H, D) q, k, v read in place by
        a backend that can (the CUDA backend's cuDNN path), or None for the transposing path."""
        return None

    def _attention_blhd_bwd(self, g, q, k, v, out, lse, scale, causal, dtype_name):
        """(dq, dk, dv) in (B, L, H, D) for (B, L, H, D) arrays read in place, or None (see above)."""
        return None

    # ---- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _check_layout(op: str, layout, arrays: dict) -> bool:
        """True for layout "blhd" (each array 4-D), False for "bhld"; ArgumentError otherwise."""
        if layout == "bhld":
            return False
        if layout != "blhd":
            raise ArgumentError(f"{op}: layout must be 'bhld' ((..., L, D) arrays) or 'blhd' ((B, L, H, D) "
                                f"arrays) (got {layout!r})")
        for name, x in arrays.items():
            require_array(op, name, x)
            if getattr(x, "ndim", None) != 4:
                raise ShapeError(f"{op}: with layout 'blhd' {name} must be (B, L, H, D) "
                                 f"(got shape {tuple(getattr(x, 'shape', ()))})")
        return True

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
    def attention(self, q, k, v, scale=None, causal: bool = False, *, layout: str = "bhld"):
        """softmax(q @ k^T * scale) @ v, fused: the (Lq, Lk) scores are never written out.

        q: (..., Lq, D); k, v: (..., Lk, D) with q's leading dims (e.g. batch, heads); float16,
        bfloat16 or float32, and float64 (by matrix products, the scores of a chunk of rows
        materialised; on the GPU too); D <= 128 on the GPU but for float64. scale: default
        1 / sqrt(D). causal: query i attends to keys j <= i (top-left aligned, as PyTorch's
        is_causal). Softmax statistics in float32. Returns q's shape and dtype.

        layout="blhd": q (B, Lq, H, D), k and v (B, Lk, H, D), e.g. strided views of one packed
        qkv projection (B, L, 3, H, D); the output comes back (B, Lq, H, D) C-contiguous, so
        reshape(B, Lq, H * D) merges the heads without a copy. The CUDA backend's cuDNN path reads
        such views in place; the other paths transpose them to (B, H, L, D) first."""
        return self.attention_with_lse(q, k, v, scale, causal, layout=layout)[0]

    def attention_with_lse(self, q, k, v, scale=None, causal: bool = False, *, layout: str = "bhld"):
        """attention() that also returns the log-sum-exp of each score row (..., Lq), float32
        (float64 for float64), which attention_backward needs: (out, lse). With layout "blhd" lse
        is (B, H, Lq)."""
        return self._attention_fwd("attention", q, k, v, scale, causal, None, layout)

    def flash_attention(self, q, k, v, scale=None, block_size: int = 64, causal: bool = False, *,
                        layout: str = "bhld"):
        """attention() with the key block size of the fused kernel named (16, 32, 64 or 128), as
        cuda_backend.flash_attention(q, k, v, scale, block_size=64) is called."""
        from ..kernels.attention import KEY_BLOCKS
        if isinstance(block_size, bool) or block_size not in KEY_BLOCKS:
            raise ArgumentError(f"flash_attention: block_size must be one of {KEY_BLOCKS} (got {block_size!r})")
        return self._attention_fwd("flash_attention", q, k, v, scale, causal, int(block_size), layout)[0]

    def _attention_fwd(self, op, q, k, v, scale, causal, block_n, layout="bhld"):
        if self._check_layout(op, layout, {"q": q, "k": k, "v": v}):
            return self._attention_fwd_blhd(op, q, k, v, scale, causal, block_n)
        arrs, name, scale = self._attn_args(op, {"q": q, "k": k, "v": v}, scale, causal)
        q, k, v = arrs["q"], arrs["k"], arrs["v"]
        mod = self._attention_module(name)
        lead = tuple(q.shape[:-2])
        n = math.prod(lead)
        with self._device_scope(q):
            out, lse = mod.forward(self._as_bhld(q, n), self._as_bhld(k, n), self._as_bhld(v, n), scale, bool(causal),
                                   name, block_n)
        return out.reshape(q.shape), lse.reshape(lead + (q.shape[-2],))

    def _attention_fwd_blhd(self, op, q, k, v, scale, causal, block_n):
        """The (B, L, H, D) forms: checked as their (B, H, L, D) views, run in place by the backend's
        blhd hook where it can, else through the (B, H, L, D) path and transposed back."""
        t = {a: x.swapaxes(1, 2) for a, x in (("q", q), ("k", k), ("v", v))}
        arrs, name, sc = self._attn_args(op, t, scale, causal)
        if block_n is None:
            q, k, v = (arrs[a].swapaxes(1, 2) for a in ("q", "k", "v"))   # the coerced arrays
            with self._device_scope(arrs["q"]):
                r = self._attention_blhd_fwd(q, k, v, sc, bool(causal), name)
            if r is not None:
                return r
        out, lse = self._attention_fwd(op, t["q"], t["k"], t["v"], sc, causal, block_n)
        return self._ascontiguous(out.swapaxes(1, 2)), lse

    def attention_backward(self, grad_out, q, k, v, out, lse, scale=None, causal: bool = False, *,
                           layout: str = "bhld"):
        """(grad_q, grad_k, grad_v) of out = attention(q, k, v, scale, causal) for dL/dout =
        grad_out (q's shape), from the forward's out and lse (attention_with_lse); the
        probabilities are recomputed, never stored. Same scale, causal and layout as the forward.
        Returns arrays of q's, k's and v's shapes in their dtype (C-contiguous (B, L, H, D) ones
        with layout "blhd")."""
        op = "attention_backward"
        blhd = self._check_layout(op, layout, {"grad_out": grad_out, "q": q, "k": k, "v": v, "out": out})
        named = {"q": q, "k": k, "v": v, "grad_out": grad_out, "out": out}
        if blhd:   # checked as the (B, H, L, D) views
            named = {a: x.swapaxes(1, 2) for a, x in named.items()}
        arrs, name, scale = self._attn_args(op, named, scale, causal)
        tq, tk, tv, tg, to = (arrs[a] for a in ("q", "k", "v", "grad_out", "out"))
        for a, x in (("grad_out", tg), ("out", to)):
            if tuple(x.shape) != tuple(tq.shape):
                raise ShapeError(f"{op}: {a} must have q's shape {tuple(tq.shape)} (got {tuple(x.shape)})")
        lead = tuple(tq.shape[:-2])
        n = math.prod(lead)
        require_array(op, "lse", lse)
        lse = self._coerce(lse, "lse")
        self._check_devices({"q": tq, "lse": lse})
        if tuple(lse.shape) != lead + (tq.shape[-2],):
            raise ShapeError(f"{op}: lse must have shape {lead + (tq.shape[-2],)} (got {tuple(lse.shape)})")
        acc = "float64" if name == "float64" else "float32"
        if not is_float(lse.dtype):
            raise DTypeError(f"{op}: lse must be a float array: float16, bfloat16, float32 or float64 "
                             f"(got {lse.dtype})")
        with self._device_scope(tq):
            if blhd:
                r = self._attention_blhd_bwd(*(x.swapaxes(1, 2) for x in (tg, tq, tk, tv, to)), lse, scale,
                                             bool(causal), name)
                if r is not None:
                    return r
            mod = self._attention_module(name)
            lse = self._ascontiguous(lse.astype(acc, copy=False)).reshape(n, tq.shape[-2])
            dq, dk, dv = mod.backward(self._as_bhld(tg, n), self._as_bhld(tq, n), self._as_bhld(tk, n),
                                      self._as_bhld(tv, n), self._as_bhld(to, n), lse, scale, bool(causal), name)
        dq, dk, dv = dq.reshape(tq.shape), dk.reshape(tk.shape), dv.reshape(tv.shape)
        if blhd:
            return tuple(self._ascontiguous(g.swapaxes(1, 2)) for g in (dq, dk, dv))
        return dq, dk, dv


class CpuAttentionHooks(AttentionOps):
    def _attention_module(self, dtype_name):
        from . import matmul_attention
        return matmul_attention


class CudaAttentionHooks(AttentionOps):
    def _attention_blhd_fwd(self, q, k, v, scale, causal, dtype_name):
        from ..kernels import attention
        return attention.forward_blhd(q, k, v, scale, causal, dtype_name)

    def _attention_blhd_bwd(self, g, q, k, v, out, lse, scale, causal, dtype_name):
        from ..kernels import attention
        return attention.backward_blhd(g, q, k, v, out, lse, scale, causal, dtype_name)

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
