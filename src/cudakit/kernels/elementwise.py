"""Elementwise kernels (float16, bfloat16, float32, float64): add, sub, mul, div (two arrays, or an
array and a Python scalar); relu, leaky_relu,
sigmoid, tanh, silu, gelu (tanh approximation and exact erf) and the backward of each activation,
computed from the activation's input: act_backward(grad_out, x) = grad_out * act'(x).

Contiguous inputs take `ck_ew*_contig` (so do inputs and out that share one dense, non-C layout,
such as channels-last views: the op runs over their flat memory): 16-byte vector loads and stores
when every pointer is 16-byte aligned (V = 16 / itemsize elements per access), a grid-stride loop,
64-bit indices.
Memory traffic: (inputs + 1) * n * itemsize bytes; no arithmetic worth counting.
A binary op whose one operand repeats along the other (C-contiguous, its shape the trailing dims
of the result's: a bias, a position table) takes `ck_ew2_rowbc` (16-byte vectors where the
repeated length is a multiple of the vector and the pointers aligned). Other broadcast or strided
inputs take `ck_ew*_strided`, which honours per-operand strides (in elements) over up to 8
collapsed dimensions.
"""
from __future__ import annotations

import numpy as np

from .. import profiler
from ..backends.checks import empty_in_order, shared_dense_order
from ..errors import LaunchError  # noqa: F401  (raised from run)
from ..runtime import _cupy, launch as _launch
from ..runtime import compiler as _compiler
from ..runtime.compiler import _launch_function
from ..runtime.launch import launch_blocking
from ._common import FLOAT_DTYPE_NAMES, KernelFamily, collapse, ctype, strides_struct_dtype, vec_width, cuda_source
from . import ew_shapes

SOURCE_FILES = ("_pdl.cuh", "_preamble.cuh", "elementwise.cu")
SOURCE = cuda_source(*SOURCE_FILES)

MAX_GRID_X = 2**31 - 1
BINARY_OPS = {"add": "ck_add", "sub": "ck_sub", "mul": "ck_mul", "div": "ck_div",
              "relu_backward": "ck_relu_bwd", "leaky_relu_backward": "ck_leaky_bwd",
              "sigmoid_backward": "ck_sigm_bwd", "tanh_backward": "ck_tanh_bwd", "silu_backward": "ck_silu_bwd",
              "gelu_tanh_backward": "ck_gelu_tanh_bwd", "gelu_erf_backward": "ck_gelu_erf_bwd"}
UNARY_OPS = {"relu": "ck_relu", "leaky_relu": "ck_leaky", "sigmoid": "ck_sigm", "tanh": "ck_tanh_op",
             "silu": "ck_silu", "gelu_tanh": "ck_gelu_tanh", "gelu_erf": "ck_gelu_erf",
             # a binary op with a Python scalar operand (p): one read stream, not a broadcast 0-d array
             "add_scalar": "ck_add_s", "sub_scalar": "ck_sub_s", "rsub_scalar": "ck_rsub_s",
             "mul_scalar": "ck_mul_s", "div_scalar": "ck_div_s", "rdiv_scalar": "ck_rdiv_s"}
