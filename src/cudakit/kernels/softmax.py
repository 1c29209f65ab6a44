"""Softmax and log_softmax kernels, forward and backward, over the rows of a (rows, cols) matrix.

Forward (y = exp(x - max) / sum, or log_softmax y = (x - max) - log(sum)):
- `ck_softmax_fwd_reg`: rows that fit in registers. `tpr` threads per row (a power of two, 1..1024;
  several rows per block when tpr < 256), NV packs of V elements (16 bytes) per thread. The whole
  row is loaded before any reduction (NV loads in flight per thread), converted to the
  accumulation type and kept there: max, then exp once (kept for softmax), then the sum, then the
  write. Traffic: rows*cols*sizeof(T) read + rows*cols*sizeof(T) written (one read, one write).
- `ck_softmax_fwd_loop`: longer rows (more than 32768 float32/bfloat16/float16 or 16384 float64,
  or odd rows past 8192): one block of 1024 threads per row; pass 1 is an online softmax (running
  max and rescaled running sum per thread, merged across the block), pass 2 reads the row again
  (mostly from L2) and writes. Traffic: 2 * rows*cols*sizeof(T) read + rows*cols*sizeof(T) written.
Backward (softmax: dx = y * (g - sum(g*y)); log_softmax: dx = g - exp(y) * sum(g), from the
forward's output y):
- `ck_softmax_bwd_reg`: g and y of the row in registers (raw 16-byte packs, converted in each
  pass). Traffic: 2 * rows*cols*sizeof(T) read + rows*cols*sizeof(T) written.
- `ck_softmax_bwd_smem`: rows too long for both in registers (e.g. 32768 float32): y goes to
  dynamic shared memory (cp.async, 16 bytes per copy, no registers), g stays in registers.
  Same traffic.
- `ck_softmax_bwd_loop`: longer rows: one block per row, the row read twice.
  Traffic: 4 * rows*cols*sizeof(T) read (half mostly L2 hits) + rows*cols*sizeof(T) written.

Accumulation is float32 for 16-bit types (exp of 16-bit inputs is ex2.approx of (x - max) * log2(e):
its error, a few float32 ulps, is far below the output's rounding) and float32 / float64 with the
accurate expf / exp otherwise.
Special values follow the NumPy formula exp(x - max(x)) / sum(...): a row holding NaN or +inf, or
a row of only -inf, gives NaN everywhere; -inf among finite values gives 0 (log_softmax: -inf).
Inputs are contiguous CuPy arrays on the current device of one dtype (float16, bfloat16, float32,
float64), validated by the caller (cudakit.backends.softmax_api).
"""
from __future__ import annotations

import numpy as np

from ..runtime import _cupy
from ..runtime.compiler import _launch_function
from . import _planned
from ._common import FLOAT_DTYPE_NAMES, KernelFamily, by_template, ctype, dtype_name, vec_width, cuda_source

# Device helpers shared with cudakit.kernels.cross_entropy: pack conversions, special values,
# exp, row reductions and the online-softmax merge.
HELPER_FILES = ("_pack_helpers.cuh", "softmax_helpers.cuh")
HELPERS = cuda_source(*HELPER_FILES)

SOURCE_FILES = ("_pdl.cuh", "_preamble.cuh", *HELPER_FILES, "softmax.cu")
SOURCE = cuda_source(*SOURCE_FILES)

# ------------------------------------------------------------------------------------------
# Instantiations and launch plans

REG_NV = (1, 2, 4, 8)     # packs per thread of the register-row kernels (16-byte packs)
REG_NV_SCALAR = (4, 8)    # the same for single elements (odd rows): fewer instantiations to compile
# Packs per thread the plans aim at: the forward keeps NV*V accumulation values per thread; the
# backward keeps the raw packs of g and y (twice the bytes), so it aims at fewer per thread.
FWD_TARGET_NV = 4
# Rows of at most this many packs: one pack per thread (a warp or less per row). Measured on an
# H100 (benchmarks/sweeps/softmax_variants.py, 2026-11-23, 262144x128): 1.5% (float32) and 2% (bfloat16)
# faster than FWD_TARGET_NV packs per thread, at the copy bandwidth.
SHORT_ROW_PACKS = 32
BWD_TARGET_NV = 2
LOOP_THREADS = 1024       # block size of the one-block-per-row kernels
SMEM_THREADS = 1024       # block size of ck_softmax_bwd_smem
ROWS_BLOCK = 256          # threads of a block shared by several short rows
_MAX_TPR = 1024
_ACC_ITEM = {"float16": 4, "bfloat16": 4, "float32": 4, "float64": 8}
_ITEM = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def _vecs(dtype_name: str) -> tuple:
    """The vector widths instantiated for a dtype: 16-byte packs and single elements."""
    return (vec_width(dtype_name), 1)


