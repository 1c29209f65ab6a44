"""Matrix products on the CPU with NumPy, the same contract as cudakit.kernels.linalg: 16-bit
operands multiplied in float32 and rounded once, float64 in double."""
from __future__ import annotations

import numpy as np


def gemm(a, b, out, trans_a: bool = False, trans_b: bool = False, beta: float = 0.0):
    """out[i] = op(a[i]) @ op(b[i]) + beta * out[i] (see kernels.linalg.gemm)."""
    acc = np.float64 if a.dtype == np.float64 else np.float32
    opa = a.astype(acc, copy=False)
    opb = b.astype(acc, copy=False)
    if trans_a:
        opa = opa.swapaxes(1, 2)
    if trans_b:
        opb = opb.swapaxes(1, 2)
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 is NaN, as the GPU gives, silently
        r = np.matmul(opa, opb)
        if beta != 0.0:
            r += acc(beta) * out.astype(acc)
        out[...] = r
    return out


def linear_epilogue(x3, w3, w_stored_nk: bool, out, bias=None, gelu: bool = False, aux=None,
                    residual=None) -> bool:
    """out = epilogue(x3 @ W^T) computed in float32 (float64) and rounded once, as the GPU's
    cuBLASLt epilogue (see kernels.cublaslt.linear_epilogue); always True."""
    from .cpu import _K0, _K1, _sigmoid
    acc = np.float64 if out.dtype == np.float64 else np.float32
    w = w3[0].astype(acc)
    with np.errstate(invalid="ignore", over="ignore"):
        h = x3[0].astype(acc) @ (w.T if w_stored_nk else w)
        if bias is not None:
            h += bias.astype(acc)
        if residual is not None:
            h += residual[0].astype(acc)
        if aux is not None:
            aux[0] = h
        if gelu:
            h = h * _sigmoid(2 * _K0 * (h + _K1 * h ** 3))
        out[0] = h
    return True


def dgrad_gelu(g3, w3, w_stored_nk: bool, gx, pre3) -> bool:
    """gx = (g3 @ W) * gelu'(pre3) (tanh form) computed in float32 (float64) and rounded once, as
    the GPU's cuBLASLt DGELU epilogue (see kernels.cublaslt.dgrad_gelu); always True."""
    from .cpu import _gelu_tanh_bwd
    acc = np.float64 if gx.dtype == np.float64 else np.float32
    w = w3[0].astype(acc)
    with np.errstate(invalid="ignore", over="ignore"):
        h = g3[0].astype(acc) @ (w if w_stored_nk else w.T)
        gx[0] = _gelu_tanh_bwd(h, pre3[0].astype(acc))
    return True


def wgrad_bias(g3, x3, gw):
    """The GPU's weight gradient with the bias's in one GEMM (see kernels.cublaslt.wgrad_bias): here
    None, nothing written (the GEMM and the bias's sum run apart)."""
    return None


def broadcast_copy(x, shape):
    """x broadcast to `shape` as a new C-contiguous array."""
    return np.ascontiguousarray(np.broadcast_to(x, shape))
