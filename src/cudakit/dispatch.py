"""One call path: the checks and launch plan of a call are worked out once per call signature,
then replayed.

`call(op, planner, args, checked)` is how ops.py runs an op whose family has a planner:

1. signature(args): per argument, for a CuPy array its shape, strides, dtype, device and address
   modulo 256 (the alignment cuBLASLt and the vector kernels pick code by); None, bools, ints,
   floats and strings by type and value; tuples of those as they are. Any other argument (NumPy
   arrays, foreign CUDA arrays, lists, 0-d CuPy arrays standing for scalars) gives no signature:
   the checked path runs.
2. The first call with a signature runs `checked(*args)`: every argument check, so bad input gets
   the same typed error as without plans. When it returns, `planner(*args)` is asked for a plan:
   a function computing exactly what `checked` computed (the same kernels, GEMM algorithms and
   rounding) for any arguments with this signature, or None (this signature keeps the checked
   path, e.g. a layout the planner does not cover).
3. Later calls with the signature run the plan: allocation and launches, no checks. ops.py
   first asks plan_call (runtime/_native.c), which finds and runs the plan of a signature with no
   Python frame in between while the native fast paths are open (no profile, asynchronous
   launches), and comes here otherwise. plan_call checks an inline cache first: arguments equal
   to a recent call's field for field (array dtype, shape, strides, address % 256, device;
   scalar type and value) take that call's plan without the signature being built; clear()
   empties it with the table.

Where the native module is built, the signature is computed in C (runtime/_native.c
call_signature, the same keys) and most plans are native Replays (kernels/trace_plans.py,
kernels/gemm_plans.py): one C call allocates, launches and builds the outputs. An int argument
named in DYNAMIC (dropout's seed) enters the signature as PER_CALL: its plan takes the value on
each call.

Plans are kept per (op, signature), at most MAX_PLANS (then the cache is cleared). They decline
while the profiler records or CUDAKIT_LAUNCH_BLOCKING is on (kernels/_planned.ready()), whose
semantics live in the checked path, and on another current device than the arrays'. The
planned calls of softmax, layernorm/rmsnorm and sum/mean/max/min (kernels/_planned.py) predate
this module and use the same rules with family-specific keys.
"""
from __future__ import annotations

import sys

_MISSING = object()
MAX_PLANS = 4096
_plans: dict = {}
_nd = None          # cupy.ndarray once the CUDA backend is up (set by ops.backend_for)
_get_device = None  # cupy.cuda.runtime.getDevice
_SCALARS = (type(None), bool, int, float, str)
_signature = None   # signature, or its native twin (runtime/_native.c call_signature), once enabled
MISS = object()     # what plan_call returns when no plan runs
plan_call = None    # runtime/_native.c plan_call, once enabled: a signature's plan run with no Python frame
_plans_changed = None   # runtime/_native.c plans_changed: plan_call's inline cache forgets the emptied table




def enable(ndarray, get_device) -> None:
    """Turn plans on for arrays of type `ndarray` (called when the CUDA backend comes up), unless
    CUDAKIT_DISPATCH_PLANS=0."""
    global _nd, _get_device, _signature
    from .config import settings
    if settings().dispatch_plans:
        _nd, _get_device = ndarray, get_device
        from .runtime import native
        mod = native.fast_paths()   # the native module's call_signature: the same keys, a fifth of the time
        _signature = getattr(mod, "call_signature", None) or signature
        global plan_call, _plans_changed
        if hasattr(mod, "plan_call"):
            mod.dispatch_setup(MISS)
            plan_call, _plans_changed = mod.plan_call, mod.plans_changed


def signature(args: tuple):
    """The hashable signature of args (see the module docstring), or None."""
    nd = _nd
    sig = []
    dev = -1
    for a in args:
        t = type(a)
        if t is nd:
            if not a.ndim:   # a 0-d array stands for a scalar (a scale, a momentum): its value is not in
                return None  # the signature, so a plan would freeze the first call's value
            d = a.data
            if dev < 0:
                dev = d.device_id
            elif d.device_id != dev:
                return None
            sig.append((a.shape, a.strides, a.dtype.num, d.ptr & 255))
        elif t in _SCALARS:
            sig.append((t, a))
        elif t is tuple and all(type(v) in _SCALARS for v in a):
            sig.append((tuple, tuple(map(type, a)), a))   # element types too: (1, 0) is not (1.0, 0)
        else:
            return None
    if dev < 0 or dev != _get_device():
        return None
    return dev, tuple(sig)


# op -> positions of int arguments that change from call to call (a dropout seed; negative: from the
# end): the signature holds PER_CALL for them and the plan takes their value per call
# (kernels/trace_plans.py). ops.py adds the planned attention ops whose seed comes last.
DYNAMIC = {"dropout": (2,), "dropout_backward": (2,)}
PER_CALL = "<per call>"


def _masked(op: str, args: tuple) -> tuple:
    dyn = DYNAMIC.get(op)
    if dyn is None:
        return args
    a = list(args)
    for i in dyn:
        if type(a[i]) is int and 0 <= a[i] < 1 << 64:
            a[i] = PER_CALL
    return tuple(a)


def call(op: str, planner, args: tuple, checked):
    """checked(*args), or the plan of args' signature (see the module docstring)."""
    if _nd is None:
        return checked(*args)
    key = _signature(_masked(op, args) if op in DYNAMIC else args)
    if key is None:
        return checked(*args)
    key = (op, key)
    p = _plans.get(key, _MISSING)
    if p is None or (p is not _MISSING and (not _ready() or _recording())):
        return checked(*args)   # (a trace recording a call of which this is a part records the checked launches)
    if p is not _MISSING:
        _open_gate()   # plan_call (C) runs this signature's plan from the next call
    if p is _MISSING:
        r = checked(*args)
        if not may_plan():
            return r   # planned again on a later call
        if len(_plans) >= MAX_PLANS:
            clear()
        _plans[key] = make_plan(op, planner, args)
        return r
    return p(*args)


def may_plan() -> bool:
    """Whether a plan may be made now: no CUDA graph being captured (planning may verify with a
    synchronising comparison) and the planned paths ready."""
    graphs = sys.modules.get("cudakit.graphs")
    return (graphs is None or graphs.capturing() is None) and _ready()


def make_plan(op: str, planner, args: tuple, what: str = ""):
    """planner(*args), or None (noted in cudakit.fallbacks) where it raises: a planner's failure
    costs the plan, never the call. what: the kind of plan, for the note ("ieee " say)."""
    try:
        return planner(*args)
    except Exception as e:  # noqa: BLE001
        from . import fallbacks
        fallbacks.note(f"plan:{op}", f"no {what}plan for {op} with this signature ({type(e).__name__}: {e}); "
                                     f"the checked path runs it")
        return None


_ready_fn = None


def _ready() -> bool:
    global _ready_fn
    if _ready_fn is None:
        from .kernels import _planned
        _ready_fn = _planned.ready
    return _ready_fn() is not None


_compiler = None


def _recording() -> bool:
    """Whether kernels/trace_plans.py is recording a call (runtime.compiler._recorder is set)."""
    global _compiler
    if _compiler is None:
        from .runtime import compiler as _c
        _compiler = _c
    return _compiler._recorder is not None


_gate = None


def _open_gate() -> None:
    global _gate
    if _gate is None:
        from .runtime import native
        mod = native.fast_paths()
        _gate = getattr(mod, "fast_gate", None) or (lambda _open: None)
    _gate(True)


def clear() -> None:
    """Forget every plan (they are rebuilt on the next calls)."""
    _plans.clear()
    if _plans_changed is not None:
        _plans_changed()
