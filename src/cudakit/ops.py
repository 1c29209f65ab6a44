"""The functional API: cudakit.add(a, b), cudakit.relu(x), ...

Each op dispatches on where its inputs live: CuPy arrays (or objects exposing CUDA memory through
__cuda_array_interface__ / __dlpack__) go to the CUDA backend and return CuPy arrays; NumPy arrays
go to the CPU backend and return NumPy arrays. Mixing host and device inputs raises DeviceError.
"""
from __future__ import annotations

import sys

from . import dispatch as _dispatch
from .backends import get_backend
from .backends.base import _SCALAR_FORMS, _gelu_op, _slope, scalar_param
from .backends.cpu import _dlpack_on_cuda


import numpy as np

_ndarray = np.ndarray
_backends: dict = {}
_cuda_nd = type("_NoCupyYet", (), {})   # cupy.ndarray once the CUDA backend exists
_fast = None                             # kernels.elementwise.fast
_ew = lambda table, x0, x1, p, out=None: None  # noqa: E731 -- the native tiny-op path once CUDA is up
                                         # (kernels.elementwise.native_ew); declines until then
_T_ADD = _T_MUL = _T_RELU = None         # its kernel tables for add, mul, relu
_T: dict = {}                            # op -> its kernel table (kernels.elementwise.EW_TABLES)


def _on_cuda(x) -> bool:
    if type(x) is _ndarray:
        return False
    cp = sys.modules.get("cupy")
    if cp is not None and isinstance(x, cp.ndarray):
        return True
    return hasattr(x, "__cuda_array_interface__") or _dlpack_on_cuda(x)


def backend_for(*arrays):
    """The backend that owns these arrays: CUDA if any lives on a GPU, else CPU."""
    name = "cpu"
    for x in arrays:
        if _on_cuda(x):
            name = "cuda"
            break
    be = _backends.get(name)
    if be is None:
        be = _backends[name] = get_backend(name)
        if name == "cuda":
            global _cuda_nd, _fast, _ew, _T_ADD, _T_MUL, _T_RELU
            from .kernels import elementwise
            _ew = elementwise.native_ew()
            t = elementwise.EW_TABLES
            _T_ADD, _T_MUL, _T_RELU = t["add"], t["mul"], t["relu"]
            _T.update(t)
            _cuda_nd, _fast = be._array_type, be._fast
            import cupy
            _dispatch.enable(cupy.ndarray, cupy.cuda.runtime.getDevice)
            global _plan_call
            _plan_call = _dispatch.plan_call
            global _gemm_plans, _trace_plans, _path_plans
            from .kernels import gemm_plans as _gemm_plans, trace_plans as _trace_plans, path_plans as _path_plans
    return be


_gemm_plans = _trace_plans = _path_plans = None   # kernels.gemm_plans, .trace_plans, .path_plans once CUDA is up
_plan_call = None   # dispatch.plan_call (native) once CUDA is up
_PLANS, _DYNAMIC, _MISS = _dispatch._plans, _dispatch.DYNAMIC, _dispatch.MISS   # never rebound


# planned op -> (backend method, the keywords its trailing arguments go by): sum/mean_backward with
# like (*_like), and the attention ops. With an
# attn_bias (*_bias) or dropout (*_dropout: the seed a per-call integer, dispatch.DYNAMIC) the plans
# are traced from the checked call (kernels/path_plans.py plan_attention_bias and the like, then
# kernels/trace_plans.py trace_fallback)
_FWD_KEYS, _BWD_KEYS = ("layout", "window", "key_lengths"), ("layout", "window", "key_lengths", "deterministic")
_KEYWORD_TAILS = {op + tail: (op, keys + more)
                   for op, keys in (("attention", _FWD_KEYS), ("attention_with_lse", _FWD_KEYS),
                                    ("attention_backward", _BWD_KEYS))
                   for tail, more in (("", ()), ("_bias", ("attn_bias",)),
                                      ("_dropout", ("attn_bias", "dropout_p", "seed")))}
_KEYWORD_TAILS["flash_attention"] = ("flash_attention", _FWD_KEYS + ("attn_bias", "dropout_p", "seed"))
_KEYWORD_TAILS.update({op: (op, ("window", "dropout_p", "seed")) for op in ("attention_varlen",
                                                                            "attention_varlen_with_lse")})
_KEYWORD_TAILS.update({f"{op}_like": (op, ("like",)) for op in ("sum_backward", "mean_backward")})
_KEYWORD_TAILS.update({f"{op}_fused": (op, ("residual", "activation"))
                       for op in ("batch_norm", "batch_norm_with_stats")})
_KEYWORD_TAILS["batch_norm_backward_fused"] = ("batch_norm_backward", ("beta", "activation"))
_KEYWORD_TAILS.update({f"{op}_residual": (op, ("residual_grad",)) for op in ("layernorm_backward", "rmsnorm_backward")})
_KEYWORD_TAILS["linear_backward_gelu"] = ("linear_backward", ("gelu_pre",))
_KEYWORD_TAILS["linear_residual"] = ("linear", ("residual",))
_KEYWORD_TAILS["conv2d_act"] = ("conv2d", ("activation",))
_KEYWORD_TAILS["dropout_residual"] = ("dropout", ("residual",))
_KEYWORD_TAILS["attention_backward_packed"] = ("attention_backward", _BWD_KEYS + ("qkv_packed",))
_KEYWORD_TAILS["attention_varlen_backward"] = ("attention_varlen_backward",
                                                ("window", "deterministic", "dropout_p", "seed"))