THREADS = 256
# Compute-heavy ops on 16-bit data: their contiguous kernels held about 96 registers, so 256-thread
# blocks left 2 blocks (16 warps) per SM; 128-thread blocks fit 5 (20 warps), which hid more
# arithmetic latency (bfloat16, H100, 2^28 elements, an unroll x block-size sweep, 2026-11-22:
# gelu_tanh_backward 0.95x -> 1.00x torch; gelu_erf_backward 0.89x -> 0.97x before the shared-ex2
# form, 0.99x after it at either block size). Since the paired cvt stores (2026-11-26) they hold
# 32-40 registers at U <= 2; the 128-thread default stays for GPUs without a shipped table.
HEAVY_OPS = {"gelu_tanh_backward", "gelu_erf", "gelu_erf_backward"}
HEAVY_THREADS = 128
UNROLL = 4  # U, 16-byte loads in flight per thread and input, unless TUNED says otherwise
# (op, dtype name) -> (U, threads[, cap]) where benchmarks/sweeps/ew_variants.py on the H100 (2^28 elements, through
# the public call, interleaved with torch; 2026-11-23 13:00 UTC, x torch: tuned vs default) found
# a shape faster than the default by more than its noise (~0.3%). Mostly one-input ops: their
# single read stream wants fewer loads in flight per thread and more threads.
TUNED: dict = {
    ("add", "float32"): (2, 512),          # 1.008 vs 1.001
    ("sub", "float32"): (2, 512),          # 1.009 vs 1.002
    ("mul", "float32"): (2, 512),          # 1.008 vs 1.001
    ("add_scalar", "float32"): (2, 512),   # 1.007 vs 0.999
    ("sub_scalar", "float32"): (2, 256),   # 1.003 vs 0.999
    ("mul_scalar", "float32"): (2, 512),   # 1.007 vs 0.999
    ("relu", "float32"): (1, 256),         # see RELU_SHAPES below
    ("tanh", "float32"): (2, 512),         # 1.005 vs 1.001
    ("add_scalar", "bfloat16"): (2, 256),  # 1.000 vs 0.996
    ("sub_scalar", "bfloat16"): (2, 256),  # 1.001 vs 0.998
    ("mul_scalar", "bfloat16"): (2, 256),  # 1.002 vs 0.999
    ("relu", "bfloat16"): (1, 256),        # see RELU_SHAPES below
    ("leaky_relu", "bfloat16"): (2, 512),  # 1.001 vs 0.997
    # 13:07 UTC sweep: the reciprocal form of x / p (below) and the heaviest op's occupancy
    ("div_scalar", "bfloat16"): (2, 256),  # 0.999 vs 0.996
    ("gelu_erf_backward", "bfloat16"): (1, 128),  # 1.000 vs 0.985 (U=2: 0.988)
    # 2026-11-23 16:24 UTC GPU-3b29df2e, benchmarks/sweeps/ew_source_ab.py (kernels launched directly, 5 rounds interleaved
    # with torch) after tanh.approx and the folded gelu constants: x torch of the chosen shape vs
    # the previous entry (2, 256), or the default (4, 256) for tanh
    ("gelu_tanh", "bfloat16"): (1, 256),   # 1.001 vs 0.995
    ("gelu_tanh_backward", "bfloat16"): (1, 128),  # 1.013 vs 0.997
    ("silu", "bfloat16"): (1, 512),        # 1.002 vs 0.998
    ("sigmoid", "bfloat16"): (1, 512),     # 1.000 vs 0.997
    ("tanh", "bfloat16"): (1, 512),        # 1.007 vs 0.995
}
# RELU_SHAPES: the best shape for relu depends on the lent H100 instance (benchmarks/sweeps/ew_hint_variants.py,
# 2026-11-23, x torch): (1, 512) led on one (f32 1.007/1.008, bf16 1.004) and trailed on another
# (f32 0.994, bf16 0.988), where the torch-like (1, 128) led (1.005, 1.000). (1, 256) was within
# 0.3% of the leader on both (f32 1.004 and 1.002, bf16 1.001 and 0.999): the robust choice.
# Per GPU model, ahead of TUNED (a `cudakit tune` of the GPU itself still wins): (U, threads, cap),
# the cap a bound on resident blocks per SM (ew_shapes.CANDIDATES says why). H100 SXM: with the L2
# policy of the loads (CK_L2_KEEP, _preamble.cuh), the shape with the best mean of (min, mean) x torch over
# two sweeps of benchmarks/sweeps/ew_variants.py on GPU-1767ce2b and GPU-49a8fc8c, 2026-11-26 (in the first
# the release ran in a loop of its own after the stores); every chosen shape >= 1.005x torch in both. The caps are model-specific: on an
# H200 (2026-11-26, 7 cases, before the L2 policy) the best capped shape trailed the best uncapped
# one by 0.4-2.8% in 6 cases (float32 relu: 1.3% ahead).
TUNED_BY_MODEL: dict = {
    "NVIDIA H100 80GB HBM3": {
        ("add", "float32"): (1, 512, 3), ("add", "bfloat16"): (1, 512, 3),
        ("sub", "float32"): (1, 512, 3), ("sub", "bfloat16"): (1, 512, 3),
        ("mul", "float32"): (1, 512, 3), ("mul", "bfloat16"): (1, 512, 3),
        ("div", "float32"): (1, 512, 3), ("div", "bfloat16"): (1, 512, 3),
        ("relu_backward", "float32"): (1, 512, 3), ("relu_backward", "bfloat16"): (1, 512, 3),
        ("leaky_relu_backward", "float32"): (1, 512, 3), ("leaky_relu_backward", "bfloat16"): (1, 512, 3),
        ("silu_backward", "float32"): (1, 512, 3), ("silu_backward", "bfloat16"): (1, 512, 3),
        ("sigmoid_backward", "float32"): (1, 512, 3), ("sigmoid_backward", "bfloat16"): (1, 512, 3),
        ("tanh_backward", "float32"): (1, 512, 3), ("tanh_backward", "bfloat16"): (1, 512, 3),
        ("gelu_tanh_backward", "float32"): (1, 512, 3), ("gelu_tanh_backward", "bfloat16"): (2, 256, 4),
        ("gelu_erf_backward", "float32"): (1, 128, 0), ("gelu_erf_backward", "bfloat16"): (2, 256, 4),
        ("add_scalar", "float32"): (2, 256, 4), ("add_scalar", "bfloat16"): (2, 256, 4),
        ("sub_scalar", "float32"): (2, 256, 4), ("sub_scalar", "bfloat16"): (2, 256, 5),
        ("mul_scalar", "float32"): (2, 256, 5), ("mul_scalar", "bfloat16"): (2, 256, 4),
        ("div_scalar", "float32"): (1, 128, 0), ("div_scalar", "bfloat16"): (2, 256, 4),
        ("relu", "float32"): (2, 256, 4), ("relu", "bfloat16"): (2, 256, 5),
        ("leaky_relu", "float32"): (2, 256, 5), ("leaky_relu", "bfloat16"): (2, 256, 5),
        ("tanh", "float32"): (1, 512, 0), ("tanh", "bfloat16"): (2, 256, 4),
        ("silu", "float32"): (4, 128, 6), ("silu", "bfloat16"): (1, 512, 0),
        ("sigmoid", "float32"): (4, 256, 3), ("sigmoid", "bfloat16"): (1, 512, 0),
        ("gelu_tanh", "float32"): (4, 128, 6), ("gelu_tanh", "bfloat16"): (1, 512, 0),
        ("gelu_erf", "float32"): (4, 128, 8), ("gelu_erf", "bfloat16"): (4, 128, 6),
    },
}


