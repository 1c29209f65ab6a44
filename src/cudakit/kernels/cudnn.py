"""cuDNN through NVIDIA's cudnn frontend (the `cudnn` extra): convolution forward (bias fused),
data gradient and weight gradient, and flash scaled-dot-product attention forward and backward,
on CuPy memory and the current CuPy stream, without torch.

How a call runs:
- A cuDNN graph is built once per call signature (op, shapes, dtype, geometry, flags, device) and
  kept in `_graphs`; a signature cuDNN declines is remembered as declined (`supported()` is then
  False for it and the caller's own kernels run, see kernels/paths.py).
- Execution plans: cuDNN's heuristics (mode A, then FALLBACK) rank the engines. Under
  CUDAKIT_AUTOTUNE (default on) the first _TUNE_PLANS that build are timed once with CUDA events
  and the fastest is kept, by name, on disk next to the Triton autotuner's choices
  (<cache>/autotune/cudnn-*.json), so another process does not time them again; with
  CUDAKIT_AUTOTUNE=0 the heuristic's first plan runs.
- Workspaces are allocated from cudakit's pool (CuPy's allocator) for each call and released after
  it, stream-ordered as every other temporary.
- One cuDNN handle per (thread, device), bound to the current CuPy stream before each execution
  (the frontend skips the rebinding when the stream has not changed).
- Nothing here synchronises the host except the one-time plan timing, which never runs while a
  CUDA graph is being captured (a signature first seen under capture takes the heuristic's plan).

Tensors are described to cuDNN in cudakit's layouts: convolution NCHW (C-contiguous), attention
[BH, L, D] as cuDNN's [B=BH, H=1, S=L, D]; the softmax statistics are cuDNN's "Stats", the
natural-log log-sum-exp of each scaled score row in float32, which is what cudakit's lse is.

float32 convolutions run here only under float32_precision "tf32" (cuDNN's TF32 tensor-core
engines, what torch runs by default); "ieee" and "tf32x3" stay on cudakit's kernels. cuDNN's
attention takes float16 and bfloat16.
"""
from __future__ import annotations

import functools
import logging
import math
import threading

from .. import profiler
from ..runtime import _cupy
from ..runtime.tuned import TunedTable

log = logging.getLogger("cudakit.cudnn")

_TUNE_PLANS = 4      # plans timed per signature (the heuristic's first that build)
_TUNE_REPS = 5
_graphs: dict = {}   # signature -> _Graph, or the reason cuDNN declined it (str)
_handles = threading.local()
stats = {"graphs_built": 0, "declined": 0, "plans_timed": 0, "executions": 0}

_DTYPES = {"float16": "HALF", "bfloat16": "BFLOAT16", "float32": "FLOAT"}


@functools.lru_cache(maxsize=None)
def _load():
    """(the cudnn module, None) or (None, why it is unusable). Imported on first use only."""
    from ..config import settings
    if settings().cudnn == "0":
        return None, "CUDAKIT_CUDNN=0"
    try:
        import cudnn
        version = cudnn.backend_version()
    except Exception as e:   # ImportError, or the frontend finding no libcudnn.so.9
        return None, f"the cudnn frontend is not usable ({type(e).__name__}: {e}); pip install 'cudakit[cudnn]'"
    if version < 90000:
        return None, f"cuDNN {version} is older than 9.0"
    native = getattr(getattr(cudnn, "_pybind_module", None), "backend_graph", None)
    if native is None or not hasattr(native, "_execute_plan_at_index"):
        return None, (f"cudnn frontend {getattr(cudnn, '__version__', '?')} lacks the backend graph this module "
                      f"drives; pip install 'nvidia-cudnn-frontend>=1.32'")
    return cudnn, None


def available() -> bool:
    """True when the cudnn frontend imports and finds the cuDNN 9 library (asked once)."""
    return _load()[0] is not None