# the varlen ops called with one cu_seqlens array for q and k -> the position of that array: planned
# under their own names with the array passed once (a trace then knows which argument a pointer is,
# and cuDNN's ragged graphs, which need the same sequences for both, may be replayed)
_VARLEN_SHARED = {"attention_varlen_shared": 3, "attention_varlen_with_lse_shared": 3,
                  "attention_varlen_backward_shared": 6}
_KEYWORD_TAILS.update({op: _KEYWORD_TAILS[op[:-len("_shared")]] for op in _VARLEN_SHARED})
# the attention ops with dropout take its seed last: a per-call integer of their plans
_DYNAMIC.update({op: (-1,) for op, (_, keys) in _KEYWORD_TAILS.items() if keys[-1] == "seed"})
# an op planned under a name of its own for its keywords (dropout_residual) keeps its base op's
# per-call arguments, which come before the keywords appended after them
_DYNAMIC.update({op: _DYNAMIC[base] for op, (base, _) in _KEYWORD_TAILS.items()
                 if op != base and base in _DYNAMIC and op not in _DYNAMIC})
# convolution op -> (its plain form's planner, its channels-last memory_format, the planned op and
# planner of that format (on the views its checked call makes), other names of its plain form)
_CONV_FORMATS = {op: (f"plan_{op}", cl, f"{op}_{cl}", f"plan_{op}_{cl}", plain)
                 for op, cl, plain in (("conv2d", "nhwc", ()), ("conv2d_backward", "nhwc", ()),
                                       ("conv1d", "nlc", ("ncl",)), ("conv1d_backward", "nlc", ("ncl",)))}
_CONV_FORMATS.update({op: (None, "nhwc", f"{op}_nhwc", None, ())   # pooling: plans traced from the checked call
                      for op in ("max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward")})
# the planned ops of convolutions on channels-last arrays -> (backend method, memory_format)
_LAYOUT_OPS = {f[2]: (op, f[1]) for op, f in _CONV_FORMATS.items()}
_checked_calls: dict = {}


def _checked_call(op: str, arrays: int):
    """The backend method call of op (made once per op): the trailing arguments of the attention
    ops (layout, window, ...) go by keyword."""
    if op in _VARLEN_SHARED:   # cu_seqlens_q passed once: given to the method as cu_seqlens_k too
        method, keys = _KEYWORD_TAILS[op]
        n, at = len(keys), _VARLEN_SHARED[op] + 1
        return lambda *a: getattr(backend_for(*a[:arrays]), method)(*a[:at], a[at - 1], *a[at:-n],
                                                                    **dict(zip(keys, a[-n:])))
    if op in _KEYWORD_TAILS:   # (..., layout, window, ...) or (..., like): keywords of the backend method
        method, keys = _KEYWORD_TAILS[op]
        n = len(keys)
        return lambda *a: getattr(backend_for(*a[:arrays]), method)(*a[:-n], **dict(zip(keys, a[-n:])))
    if op in _LAYOUT_OPS:   # a convolution on channels-last arrays: the backend method with its memory_format
        method, fmt = _LAYOUT_OPS[op]
        return lambda *a: getattr(backend_for(*a[:arrays]), method)(*a, memory_format=fmt)
    return lambda *a: getattr(backend_for(*a[:arrays]), op)(*a)


def _planned(op: str, planner, args: tuple, arrays: int = 3):
    """The op through cudakit.dispatch: its plan for this call signature, or the backend's checked
    method (on the backend owning the first `arrays` arguments) on a signature's first call and
    where no plan fits. planner: the name of a function of kernels.gemm_plans or kernels.path_plans,
    or None for a plan traced from the checked call (kernels/trace_plans.py)."""
    checked = _checked_calls.get((op, arrays))
    if checked is None:
        checked = _checked_calls[(op, arrays)] = _checked_call(op, arrays)
    if _plan_call is not None:   # the signature's plan (or checked path), run from C, where it is known and may run now
        r = _plan_call(_PLANS, op, args, args if op not in _DYNAMIC else _dispatch._masked(op, args), checked)
        if r is not _MISS:
            return r
    if _gemm_plans is None:
        return checked(*args)
    make = _planners.get((op, planner, arrays))
    if make is None:
        make = _planners[(op, planner, arrays)] = _planner(op, planner, checked, arrays)
    return _dispatch.call(op, make, args, checked)


def _planned_tail(op: str, suffix: str, args: tuple, tail: tuple, arrays: int, planner=None):
    """op planned on args (by `planner`, see _planned) where every trailing keyword in tail is None
    (the plain call and its plans), else the op of its own name op + suffix on args + tail, its plans
    traced (_KEYWORD_TAILS gives the keywords to the backend method): batch_norm's
    residual/activation, sum/mean_backward's like, the norms' residual_grad, linear's and dropout's
    residual and linear_backward's gelu_pre."""
    if all(v is None for v in tail):
        return _planned(op, planner, args, arrays)
    return _planned(op + suffix, None, args + tail, arrays)


_planners: dict = {}   # (op, planner name, arrays) -> the planner dispatch.call runs


def planner_of(op: str, arrays: int):
    """The planner dispatch.call runs for op (made by its first planned call), or None."""
    for (o, _, n), make in list(_planners.items()):   # (a copy: another thread may add one)
        if o == op and n == arrays:
            return make
    return None