def is_heavy(op: str, dtype_name: str) -> bool:
    """Whether op's 16-bit kernel is one of the register-heavy ones (HEAVY_OPS)."""
    return op in HEAVY_OPS and dtype_name in ("float16", "bfloat16")


def contig_config(op: str, dtype_name: str, dev: int | None = None) -> tuple:
    """(U, threads per block, blocks per SM cap or 0) of op's contiguous kernel for this dtype:
    the shape `cudakit tune` stored for device `dev` (kernels/ew_shapes.py), else the one
    TUNED_BY_MODEL gives dev's model, else TUNED's, else the default."""
    c = None
    if dev is not None:
        c = ew_shapes.shapes(dev).get((op, dtype_name))
        if c is None:
            c = TUNED_BY_MODEL.get(ew_shapes.model(dev), {}).get((op, dtype_name))
    if c is None:
        c = TUNED.get((op, dtype_name))
    if c is not None:
        return ew_shapes.full(c)
    heavy = is_heavy(op, dtype_name)
    return UNROLL, HEAVY_THREADS if heavy else THREADS, 0


def cap_shared_memory(dev: int, cap: int) -> int:
    """Dynamic shared memory per block that lets at most `cap` blocks reside on one SM of device
    dev (0 for no cap). Why a cap: on the H100 a one- or two-input kernel at full occupancy keeps
    more loads in flight than HBM serves best; 3-6 resident blocks were up to 1.5% faster
    (see ew_shapes.CANDIDATES). Raises where the device cannot express the cap."""
    if not cap:
        return 0
    from ..runtime.device import get_device_info
    info = get_device_info(dev)
    if not info.max_shared_memory_per_multiprocessor:
        raise ValueError(f"device {dev} does not report its shared memory per SM: no blocks-per-SM cap")
    smem = info.max_shared_memory_per_multiprocessor // cap - info.reserved_shared_memory_per_block
    if smem > info.max_shared_memory_per_block_optin or smem < 0:
        raise ValueError(f"a cap of {cap} blocks per SM needs {smem} bytes of shared memory a block; "
                         f"device {dev} allows 0..{info.max_shared_memory_per_block_optin}")
    return smem


