"""cuDNN through NVIDIA's cudnn frontend (the `cudnn` extra): convolution forward (bias fused),
data gradient and weight gradient, and flash scaled-dot-product attention forward and backward,
on CuPy memory and the current CuPy stream, without torch.

How a call runs:
- A cuDNN graph is built once per call signature (op, shapes, dtype, geometry, flags, device) and
  kept in `_graphs`; a signature cuDNN declines is remembered as declined (`supported()` is then
  False for it and the caller's own kernels run, see kernels/paths.py).
- Execution plans: cuDNN's heuristics (mode A, then FALLBACK) rank the engines. Under
  CUDAKIT_AUTOTUNE (default on) the first _TUNE_PLANS (8) that build are timed once with CUDA events
  and the fastest is kept, by name, on disk next to the Triton autotuner's choices
  (<cache>/autotune/cudnn-*.json), so another process does not time them again; with
  CUDAKIT_AUTOTUNE=0 the heuristic's first plan runs.
- Workspaces come from cudakit's pool (CuPy's allocator), stream-ordered as every other temporary;
  one of up to 4 MiB is kept per (thread, device, stream) and reused by the next execution on that
  stream (_workspace), except in a CUDA graph's warm-up and capture (its private pool).
- One cuDNN handle per (thread, device), bound to the current CuPy stream before each execution
  (the frontend skips the rebinding when the stream has not changed).
- Nothing here synchronises the host except the one-time plan timing, which never runs while a
  CUDA graph is being captured (a signature first seen under capture takes the heuristic's plan).

Tensors are described to cuDNN in cudakit's layouts: convolution NCHW (C-contiguous), attention
[BH, L, D] as cuDNN's [B=BH, H=1, S=L, D]; the softmax statistics are cuDNN's "Stats", the
natural-log log-sum-exp of each scaled score row in float32, which is what cudakit's lse is.

float32 convolutions run here under float32_precision "tf32" (cuDNN's TF32 tensor-core engines,
what torch runs by default) and "ieee" (the plans of engines with a tensor-core, down-converting or
reduced-precision numerical note deselected: FP32 arithmetic throughout, the plans torch's strict
FP32 (TF32 off) keeps; FFT and Winograd plans stay, as there: their FP32 transforms round
differently from a direct sum, not per product as TF32 does, and in the plan probe their error
against float64 was no larger than the direct plans'); "tf32x3" stays on cudakit's kernels.
cuDNN's attention takes float16 and bfloat16.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import math
import threading

from .. import profiler
from ..runtime import _cupy, memory
from ..runtime.tuned import TunedTable
from .reduction import channel_sum

log = logging.getLogger("cudakit.cudnn")

# plans timed per signature (the heuristic's first that build): 4 left out the fastest exact plan
# of the float32 3x3 512->512 7x7 forward, the 7th that builds (0.295 ms against the 4's best
# 0.330 ms and torch's strict FP32 0.333 ms; H100, 2026-11-27, scripts/cudnn_plan_probe.py f32); a
# plan whose single call takes over _SLOW times the best so far (and 0.5 ms more) is not timed
# further (cuDNN's eng0 fallbacks run 10-15x slower, and would cost the first call of every
# signature 0.1 s each)
_TUNE_PLANS = 8
_SLOW = 4.0
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


_CONV_DTYPES = ("float16", "bfloat16", "float32")


def conv_dtype_ok(dtype_name: str) -> bool:
    """cuDNN takes this convolution dtype here: 16-bit always, float32 under precision "tf32" or
    "ieee" (FP32-arithmetic engines only, see the module docstring)."""
    if dtype_name not in _CONV_DTYPES:
        return False
    if dtype_name != "float32":
        return True
    from .. import config
    return config.float32_precision() in ("tf32", "ieee")


def _exact(dtype_name: str) -> bool:
    """float32 under precision "ieee": the graph keeps only plans of FP32 arithmetic (_INEXACT_NOTES)."""
    if dtype_name != "float32":
        return False
    from .. import config
    return config.float32_precision() == "ieee"


# the numerical notes of plans an "ieee" float32 graph leaves out (frontend names; one missing from
# an older frontend is skipped): TF32 or lower-precision inputs or sums, as torch leaves out with
# TF32 off. Its FFT and Winograd plans (_TRANSFORM_NOTES) stay: torch's strict FP32 runs them (its 3x3
# 128->128 28x28 forward took 0.1355 ms on plan eng3_k11=2, which only they include, against 0.2349 ms
# for the best direct plan; H100, 2026-11-27, scripts/cudnn_plan_probe.py f32).
_INEXACT_NOTES = ("TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION")
_TRANSFORM_NOTES = ("FFT", "WINOGRAD", "WINOGRAD_TILE_4x4", "WINOGRAD_TILE_6x6", "WINOGRAD_TILE_13x13")


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
    from .paths import _TIMING
    frontend = _load()[0]   # None without the frontend: the table then belongs to no frontend version
    # (and how plans are timed and which an "ieee" graph may keep: a choice made otherwise is not reused)
    return [get_device_info().name, version(), getattr(frontend, "__version__", None), __version__,
            _TIMING, "ieee-fft-winograd"]


_plans_on_disk = TunedTable("cudnn", _ident)   # signature -> plan name


# ---- graphs -----------------------------------------------------------------------------------
class _Graph:
    """A built cuDNN graph: its operand uids in call order, its plan and workspace size, and
    `launch(pointers, workspace pointer, backend handle)` executing it."""
    __slots__ = ("graph", "uids", "workspace", "index", "plan", "label", "launch")

    def __init__(self, graph, uids, workspace, index, plan, label):
        self.graph, self.uids, self.workspace, self.index, self.plan = graph, uids, workspace, index, plan
        self.label = f"cudnn:{label}"   # the profiler's record name: which path ran
        self.launch = _launcher(graph, uids, index)

    def run(self, ptrs) -> None:
        from ..runtime import compiler
        if compiler._recorder is not None:   # a trace (kernels/trace_plans.py) cannot replay cuDNN's work
            compiler._recorder.other = True
        cp = _cupy.cupy()
        stream = cp.cuda.get_current_stream()
        dev = cp.cuda.runtime.getDevice()
        h = _handle(_load()[0], dev, stream.ptr).backend_handle
        wptr, ws = _workspace(self.workspace, dev, stream) if self.workspace else (0, None)
        profiler.record_call(self.label, lambda: self.launch(ptrs, wptr, h), stream)
        stats["executions"] += 1


def _launcher(graph, uids, index):
    """launch(pointers, workspace, handle) of a built graph: the operands' pointers in uid order
    (uids 1..n, call order) through the frontend's raw-pointer entry, no map built or converted
    (about 5 us less host time a call than the uid map, H100 host, scripts/cudnn_probe.py); the uid
    map where the frontend lacks that entry."""
    raw = getattr(graph, "_execute_with_raw_ptrs", None)
    if raw is None:
        execute = graph._execute_plan_at_index

        def launch(ptrs, ws, h):
            execute(dict(zip(uids, ptrs)), ws, index, h)
        return launch
    import ctypes
    n = len(uids)
    arr_t, addressof = ctypes.c_int64 * n, ctypes.addressof

    def launch(ptrs, ws, h):
        arr = arr_t(*ptrs)
        raw(addressof(arr), n, ws, h, index)
    return launch


def executor(sig):
    """A function run(*pointers) executing the built graph of signature `sig` on the current stream
    with everything but the stream and the workspace bound (the host-time plans of
    kernels/path_plans.py, which skip the profiler record of _Graph.run: plans decline while a
    profile records); None when `sig` has no built graph."""
    g = _graphs.get(sig)
    if not isinstance(g, _Graph):
        return None
    cudnn = _load()[0]
    cp = _cupy.cupy()
    launch, nws = g.launch, g.workspace
    dev, get_stream = sig[-1], cp.cuda.get_current_stream

    def run(*ptrs):
        stream = get_stream()
        h = _handle(cudnn, dev, stream.ptr).backend_handle
        if nws:
            wptr, ws = _workspace(nws, dev, stream)   # (ws held until the launch has returned)
            launch(ptrs, wptr, h)
        else:
            launch(ptrs, 0, h)
    return run


_WS_KEPT = 4 << 20   # workspaces up to this many bytes are kept per (thread, device, stream)
_kept = threading.local()


def _workspace(nbytes: int, device: int, stream) -> tuple:
    """(pointer, holder) of an execution's workspace of nbytes on the current device and `stream`.
    Up to _WS_KEPT bytes, one buffer per (thread, device, stream) is kept and reused by the next
    execution on that stream, which stream order runs after this one: the same memory CuPy's pool
    would hand back for an allocation freed on the stream, without its 3.8 us of host time a call
    (H200 host, 2026-11-28, benchmarks/sweeps/attention_bias_host_parts.py). Per thread, since CuPy's per-thread
    default stream has one pointer for every thread's own stream. Only from cudakit's pool
    (memory.pool_allocator_active): not in a CUDA graph's warm-up or capture, whose allocations come
    from the graph's private pool, nor under a user's own allocator; and not while the stream is
    being captured, whose workspace must stay the graph's: there, and for larger workspaces, a fresh
    buffer each execution."""
    cp = _cupy.cupy()
    if nbytes <= _WS_KEPT and memory.pool_allocator_active():
        try:
            free = not stream.is_capturing()
        except cp.cuda.runtime.CUDARuntimeError:   # (the legacy stream asked while another captures)
            free = False
        if free:
            by_stream = getattr(_kept, "by_stream", None)
            if by_stream is None:
                by_stream = _kept.by_stream = {}
            key = (device, stream.ptr)
            buf = by_stream.get(key)
            if buf is None or buf.nbytes < nbytes:
                if len(by_stream) >= 8:   # (streams come and go: keep a few)
                    by_stream.clear()
                buf = by_stream[key] = cp.empty((max(nbytes, 4096),), cp.uint8)
            return buf.data.ptr, buf
    buf = cp.empty((nbytes,), cp.uint8)
    return buf.data.ptr, buf


def contiguous_desc(shape) -> tuple:
    """(dims, strides) in elements of a C-contiguous array of `shape`."""
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= max(int(d), 1)
    return tuple(int(d) for d in shape), tuple(st[::-1])


def _graph(sig: tuple, dtype_name: str, make, scratch, exact: bool = False):
    """The _Graph of signature `sig` (built on first use by make(graph, dt) -> operand tensors in
    call order), or None when cuDNN declines it. scratch() -> operand pointers (fresh arrays) for
    timing plans. exact: only plans of FP32 arithmetic (float32 "ieee"; the signature
    must say so, as the conv signatures do)."""
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
        if exact:
            missing = [n for n in _INEXACT_NOTES[:2] if not hasattr(cudnn.numerical_note, n)]
            if missing:   # cannot leave out TF32 plans: decline rather than run them under "ieee"
                raise RuntimeError(f"this cuDNN frontend has no numerical note {', '.join(missing)}")
            notes = [getattr(cudnn.numerical_note, n) for n in _INEXACT_NOTES if hasattr(cudnn.numerical_note, n)]
            graph.deselect_numeric_notes(notes)
        graph.check_support()
        uids = list(range(1, len(tensors) + 1))
        index, plan = _pick_plan(graph, sig, uids, scratch, h)
    except Exception as e:   # cudnnGraphNotSupportedError and friends: cudakit's kernels take it
        if _transient(e):   # out of memory (the timing's scratch copies too): not a decline to remember
            raise
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


def _transient(e: Exception) -> bool:
    """An error that says nothing about whether cuDNN supports the signature: out of memory."""
    from ..errors import OutOfMemoryError
    cp = _cupy.cupy()
    return isinstance(e, (MemoryError, OutOfMemoryError, cp.cuda.memory.OutOfMemoryError))


def aligned(*arrays) -> bool:
    """Every operand's address 16-byte aligned, as the graphs describe their tensors (a contiguous
    slice of a larger array may start anywhere): otherwise the call declines, not remembered, and
    cudakit's kernels run it."""
    return all(a is None or not a.data.ptr % 16 for a in arrays)


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
        try:
            graph.build_plan_at_index(names.index(want))
            return names.index(want), want
        except Exception as e:   # the kept plan no longer builds here: choose again
            if _transient(e):
                raise
            log.info("cuDNN plan %s kept for %s does not build: %s", want, sig, e)
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
    from . import paths
    ptrs, keep = scratch()
    best, best_t = built[0], math.inf
    for i in built:
        pack = dict(zip(uids, ptrs))
        raw = handle.backend_handle
        try:   # (a plan whose workspace does not fit in memory, an FFT one say, is not timed)
            ws = graph.get_workspace_size_plan_at_index(i)
            buf = cp.empty((ws,), cp.uint8) if ws else None
            wptr = 0 if buf is None else buf.data.ptr
            graph._execute_plan_at_index(pack, wptr, i, raw)
            if best_t < math.inf and paths.time_once(
                    lambda: graph._execute_plan_at_index(pack, wptr, i, raw)) > max(_SLOW * best_t, best_t + 0.5):
                continue   # (and 0.5 ms over: one call of a short plan is mostly launch latency)
            # each execution behind its own L2 flush and spin (paths.time_per_call): a single
            # call's launch latency would swamp the difference between plans of a short kernel
            t = paths.time_per_call(lambda: graph._execute_plan_at_index(pack, wptr, i, raw))
        except Exception as e:
            log.info("cuDNN plan %s of %s does not run: %s", names[i], sig, e)
            continue
        stats["plans_timed"] += 1
        if settings().autotune_log:
            log.warning("autotune cuDNN %s: plan %s -> %.4f ms", sig, names[i], t)
        if t < best_t:
            best, best_t = i, t
    del keep
    if best_t < math.inf:   # a choice no timing made is not kept on disk
        _plans_on_disk.put(key, names[best])
    return best, names[best]