def _planner(op: str, planner, checked, arrays: int):
    """op's planner: a plan traced from the checked call (planner None), or the named planner of
    kernels.gemm_plans / kernels.path_plans with a traced plan where it has none for the signature
    (kernels/trace_plans.trace_fallback: the call's launches and cuBLASLt calls recorded)."""
    if planner is None:
        return lambda *a: _trace_plans.trace(op, checked, a)
    named = getattr(_gemm_plans, planner, None) or getattr(_path_plans, planner)
    return lambda *a: named(*a) or _trace_plans.trace_fallback(op, checked, a, arrays)


def _native(op, x0, x1=None, p=0.0, out=None):
    """op through the native tiny-op path (C-contiguous CuPy arrays of one dtype and shape on the
    current device, whose kernel has run once); None where it does not apply."""
    t = _T.get(op)
    return None if t is None else _ew(t, x0, x1, p, out)


def _native_scalar(op, a, b, out):
    """array op Python scalar (or scalar op array) through the native path, the scalar rounded as
    Backend._scalar_operand_op rounds it; None where that does not apply."""
    right, left = _SCALAR_FORMS[op]
    if type(a) is _cuda_nd and type(b) in (float, int):
        x, s, form = a, b, right
    elif type(b) is _cuda_nd and type(a) in (float, int):
        x, s, form = b, a, left
    else:
        return None
    if not -65504.0 <= s <= 65504.0:   # overflowing scalars (and x's dtype check) on the checked path
        return None
    return _native(form, x, None, scalar_param(s, x.dtype), out)


def add(a, b, out=None):
    """a + b elementwise (see Backend.add)."""
    r = _ew(_T_ADD, a, b, 0.0, out)  # the native tiny-op path; None when it does not apply
    if r is None:
        r = _native_scalar("add", a, b, out)
    if r is not None:
        return r
    if out is None and type(a) is _cuda_nd and type(b) is _cuda_nd:
        r = _fast("add", (a, b), _cuda_nd)
        if r is not None:
            return r
    return backend_for(a, b).add(a, b, out=out)


def mul(a, b, out=None):
    """a * b elementwise (see Backend.mul)."""
    r = _ew(_T_MUL, a, b, 0.0, out)  # the native tiny-op path; None when it does not apply
    if r is None:
        r = _native_scalar("mul", a, b, out)
    if r is not None:
        return r
    if out is None and type(a) is _cuda_nd and type(b) is _cuda_nd:
        r = _fast("mul", (a, b), _cuda_nd)
        if r is not None:
            return r
    return backend_for(a, b).mul(a, b, out=out)


def relu(x, out=None):
    """max(x, 0) elementwise (see Backend.relu)."""
    r = _ew(_T_RELU, x, None, 0.0, out)  # the native tiny-op path; None when it does not apply
    if r is not None:
        return r
    if out is None and type(x) is _cuda_nd:
        r = _fast("relu", (x,), _cuda_nd)
        if r is not None:
            return r
    return backend_for(x).relu(x, out=out)


def relu_backward(grad_out, x, out=None):
    """grad_out where x > 0, else 0 (see Backend.relu_backward)."""
    r = _native("relu_backward", grad_out, x, 0.0, out)
    return r if r is not None else backend_for(grad_out, x).relu_backward(grad_out, x, out=out)


def sub(a, b, out=None):
    """a - b elementwise (see Backend.sub)."""
    r = _native("sub", a, b, 0.0, out)
    if r is None:
        r = _native_scalar("sub", a, b, out)
    return r if r is not None else backend_for(a, b).sub(a, b, out=out)


def div(a, b, out=None):
    """a / b elementwise (see Backend.div)."""
    r = _native("div", a, b, 0.0, out)
    if r is None:
        r = _native_scalar("div", a, b, out)
    return r if r is not None else backend_for(a, b).div(a, b, out=out)


def leaky_relu(x, negative_slope=0.01, out=None):
    """x where x > 0, else negative_slope * x (see Backend.leaky_relu)."""
    r = _native("leaky_relu", x, None, _slope(negative_slope, x), out)
    return r if r is not None else backend_for(x).leaky_relu(x, negative_slope, out=out)


def leaky_relu_backward(grad_out, x, negative_slope=0.01, out=None):
    """Gradient of leaky_relu (see Backend.leaky_relu_backward)."""
    r = _native("leaky_relu_backward", grad_out, x, _slope(negative_slope, x, "leaky_relu_backward"), out)
    return r if r is not None else backend_for(grad_out, x).leaky_relu_backward(grad_out, x, negative_slope, out=out)


def sigmoid(x, out=None):
    """1 / (1 + exp(-x)) (see Backend.sigmoid)."""
    r = _native("sigmoid", x, None, 0.0, out)
    return r if r is not None else backend_for(x).sigmoid(x, out=out)


def sigmoid_backward(grad_out, x, out=None):
    """Gradient of sigmoid from its input x (see Backend.sigmoid_backward)."""
    r = _native("sigmoid_backward", grad_out, x, 0.0, out)
    return r if r is not None else backend_for(grad_out, x).sigmoid_backward(grad_out, x, out=out)


def tanh(x, out=None):
    """tanh(x) (see Backend.tanh)."""
    r = _native("tanh", x, None, 0.0, out)
    return r if r is not None else backend_for(x).tanh(x, out=out)


