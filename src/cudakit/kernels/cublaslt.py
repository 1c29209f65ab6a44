"""x @ weight^T with a fused epilogue through cuBLASLt (ctypes; CuPy does not wrap it): the bias,
GELU (tanh form) and the pre-activation as a second output are applied to the float32 accumulator
inside the GEMM, so linear + GELU is one kernel.

Used where it was measured to round as the unfused float32 path does (lent H100 GPU-be5065bf,
2026-11-23, .carry probe): out_features a multiple of 8 (unaligned, bfloat16 results with a bias
were off the correctly rounded value 1298 times in 4352, against 0 for the unfused path), and the
GELU only for 16-bit outputs: cuBLASLt's GELU differs from the tanh form by up to 5.3e-6 (float32),
which moved 0.8% of bfloat16 results (2165 of 262144) by one ulp against 18 for the unfused path.
`linear_epilogue` returns False where it does not apply, where cuBLASLt is not loadable or has no
algorithm; the caller then computes the same thing without it.
"""
from __future__ import annotations

import ctypes
import logging

import numpy as np

from ..errors import CudakitError
from ..runtime import _cupy

log = logging.getLogger(__name__)

# cublasLt.h / library_types.h enum values (CUDA 12 and 13)
_CUDA_R = {"float16": 2, "bfloat16": 14, "float32": 0, "float64": 1}
_COMPUTE_32F, _COMPUTE_64F = 68, 70
_DESC_TRANSA, _DESC_TRANSB, _DESC_EPILOGUE, _DESC_BIAS_POINTER = 3, 4, 7, 8
_DESC_AUX_POINTER, _DESC_AUX_LD = 11, 12
_PREF_MAX_WORKSPACE = 1
EPILOGUE = {"none": 1, "bias": 4, "gelu": 32, "gelu_aux": 160, "gelu_bias": 36, "gelu_aux_bias": 164}
_WORKSPACE = 32 << 20     # cuBLAS's recommendation for Hopper


class _HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


_lib = None          # the CDLL, or False when none loads
_handles: dict = {}  # device -> (handle, workspace array)
_plans: dict = {}    # case key -> (desc, layouts, algo) or None when cuBLASLt has no algorithm


def _load():
    global _lib
    if _lib is None:
        for name in ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"):
            try:
                _lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        else:
            _lib = False
            log.info("cuBLASLt is not loadable: linear and fused_linear_gelu use cuBLAS and a separate pass")
    return _lib


def _check(status: int, what: str) -> None:
    if status != 0:
        raise CudakitError(f"{what} failed with cublasStatus_t {status}")


def _handle(dev: int):
    h = _handles.get(dev)
    if h is None:
        cp = _cupy.cupy()
        handle = ctypes.c_void_p()
        _check(_lib.cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
        # the workspace lives as long as the process: its own cudaMalloc, outside the pool, where a
        # long-lived block would pin the chunk it was carved from (as cuBLAS keeps its workspace)
        h = _handles[dev] = (handle, cp.cuda.Memory(_WORKSPACE))
    return h


def _set(fn, obj, attr: int, value) -> None:
    _check(fn(obj, attr, ctypes.byref(value), ctypes.sizeof(value)), "cublasLt set attribute")


def _plan(key, handle):
    """The matmul descriptor, the four layouts and an algorithm for this case, made once."""
    (dtype, rows, fin, fout, w_stored_nk, epilogue, ptr_align) = key
    lib = _lib
    f64 = dtype == "float64"
    desc = ctypes.c_void_p()
    _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), _COMPUTE_64F if f64 else _COMPUTE_32F,
                                        _CUDA_R["float64" if f64 else "float32"]), "cublasLtMatmulDescCreate")
    # column-major: D (fout x rows) = op(A) @ B, A = the weight's buffer, B = x's buffer (fin x rows)
    _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_TRANSA, ctypes.c_int32(1 if w_stored_nk else 0))
    _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_TRANSB, ctypes.c_int32(0))
    _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_EPILOGUE, ctypes.c_uint32(EPILOGUE[epilogue]))
    t = _CUDA_R[dtype]
    layouts = []
    for r, c, ld in ((fin, fout, fin) if w_stored_nk else (fout, fin, fout), (fin, rows, fin),
                     (fout, rows, fout), (fout, rows, fout)):
        lay = ctypes.c_void_p()
        _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(lay), t, ctypes.c_uint64(r), ctypes.c_uint64(c),
                                              ctypes.c_int64(ld)), "cublasLtMatrixLayoutCreate")
        layouts.append(lay)
    if "aux" in epilogue:  # the pointers' alignment steers the heuristic: set stand-ins of it
        _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_AUX_LD, ctypes.c_int64(fout))
        _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_AUX_POINTER, ctypes.c_void_p(ptr_align))
    if "bias" in epilogue:
        _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_BIAS_POINTER, ctypes.c_void_p(ptr_align))
    pref = ctypes.c_void_p()
    _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
    _set(lib.cublasLtMatmulPreferenceSetAttribute, pref, _PREF_MAX_WORKSPACE, ctypes.c_uint64(_WORKSPACE))
    result = _HeuristicResult()
    count = ctypes.c_int(0)
    status = lib.cublasLtMatmulAlgoGetHeuristic(handle, desc, *layouts, pref, 1, ctypes.byref(result),
                                                ctypes.byref(count))
    lib.cublasLtMatmulPreferenceDestroy(pref)
    if status != 0 or count.value < 1:
        log.info("cuBLASLt has no algorithm for %s (status %d): the unfused path runs", key, status)
        return None
    return desc, layouts, result