def reg_nvs(v: int) -> tuple:
    """The packs-per-thread counts instantiated for vector width v."""
    return REG_NV if v > 1 else REG_NV_SCALAR


def name_expressions(dtype=None) -> list[str]:
    """Every template instantiation this module launches (for one dtype name when given)."""
    out = []
    for dt in (FLOAT_DTYPE_NAMES if dtype is None else (dtype,)):
        t = ctype(dt)
        for v in _vecs(dt):
            for nv in reg_nvs(v):
                out += [f"ck_softmax_fwd_reg<{t}, {v}, {nv}>", f"ck_softmax_bwd_reg<{t}, {v}, {nv}>"]
            out += [f"ck_softmax_fwd_loop<{t}, {v}>", f"ck_softmax_bwd_loop<{t}, {v}>"]
        vw = vec_width(dt)
        out += [f"ck_softmax_bwd_smem<{t}, {vw}, {nv}>" for nv in REG_NV]
    return out


# one family per dtype: each dtype compiles only its own instantiations
_families = {dt: KernelFamily(SOURCE, (lambda dt=dt: name_expressions(dt)), f"cudakit/softmax_{dt}.cu",
                                group=by_template)
             for dt in FLOAT_DTYPE_NAMES}


def launch(families: dict, expr: str, dtype_name: str, grid: tuple, block: tuple, args: tuple,
           smem: int = 0) -> None:
    """Launch `expr` of the per-dtype KernelFamily dict `families` on the current device, raising
    the kernel's dynamic shared-memory limit first when it needs more than 48 KB."""
    dev = _cupy.loaded_cupy().cuda.runtime.getDevice()
    _launch_function(expr, _function(families, dev, dtype_name, expr, smem), grid, block, args, smem, None)


def _function(families: dict, dev: int, dtype_name: str, expr: str, smem: int = 0):
    """The compiled `expr` on device dev, its dynamic shared-memory limit raised to smem when that
    is more than 48 KB (Kernel.allow_dynamic_shared_memory keeps what was set; the common launch
    asks nothing more)."""
    fam = families[dtype_name]
    f = fam.function(dev, expr)
    if smem > 48 * 1024:
        fam.kernel(expr).allow_dynamic_shared_memory(smem, dev)
    return f


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p


def fwd_bound(nv: int, v: int, dtype_name: str) -> int:
    """Largest block of a kernel holding nv*v accumulation values per thread (ck_fwd_bound)."""
    b = nv * v * _ACC_ITEM[dtype_name]
    return 1024 if b <= 128 else 512 if b <= 256 else 256


def bwd_bound(nv: int, v: int, dtype_name: str) -> int:
    """Largest block of ck_softmax_bwd_reg<T, v, nv> (ck_bwd_bound)."""
    b = 2 * nv * v * _ITEM[dtype_name]
    return 1024 if b <= 128 else 512 if b <= 256 else 256


