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
import threading
from collections import OrderedDict

import numpy as np

from .. import profiler
from ..errors import CudakitError
from ..runtime import _cupy

log = logging.getLogger(__name__)

# cublasLt.h / library_types.h enum values (CUDA 12 and 13)
CUDA_R = {"float16": 2, "bfloat16": 14, "float32": 0, "float64": 1}
COMPUTE_32F, COMPUTE_64F = 68, 70
_DESC_TRANSA, _DESC_TRANSB, _DESC_EPILOGUE, _DESC_BIAS_POINTER = 3, 4, 7, 8
_DESC_AUX_POINTER, _DESC_AUX_LD = 11, 12
_PREF_MAX_WORKSPACE = 1
_PREF_MIN_ALIGN = (5, 6, 7, 8)   # CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES
_STATUS_NOT_SUPPORTED = 15
EPILOGUE = {"none": 1, "bias": 4, "gelu": 32, "gelu_aux": 160, "gelu_bias": 36, "gelu_aux_bias": 164}
_WORKSPACE = 32 << 20     # cuBLAS's recommendation for Hopper
_MAX_PLANS = 64           # descriptors kept (a new batch size or shape makes one); the oldest is destroyed


class _HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


_lib = None                    # the CDLL, or False when none loads
_handles: dict = {}            # device -> cublasLtHandle_t
_plans: OrderedDict = OrderedDict()   # (device, case key) -> (desc, layouts, heuristic result) or None
# A plan's descriptor carries the bias and aux pointers of the call being made: one call at a time
_lock = threading.Lock()

_P, _I, _U64, _I64, _SZ = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_int64, ctypes.c_size_t
_SIGNATURES = {  # cublasLt.h
    "cublasLtCreate": [_P],
    "cublasLtMatmulDescCreate": [_P, _I, _I],
    "cublasLtMatmulDescDestroy": [_P],
    "cublasLtMatmulDescSetAttribute": [_P, _I, _P, _SZ],
    "cublasLtMatrixLayoutCreate": [_P, _I, _U64, _U64, _I64],
    "cublasLtMatrixLayoutDestroy": [_P],
    "cublasLtMatmulPreferenceCreate": [_P],
    "cublasLtMatmulPreferenceSetAttribute": [_P, _I, _P, _SZ],
    "cublasLtMatmulPreferenceDestroy": [_P],
    "cublasLtMatmulAlgoGetHeuristic": [_P, _P, _P, _P, _P, _P, _P, _I, _P, _P],
    "cublasLtMatmul": [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _SZ, _P],
}


def _load():
    global _lib
    if _lib is None:
        for name in ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"):
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        else:
            _lib = False
            log.info("cuBLASLt is not loadable: linear and fused_linear_gelu use cuBLAS and a separate pass")
            return _lib
        try:
            for fn, args in _SIGNATURES.items():
                f = getattr(lib, fn)
                f.argtypes, f.restype = args, ctypes.c_int
        except AttributeError as e:  # an older library without one of the entry points
            _lib = False
            log.info("cuBLASLt lacks %s: linear and fused_linear_gelu use cuBLAS and a separate pass", e)
            return _lib
        _lib = lib
    return _lib


def _check(status: int, what: str) -> None:
    if status != 0:
        raise CudakitError(f"{what} failed with cublasStatus_t {status}")


def _handle(dev: int):
    h = _handles.get(dev)
    if h is None:
        h = ctypes.c_void_p()
        _check(_lib.cublasLtCreate(ctypes.byref(h)), "cublasLtCreate")
        _handles[dev] = h
    return h


def _set(fn, obj, attr: int, value) -> None:
    _check(fn(obj, attr, ctypes.byref(value), ctypes.sizeof(value)), "cublasLt set attribute")


def _alignment(ptr: int) -> int:
    """The largest power of two up to 256 dividing ptr (the heuristic picks kernels that rely on it)."""
    a = 256
    while ptr % a:
        a //= 2
    return a


def _destroy(plan) -> None:
    if plan is not None:
        desc, layouts, _ = plan
        if desc.value:
            _lib.cublasLtMatmulDescDestroy(desc)
        for lay in layouts:
            _lib.cublasLtMatrixLayoutDestroy(lay)


def _plan(key, handle):
    """The matmul descriptor, the four layouts and an algorithm for this case, made once."""
    desc, layouts, pref = ctypes.c_void_p(), [], ctypes.c_void_p()
    try:
        return _make_plan(key, handle, desc, layouts, pref)
    except CudakitError:
        _destroy((desc, layouts, None))
        raise
    finally:
        if pref.value:
            _lib.cublasLtMatmulPreferenceDestroy(pref)


