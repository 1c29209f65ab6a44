"""Cross-entropy of logits (N, C) against integer targets (N,), forward, backward and both fused.

loss_i = logsumexp(logits_i) - logits_i[t_i] (0 where t_i == ignore_index);
dlogits_i = (softmax(logits_i) - onehot(t_i)) * w_i with w_i = grad_loss (per row for
reduction "none") divided by the count of non-ignored targets for "mean"; 0 for ignored rows.
The softmax is never written out (as Liger-Kernel's fused cross entropy).

Kernels, per call:
1. `ck_ce_prep`: one block reads the targets once: counts the non-ignored ones (the divisor of
   "mean") and the out-of-range ones (not in [0, C) and not ignore_index), with the index of the
   first. stat: [3] int64. Where some are out of range it also records the first bad row in the
   device's error flag (runtime/device_errors.py) unless one is pending. Traffic: N * sizeof(target).
2. `ck_ce_reg` (rows of up to 32768 16-bit / float32 values in registers, as ck_softmax_fwd_reg)
   or `ck_ce_loop` (longer rows: one block per row, online softmax then a second read):
   per-row loss (float32, float64 for float64 logits) and/or the gradient.
   Traffic: N*C*sizeof(T) read (loop: twice, the second mostly from L2) + N*C*sizeof(T) written
   when the gradient is asked for + N*(sizeof(target) + sizeof(loss)); ignored rows read nothing
   and write zeros.
3. `ck_ce_reduce` ("mean" / "sum"): one block sums the per-row losses in a fixed order (bitwise
   reproducible) and divides by the count for "mean" (0 / 0 = NaN when every target is ignored,
   as torch). Traffic: N * sizeof(loss).
An out-of-range target gives a NaN loss and no one-hot term in its row (nothing is read outside
the logits); nothing synchronises: the error flag raises TargetIndexError at the next
cudakit.check() / synchronize() / to_host() (or the caller reads stat back, with validate=True). Inputs: contiguous CuPy arrays on the current device, validated by the caller
(cudakit.backends.softmax_api): logits float16/bfloat16/float32/float64, targets int32/int64.
"""
from __future__ import annotations

import numpy as np

from ..runtime import _cupy
from ._common import FLOAT_DTYPE_NAMES, PREAMBLE, KernelFamily, ctype, dtype_name
from .softmax import FWD_TARGET_NV, HELPERS, LOOP_THREADS, fwd_bound, launch, reg_nvs, reg_plan, vec_for

PREP_THREADS = 1024
REDUCE_THREADS = 1024