def tanh_backward(grad_out, x, out=None):
    """Gradient of tanh from its input x (see Backend.tanh_backward)."""
    r = _native("tanh_backward", grad_out, x, 0.0, out)
    return r if r is not None else backend_for(grad_out, x).tanh_backward(grad_out, x, out=out)


def silu(x, out=None):
    """x * sigmoid(x) (see Backend.silu)."""
    r = _native("silu", x, None, 0.0, out)
    return r if r is not None else backend_for(x).silu(x, out=out)


def silu_backward(grad_out, x, out=None):
    """Gradient of silu (see Backend.silu_backward)."""
    r = _native("silu_backward", grad_out, x, 0.0, out)
    return r if r is not None else backend_for(grad_out, x).silu_backward(grad_out, x, out=out)


def gelu(x, approximate="tanh", out=None):
    """GELU, tanh form by default, approximate="none" (or "erf") for the exact erf (see Backend.gelu)."""
    r = _native(_gelu_op(approximate), x, None, 0.0, out)
    return r if r is not None else backend_for(x).gelu(x, approximate, out=out)


def gelu_backward(grad_out, x, approximate="tanh", out=None):
    """Gradient of gelu (see Backend.gelu_backward)."""
    r = _native(_gelu_op(approximate) + "_backward", grad_out, x, 0.0, out)
    return r if r is not None else backend_for(grad_out, x).gelu_backward(grad_out, x, approximate, out=out)


def activation(x, kind, out=None):
    """The activation named by `kind` (see Backend.activation)."""
    return backend_for(x).activation(x, kind, out=out)


def layernorm(x, weight=None, bias=None, eps=1e-5, normalized_ndim=None):
    """Layer normalisation over the trailing dims of x (see Backend.layernorm)."""
    return _planned("layernorm", None, (x, weight, bias, eps, normalized_ndim), 3)


def layernorm_with_stats(x, weight=None, bias=None, eps=1e-5, normalized_ndim=None):
    """layernorm that also returns (mean, rstd) for the backward (see Backend.layernorm_with_stats)."""
    return _planned("layernorm_with_stats", None, (x, weight, bias, eps, normalized_ndim), 3)


def layernorm_backward(grad_out, x, weight, mean, rstd, normalized_ndim=None, *, residual_grad=None):
    """(dx, dweight, dbias) of layernorm; residual_grad (like x) is added to dx in the same pass
    (see Backend.layernorm_backward)."""
    return _planned_tail("layernorm_backward", "_residual", (grad_out, x, weight, mean, rstd, normalized_ndim),
                         (residual_grad,), 5)


def rmsnorm(x, weight=None, eps=1e-6, normalized_ndim=None):
    """RMS normalisation over the trailing dims of x (see Backend.rmsnorm)."""
    return _planned("rmsnorm", None, (x, weight, eps, normalized_ndim), 2)


def rmsnorm_with_stats(x, weight=None, eps=1e-6, normalized_ndim=None):
    """rmsnorm that also returns rstd for the backward (see Backend.rmsnorm_with_stats)."""
    return _planned("rmsnorm_with_stats", None, (x, weight, eps, normalized_ndim), 2)


def rmsnorm_backward(grad_out, x, weight, rstd, normalized_ndim=None, *, residual_grad=None):
    """(dx, dweight) of rmsnorm; residual_grad as layernorm_backward's (see Backend.rmsnorm_backward)."""
    return _planned_tail("rmsnorm_backward", "_residual", (grad_out, x, weight, rstd, normalized_ndim),
                         (residual_grad,), 4)


def batch_norm(x, gamma=None, beta=None, running_mean=None, running_var=None, training=False, momentum=0.1,
               eps=1e-5, *, residual=None, activation=None):
    """Batch normalisation of (N, C) or (N, C, *spatial) x, optionally fused with a residual add
    and a relu: act(bn(x) + residual) in one pass (see Backend.batch_norm)."""
    return _planned_tail("batch_norm", "_fused", (x, gamma, beta, running_mean, running_var, training, momentum, eps),
                         (residual, activation), 5)


def batch_norm_with_stats(x, gamma=None, beta=None, running_mean=None, running_var=None, training=False,
                          momentum=0.1, eps=1e-5, *, residual=None, activation=None):
    """batch_norm that also returns (save_mean, save_invstd) (see Backend.batch_norm_with_stats)."""
    return _planned_tail("batch_norm_with_stats", "_fused",
                         (x, gamma, beta, running_mean, running_var, training, momentum, eps),
                         (residual, activation), 5)


def batch_norm_backward(grad_out, x, gamma, save_mean, save_invstd, *, beta=None, activation=None):
    """(dx, dgamma, dbeta) of training-mode batch_norm. activation="relu": of batch_norm(...,
    activation="relu") without a residual, grad_out being the gradient of its output; pass the
    forward's gamma and beta (None only where the forward had none: they place relu's mask). After
    a forward with a residual, take relu_backward(grad_out, y) and the plain backward of that
    (see Backend.batch_norm_backward)."""
    return _planned_tail("batch_norm_backward", "_fused", (grad_out, x, gamma, save_mean, save_invstd),
                         (beta, activation), 5)


# -- reductions (see backends/reduction_api.py) -------------------------------------------------

def sum(x, axis=None, keepdims=False):  # noqa: A001 - NumPy's name
    """Sum over axis (int, tuple or None for all); float32 accumulation for 16-bit inputs."""
    return _planned("sum", None, (x, axis, keepdims), 1)


