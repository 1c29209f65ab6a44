"""CUDA graph capture and replay of whole steps: `cudakit.graph(fn, *args)` and `CUDAGraph`.

Why: a training step of a small model is bound by host time (each op's Python, checks and launch
call); a graph records the step's launches once and replays them with one driver call, so the host
cost of a step no longer grows with its number of ops. Same shapes as PyTorch's `torch.cuda.graphs`:

    g = cudakit.graph(step, x, y)      # warm-up calls, then one captured call of step(x, y)
    loss = g(x_new, y_new)             # copies into the static inputs, replays, returns the
                                       # static outputs (overwritten by the next replay)

or, lower level,

    cg = cudakit.CUDAGraph()
    with cg.capture():                 # on the graph's side stream, from its private pool
        out = step(static_x, static_y)
    static_x[...] = x_new; cg.replay()

How it works:
- Capture runs on a side stream (CuPy's `Stream.begin_capture`, cudaStreamCaptureModeRelaxed by
  default: the graph's pool may take a new block from the driver while capturing, which global
  mode refuses (seen on an H100, 2026-11-26: a cuBLASLt workspace of a shape first met during
  capture). Synchronising calls are still caught: cudakit's own raise GraphCaptureError, CuPy
  refuses copies between host and device, and CUDA refuses to synchronise a capturing stream.
- Every allocation made while capturing (and during `graph()`'s warm-up calls) comes from the
  graph's private CuPy memory pool, so a replay writes to the same addresses as the capture and no
  array outside the graph is ever handed those blocks. Warm-up populates the pool, so capture
  itself allocates nothing from the driver. `cudakit.memory.stats()` reports the bytes held by
  live graphs' pools as `graph_reserved`. Deleting the graph frees its pool once its outputs die.
- What a step captures is fixed: shapes, dtypes, addresses, and Python scalars passed to kernels
  (dropout seeds, learning rates) are baked in. Exceptions that cudakit handles: the optimizers
  (SGD, Adam, AdamW) read their per-step scalars (bias corrections, lr) from device memory under
  capture and refresh them before each replay (`on_replay`), so a replayed step equals an eager
  step bit for bit, and their step count advances by one per replay.
- A cudakit call that would synchronise the host while capturing (check(), synchronize(),
  to_host(), cross_entropy(validate=True), ...) raises GraphCaptureError naming the op; the
  capture is abandoned and nothing is replayed. cuBLAS work goes through cuBLASLt
  (kernels/cublaslt.py), Triton and NVRTC kernels through cuLaunchKernel: all capturable.
- Profiling a graphed step: `cudakit.profile()` records launches made while capturing as usual
  but not the replays (a replay is one graph launch); time replays with CUDA events, or profile
  the eager step; Nsight Systems shows the replayed kernels individually (`nsys --cuda-graph-trace=node`).
"""
from __future__ import annotations

import threading
import traceback
import weakref

from .errors import ArgumentError, ArgumentTypeError, CudakitError, ShapeError

_local = threading.local()   # .capture: the CUDAGraph capturing on this thread, or None
_live: dict[int, weakref.WeakSet] = {}   # device -> live CUDAGraphs (their pools in memory stats)


class GraphCaptureError(CudakitError, RuntimeError):
    """A capture failed or was refused: names the op that would have synchronised, or says what
    went wrong. Nothing captured is replayed."""


def capturing():
    """The CUDAGraph capturing on this thread, or None (cheap: ops and optimizers ask)."""
    return getattr(_local, "capture", None)


def check_not_capturing(what: str) -> None:
    """Raise GraphCaptureError if this thread is capturing: `what` would synchronise the host."""
    if getattr(_local, "capture", None) is not None:
        op = _calling_op()
        raise GraphCaptureError(
            f"{op + ': ' if op else ''}{what} synchronises the host, which cannot happen while a CUDA graph is "
            f"being captured; move it out of the captured function (or use the default validate=False "
            f"of cross_entropy, whose errors surface at the next cudakit.check())")