_BY_VALUE = (None, "int64 by value")   # a _scratch spec: an operand passed by value (dropout_operands)


def _scratch(*specs):
    """A function making fresh buffers for plan timing, one per (descriptor, dtype) spec (each
    zeroed and large enough for its strided tensor; _BY_VALUE: a host int64 0): (pointers, the
    buffers)."""
    def make():
        ptrs, arrs = [], []
        for spec in specs:
            if spec is _BY_VALUE:
                arrs.append(ctypes.c_int64(0))
                ptrs.append(ctypes.addressof(arrs[-1]))
            else:
                arrs.append(_cupy.cupy().zeros(_extent(spec[0]), spec[1]))
                ptrs.append(arrs[-1].data.ptr)
        return ptrs, arrs
    return make


def nchw_out_desc(shape, channels_last: bool) -> tuple:
    """(dims, strides) of a new (N, C, H, W) output: C-contiguous, or channels-last memory
    ((N, H, W, C) C-contiguous) when channels_last."""
    if not channels_last:
        return contiguous_desc(shape)
    n, c, h, w = (int(v) for v in shape)
    return (n, c, h, w), (h * w * c, 1, w * c, c)


def new_nchw(shape, dtype, channels_last: bool):
    """An uninitialised (N, C, H, W) array, C-contiguous or an (N, C, H, W) view of (N, H, W, C) memory."""
    cp = _cupy.cupy()
    if not channels_last:
        return cp.empty(shape, dtype)
    n, c, h, w = shape
    return cp.empty((n, h, w, c), dtype).transpose(0, 3, 1, 2)