SOURCE = PREAMBLE + HELPERS + r"""
// The target of row i: targets is int64 when t64, else int32 (a runtime flag: half the instantiations).
__device__ __forceinline__ long long ck_target(const void* __restrict__ targets, int t64, long long i) {
  return t64 ? reinterpret_cast<const long long*>(targets)[i] : (long long)reinterpret_cast<const int*>(targets)[i];
}

// targets: [n] (int32 or int64, t64); stat: [3] int64 = (count of targets != ignore, count of those outside
// [0, C), index of the first of those or n). One block. T (the logits' type, unused) gives each
// dtype's kernel family its own instantiation.
// err: the device's error flag (int64 [8]) or null; code: the op's error code written there with
// (first bad row, its target, bad count, C, n, ignore) when some target is out of range and no
// error is pending.
template <typename T>
__global__ void __launch_bounds__(1024) ck_ce_prep(const void* __restrict__ targets, int t64, long long n,
                                                   long long C, long long ignore, long long* __restrict__ stat,
                                                   long long* __restrict__ err, long long code) {
  __shared__ long long sh[3][32];
  long long cnt = 0, bad = 0, first = n;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    const long long t = ck_target(targets, t64, i);
    if (t == ignore) continue;
    ++cnt;
    if (t < 0 || t >= C) { ++bad; first = i < first ? i : first; }
  }
  for (int off = 16; off > 0; off >>= 1) {
    cnt += __shfl_xor_sync(0xffffffffu, cnt, off);
    bad += __shfl_xor_sync(0xffffffffu, bad, off);
    const long long f = __shfl_xor_sync(0xffffffffu, first, off);
    first = f < first ? f : first;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  if (lane == 0) { sh[0][warp] = cnt; sh[1][warp] = bad; sh[2][warp] = first; }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < nw; ++w) { cnt += sh[0][w]; bad += sh[1][w]; first = sh[2][w] < first ? sh[2][w] : first; }
    stat[0] = cnt; stat[1] = bad; stat[2] = first;
    if (bad && err && atomicCAS(reinterpret_cast<unsigned long long*>(err), 0ull, (unsigned long long)code) == 0ull) {
      err[1] = first; err[2] = ck_target(targets, t64, first); err[3] = bad; err[4] = C; err[5] = n; err[6] = ignore;
    }
  }
}

// The weight of row `row`'s gradient: grad_loss (gl: [rows] when gl_rows, else [1]; null: 1),
// divided by the non-ignored count for "mean".
template <typename C>
__device__ __forceinline__ C ck_ce_weight(const C* __restrict__ gl, int gl_rows, int mean,
                                         const long long* __restrict__ stat, long long row) {
  C w = gl ? gl[gl_rows ? row : 0] : C(1);
  if (mean) w /= C(stat[0]);
  return w;
}

// logits, grad: [rows, nvec*V] (C = nvec*V columns); targets: [rows] (int64 when t64, else int32); gl, stat: see
// ck_ce_weight; loss: [rows] (acc) or null; grad: null for the forward only.
// Block (tpr, rpb) as ck_softmax_fwd_reg: the row's logits in registers as the accumulation type
// (padding past the row's end -inf), their exp kept for the gradient.
template <typename T, int V, int NV>
__global__ void __launch_bounds__(ck_fwd_bound<T, V, NV>::value) ck_ce_reg(
    const T* __restrict__ logits, const void* __restrict__ targets, int t64, const typename ck_traits<T>::acc* __restrict__ gl,
    int gl_rows, int mean, const long long* __restrict__ stat, typename ck_traits<T>::acc* __restrict__ loss,
    T* __restrict__ grad, long long rows, int nvec, long long ignore) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C red[CK_RED];
  const int tpr = blockDim.x;
  const long long ncol = (long long)nvec * V;
  const long long row = (long long)blockIdx.x * blockDim.y + threadIdx.y;
  const bool live = row < rows;
  const long long t = live ? ck_target(targets, t64, row) : ignore;
  const bool use = t != ignore;                  // live and not ignored: the row is read
  const int n = use ? nvec - (int)threadIdx.x : 0;  // this thread's packs: j*tpr < n
  const long long off = (live ? row : 0) * (long long)nvec + threadIdx.x;
  const R* __restrict__ xr = reinterpret_cast<const R*>(logits) + off;
  ck_pack<T, V> p[NV];
#pragma unroll
  for (int j = 0; j < NV; ++j) if (j * tpr < n) p[j].raw = xr[j * tpr];
  C v[NV][V];
  C m = ck_ninf(C(0));
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (j * tpr < n) {
      ck_cvt<T, V>::load(p[j], v[j]);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) v[j][i] = ck_ninf(C(0));
    }
#pragma unroll
    for (int i = 0; i < V; ++i) m = ck_max(m, v[j][i]);
  }
  m = ck_row_red<true>(m, red);
  C s = C(0);
#pragma unroll
  for (int j = 0; j < NV; ++j) {
#pragma unroll
    for (int i = 0; i < V; ++i) { v[j][i] = ck_exp<T>(v[j][i] - m); s += v[j][i]; }
  }
  s = ck_row_red<false>(s, red);
  if (!live) return;  // no barrier below
  const bool ok = t >= 0 && t < ncol;
  if (loss && threadIdx.x == 0) {
    C l = C(0);
    if (use) l = ok ? (m - tr::load(logits[row * ncol + t])) + ck_log(s) : ck_nan(C(0));
    loss[row] = l;
  }
  if (!grad) return;
  R* __restrict__ gr = reinterpret_cast<R*>(grad) + off;
  const C w = use ? ck_ce_weight(gl, gl_rows, mean, stat, row) : C(0);
  const C a = use ? w * ck_rcp(s) : C(0);      // ignored rows: exactly 0
  const long long tl = ok ? t - (long long)threadIdx.x * V : -1;  // t relative to pack 0 of this thread
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if ((long long)j * tpr < (long long)nvec - threadIdx.x) {
      C o[V];
      const long long c0 = (long long)j * tpr * V;  // column of element 0 of pack j, minus threadIdx.x*V
#pragma unroll
      for (int i = 0; i < V; ++i) o[i] = (use ? v[j][i] * a : C(0)) - (c0 + i == tl ? w : C(0));
      ck_pack<T, V> po;
      ck_cvt<T, V>::store(po, o);
      gr[j * tpr] = po.raw;
    }
  }
}

// Long rows: one 1-D block per row (blockIdx.x). Shapes as ck_ce_reg.
template <typename T, int V>
__global__ void __launch_bounds__(1024) ck_ce_loop(
    const T* __restrict__ logits, const void* __restrict__ targets, int t64, const typename ck_traits<T>::acc* __restrict__ gl,
    int gl_rows, int mean, const long long* __restrict__ stat, typename ck_traits<T>::acc* __restrict__ loss,
    T* __restrict__ grad, int nvec, long long ignore) {
  typedef ck_traits<T> tr;
  typedef typename tr::acc C;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  __shared__ C red[64];
  const long long row = blockIdx.x;
  const long long ncol = (long long)nvec * V;
  const long long t = ck_target(targets, t64, row);
  const int step = blockDim.x * CK_U;
  R* __restrict__ gr = reinterpret_cast<R*>(grad) + row * nvec;
  if (t == ignore) {  // the whole block: loss 0, gradient 0, nothing read
    if (loss && threadIdx.x == 0) loss[row] = C(0);
    if (grad) {
      ck_pack<T, V> z;
      z.raw = typename ck_raw<sizeof(T) * V>::type();
      for (int k = threadIdx.x; k < nvec; k += blockDim.x) gr[k] = z.raw;
    }
    return;
  }
  const R* __restrict__ xr = reinterpret_cast<const R*>(logits) + row * nvec;
  C m = ck_ninf(C(0)), s = C(0);
  for (int k0 = threadIdx.x; k0 < nvec; k0 += step) {
    ck_pack<T, V> p[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) { const int k = k0 + u * blockDim.x; if (k < nvec) p[u].raw = xr[k]; }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      if (k0 + u * blockDim.x < nvec) {
        C v[V];
        ck_cvt<T, V>::load(p[u], v);
        ck_ms_add<T, V>(m, s, v);
      }
    }
  }
  ck_block_ms<T>(m, s, red);
  const bool ok = t >= 0 && t < ncol;
  if (loss && threadIdx.x == 0) loss[row] = ok ? (m - tr::load(logits[row * ncol + t])) + ck_log(s) : ck_nan(C(0));
  if (!grad) return;
  const C w = ck_ce_weight(gl, gl_rows, mean, stat, row);
  const C a = w * ck_rcp(s);
  const long long tl = ok ? t : -1;
  for (int k0 = threadIdx.x; k0 < nvec; k0 += step) {
    ck_pack<T, V> p[CK_U];
#pragma unroll
    for (int u = 0; u < CK_U; ++u) { const int k = k0 + u * blockDim.x; if (k < nvec) p[u].raw = xr[k]; }
#pragma unroll
    for (int u = 0; u < CK_U; ++u) {
      const int k = k0 + u * blockDim.x;
      if (k < nvec) {
        C v[V];
        ck_cvt<T, V>::load(p[u], v);
#pragma unroll
        for (int i = 0; i < V; ++i) v[i] = ck_exp<T>(v[i] - m) * a - ((long long)k * V + i == tl ? w : C(0));
        ck_pack<T, V> po;
        ck_cvt<T, V>::store(po, v);
        gr[k] = po.raw;
      }
    }
  }
}

// loss_rows: [n] (acc); out: [1] = their sum in a fixed order, divided by stat[0] when mean.
template <typename C>
__global__ void __launch_bounds__(1024) ck_ce_reduce(const C* __restrict__ loss_rows, long long n,
                                                     const long long* __restrict__ stat, int mean, C* __restrict__ out) {
  __shared__ C red[CK_RED];
  C s = C(0);
  for (long long i = threadIdx.x; i < n; i += blockDim.x) s += loss_rows[i];
  s = ck_row_red<false>(s, red);
  if (threadIdx.x == 0) out[0] = mean ? s / C(stat[0]) : s;
}
"""