def on_replay(fn, key=None, first: bool = False) -> None:
    """Register fn() to run on the host before each replay of the graph being captured on this
    thread (the optimizers refresh their per-step scalars this way). Raises if none is. key: a
    hashable; a second registration under the same key is ignored (once per graph, say per
    process group). first: ahead of the hooks registered so far (a check that may refuse the
    replay runs before hooks that count it)."""
    _register(fn, key, "_hooks", "on_replay", first)


def after_replay(fn, key=None) -> None:
    """Register fn(stream) to run on the host right after each replay of the graph being captured
    on this thread has been launched on `stream` (cudakit.distributed has the watchdog track the
    replay of captured collectives this way). key as on_replay's."""
    _register(fn, key, "_after", "after_replay")


def _register(fn, key, where: str, name: str, first: bool = False) -> None:
    g = capturing()
    if g is None:
        raise GraphCaptureError(f"{name}() needs a capture in progress on this thread")
    if key is not None:
        if (where, key) in g._keys:
            return
        g._keys.add((where, key))
    hooks = getattr(g, where)
    hooks.insert(0, fn) if first else hooks.append(fn)


def _calling_op(tb=None) -> str | None:
    """The cudakit op (a function of cudakit.ops, or a Backend method) in the current stack or in
    traceback tb, outermost first: the op a user called."""
    frames = traceback.extract_tb(tb) if tb is not None else traceback.extract_stack()
    for fr in frames:
        fn = fr.filename.replace("\\", "/")
        ours = fn.endswith(("/cudakit/ops.py", "/cudakit/optim.py")) or "/cudakit/backends/" in fn
        if ours and not fr.name.startswith("_"):
            return fr.name
    return None


def graph_reserved(device: int) -> int:
    """Bytes held from the driver by the private pools of live graphs on `device`."""
    return sum(g.pool.total_bytes() for g in list(_live.get(device, ())))


class CUDAGraph:
    """One captured CUDA graph with its own memory pool and side stream.

    capture() is a context manager: the work queued inside it on the current CuPy stream (the
    graph's side stream, made current there) is recorded, not run. replay(stream=None) launches it
    on `stream` (default: the current stream), ordered after the work already queued there.
    mode: "relaxed" (default), "thread_local" or "global", CUDA's capture modes.
    """

    _MODES = {"global": 0, "thread_local": 1, "relaxed": 2}

    def __init__(self, mode: str = "relaxed"):
        if mode not in self._MODES:
            raise ArgumentError(f"mode must be one of {', '.join(self._MODES)} (got {mode!r})")
        from .runtime import _cupy, memory
        cp = _cupy.cupy()
        memory.ensure_installed()
        self._cp = cp
        self.mode = mode
        self.device = cp.cuda.runtime.getDevice()
        self.pool = cp.cuda.MemoryPool()
        self.stream = cp.cuda.Stream(non_blocking=True)
        self._graph = None
        self._released: str | None = None   # why release() freed the graph
        self._release_error: Exception | None = None   # what replay() raises then (a group's failure)
        self._hooks: list = []   # fn() before each replay (on_replay)
        self._after: list = []   # fn(stream) after each replay's launch (after_replay)
        self._keys: set = set()
        _live.setdefault(self.device, weakref.WeakSet()).add(self)

    def allocating(self):
        """A context manager: allocations inside come from this graph's private pool, and work goes
        to its side stream (for warm-up calls before capture())."""
        return _Scope(self, capture=False)

    def capture(self):
        """A context manager recording the work queued inside it (see the class docstring)."""
        if self._graph is not None:
            raise GraphCaptureError("this CUDAGraph was already captured; make a new one")
        return _Scope(self, capture=True)

    @property
    def captured(self) -> bool:
        return self._graph is not None

    def release(self, reason: str, error: Exception | None = None) -> None:
        """Free the captured graph now (its CUDA graph and executable, and with them what the
        captured work holds: NCCL keeps a communicator alive, and its destruction waiting, until
        every graph with its collectives is gone); replay() raises `error`, or GraphCaptureError
        naming `reason`, from then on. cudakit.distributed calls it when a process group whose
        collectives the graph holds is destroyed (`error` None) or fails (its DistributedError)."""
        if self._released is None:   # the first reason (and error) stays
            self._released, self._release_error = reason, error
        self._graph = None

    def _refuse(self):
        """The exception replay() raises for a graph that was never captured or was released."""
        if self._release_error is not None:   # a copy: raising the group's own error again would
            import copy                       # chain its tracebacks (and their frames) to it
            return copy.copy(self._release_error).with_traceback(None)
        return GraphCaptureError(f"this graph was released: {self._released}" if self._released
                                 else "replay() before a successful capture()")

    def replay(self, stream=None) -> None:
        """Run the captured work once on `stream` (default: the current CuPy stream)."""
        if self._graph is None:
            raise self._refuse()
        cp = self._cp
        s = stream if stream is not None else cp.cuda.get_current_stream()
        with cp.cuda.Device(self.device), s:
            for hook in self._hooks:   # first: a hook may fail a process group, which releases this graph
                hook()
            graph = self._graph   # read after the hooks, dropped at once: a reference held here
            if graph is None:     # would keep alive a graph that an NCCL abort waits for
                raise self._refuse()
            graph.launch(s)
            del graph
            for hook in self._after:
                hook(s)