def _conv_geometry(geo):
    sh, sw, ph, pw, dh, dw = geo[:6]
    return dict(padding=[ph, pw], stride=[sh, sw], dilation=[dh, dw])


# ---- convolution ------------------------------------------------------------------------------
# graph signatures, shared with the dispatch plans that look the built graphs up (path_plans.py)
# layout: "nchw" (C-contiguous operands) or "nhwc" (the activations channels-last, the weight as
# weight_cl says): one graph each, as their strides differ
# float32 "ieee" graphs (FP32-arithmetic plans only) are signatures of their own too. Every
# signature ends with its device (executor() reads it there).
def _tags(dtype_name: str, layout: str, weight_cl: bool) -> tuple:
    return ((layout,) if layout != "nchw" else ()) + (("krsc",) if weight_cl else ()) \
        + (("ieee",) if _exact(dtype_name) else ())


def fprop_sig(x_shape, w_shape, dtype_name, geo, bias: bool, device: int, layout: str = "nchw",
              weight_cl: bool = False, relu: bool = False) -> tuple:
    return ("conv_fprop", tuple(x_shape), tuple(w_shape), dtype_name, geo, bool(bias)) + \
        _tags(dtype_name, layout, weight_cl) + (("relu",) if relu else ()) + (device,)


def dgrad_sig(g_shape, w_shape, x_shape, dtype_name, geo, device: int, layout: str = "nchw",
              weight_cl: bool = False) -> tuple:
    return ("conv_dgrad", tuple(g_shape), tuple(w_shape), tuple(int(v) for v in x_shape), dtype_name, geo) + \
        _tags(dtype_name, layout, weight_cl) + (device,)


def wgrad_sig(g_shape, x_shape, w_shape, dtype_name, geo, device: int, layout: str = "nchw",
              weight_cl: bool = False) -> tuple:
    return ("conv_wgrad", tuple(g_shape), tuple(x_shape), tuple(int(v) for v in w_shape), dtype_name, geo) + \
        _tags(dtype_name, layout, weight_cl) + (device,)


