"""Attention over packed variable-length sequences (FlashAttention's varlen interface), shared by
every backend as a mixin of Backend.

q: (total_q, H, D), k and v: (total_k, Hkv, D) with Hkv dividing H; sequence b is rows
cu_seqlens_q[b]..cu_seqlens_q[b + 1] of q against rows cu_seqlens_k[b]..cu_seqlens_k[b + 1] of k
and v. The CUDA backend runs the Triton kernels on the packed arrays in place
(kernels/attention.forward_varlen); the CPU backend and float64 attend sequence by sequence with
the matrix-product path (backends/matmul_attention.py).
"""
from __future__ import annotations

import math

import numpy as np

from .attention_masks import Masks, check_window
from .checks import check_bool, check_scale_range, finite_scalar, require_array
from .normalization_api import is_float
from ..errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError


class VarlenAttentionOps:
    """attention_varlen, attention_varlen_with_lse and attention_varlen_backward (mixed into Backend)."""

    # ---- hooks --------------------------------------------------------------------------------
    def _varlen_kernels(self, dtype_name: str):
        """The module with forward_varlen/backward_varlen (kernels/attention.py) for this dtype, or
        None: the sequence-by-sequence matrix-product path."""
        return None

    # ---- ops ----------------------------------------------------------------------------------
    def attention_varlen(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale=None,
                         causal: bool = False, *, window=None, dropout_p: float = 0.0, seed: int = 0):
        """Attention of each packed sequence to its own keys: q (total_q, H, D), k and v
        (total_k, Hkv, D) with Hkv dividing H (grouped-query: k and v are read in place);
        cu_seqlens_q, cu_seqlens_k: integer (B + 1,) arrays of the sequences' first rows (0 first,
        non-decreasing, the totals last); max_seqlen_q, max_seqlen_k: at least every sequence's
        length. causal and window=(left, right) as attention()'s, aligned bottom-right within each
        sequence. Returns (total_q, H, D) in q's dtype; a row that sees no key gets 0.
        dropout_p, seed: dropout on the probabilities as attention()'s, score (b, h, i, j) (sequence
        b, head h, its query row i and key j) being element ((b H + h) max_seqlen_q + i)
        max_seqlen_k + j of cudakit.dropout's stream: the padded (B, H, max_seqlen_q, max_seqlen_k)
        scores' flat index, so the same sequences padded and passed to attention() with key_lengths
        drop the same probabilities; attention_varlen_backward regenerates the mask from the same
        dropout_p and seed.

        Host cu_seqlens (lists, NumPy arrays) are checked in the call; GPU ones by the forward
        kernel, which records a sequence longer than max_seqlen, reaching outside the packed
        arrays, or of a decreasing cu_seqlens in the device's error flag (an ArgumentError at the
        next cudakit.check()) and reads and writes only inside the arrays; rows no sequence covers
        (a first entry above 0, a last below the total) are left unwritten there. float64 on the
        GPU reads them to the host (a wait). With the `cudnn` extra, 16-bit data, no window and the
        same sequences for q and k (one array for both cu_seqlens, or equal host arrays) the GPU
        may run cuDNN's ragged flash attention instead (kernels/cudnn_varlen.py), with the same checks."""
        return self._varlen_forward("attention_varlen", q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, scale, causal, window, dropout_p, seed)[0]

    def attention_varlen_with_lse(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  scale=None, causal: bool = False, *, window=None, dropout_p: float = 0.0,
                                  seed: int = 0):
        """attention_varlen() and the log-sum-exp of each score row, (total_q, H) float32 (float64
        for float64; -inf for a row that sees no key), which attention_varlen_backward needs."""
        return self._varlen_forward("attention_varlen_with_lse", q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, scale, causal, window, dropout_p, seed)

    def _varlen_forward(self, op, q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, window, dropout_p, seed):
        from .attention_api import _dropout
        q, k, v, cq, ck, mq, mk, scale, name, window = self._varlen_args(op, q, k, v, cu_q, cu_k, max_q, max_k,
                                                                         scale, causal, window)
        drop = _dropout(op, dropout_p, seed)
        _check_dropout_index(op, drop, cq.shape[0] - 1, q.shape[1], mq, mk)
        with self._device_scope(q):
            mod = self._varlen_kernels(name)
            if mod is not None:
                return mod.forward_varlen(q, k, v, cq, ck, mq, mk, scale, bool(causal), name, window, dropout=drop)
            return self._varlen_by_sequence(q, k, v, cq, ck, mq, mk, scale, causal, window, name, drop)

    def attention_varlen_backward(self, grad_out, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                  max_seqlen_k, scale=None, causal: bool = False, *, window=None,
                                  deterministic: bool = False, dropout_p: float = 0.0, seed: int = 0):
        """(grad_q, grad_k, grad_v) of attention_varlen for dL/dout = grad_out (q's shape), from the
        forward's out and lse (attention_varlen_with_lse); same sequences, scale, masks and dropout.
        deterministic: bitwise the same gradients on every run (on the GPU, cudakit's Triton kernels,
        which sum without atomics; cuDNN's backward, which may be faster, is not asked; the CPU
        backend is deterministic either way)."""
        from .attention_api import _dropout
        op = "attention_varlen_backward"
        deterministic = check_bool(op, "deterministic", deterministic)
        drop = _dropout(op, dropout_p, seed)
        q, k, v, cq, ck, mq, mk, scale, name, window = self._varlen_args(
            op, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, window)
        _check_dropout_index(op, drop, cq.shape[0] - 1, q.shape[1], mq, mk)
        arrs, _ = self._norm_arrays(op, {"q": q, "grad_out": grad_out, "out": out})   # (errors name them against q)
        g, o = self._ascontiguous(arrs["grad_out"]), self._ascontiguous(arrs["out"])
        for a, x in (("grad_out", g), ("out", o)):
            if tuple(x.shape) != tuple(q.shape):
                raise ShapeError(f"{op}: {a} must have q's shape {tuple(q.shape)} (got {tuple(x.shape)})")
        require_array(op, "lse", lse)
        lse = self._coerce(lse, "lse")
        self._check_devices({"q": q, "lse": lse})
        if not is_float(lse.dtype):   # (first: a string made a 0-d array is a wrong type, not a wrong shape)
            raise DTypeError(f"{op}: lse must be a float array: float16, bfloat16, float32 or float64 "
                             f"(got {lse.dtype})")
        if tuple(lse.shape) != tuple(q.shape[:2]):
            raise ShapeError(f"{op}: lse must have shape {tuple(q.shape[:2])} (total_q, H) (got {tuple(lse.shape)})")
        acc = "float64" if name == "float64" else "float32"
        lse = self._ascontiguous(lse.astype(acc, copy=False))
        groups = q.shape[1] // k.shape[1]
        with self._device_scope(q):
            mod = self._varlen_kernels(name)
            if mod is not None:
                dq, dk, dv = mod.backward_varlen(g, q, k, v, o, lse, cq, ck, mq, mk, scale, bool(causal), name,
                                                 window, deterministic=bool(deterministic), dropout=drop)
                if groups > 1 and dk.shape[1] != k.shape[1]:   # each q head's share, summed per k, v head
                    t, hkv, d = k.shape
                    dk, dv = (self.sum(x.reshape(t, hkv, groups, d), axis=2) for x in (dk, dv))
                return dq, dk, dv
            return self._varlen_by_sequence(q, k, v, cq, ck, mq, mk, scale, causal, window, name, drop, (g, o, lse))

    # ---- helpers ------------------------------------------------------------------------------
    def _varlen_args(self, op, q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, window) -> tuple:
        """(q, k, v contiguous, cu_seqlens_q, cu_seqlens_k as int32/int64 arrays on q's device,
        max_seqlen_q, max_seqlen_k, scale, dtype name, window), checked; errors name the argument."""
        arrs, _ = self._norm_arrays(op, {"q": q, "k": k, "v": v})
        q, k, v = (self._ascontiguous(arrs[a]) for a in ("q", "k", "v"))
        for a, x in (("q", q), ("k", k), ("v", v)):
            if x.ndim != 3:
                raise ShapeError(f"{op}: {a} must be (total, heads, head_dim) (got shape {tuple(x.shape)})")
        (tq, h, d), (tk, hkv, dk) = q.shape, k.shape
        if tuple(v.shape) != tuple(k.shape) or dk != d:
            raise ShapeError(f"{op}: k and v must be (total_k, Hkv, {d}) alike (got k {tuple(k.shape)}, "
                             f"v {tuple(v.shape)})")
        if hkv < 1 or h % hkv:
            raise ShapeError(f"{op}: k and v have {hkv} heads and q has {h}: Hkv must divide H")
        if d == 0:
            raise ShapeError(f"{op}: head_dim must be >= 1 (got 0)")
        name = self._check_dtype(q, "q", op)
        mq = _seqlen(op, "max_seqlen_q", max_q)
        mk = _seqlen(op, "max_seqlen_k", max_k)
        cq, nq = self._cu_seqlens(op, "cu_seqlens_q", cu_q, tq, mq, q)
        if cu_k is cu_q and (tk, mk) == (tq, mq):   # the same checks: neither checked nor copied twice
            ck, nk = cq, nq
        else:
            ck, nk = self._cu_seqlens(op, "cu_seqlens_k", cu_k, tk, mk, q, entries=cq.shape[0])
        if cu_k is cu_q or (nq is not None and nk is not None and np.array_equal(nq, nk)):
            ck = cq   # the same sequences for q and k, known here: the kernels may take cuDNN's ragged path
        if scale is None:
            scale = 1.0 / math.sqrt(d)
        scale = check_scale_range(op, finite_scalar(op, "scale", scale), name)
        check_bool(op, "causal", causal, ints=True)
        return q, k, v, cq, ck, mq, mk, scale, name, check_window(op, window)

    def _cu_seqlens(self, op: str, arg: str, cu, total: int, max_len: int, q, entries: int | None = None):
        """(cu as a C-contiguous int32/int64 array on q's device, its int64 host copy or None for a
        device array); a host one checked here: (B + 1,) with B >= 0 (`entries` of them where given:
        cu_seqlens_q's count), 0 first, non-decreasing, `total` last, no step above max_len."""
        require_array(op, arg, cu)
        x, n = self._int_array(op, arg, cu)
        host = n is not None
        if x.ndim != 1 or x.shape[0] < 1:
            raise ShapeError(f"{op}: {arg} must be 1-D with B + 1 >= 1 entries (got shape {tuple(x.shape)})")
        if entries is not None and x.shape[0] != entries:
            raise ShapeError(f"{op}: cu_seqlens_q and cu_seqlens_k must both be (B + 1,) (got {entries} and "
                             f"{x.shape[0]} entries)")
        if not host:
            self._check_devices({"q": q, arg: x})
        if host:
            n = n.astype(np.int64)
            if n[0] != 0:
                raise ArgumentError(f"{op}: {arg}[0] must be 0 (got {int(n[0])})")
            steps = np.diff(n)
            bad = np.flatnonzero(steps < 0)
            if bad.size:
                i = int(bad[0]) + 1
                raise ArgumentError(f"{op}: {arg} must be non-decreasing: {arg}[{i}] = {int(n[i])} < "
                                    f"{arg}[{i - 1}] = {int(n[i - 1])}")
            if n[-1] != total:
                raise ArgumentError(f"{op}: {arg}[-1] = {int(n[-1])} must be the packed total, {total} rows")
            if steps.size and steps.max() > max_len:
                i = int(np.argmax(steps))
                raise ArgumentError(f"{op}: sequence {i} of {arg} has {int(steps[i])} rows, more than "
                                    f"{'max_seqlen_q' if arg.endswith('q') else 'max_seqlen_k'} = {max_len}")
        return self._index_array(x), n

    def _varlen_by_sequence(self, q, k, v, cq, ck, mq, mk, scale, causal, window, name, drop, grads=None):
        """The matrix-product path, one sequence at a time: (out, lse) or, with grads = (grad_out,
        out, lse), (dq, dk, dv). drop: _dropout's (threshold, scale, seed) or None; sequence b's
        scores index the stream as the (B, H, mq, mk) padded scores do (Masks.drop_index)."""
        from . import matmul_attention as mm
        xp = self._xp()
        cq_h, ck_h = (np.asarray(c.get() if hasattr(c, "get") else c, np.int64) for c in (cq, ck))
        groups = q.shape[1] // k.shape[1]
        acc = np.float64 if name == "float64" else np.float32
        if grads is None:
            out, lse = xp.zeros(q.shape, q.dtype), xp.full(q.shape[:2], -np.inf, acc)
        else:
            g, o, lse_all = grads
            dq, dk, dv = (xp.zeros(x.shape, x.dtype) for x in (q, k, v))
        for b in range(cq_h.shape[0] - 1):
            rq, rk = slice(int(cq_h[b]), int(cq_h[b + 1])), slice(int(ck_h[b]), int(ck_h[b + 1]))
            if rq.stop <= rq.start or rk.stop <= rk.start:
                continue   # no rows, or no keys: out 0 and lse -inf, gradients 0
            qb = self._ascontiguous(q[rq].swapaxes(0, 1))                                 # (H, Lq, D)
            kb, vb = (self._ascontiguous(x[rk].swapaxes(0, 1)) for x in (k, v))          # (Hkv, Lk, D)
            gqa = {"groups": groups, "q_heads": q.shape[1]}   # (read in place, dK, dV summed: no repeat)
            masks = Masks(causal, window, dropout=drop, drop_index=(b * q.shape[1], mq, mk))
            if grads is None:
                ob, lb = mm.forward(qb, kb, vb, scale, causal, name, masks=masks, **gqa)
                out[rq] = ob.swapaxes(0, 1)
                lse[rq] = lb.swapaxes(0, 1)
                continue
            gb, obb = (self._ascontiguous(x[rq].swapaxes(0, 1)) for x in (g, o))
            lb = self._ascontiguous(lse_all[rq].swapaxes(0, 1))
            dqb, dkb, dvb = mm.backward(gb, qb, kb, vb, obb, lb, scale, causal, name, masks=masks, **gqa)
            dq[rq] = dqb.swapaxes(0, 1)
            dk[rk] = dkb.swapaxes(0, 1)
            dv[rk] = dvb.swapaxes(0, 1)
        return (out, lse) if grads is None else (dq, dk, dv)


def _seqlen(op: str, arg: str, n) -> int:
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise ArgumentTypeError(f"{op}: {arg} must be an int >= 0 (got {type(n).__name__} {n!r})")
    if n < 0:
        raise ArgumentError(f"{op}: {arg} must be an int >= 0 (got {n!r})")
    return int(n)


def _check_dropout_index(op: str, drop, b: int, h: int, mq: int, mk: int) -> None:
    """With dropout, the padded scores' count B H max_seqlen_q max_seqlen_k indexes the dropout
    stream in 64 bits: past 2^63 the index would wrap and repeat masks (the CPU backend's) or
    overflow (the GPU's int64)."""
    if drop is not None and b * h * mq * mk >= 1 << 63:
        raise ArgumentError(f"{op}: with dropout, B * H * max_seqlen_q * max_seqlen_k must be below 2**63, "
                            f"the dropout stream's index (got {b} * {h} * {mq} * {mk}); pass the longest "
                            f"sequences' lengths as max_seqlen_q and max_seqlen_k")