def name_expressions(dtype=None) -> list[str]:
    """Every template instantiation this module launches (for one dtype name when given)."""
    out = []
    for dt in (FLOAT_DTYPE_NAMES if dtype is None else (dtype,)):
        t = ctype(dt)
        for v in (16 // _ITEM[dt], 1):
            out += [f"ck_ce_reg<{t}, {v}, {nv}>" for nv in reg_nvs(v)]
            out.append(f"ck_ce_loop<{t}, {v}>")
        out.append(f"ck_ce_prep<{t}>")
        out.append(f"ck_ce_reduce<{'double' if dt == 'float64' else 'float'}>")
    return out


_ITEM = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
_families = {dt: KernelFamily(SOURCE, (lambda dt=dt: name_expressions(dt)), f"cudakit/cross_entropy_{dt}.cu")
             for dt in FLOAT_DTYPE_NAMES}


def _acc(dtype_name: str):
    return np.float64 if dtype_name == "float64" else np.float32


def cross_entropy(logits, targets, reduction: str = "mean", ignore_index: int = -100, grad_loss=None,
                  want_loss: bool = True, want_grad: bool = False, plan_nv=None, err=None, err_code: int = 0):
    """Cross-entropy of each row of `logits` against `targets`, its gradient, or both in one pass.

    logits: (N, C) contiguous, float16/bfloat16/float32/float64; targets: (N,) contiguous int32 or
    int64; reduction: "mean", "sum" or "none"; grad_loss: None (gradient of the loss itself, i.e.
    1) or an array of the accumulation dtype, shape (1,) ("mean"/"sum") or (N,) ("none").
    Returns (loss, dlogits, stat): loss 0-d ("mean"/"sum") or (N,) ("none") float32 (float64 for
    float64 logits), None unless want_loss; dlogits like logits, None unless want_grad; stat the
    (3,) int64 device array (non-ignored count, out-of-range count, first out-of-range index) the
    caller may check (an out-of-range target gives NaN, not an error, here). err: the device's
    error flag (runtime.device_errors.flag) or None; err_code: the code recorded there for an
    out-of-range target.
    """
    cp = _cupy.loaded_cupy()
    n, c = logits.shape
    dt = dtype_name(logits.dtype)
    t = ctype(dt)
    t64 = np.int32(targets.dtype.itemsize == 8)
    acc = _acc(dt)
    stat = cp.empty(3, np.int64)
    launch(_families, f"ck_ce_prep<{t}>", dt, (1, 1, 1), (PREP_THREADS, 1, 1),
           (targets, t64, np.int64(n), np.int64(c), np.int64(ignore_index), stat, _ptr(err), np.int64(err_code)))
    rows_loss = cp.empty(n, acc) if want_loss else None
    grad = cp.empty_like(logits) if want_grad else None
    if n and c:
        v = vec_for(c, dt, logits, *([grad] if want_grad else []))
        nvec = c // v
        gl_rows = int(reduction == "none")
        args = (logits, targets, t64, _ptr(grad_loss), np.int32(gl_rows), np.int32(reduction == "mean"), stat,
                _ptr(rows_loss), _ptr(grad))
        plan = reg_plan(nvec, plan_nv or FWD_TARGET_NV, lambda nv: fwd_bound(nv, v, dt), reg_nvs(v))
        if plan is not None:
            tpr, nv, rpb = plan
            launch(_families, f"ck_ce_reg<{t}, {v}, {nv}>", dt, (-(-n // rpb), 1, 1), (tpr, rpb, 1),
                   args + (np.int64(n), np.int32(nvec), np.int64(ignore_index)))
        else:
            launch(_families, f"ck_ce_loop<{t}, {v}>", dt, (n, 1, 1), (LOOP_THREADS, 1, 1),
                   args + (np.int32(nvec), np.int64(ignore_index)))
    elif n and want_loss:  # C == 0: every target must be ignored (stat says otherwise); loss 0
        rows_loss.fill(0)
    loss = rows_loss
    if want_loss and reduction != "none":
        loss = cp.empty((), acc)
        launch(_families, f"ck_ce_reduce<{'double' if acc is np.float64 else 'float'}>", dt, (1, 1, 1),
               (REDUCE_THREADS, 1, 1), (rows_loss, np.int64(n), stat, np.int32(reduction == "mean"), loss))
    return loss, grad, stat


def _ptr(a):
    return np.uint64(0) if a is None else a