# A channels-last convolution's weight may go to cuDNN channels-last too ((K, C, R, S) views of
# (K, R, S, C) memory, weight_cl: a C-contiguous weight copied a call by kernels/transpose.py's
# permute and dL/dw written so and copied back; a channels-last weight, is_krsc, read and its dL/dw
# returned in place), as torch does (its cuDNN convolution takes the weight in the input's suggested
# memory format, a copy a call unless the weight is already so, and returns dL/dw in it): the path
# "cudnn-krsc" beside "cudnn" where krsc_offered, timed per signature. With the weight C-contiguous
# and the activations channels-last, the 3x3 rows of the ResNet-50 benchmark ran 0.751-0.998x torch
# (bfloat16, H100, 2026-11-27 05:39 UTC, history/nvidia-h100-80gb-hbm3-conv-r50-bf16-0539.json,
# conv2d_r50_nhwc*), the 1x1 rows, whose
# two weight layouts are one memory, 0.969-1.087x. cuDNN's fastest plan of each graph with the weight
# channels-last against C-contiguous (H100, 2026-11-27 15:24 UTC, scripts/cudnn_plan_probe.py nhwc,
# each plan behind an L2 flush; torch's whole call in brackets): 32x512x7x7 to 512 fprop 0.0202 ms
# against 0.0346 (0.0307), dgrad 0.0195 against 0.0353 (0.0314), wgrad 0.0210 against 0.0357
# (0.0210); 32x512x14x14 stride 2 fprop 0.0211 against 0.0352, dgrad 0.0263 against 0.0409, wgrad
# 0.0218 against 0.0354; 32x128x28x28 to 128 fprop 0.0214 against 0.0249, dgrad 0.0209 against
# 0.0235, wgrad 0.0305 against 0.0342.
def krsc_offered(layout: str, w_shape, dtype) -> bool:
    """Whether the channels-last weight path is offered: channels-last activations, a window of
    more than one tap (a 1x1 weight's two layouts are one memory) and a dtype cuDNN convolves."""
    from ._common import dtype_name
    return layout == "nhwc" and int(w_shape[2]) * int(w_shape[3]) > 1 and dtype_name(dtype) in _CONV_DTYPES


def is_krsc(w) -> bool:
    """w is a (K, C, R, S) view of (K, R, S, C) memory, a window of more than one tap (a
    channels-last weight, as torch's channels_last; a 1x1 weight's two layouts are one memory)."""
    from ..backends.conv_api import _weight_channels_last
    return _weight_channels_last(w)


def as_weight_layout(w, channels_last: bool = False):
    """The (K, C, R, S) weight or weight gradient w in channels-last memory (is_krsc) or
    C-contiguous: w itself where it already is, else a copy by kernels/transpose.py's permute.
    A weight on its way to cuDNN: the caller holds the copy until cuDNN's launch is queued (a copy
    freed before could give its memory to that launch's workspace)."""
    from .transpose import contiguous, to_channels_last
    if channels_last:
        return w if is_krsc(w) else to_channels_last(w)
    return contiguous(w)


def layout_of(*arrays) -> str | None:
    """"nhwc" when every array is an (N, C, H, W) view of channels-last memory by the test the
    checked conv2d call applies (backends/conv_api._channels_last, asked first: an (N, C, 1, 1)
    view is both), "nchw" when every one is C-contiguous, None for anything else (the caller
    copies). The dispatch plans ask the same, so a plan returns what the checked call returns."""
    from ..backends.conv_api import _channels_last
    if all(_channels_last(a) for a in arrays):
        return "nhwc"
    if all(a.flags.c_contiguous for a in arrays):
        return "nchw"
    return None


def _layout_desc(a, layout: str) -> tuple:
    """(dims, strides) of activation `a` in `layout`, canonical (strides of size-1 axes, which
    conv1d's (N, C, 1, L) views leave 0, as a packed array has them)."""
    return nchw_out_desc(a.shape, layout == "nhwc")


def conv_fprop(x, w, bias, geo, weight_cl: bool = False, relu: bool = False):
    """y (N, K, Ho, Wo) of conv2d for x (N, C, H, W), C-contiguous or a view of channels-last
    memory, w (K, C, R, S) C-contiguous or channels-last (is_krsc) and bias (K,) or None
    C-contiguous, one dtype: cuDNN's fprop, the bias
    added in the same graph; y in x's layout (no copies either way). Returns None when cuDNN
    declines the signature or x is laid out otherwise. weight_cl: the weight goes to cuDNN
    channels-last (the caller's candidate "cudnn-krsc", offered where krsc_offered), else
    C-contiguous, copied where it is not (as_weight_layout). relu: y = max(conv + bias, 0), a
    pointwise node of the same graph (conv2d's activation="relu"; where cuDNN has no fused engine for
    it, the graph declines). FLOPs: 2 N K Ho Wo C R S."""
    layout = layout_of(x)
    if layout is None or not aligned(x, w, bias) or not (w.flags.c_contiguous or is_krsc(w)):
        return None
    name = str(x.dtype)
    k = w.shape[0]
    y_shape = (x.shape[0], k, geo[8], geo[9])
    xd, wd, yd = _layout_desc(x, layout), nchw_out_desc(w.shape, weight_cl), nchw_out_desc(y_shape, layout == "nhwc")
    bd = None if bias is None else ((1, k, 1, 1), (k, 1, 1, 1))
    sig = fprop_sig(x.shape, w.shape, name, geo, bias is not None, x.data.device_id, layout, weight_cl, relu)

    def make(g, dt):
        io = g_io(dt, name)
        X, W = _tensor(g, "X", xd, io), _tensor(g, "W", wd, io)
        Y = g.conv_fprop(image=X, weight=W, compute_data_type=dt.FLOAT, name="fprop", **_conv_geometry(geo))
        ops = [X, W]
        if bd is not None:
            B = _tensor(g, "B", bd, io)
            Y = g.bias(input=Y, bias=B, name="bias")
            ops.append(B)
        if relu:
            Y = g.relu(input=Y, name="relu")
        _out(Y, yd, io)
        return ops + [Y]
    descs = [xd, wd] + ([bd] if bd is not None else []) + [yd]
    g = _graph(sig, name, make, _scratch(*((d, x.dtype) for d in descs)), exact=_exact(name))
    if g is None:
        return None
    y = new_nchw(y_shape, x.dtype, layout == "nhwc")
    wc = as_weight_layout(w, weight_cl)   # (held until cuDNN's launch: freed, its memory could be the workspace)
    g.run([x.data.ptr, wc.data.ptr] + ([bias.data.ptr] if bias is not None else []) + [y.data.ptr])
    return y