def linear_epilogue(x3, w3, w_stored_nk: bool, out, bias=None, gelu: bool = False, aux=None) -> bool:
    """out (1, rows, fout) = epilogue(x3 (1, rows, fin) @ W^T) in one cuBLASLt call; W is w3's
    buffer, stored (fout, fin) when w_stored_nk, else (fin, fout). bias: (fout,) or None; gelu: apply
    GELU (tanh form) after the bias; aux: (1, rows, fout) receiving the pre-activation (with gelu).
    All C-contiguous, one dtype. Returns False (nothing written) where cuBLASLt cannot do it."""
    if not _load():
        return False
    cp = _cupy.cupy()
    from ..backends.base import supported_dtypes
    dtype = supported_dtypes()[out.dtype]
    _, rows, fout = out.shape
    fin = x3.shape[2]
    if rows == 0 or fout == 0 or fin == 0 or max(rows, fout, fin) > 2**31 - 1:
        return False
    if fout % 8:  # the aux leading dimension must be a multiple of 8; and with an unaligned fout the
        return False  # bias epilogue's bfloat16 results came out double-rounded (1298 of 4352 off)
    if gelu and dtype not in ("float16", "bfloat16"):
        return False  # its GELU is 5e-6 off the tanh form: fine below 16-bit rounding, not for float32
    epi = ("gelu" if gelu else "") + ("_aux" if aux is not None else "") + ("_bias" if bias is not None else "")
    epi = epi.lstrip("_") or "none"
    ptrs = [p.data.ptr for p in (bias, aux) if p is not None]
    align = 16 if all(p % 16 == 0 for p in ptrs) else 2
    dev = out.data.device_id
    key = (dtype, rows, fin, fout, w_stored_nk, epi, align)
    with cp.cuda.Device(dev):
        handle, ws = _handle(dev)
        if (dev, key) not in _plans:
            _plans[(dev, key)] = _plan(key, handle)
        plan = _plans[(dev, key)]
        if plan is None:
            return False
        desc, (la, lb, lc, ld), result = plan
        if bias is not None:
            _set(_lib.cublasLtMatmulDescSetAttribute, desc, _DESC_BIAS_POINTER, ctypes.c_void_p(bias.data.ptr))
        if aux is not None:
            _set(_lib.cublasLtMatmulDescSetAttribute, desc, _DESC_AUX_POINTER, ctypes.c_void_p(aux.data.ptr))
        scal = np.float64 if dtype == "float64" else np.float32
        alpha, beta = np.ones(1, scal), np.zeros(1, scal)
        _check(_lib.cublasLtMatmul(
            handle, desc, ctypes.c_void_p(alpha.ctypes.data), ctypes.c_void_p(w3.data.ptr), la,
            ctypes.c_void_p(x3.data.ptr), lb, ctypes.c_void_p(beta.ctypes.data), ctypes.c_void_p(out.data.ptr), lc,
            ctypes.c_void_p(out.data.ptr), ld, ctypes.byref(result.algo), ctypes.c_void_p(ws.ptr),
            ctypes.c_size_t(_WORKSPACE), ctypes.c_void_p(cp.cuda.get_current_stream().ptr)), "cublasLtMatmul")
    return True