def _make_plan(key, handle, desc, layouts, pref):
    """_plan's body: fills desc, layouts and pref (the caller frees them on failure)."""
    (dtype, rows, fin, fout, w_stored_nk, epilogue, aligns) = key
    lib = _lib
    f64 = dtype == "float64"
    _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), COMPUTE_64F if f64 else COMPUTE_32F,
                                        CUDA_R["float64" if f64 else "float32"]), "cublasLtMatmulDescCreate")
    # column-major: D (fout x rows) = op(A) @ B, A = the weight's buffer, B = x's buffer (fin x rows)
    _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_TRANSA, ctypes.c_int32(1 if w_stored_nk else 0))
    _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_TRANSB, ctypes.c_int32(0))
    _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_EPILOGUE, ctypes.c_uint32(EPILOGUE[epilogue]))
    t = CUDA_R[dtype]
    for r, c, ld in ((fin, fout, fin) if w_stored_nk else (fout, fin, fout), (fin, rows, fin),
                     (fout, rows, fout), (fout, rows, fout)):
        lay = ctypes.c_void_p()
        _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(lay), t, r, c, ld), "cublasLtMatrixLayoutCreate")
        layouts.append(lay)
    a_w, a_x, a_out, a_epi = aligns
    if "aux" in epilogue:  # the pointers' alignment steers the heuristic: stand-ins with that alignment
        _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_AUX_LD, ctypes.c_int64(fout))
        _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_AUX_POINTER, ctypes.c_void_p(a_epi))
    if "bias" in epilogue:
        _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_BIAS_POINTER, ctypes.c_void_p(a_epi))
    _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
    _set(lib.cublasLtMatmulPreferenceSetAttribute, pref, _PREF_MAX_WORKSPACE, ctypes.c_uint64(_WORKSPACE))
    for attr, a in zip(_PREF_MIN_ALIGN, (a_w, a_x, a_out, a_out)):
        _set(lib.cublasLtMatmulPreferenceSetAttribute, pref, attr, ctypes.c_uint32(a))
    result = _HeuristicResult()
    count = ctypes.c_int(0)
    status = lib.cublasLtMatmulAlgoGetHeuristic(handle, desc, *layouts, pref, 1, ctypes.byref(result),
                                                ctypes.byref(count))
    if status != 0 or count.value < 1 or result.state != 0:
        log.info("cuBLASLt has no algorithm for %s (status %d): the unfused path runs", key, status)
        _destroy((desc, layouts, None))
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
    if bias is not None and not bias.flags.c_contiguous:
        return False  # the epilogue reads the bias as a packed vector
    epi = ("gelu" if gelu else "") + ("_aux" if aux is not None else "") + ("_bias" if bias is not None else "")
    epi = epi.lstrip("_") or "none"
    a_epi = min([16] + [_alignment(p.data.ptr) for p in (bias, aux) if p is not None])
    aligns = (_alignment(w3.data.ptr), _alignment(x3.data.ptr), _alignment(out.data.ptr), a_epi)
    dev = out.data.device_id
    key = (dev, (dtype, rows, fin, fout, w_stored_nk, epi, aligns))
    scal = np.float64 if dtype == "float64" else np.float32
    alpha, beta = np.ones(1, scal), np.zeros(1, scal)
    with cp.cuda.Device(dev), _lock:
        handle = _handle(dev)
        if key in _plans:
            _plans.move_to_end(key)
        else:
            _plans[key] = _plan(key[1], handle)
            if len(_plans) > _MAX_PLANS:
                _destroy(_plans.popitem(last=False)[1])
        plan = _plans[key]
        if plan is None:
            return False
        desc, (la, lb, lc, ld), result = plan
        if bias is not None:
            _set(_lib.cublasLtMatmulDescSetAttribute, desc, _DESC_BIAS_POINTER, ctypes.c_void_p(bias.data.ptr))
        if aux is not None:
            _set(_lib.cublasLtMatmulDescSetAttribute, desc, _DESC_AUX_POINTER, ctypes.c_void_p(aux.data.ptr))
        # the workspace the algorithm asks for, from the pool on this stream per call: stream-ordered
        # reuse, no two streams share one, and no long-lived block pins a pool chunk
        wsize = int(result.workspace_size)
        ws = cp.empty(wsize, cp.uint8) if wsize else None
        status = profiler.record_call("cublaslt_matmul", lambda: _lib.cublasLtMatmul(
            handle, desc, alpha.ctypes.data, w3.data.ptr, la, x3.data.ptr, lb, beta.ctypes.data, out.data.ptr, lc,
            out.data.ptr, ld, ctypes.addressof(result.algo), ws.data.ptr if wsize else None, wsize,
            cp.cuda.get_current_stream().ptr))
        if status == _STATUS_NOT_SUPPORTED:  # nothing was launched: the unfused path from now on
            _destroy(plan)
            _plans[key] = None
            from .. import fallbacks
            fallbacks.note(f"cublaslt:{key}", f"cuBLASLt answered NOT_SUPPORTED for the fused linear epilogue of "
                                              f"{key}; that case runs unfused (cuBLAS, then the epilogue kernel) "
                                              f"from now on")
            return False
    _check(status, "cublasLtMatmul")
    return True