def mean(x, axis=None, keepdims=False):
    """Arithmetic mean over axis (see Backend.mean)."""
    return _planned("mean", None, (x, axis, keepdims), 1)


def max(x, axis=None, keepdims=False):  # noqa: A001
    """Maximum over axis; NaN propagates as in NumPy (see Backend.max)."""
    return _planned("max", None, (x, axis, keepdims), 1)


def min(x, axis=None, keepdims=False):  # noqa: A001
    """Minimum over axis; NaN propagates as in NumPy (see Backend.min)."""
    return _planned("min", None, (x, axis, keepdims), 1)


def argmax(x, axis=None, keepdims=False):
    """int64 index of the first maximum (of the flattened array when axis is None)."""
    return backend_for(x).argmax(x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
    """int64 index of the first minimum (of the flattened array when axis is None)."""
    return backend_for(x).argmin(x, axis, keepdims)


def var(x, axis=None, ddof=0, keepdims=False):
    """Variance over axis with ddof (see Backend.var)."""
    return backend_for(x).var(x, axis, ddof, keepdims)


def reduce_sum(x, axis=None):
    """NeuralScript's reduce_sum(tensor, axis): sum without keepdims."""
    return backend_for(x).reduce_sum(x, axis)


def sum_backward(grad_out, x_shape, axis=None, keepdims=False, *, like=None):
    """Gradient of sum: grad_out broadcast back to x_shape (in like's memory layout where given and
    dense, e.g. the forward's channels-last x; see Backend.sum_backward)."""
    return _planned_tail("sum_backward", "_like", (grad_out, x_shape, axis, keepdims), (like,), 1)


def mean_backward(grad_out, x_shape, axis=None, keepdims=False, *, like=None):
    """Gradient of mean: grad_out / count broadcast back to x_shape (in like's layout, as sum_backward)."""
    return _planned_tail("mean_backward", "_like", (grad_out, x_shape, axis, keepdims), (like,), 1)


def var_backward(grad_out, x, axis=None, ddof=0, keepdims=False):
    """Gradient of var: 2 (x - mean) grad_out / (count - ddof)."""
    return backend_for(grad_out, x).var_backward(grad_out, x, axis, ddof, keepdims)


def max_backward(grad_out, x, axis=None, keepdims=False):
    """Gradient of max, routed to the argmax element of each reduced slice."""
    return backend_for(grad_out, x).max_backward(grad_out, x, axis, keepdims)


def min_backward(grad_out, x, axis=None, keepdims=False):
    """Gradient of min, routed to the argmin element of each reduced slice."""
    return backend_for(grad_out, x).min_backward(grad_out, x, axis, keepdims)


# -- softmax and cross-entropy (see backends/softmax_api.py) ---------------------------------------

def softmax(x, axis=-1):
    """Numerically stable softmax along axis."""
    return _planned("softmax", None, (x, axis), 1)


def log_softmax(x, axis=-1):
    """Numerically stable log-softmax along axis."""
    return _planned("log_softmax", None, (x, axis), 1)


def softmax_backward(grad_out, y, axis=-1):
    """dx of y = softmax(x): y * (grad_out - sum(grad_out * y))."""
    return _planned("softmax_backward", None, (grad_out, y, axis), 2)


def log_softmax_backward(grad_out, y, axis=-1):
    """dx of y = log_softmax(x): grad_out - exp(y) * sum(grad_out)."""
    return _planned("log_softmax_backward", None, (grad_out, y, axis), 2)


def cross_entropy(logits, targets, reduction="mean", ignore_index=-100, *, validate=False):
    """Cross-entropy of (N, C) logits against int class targets, fused (no softmax written out).
    On CUDA an out-of-range target raises TargetIndexError at the next cudakit.check() unless
    validate=True (see Backend.cross_entropy)."""
    if validate is not False:   # (True, or a value the backend refuses as not a bool)
        return backend_for(logits, targets).cross_entropy(logits, targets, reduction, ignore_index,
                                                          validate=validate)
    return _planned("cross_entropy", None, (logits, targets, reduction, ignore_index), 2)


def cross_entropy_backward(grad_loss, logits, targets, reduction="mean", ignore_index=-100, *, validate=False):
    """dlogits of cross_entropy for the upstream gradient grad_loss."""
    if validate is not False:
        return backend_for(grad_loss, logits, targets).cross_entropy_backward(
            grad_loss, logits, targets, reduction, ignore_index, validate=validate)
    return _planned("cross_entropy_backward", None, (grad_loss, logits, targets, reduction, ignore_index), 3)


def cross_entropy_with_grad(logits, targets, reduction="mean", ignore_index=-100, *, validate=False):
    """(loss, dlogits) in one pass over the logits (training step with grad_loss = 1)."""
    if validate is not False:
        return backend_for(logits, targets).cross_entropy_with_grad(logits, targets, reduction, ignore_index,
                                                                    validate=validate)
    return _planned("cross_entropy_with_grad", None, (logits, targets, reduction, ignore_index), 2)


# -- layout (see backends/layout_api.py) ----------------------------------------------------------

def transpose(x, axes=None):
    """A contiguous copy of x with its axes reversed (or permuted by axes)."""
    return _planned("transpose", None, (x, axes), 1)


def permute(x, axes):
    """A contiguous copy of x with its axes permuted."""
    return _planned("permute", None, (x, axes), 1)


def permute_backward(grad_out, axes):
    """Gradient of permute: grad_out permuted by the inverse of axes."""
    return _planned("permute_backward", None, (grad_out, axes), 1)


def matrix_transpose(x):
    """NeuralScript's matrix_transpose: the contiguous transpose of a 2-D array."""
    return backend_for(x).matrix_transpose(x)


# -- dropout (see backends/dropout_api.py) --------------------------------------------------------

def dropout(x, p=0.5, seed=0, training=True, *, residual=None):
    """Inverted dropout with a counter-based Philox mask: same (seed, shape) -> same mask;
    residual + dropout(x) in one pass where residual is given (see Backend.dropout)."""
    return _planned_tail("dropout", "_residual", (x, p, seed, training), (residual,), 1)


def dropout_backward(grad_out, p, seed):
    """Gradient of dropout: the mask regenerated from seed, never stored."""
    return _planned("dropout_backward", None, (grad_out, p, seed), 1)


def dropout_mask(shape, p, seed, backend=None):
    """The boolean keep-mask dropout(x, p, seed) uses for an x of this shape, made by the backend
    named here ("auto", "cpu" or "cuda"; default CUDAKIT_BACKEND or "auto"; the masks are
    bit-identical on both)."""
    return get_backend(backend).dropout_mask(shape, p, seed)


# -- matrix products (see backends/linalg_api.py) -------------------------------------------------

def matmul(a, b, out=None):
    """a @ b with NumPy's rules, cuBLASLt on the GPU (see Backend.matmul)."""
    if out is not None:
        return backend_for(a, b).matmul(a, b, out=out)
    return _planned("matmul", "plan_matmul", (a, b))


def matrix_multiply(a, b):
    """matmul(a, b) (CudaMath's name)."""
    return _planned("matmul", "plan_matmul", (a, b))


def matmul_backward(grad_out, a, b):
    """(grad_a, grad_b) of matmul(a, b) (see Backend.matmul_backward); a plan traced from the checked
    call (its cuBLASLt calls replayed)."""
    return _planned("matmul_backward", None, (grad_out, a, b))


def linear(x, weight, bias=None, *, residual=None):
    """x @ weight^T + bias (+ residual, in the GEMM's epilogue), weight (out_features, in_features)
    (see Backend.linear)."""
    return _planned_tail("linear", "_residual", (x, weight, bias), (residual,), 3, "plan_linear")


def linear_backward(grad_out, x, weight, bias=True, *, gelu_pre=None):
    """(grad_x, grad_weight, grad_bias) of linear; with gelu_pre (x = gelu(gelu_pre)) the first is
    the gradient of gelu_pre, GELU's backward in the grad_x GEMM's epilogue (see
    Backend.linear_backward)."""
    return _planned_tail("linear_backward", "_gelu", (grad_out, x, weight, bias), (gelu_pre,), 3,
                         "plan_linear_backward")


def fused_linear_gelu(x, weight, bias=None, approximate="tanh"):
    """gelu(linear(x, weight, bias)) (see Backend.fused_linear_gelu)."""
    return _planned("fused_linear_gelu", "plan_fused_linear_gelu", (x, weight, bias, approximate))


def fused_linear_gelu_with_preact(x, weight, bias=None, approximate="tanh"):
    """(gelu(pre), pre) with pre = linear(x, weight, bias), for the backward."""
    return _planned("fused_linear_gelu_with_preact", "plan_fused_linear_gelu_with_preact",
                    (x, weight, bias, approximate))


def fused_linear_gelu_backward(grad_out, x, weight, pre, approximate="tanh", bias=True):
    """(grad_x, grad_weight, grad_bias) of fused_linear_gelu (see Backend.fused_linear_gelu_backward)."""
    if type(grad_out) is _cuda_nd and type(pre) is _cuda_nd and pre.shape == grad_out.shape:
        # the backend's composition, through the planned calls: gelu_backward then linear_backward
        return linear_backward(gelu_backward(grad_out, pre, approximate), x, weight, bias)
    return backend_for(grad_out, x, weight, pre).fused_linear_gelu_backward(grad_out, x, weight, pre,
                                                                            approximate, bias)


# -- attention (see backends/attention_api.py) ----------------------------------------------------

def _dropout_asked(dropout_p, seed) -> bool:
    """Whether a call takes the dropout form (its plans key the seed per call): anything but the
    plain int or float 0 for both. Arrays and other odd values go there too, whose checked call
    raises the typed error naming the argument (a comparison here would raise NumPy's own)."""
    return not (type(dropout_p) in (int, float) and dropout_p == 0 and type(seed) is int and seed == 0)


def attention(q, k, v, scale=None, causal=False, *, attn_bias=None, window=None, key_lengths=None, layout="bhld",
              dropout_p=0.0, seed=0):
    """softmax(q k^T * scale + attn_bias) v, fused; causal and window=(left, right) aligned
    bottom-right, key_lengths (B,) masking each batch's keys from its length on; attn_bias an
    additive float array broadcastable to the scores; layout "bhld" ((..., L, D) arrays) or "blhd"
    ((B, L, H, D) arrays, e.g. views of a packed qkv); dropout_p, seed: dropout on the probabilities
    (see Backend.attention)."""
    if _dropout_asked(dropout_p, seed):   # a plan traced from the checked call, the seed taken per call
        return _planned("attention_dropout", "plan_attention_dropout",
                        (q, k, v, scale, causal, layout, window, key_lengths, attn_bias, dropout_p, seed))
    if attn_bias is not None:   # a plan traced from the checked call (the bias an input array like q, k, v)
        return _planned("attention_bias", "plan_attention_bias",
                        (q, k, v, scale, causal, layout, window, key_lengths, attn_bias))
    return _planned("attention", "plan_attention", (q, k, v, scale, causal, layout, window, key_lengths))


def attention_with_lse(q, k, v, scale=None, causal=False, *, attn_bias=None, window=None, key_lengths=None,
                       layout="bhld", dropout_p=0.0, seed=0):
    """(out, lse) of attention, lse for the backward (see Backend.attention_with_lse)."""
    if _dropout_asked(dropout_p, seed):
        return _planned("attention_with_lse_dropout", "plan_attention_with_lse_dropout",
                        (q, k, v, scale, causal, layout, window, key_lengths, attn_bias, dropout_p, seed))
    if attn_bias is not None:
        return _planned("attention_with_lse_bias", "plan_attention_with_lse_bias",
                        (q, k, v, scale, causal, layout, window, key_lengths, attn_bias))
    return _planned("attention_with_lse", "plan_attention_with_lse",
                    (q, k, v, scale, causal, layout, window, key_lengths))


def attention_backward(grad_out, q, k, v, out, lse, scale=None, causal=False, *, attn_bias=None, window=None,
                       key_lengths=None, layout="bhld", deterministic=False, dropout_p=0.0, seed=0, qkv_packed=False):
    """(grad_q, grad_k, grad_v) of attention, and grad_attn_bias as a fourth with attn_bias;
    deterministic=True: bitwise the same on every run; qkv_packed=True (layout "blhd"): one
    (B, L, 3, H, D) dqkv in place of the three (see Backend.attention_backward)."""
    if qkv_packed is not False:
        if _dropout_asked(dropout_p, seed) or attn_bias is not None:   # (the checked call: no plan to freeze a seed)
            return backend_for(grad_out, q, k, v).attention_backward(
                grad_out, q, k, v, out, lse, scale, causal, attn_bias=attn_bias, window=window,
                key_lengths=key_lengths, layout=layout, deterministic=deterministic, dropout_p=dropout_p, seed=seed,
                qkv_packed=qkv_packed)
        return _planned("attention_backward_packed", "plan_attention_backward_packed",
                        (grad_out, q, k, v, out, lse, scale, causal, layout, window, key_lengths, deterministic,
                         qkv_packed), 4)
    if _dropout_asked(dropout_p, seed):
        return _planned("attention_backward_dropout", "plan_attention_backward_dropout",
                        (grad_out, q, k, v, out, lse, scale, causal, layout, window, key_lengths, deterministic,
                         attn_bias, dropout_p, seed), 4)
    if attn_bias is not None:
        return _planned("attention_backward_bias", "plan_attention_backward_bias",
                        (grad_out, q, k, v, out, lse, scale, causal, layout, window, key_lengths, deterministic,
                         attn_bias), 4)
    return _planned("attention_backward", "plan_attention_backward",
                    (grad_out, q, k, v, out, lse, scale, causal, layout, window, key_lengths, deterministic), 4)


def flash_attention(q, k, v, scale=None, block_size=64, causal=False, *, attn_bias=None, window=None,
                    key_lengths=None, layout="bhld", dropout_p=0.0, seed=0):
    """attention with a named key block size (see Backend.flash_attention); a plan traced from the
    checked call (the Triton kernels at that block size), the seed taken per call."""
    return _planned("flash_attention", "plan_flash_attention",
                    (q, k, v, scale, block_size, causal, layout, window, key_lengths, attn_bias, dropout_p, seed))


def _varlen(op: str, lead: tuple, cu_q, cu_k, rest: tuple, arrays: int = 3):
    """A varlen op through cudakit.dispatch: with one cu_seqlens array for q and k, its *_shared form
    with the array passed once (ops._VARLEN_SHARED)."""
    if cu_k is cu_q:
        return _planned(f"{op}_shared", f"plan_{op}_shared", lead + (cu_q,) + rest, arrays)
    return _planned(op, f"plan_{op}", lead + (cu_q, cu_k) + rest, arrays)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale=None, causal=False, *,
                     window=None, dropout_p=0.0, seed=0):
    """Attention over packed variable-length sequences: q (total_q, H, D), k, v (total_k, Hkv, D),
    sequence b the rows cu_seqlens_q[b]..cu_seqlens_q[b + 1] of q against cu_seqlens_k[b]..[b + 1]
    of k and v (see Backend.attention_varlen)."""
    return _varlen("attention_varlen", (q, k, v), cu_seqlens_q, cu_seqlens_k,
                   (max_seqlen_q, max_seqlen_k, scale, causal, window, dropout_p, seed))