def wanted() -> bool:
    """True when cuDNN is a candidate path: installed and not CUDAKIT_CUDNN=0. Under
    CUDAKIT_CUDNN=1 a missing cuDNN raises BackendUnavailableError instead of answering False."""
    mod, why = _load()
    if mod is None:
        from ..config import settings
        if settings().cudnn == "1":
            from ..errors import BackendUnavailableError
            raise BackendUnavailableError(f"CUDAKIT_CUDNN=1 but {why}")
        return False
    return True


def why_unavailable() -> str | None:
    return _load()[1]


def version() -> str | None:
    mod = _load()[0]
    return None if mod is None else str(mod.backend_version())


def conv_dtype_ok(dtype_name: str) -> bool:
    """cuDNN takes this convolution dtype here: 16-bit always, float32 under precision "tf32"."""
    if dtype_name in ("float16", "bfloat16"):
        return True
    if dtype_name == "float32":
        from .. import config
        return config.float32_precision() == "tf32"
    return False


def attention_ok(dtype_name: str, d: int) -> bool:
    """cuDNN's flash attention takes this call: 16-bit data, head_dim a multiple of 8 up to 256."""
    return dtype_name in ("float16", "bfloat16") and d % 8 == 0 and d <= 256


# ---- handles, plans on disk -------------------------------------------------------------------
def _handle(cudnn, device: int, stream_ptr: int):
    by_dev = getattr(_handles, "by_dev", None)
    if by_dev is None:
        by_dev = _handles.by_dev = {}
    h = by_dev.get(device)
    if h is None:
        cp = _cupy.cupy()
        with cp.cuda.Device(device):
            h = by_dev[device] = cudnn.create_handle()
    cudnn.set_stream(h, stream_ptr)
    return h


def _ident():
    from ..runtime.device import get_device_info
    from .. import __version__
    return [get_device_info().name, version(), _load()[0].__version__, __version__]


_plans_on_disk = TunedTable("cudnn", _ident)   # signature -> plan name


# ---- graphs -----------------------------------------------------------------------------------
class _Graph:
    """A built cuDNN graph: its operand uids in call order and its workspace size."""
    __slots__ = ("graph", "uids", "workspace", "index", "plan", "label")

    def __init__(self, graph, uids, workspace, index, plan, label):
        self.graph, self.uids, self.workspace, self.index, self.plan = graph, uids, workspace, index, plan
        self.label = f"cudnn:{label}"   # the profiler's record name: which path ran

    def run(self, ptrs) -> None:
        cudnn = _load()[0]
        cp = _cupy.cupy()
        stream = cp.cuda.get_current_stream()
        h = _handle(cudnn, cp.cuda.runtime.getDevice(), stream.ptr)
        ws = cp.empty((self.workspace,), cp.uint8) if self.workspace else None
        pack = dict(zip(self.uids, ptrs))
        wptr = 0 if ws is None else ws.data.ptr
        profiler.record_call(self.label, lambda: self.graph._execute_plan_at_index(pack, wptr, self.index,
                                                                                   h.backend_handle), stream)
        stats["executions"] += 1


def executor(sig):
    """A function run(*pointers) executing the built graph of signature `sig` on the current stream
    with everything but the stream and the workspace bound (the host-time plans of
    kernels/path_plans.py); None when `sig` has no built graph."""
    g = _graphs.get(sig)
    if not isinstance(g, _Graph):
        return None
    cudnn = _load()[0]
    cp = _cupy.cupy()
    execute, index, uids, nws = g.graph._execute_plan_at_index, g.index, g.uids, g.workspace
    dev, get_stream, empty, u8 = sig[-1], cp.cuda.get_current_stream, cp.empty, cp.uint8

    def run(*ptrs):
        h = _handle(cudnn, dev, get_stream().ptr)
        if nws:
            ws = empty((nws,), u8)
            execute(dict(zip(uids, ptrs)), ws.data.ptr, index, h.backend_handle)
        else:
            execute(dict(zip(uids, ptrs)), 0, index, h.backend_handle)
    return run


