"""Matrix products through cuBLASLt (CuPy does not wrap it): every GEMM of cudakit's matmul,
linear and their backward passes (`matmul`), and x @ weight^T with a fused epilogue
(`linear_epilogue`): the bias, GELU (tanh form) and the pre-activation as a second output applied
to the float32 accumulator inside the GEMM, so linear + GELU is one kernel.

Why cuBLASLt rather than CuPy's cuBLAS binding: CuPy refuses cuBLAS calls while a stream is being
captured ("calling cuBLAS API during stream capture is currently unsupported"), and its Python
binding costs host time per call. Here each case (dtypes, batch, M, N, K, transposes, which
operands are batched, epilogue, pointer alignments) gets its descriptor, layouts and algorithm
once (`_plans`), and a call is one native `lt_matmul` (runtime/_native.c) with integer addresses,
or ctypes where the native module is unavailable. The workspace comes from the pool on the
current stream per call (stream-ordered reuse; under graph capture, from the graph's pool).

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
_LAYOUT_BATCH_COUNT, _LAYOUT_BATCH_STRIDE = 5, 6   # cublasLtMatrixLayoutAttribute_t
_PREF_MAX_WORKSPACE = 1
_PREF_MIN_ALIGN = (5, 6, 7, 8)   # CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES
_STATUS_NOT_SUPPORTED = 15
EPILOGUE = {"none": 1, "bias": 4, "gelu": 32, "gelu_aux": 160, "gelu_bias": 36, "gelu_aux_bias": 164,
            "bgradb": 512,   # BGRADB: the column sums of op(B) over K (a bias's gradient) into the bias pointer
            "dgelu": 192}    # DGELU: the product times GELU's (tanh form) derivative at the aux input
_WORKSPACE = 32 << 20     # cuBLAS's recommendation for Hopper
_SMALL_PRODUCT = 1 << 24  # batch * M * N * K up to this: an algorithm without workspace where one exists
_MAX_PLANS = 256          # descriptors kept (a new batch size or shape makes one); the oldest is destroyed


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
    "cublasLtMatrixLayoutSetAttribute": [_P, _I, _P, _SZ],
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
    """_plan's body: fills desc, layouts and pref (the caller frees them on failure).

    Row-major out (B, M, N) = op(a) @ op(b) is column-major out^T = op(b)^T op(a)^T: cuBLASLt's A
    is b's buffer (transposed when trans_b), its B is a's buffer (transposed when trans_a); a
    row-major (R, C) buffer read column-major is its transpose with leading dimension C."""
    (in_t, out_t, batch, m, n, _k, ta, tb, a_shape, b_shape, a_batched, b_batched, epilogue, aligns) = key
    lib = _lib
    f64 = in_t == "float64"
    _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), COMPUTE_64F if f64 else COMPUTE_32F,
                                        CUDA_R["float64" if f64 else "float32"]), "cublasLtMatmulDescCreate")
    _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_TRANSA, ctypes.c_int32(1 if tb else 0))
    _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_TRANSB, ctypes.c_int32(1 if ta else 0))
    _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_EPILOGUE, ctypes.c_uint32(EPILOGUE[epilogue]))
    (ar, ac), (br, bc) = a_shape, b_shape
    for t, rows, cols, batched in ((in_t, bc, br, b_batched), (in_t, ac, ar, a_batched),
                                   (out_t, n, m, True), (out_t, n, m, True)):
        lay = ctypes.c_void_p()
        _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(lay), CUDA_R[t], rows, cols, rows),
               "cublasLtMatrixLayoutCreate")
        layouts.append(lay)
        if batch > 1:
            _set(lib.cublasLtMatrixLayoutSetAttribute, lay, _LAYOUT_BATCH_COUNT, ctypes.c_int32(batch))
            _set(lib.cublasLtMatrixLayoutSetAttribute, lay, _LAYOUT_BATCH_STRIDE,
                 ctypes.c_int64(rows * cols if batched else 0))
    a_a, a_b, a_out, a_epi = aligns
    if "aux" in epilogue or epilogue == "dgelu":  # the pointers' alignment steers the heuristic: stand-ins
        _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_AUX_LD, ctypes.c_int64(n))
        _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_AUX_POINTER, ctypes.c_void_p(a_epi))
    if "bias" in epilogue or epilogue == "bgradb":
        _set(lib.cublasLtMatmulDescSetAttribute, desc, _DESC_BIAS_POINTER, ctypes.c_void_p(a_epi))
    _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
    for attr, a in zip(_PREF_MIN_ALIGN, (a_b, a_a, a_out, a_out)):
        _set(lib.cublasLtMatmulPreferenceSetAttribute, pref, attr, ctypes.c_uint32(a))
    result = _HeuristicResult()
    count = ctypes.c_int(0)
    status = -1
    # a small product (host-bound: its call costs more than its kernel) asks for an algorithm without
    # workspace first, which saves an allocation per call; the others may use _WORKSPACE
    for ws in ((0, _WORKSPACE) if batch * m * n * _k <= _SMALL_PRODUCT else (_WORKSPACE,)):
        _set(lib.cublasLtMatmulPreferenceSetAttribute, pref, _PREF_MAX_WORKSPACE, ctypes.c_uint64(ws))
        status = lib.cublasLtMatmulAlgoGetHeuristic(handle, desc, *layouts, pref, 1, ctypes.byref(result),
                                                    ctypes.byref(count))
        if status == 0 and count.value >= 1 and result.state == 0:
            break
    if status != 0 or count.value < 1 or result.state != 0:
        log.info("cuBLASLt has no algorithm for %s (status %d): another path runs", key, status)
        _destroy((desc, layouts, None))
        return None
    scal = np.float64 if f64 else np.float32
    return desc, layouts, result, scal


def _destroy(plan) -> None:
    if plan is not None:
        desc, layouts = plan[0], plan[1]
        if desc.value:
            _lib.cublasLtMatmulDescDestroy(desc)
        for lay in layouts:
            _lib.cublasLtMatrixLayoutDestroy(lay)


_SCALARS: dict = {}   # (numpy scalar type, value) -> a 1-element host array kept alive (alpha, beta)


def _scalar_ptr(scal, value: float) -> int:
    a = _SCALARS.get((scal, value))
    if a is None:
        a = _SCALARS[(scal, value)] = np.array([value], scal)
    return a.ctypes.data


_native_mm = None     # (native lt_matmul, address of cublasLtMatmul, of the attribute setter), or False


def _native():
    global _native_mm
    if _native_mm is None:
        from ..runtime import native
        mod = native.module()
        if mod is None or not hasattr(mod, "lt_matmul"):
            _native_mm = False
        else:
            addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
            _native_mm = (mod.lt_matmul, addr(_lib.cublasLtMatmul), addr(_lib.cublasLtMatmulDescSetAttribute))
    return _native_mm


def bound(a, b, out, trans_a: bool = False, trans_b: bool = False, bias=None, gelu: bool = False,
          aux=None, bgrad=None, dgelu=None, c=None):
    """The plan of this case, made on first use, as (handle, desc, (la, lb, lc, ld), algo address,
    workspace bytes, alpha/beta scalar type, key), or None where cuBLASLt cannot do it. Arguments
    as matmul(); only their shapes, dtypes, devices and alignments matter (c's: the C operand read
    when it is not out, which shares out's layout)."""
    if not _load():
        return None
    from ..backends.base import supported_dtypes
    names = supported_dtypes()
    in_t, out_t = names[a.dtype], names[out.dtype]
    batch, m, n = out.shape
    k = a.shape[1] if trans_a else a.shape[2]
    epi = ("gelu" if gelu else "") + ("_aux" if aux is not None else "") + ("_bias" if bias is not None else "")
    epi = "bgradb" if bgrad is not None else "dgelu" if dgelu is not None else (epi.lstrip("_") or "none")
    a_epi = min([16] + [_alignment(p.data.ptr) for p in (bias, aux, bgrad, dgelu) if p is not None])
    a_out = _alignment(out.data.ptr) if c is None else min(_alignment(out.data.ptr), _alignment(c.data.ptr))
    aligns = (_alignment(a.data.ptr), _alignment(b.data.ptr), a_out, a_epi)
    dev = out.data.device_id
    key = (dev, (in_t, out_t, batch, m, n, k, bool(trans_a), bool(trans_b), a.shape[1:], b.shape[1:],
                 a.shape[0] > 1, b.shape[0] > 1, epi, aligns))
    with _lock:
        plan = _plans.get(key, False)
        if plan is False:
            cp = _cupy.cupy()
            with cp.cuda.Device(dev):
                plan = _plans[key] = _plan(key[1], _handle(dev))
            if len(_plans) > _MAX_PLANS:
                from .. import dispatch
                dispatch.clear()   # dispatch plans hold the descriptors: none may outlive them
                _destroy(_plans.popitem(last=False)[1])
        if plan is None:
            return None
        desc, layouts, result, scal = plan
        return (_handles[dev], desc, layouts, ctypes.addressof(result.algo), int(result.workspace_size), scal, key)


def run(bp, a_ptr: int, b_ptr: int, out_ptr: int, beta: float = 0.0, bias_ptr: int = 0, aux_ptr: int = 0,
        stream: int | None = None, c_ptr: int = 0) -> int:
    """One cuBLASLt call of bound plan `bp` (from bound()) on these addresses, on `stream` (default:
    the current CuPy stream); the workspace comes from the pool on that stream. C (read where beta
    is not 0) is out unless c_ptr is given. Returns cublasStatus_t (0: queued); NOT_SUPPORTED (15)
    launched nothing."""
    cp = _cupy.cupy()
    handle, desc, (la, lb, lc, ld), algo, wsize, scal, _ = bp
    ws = cp.empty(wsize, cp.uint8) if wsize else None
    wptr = ws.data.ptr if wsize else 0
    if stream is None:
        stream = cp.cuda.get_current_stream().ptr
    alpha, beta_p = _scalar_ptr(scal, 1.0), _scalar_ptr(scal, float(beta))
    nat = _native()
    if nat:
        args = (nat[1], nat[2], handle.value, desc.value, bias_ptr, aux_ptr, alpha, b_ptr, la.value, a_ptr,
                lb.value, beta_p, c_ptr or out_ptr, lc.value, out_ptr, ld.value, algo, wptr, wsize, stream)
        from ..runtime import compiler
        if compiler._recorder is not None:   # kernels/trace_plans.py is tracing this call
            compiler._recorder.lt_call(args)
        call = lambda: nat[0](*args)  # noqa: E731
    else:
        def call():
            with _lock:   # the descriptor carries this call's bias and aux pointers
                if bias_ptr:
                    _set(_lib.cublasLtMatmulDescSetAttribute, desc, _DESC_BIAS_POINTER, ctypes.c_void_p(bias_ptr))
                if aux_ptr:
                    _set(_lib.cublasLtMatmulDescSetAttribute, desc, _DESC_AUX_POINTER, ctypes.c_void_p(aux_ptr))
                return _lib.cublasLtMatmul(handle, desc, alpha, b_ptr, la, a_ptr, lb, beta_p, c_ptr or out_ptr, lc,
                                           out_ptr, ld, algo, wptr or None, wsize, stream)
    return profiler.record_call("cublaslt_matmul", call) if profiler._active is not None else call()


def matmul(a, b, out, trans_a: bool = False, trans_b: bool = False, beta: float = 0.0, bias=None,
           gelu: bool = False, aux=None, bgrad=None, dgelu=None, c=None) -> bool:
    """out[i] = epilogue(op(a[i]) @ op(b[i]) + beta * out[i]) in one cuBLASLt call; False (nothing
    written) where cuBLASLt is not loadable or has no algorithm for the case.

    a: (Ba, Ra, Ca), b: (Bb, Rb, Cb), out: (B, M, N), C-contiguous, one device, Ba and Bb 1 or B,
    op(a) (M, K), op(b) (K, N); a and b share a dtype, out has it or float32 (16-bit a). bias:
    (N,) added to the accumulator; gelu: GELU (tanh form) after it; aux: like out, receives the
    pre-activation (with gelu). bgrad (alone, with trans_a): (M,) receiving op(a)'s row sums over K,
    a's column sums (cuBLASLt's BGRADB: its B is a's buffer), as the bias's gradient beside a weight
    gradient grad_out^T @ x. dgelu (alone): like out, the pre-activation x of a GELU (tanh form);
    out receives the product times gelu'(x), the gradient through that GELU. c: like out, read in
    out's place as the beta term (out[i] = op(a[i]) @ op(b[i]) + beta * c[i] + bias). The epilogue
    cases need B == 1. FLOPs: 2 * B * M * N * K."""
    bp = bound(a, b, out, trans_a, trans_b, bias, gelu, aux, bgrad, dgelu, c)
    if bp is None:
        return False
    epi_ptr = bias if bias is not None else bgrad
    aux_in = aux if aux is not None else dgelu
    status = run(bp, a.data.ptr, b.data.ptr, out.data.ptr, beta, 0 if epi_ptr is None else epi_ptr.data.ptr,
                 0 if aux_in is None else aux_in.data.ptr, c_ptr=0 if c is None else c.data.ptr)
    if status == _STATUS_NOT_SUPPORTED:  # nothing was launched: another path from now on
        drop(bp)
        return False
    _check(status, "cublasLtMatmul")
    return True


def drop(bp) -> None:
    """Forget bound plan bp's case (cuBLASLt answered NOT_SUPPORTED): another path from now on."""
    key = bp[-1]
    from .. import fallbacks   # logged once at INFO and listed by `cudakit info`
    fallbacks.note(f"cublaslt:{key}", f"cuBLASLt answered NOT_SUPPORTED for {key}; that case runs another way "
                                      f"(the unfused epilogue, or CuPy's cuBLAS) from now on")
    from .. import dispatch
    dispatch.clear()   # dispatch plans hold the descriptor destroyed here
    with _lock:
        plan = _plans.get(key)
        if plan:
            _destroy(plan)
        _plans[key] = None


def linear_epilogue(x3, w3, w_stored_nk: bool, out, bias=None, gelu: bool = False, aux=None,
                    residual=None) -> bool:
    """out (1, rows, fout) = epilogue(x3 (1, rows, fin) @ W^T) in one cuBLASLt call; W is w3's
    buffer, stored (fout, fin) when w_stored_nk, else (fin, fout). bias: (fout,) or None; gelu: apply
    GELU (tanh form) after the bias; aux: (1, rows, fout) receiving the pre-activation (with gelu);
    residual: like out, added to the accumulator (cuBLASLt's C operand, beta 1; not with gelu; 16-byte
    aligned only: a residual 2 bytes off took kernels whose bfloat16 results with a bias were up to
    1.5 ulps off the correctly rounded value, H200 2026-11-29). All C-contiguous, one dtype.
    Returns False (nothing written) where cuBLASLt cannot do it."""
    if not epilogue_applies(out, x3.shape[2], bias, gelu):
        return False
    if residual is not None and residual.data.ptr % 16:
        return False   # an unaligned C took kernels whose 16-bit results with a bias came out double-rounded
    return matmul(x3, w3, out, False, w_stored_nk, 0.0 if residual is None else 1.0, bias, gelu, aux, c=residual)


# rows * in * out features up to which wgrad_bias() runs: the epilogue saves a launch, which pays on
# small products (host-bound steps), but slows cuBLASLt's weight-gradient GEMM on large ones more than
# the column-sum pass it replaces costs (H200, 2026-11-29 05:38 UTC, benchmarks/sweeps/linear_bgrad.py,
# history/linalg/nvidia-h200-linear-bgrad.json, against the GEMM + sum: 512x256x768 1.195x bfloat16, 1.369x
# float16; the GPT example's 8192x768x{768..3072} 0.984-1.028x bfloat16, 0.824-1.052x float16;
# 16384x4096x16384 0.984x and 0.915x)
_BGRAD_MAX_PRODUCT = 1 << 28


def wgrad_bias_applies(g3, x3, gw) -> bool:
    """Whether wgrad_bias() takes these operands (before asking cuBLASLt for an algorithm): 16-bit
    data (float32 keeps its reduction), out_features a multiple of 8, as the bias epilogue, and a
    product of at most _BGRAD_MAX_PRODUCT."""
    from ..backends.base import supported_dtypes
    _, rows, fout = g3.shape
    fin = x3.shape[2]
    return (supported_dtypes()[gw.dtype] in ("float16", "bfloat16") and rows > 0 and fout > 0 and fin > 0
            and not fout % 8 and rows * fout * fin <= _BGRAD_MAX_PRODUCT)


def wgrad_bias(g3, x3, gw):
    """gw (1, fout, fin) = g3 (1, rows, fout)^T @ x3 (1, rows, fin) in one cuBLASLt call (BGRADB)
    that also returns gb (fout,) = g3's column sums in gw's dtype (linear_backward's weight and bias
    gradients); None (nothing written, nothing allocated) where wgrad_bias_applies() says no or
    cuBLASLt has no algorithm."""
    if not wgrad_bias_applies(g3, x3, gw):
        return None
    gb = _cupy.cupy().empty((g3.shape[2],), gw.dtype)
    return gb if matmul(g3, x3, gw, True, False, bgrad=gb) else None


def dgrad_gelu(g3, w3, w_stored_nk: bool, gx, pre3) -> bool:
    """gx (1, rows, fin) = (g3 (1, rows, fout) @ W) * gelu'(pre3) in one cuBLASLt call (DGELU), the
    product rounded once: linear_backward's input gradient through the GELU before the linear
    (x = gelu(pre3), tanh form). W is w3's buffer, stored (fout, fin) when w_stored_nk, else (fin,
    fout). 16-bit data, fin a multiple of 8 and pre3 16-byte aligned only (the GELU's 5e-6 and the
    aux leading dimension, as the forward's epilogue); False (nothing written) elsewhere or without
    an algorithm."""
    if not epilogue_applies(gx, g3.shape[2], None, True) or pre3.data.ptr % 16:
        return False   # (an unaligned epilogue operand: as linear_epilogue's residual)
    return matmul(g3, w3, gx, False, not w_stored_nk, dgelu=pre3)


def epilogue_applies(out, fin: int, bias, gelu: bool) -> bool:
    """Whether linear_epilogue() takes a linear with out (1, rows, fout), fin input features,
    this bias (None or an array) and gelu (before asking cuBLASLt for an algorithm)."""
    from ..backends.base import supported_dtypes
    dtype = supported_dtypes()[out.dtype]
    _, rows, fout = out.shape
    if rows == 0 or fout == 0 or fin == 0 or max(rows, fout, fin) > 2**31 - 1:
        return False
    if fout % 8:  # the aux leading dimension must be a multiple of 8; and with an unaligned fout the
        return False  # bias epilogue's bfloat16 results came out double-rounded (1298 of 4352 off)
    if gelu and dtype not in ("float16", "bfloat16"):
        return False  # its GELU is 5e-6 off the tanh form: fine below 16-bit rounding, not for float32
    if bias is not None and not bias.flags.c_contiguous:
        return False  # the epilogue reads the bias as a packed vector
    return True
