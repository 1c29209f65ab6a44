"""Planners of the matrix-product family for cudakit.dispatch: matmul, linear, fused_linear_gelu
(and _with_preact) and linear_backward.

Each planner runs after the checked call with the same signature succeeded (so the arguments are
valid) and returns a function that makes the same cuBLASLt calls the checked path makes
(backends/linalg_api.py: the same cases, hence the same algorithms and bitwise the same results),
with the plans bound once (kernels/cublaslt.bound) and the outputs allocated from the pool; or
None where the checked path takes another route (copies of non-contiguous operands, the unfused
bias/GELU path, broadcast batches), which then keeps running for that signature.
"""
from __future__ import annotations

import math

from ..runtime import _cupy
from . import cublaslt

_NOT_SUPPORTED = 15


def _linear_layout(contiguous: tuple, x, weight):
    """(w3, stored (out, in), fout, fin, rows) of a linear call whose `contiguous` arrays are all
    C-contiguous (None entries skipped), its weight stored (out, in) or a transposed view of such
    a buffer (read as its (1, r, c) buffer, as the checked path does); None where the checked path
    would copy an operand."""
    if any(a is not None and not a.flags.c_contiguous for a in contiguous):
        return None
    if weight.flags.c_contiguous:
        w3, stored = weight.reshape(1, *weight.shape), True
    elif weight.T.flags.c_contiguous:
        w3, stored = weight.T.reshape(1, *weight.T.shape), False
    else:
        return None
    fout, fin = weight.shape
    return w3, stored, fout, fin, math.prod(x.shape[:-1])


def _lt_step(bp, a, b, out, bias=None, aux=None, ws=None):
    """The native replay step (runtime/_native.c replay_new, kind 1) of one call of bound plan bp:
    the same lt_matmul arguments cublaslt.run passes. a, b, out, bias, aux, ws: where each address
    comes from, (0, i) argument i's data or (1, j) allocation j; None: no pointer (0)."""
    nat = cublaslt._native()
    handle, desc, (la, lb, lc, ld), algo, wsize, scal, _ = bp
    slots = [nat[1], nat[2], handle.value, desc.value, 0, 0, cublaslt._scalar_ptr(scal, 1.0), 0, la.value, 0,
             lb.value, cublaslt._scalar_ptr(scal, 0.0), 0, lc.value, 0, ld.value, algo, 0, wsize, 0]
    subs = [(19, 2, 0, 0)]   # the current stream
    for slot, src in ((4, bias), (5, aux), (7, b), (9, a), (12, out), (14, out), (17, ws if wsize else None)):
        if src is not None:
            subs.append((slot, src[0], src[1], 0))
    params = tuple(int(v).to_bytes(8, "little") for v in slots)
    return (1, 0, (1, 1, 1, 1, 1, 1, 0), params, tuple(subs), ("cublaslt_matmul", (1, 1, 1), (1, 1, 1)))


def _replay(op: str, bps: list, allocs: list, steps: list, outs: list, single: bool):
    """The plan as a native Replay of cuBLASLt steps, or None where the native module (or its
    cuBLASLt entry) is unavailable: the caller keeps its Python closure."""
    if not cublaslt._native():
        return None
    from ..runtime import native

    def on_status(status, step):
        if status == _NOT_SUPPORTED:
            from .. import dispatch
            dispatch.clear()   # this plan holds the descriptor drop() destroys
            cublaslt.drop(bps[step])
        cublaslt._check(status, f"{op}: cublasLtMatmul")
    try:
        return native.replay(tuple(allocs), tuple(steps), tuple(outs), single, on_status)
    except (TypeError, ValueError, OverflowError):
        return None


def _runner(op: str, bp):
    """run(a_ptr, b_ptr, out_ptr, bias_ptr, aux_ptr) of bound plan bp, raising on a failed call."""
    def run(a_ptr, b_ptr, out_ptr, bias_ptr=0, aux_ptr=0):
        status = cublaslt.run(bp, a_ptr, b_ptr, out_ptr, 0.0, bias_ptr, aux_ptr)
        if status:
            if status == _NOT_SUPPORTED:
                cublaslt.drop(bp)
            cublaslt._check(status, f"{op}: cublasLtMatmul")
    return run