def attention_varlen_with_lse(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale=None,
                              causal=False, *, window=None, dropout_p=0.0, seed=0):
    """(out, lse (total_q, H)) of attention_varlen (see Backend.attention_varlen_with_lse)."""
    return _varlen("attention_varlen_with_lse", (q, k, v), cu_seqlens_q, cu_seqlens_k,
                   (max_seqlen_q, max_seqlen_k, scale, causal, window, dropout_p, seed))


def attention_varlen_backward(grad_out, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                              scale=None, causal=False, *, window=None, deterministic=False, dropout_p=0.0, seed=0):
    """(grad_q, grad_k, grad_v) of attention_varlen (see Backend.attention_varlen_backward)."""
    return _varlen("attention_varlen_backward", (grad_out, q, k, v, out, lse), cu_seqlens_q, cu_seqlens_k,
                   (max_seqlen_q, max_seqlen_k, scale, causal, window, deterministic, dropout_p, seed), 4)


# -- convolution and pooling (see backends/conv_api.py) -------------------------------------------

def _conv_call(op: str, memory_format, args: tuple, arrays: int, planned: int = 3):
    """A convolution or pooling call by its memory_format: the planned op (its channels-last form's
    op for that format), or for any other value the backend's checked method (its error; "nchw":
    a C-contiguous result from a channels-last view). arrays: the leading arguments the checked
    call's backend comes from; planned: those of the planned call (_planned's `arrays`)."""
    planner, cl, cl_op, cl_planner, plain = _CONV_FORMATS[op]
    if memory_format is None:
        return _planned(op, planner, args, planned)
    if type(memory_format) is str and memory_format == cl:
        return _planned(cl_op, cl_planner, args, planned)
    if type(memory_format) is str and memory_format in plain:
        return _planned(op, planner, args, planned)
    return getattr(backend_for(*args[:arrays]), op)(*args, memory_format=memory_format)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, memory_format=None, activation=None):
    """2-D convolution, NCHW, or channels-last: memory_format="nhwc" ((N, H, W, C) arrays) or an
    NCHW view of channels-last memory (see Backend.conv2d); activation="relu": max(y, 0) fused.
    Plans cover C-contiguous arrays, channels-last views (their strides are part of the call
    signature) and C-contiguous (N, H, W, C) arrays with memory_format="nhwc"; with an activation,
    the first two."""
    args = (x, weight, bias, stride, padding, dilation, groups)
    if activation is None:
        return _conv_call("conv2d", memory_format, args, 2)
    if memory_format is None:
        return _planned("conv2d_act", "plan_conv2d_act", args + (activation,), 3)
    return backend_for(x, weight).conv2d(*args, memory_format=memory_format, activation=activation)


