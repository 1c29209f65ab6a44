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
3. "mean" / "sum": the last block of kernel 2 to finish (a ticket counter in stat) sums the
   per-row losses in a fixed order (bitwise reproducible whichever block is last) and divides by
   the count for "mean" (0 / 0 = NaN when every target is ignored, as torch): no third launch.
   `ck_ce_reduce` does the same as its own launch where kernel 2 does not run (C == 0).
   Traffic: N * sizeof(loss).
An out-of-range target gives a NaN loss and no one-hot term in its row (nothing is read outside
the logits); nothing synchronises: the error flag raises TargetIndexError at the next
cudakit.check() / synchronize() / to_host() (or the caller reads stat back, with validate=True). Inputs: contiguous CuPy arrays on the current device, validated by the caller
(cudakit.backends.softmax_api): logits float16/bfloat16/float32/float64, targets int32/int64.
"""
from __future__ import annotations

import numpy as np

from ..runtime import _cupy
from ._common import FLOAT_DTYPE_NAMES, KernelFamily, ctype, dtype_name, cuda_source
from .softmax import FWD_TARGET_NV, HELPER_FILES, LOOP_THREADS, fwd_bound, launch, reg_nvs, reg_plan, vec_for

PREP_THREADS = 1024
REDUCE_THREADS = 1024

SOURCE_FILES = ("_pdl.cuh", "_preamble.cuh", *HELPER_FILES, "cross_entropy.cu")
SOURCE = cuda_source(*SOURCE_FILES)


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
    (4,) int64 device array (non-ignored count, out-of-range count, first out-of-range index, and
    the count of finished blocks the loss sum uses) the
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
    stat = cp.empty(4, np.int64)
    launch(_families, f"ck_ce_prep<{t}>", dt, (1, 1, 1), (PREP_THREADS, 1, 1),
           (targets, t64, np.int64(n), np.int64(c), np.int64(ignore_index), stat, _ptr(err), np.int64(err_code)))
    rows_loss = cp.empty(n, acc) if want_loss else None
    grad = cp.empty_like(logits) if want_grad else None
    # "mean"/"sum": the main kernel's last block sums the rows' losses (ck_ce_total), no third launch
    total = cp.empty((), acc) if want_loss and reduction != "none" and n and c else None
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
                   args + (np.int64(n), np.int32(nvec), np.int64(ignore_index), _ptr(total)))
        else:
            launch(_families, f"ck_ce_loop<{t}, {v}>", dt, (n, 1, 1), (LOOP_THREADS, 1, 1),
                   args + (np.int32(nvec), np.int64(ignore_index), _ptr(total)))
    elif n and want_loss:  # C == 0: every target must be ignored (stat says otherwise); loss 0
        rows_loss.fill(0)
    loss = rows_loss if total is None else total
    if want_loss and reduction != "none" and total is None:   # C == 0 (or no rows): the separate sum
        loss = cp.empty((), acc)
        launch(_families, f"ck_ce_reduce<{'double' if acc is np.float64 else 'float'}>", dt, (1, 1, 1),
               (REDUCE_THREADS, 1, 1), (rows_loss, np.int64(n), stat, np.int32(reduction == "mean"), loss))
    return loss, grad, stat


def _ptr(a):
    return np.uint64(0) if a is None else a