def plan_linear(x, weight, bias=None, gelu=False, want_pre=False, op="linear"):
    """Planner of linear (gelu False) and of the tanh-GELU fused linear (gelu True), for C-contiguous
    x and bias and a weight stored (out, in) or as a transposed view, where the epilogue applies."""
    cp = _cupy.cupy()
    lay = _linear_layout((x, bias), x, weight) if x.ndim >= 1 else None
    if lay is None:
        return None
    w3, stored_nk, fout, fin, rows = lay
    lead = tuple(x.shape[:-1])
    dtype = x.dtype
    out = cp.empty((1, rows, fout), dtype)
    if not cublaslt.epilogue_applies(out, fin, bias, gelu):
        return None
    aux = cp.empty((1, rows, fout), dtype) if want_pre else None
    bp = cublaslt.bound(x.reshape(1, rows, fin), w3, out, False, stored_nk, bias, gelu, aux)
    if bp is None:
        return None
    shape = lead + (fout,)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes:
        allocs = [nbytes] + ([nbytes] if want_pre else []) + ([bp[4]] if bp[4] else [])
        ws = (1, len(allocs) - 1) if bp[4] else None
        step = _lt_step(bp, (0, 0), (0, 1), (1, 0), None if bias is None else (0, 2), (1, 1) if want_pre else None, ws)
        outs = [(0, 0, shape, dtype, ())] + ([(1, 0, shape, dtype, ())] if want_pre else [])
        rp = _replay(op, [bp], allocs, [step], outs, not want_pre)
        if rp is not None:
            return rp
    run = _runner(op, bp)
    nd = cp.ndarray

    if want_pre:
        def planned(x, weight, bias=None):
            y, pre = nd(shape, dtype), nd(shape, dtype)
            run(x.data.ptr, weight.data.ptr, y.data.ptr, 0 if bias is None else bias.data.ptr, pre.data.ptr)
            return y, pre
    else:
        def planned(x, weight, bias=None):
            y = nd(shape, dtype)
            run(x.data.ptr, weight.data.ptr, y.data.ptr, 0 if bias is None else bias.data.ptr)
            return y
    return planned


def plan_fused_linear_gelu(x, weight, bias=None, approximate="tanh"):
    if approximate != "tanh":
        return None
    p = plan_linear(x, weight, bias, True, False, "fused_linear_gelu")
    return None if p is None else (lambda x, weight, bias=None, approximate="tanh": p(x, weight, bias))


def plan_fused_linear_gelu_with_preact(x, weight, bias=None, approximate="tanh"):
    if approximate != "tanh":
        return None
    p = plan_linear(x, weight, bias, True, True, "fused_linear_gelu_with_preact")
    return None if p is None else (lambda x, weight, bias=None, approximate="tanh": p(x, weight, bias))