def _conv_backward(kind: str, a, b, out_shape, geo, sig, layout: str, weight_cl: bool = False):
    """The gradient (out_shape, a's dtype) of one cuDNN convolution backward pass: kind "dgrad"
    (a = dL/dy, b = w: dL/dx, in dL/dy's layout) or "wgrad" (a = x, b = dL/dy: dL/dw as cuDNN
    wrote it, channels-last where weight_cl); the activations in `layout` (layout_of), the weight
    as cuDNN reads it where weight_cl says (as_weight_layout). None when cuDNN declines the signature."""
    name = str(a.dtype)
    ad = _layout_desc(a, layout)
    bd = nchw_out_desc(b.shape, weight_cl) if kind == "dgrad" else _layout_desc(b, layout)   # dgrad's b: the weight
    out_cl = layout == "nhwc" if kind == "dgrad" else weight_cl
    od = nchw_out_desc(out_shape, out_cl)

    def make(g, dt):
        io = g_io(dt, name)
        if kind == "dgrad":
            A, B = _tensor(g, "DY", ad, io), _tensor(g, "W", bd, io)
            O = g.conv_dgrad(loss=A, filter=B, compute_data_type=dt.FLOAT, name="dgrad", **_conv_geometry(geo))
        else:
            A, B = _tensor(g, "X", ad, io), _tensor(g, "DY", bd, io)
            O = g.conv_wgrad(image=A, loss=B, compute_data_type=dt.FLOAT, name="wgrad", **_conv_geometry(geo))
        _out(O, od, io)
        return [A, B, O]
    g = _graph(sig, name, make, _scratch((ad, a.dtype), (bd, a.dtype), (od, a.dtype)), exact=_exact(name))
    if g is None:
        return None
    out = new_nchw(out_shape, a.dtype, out_cl)
    if kind == "dgrad":
        wc = as_weight_layout(b, weight_cl)   # (held until cuDNN's launch: freed, its memory could be the workspace)
        g.run([a.data.ptr, wc.data.ptr, out.data.ptr])
        return out
    g.run([a.data.ptr, b.data.ptr, out.data.ptr])
    return out


def conv_dgrad(grad_out, w, x_shape, geo, weight_cl: bool = False):
    """dL/dx (x_shape) of conv2d for grad_out (N, K, Ho, Wo), C-contiguous or a view of
    channels-last memory (dL/dx then too), and w (K, C, R, S), C-contiguous or channels-last:
    cuDNN's dgrad, or None when declined. weight_cl: as conv_fprop's. FLOPs: 2 N K Ho Wo C R S."""
    layout = layout_of(grad_out)
    if layout is None or not (w.flags.c_contiguous or is_krsc(w)) or not aligned(grad_out, w):
        return None
    x_shape = tuple(int(v) for v in x_shape)
    sig = dgrad_sig(grad_out.shape, w.shape, x_shape, str(w.dtype), geo, w.data.device_id, layout, weight_cl)
    return _conv_backward("dgrad", grad_out, w, x_shape, geo, sig, layout, weight_cl)


def conv_wgrad(grad_out, x, w_shape, geo, bias: bool, weight_cl: bool = False, out_cl: bool = False):
    """(dL/dw (w_shape), dL/db (K,) or None) of conv2d for grad_out (N, K, Ho, Wo) and x (N, C, H, W),
    both C-contiguous or both views of channels-last memory: cuDNN's wgrad (float32 accumulation,
    rounded once to x's dtype) and the bias gradient as a float32 sum of grad_out over (N, Ho, Wo)
    (reduction.channel_sum);
    None when cuDNN declines. weight_cl: dL/dw written channels-last (as conv_fprop's); out_cl:
    dL/dw returned channels-last (for a channels-last weight), else C-contiguous, copied where
    cuDNN wrote the other layout. FLOPs: 2 N K Ho Wo C R S."""
    layout = layout_of(grad_out, x)
    if layout is None or not aligned(grad_out, x):
        return None
    w_shape = tuple(int(v) for v in w_shape)
    sig = wgrad_sig(grad_out.shape, x.shape, w_shape, str(x.dtype), geo, x.data.device_id, layout, weight_cl)
    dw = _conv_backward("wgrad", x, grad_out, w_shape, geo, sig, layout, weight_cl)
    if dw is None:
        return None
    dw = as_weight_layout(dw, out_cl)
    return dw, (channel_sum(grad_out) if bias else None)


def g_io(dt, dtype_name: str):
    return getattr(dt, _DTYPES[dtype_name])


# ---- attention --------------------------------------------------------------------------------
# A tensor is described to cuDNN as (dims, strides) in its (B, H, S, D) order, in elements.
def bhld_desc(bh: int, length: int, d: int) -> tuple:
    """A C-contiguous [BH, L, D] array as cuDNN's (B=BH, H=1, S=L, D)."""
    return (bh, 1, length, d), (length * d, length * d, d, 1)


