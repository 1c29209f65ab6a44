"""attention_varlen through cuDNN's ragged (THD) flash attention: every packed sequence in one
graph execution, where the Triton kernels run at 0.6-0.8x of cuDNN's per-sequence speed.

cuDNN reads packed (total, H, D) arrays as (B, H, max_seqlen, D) tensors whose batch b starts at
a "ragged offset" (in elements) and has a "padding mask" length: for each operand

    dims (B, H, S, D), strides (S H D, D, H D, 1), ragged offset cu[b] * H * D, length cu[b + 1] - cu[b]

and the softmax statistics, cudakit's (total_q, H) float32 lse, as (B, H, S, 1) with strides
(S H, 1, H, 1) and ragged offset cu_q[b] * H. The offsets and lengths are made on the device from
cu_seqlens by one small kernel (ck_varlen_ragged), which also checks them as the Triton varlen
kernels do: a sequence longer than max_seqlen, reaching outside the packed arrays, or of a
decreasing cu_seqlens is cut to what lies inside, and recorded in the device's error flag (code 11;
an ArgumentError at the next cudakit.check()).

Taken only where every query row sees a key whatever the lengths on the device: q and k with the
same cu_seqlens (the caller knows: one array, or equal host arrays) and no window, so causal is the
same mask aligned top-left or bottom-right. Other calls (and head dims cuDNN does not take, float32,
float64) run on the Triton kernels.
"""
from __future__ import annotations

from ..runtime import _cupy
from . import cudnn

RAGGED_SOURCE = r"""
extern "C" __global__ void ck_varlen_ragged(const long long* __restrict__ cu, int cu_is_64, int B, long long total,
    long long max_len, long long max_q, long long max_k, long long hd, long long h, long long* __restrict__ err,
    int* __restrict__ lens,              // (B,)   each sequence's length, cut to what lies inside
    long long* __restrict__ off_x,       // (B+1,) its first element in (total, H, D): start * H * D
    long long* __restrict__ off_s)       // (B+1,) its first lse entry in (total, H): start * H
{
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b > B) return;
  const int* cu32 = reinterpret_cast<const int*>(cu);
  long long s = cu_is_64 ? cu[b] : (long long)cu32[b];
  if (b == B) {                          // the end of the last sequence: offsets past the packed total
    off_x[B] = total * hd;
    off_s[B] = total * h;
    return;
  }
  long long e = cu_is_64 ? cu[b + 1] : (long long)cu32[b + 1];
  long long n = e - s;
  // what is wrong, bits 0-2 for cu_seqlens_q and 3-5 for cu_seqlens_k (one array for both):
  // decreasing or negative, past max_seqlen_q / max_seqlen_k, past the packed rows
  const long long both = (n < 0 || s < 0 ? 1 : 0) | (e > total ? 4 : 0);
  const long long why = both | (n > max_q ? 2 : 0) | ((both | (n > max_k ? 2 : 0)) << 3);
  if (why && atomicCAS((unsigned long long*)err, 0ULL, 11ULL) == 0ULL) {
    err[1] = b;                          // kernels/attention.py ERR_CU_SEQLENS: code, sequence, Lq, Lk,
    err[2] = n;                          // max_seqlen_q, max_seqlen_k, what is wrong
    err[3] = n;
    err[4] = max_q;
    err[5] = max_k;
    err[6] = why;
  }
  if (s < 0) s = 0;
  if (s > total) s = total;
  if (n > total - s) n = total - s;
  if (n > max_len) n = max_len;
  if (n < 0) n = 0;
  lens[b] = (int)n;
  off_x[b] = s * hd;
  off_s[b] = s * h;
}
"""

_kernel = None


def _ragged_kernel():
    global _kernel
    if _kernel is None:
        from ..runtime.compiler import compile_module
        _kernel = compile_module(RAGGED_SOURCE, source_name="cudnn_varlen.cu").get_kernel("ck_varlen_ragged")
    return _kernel