def _contiguous_strides(shape) -> list:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= max(int(d), 1)
    return st[::-1]


def _graph(sig: tuple, dtype_name: str, make, scratch):
    """The _Graph of signature `sig` (built on first use by make(graph, dt) -> operand tensors in
    call order), or None when cuDNN declines it. scratch() -> operand pointers (fresh arrays) for
    timing plans."""
    g = _graphs.get(sig)
    if g is not None:
        return g if isinstance(g, _Graph) else None
    cudnn = _load()[0]
    cp = _cupy.cupy()
    dev = cp.cuda.runtime.getDevice()
    h = _handle(cudnn, dev, cp.cuda.get_current_stream().ptr)
    dt = cudnn.data_type
    io = getattr(dt, _DTYPES[dtype_name])
    try:
        # the frontend's C++ graph (the classic API), driven directly: its execution costs a few
        # microseconds of host time where the Python graph object's execute() costs tens
        graph = cudnn._pybind_module.backend_graph(io_data_type=io, intermediate_data_type=dt.FLOAT,
                                                   compute_data_type=dt.FLOAT, handle=h.backend_handle)
        tensors = make(graph, dt)
        for uid, t in enumerate(tensors, 1):
            t.set_uid(uid)
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        graph.check_support()
        uids = list(range(1, len(tensors) + 1))
        index, plan = _pick_plan(graph, sig, uids, scratch, h)
    except Exception as e:   # cudnnGraphNotSupportedError and friends: cudakit's kernels take it
        why = f"{type(e).__name__}: {e}"
        _graphs[sig] = why
        stats["declined"] += 1
        log.info("cuDNN declined %s: %s", sig, why)
        from ..config import settings
        if settings().cudnn == "1":
            from ..errors import BackendUnavailableError
            raise BackendUnavailableError(f"CUDAKIT_CUDNN=1 but cuDNN declined {sig[0]} {sig[1:]}: {why}") from e
        return None
    _graphs[sig] = built = _Graph(graph, uids, graph.get_workspace_size_plan_at_index(index), index, plan, sig[0])
    stats["graphs_built"] += 1
    return built


