"""The argument policy of scaled-dot-product attention (forward and backward), shared by every
backend as a mixin of Backend.

q: (..., Lq, D), k and v: (..., Lk, D) with the same leading dims (batch, heads, ...); one dtype.
out = softmax(q k^T * scale (+ causal mask)) v, scale defaulting to 1 / sqrt(D). The leading dims
are flattened to one [BH, L, D] contiguous batch for the backend module (`_attention_module()`:
matmul_attention or kernels.attention), which runs on the device of q.
"""
from __future__ import annotations

import math
import numbers

import numpy as np


from .attention_masks import Masks, check_window
from .checks import check_bool, check_scale_range, finite_scalar, require_array
from .normalization_api import is_float
from ..errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError



def _lead_lse(lse, lead: tuple, lq: int):
    """lse [BH, Lq] as lead + (Lq,), or None (a forward that wrote no statistics)."""
    return None if lse is None else lse.reshape(lead + (lq,))

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

    def _attention_blhd_bwd(self, g, q, k, v, out, lse, scale, causal, dtype_name, packed: bool = False):
        """(dq, dk, dv) in (B, L, H, D) for (B, L, H, D) arrays read in place, or None (see above);
        packed: written as the thirds of one new (B, L, 3, H, D) array where the backend can."""
        return None

    def _attention_blhd_in_place_fwd(self, q, k, v, scale, masks: Masks, dtype_name: str, block_n, copy):
        """(out (B, Lq, H, D) C-contiguous, lse (B, H, Lq)) of attention on (B, L, H, D) q, k, v with
        any masks, by a backend kernel that reads them in place, or copy()'s (the (B, H, L, D) path)
        where the backend chose that; None: the backend has no such kernel (copy() then runs)."""
        return None

    def _attention_blhd_in_place_bwd(self, g, q, k, v, out, lse, scale, masks: Masks, dtype_name: str,
                                     deterministic: bool, finish, copy, packed: bool = False):
        """The gradients of _attention_blhd_in_place_fwd: finish(dq, dk, dv, db) of the kernel's
        (dq (B, Lq, H, D), dk, dv (B, Lk, H, D) of each q head, the bias's gradient in Masks' 4-D
        form or None; packed: dq, dk, dv the thirds of one (B, L, 3, H, D) array where the kernel
        can write them so), or copy()'s where the backend chose that; None as there."""
        return None

    def _packed_base(self, dq, dk, dv):
        """The C-contiguous (B, L, 3, H, D) array whose [:, :, 0], [:, :, 1], [:, :, 2] dq, dk, dv
        are (the cuDNN path writes them so for qkv_packed), or None."""
        return None

    def _pack_qkv_grads(self, dq, dk, dv):
        """dq, dk, dv (B, L, H, D) as one C-contiguous (B, L, 3, H, D) array: the one they already
        are the thirds of, else a new one they are copied into."""
        base = self._packed_base(dq, dk, dv)
        if base is not None:
            return base
        b, length, h, d = dq.shape
        out = self.empty((b, length, 3, h, d), dq.dtype)
        for i, g in enumerate((dq, dk, dv)):
            out[:, :, i] = g
        return out

    # ---- helpers ---------------------------------------------------------------------------
    def _check_layout(self, op: str, layout, arrays: dict):
        """None for layout "bhld"; for "blhd" the arrays (coerced: nested lists as arrays), each 4-D, with
        shapes that agree as given, (B, L, H, D): k and v one shape with q's batch and head_dim and
        heads Hkv equal to q's H or dividing it, grad_out and out q's shape (the errors name the
        shapes the caller passed, not the (B, H, L, D) views the checks after it see). ArgumentError
        for another layout."""
        if layout == "bhld":
            return None
        if not isinstance(layout, str) or layout != "blhd":
            err = ArgumentError if isinstance(layout, str) else ArgumentTypeError
            raise err(f"{op}: layout must be 'bhld' ((..., L, D) arrays) or 'blhd' ((B, L, H, D) "
                      f"arrays) (got {layout!r})")
        out = {}
        for name, x in arrays.items():
            require_array(op, name, x)
            if isinstance(x, (list, tuple)):
                x = self._coerce(x, name)
            if getattr(x, "ndim", None) != 4:
                raise ShapeError(f"{op}: with layout 'blhd' {name} must be (B, L, H, D) "
                                 f"(got shape {tuple(getattr(x, 'shape', ()))})")
            out[name] = x
        qs, ks, vs = (tuple(out[a].shape) for a in ("q", "k", "v"))
        if ks != vs or ks[0] != qs[0] or ks[3] != qs[3]:
            raise ShapeError(f"{op}: with layout 'blhd' k and v must be (B, Lk, Hkv, D) of one shape with q's "
                             f"batch and head_dim (B = {qs[0]}, D = {qs[3]}); got q {qs}, k {ks}, v {vs}")
        if ks[2] != qs[2] and not (1 <= ks[2] < qs[2] and qs[2] % ks[2] == 0):
            raise ShapeError(f"{op}: k and v have {ks[2]} heads and q has {qs[2]}: grouped-query attention needs "
                             f"1 <= Hkv <= H with Hkv dividing H (layout 'blhd': heads are dim 2)")
        for a in ("grad_out", "out"):
            if a in out and tuple(out[a].shape) != qs:
                raise ShapeError(f"{op}: {a} must have q's shape {qs} (got {tuple(out[a].shape)})")
        return out

    def _bias(self, op: str, attn_bias, q, lk: int):
        """(4-D view (Bb, Hb, Lqb, Lkb) of attn_bias for Masks, heads per batch) after checking that
        it is a float array on q's device broadcastable to q's leading dims + (Lq, Lk). The leading
        dims before the heads merge into one (a copy only where the bias broadcasts some of them
        and not others)."""
        require_array(op, "attn_bias", attn_bias)
        bias = self._coerce(attn_bias, "attn_bias")
        if not is_float(bias.dtype):
            raise DTypeError(f"{op}: attn_bias must be a float array (got {bias.dtype})")
        self._check_devices({"q": q, "attn_bias": bias})
        lead, lq = tuple(q.shape[:-2]), q.shape[-2]
        full = lead + (lq, lk)
        shape = tuple(bias.shape)
        if len(shape) > len(full) or any(b not in (1, f) for b, f in zip(shape[::-1], full[::-1])):
            raise ShapeError(f"{op}: attn_bias of shape {shape} cannot broadcast to the scores' shape {full} "
                             "(q's leading dims, Lq, Lk)")
        padded = (1,) * (len(full) - len(shape)) + shape
        heads = lead[-1] if lead else 1
        outer, bouter = lead[:-1], padded[:-3]
        if any(b != 1 for b in bouter) and bouter != outer:   # some outer dims broadcast, others not
            bias = self._xp().broadcast_to(bias.reshape(padded), outer + padded[-3:])
            bias = self._ascontiguous(bias)
            bouter = outer
        hb = padded[-3] if lead else 1
        return bias.reshape((math.prod(bouter), hb) + padded[-2:]), heads

    def _masks(self, op: str, q, lk: int, causal, window, key_lengths, dtype_name: str, attn_bias=None,
               dropout=(0.0, 0)) -> Masks:
        """Masks of the call, checked: window None or (left, right) of ints >= 0 or None; key_lengths
        None or integer (B,) (B: the first leading dim of q's (B, ...) batch, 1 for 2-D q), on q's
        device, each in [0, Lk]. A host key_lengths is checked here; one already on the GPU is
        checked by the forward kernel, which records a bad value in the device's error flag (an
        ArgumentError at the next cudakit.check() or synchronising call: checking here would wait
        for the GPU) -- but for float64, whose unfused path has no such kernel: checked here."""
        lead = tuple(q.shape[:-2])
        window = check_window(op, window)
        b = lead[0] if lead else 1
        heads = math.prod(lead[1:]) if lead else 1
        bias, bias_heads = (None, 1) if attn_bias is None else self._bias(op, attn_bias, q, lk)
        drop = _dropout(op, *dropout)
        if key_lengths is None:
            return Masks(causal, window, bias=bias, bias_heads=bias_heads, dropout=drop)
        x, n = self._int_array(op, "key_lengths", key_lengths)
        host = n is not None
        if tuple(x.shape) != (b,):
            raise ShapeError(f"{op}: key_lengths must have shape ({b},), one length per batch (got {tuple(x.shape)})")
        if not host:
            self._check_devices({"q": q, "key_lengths": x})
        if b and (host or dtype_name == "float64"):
            if not host:
                n = np.asarray(x) if isinstance(x, np.ndarray) else x.get()   # float64: a wait
            bad = np.flatnonzero((n < 0) | (n > lk))
            if bad.size:
                i = int(bad[0])
                raise ArgumentError(f"{op}: key_lengths[{i}] = {int(n[i])} is outside [0, Lk = {lk}]")
        return Masks(causal, window, self._index_array(x), heads, bias, bias_heads, drop)

    def _int_array(self, op: str, arg: str, value):
        """(value as an integer array of the backend, its host values or None): a host list or NumPy
        array is copied to the backend's device (a GPU array avoids the copy)."""
        host = None
        if isinstance(value, (list, tuple, np.ndarray)):
            try:   # (an empty list has no element to take a dtype from: NumPy's float64 is not its dtype)
                host = value = np.asarray(value, np.int64 if isinstance(value, (list, tuple)) and not value else None)
            except ValueError:   # (a ragged nested list)
                raise ArgumentTypeError(f"{op}: {arg} must be an integer array (got a ragged list {value!r})") \
                    from None
            if value.dtype == object:
                raise ArgumentTypeError(f"{op}: {arg} must be an integer array (got {value!r})")
        x = self._xp().asarray(value) if host is not None else self._coerce(value, arg)
        if np.dtype(x.dtype).kind not in "iu":
            raise DTypeError(f"{op}: {arg} must be an integer array (got {x.dtype})")
        return x, host

    def _index_array(self, x):
        """x (integers) as the C-contiguous int32 or int64 array the kernels read."""
        return self._ascontiguous(x if x.dtype in (np.int32, np.int64) else x.astype(np.int64))

    def _attn_args(self, op: str, named: dict, scale, causal) -> tuple:
        """(arrays, dtype name, scale as float): shapes checked, q/k/v 3-D contiguous views."""
        arrs, _ = self._norm_arrays(op, named)
        q, k, v = arrs["q"], arrs["k"], arrs["v"]
        for name, x in (("q", q), ("k", k), ("v", v)):
            if x.ndim < 2:
                raise ShapeError(f"{op}: {name} must be (..., length, head_dim) (got shape {tuple(x.shape)})")
        lead, d = tuple(q.shape[:-2]), q.shape[-1]
        lk = k.shape[-2]
        kv_lead = tuple(k.shape[:-2])
        gqa = len(lead) >= 1 and kv_lead[:-1] == lead[:-1] and len(kv_lead) == len(lead) and kv_lead != lead
        if gqa and lead[-1] >= kv_lead[-1] >= 1 and lead[-1] % kv_lead[-1] == 0 \
                and tuple(v.shape) == tuple(k.shape) and k.shape[-1] == d:
            pass   # grouped-query attention: q's H heads share k's and v's Hkv (Hkv divides H)
        elif gqa and tuple(v.shape) == tuple(k.shape) and k.shape[-1] == d:
            raise ShapeError(f"{op}: k and v have {kv_lead[-1]} heads and q has {lead[-1]}: grouped-query attention "
                             f"needs 1 <= Hkv <= H with Hkv dividing H")
        elif tuple(k.shape) != lead + (lk, d) or tuple(v.shape) != lead + (lk, d):
            raise ShapeError(f"{op}: k and v must be (..., Lk, D) with q's leading dims and head_dim "
                             f"{lead + ('Lk', d)}, or with Hkv heads dividing q's H (grouped-query); "
                             f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
        if lk == 0:
            raise ShapeError(f"{op}: k and v need at least one position (got Lk = 0)")
        if d == 0:
            raise ShapeError(f"{op}: head_dim must be >= 1 (got 0)")
        if scale is None:
            scale = 1.0 / math.sqrt(d)
        scale = finite_scalar(op, "scale", scale)  # a 0-d array (cupy.sqrt's result) works too
        check_bool(op, "causal", causal, ints=True)
        name = self._check_dtype(q, "q", op)
        return arrs, name, check_scale_range(op, scale, name)

    def _as_bhld(self, x, n):
        return self._ascontiguous(x).reshape(n, x.shape[-2], x.shape[-1])

    def _as_bhsd(self, q, k, v):
        """q, k, v as C-contiguous (B, H, L, D) and (B, Hkv, L, D) arrays, the leading dims before the
        heads flattened into B (grouped-query attention)."""
        return tuple(self._ascontiguous(x).reshape((-1,) + tuple(x.shape[-3:])) for x in (q, k, v))

    def _repeat_heads(self, x, groups: int):
        """x (..., Hkv, L, D) with each head repeated `groups` times: (..., Hkv groups, L, D), a copy
        (the paths without grouped-query kernels)."""
        xp = self._xp()
        bits = x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])
        return xp.repeat(bits, groups, axis=-3).view(x.dtype)

    def _sum_groups(self, x, groups: int, kv_shape: tuple):
        """(..., Hkv groups, L, D) gradients summed over each group of heads: (..., Hkv, L, D)."""
        lead = kv_shape[:-3]
        hkv, lk, d = kv_shape[-3:]
        return self.sum(x.reshape(lead + (hkv, groups, lk, d)), axis=len(lead) + 1)

    def _gqa_in_place(self, dtype_name: str, n: int, masks: Masks, lead: tuple, d: int = 0) -> bool:
        """Whether the backend's fused kernels read grouped-query k, v in place for this call
        (else the heads are repeated for the fused path)."""
        return False

    def _cast_like(self, x, dtype):
        """x (a float32 or float64 gradient) in `dtype` (the array it is the gradient of)."""
        return x if x.dtype == dtype else x.astype(dtype)

    def _attention_gqa_fwd(self, q, k, v, scale, causal, dtype_name, need_lse: bool = True):
        """(out (B, H, Lq, D), lse (B, H, Lq)) of grouped-query attention for C-contiguous q
        (B, H, Lq, D) and k, v (B, Hkv, Lk, D) by a backend kernel that reads the shared heads in
        place (the CUDA backend's cuDNN path), or None: the heads are then repeated.
        need_lse=False: lse may be None."""
        return None

    def _attention_gqa_bwd(self, g, q, k, v, out, lse, scale, causal, dtype_name):
        """(dq (B, H, Lq, D), dk, dv (B, Hkv, Lk, D)) of _attention_gqa_fwd, or None."""
        return None

    # ---- ops -------------------------------------------------------------------------------
    def attention(self, q, k, v, scale=None, causal: bool = False, *, attn_bias=None, window=None,
                  key_lengths=None, layout: str = "bhld", dropout_p: float = 0.0, seed: int = 0):
        """softmax(q @ k^T * scale) @ v, fused: the (Lq, Lk) scores are never written out.

        q: (..., Lq, D); k, v: (..., Lk, D) with q's leading dims (e.g. batch, heads); float16,
        bfloat16 or float32, and float64 (by matrix products, the scores of a chunk of rows
        materialised; on the GPU too); D <= 256 on the GPU but for float64. scale: default
        1 / sqrt(D). Softmax statistics in float32. Returns q's shape and dtype.

        Masks (every backend and path; row i of the queries sits at key position i + Lk - Lq,
        aligned bottom-right as FlashAttention-2 does, which for Lq == Lk is PyTorch's top-left
        is_causal):
        causal: query i attends keys j <= i + Lk - Lq.
        window=(left, right): keys from left before to right after that position (None: no bound
        on that side; with causal, right is capped at 0).
        key_lengths: integer (B,) array (B: q's first dim; a host list or array is copied to the
        device), keys at or past key_lengths[b] masked for batch b. Values outside [0, Lk] raise
        ArgumentError: here for host arrays, at the next cudakit.check() or synchronising call for
        GPU arrays (found by the kernel).
        attn_bias: a float array broadcastable to the scores, q's leading dims + (Lq, Lk) (e.g.
        (B, H, Lq, Lk), (1, H, Lq, Lk) for ALiBi or a relative-position bias, (B, 1, 1, Lk) for
        padding), added to q k^T * scale before the softmax; -inf entries mask. Its gradient comes
        from attention_backward(..., attn_bias=...). On the GPU the Triton kernels read it in
        place by its strides, or cuDNN's graphs (16-bit, the bias in q's dtype over every query row
        and key, broadcast over batch or heads at most), whichever was timed faster.
        A row that attends no key gets output 0 (and lse -inf), not NaN.
        dropout_p, seed: dropout on the probabilities (softmax, then each probability kept with
        probability 1 - dropout_p and scaled by 1 / (1 - dropout_p)): the mask is a pure function of
        (seed, dropout_p and the call's signature), never stored: attention_backward regenerates it
        from the same seed. The 16-bit GPU calls cuDNN takes draw it from cuDNN's fused dropout (its
        own Philox stream); the others, and every call under CUDAKIT_ATTENTION_DROPOUT=cudakit, from
        cudakit.dropout's Philox stream over the score's index (t Lq + i) Lk + j (q's flattened
        leading dims t), which the CPU backend draws too.

        layout="blhd": q (B, Lq, H, D), k and v (B, Lk, H, D), e.g. strided views of one packed
        qkv projection (B, L, 3, H, D); the output comes back (B, Lq, H, D) C-contiguous, so
        reshape(B, Lq, H * D) merges the heads without a copy. The CUDA backend reads such views in
        place: cuDNN without masks beyond causal, the Triton kernels with any (each view with unit
        stride along D and its heads D apart), timed against transposing them to (B, H, L, D)
        first (which has the float32 forms of its own), the faster kept per signature.

        On the CUDA backend's cuDNN path attention() on (B, H, L, D) arrays (grouped-query ones
        included) runs cuDNN's inference graph, which writes no softmax statistics (what torch's
        SDPA runs for inputs that need no gradient); layout="blhd" and flash_attention run the
        graph that writes them. Use attention_with_lse when a backward follows."""
        return self._attention_fwd("attention", q, k, v, scale, causal, None, layout, window, key_lengths, attn_bias,
                                   (dropout_p, seed), need_lse=False)[0]

    def attention_with_lse(self, q, k, v, scale=None, causal: bool = False, *, attn_bias=None, window=None,
                           key_lengths=None, layout: str = "bhld", dropout_p: float = 0.0, seed: int = 0):
        """attention() that also returns the log-sum-exp of each score row (..., Lq), float32
        (float64 for float64), which attention_backward needs: (out, lse). With layout "blhd" lse
        is (B, H, Lq). A row that attends no key has lse -inf."""
        return self._attention_fwd("attention_with_lse", q, k, v, scale, causal, None, layout, window, key_lengths, attn_bias,
                                   (dropout_p, seed))

    def flash_attention(self, q, k, v, scale=None, block_size: int = 64, causal: bool = False, *,
                        attn_bias=None, window=None, key_lengths=None, layout: str = "bhld", dropout_p: float = 0.0,
                        seed: int = 0):
        """attention() with the key block size of the fused kernel named (16, 32, 64 or 128), as
        cuda_backend.flash_attention(q, k, v, scale, block_size=64) is called."""
        from ..kernels.attention import KEY_BLOCKS
        if not isinstance(block_size, numbers.Integral) or isinstance(block_size, (bool, np.bool_)) \
                or block_size not in KEY_BLOCKS:   # an integer (np.int64 too), not 64.0 or True
            err = ArgumentError if isinstance(block_size, numbers.Integral) else ArgumentTypeError
            raise err(f"flash_attention: block_size must be one of {KEY_BLOCKS} (got {block_size!r})")
        return self._attention_fwd("flash_attention", q, k, v, scale, causal, int(block_size), layout, window,
                                   key_lengths, attn_bias, (dropout_p, seed))[0]

    def _attention_fwd(self, op, q, k, v, scale, causal, block_n, layout="bhld", window=None, key_lengths=None,
                       attn_bias=None, dropout=(0.0, 0), need_lse: bool = True):
        """(out, lse) of an attention forward; need_lse=False (attention()): lse may be None where a
        path that writes no statistics ran (cuDNN's inference graph)."""
        blhd = self._check_layout(op, layout, {"q": q, "k": k, "v": v})
        if blhd is not None:
            return self._attention_fwd_blhd(op, blhd["q"], blhd["k"], blhd["v"], scale, causal, block_n, window,
                                            key_lengths, attn_bias, dropout)
        arrs, name, scale = self._attn_args(op, {"q": q, "k": k, "v": v}, scale, causal)
        q, k, v = arrs["q"], arrs["k"], arrs["v"]
        masks = self._masks(op, q, k.shape[-2], causal, window, key_lengths, name, attn_bias, dropout)
        return self._attention_fwd_masked(q, k, v, scale, causal, block_n, masks, name, need_lse)

    def _attention_fwd_masked(self, q, k, v, scale, causal, block_n, masks: Masks, name: str, need_lse: bool = True):
        """_attention_fwd on checked (..., L, D) arrays and their masks."""
        lead = tuple(q.shape[:-2])
        mod = self._attention_module(name)
        n = math.prod(lead)
        groups = _groups(q, k)
        plain = masks.plain
        with self._device_scope(q):
            if groups > 1:
                if block_n is None and plain:
                    r = self._attention_gqa_fwd(*self._as_bhsd(q, k, v), scale, bool(causal), name, need_lse)
                    if r is not None:
                        return r[0].reshape(q.shape), _lead_lse(r[1], lead, q.shape[-2])
                if self._gqa_in_place(name, n, masks, lead, q.shape[-1]):   # k, v read in place, no repeat
                    out, lse = mod.forward(self._as_bhld(q, n), self._as_bhld(k, n // groups),
                                           self._as_bhld(v, n // groups), scale, bool(causal), name, block_n,
                                           masks=masks, groups=groups, q_heads=lead[-1], need_lse=need_lse)
                    return out.reshape(q.shape), _lead_lse(lse, lead, q.shape[-2])
                k, v = self._repeat_heads(k, groups), self._repeat_heads(v, groups)
            out, lse = mod.forward(self._as_bhld(q, n), self._as_bhld(k, n), self._as_bhld(v, n), scale, bool(causal),
                                   name, block_n, masks=masks, need_lse=need_lse)
        return out.reshape(q.shape), _lead_lse(lse, lead, q.shape[-2])

    def _attention_fwd_blhd(self, op, q, k, v, scale, causal, block_n, window=None, key_lengths=None,
                            attn_bias=None, dropout=(0.0, 0)):
        """The (B, L, H, D) forms: checked as their (B, H, L, D) views, run in place by the backend's
        blhd hook where it can (no masks beyond causal), else by its in-place hook for every mask
        (_attention_blhd_in_place_fwd), else through the (B, H, L, D) path and transposed back."""
        t = {a: x.swapaxes(1, 2) for a, x in (("q", q), ("k", k), ("v", v))}
        arrs, name, sc = self._attn_args(op, t, scale, causal)
        plain = window is None and key_lengths is None and attn_bias is None and _dropout(op, *dropout) is None
        q, k, v = (arrs[a].swapaxes(1, 2) for a in ("q", "k", "v"))   # the coerced arrays
        if block_n is None and plain:
            with self._device_scope(arrs["q"]):
                r = self._attention_blhd_fwd(q, k, v, sc, bool(causal), name)
            if r is not None:
                return r
        masks = self._masks(op, arrs["q"], k.shape[1], causal, window, key_lengths, name, attn_bias, dropout)

        def copy():
            out, lse = self._attention_fwd_masked(arrs["q"], arrs["k"], arrs["v"], sc, causal, block_n, masks, name)
            return self._ascontiguous(out.swapaxes(1, 2)), lse
        with self._device_scope(arrs["q"]):
            r = self._attention_blhd_in_place_fwd(q, k, v, sc, masks, name, block_n, copy)
        return copy() if r is None else r

    def attention_backward(self, grad_out, q, k, v, out, lse, scale=None, causal: bool = False, *,
                           attn_bias=None, window=None, key_lengths=None, layout: str = "bhld",
                           deterministic: bool = False, dropout_p: float = 0.0, seed: int = 0,
                           qkv_packed: bool = False):
        """(grad_q, grad_k, grad_v) of out = attention(q, k, v, scale, causal, window=...,
        key_lengths=...) for dL/dout = grad_out (q's shape), from the forward's out and lse
        (attention_with_lse); the probabilities are recomputed from lse (the float32 backward on
        the GPU may write them, and dS, to a workspace of at most 1 GiB a chunk of heads where that
        was timed faster: kernels/attention_materialized.py). Same scale, masks and layout as the
        forward. Returns arrays of q's, k's and v's shapes in their dtype
        (C-contiguous (B, L, H, D) ones with layout "blhd"). With attn_bias (the forward's): a
        fourth, the bias's gradient (dL/d scores, summed over the dims the bias broadcasts) in
        attn_bias's shape and dtype.

        deterministic=True: the gradients are bitwise the same on every run with the same inputs
        (on the GPU the Triton kernels, which sum without atomics, not cuDNN's default backward,
        whose dQ may not be; head_dim <= 256; a call whose forward ran cuDNN's fused dropout runs
        cuDNN's deterministic backward). The CPU backend and float64 are deterministic anyway.

        qkv_packed=True (layout "blhd", q, k and v of one shape): dq, dk and dv come back as one
        C-contiguous (B, L, 3, H, D) array dqkv, dq = dqkv[:, :, 0] and so on (the bias's gradient
        after it with attn_bias), as FlashAttention's qkvpacked backward: the gradient of a packed
        QKV projection's output whose thirds were q, k and v. On the GPU cuDNN's backward and the
        Triton kernels reading (B, L, H, D) arrays in place write the three into it; elsewhere they
        are copied in."""
        op = "attention_backward"
        check_bool(op, "deterministic", deterministic)
        packed = check_bool(op, "qkv_packed", qkv_packed)
        given = self._check_layout(op, layout, {"grad_out": grad_out, "q": q, "k": k, "v": v, "out": out})
        blhd = given is not None
        if packed and (not blhd or tuple(given["k"].shape) != tuple(given["q"].shape)):
            raise ArgumentError(f"{op}: qkv_packed=True needs layout 'blhd' and q, k, v of one shape (B, L, H, D) "
                                f"(the thirds of one packed (B, L, 3, H, D) array); got layout {layout!r}"
                                + (f", q {tuple(given['q'].shape)}, k {tuple(given['k'].shape)}" if blhd else ""))
        r = self._attention_backward(op, given, grad_out, q, k, v, out, lse, scale, causal, attn_bias, window,
                                     key_lengths, deterministic, dropout_p, seed, packed)
        if not packed:
            return r
        dqkv = self._pack_qkv_grads(*r[:3])
        return dqkv if len(r) == 3 else (dqkv,) + tuple(r[3:])

    def _attention_backward(self, op, given, grad_out, q, k, v, out, lse, scale, causal, attn_bias, window,
                            key_lengths, deterministic, dropout_p, seed, packed):
        """attention_backward's gradients after the layout check (given: _check_layout's arrays)."""
        blhd = given is not None
        named = {"q": q, "k": k, "v": v, "grad_out": grad_out, "out": out}
        if blhd:   # checked as the (B, H, L, D) views
            named = {a: given[a].swapaxes(1, 2) for a in named}
        arrs, name, scale = self._attn_args(op, named, scale, causal)
        tq, tk, tv, tg, to = (arrs[a] for a in ("q", "k", "v", "grad_out", "out"))
        for a, x in (("grad_out", tg), ("out", to)):
            if tuple(x.shape) != tuple(tq.shape):
                raise ShapeError(f"{op}: {a} must have q's shape {tuple(tq.shape)} (got {tuple(x.shape)})")
        lead = tuple(tq.shape[:-2])
        require_array(op, "lse", lse)
        lse = self._coerce(lse, "lse")
        self._check_devices({"q": tq, "lse": lse})
        if not is_float(lse.dtype):   # (first: a string or an object made into a 0-d array is a wrong type)
            raise DTypeError(f"{op}: lse must be a float array: float16, bfloat16, float32 or float64 "
                             f"(got {lse.dtype})")
        if tuple(lse.shape) != lead + (tq.shape[-2],):
            raise ShapeError(f"{op}: lse must have shape {lead + (tq.shape[-2],)} (got {tuple(lse.shape)})")
        masks = self._masks(op, tq, tk.shape[-2], causal, window, key_lengths, name, attn_bias, (dropout_p, seed))
        plain = masks.plain and not deterministic
        groups = _groups(tq, tk)
        with self._device_scope(tq):
            if blhd and plain:
                r = self._attention_blhd_bwd(*(x.swapaxes(1, 2) for x in (tg, tq, tk, tv, to)), lse, scale,
                                             bool(causal), name, packed)
                if r is not None:
                    return r
            if blhd:
                def finish(dq, dk, dv, db):   # (dk, dv of each q head; the bias's gradient in Masks' form)
                    if groups > 1:
                        b, lk, _, d = dk.shape
                        dk, dv = (self.sum(x.reshape(b, lk, tk.shape[1], groups, d), axis=3) for x in (dk, dv))
                    if attn_bias is None:
                        return dq, dk, dv
                    return dq, dk, dv, self._cast_like(self._bias_grad(db, attn_bias, lead), masks.bias.dtype)
                r = self._attention_blhd_in_place_bwd(
                    *(x.swapaxes(1, 2) for x in (tg, tq, tk, tv, to)), lse, scale, masks, name, bool(deterministic),
                    finish, lambda: self._attention_backward_bhld(tg, tq, tk, tv, to, lse, scale, causal, name, masks,
                                                                  deterministic, attn_bias, blhd), packed)
                if r is not None:
                    return r
            return self._attention_backward_bhld(tg, tq, tk, tv, to, lse, scale, causal, name, masks, deterministic,
                                                 attn_bias, blhd)

    def _attention_backward_bhld(self, tg, tq, tk, tv, to, lse, scale, causal, name: str, masks: Masks,
                                 deterministic, attn_bias, blhd: bool):
        """attention_backward's gradients through the (B, H, L, D) path: tg, tq, tk, tv, to checked
        (..., L, D) arrays (the (B, H, L, D) views of (B, L, H, D) arrays with blhd, whose gradients
        come back transposed to (B, L, H, D))."""
        lead = tuple(tq.shape[:-2])
        n = math.prod(lead)
        acc = "float64" if name == "float64" else "float32"
        plain = masks.plain and not deterministic
        groups = _groups(tq, tk)
        kv_shape = tuple(tk.shape)
        if groups > 1:
            q4, k4, v4 = self._as_bhsd(tq, tk, tv)
            g4, o4 = (self._ascontiguous(x).reshape(q4.shape) for x in (tg, to))
            lse4 = self._ascontiguous(lse.astype("float32", copy=False)).reshape(q4.shape[:3]) \
                if name != "float64" and plain else None
            r = None if lse4 is None else self._attention_gqa_bwd(g4, q4, k4, v4, o4, lse4, scale, bool(causal),
                                                                   name)
            if r is not None:
                dq, dk, dv = r[0].reshape(tq.shape), r[1].reshape(kv_shape), r[2].reshape(kv_shape)
                if blhd:
                    return tuple(self._ascontiguous(x.swapaxes(1, 2)) for x in (dq, dk, dv))
                return dq, dk, dv
        mod = self._attention_module(name)
        lse = self._ascontiguous(lse.astype(acc, copy=False)).reshape(n, tq.shape[-2])
        gqa = {}
        if groups > 1 and self._gqa_in_place(name, n, masks, lead, tq.shape[-1]):   # dK, dV per q head, summed below
            gqa, nkv = {"groups": groups, "q_heads": lead[-1]}, n // groups
        elif groups > 1:
            tk, tv, nkv = self._repeat_heads(tk, groups), self._repeat_heads(tv, groups), n
        else:
            nkv = n
        dq, dk, dv, *db = mod.backward(self._as_bhld(tg, n), self._as_bhld(tq, n), self._as_bhld(tk, nkv),
                                       self._as_bhld(tv, nkv), self._as_bhld(to, n), lse, scale, bool(causal), name,
                                       masks=masks, deterministic=bool(deterministic), **gqa)
        per_q_head = tuple(tq.shape[:-2]) + tuple(tk.shape[-2:])
        dq = dq.reshape(tq.shape)
        if groups > 1 and dk.size != math.prod(per_q_head):   # summed over each group by the kernels
            dk, dv = dk.reshape(kv_shape), dv.reshape(kv_shape)
        else:
            dk, dv = dk.reshape(per_q_head), dv.reshape(per_q_head)
            if groups > 1:   # each k and v head's gradient: the sum over the q heads of its group
                dk, dv = (self._sum_groups(x, groups, kv_shape) for x in (dk, dv))
        grads = (dq, dk, dv)
        if blhd:
            grads = tuple(self._ascontiguous(g.swapaxes(1, 2)) for g in grads)
        if attn_bias is None:
            return grads
        return grads + (self._cast_like(self._bias_grad(db[0], attn_bias, lead), masks.bias.dtype),)

    def _bias_grad(self, db, attn_bias, lead: tuple):
        """The bias's gradient (Masks' 4-D form) in attn_bias's shape: summed over the outer dims the
        bias broadcasts where _bias had to copy it out to every outer dim."""
        shape = tuple(np.shape(attn_bias))   # (the bias as given: an array, or a nested list or a scalar)
        padded = (1,) * (len(lead) + 2 - len(shape)) + shape
        outer = lead[:-1]
        if db.shape[0] == math.prod(padded[:-3]) or not outer:
            return db.reshape(shape)
        full = db.reshape(outer + padded[-3:])
        axes = tuple(i for i, n in enumerate(padded[:-3]) if n == 1 and outer[i] > 1)
        return self.sum(full, axis=axes, keepdims=True).reshape(shape) if axes else full.reshape(shape)


def _dropout(op: str, p, seed):
    """(threshold, scale, seed) of dropout on the probabilities, None for p == 0 (checked: p a
    real in [0, 1), seed an int in [0, 2^64), as cudakit.dropout's)."""
    from .dropout_api import check_p, check_seed, threshold
    try:
        p = check_p(op, p)
    except ArgumentError as e:   # (ArgumentTypeError for a value that is not a real number)
        raise type(e)(f"{op}: dropout_p must be a real number in [0, 1) (got {p!r})") from None
    seed = check_seed(op, seed)
    return None if p == 0.0 else (threshold(p), 1.0 / (1.0 - p), seed)


def _groups(q, k) -> int:
    """H / Hkv: how many q heads share each k and v head (1 without grouped-query attention)."""
    return q.shape[-3] // k.shape[-3] if q.ndim >= 3 and k.shape[-3] != q.shape[-3] else 1


class CpuAttentionHooks(AttentionOps):
    def _gqa_in_place(self, dtype_name, n, masks, lead, d=0):
        return True   # (matmul_attention reads grouped-query k, v in place, whole groups a chunk)

    def _attention_module(self, dtype_name):
        from . import matmul_attention
        return matmul_attention


class CudaAttentionHooks(AttentionOps):
    def _gqa_in_place(self, dtype_name, n, masks, lead, d=0):
        # the Triton kernels index k, v by q's last leading dim (the heads); key lengths index their
        # batch by the same divisor, so with lengths only for (B, H, L, D) q; head dims past the
        # Triton kernels' take the repeated heads to cuDNN
        # (float64: matmul_attention, which reads them in place whatever the masks and sizes)
        from ..kernels.attention import _MAX_GRID_Y, MAX_HEAD_DIM
        return dtype_name == "float64" or (n <= _MAX_GRID_Y and d <= MAX_HEAD_DIM
                                           and (masks.lengths is None or len(lead) == 2))

    def _varlen_kernels(self, dtype_name):
        if dtype_name == "float64":   # the matrix-product path, a sequence at a time
            return None
        from ..kernels import attention
        return attention

    def _cast_like(self, x, dtype):
        if x.dtype == dtype or np.dtype(dtype).name != "bfloat16":
            return super()._cast_like(x, dtype)
        from ..kernels import attention   # CuPy has no bfloat16 arithmetic, so no astype to it
        return attention.cast(x, dtype)

    def _attention_gqa_fwd(self, q, k, v, scale, causal, dtype_name, need_lse: bool = True):
        from ..kernels import attention
        return attention.forward_gqa(q, k, v, scale, causal, dtype_name, need_lse)

    def _attention_gqa_bwd(self, g, q, k, v, out, lse, scale, causal, dtype_name):
        from ..kernels import attention
        return attention.backward_gqa(g, q, k, v, out, lse, scale, causal, dtype_name)

    def _attention_blhd_fwd(self, q, k, v, scale, causal, dtype_name):
        from ..kernels import attention
        return attention.forward_blhd(q, k, v, scale, causal, dtype_name)

    def _attention_blhd_bwd(self, g, q, k, v, out, lse, scale, causal, dtype_name, packed: bool = False):
        from ..kernels import attention
        return attention.backward_blhd(g, q, k, v, out, lse, scale, causal, dtype_name, packed)

    def _attention_blhd_in_place_fwd(self, q, k, v, scale, masks, dtype_name, block_n, copy):
        if dtype_name == "float64":   # (the matrix-product path: transposed views, read as they are)
            return None
        from ..kernels import attention
        return attention.forward_blhd_in_place(q, k, v, scale, masks, dtype_name, block_n, copy)

    def _attention_blhd_in_place_bwd(self, g, q, k, v, out, lse, scale, masks, dtype_name, deterministic, finish,
                                     copy, packed=False):
        if dtype_name == "float64":
            return None
        from ..kernels import attention
        return attention.backward_blhd_in_place(g, q, k, v, out, lse, scale, masks, dtype_name, deterministic, finish,
                                                copy, packed)

    def _packed_base(self, dq, dk, dv):
        from ..kernels import cudnn
        return cudnn.packed_base(dq, dk, dv)

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
            raise ShapeError(f"{op}: head_dim must be <= {MAX_HEAD_DIM} on the GPU (got {d}); float64 takes any")
        return r