def _through_activation(op: str, grad_out, x, activation, y):
    """grad_out through conv2d's / conv1d's activation (Backend._activation_grad: its checks, then
    relu_backward(grad_out, y)); grad_out itself without one."""
    if activation is None and y is None:
        return grad_out
    return backend_for(grad_out, x)._activation_grad(op, grad_out, activation, y)


def conv2d_backward(grad_out, x, weight, stride=1, padding=0, dilation=1, bias=True, groups=1, *, memory_format=None,
                    activation=None, y=None):
    """(grad_x, grad_weight, grad_bias) of conv2d (see Backend.conv2d_backward); activation="relu"
    with y, the forward's output: grad_out masked where y > 0 first, then the planned backward."""
    grad_out = _through_activation("conv2d_backward", grad_out, x, activation, y)
    return _conv_call("conv2d_backward", memory_format, (grad_out, x, weight, stride, padding, dilation, bias, groups),
                      3)


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, memory_format=None, activation=None):
    """1-D convolution, (N, C, L), or (N, L, C) with memory_format="nlc" (see Backend.conv1d):
    conv2d on (N, C, 1, L) views. Plans (conv2d's, on those views) cover C-contiguous (N, C, L)
    and, with "nlc", (N, L, C) arrays; with an activation, the backend's checked call."""
    args = (x, weight, bias, stride, padding, dilation, groups)
    if activation is None:
        return _conv_call("conv1d", memory_format, args, 2)
    return backend_for(x, weight).conv1d(*args, memory_format=memory_format, activation=activation)