def ragged(cu, total: int, max_q: int, max_k: int, h: int, d: int, err):
    """(lens int32 (B,), element offsets int64 (B+1,) of a (total, h, d) array, lse offsets int64
    (B+1,) of a (total, h) one) for the sequences of cu (int32/int64 (B+1,) on the device), checked
    and cut to min(max_q, max_k) as the module docstring says (a length past either recorded in
    err, naming which); one launch on the current stream."""
    import numpy as np
    from ..runtime.compiler import _launch_function
    cp = _cupy.cupy()
    b = cu.shape[0] - 1
    lens = cp.empty(max(b, 1), cp.int32)
    off_x, off_s = cp.empty(b + 1, cp.int64), cp.empty(b + 1, cp.int64)
    k = _ragged_kernel()
    threads = 128
    _launch_function("ck_varlen_ragged", k._function(cu.data.device_id), ((b + threads) // threads, 1, 1),
                     (threads, 1, 1),
                     (cu, np.int32(cu.dtype.itemsize == 8), np.int32(b), np.int64(total), np.int64(min(max_q, max_k)),
                      np.int64(max_q), np.int64(max_k),
                      np.int64(h * d), np.int64(h), err, lens, off_x, off_s), 0, None)
    return lens, off_x, off_s


def _packed_desc(b: int, h: int, s: int, d: int) -> tuple:
    return (b, h, s, d), (s * h * d, d, h * d, 1)


def _stats_desc(b: int, h: int, s: int) -> tuple:
    return (b, h, s, 1), (s * h, 1, h, 1)


def _index_desc(n: int) -> tuple:
    return (n, 1, 1, 1), (1, 1, 1, 1)


def _ragged_tensors(g, dt, b: int):
    """The graph's length and offset tensors: (lens, offsets of q-like rows, of k-like rows, of lse)."""
    lens = cudnn._tensor(g, "lens", _index_desc(b), dt.INT32)
    rq = cudnn._tensor(g, "ragged_q", _index_desc(b + 1), dt.INT64)
    rk = cudnn._tensor(g, "ragged_k", _index_desc(b + 1), dt.INT64)
    rs = cudnn._tensor(g, "ragged_stats", _index_desc(b + 1), dt.INT64)
    return lens, rq, rk, rs


def _varlen_sig(kind: str, b, h, hkv, max_q, max_k, d, dtype_name, scale, causal, device) -> tuple:
    return (kind, b, h, hkv, max_q, max_k, d, dtype_name, float(scale), bool(causal), device)


def _pass(kind: str, q, k, cu, max_q: int, max_k: int, scale: float, causal: bool):
    """What a forward or backward pass ("sdpa_varlen_fwd" / "_bwd") shares: (b, h, dtype name, q-like,
    k-like and lse descriptors, graph signature), or None for no sequences or rows."""
    total, h, d = q.shape
    hkv, b = k.shape[1], cu.shape[0] - 1
    if b < 1 or total == 0:
        return None
    name = str(q.dtype)
    descs = _packed_desc(b, h, max_q, d), _packed_desc(b, hkv, max_k, d), _stats_desc(b, h, max_q)
    return b, h, name, *descs, _varlen_sig(kind, b, h, hkv, max_q, max_k, d, name, scale, causal,
                                                   q.data.device_id)


def _scratch_index(b: int, rows: int) -> list:
    """Plan timing's lengths and offsets: every sequence `rows` long over the same first rows."""
    cp = _cupy.cupy()
    return [cp.full(b, rows, cp.int32)] + [cp.zeros(b + 1, cp.int64) for _ in range(3)]


def _index_arrays(q, k, cu, max_q: int, max_k: int, err) -> list:
    """(lengths, q-like offsets, k-like offsets, lse offsets) for this call, made on the device.
    The caller holds them until the graph's launch is queued: freed before, their memory could come
    back from the pool as that launch's workspace, which cuDNN clears and accumulates dQ in while
    it reads the offsets (2026-11-27 19:48 UTC on an H100: dQ of zeros for a whole sequence in one
    run of test_attention_varlen_cudnn_ragged, right in the next)."""
    total, h, d = q.shape
    hkv = k.shape[1]
    lens, off_q, off_s = ragged(cu, total, max_q, max_k, h, d, err)
    off_k = off_q if hkv == h else ragged(cu, k.shape[0], max_q, max_k, hkv, d, err)[1]
    return [lens, off_q, off_k, off_s]


def forward(q, k, v, cu, max_q: int, max_k: int, scale: float, causal: bool, err):
    """(out (total, H, D), lse (total, H) float32) of attention over the packed sequences of cu
    (the same for q and k), or None when cuDNN declines. q (total, H, D), k, v (total, Hkv, D),
    C-contiguous 16-bit. FLOPs: 4 H D sum_b L_b^2 (about half causal)."""
    p = _pass("sdpa_varlen_fwd", q, k, cu, max_q, max_k, scale, causal) if cudnn.aligned(q, k, v) else None
    if p is None:
        return None
    b, h, name, qd, kd, sd, sig = p
    cp = _cupy.cupy()
    total = q.shape[0]

    def make(g, dt):
        io = cudnn.g_io(dt, name)
        lens, rq, rk, rs = _ragged_tensors(g, dt, b)
        Q, K, V = (cudnn._tensor(g, n, desc, io) for n, desc in (("Q", qd), ("K", kd), ("V", kd)))
        for t, r in ((Q, rq), (K, rk), (V, rk)):
            t.set_ragged_offset(r)
        O, S = g.sdpa(name="sdpa_varlen", q=Q, k=K, v=V, is_inference=False, attn_scale=float(scale),
                      use_padding_mask=True, seq_len_q=lens, seq_len_kv=lens, use_causal_mask=bool(causal))
        cudnn._out(O, qd, io)
        O.set_ragged_offset(rq)
        cudnn._out(S, sd, dt.FLOAT)
        S.set_ragged_offset(rs)
        return [lens, rq, rk, rs, Q, K, V, O, S]

    def scratch():
        arrs = _scratch_index(b, min(max_q, max_k, total, k.shape[0]))
        arrs += [cp.zeros(x.size, q.dtype) for x in (q, k, v, q)] + [cp.zeros(total * h, cp.float32)]
        return [a.data.ptr for a in arrs], arrs
    g = cudnn._graph(sig, name, make, scratch)
    if g is None:
        return None
    out = cp.empty_like(q)
    lse = cp.empty((total, h), cp.float32)
    index = _index_arrays(q, k, cu, max_q, max_k, err)   # (held until the launch is queued)
    g.run([a.data.ptr for a in index] + [q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, lse.data.ptr])
    return out, lse


def backward(do, q, k, v, out, lse, cu, max_q: int, max_k: int, scale: float, causal: bool, err):
    """(dq (total, H, D), dk, dv (total, Hkv, D): summed over the q heads sharing each k, v head) of
    forward(), or None when cuDNN declines. FLOPs: 10 H D sum_b L_b^2 (about half causal)."""
    p = (_pass("sdpa_varlen_bwd", q, k, cu, max_q, max_k, scale, causal)
         if cudnn.aligned(do, q, k, v, out, lse) else None)
    if p is None:
        return None
    b, h, name, qd, kd, sd, sig = p
    cp = _cupy.cupy()
    total = q.shape[0]

    def make(g, dt):
        io = cudnn.g_io(dt, name)
        lens, rq, rk, rs = _ragged_tensors(g, dt, b)
        Q, K, V, O, DO = (cudnn._tensor(g, n, desc, io)
                          for n, desc in (("Q", qd), ("K", kd), ("V", kd), ("O", qd), ("dO", qd)))
        for t, r in ((Q, rq), (K, rk), (V, rk), (O, rq), (DO, rq)):
            t.set_ragged_offset(r)
        S = cudnn._tensor(g, "Stats", sd, dt.FLOAT)
        S.set_ragged_offset(rs)
        DQ, DK, DV = g.sdpa_backward(name="sdpa_varlen_backward", q=Q, k=K, v=V, o=O, dO=DO, stats=S,
                                     attn_scale=float(scale), use_padding_mask=True, seq_len_q=lens,
                                     seq_len_kv=lens, use_causal_mask=bool(causal))
        for t, desc, r in ((DQ, qd, rq), (DK, kd, rk), (DV, kd, rk)):
            cudnn._out(t, desc, io)
            t.set_ragged_offset(r)
        return [lens, rq, rk, rs, Q, K, V, O, DO, S, DQ, DK, DV]

    def scratch():
        arrs = _scratch_index(b, min(max_q, max_k, total, k.shape[0]))
        arrs += [cp.zeros(x.size, q.dtype) for x in (q, k, v, q, q)] + [cp.zeros(total * h, cp.float32)]
        arrs += [cp.zeros(x.size, q.dtype) for x in (q, k, v)]
        return [a.data.ptr for a in arrs], arrs
    g = cudnn._graph(sig, name, make, scratch)
    if g is None:
        return None
    dq, dk, dv = cp.empty_like(q), cp.empty_like(k), cp.empty_like(v)
    index = _index_arrays(q, k, cu, max_q, max_k, err)   # (held until the launch is queued)
    g.run([a.data.ptr for a in index] + [q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, do.data.ptr,
                                         lse.data.ptr, dq.data.ptr, dk.data.ptr, dv.data.ptr])
    return dq, dk, dv