class _Scope:
    def __init__(self, g: CUDAGraph, capture: bool):
        self.g, self.capture = g, capture

    def __enter__(self):
        g, cp = self.g, self.g._cp
        from .runtime import device_errors
        self._dev = cp.cuda.Device(g.device)
        self._dev.__enter__()
        device_errors.flag(g.device)   # made outside the graph's pool, before any capture
        # order the side stream after what the caller queued (inputs written before the capture)
        g.stream.wait_event(cp.cuda.get_current_stream().record())
        self._alloc = cp.cuda.using_allocator(g.pool.malloc)
        self._alloc.__enter__()
        g.stream.__enter__()
        if self.capture:
            if getattr(_local, "capture", None) is not None:
                self._exit_plain()
                raise GraphCaptureError("a capture is already in progress on this thread")
            g._hooks, g._after, g._keys = [], [], set()
            g.stream.begin_capture(CUDAGraph._MODES[g.mode])
            _local.capture = g
        return g

    def _exit_plain(self):
        g = self.g
        g.stream.__exit__(None, None, None)
        self._alloc.__exit__(None, None, None)
        self._dev.__exit__(None, None, None)

    def __exit__(self, et, ev, tb):
        g, cp = self.g, self.g._cp
        try:
            if self.capture:
                _local.capture = None
                try:
                    graph = g.stream.end_capture()
                except Exception as e:   # the capture was invalidated (a synchronising call)
                    if et is None:
                        raise GraphCaptureError(f"the capture failed: {e}") from e
                if et is None and g._released is None:   # (released while capturing: dropped)
                    g._graph = graph
                    if hasattr(graph, "upload"):   # instantiate now, not at the first replay
                        graph.upload(g.stream)
                elif not issubclass(et, GraphCaptureError) and _is_capture_error(ev):
                    op = _calling_op(tb)
                    raise GraphCaptureError(
                        f"{op + ': ' if op else ''}a call made while capturing is not capturable "
                        f"(it synchronises, or uses an API CUDA refuses during capture): {ev}") from ev
        finally:
            self._exit_plain()
            # the caller's stream waits for the side stream (warm-up results, captured-graph upload)
            cp.cuda.get_current_stream().wait_event(g.stream.record())
        return False


def _is_capture_error(e) -> bool:
    """Whether e is CUDA's or CuPy's refusal of a call during capture ("...StreamCapture...",
    "...when stream is capturing", "...capturing, so D2H transfers are disallowed")."""
    return "captur" in str(e).lower()