def plan_linear_backward(grad_out, x, weight, bias=True):
    """Planner of linear_backward for C-contiguous grad_out and x: grad_x = grad_out @ weight and
    grad_weight = grad_out^T @ x as the checked path's two GEMMs, grad_bias out of the second one
    (cublaslt.wgrad_bias) where the checked path took it so, else by ops.sum (planned)."""
    cp = _cupy.cupy()
    lay = _linear_layout((grad_out, x), x, weight)
    if lay is None:
        return None
    w3, stored_nk, fout, fin, rows = lay
    if rows == 0 or fout == 0 or fin == 0:
        return None
    dtype = x.dtype
    g3, x3 = grad_out.reshape(1, rows, fout), x.reshape(1, rows, fin)
    bp_x = cublaslt.bound(g3, w3, cp.empty((1, rows, fin), dtype), False, not stored_nk)
    # the bias's gradient out of the weight-gradient GEMM (BGRADB) where the checked call took it
    # so: that call ran cublaslt.wgrad_bias for this signature, whose bound plan exists then
    fused = bool(bias) and _wgrad_bias_bound(g3, x3, dtype, fout, fin)
    bp_w = fused or cublaslt.bound(g3, x3, cp.empty((1, fout, fin), dtype), True, False)
    if bp_x is None or bp_w is None:
        return None
    from .. import ops
    nd, xshape, wshape = cp.ndarray, tuple(x.shape), tuple(weight.shape)
    wsize = max(bp_x[4], bp_w[4])
    allocs = [rows * fin * dtype.itemsize, fout * fin * dtype.itemsize] + ([fout * dtype.itemsize] if fused else []) \
        + ([wsize] if wsize else [])
    ws = (1, len(allocs) - 1) if wsize else None
    outs = [(0, 0, xshape, dtype, ()), (1, 0, wshape, dtype, ())] + ([(2, 0, (fout,), dtype, ())] if fused else [])
    rp = _replay("linear_backward", [bp_x, bp_w], allocs,
                 [_lt_step(bp_x, (0, 0), (0, 2), (1, 0), ws=ws),
                  _lt_step(bp_w, (0, 0), (0, 1), (1, 1), bias=(1, 2) if fused else None, ws=ws)], outs, False)
    if rp is not None and fused:
        def replayed_fused(grad_out, x, weight, bias=True):
            return rp(grad_out, x, weight)
        return replayed_fused
    if rp is not None:
        def replayed(grad_out, x, weight, bias=True):
            gx, gw = rp(grad_out, x, weight)
            return gx, gw, (ops.sum(grad_out.reshape(rows, fout), 0) if bias else None)
        return replayed
    run_x, run_w = _runner("linear_backward", bp_x), _runner("linear_backward", bp_w)

    def planned(grad_out, x, weight, bias=True):
        gx, gw = nd(xshape, dtype), nd(wshape, dtype)
        g = grad_out.data.ptr
        run_x(g, weight.data.ptr, gx.data.ptr)
        if fused:
            gb = nd((fout,), dtype)
            run_w(g, x.data.ptr, gw.data.ptr, gb.data.ptr)
            return gx, gw, gb
        run_w(g, x.data.ptr, gw.data.ptr)
        return gx, gw, (ops.sum(grad_out.reshape(rows, fout), 0) if bias else None)
    return planned


def _wgrad_bias_bound(g3, x3, dtype, fout: int, fin: int):
    """The bound plan of cublaslt.wgrad_bias for these operands where it applies and cuBLASLt has an
    algorithm (the checked call then took it), else False."""
    cp = _cupy.cupy()
    gw, gb = cp.empty((1, fout, fin), dtype), cp.empty((fout,), dtype)
    if not cublaslt.wgrad_bias_applies(g3, x3, gw):
        return False
    return cublaslt.bound(g3, x3, gw, True, False, bgrad=gb) or False


def plan_matmul(a, b, out=None):
    """Planner of matmul for C-contiguous a (..., M, K) and b (K, N), C-contiguous or a transposed
    view (one GEMM over every row of a, as the checked path folds a shared b), or C-contiguous b
    (..., K, N) with a's batch dims."""
    cp = _cupy.cupy()
    if out is not None or a.ndim < 2 or b.ndim < 2 or not a.flags.c_contiguous:
        return None
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = math.prod(a.shape[:-2])
    if batch == 0 or m == 0 or n == 0 or k == 0:
        return None
    dtype = a.dtype
    shape = tuple(a.shape[:-1]) + (n,)
    tb = False
    if b.ndim == 2 and batch * m <= 2**31 - 1 and (b.flags.c_contiguous or b.T.flags.c_contiguous):
        tb = not b.flags.c_contiguous     # a transposed view is read as a transpose, as the checked path does
        b3 = b.T.reshape(1, n, k) if tb else b.reshape(1, k, n)
        a3, o3 = a.reshape(1, batch * m, k), cp.empty((1, batch * m, n), dtype)
    elif b.shape[:-2] == a.shape[:-2] and batch > 1 and b.flags.c_contiguous:
        a3, b3, o3 = a.reshape(batch, m, k), b.reshape(batch, k, n), cp.empty((batch, m, n), dtype)
    else:
        return None
    bp = cublaslt.bound(a3, b3, o3, False, tb)
    if bp is None:
        return None
    allocs = [math.prod(shape) * dtype.itemsize] + ([bp[4]] if bp[4] else [])
    rp = _replay("matmul", [bp], allocs, [_lt_step(bp, (0, 0), (0, 1), (1, 0), ws=(1, 1) if bp[4] else None)],
                 [(0, 0, shape, dtype, ())], True)
    if rp is not None:
        return rp
    run = _runner("matmul", bp)
    nd = cp.ndarray

    def planned(a, b, out=None):
        y = nd(shape, dtype)
        run(a.data.ptr, b.data.ptr, y.data.ptr)
        return y
    return planned