def _expr(kind: str, op: str, dtype_name: str, vec: int | None, unroll: int | None = None) -> str:
    functor = BINARY_OPS.get(op) or UNARY_OPS[op]
    arity = 2 if op in BINARY_OPS else 1
    t = ctype(dtype_name)
    if kind == "contig":
        return f"ck_ew{arity}_contig<{t}, {functor}, {vec}, {unroll or contig_config(op, dtype_name)[0]}>"
    if kind in ("rowbc", "rowbc_first"):   # (binary ops only)
        return f"ck_ew2_rowbc<{t}, {functor}, {vec}, {'true' if kind == 'rowbc_first' else 'false'}>"
    return f"ck_ew{arity}_strided<{t}, {functor}>"


def name_expressions() -> list[str]:
    """Every template instantiation this module launches (the contiguous kernels with the U of
    the default shape and of each model's, so that one compile per op and dtype serves them)."""
    out = []
    for op in (*BINARY_OPS, *UNARY_OPS):
        for dt in FLOAT_DTYPE_NAMES:
            us = {contig_config(op, dt)[0]} | {m[(op, dt)][0] for m in TUNED_BY_MODEL.values() if (op, dt) in m}
            for u in sorted(us):
                out += [_expr("contig", op, dt, vec_width(dt), u), _expr("contig", op, dt, 1, u)]
            out.append(_expr("strided", op, dt, None))
            if op in BINARY_OPS:
                out += [_expr(k, op, dt, v) for k in ("rowbc", "rowbc_first") for v in (vec_width(dt), 1)]
    return out


def _op_and_type(expr: str) -> tuple:
    """The (element type, functor) of a name expression: the kernels of one op and dtype (its
    vector, scalar and strided forms) compile together, on the op's first call in that dtype."""
    args = expr[expr.index("<") + 1:].rstrip(">").split(",")
    return args[0].strip(), args[1].strip()


_family = KernelFamily(SOURCE, name_expressions, "cudakit/elementwise.cu", group=_op_and_type)
_blocks_cap: dict[int, int] = {}       # device -> grid size that fills it (grid-stride loops)
_S2, _S3 = strides_struct_dtype(2), strides_struct_dtype(3)
_BLOCK = (THREADS, 1, 1)