def blhd_desc(x) -> tuple:
    """A (B, L, H, D) array (any strides, the last 1) as cuDNN's (B, H, S, D)."""
    b, length, h, d = x.shape
    s = [st // x.itemsize for st in x.strides]
    return (b, h, length, d), (s[0], s[2], s[1], s[3])


def blhd_out_desc(shape) -> tuple:
    """blhd_desc of a new C-contiguous (B, L, H, D) array of `shape` (an output cuDNN writes)."""
    b, length, h, d = shape
    return (b, h, length, d), (length * h * d, d, h * d, 1)


def packed_grad_ok(q) -> bool:
    """Whether the thirds of a (B, L, 3, H, D) array like q's start 16-byte aligned (H*D*itemsize a
    multiple of 16), as cuDNN's descriptors of dQ, dK and dV need (packed_grads)."""
    return q.ndim == 4 and not (q.shape[2] * q.shape[3] * q.itemsize) % 16


def packed_grads(q, packed: bool):
    """With packed (attention_backward's qkv_packed) and a (B, L, H, D) q whose H*D row fits 16-byte
    alignment: (the new C-contiguous (B, L, 3, H, D) array, its three (B, L, H, D) thirds, their
    cuDNN descriptor), for cuDNN's backward to write dQ, dK and dV into in place; else None."""
    if not packed or not packed_grad_ok(q):
        return None
    b, length, h, d = q.shape
    buf = _cupy.cupy().empty((b, length, 3, h, d), q.dtype)
    thirds = (buf[:, :, 0], buf[:, :, 1], buf[:, :, 2])
    return buf, thirds, packed_grad_desc(q.shape)


def packed_grad_desc(shape) -> tuple:
    """blhd_desc of a third of a C-contiguous (B, L, 3, H, D) array (packed_grads)."""
    b, length, h, d = shape
    return (b, h, length, d), (length * 3 * h * d, d, 3 * h * d, 1)


def packed_base(dq, dk, dv):
    """The C-contiguous (B, L, 3, H, D) array whose thirds dq, dk, dv are (packed_grads), or None."""
    base = dq.base
    if base is None or base.ndim != 5 or not base.flags.c_contiguous or base.shape[2] != 3 \
            or base.shape[:2] + base.shape[3:] != dq.shape:
        return None
    step = base.strides[2]
    if any(x.base is not base or x.strides != dq.strides or x.data.ptr != base.data.ptr + i * step
           for i, x in enumerate((dq, dk, dv))):
        return None
    return base


def _sdpa_inputs(layout: str, q, k, v) -> tuple:
    """(q, k, v descriptors, B, H, Lq) of an attention pass's inputs in `layout` (see sdpa_forward)."""
    if layout == "bhld":
        bh, lq, d = q.shape
        lk = k.shape[1]
        return bhld_desc(bh, lq, d), bhld_desc(bh, lk, d), bhld_desc(bh, lk, d), bh, 1, lq
    descs = tuple(bhsd_desc(x) if layout == "bhsd" else blhd_desc(x) for x in (q, k, v))
    return (*descs, *descs[0][0][:3])


def bhsd_desc(x) -> tuple:
    """A C-contiguous (B, H, L, D) array (k and v may have fewer heads than q: grouped-query)."""
    return contiguous_desc(x.shape)


def _stats_desc(b: int, h: int, lq: int) -> tuple:
    return (b, h, lq, 1), (h * lq, lq, 1, 1)


def bias_ok(bias, dtype_name: str, lq: int, lk: int, grad: bool = True) -> bool:
    """Whether cuDNN's attention graphs may read this 4-D additive score bias (Masks.bias) in place
    and write its gradient: q's dtype, a row per query and a column per key (cuDNN broadcasts a
    bias over batch and heads only: (1, H, Lq, Lk) for ALiBi or a relative-position bias,
    (B, 1, Lq, Lk), (1, 1, Lq, Lk), (B, H, Lq, Lk)), keys contiguous, the other strides and the
    address 16-byte aligned (how the graphs load it). (The frontend's own tests give a bias of
    (1, H, Lq, Lk) a gradient, and none at head dim 256: a shape the graph does not build declines.)
    grad=False (a forward): a bias broadcast over the query rows too (a padding bias (B, 1, 1, Lk)),
    described with a zero row stride (bias_desc); its gradient (rows summed) is the Triton kernels'."""
    rows_ok = bias.shape[2] == lq if grad else bias.shape[2] in (1, lq)
    if str(bias.dtype) != dtype_name or bias.ndim != 4 or not rows_ok or bias.shape[3] != lk or not bias.size:
        return False
    if lk > 1 and bias.strides[3] != bias.itemsize:
        return False
    return not bias.data.ptr % 16 and all(s > 0 and s % 16 == 0 for n, s in zip(bias.shape[:3], bias.strides[:3])
                                          if n > 1)   # (a stride-0 view of a broadcast: the Triton kernels)


def bias_desc(bias, lq: int) -> tuple:
    """(dims, strides) of a bias that bias_ok takes, read in place: its element strides, a
    C-contiguous array's on its size-1 dims (any stride serves there); a bias of one row for Lq
    query rows as Lq rows of stride 0 (cuDNN broadcasts batch and heads, not rows)."""
    dims, packed = contiguous_desc(bias.shape)
    st = tuple(n // bias.itemsize for n in bias.strides)
    strides = tuple(c if d == 1 else x for d, x, c in zip(dims, st, packed))
    if dims[2] == 1 and lq > 1:
        return dims[:2] + (int(lq),) + dims[3:], strides[:2] + (0,) + strides[3:]
    return dims, strides


def sdpa_sig(kind: str, descs: tuple, dtype_name: str, scale: float, causal: bool, device: int) -> tuple:
    """The graph signature of an attention pass: kind "sdpa_fwd" / "sdpa_bwd", the (dims, strides)
    of its q, k, v and outputs (forward) or q, k, v, o, dO and outputs (backward)."""
    return (kind, descs, dtype_name, float(scale), bool(causal), device)


def _tensor(g, name: str, desc, dtype, by_value: bool = False):
    """A graph tensor of (dims, strides) desc; by_value: read from host memory at execution."""
    kw = {"is_pass_by_value": True} if by_value else {}
    return g.tensor(name=name, dim=list(desc[0]), stride=list(desc[1]), data_type=dtype, **kw)


def _out(t, desc, dtype):
    t.set_output(True).set_dim(list(desc[0])).set_stride(list(desc[1])).set_data_type(dtype)


def _causal_kw(causal: bool, q, k, layout: str) -> dict:
    """The sdpa graph's causal mask, aligned bottom-right as cudakit's (backends/attention_masks.py):
    the frontend's top-left use_causal_mask where Lq == Lk (the same mask), its bottom-right one
    otherwise."""
    if not causal:
        return {}
    axis = 1 if layout == "blhd" else -2
    return {"use_causal_mask": True} if q.shape[axis] == k.shape[axis] else {"use_causal_mask_bottom_right": True}


def _dropout_tensors(g, dt, dropout):
    """The graph's dropout: (the sdpa node's `dropout` argument, [Seed, Offset] operands) for
    dropout = (p, seed), or (None, []) without: Seed and Offset int64 [1, 1, 1, 1] tensors passed
    by value (cuDNN reads them from host memory when the graph is executed: dropout_operands), p a
    graph attribute (part of the signature)."""
    if dropout is None:
        return None, []
    one = ((1, 1, 1, 1), (1, 1, 1, 1))
    seed, offset = (_tensor(g, n, one, dt.INT64, by_value=True) for n in ("Seed", "Offset"))
    return (float(dropout[0]), seed, offset), [seed, offset]


_WORDS = ctypes.c_int64 * 2


def dropout_operands(seed: int) -> tuple:
    """(words, [the Seed pointer, the Offset pointer]) of a dropout graph's call: words a host
    int64 [2] (ctypes) array, the seed's 64 bits as an int64 and Philox offset 0, which the caller
    keeps alive until the graph's execution has returned. cuDNN copies values passed by value into
    the launch itself, so nothing is written on the device and the words may be freed or reused
    right after (under CUDA graph capture the values are the captured launch's). Before 2026-11-28
    the words were device memory written by a launch each call: 19.07 us of a 48.80 us planned
    forward (H100 host, 03:10 UTC, history/host-time/nvidia-h100-80gb-hbm3-host-attention-dropout-parts.json);
    by value the planned forward takes 19.20 us against 34.63 with the launch (H200 host, 22:53 and
    23:00 UTC, benchmarks/sweeps/attention_dropout_host.py,
    history/host-time/nvidia-h200-host-attention-dropout-words.json and -by-value.json)."""
    w = _WORDS(int(seed), 0)   # (ctypes keeps a seed's low 64 bits: 2^63 and above as negative int64s)
    p = ctypes.addressof(w)
    return w, [p, p + 8]


def dropout_sig(kind: str, descs: tuple, dtype_name: str, scale: float, causal: bool, device: int, p: float,
                deterministic: bool = False, rng_dump: bool = False) -> tuple:
    """sdpa_sig of an attention pass with dropout p (a graph attribute): kind "fwd" or "bwd";
    deterministic (the backward's algorithm), rng_dump (the forward writing its keep mask) in it."""
    name = ("sdpa_fwd_rng_dump" if rng_dump else "sdpa_fwd_dropout") if kind == "fwd" else \
        "sdpa_bwd_dropout" + ("_deterministic" if deterministic else "")
    return sdpa_sig(name, descs + (("p", float(p)),), dtype_name, scale, causal, device)


def bias_sig(kind: str, descs: tuple, bd: tuple, dtype_name: str, scale: float, causal: bool, device: int) -> tuple:
    """sdpa_sig of an attention pass with an additive score bias of (dims, strides) bd: kind "fwd",
    "fwd_inf" (the inference graph) or "bwd" (its gradient written too)."""
    return sdpa_sig(f"sdpa_{kind}_bias", descs + (bd,), dtype_name, scale, causal, device)


def sdpa_forward(q, k, v, scale: float, causal: bool, layout: str = "bhld", inference: bool = False,
                 dropout=None, rng_dump=None, bias=None):
    """(out, lse) of softmax(q k^T * scale) v for 16-bit q, k, v: cuDNN's flash forward, or None when
    declined. layout "bhld": C-contiguous [BH, L, D] arrays, out like q, lse [BH, Lq]; "bhsd":
    C-contiguous (B, H, L, D) q and (B, Hkv, L, D) k, v with Hkv dividing H (grouped-query: cuDNN
    reads each k and v head for its group of q heads), out like q, lse (B, H, Lq); "blhd":
    (B, L, H, D) arrays of any strides with the last 1 (views of a packed qkv read in place), out a
    C-contiguous (B, Lq, H, D), lse (B, H, Lq). lse: float32, the natural-log log-sum-exp of the
    scaled scores. inference=True: cuDNN's inference graph, which writes no statistics (lse None;
    what torch's SDPA runs for inputs that need no gradient). FLOPs: 4 B H Lq Lk D (half causal).
    dropout = (p, seed): cuDNN's fused dropout on the probabilities (kept with probability 1 - p,
    scaled by 1 / (1 - p)), its mask cuDNN's Philox stream under the seed (offset 0), which
    sdpa_backward regenerates from the same (p, seed); always the training graph (lse written).
    rng_dump: with dropout, a float32 array of the scores' shape (B, H, Lq, Lk), C-contiguous, that
    cuDNN writes the keep mask into (1 kept, 0 dropped: tests). bias: an additive score bias
    (B or 1, H or 1, Lq, Lk) of q's dtype that bias_ok takes, read in place ("bhsd" layout)."""
    if not aligned(q, k, v):
        return None
    cp = _cupy.cupy()
    name = str(q.dtype)
    qd, kd, vd, b, h, lq = _sdpa_inputs(layout, q, k, v)
    out = cp.empty(q.shape, q.dtype)   # C-contiguous in every layout
    od = blhd_out_desc(q.shape) if layout == "blhd" else qd
    sd = _stats_desc(b, h, lq)
    inference = bool(inference) and dropout is None
    descs, rd, dev = (qd, kd, vd, od), None, q.data.device_id
    bd = None if bias is None else bias_desc(bias, lq)
    if bias is not None:
        sig = bias_sig("fwd_inf" if inference else "fwd", descs, bd, name, scale, causal, dev)
    elif dropout is None:
        sig = sdpa_sig("sdpa_fwd_inf" if inference else "sdpa_fwd", descs, name, scale, causal, dev)
    else:
        rd = contiguous_desc((b, h, lq, kd[0][2]))
        sig = dropout_sig("fwd", descs, name, scale, causal, dev, dropout[0], rng_dump=rng_dump is not None)

    def make(g, dt):
        io = g_io(dt, name)
        Q, K, V = _tensor(g, "Q", qd, io), _tensor(g, "K", kd, io), _tensor(g, "V", vd, io)
        drop, drop_ops = _dropout_tensors(g, dt, dropout)
        extra = {}
        if bias is not None:
            extra["bias"] = _tensor(g, "Bias", bd, io)
            drop_ops = [extra["bias"]] + drop_ops
        if drop is not None:
            extra["dropout"] = drop
            if rng_dump is not None:
                R = _tensor(g, "RngDump", rd, dt.FLOAT)
                extra["rng_dump"] = R
                drop_ops = drop_ops + [R]
        O, S = g.sdpa(name="sdpa", q=Q, k=K, v=V, is_inference=inference, attn_scale=float(scale),
                      **_causal_kw(causal, q, k, layout), **extra)
        _out(O, od, io)
        if inference:
            return [Q, K, V, *drop_ops, O]   # (the bias, where there is one: no dropout in inference)
        _out(S, sd, dt.FLOAT)
        return [Q, K, V, *drop_ops, O, S]
    drop_specs = [] if dropout is None else [_BY_VALUE] * 2 + ([(rd, cp.float32)] if rng_dump is not None else [])
    bias_specs = [] if bias is None else [(bd, q.dtype)]
    specs = [(qd, q.dtype), (kd, q.dtype), (vd, q.dtype), *bias_specs, *drop_specs, (od, q.dtype)] + (
        [] if inference else [(sd, cp.float32)])
    g = _graph(sig, name, make, _scratch(*specs))
    if g is None:
        return None
    bias_ptrs = [] if bias is None else [bias.data.ptr]
    if inference:
        g.run([q.data.ptr, k.data.ptr, v.data.ptr, *bias_ptrs, out.data.ptr])
        return out, None
    lse = cp.empty((b, lq) if layout == "bhld" else (b, h, lq), cp.float32)
    # (words held until the graph has run)
    words, drop_ptrs = (None, []) if dropout is None else dropout_operands(int(dropout[1]))
    if rng_dump is not None:
        drop_ptrs.append(rng_dump.data.ptr)
    g.run([q.data.ptr, k.data.ptr, v.data.ptr, *bias_ptrs, *drop_ptrs, out.data.ptr, lse.data.ptr])
    return out, lse


def sdpa_backward(do, q, k, v, out, lse, scale: float, causal: bool, layout: str = "bhld", dropout=None,
                  deterministic: bool = False, bias=None, packed: bool = False):
    """(dq, dk, dv) of sdpa_forward for dL/dout = do (out's layout), from its out and lse (float32,
    C-contiguous): cuDNN's flash backward, or None when declined. Gradients like q, k, v with
    layout "bhld", C-contiguous (B, L, H, D) with "blhd". FLOPs: 10 B H Lq Lk D (half causal).
    dropout = (p, seed): the forward's, its mask regenerated; deterministic (with dropout only:
    cudakit's kernels take the other deterministic calls): cuDNN's deterministic algorithm.
    bias: the forward's (sdpa_forward); its gradient (dL/d scores summed over the dims the bias
    broadcasts, C-contiguous, the bias's shape and dtype) comes back as a fourth. packed (layout
    "blhd", q, k, v of one shape): dq, dk, dv written as the thirds of one new (B, L, 3, H, D) array
    (packed_grads; packed_base finds it)."""
    if not aligned(do, q, k, v, out, lse):
        return None
    cp = _cupy.cupy()
    name = str(q.dtype)
    qd, kd, vd, b, h, lq = _sdpa_inputs(layout, q, k, v)
    pk = packed_grads(q, packed) if layout == "blhd" else None
    if layout == "blhd":
        od, dod = blhd_desc(out), blhd_desc(do)
        dqd, dkd, dvd = (pk[2],) * 3 if pk is not None else (blhd_out_desc(x.shape) for x in (q, k, v))
    else:   # q, k, v, out and do C-contiguous: the gradients take their descriptors
        od = dod = dqd = qd
        dkd, dvd = kd, vd
    # C-contiguous in every layout, or the thirds of one packed array
    dq, dk, dv = pk[1] if pk is not None else (cp.empty(x.shape, x.dtype) for x in (q, k, v))
    sd = _stats_desc(b, h, lq)
    descs, dev = (qd, kd, vd, od, dod, dqd, dkd, dvd), q.data.device_id
    bd = dbd = None
    if bias is not None:
        bd, dbd = bias_desc(bias, lq), contiguous_desc(bias.shape)
        sig = bias_sig("bwd", descs, bd, name, scale, causal, dev)
    elif dropout is None:
        sig = sdpa_sig("sdpa_bwd", descs, name, scale, causal, dev)
    else:
        sig = dropout_sig("bwd", descs, name, scale, causal, dev, dropout[0], deterministic)

    def make(g, dt):
        io = g_io(dt, name)
        Q, K, V = _tensor(g, "Q", qd, io), _tensor(g, "K", kd, io), _tensor(g, "V", vd, io)
        O, DO = _tensor(g, "O", od, io), _tensor(g, "dO", dod, io)
        S = _tensor(g, "Stats", sd, dt.FLOAT)
        drop, drop_ops = _dropout_tensors(g, dt, dropout)
        extra = {} if drop is None else {"dropout": drop}
        if dropout is not None and deterministic:
            extra["use_deterministic_algorithm"] = True
        grads = []
        if bias is not None:   # (dBias: a tensor the node writes, described up front as the frontend's tests do)
            extra["bias"], extra["dBias"] = _tensor(g, "Bias", bd, io), _tensor(g, "dBias", dbd, io)
            drop_ops, grads = [extra["bias"]] + drop_ops, [extra["dBias"]]
        DQ, DK, DV = g.sdpa_backward(name="sdpa_backward", q=Q, k=K, v=V, o=O, dO=DO, stats=S,
                                     attn_scale=float(scale), **_causal_kw(causal, q, k, layout), **extra)
        _out(DQ, dqd, io)
        _out(DK, dkd, io)
        _out(DV, dvd, io)
        return [Q, K, V, O, DO, S, *drop_ops, DQ, DK, DV, *grads]
    t = q.dtype
    drop_specs = [] if dropout is None else [_BY_VALUE] * 2
    bias_specs = [] if bias is None else [(bd, t)]
    g = _graph(sig, name, make, _scratch(*((x, t) for x in (qd, kd, vd, od, dod)), (sd, cp.float32), *bias_specs,
                                         *drop_specs, *((x, t) for x in (dqd, dkd, dvd)),
                                         *([] if bias is None else [(dbd, t)])))
    if g is None:
        return None
    # (words held until the graph has run)
    words, drop_ptrs = (None, []) if dropout is None else dropout_operands(int(dropout[1]))
    db = None if bias is None else cp.empty(bias.shape, bias.dtype)
    bias_in, bias_out = ([], []) if bias is None else ([bias.data.ptr], [db.data.ptr])
    g.run([q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, do.data.ptr, lse.data.ptr, *bias_in, *drop_ptrs,
           dq.data.ptr, dk.data.ptr, dv.data.ptr, *bias_out])
    return (dq, dk, dv) if bias is None else (dq, dk, dv, db)


def _extent(desc) -> tuple:
    """The 1-D length of a buffer that holds a strided (dims, strides) tensor, for timing scratch."""
    dims, strides = desc
    return (1 + sum((n - 1) * st for n, st in zip(dims, strides)),)


def declined() -> dict:
    """{signature: why} of the signatures cuDNN declined in this process (cudakit info)."""
    return {repr(k): v for k, v in _graphs.items() if isinstance(v, str)}