def _pick_plan(graph, sig, uids, scratch, handle) -> tuple[int, str]:
    """Build the plan to run and return (its index, its name): the one kept on disk for
    this signature, else the fastest of the first _TUNE_PLANS that build (timed once, not while
    capturing), else the heuristic's first."""
    from ..config import settings
    from ..graphs import capturing
    n = graph.get_execution_plan_count()
    names = []
    for i in range(n):
        try:
            names.append(graph.get_plan_name_at_index(i))
        except Exception:   # a delegating entry the backend does not name
            names.append(f"#{i}")
    key = repr(sig)
    want = _plans_on_disk.get(key)
    if want in names:
        graph.build_plan_at_index(names.index(want))
        return names.index(want), want
    tune = settings().autotune and capturing() is None
    built = []
    for i in range(n):
        try:
            graph.build_plan_at_index(i)
        except Exception as e:
            log.info("cuDNN plan %s of %s does not build: %s", names[i], sig, e)
            continue
        built.append(i)
        if len(built) == (_TUNE_PLANS if tune else 1):
            break
    if not built:
        raise RuntimeError(f"none of the {n} execution plans builds")
    if len(built) == 1:
        return built[0], names[built[0]]
    cp = _cupy.cupy()
    ptrs, keep = scratch()
    stream = cp.cuda.get_current_stream()
    best, best_t = built[0], math.inf
    for i in built:
        ws = graph.get_workspace_size_plan_at_index(i)
        buf = cp.empty((ws,), cp.uint8) if ws else None
        pack = dict(zip(uids, ptrs))
        wptr = 0 if buf is None else buf.data.ptr
        raw = handle.backend_handle
        try:
            graph._execute_plan_at_index(pack, wptr, i, raw)
            samples = []
            for _ in range(_TUNE_REPS):
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record(stream)
                graph._execute_plan_at_index(pack, wptr, i, raw)
                b.record(stream)
                b.synchronize()
                samples.append(cp.cuda.get_elapsed_time(a, b))
        except Exception as e:
            log.info("cuDNN plan %s of %s does not run: %s", names[i], sig, e)
            continue
        stats["plans_timed"] += 1
        t = sorted(samples)[len(samples) // 2]
        if settings().autotune_log:
            log.warning("autotune cuDNN %s: plan %s -> %.4f ms", sig, names[i], t)
        if t < best_t:
            best, best_t = i, t
    del keep
    _plans_on_disk.put(key, names[best])
    return best, names[best]


def _scratch(*specs):
    """A function making fresh arrays (shape, dtype) for plan timing: (pointers, the arrays)."""
    def make():
        cp = _cupy.cupy()
        arrs = [cp.zeros(shape, dtype) for shape, dtype in specs]
        return [a.data.ptr for a in arrs], arrs
    return make


def _conv_geometry(geo):
    sh, sw, ph, pw, dh, dw = geo[:6]
    return dict(padding=[ph, pw], stride=[sh, sw], dilation=[dh, dw])


# ---- convolution ------------------------------------------------------------------------------
def conv_fprop(x, w, bias, geo):
    """y (N, K, Ho, Wo) of conv2d for C-contiguous x (N, C, H, W), w (K, C, R, S), bias (K,) or
    None, one dtype: cuDNN's fprop, the bias added in the same graph. Returns None when cuDNN
    declines the signature. FLOPs: 2 N K Ho Wo C R S."""
    cp = _cupy.cupy()
    name = str(x.dtype)
    n, c, h, wd = x.shape
    k = w.shape[0]
    y_shape = (n, k, geo[8], geo[9])
    sig = ("conv_fprop", x.shape, w.shape, name, geo, bias is not None, x.data.device_id)

    def make(g, dt):
        X = g.tensor(name="X", dim=list(x.shape), stride=_contiguous_strides(x.shape), data_type=g_io(dt, name))
        W = g.tensor(name="W", dim=list(w.shape), stride=_contiguous_strides(w.shape), data_type=g_io(dt, name))
        Y = g.conv_fprop(image=X, weight=W, compute_data_type=dt.FLOAT, name="fprop", **_conv_geometry(geo))
        ops = [X, W]
        if bias is not None:
            B = g.tensor(name="B", dim=[1, k, 1, 1], stride=[k, 1, 1, 1], data_type=g_io(dt, name))
            Y = g.bias(input=Y, bias=B, name="bias")
            ops.append(B)
        Y.set_output(True).set_dim(list(y_shape)).set_stride(_contiguous_strides(y_shape)).set_data_type(g_io(dt, name))
        return ops + [Y]
    specs = [(x.shape, x.dtype), (w.shape, x.dtype)] + ([((k,), x.dtype)] if bias is not None else []) + [(y_shape, x.dtype)]
    g = _graph(sig, name, make, _scratch(*specs))
    if g is None:
        return None
    y = cp.empty(y_shape, x.dtype)
    g.run([x.data.ptr, w.data.ptr] + ([bias.data.ptr] if bias is not None else []) + [y.data.ptr])
    return y


def conv_dgrad(grad_out, w, x_shape, geo):
    """dL/dx (x_shape) of conv2d for C-contiguous grad_out (N, K, Ho, Wo) and w (K, C, R, S):
    cuDNN's dgrad, or None when declined. FLOPs: 2 N K Ho Wo C R S."""
    cp = _cupy.cupy()
    name = str(w.dtype)
    x_shape = tuple(int(v) for v in x_shape)
    sig = ("conv_dgrad", grad_out.shape, w.shape, x_shape, name, geo, w.data.device_id)

    def make(g, dt):
        DY = g.tensor(name="DY", dim=list(grad_out.shape), stride=_contiguous_strides(grad_out.shape),
                      data_type=g_io(dt, name))
        W = g.tensor(name="W", dim=list(w.shape), stride=_contiguous_strides(w.shape), data_type=g_io(dt, name))
        DX = g.conv_dgrad(loss=DY, filter=W, compute_data_type=dt.FLOAT, name="dgrad", **_conv_geometry(geo))
        DX.set_output(True).set_dim(list(x_shape)).set_stride(_contiguous_strides(x_shape)).set_data_type(g_io(dt, name))
        return [DY, W, DX]
    g = _graph(sig, name, make, _scratch((grad_out.shape, w.dtype), (w.shape, w.dtype), (x_shape, w.dtype)))
    if g is None:
        return None
    dx = cp.empty(x_shape, w.dtype)
    g.run([grad_out.data.ptr, w.data.ptr, dx.data.ptr])
    return dx


def conv_wgrad(grad_out, x, w_shape, geo, bias: bool):
    """(dL/dw (w_shape), dL/db (K,) or None) of conv2d for C-contiguous grad_out (N, K, Ho, Wo) and
    x (N, C, H, W): cuDNN's wgrad (float32 accumulation, rounded once to x's dtype) and the bias
    gradient as a float32 sum of grad_out over (N, Ho, Wo); None when cuDNN declines.
    FLOPs: 2 N K Ho Wo C R S."""
    cp = _cupy.cupy()
    name = str(x.dtype)
    w_shape = tuple(int(v) for v in w_shape)
    sig = ("conv_wgrad", grad_out.shape, x.shape, w_shape, name, geo, x.data.device_id)

    def make(g, dt):
        X = g.tensor(name="X", dim=list(x.shape), stride=_contiguous_strides(x.shape), data_type=g_io(dt, name))
        DY = g.tensor(name="DY", dim=list(grad_out.shape), stride=_contiguous_strides(grad_out.shape),
                      data_type=g_io(dt, name))
        DW = g.conv_wgrad(image=X, loss=DY, compute_data_type=dt.FLOAT, name="wgrad", **_conv_geometry(geo))
        DW.set_output(True).set_dim(list(w_shape)).set_stride(_contiguous_strides(w_shape)).set_data_type(g_io(dt, name))
        return [X, DY, DW]
    g = _graph(sig, name, make, _scratch((x.shape, x.dtype), (grad_out.shape, x.dtype), (w_shape, x.dtype)))
    if g is None:
        return None
    dw = cp.empty(w_shape, x.dtype)
    g.run([x.data.ptr, grad_out.data.ptr, dw.data.ptr])
    db = grad_out.sum(axis=(0, 2, 3), dtype=cp.float32).astype(x.dtype) if bias else None
    return dw, db


def g_io(dt, dtype_name: str):
    return getattr(dt, _DTYPES[dtype_name])


# ---- attention --------------------------------------------------------------------------------
def _bhsd(bh: int, length: int, d: int) -> tuple[list, list]:
    return [bh, 1, length, d], [length * d, length * d, d, 1]


def sdpa_forward(q, k, v, scale: float, causal: bool):
    """(out [BH, Lq, D], lse [BH, Lq] float32) of softmax(q k^T * scale) v for contiguous [BH, L, D]
    16-bit q, k, v: cuDNN's flash forward, or None when declined.
    FLOPs: 4 BH Lq Lk D (half of it causal)."""
    cp = _cupy.cupy()
    bh, lq, d = q.shape
    lk = k.shape[1]
    name = str(q.dtype)
    sig = ("sdpa_fwd", bh, lq, lk, d, name, float(scale), bool(causal), q.data.device_id)

    def make(g, dt):
        io = g_io(dt, name)
        Q = g.tensor(name="Q", dim=_bhsd(bh, lq, d)[0], stride=_bhsd(bh, lq, d)[1], data_type=io)
        K = g.tensor(name="K", dim=_bhsd(bh, lk, d)[0], stride=_bhsd(bh, lk, d)[1], data_type=io)
        V = g.tensor(name="V", dim=_bhsd(bh, lk, d)[0], stride=_bhsd(bh, lk, d)[1], data_type=io)
        O, S = g.sdpa(name="sdpa", q=Q, k=K, v=V, is_inference=False, attn_scale=float(scale),
                      use_causal_mask=bool(causal))
        O.set_output(True).set_dim(_bhsd(bh, lq, d)[0]).set_stride(_bhsd(bh, lq, d)[1]).set_data_type(io)
        S.set_output(True).set_dim([bh, 1, lq, 1]).set_stride([lq, lq, 1, 1]).set_data_type(dt.FLOAT)
        return [Q, K, V, O, S]
    g = _graph(sig, name, make, _scratch((q.shape, q.dtype), (k.shape, q.dtype), (v.shape, q.dtype),
                                         (q.shape, q.dtype), ((bh, lq), cp.float32)))
    if g is None:
        return None
    out = cp.empty_like(q)
    lse = cp.empty((bh, lq), cp.float32)
    g.run([q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, lse.data.ptr])
    return out, lse


def sdpa_backward(do, q, k, v, out, lse, scale: float, causal: bool):
    """(dq, dk, dv) of sdpa_forward for dL/dout = do, from its out and lse ([BH, Lq] float32):
    cuDNN's flash backward, or None when declined. FLOPs: 10 BH Lq Lk D (half of it causal)."""
    cp = _cupy.cupy()
    bh, lq, d = q.shape
    lk = k.shape[1]
    name = str(q.dtype)
    sig = ("sdpa_bwd", bh, lq, lk, d, name, float(scale), bool(causal), q.data.device_id)

    def make(g, dt):
        io = g_io(dt, name)
        qd, ks = _bhsd(bh, lq, d), _bhsd(bh, lk, d)
        Q = g.tensor(name="Q", dim=qd[0], stride=qd[1], data_type=io)
        K = g.tensor(name="K", dim=ks[0], stride=ks[1], data_type=io)
        V = g.tensor(name="V", dim=ks[0], stride=ks[1], data_type=io)
        O = g.tensor(name="O", dim=qd[0], stride=qd[1], data_type=io)
        DO = g.tensor(name="dO", dim=qd[0], stride=qd[1], data_type=io)
        S = g.tensor(name="Stats", dim=[bh, 1, lq, 1], stride=[lq, lq, 1, 1], data_type=dt.FLOAT)
        DQ, DK, DV = g.sdpa_backward(name="sdpa_backward", q=Q, k=K, v=V, o=O, dO=DO, stats=S,
                                     attn_scale=float(scale), use_causal_mask=bool(causal))
        DQ.set_output(True).set_dim(qd[0]).set_stride(qd[1]).set_data_type(io)
        DK.set_output(True).set_dim(ks[0]).set_stride(ks[1]).set_data_type(io)
        DV.set_output(True).set_dim(ks[0]).set_stride(ks[1]).set_data_type(io)
        return [Q, K, V, O, DO, S, DQ, DK, DV]
    t = q.dtype
    g = _graph(sig, name, make, _scratch((q.shape, t), (k.shape, t), (v.shape, t), (q.shape, t), (q.shape, t),
                                         ((bh, lq), cp.float32), (q.shape, t), (k.shape, t), (v.shape, t)))
    if g is None:
        return None
    dq, dk, dv = cp.empty_like(q), cp.empty_like(k), cp.empty_like(v)
    g.run([q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, do.data.ptr, lse.data.ptr,
           dq.data.ptr, dk.data.ptr, dv.data.ptr])
    return dq, dk, dv


def declined() -> dict:
    """{signature: why} of the signatures cuDNN declined in this process (cudakit info)."""
    return {repr(k): v for k, v in _graphs.items() if isinstance(v, str)}