def reg_plan(nvec: int, target_nv: int, bound, nvs=REG_NV):
    """(tpr, NV, rpb) for a register-row kernel, or None when the row is too long to hold.

    tpr, the threads per row, is the power of two giving each thread about `target_nv` packs (at
    most 1024); NV is the smallest of the instantiated counts `nvs` covering the row; short rows
    share a block of ROWS_BLOCK threads. bound(NV) -> the kernel's largest block.
    """
    tpr = min(_MAX_TPR, _pow2_at_least(max(1, -(-nvec // target_nv))))
    while True:
        need = -(-nvec // tpr)
        nv = next((n for n in nvs if n >= need), None)
        if nv is None:
            return None
        limit = bound(nv)
        if tpr <= limit:
            rpb = max(1, min(ROWS_BLOCK, limit) // tpr)
            if tpr > 32:
                rpb = min(rpb, 16)  # CK_RED: 32 reduction slots per row
            return tpr, nv, rpb
        tpr = limit  # fewer threads per row, more packs each: may need a larger NV


def vec_for(cols: int, dtype_name: str, *arrays) -> int:
    """16-byte packs when cols is a multiple of the pack and every array is 16-byte aligned."""
    v = vec_width(dtype_name)
    if cols % v == 0 and all(a.data.ptr % 16 == 0 for a in arrays):
        return v
    return 1


# ------------------------------------------------------------------------------------------
# host wrappers

_fwd_plans: dict = {}  # (dtype name, v, nvec, target) -> (expr, threads per row, rows per block)


def _fwd_plan(dt: str, v: int, nvec: int, target: int):
    key = (dt, v, nvec, target)
    p = _fwd_plans.get(key)
    if p is None:
        t = ctype(dt)
        plan = reg_plan(nvec, target, lambda nv: fwd_bound(nv, v, dt), reg_nvs(v))
        if plan is not None:
            tpr, nv, rpb = plan
            p = (f"ck_softmax_fwd_reg<{t}, {v}, {nv}>", tpr, rpb)
        else:
            p = (f"ck_softmax_fwd_loop<{t}, {v}>", LOOP_THREADS, 0)
        _fwd_plans[key] = p
    return p


def fwd_target(nvec: int, v: int) -> int:
    """Packs per thread the forward plan aims at for rows of nvec packs of v elements (single
    elements have no one-pack instantiation: see REG_NV_SCALAR)."""
    return 1 if nvec <= SHORT_ROW_PACKS and v > 1 else FWD_TARGET_NV


def softmax_forward(x2d, log: bool = False, out=None, plan_nv=None):
    """softmax (log=False) or log_softmax (log=True) of each row of `x2d`.

    x2d: (rows, cols) contiguous, float16/bfloat16/float32/float64. out: optional (rows, cols)
    array of x2d's dtype for the result. Returns y like x2d.
    """
    cp = _cupy.loaded_cupy()
    rows, cols = x2d.shape
    dt = dtype_name(x2d.dtype)
    y = cp.ndarray(x2d.shape, x2d.dtype) if out is None else out
    if rows == 0 or cols == 0:
        return y
    v = vec_for(cols, dt, x2d, y)
    nvec = cols // v
    expr, grid, block, smem, with_rows = _fwd_launch(dt, v, nvec, rows, plan_nv)
    tail = (np.int32(nvec), np.int32(bool(log)))
    launch(_families, expr, dt, grid, block, (x2d, y, *((np.int64(rows),) if with_rows else ()), *tail), smem)
    return y


def _fwd_launch(dt: str, v: int, nvec: int, rows: int, plan_nv=None):
    """(expr, grid, block, shared bytes, whether the kernel takes `rows`) of the forward over rows
    of nvec packs of v elements."""
    expr, tpr, rpb = _fwd_plan(dt, v, nvec, plan_nv or fwd_target(nvec, v))
    if rpb:
        return expr, (-(-rows // rpb), 1, 1), (tpr, rpb, 1), 0, True
    return expr, (rows, 1, 1), (tpr, 1, 1), 0, False


def _smem_plan(nvec: int, v: int, dtype_name: str):
    """(tpr, NV, bytes) for ck_softmax_bwd_smem, or None: 16-byte packs, the row's g in at most
    8 packs per thread of SMEM_THREADS, its y (nvec*16 bytes) in at most 128 KB of shared memory."""
    if v * _ITEM[dtype_name] != 16:
        return None
    need = -(-nvec // SMEM_THREADS)
    nv = next((n for n in REG_NV if n >= need), None)
    if nv is None or nvec * 16 > 128 * 1024:
        return None
    tpr = min(SMEM_THREADS, max(32, _pow2_at_least(-(-nvec // nv))))
    return tpr, nv, nvec * 16


def softmax_backward(g2d, y2d, log: bool = False, out=None, plan_nv=None):
    """Gradient of softmax_forward from its output: log=False: dx = y * (g - sum(g*y));
    log=True (y = log_softmax output): dx = g - exp(y) * sum(g), sums over each row.

    g2d, y2d: (rows, cols) contiguous of one dtype. Returns dx like y2d (into `out` when given).
    """
    cp = _cupy.loaded_cupy()
    rows, cols = y2d.shape
    dt = dtype_name(y2d.dtype)
    dx = cp.ndarray(y2d.shape, y2d.dtype) if out is None else out
    if rows == 0 or cols == 0:
        return dx
    v = vec_for(cols, dt, g2d, y2d, dx)
    nvec = cols // v
    expr, grid, block, smem, with_rows = _bwd_launch(dt, v, nvec, rows, plan_nv)
    tail = (np.int32(nvec), np.int32(bool(log)))
    launch(_families, expr, dt, grid, block, (g2d, y2d, dx, *((np.int64(rows),) if with_rows else ()), *tail), smem)
    return dx


def _bwd_launch(dt: str, v: int, nvec: int, rows: int, plan_nv=None):
    """(expr, grid, block, shared bytes, whether the kernel takes `rows`) of the backward: register
    rows, else the row's y in shared memory, else the loop."""
    t = ctype(dt)
    plan = reg_plan(nvec, plan_nv or BWD_TARGET_NV, lambda nv: bwd_bound(nv, v, dt), reg_nvs(v))
    if plan is not None:
        tpr, nv, rpb = plan
        return f"ck_softmax_bwd_reg<{t}, {v}, {nv}>", (-(-rows // rpb), 1, 1), (tpr, rpb, 1), 0, True
    sp = _smem_plan(nvec, v, dt)
    if sp is not None:
        tpr, nv, smem = sp
        return f"ck_softmax_bwd_smem<{t}, {v}, {nv}>", (rows, 1, 1), (tpr, 1, 1), smem, False
    return f"ck_softmax_bwd_loop<{t}, {v}>", (rows, 1, 1), (LOOP_THREADS, 1, 1), 0, False


# ------------------------------------------------------------------------------------------
# the host-time path of the common call (ops.softmax, Backend.softmax, their backward)

_fast: dict = {}   # (kind, shape, dtype, device, 16-byte aligned) -> launch plan, or None: not this path


def _plan_fast(kind: str, shape: tuple, dtype, dev: int, aligned: bool):
    """(expr, function pointer, grid, block, shared bytes, codes, tail values) of the launch that
    softmax_forward (kind "fwd") or softmax_backward ("bwd", "fwd_log", "bwd_log") makes for a
    C-contiguous array of this shape over its last axis; None when the shape takes no kernel (empty)
    or the dtype is not one of the kernels'."""
    dt = dtype_name(dtype)
    if dt not in FLOAT_DTYPE_NAMES or not shape or shape[-1] == 0:
        return None
    cols = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    if rows == 0:
        return None
    vw = vec_width(dt)
    v = vw if aligned and cols % vw == 0 else 1
    nvec = cols // v
    fwd = kind.startswith("fwd")
    expr, grid, block, smem, with_rows = (_fwd_launch if fwd else _bwd_launch)(dt, v, nvec, rows)
    arrays = b"QQ" if fwd else b"QQQ"   # the inputs and the result
    codes, tail = arrays + (b"Qii" if with_rows else b"ii"), (nvec, int(kind.endswith("_log")))
    if with_rows:
        tail = (rows, *tail)
    f = _function(_families, dev, dt, expr, smem)
    return expr, f.ptr, grid, block, smem, codes, tail


def _run_fast(kind: str, arrays: tuple):
    """The kernel of `kind` over `arrays` (the inputs, C-contiguous, one shape and dtype) into a new
    array, through the planned launch; None where the path does not apply (the caller takes the
    checked one): not all CuPy arrays on the current device, an empty or unsupported array, or
    _planned.ready() declines."""
    env = _planned.ready()
    if env is None:
        return None
    _, ndarray, get_device, _ = env
    x = arrays[0]
    if type(x) is not ndarray:
        return None
    dev = get_device()
    shape, dtype = x.shape, x.dtype
    al = 0
    for a in arrays:
        if type(a) is not ndarray or not a._c_contiguous or a.data.device_id != dev or (
                a is not x and (a.shape != shape or a.dtype != dtype)):
            return None
        al |= a.data.ptr
    out, p = _planned.output_and_plan(_fast, (kind, shape, dtype, dev), ndarray, shape, dtype, al,
                                      lambda aligned: _plan_fast(kind, shape, dtype, dev, aligned))
    if p is None:
        return None
    expr, fptr, grid, block, smem, codes, tail = p
    _planned.run(env, expr, fptr, grid, block, smem, codes, *[a.data.ptr for a in arrays], out.data.ptr, *tail)
    return out


def forward_fast(x, log: bool = False):
    """softmax_forward over the last axis of x (any shape), as a new array of x's shape, through a
    launch planned once per (shape, dtype, device, alignment); None where that path does not apply
    (see _run_fast). Rows need no (rows, cols) view: the kernels see x's memory as rows."""
    return _run_fast("fwd_log" if log else "fwd", (x,))


def backward_fast(grad_out, y, log: bool = False):
    """softmax_backward over the last axis (grad_out and y of one shape and dtype, else None), as
    forward_fast."""
    return _run_fast("bwd_log" if log else "bwd", (grad_out, y))