class GraphedStep:
    """A captured call of fn with static inputs and outputs (made by cudakit.graph()).

    g(*args) copies each array of args into the matching static input (same shape and dtype;
    ShapeError otherwise, naming the argument), replays the graph and returns the static outputs,
    which the next replay overwrites (copy what you keep). Non-array arguments must equal the
    captured ones. g.replay() replays without copying; g.static_inputs / g.static_outputs are the
    buffers themselves (write a new batch into them in place, e.g. `cupy.copyto`).
    """

    def __init__(self, cuda_graph: CUDAGraph, static_inputs: tuple, static_outputs):
        self.cuda_graph = cuda_graph
        self.static_inputs = static_inputs
        self.static_outputs = static_outputs

    def __call__(self, *args):
        cp = self.cuda_graph._cp
        if len(args) != len(self.static_inputs):
            raise ArgumentTypeError(f"the graphed step takes {len(self.static_inputs)} arguments (got {len(args)})")
        for i, (a, s) in enumerate(zip(args, self.static_inputs)):
            if isinstance(s, cp.ndarray):
                a = _as_cupy(cp, a, i)
                if a.shape != s.shape or a.dtype != s.dtype:
                    raise ShapeError(f"graphed step: argument {i} must have the captured shape {s.shape} and "
                                     f"dtype {s.dtype} (got {a.shape}, {a.dtype}); capture another graph for "
                                     f"new shapes")
                if a is not s:
                    cp.copyto(s, a)
            elif not _same_value(a, s):
                raise ArgumentError(f"graphed step: argument {i} was captured as {s!r} (got {a!r}); non-array "
                                 f"arguments are baked into the graph")
        self.cuda_graph.replay()
        return self.static_outputs

    def replay(self) -> None:
        """Replay with whatever the static inputs hold now."""
        self.cuda_graph.replay()


def _as_cupy(cp, a, i: int):
    if isinstance(a, cp.ndarray):
        return a
    if hasattr(a, "__cuda_array_interface__") or hasattr(a, "__dlpack__"):
        return cp.asarray(a)
    raise ArgumentTypeError(f"graphed step: argument {i} must be a CUDA array (got {type(a).__name__}); copy host "
                    f"data to the device first (cudakit.to_device)")


def _same_value(a, b) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:   # noqa: BLE001 - objects without a boolean equality: identity only
        return a is b


def graph(fn, *sample_args, warmup: int = 2, mode: str = "relaxed") -> GraphedStep:
    """Capture fn(*static_args) as a CUDA graph and return a GraphedStep replaying it.

    sample_args: CuPy arrays (copied into new static input buffers, from which each replay reads)
    and other values (baked in). fn is first called `warmup` times (>= 0) for real on the graph's
    side stream and pool (compiling kernels, making plans and filling the pool, as torch's
    whole-network capture does: a training step's warm-up calls are real steps), then once under
    capture. warmup=0 suits an fn with side effects (a whole training step with its optimizer
    update) that has already run eagerly once, so its kernels and plans exist: the capture then
    takes its memory from the graph's pool as it goes, and the first replay is fn's next real run. fn's return value (arrays, or tuples / lists / dicts of them) becomes the static
    outputs. Needs the CUDA backend (BackendUnavailableError otherwise).
    """
    if not callable(fn):
        raise ArgumentTypeError(f"graph: fn must be callable (got {type(fn).__name__})")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ArgumentError(f"graph: warmup must be an int >= 0 (got {warmup!r})")
    from .runtime import _cupy
    from .runtime.device import is_available, unavailable_reason
    if not is_available():
        from .errors import BackendUnavailableError
        raise BackendUnavailableError(f"cudakit.graph needs a usable CUDA GPU: {unavailable_reason()}")
    cp = _cupy.cupy()
    statics = []
    for i, a in enumerate(sample_args):
        if isinstance(a, cp.ndarray) or hasattr(a, "__cuda_array_interface__"):
            a = _as_cupy(cp, a, i)
            s = cp.empty_like(a)
            cp.copyto(s, a)
            statics.append(s)
        elif type(a).__module__ == "numpy" and hasattr(a, "shape") and getattr(a, "ndim", 0) > 0:
            raise ArgumentTypeError(f"graph: argument {i} is a NumPy array; pass CUDA arrays (cudakit.to_device)")
        else:
            statics.append(a)
    statics = tuple(statics)
    cg = CUDAGraph(mode)
    with cg.allocating():
        for _ in range(warmup):
            fn(*statics)
    cg.stream.synchronize()
    with cg.capture():
        out = fn(*statics)
    return GraphedStep(cg, statics, out)