def _function(dev: int, expr: str):
    if dev not in _blocks_cap:
        from ..runtime.device import get_device_info
        _blocks_cap[dev] = get_device_info(dev).multiprocessors * (2048 // THREADS)
    return _family.function(dev, expr)


def _grid(dev: int, work: int) -> tuple:
    """Grid for the strided kernels: one thread per element, at most one full wave (grid-stride)."""
    return (max(1, min((work + THREADS - 1) // THREADS, _blocks_cap[dev])), 1, 1)


def _aligned(*arrays) -> bool:
    return all(x.data.ptr % 16 == 0 for x in arrays)


def _elem_strides(x, shape):
    """x's strides in elements, broadcast to `shape` (0 along broadcast dimensions)."""
    pad = len(shape) - x.ndim
    st = [0] * pad + [s // x.itemsize for s in x.strides]
    xs = (1,) * pad + x.shape
    return tuple(0 if xs[d] == 1 and shape[d] != 1 else st[d] for d in range(len(shape)))


def _strided_args(struct_dtype, shape, operands):
    cshape, cstrides = collapse(shape, [_elem_strides(x, shape) for x in operands])
    if len(cshape) > 8:
        return None
    s = np.zeros(1, struct_dtype)
    s["ndim"] = len(cshape)
    s["shape"][0, :len(cshape)] = cshape
    for i, st in enumerate(cstrides):
        s[f"s{i}"][0, :len(cshape)] = st
    return s


def _contiguous(x) -> bool:
    return x._c_contiguous  # CuPy attribute; x.flags builds an object per call


_fast: dict = {}  # (op, dtype, device, vec) -> (expr, FastLauncher, elements per block)
# op -> {ew_key: (CUfunction, elements per block, threads, name, block, shared bytes)}: the kernels the native
# tiny-op path (runtime/_native.c `ew`) may launch; filled here as the Python path first meets them.
EW_TABLES: dict = {op: {} for op in (*BINARY_OPS, *UNARY_OPS)}


def forget_entries(op: str) -> None:
    """Drop op's launch entries: its next call builds them with the shape contig_config gives then
    (`cudakit tune` changes it)."""
    for k in [k for k in _fast if k[0] == op]:
        del _fast[k]
    EW_TABLES[op].clear()  # cleared in place: ops.py and the native path hold this dict


def ew_key(dtype, dev: int, vec: int) -> int:
    """The key of EW_TABLES entries; _native.c computes the same from the arrays."""
    return dtype.num * 4096 + dev * 32 + vec


def _contig_entry(op, dtype, dev, vec):
    key = (op, dtype, dev, vec)
    e = _fast.get(key)
    if e is None:
        from ..backends.base import supported_dtypes
        from ..runtime.fastlaunch import FastLauncher
        name = supported_dtypes()[dtype]
        unroll, threads, cap = contig_config(op, name, dev)
        expr = _expr("contig", op, name, vec, unroll)
        f = _function(dev, expr)
        smem = cap_shared_memory(dev, cap)
        if smem > 48 * 1024:  # above 48 KiB a kernel must opt in (dev is the current device)
            _family.kernel(expr).set_max_dynamic_shared_memory(smem)
        # parameters: the input pointers, out, n (int64), p (double)
        fl = FastLauncher(f.ptr, ("QQ" if op in BINARY_OPS else "Q") + "QQd")
        e = _fast[key] = (expr, fl, threads * unroll * vec, threads, (threads, 1, 1), smem)
        EW_TABLES[op][ew_key(dtype, dev, vec)] = (f.ptr, e[2], threads, expr, e[4], smem)
    return e



def _launch_contig(op, inputs: tuple, ptrs: tuple, out, n: int, dev: int, p: float):
    """The contiguous kernel of op over n elements; ptrs: the inputs' device pointers."""
    optr = out.data.ptr
    al = optr
    for q in ptrs:
        al |= q
    dt = out.dtype
    vec = _VEC.get(dt) or vec_width(dt) if not al & 15 else 1
    e = _fast.get((op, dt, dev, vec)) or _contig_entry(op, dt, dev, vec)
    expr, fl, tile, threads, block, smem = e
    gx = min((n + tile - 1) // tile, MAX_GRID_X)
    blocking = _launch._blocking
    if blocking is None:
        blocking = launch_blocking()
    if profiler._active is None and not blocking:
        if _ew_gate is not None:
            _ew_gate(True)  # the native path may take the next call (native.close_fast_gate shuts it)
        _launch.recent_launches.append((expr, (gx, 1, 1), block))
        nl = fl._native
        rec = _compiler._recorder
        if rec is not None:   # kernels/trace_plans.py is tracing this call
            rec.launch_packed(expr, fl.func, (gx, 1, 1), block, smem, fl._bcodes, (*ptrs, optr, n, p))
        try:
            if nl is not None:  # the native launcher, called directly: one Python frame less
                r = nl(fl.func, gx, 1, 1, threads, 1, 1, smem, _stream().ptr, fl._bcodes, *ptrs, optr, n, p)
                if r:
                    raise _cupy.loaded_cupy().cuda.driver.CUDADriverError(r)
            else:
                fl(gx, threads, (*ptrs, optr, n, p), _stream().ptr, smem=smem)
        except _cupy.loaded_cupy().cuda.driver.CUDADriverError as err:
            raise LaunchError(str(err), expr, (gx, 1, 1), block) from None
    else:
        _launch_function(expr, _function(dev, expr), (gx, 1, 1), block,
                         (*inputs, out, np.int64(n), np.float64(p)), smem, None)
    return out


_VEC: dict = {}      # dtype -> 16-byte vector width, filled on first use
_stream = None       # cupy.cuda.get_current_stream


def fast(op: str, vals: tuple, ndarray, p: float = 0.0):
    """op(*vals) into a new array when every input is a C-contiguous CuPy array of one dtype and
    shape on the current device; None when they do not qualify (the caller takes run()). The
    host-time-critical path of a tiny op: no policy objects, one native launch."""
    x0 = vals[0]
    if not x0._c_contiguous:
        return _fast_dense(op, vals, ndarray, p)
    dt, shape, dev = x0.dtype, x0.shape, x0.data.device_id
    ptrs = (x0.data.ptr,)
    if len(vals) == 2:
        x1 = vals[1]
        if x1.dtype != dt or x1.shape != shape or not x1._c_contiguous or x1.data.device_id != dev:
            return None
        ptrs = (ptrs[0], x1.data.ptr)
    if _stream is None:
        _first_use()
    if dt not in _VEC or dev != _get_device():
        return None
    out = ndarray(shape, dt)
    n = out.size
    return out if n == 0 else _launch_contig(op, vals, ptrs, out, n, dev, p)


def _fast_dense(op: str, vals: tuple, ndarray, p: float):
    """fast() for inputs of one dtype, shape and strides that cover their memory densely but not
    C-contiguously (channels-last activations): the result in that layout, the contiguous kernel
    over the flat memory; None otherwise."""
    x0 = vals[0]
    dt, shape, dev = x0.dtype, x0.shape, x0.data.device_id
    for x in vals[1:]:
        if x.dtype != dt or x.data.device_id != dev:
            return None
    if _stream is None:
        _first_use()
    if dt not in _VEC or dev != _get_device():
        return None
    order = shared_dense_order(vals, shape)
    if order is None:
        return None
    out = empty_in_order(ndarray, shape, dt, order)
    return _launch_contig(op, vals, tuple(x.data.ptr for x in vals), out, out.size, dev, p)


def _first_use():
    global _stream, _get_device, _ew_gate
    from ..backends.base import supported_dtypes
    from ..runtime import native
    cp = _cupy.loaded_cupy()
    _stream, _get_device = cp.cuda.get_current_stream, cp.cuda.runtime.getDevice
    for dt, name in supported_dtypes().items():
        _VEC[dt] = vec_width(name)
    mod = native.fast_paths()
    if mod is not None:
        _ew_gate = mod.fast_gate


_ew_gate = None      # the native module's fast_gate once its fast paths are set up


def _no_ew(table, x0, x1, p, out=None):
    return None


def native_ew():
    """The native tiny-op function ew(table, x0, x1 or None, p[, out]) (see runtime/_native.c), or a
    function that always declines where the native module is unavailable."""
    from ..runtime import native
    mod = native.fast_paths()
    return mod.ew if mod is not None else _no_ew


_get_device = None   # cupy.cuda.runtime.getDevice


def run(op: str, inputs: tuple, out, p: float = 0.0):
    """out[...] = op(*inputs), broadcasting inputs to out.shape; `p` is the op's scalar parameter
    (leaky_relu's slope). Inputs and out are CuPy arrays of one dtype on the current device; the
    caller (the CUDA backend) has validated them."""
    n = out.size
    if n == 0:
        return out
    cp = _cupy.loaded_cupy()
    dev = out.data.device_id
    shape = out.shape
    if (out._c_contiguous and all(x._c_contiguous and x.shape == shape for x in inputs)
            or _same_dense(inputs, out)):
        if _stream is None:
            _first_use()
        return _launch_contig(op, inputs, tuple(x.data.ptr for x in inputs), out, n, dev, float(p))
    dtype_name = out.dtype.name
    if len(inputs) == 2 and out._c_contiguous:
        bc = _row_broadcast(inputs, shape)
        if bc is not None:
            return _launch_rowbc(op, *bc, out, n, dev, float(p))
    struct = _strided_args(_S3 if len(inputs) == 2 else _S2, out.shape, (*inputs, out))
    if struct is None:  # more than 8 non-mergeable dimensions: compute on contiguous copies
        tmp = run(op, tuple(cp.ascontiguousarray(cp.broadcast_to(x, out.shape)) for x in inputs),
                  cp.empty(out.shape, out.dtype), p)
        out[...] = tmp
        return out
    expr = _expr("strided", op, dtype_name, None)
    f = _function(dev, expr)
    _launch_function(expr, f, _grid(dev, n), _BLOCK, (*inputs, out, np.int64(n), struct, np.float64(p)), 0, None)
    return out


def _row_broadcast(inputs: tuple, shape: tuple):
    """(the full operand, the repeated one, whether the repeated one comes first) where one input is
    C-contiguous with the result's shape and the other C-contiguous, smaller, its shape (leading
    1s aside) the result's trailing dims; else None."""
    a, b = inputs
    for full, rep_, first in ((a, b, False), (b, a, True)):
        if full.shape != shape or not (full._c_contiguous and rep_._c_contiguous) or not 0 < rep_.size < full.size:
            continue
        k = 0
        while k < rep_.ndim and rep_.shape[k] == 1:
            k += 1
        tail = rep_.shape[k:]
        if tail == shape[len(shape) - len(tail):]:
            return full, rep_, first
    return None


def _launch_rowbc(op: str, full, rep_, first: bool, out, n: int, dev: int, p: float):
    m = rep_.size
    v = vec_width(out.dtype)
    vec = v if not m % v and _aligned(full, rep_, out) else 1
    expr = _expr("rowbc_first" if first else "rowbc", op, out.dtype.name, vec)
    f = _function(dev, expr)
    _launch_function(expr, f, _grid(dev, n // vec), _BLOCK, (full, rep_, out, np.int64(n), np.int64(m), np.float64(p)),
                     0, None)
    return out


def _same_dense(inputs: tuple, out) -> bool:
    """Every input has out's shape and strides, and out covers one gapless block of memory (a
    channels-last view, a transpose): the op runs over the flat memory, element i of each operand
    at the same offset, as the contiguous kernels do."""
    return shared_dense_order((out,) + tuple(inputs), out.shape) is not None


def _or(values) -> int:
    r = 0
    for v in values:
        r |= v
    return r