def conv1d_backward(grad_out, x, weight, stride=1, padding=0, dilation=1, bias=True, groups=1, *, memory_format=None,
                    activation=None, y=None):
    """(grad_x, grad_weight, grad_bias) of conv1d (see Backend.conv1d_backward); activation and y as
    conv2d_backward's."""
    grad_out = _through_activation("conv1d_backward", grad_out, x, activation, y)
    return _conv_call("conv1d_backward", memory_format, (grad_out, x, weight, stride, padding, dilation, bias, groups),
                      3)


def max_pool2d(x, kernel_size, stride=None, padding=0, *, memory_format=None):
    """Max over windows, NCHW or channels-last (see Backend.max_pool2d)."""
    return _conv_call("max_pool2d", memory_format, (x, kernel_size, stride, padding), 1, 1)


def max_pool2d_backward(grad_out, x, kernel_size, stride=None, padding=0, *, memory_format=None):
    """dL/dx of max_pool2d (see Backend.max_pool2d_backward)."""
    return _conv_call("max_pool2d_backward", memory_format, (grad_out, x, kernel_size, stride, padding), 2, 2)


def avg_pool2d(x, kernel_size, stride=None, padding=0, *, memory_format=None):
    """Mean over windows, NCHW or channels-last (see Backend.avg_pool2d)."""
    return _conv_call("avg_pool2d", memory_format, (x, kernel_size, stride, padding), 1, 1)


def avg_pool2d_backward(grad_out, x, kernel_size, stride=None, padding=0, *, memory_format=None):
    """dL/dx of avg_pool2d (see Backend.avg_pool2d_backward)."""
    return _conv_call("avg_pool2d_backward", memory_format, (grad_out, x, kernel_size, stride, padding), 2, 2)
