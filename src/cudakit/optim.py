"""Optimizers: SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW (AMSGrad), as
functions (`sgd_update`, `adam_update`, NeuralScript's names) and as objects (`SGD`, `Adam`,
`AdamW`) over a list of arrays, updated in place.

Parameters are NumPy arrays (the CPU path: NumPy, per tensor) or CuPy arrays (the CUDA path: one
fused multi-tensor launch per step for each device and dtype among the parameters, see
cudakit.kernels.optimizers); a list may not mix the two. Objects exposing CUDA memory through
__cuda_array_interface__ or __dlpack__ (PyTorch tensors) are taken zero-copy, so their storage is
what gets updated.

dtypes: parameters float32, float64, float16 or bfloat16; gradients in the parameter's dtype and
shape. Layouts: a parameter covers one gapless block of memory, C-contiguous or a permutation of it
(a channels-last convolution weight, as PyTorch's channels_last models keep them); the update runs
over that memory, so states and master weights are made in the parameter's layout and a gradient in
another layout is copied into it. States (exp_avg, exp_avg_sq, max_exp_avg_sq, momentum buffer) are
float32, float64 for float64 parameters. Arithmetic is in the state dtype. 16-bit parameters are either updated
directly (loaded to float32, rounded back: small updates can round away) or, with master weights,
through a float32 master copy that is updated and from which the 16-bit parameter is written.

The formulas are torch.optim's (torch/optim/adam.py `_single_tensor_adam`, sgd.py
`_single_tensor_sgd`), step for step; lr is in parameter units per unit of update direction,
eps in gradient units, weight_decay per step (scaled by lr in AdamW).
"""
from __future__ import annotations

import collections
import math
import numbers
import operator
import sys
import weakref
from dataclasses import asdict, dataclass

import numpy as np

from .backends.checks import array_dense_order, check_bool, check_distinct, check_writeable, empty_in_order
from .errors import ArgumentError, ArgumentTypeError, DeviceError, DTypeError, ShapeError

__all__ = ["OptimizerState", "sgd_update", "adam_update", "SGD", "Adam", "AdamW"]

PARAM_DTYPES = ("float32", "float64", "float16", "bfloat16")


# ---- hyper-parameters --------------------------------------------------------------------------

@dataclass
class OptimizerState:
    """Hyper-parameters and step count of one optimizer.

    lr            learning rate, >= 0 (parameter units per unit of update)
    betas         (beta1, beta2), each in [0, 1): Adam's decay rates of the first and second
                  moment estimates
    eps           > 0, added to Adam's denominator sqrt(v / (1 - beta2^t)) (gradient units)
    weight_decay  >= 0: L2 penalty added to the gradient (SGD, Adam) or, with
                  decoupled_weight_decay (AdamW), parameters scaled by 1 - lr * weight_decay
    step          updates taken so far (>= 0); each update adds one before using it, so Adam's
                  bias corrections use t = step after the increment; SGD's momentum buffer starts
                  as the gradient on the update taken at step == 0
    momentum      SGD momentum factor, >= 0 (0: no momentum buffer)
    dampening     SGD dampening of the gradient added to the momentum buffer
    nesterov      SGD Nesterov momentum (needs momentum > 0 and dampening == 0)
    amsgrad       Adam: normalise by the running maximum of the second moment
    decoupled_weight_decay   Adam: AdamW's decoupled weight decay
    maximize      ascend the objective instead of descending it

    Raises ValueError naming the value when one is out of range; `validate()` checks again after
    fields were changed (every update calls it).
    """
    lr: float = 1e-3
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    step: int = 0
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    amsgrad: bool = False
    decoupled_weight_decay: bool = False
    maximize: bool = False

    def __post_init__(self):
        self.betas = tuple(self.betas) if isinstance(self.betas, (list, tuple)) else self.betas
        self.validate()

    def validate(self) -> None:
        """Raise ValueError (or TypeError for a non-number) naming the first bad field."""
        lr = _real(self.lr, "lr")
        if not 0 <= lr < math.inf:  # also catches NaN
            raise ArgumentError(f"lr must be >= 0 and finite (got {lr!r})")
        if not isinstance(self.betas, tuple) or len(self.betas) != 2:
            raise ArgumentError(f"betas must be a pair (beta1, beta2) (got {self.betas!r})")
        for i, b in enumerate(self.betas):
            if not 0 <= _real(b, f"betas[{i}]") < 1:
                raise ArgumentError(f"betas[{i}] must be in [0, 1) (got {b!r})")
        if not 0 < _real(self.eps, "eps") < math.inf:
            raise ArgumentError(f"eps must be > 0 and finite (got {self.eps!r})")
        if not 0 <= _real(self.weight_decay, "weight_decay") < math.inf:
            raise ArgumentError(f"weight_decay must be >= 0 and finite (got {self.weight_decay!r})")
        if not 0 <= _real(self.momentum, "momentum") < math.inf:
            raise ArgumentError(f"momentum must be >= 0 and finite (got {self.momentum!r})")
        if not math.isfinite(_real(self.dampening, "dampening")):
            raise ArgumentError(f"dampening must be finite (got {self.dampening!r})")
        for name in ("nesterov", "amsgrad", "decoupled_weight_decay", "maximize"):   # ("False" would be True;
            check_bool("optimizer", name, getattr(self, name))                      # first: read as flags below)
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ArgumentError(f"nesterov needs momentum > 0 and dampening == 0 "
                                f"(got momentum={self.momentum!r}, dampening={self.dampening!r})")
        if isinstance(self.step, bool) or not isinstance(self.step, numbers.Integral) or not 0 <= self.step < _MAX_STEP:
            got = repr(self.step)
            raise ArgumentError(f"step must be an integer in [0, 2**63) (got {got if len(got) <= 40 else got[:37] + '...'})")


_MAX_STEP = 1 << 63   # an int64 count (a larger one overflowed float(beta) ** step in the bias correction)


def _real(v, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ArgumentTypeError(f"{name} must be a real number (got {type(v).__name__} {v!r})")
    try:
        return float(v)
    except OverflowError:   # an int beyond float range (10**400)
        raise ArgumentError(f"{name} is beyond the float range (got an int of {len(str(v))} digits)") from None


# ---- arrays: where they live, dtypes, checks ---------------------------------------------------

def _is_cuda_array(x) -> bool:
    if type(x) is np.ndarray:
        return False
    cp = sys.modules.get("cupy")
    if cp is not None and isinstance(x, cp.ndarray):
        return True
    from .backends.cpu import _dlpack_on_cuda
    return hasattr(x, "__cuda_array_interface__") or _dlpack_on_cuda(x)


def _as_list(x, name: str) -> tuple[list, bool]:
    """(list of arrays, whether a single array was given)."""
    if isinstance(x, (list, tuple)):
        return list(x), False
    if x is None:
        raise ArgumentTypeError(f"{name}: expected an array or a list of arrays (got None)")
    return [x], True


def _placement(arrays: list, name: str) -> str:
    """"cuda" or "cpu" for a list of arrays; DeviceError when host and device arrays mix."""
    where = None
    for i, x in enumerate(arrays):
        w = "cuda" if _is_cuda_array(x) else "cpu" if isinstance(x, np.ndarray) else None
        if w is None:
            raise DTypeError(f"{name}[{i}]: expected a NumPy or CuPy array (got {type(x).__name__})")
        if where is None:
            where = w
        elif w != where:
            raise DeviceError(f"{name}[{i}] is a {'CUDA' if w == 'cuda' else 'host'} array but "
                              f"{name}[0] is a {'CUDA' if where == 'cuda' else 'host'} array; put every "
                              f"array of one optimizer on one side (cudakit.to_device / to_host)")
    return where or "cpu"


def _to_cupy(arrays: list, name: str) -> list:
    """CUDA arrays as CuPy arrays, zero-copy (PyTorch tensors and the like become views)."""
    from .runtime import _cupy
    cp = _cupy.cupy()
    out = []
    for x in arrays:
        if not isinstance(x, cp.ndarray):
            x = cp.asarray(x) if hasattr(x, "__cuda_array_interface__") else cp.from_dlpack(x)
        out.append(x)
    return out


def _dtype_name(x, name: str) -> str:
    from .backends.base import supported_dtypes
    n = supported_dtypes().get(x.dtype)
    if n is None:
        raise DTypeError(f"{name}: dtype {x.dtype} is not supported; parameters must be one of "
                         f"{', '.join(PARAM_DTYPES)}")
    return n


def _state_dtype(param_dtype: str) -> np.dtype:
    return np.dtype(np.float64 if param_dtype == "float64" else np.float32)


def _order(x):
    """x's axes from slowest to fastest in memory where x covers one gapless block (C order for a
    C-contiguous x), else None (checks.dense_order)."""
    if x.flags.c_contiguous:
        return tuple(range(x.ndim))
    return array_dense_order(x)


def _layout_key(x):
    """What must agree between a parameter and its gradient and states for the update to run over
    their flat memory element by element: True for C-contiguous, else the axes' memory order
    (_order; not the strides, whose values on size-1 axes mean nothing)."""
    return True if x.flags.c_contiguous else _order(x)


def _new_like(p, dtype, where: str, src=None):
    """An array of p's shape in `dtype`, its memory in p's axis order: a copy of src (p's shape),
    or zeros."""
    order = _order(p)
    if where == "cpu":
        a = empty_in_order(np.empty, p.shape, dtype, order)
        a[...] = 0 if src is None else src
        return a
    from .runtime import _cupy
    cp = _cupy.cupy()
    with cp.cuda.Device(p.data.device_id):
        a = empty_in_order(cp.empty, p.shape, dtype, order)
        if src is None:
            a.data.memset_async(0, a.nbytes)   # bytes, so any dtype (bfloat16 included)
        else:
            a[...] = src
    return a


def _refuse_read_only(p, label: str) -> None:
    """ArgumentError naming parameter `label` where it is a read-only NumPy array: optimizers update
    parameters in place."""
    if isinstance(p, np.ndarray) and not p.flags.writeable:
        raise ArgumentError(f"{label} is read-only; optimizers update parameters in place")


def _check_params(params: list, name: str = "params") -> list[str]:
    """dtype names of the parameters; each must cover one gapless block of memory, C-contiguous or
    a permutation of it (they are updated in place, so a strided view cannot be replaced by a copy)."""
    dtypes = []
    for i, p in enumerate(params):
        dtypes.append(_dtype_name(p, f"{name}[{i}]"))
        if _order(p) is None:
            raise ShapeError(f"{name}[{i}]: parameters must cover one gapless block of memory, C-contiguous or "
                             f"a permutation of it such as channels-last (got strides {p.strides} for shape "
                             f"{p.shape}); optimizers update them in place")
        _refuse_read_only(p, f"{name}[{i}]")
    check_distinct("optimizer", {f"{name}[{i}]": p for i, p in enumerate(params)})
    return dtypes


def _check_grads(grads: list, params: list, dtypes: list, where: str) -> list:
    """Gradients checked against the parameters (count, side, device, shape, dtype); returns them
    as arrays of the parameters' side in each parameter's layout (copies where they were not)."""
    if len(grads) != len(params):
        raise ShapeError(f"expected {len(params)} gradients (one per parameter), got {len(grads)}")
    if grads and _placement(grads, "grads") != where:
        side = "CUDA" if where == "cuda" else "host"
        raise DeviceError(f"grads are {'host' if where == 'cuda' else 'CUDA'} arrays but the parameters are "
                          f"{side} arrays; move them with cudakit.{'to_device' if where == 'cuda' else 'to_host'}")
    if where == "cuda":
        grads = _to_cupy(grads, "grads")
    out = []
    for i, (g, p) in enumerate(zip(grads, params)):
        if g.shape != p.shape:
            raise ShapeError(f"grads[{i}]: expected shape {p.shape} (the shape of params[{i}]), got {g.shape}")
        if g.dtype != p.dtype:
            raise DTypeError(f"grads[{i}]: expected dtype {dtypes[i]} (the dtype of params[{i}]), got {g.dtype}")
        if where == "cuda" and g.data.device_id != p.data.device_id:
            raise DeviceError(f"grads[{i}] is on cuda:{g.data.device_id} but params[{i}] on "
                              f"cuda:{p.data.device_id}")
        if where == "cuda" and _layout_key(g) != _layout_key(p):   # (NumPy's update indexes logically)
            g = _new_like(p, g.dtype, where, g)   # (a copy in p's memory order)
        elif where == "cpu" and _order(g) is None:
            g = np.ascontiguousarray(g)
        out.append(g)
    return out


def _check_states(states: list, params: list, dtypes: list, name: str, where: str) -> list:
    """State arrays (one per parameter) of the parameter's shape and the state dtype, on the
    parameters' side and device: on the GPU in the parameter's memory order (the kernels run over
    their flat memory), on the CPU in any gapless layout (NumPy indexes them logically)."""
    if len(states) != len(params):
        raise ShapeError(f"{name}: expected {len(params)} arrays (one per parameter), got {len(states)}")
    if states and _placement(states, name) != where:
        raise DeviceError(f"{name} are on the other side from the parameters ({where} parameters)")
    if where == "cuda":
        states = _to_cupy(states, name)
    for i, (s, p) in enumerate(zip(states, params)):
        want = _state_dtype(dtypes[i])
        if s.shape != p.shape:
            raise ShapeError(f"{name}[{i}]: expected shape {p.shape} (the shape of params[{i}]), got {s.shape}")
        if s.dtype != want:
            raise DTypeError(f"{name}[{i}]: expected dtype {want} for {dtypes[i]} parameters, got {s.dtype}")
        if where == "cuda" and _layout_key(s) != _layout_key(p):
            raise ShapeError(f"{name}[{i}]: state arrays must have the memory layout of params[{i}] (strides "
                             f"{s.strides}, theirs {p.strides}; they are updated in place beside it)")
        if where == "cpu" and _order(s) is None:
            raise ShapeError(f"{name}[{i}]: state arrays must cover one gapless block of memory (strides "
                             f"{s.strides}); they are updated in place")
        check_writeable("optimizer", f"{name}[{i}]", s)
        if where == "cuda" and s.data.device_id != p.data.device_id:
            raise DeviceError(f"{name}[{i}] is on cuda:{s.data.device_id} but params[{i}] on cuda:{p.data.device_id}")
    return states


def _zeros_like_state(p, dtype_name: str, where: str):
    """Zeros of p's shape in its state dtype and layout, on p's side and device."""
    return _new_like(p, _state_dtype(dtype_name), where)


def _zeros_like(p, where: str):
    """Zeros of p's shape, dtype and layout on p's side and device."""
    return _new_like(p, p.dtype, where)


def _master_copy(p, where: str):
    """p in float32, in p's layout."""
    return _new_like(p, np.float32, where, p)


# ---- the CPU path: NumPy, per tensor, the same formulas as the CUDA kernels --------------------

def _cpu_working(p, master):
    """The array the update happens in (state dtype) and whether it must be rounded back to p."""
    if master is not None:
        return master, True
    s = np.float64 if p.dtype == np.float64 else np.float32
    if p.dtype == s:
        return p, False
    return p.astype(s), True


def _cpu_grad(g, s, maximize: bool):
    return np.negative(g, dtype=s) if maximize else g.astype(s, copy=True)


def _cpu_adam(p, g, m, v, vmax, master, c: dict) -> None:
    """One Adam/AdamW update of one tensor in place. c: the scalars of kernels.optimizers.adam_step.
    NaN and inf flow through as IEEE arithmetic makes them (no warnings)."""
    with np.errstate(all="ignore"):
        _cpu_adam_body(p, g, m, v, vmax, master, c)


def _cpu_adam_body(p, g, m, v, vmax, master, c: dict) -> None:
    x, round_back = _cpu_working(p, master)
    s = x.dtype.type
    gg = _cpu_grad(g, s, c["maximize"])
    if c["wd"] != 0:
        if c["decoupled"]:
            x *= s(1.0 - c["lr"] * c["wd"])
        else:
            gg += s(c["wd"]) * x
    w = s(1.0 - c["beta1"])
    if w < 0.5:  # torch.lerp's two forms, exact at either end of the weight range
        m += w * (gg - m)
    else:
        m[...] = gg - (gg - m) * (s(1) - w)
    v *= s(c["beta2"])
    v += (s(1.0 - c["beta2"]) * gg) * gg
    vn = v
    if vmax is not None:
        np.maximum(vmax, v, out=vmax)  # propagates NaN, as torch.maximum
        vn = vmax
    denom = np.sqrt(vn) / s(c["bc2_sqrt"]) + s(c["eps"])
    x += s(-c["step_size"]) * (m / denom)
    if round_back:
        p[...] = x.astype(p.dtype)


def _cpu_sgd(p, g, buf, master, c: dict) -> None:
    """One SGD update of one tensor in place. c: the scalars of kernels.optimizers.sgd_step."""
    with np.errstate(all="ignore"):
        _cpu_sgd_body(p, g, buf, master, c)


def _cpu_sgd_body(p, g, buf, master, c: dict) -> None:
    x, round_back = _cpu_working(p, master)
    s = x.dtype.type
    gg = _cpu_grad(g, s, c["maximize"])
    if c["wd"] != 0:
        gg += s(c["wd"]) * x
    if buf is not None:
        if c["first_step"]:
            buf[...] = gg
        else:
            buf *= s(c["momentum"])
            buf += s(1.0 - c["dampening"]) * gg
        gg = gg + s(c["momentum"]) * buf if c["nesterov"] else buf
    x += s(-c["lr"]) * gg
    if round_back:
        p[...] = x.astype(p.dtype)


def _adam_scalars(h: OptimizerState, step: int) -> dict:
    beta1, beta2 = (float(b) for b in h.betas)
    return {"lr": float(h.lr), "beta1": beta1, "beta2": beta2, "eps": float(h.eps),
            "wd": float(h.weight_decay), "decoupled": bool(h.decoupled_weight_decay),
            "maximize": bool(h.maximize), "step": step,
            "step_size": float(h.lr) / (1.0 - beta1 ** step), "bc2_sqrt": (1.0 - beta2 ** step) ** 0.5}


def _sgd_scalars(h: OptimizerState) -> dict:
    return {"lr": float(h.lr), "wd": float(h.weight_decay), "momentum": float(h.momentum),
            "dampening": float(h.dampening), "nesterov": bool(h.nesterov), "maximize": bool(h.maximize),
            "first_step": h.step == 0}


# ---- the CUDA path: groups of one device and dtype, one launch each -------------------------------

class _CudaGroups:
    """The multi-tensor tables of one list of CuPy parameters and their states: one table (one
    launch per step) for each (device, dtype, master weights) among the parameters."""

    def __init__(self, params: list, dtypes: list, states: list[list], masters: list | None):
        from .kernels import optimizers as K
        from .runtime import _cupy
        cp = _cupy.cupy()
        by_key: dict = collections.defaultdict(list)
        for i, p in enumerate(params):
            has_master = masters is not None and masters[i] is not None
            by_key[(p.data.device_id, dtypes[i], has_master)].append(i)
        self.groups = []
        for (dev, dt, has_master), idx in by_key.items():
            with cp.cuda.Device(dev):
                table = K.TensorTable([params[i] for i in idx], [[lst[i] for i in idx] for lst in states],
                                      [masters[i] for i in idx] if has_master else None)
            self.groups.append((dev, dt, has_master, idx, table))
        self._single = len(self.groups) == 1

    def run(self, grad_ptrs: list | None, launch) -> None:
        """Point each table at its gradients (None: where they point already) and call
        launch(table, dtype, has_master) on its device."""
        from .runtime import _cupy
        cp = _cupy.loaded_cupy()
        current = cp.cuda.runtime.getDevice()
        for dev, dt, has_master, idx, table in self.groups:
            if grad_ptrs is not None:
                table.set_grads(grad_ptrs if self._single else [grad_ptrs[i] for i in idx])
            if dev == current:
                launch(table, dt, has_master)
            else:
                with cp.cuda.Device(dev):
                    launch(table, dt, has_master)


# The functional API's tables, keyed by the addresses and sizes they hold (kernels.optimizers.
# table_key): a training loop that passes the same arrays every step builds its table once.
_TABLE_CACHE: collections.OrderedDict = collections.OrderedDict()
_TABLE_CACHE_SIZE = 16


def _cached_groups(kind: str, params, dtypes, states, masters) -> _CudaGroups:
    from .kernels import optimizers as K
    key = (kind, tuple(dtypes), tuple(p.data.device_id for p in params),
           K.table_key(params, states, [m for m in masters if m is not None] if masters else None),
           tuple(m is not None for m in masters) if masters else None)
    g = _TABLE_CACHE.get(key)
    if g is None:
        g = _TABLE_CACHE[key] = _CudaGroups(params, dtypes, states, masters)
        while len(_TABLE_CACHE) > _TABLE_CACHE_SIZE:
            _TABLE_CACHE.popitem(last=False)
    else:
        _TABLE_CACHE.move_to_end(key)
    return g


def _refuse_capture(op: str) -> None:
    """The functional updates bake the step's scalars into their launch: refused under capture."""
    graphs = sys.modules.get("cudakit.graphs")
    if graphs is not None and graphs.capturing() is not None:
        raise graphs.GraphCaptureError(
            f"{op}: the functional update bakes this step's learning rate and bias corrections into the "
            f"captured launch; capture an optimizer object's step() (cudakit.SGD, Adam, AdamW) instead")


def _launch_adam(c: dict, amsgrad: bool, dyn=None):
    """launch(table, dtype, has_master) of one Adam step; dyn: {(device, state dtype): device
    array} the kernels read the per-step scalars from (CUDA graph capture), or None."""
    from .kernels import optimizers as K

    def launch(table, dt, has_master):
        K.adam_step(table, dt, has_master, amsgrad, lr=c["lr"], beta1=c["beta1"], beta2=c["beta2"],
                    eps=c["eps"], weight_decay=c["wd"], decoupled=c["decoupled"], maximize=c["maximize"],
                    step=c["step"], dyn=None if dyn is None else dyn[(table.device, K.state_dtype(dt))])
    return launch


def _launch_sgd(c: dict, dyn=None):
    """launch(table, dtype, has_master) of one SGD step; dyn as _launch_adam's."""
    from .kernels import optimizers as K

    def launch(table, dt, has_master):
        K.sgd_step(table, dt, has_master, lr=c["lr"], momentum=c["momentum"], dampening=c["dampening"],
                   nesterov=c["nesterov"], weight_decay=c["wd"], maximize=c["maximize"],
                   first_step=c["first_step"], dyn=None if dyn is None else dyn[(table.device, K.state_dtype(dt))])
    return launch


# ---- the functional API ----------------------------------------------------------------------------

def _check_state_type(state) -> None:
    if not isinstance(state, OptimizerState):
        raise ArgumentTypeError(f"optimizer_state must be a cudakit.optim.OptimizerState (got {type(state).__name__})")


def _prepare(params, gradients, named_states: dict, master):
    """Lists, side, dtypes and checked arrays of one functional update (its OptimizerState checked
    by the caller first)."""
    ps, single = _as_list(params, "params")
    gs, _ = _as_list(gradients, "gradients")
    where = _placement(ps, "params")
    if where == "cuda":
        ps = _to_cupy(ps, "params")
    dtypes = _check_params(ps)
    gs = _check_grads(gs, ps, dtypes, where)
    states = [_check_states(_as_list(v, k)[0], ps, dtypes, k, where) for k, v in named_states.items()]
    masters = None
    if master is not None:
        ms = _as_list(master, "master")[0]
        if len(ms) != len(ps):
            raise ShapeError(f"master: expected {len(ps)} entries (one per parameter, None for none), got {len(ms)}")
        masters = []
        for i, (m, p) in enumerate(zip(ms, ps)):
            if m is None or dtypes[i] not in ("float16", "bfloat16"):
                if m is not None:
                    raise DTypeError(f"master[{i}]: master weights are for float16/bfloat16 parameters, "
                                     f"params[{i}] is {dtypes[i]}")
                masters.append(None)
                continue
            masters.append(_check_states([m], [p], ["float32"], f"master[{i}]", where)[0])
    written = {f"params[{i}]": p for i, p in enumerate(ps)}
    for k, lst in zip(named_states, states):
        written.update((f"{k}[{i}]", s) for i, s in enumerate(lst))
    written.update((f"master[{i}]", m) for i, m in enumerate(masters or ()))
    check_distinct("optimizer", written)   # one array in two roles would be updated twice
    return ps, single, where, dtypes, gs, states, masters


def sgd_update(params, gradients, momentum, optimizer_state: OptimizerState, *, master=None):
    """One SGD step, in place: params[i] -= lr * direction (torch.optim.SGD's formulas).

    params, gradients: arrays (or lists of arrays) of one shape per index, float32/float64/
        float16/bfloat16, gradients in the parameter's dtype; all NumPy or all CUDA arrays.
    momentum: the momentum buffers, float32 (float64 for float64 params), parameter shapes; set to
        the gradient on the step taken at optimizer_state.step == 0. None when
        optimizer_state.momentum == 0.
    optimizer_state: lr, weight_decay, momentum, dampening, nesterov, maximize, step; its step
        is incremented.
    master: optional float32 master weights for 16-bit params (None entries for others).

    Returns `params`. Raises ShapeError / DTypeError / DeviceError naming the argument and index.
    """
    h = optimizer_state
    _check_state_type(h)
    named = {}
    if _real(h.momentum, "momentum") != 0:
        if momentum is None:
            raise ArgumentError("optimizer_state.momentum != 0 needs momentum buffers (got momentum=None)")
        named["momentum"] = momentum
    h.validate()
    ps, single, where, dtypes, gs, states, masters = _prepare(params, gradients, named, master)
    c = _sgd_scalars(h)
    bufs = states[0] if states else [None] * len(ps)
    if where == "cpu":
        for i, p in enumerate(ps):
            _cpu_sgd(p, gs[i], bufs[i], masters[i] if masters else None, c)
    elif ps:
        _refuse_capture("sgd_update")
        _cached_groups("sgd", ps, dtypes, states, masters).run([g.data.ptr for g in gs], _launch_sgd(c))
    h.step += 1
    return params


def adam_update(params, gradients, m_buffer, v_buffer, optimizer_state: OptimizerState, *,
                v_max=None, master=None):
    """One Adam (or AdamW, with optimizer_state.decoupled_weight_decay) step, in place
    (torch.optim.Adam's formulas).

    params, gradients: arrays (or lists of arrays) of one shape per index, float32/float64/
        float16/bfloat16, gradients in the parameter's dtype; all NumPy or all CUDA arrays.
    m_buffer, v_buffer: first and second moment estimates (exp_avg, exp_avg_sq), float32
        (float64 for float64 params), parameter shapes, zeros before the first step.
    optimizer_state: lr, betas, eps, weight_decay, amsgrad, decoupled_weight_decay, maximize, step;
        its step is incremented first and the bias corrections use the new value.
    v_max: the running maximum of v_buffer (AMSGrad only, required then).
    master: optional float32 master weights for 16-bit params (None entries for others).

    Returns `params`. Raises ShapeError / DTypeError / DeviceError naming the argument and index.
    """
    h = optimizer_state
    _check_state_type(h)
    h.validate()   # (before its amsgrad is read: a string there would count as True)
    named = {"m_buffer": m_buffer, "v_buffer": v_buffer}
    if h.amsgrad:
        if v_max is None:
            raise ArgumentError("optimizer_state.amsgrad needs v_max buffers (got v_max=None)")
        named["v_max"] = v_max
    ps, single, where, dtypes, gs, states, masters = _prepare(params, gradients, named, master)
    c = _adam_scalars(h, h.step + 1)
    if where == "cpu":
        vmaxes = states[2] if h.amsgrad else [None] * len(ps)
        for i, p in enumerate(ps):
            _cpu_adam(p, gs[i], states[0][i], states[1][i], vmaxes[i], masters[i] if masters else None, c)
    elif ps:
        _refuse_capture("adam_update")
        _cached_groups("adam", ps, dtypes, states, masters).run([g.data.ptr for g in gs],
                                                               _launch_adam(c, bool(h.amsgrad)))
    h.step += 1
    return params


# ---- optimizer objects -----------------------------------------------------------------------------

class _Optimizer:
    """Shared machinery: parameters checked once, states allocated once (zeros, the parameters'
    side and device), the CUDA tables built on the first step and reused. The parameter list and
    the arrays in it are fixed at construction (the tables hold their addresses)."""

    _name = ""
    _state_names: tuple = ()

    def __init__(self, params, hyper: OptimizerState, master_weights: bool):
        ps, _ = _as_list(params, "params")
        self._where = _placement(ps, "params")
        if self._where == "cuda":
            ps = _to_cupy(ps, "params")
        self.params = ps
        self._dtypes = _check_params(ps)
        self.hyper = hyper
        self.master_weights = check_bool("optimizer", "master_weights", master_weights)
        self._state = {k: [_zeros_like_state(p, dt, self._where) for p, dt in zip(ps, self._dtypes)]
                       for k in self._structure(hyper)}
        self._master = [_master_copy(p, self._where) if self.master_weights and dt in ("float16", "bfloat16")
                        else None for p, dt in zip(ps, self._dtypes)]
        self._groups: _CudaGroups | None = None
        self._dyn: dict | None = None   # (device, state dtype) -> per-step scalars of a captured step
        self._own_grads: tuple | None = None
        self._table_grads: str | None = None   # what the CUDA tables' gradient pointers are: "own", "last"
        self._last_ids: list = []
        self._last_alive = [False]
        self._last_refs: list = []
        # what a well-formed gradient list looks like, compared in one go on the CUDA fast path
        self._grad_sig = ([(p.shape, p.dtype, p.data.device_id, _layout_key(p)) for p in ps]
                          if self._where == "cuda" else None)

    # the subclasses say which states they keep and how a step runs
    @staticmethod
    def _structure(h: OptimizerState) -> tuple:
        """The names of the state buffers that hyper-parameters `h` need."""
        raise NotImplementedError

    def _step_cpu(self, grads) -> None:
        raise NotImplementedError

    def _launcher(self, dyn=None):
        raise NotImplementedError

    @property
    def lr(self) -> float:
        """The learning rate (settable, e.g. by a schedule)."""
        return self.hyper.lr

    @lr.setter
    def lr(self, value) -> None:
        old, self.hyper.lr = self.hyper.lr, value
        try:
            self.hyper.validate()
        except (TypeError, ValueError):
            self.hyper.lr = old
            raise

    @property
    def state(self) -> dict:
        """{state name: list of arrays, one per parameter} (live arrays, not copies)."""
        out = dict(self._state)
        if any(m is not None for m in self._master):
            out["master"] = list(self._master)
        return out

    @property
    def grads(self) -> tuple:
        """The optimizer's own gradient buffers: one array per parameter (its shape, dtype, side
        and device), zeros when first read. Write gradients into them in place (cupy.copyto, a
        kernel's `out=`) and call step() with no argument: a CUDA step over them skips every
        per-tensor check, so its host cost does not grow with the number of tensors."""
        if self._own_grads is None:
            self._own_grads = tuple(_zeros_like(p, self._where) for p in self.params)
        return self._own_grads

    def step(self, grads=None) -> None:
        """Update every parameter in place from `grads`: one array per parameter (its shape and
        dtype, on its side and device), or None for the optimizer's own buffers (`grads`).
        Raises ShapeError / DTypeError / DeviceError naming the index; nothing is updated then."""
        h = self.hyper
        h.validate()
        if self._structure(h) != tuple(self._state):
            raise ArgumentError(f"{self._name}: momentum / amsgrad cannot change between zero and non-zero "
                                f"after construction (states kept: {', '.join(self._state) or 'none'})")
        if grads is None:
            grads = self.grads
        if self._where == "cpu":
            for i, p in enumerate(self.params):   # (made read-only after construction: before any write)
                _refuse_read_only(p, f"{self._name}: params[{i}]")
            self._step_cpu(_check_grads(_as_list(grads, "grads")[0], self.params, self._dtypes, "cpu"))
        else:
            dyn = self._dynamic_buffers()
            graphs = sys.modules.get("cudakit.graphs")
            if graphs is not None and graphs.capturing() is not None:
                self._step_cuda(grads, self._launcher(dyn))
                graphs.on_replay(self._before_replay)
                return   # captured, not run: the step count advances with each replay
            self._step_cuda(grads)
        h.step += 1

    def _dynamic_buffers(self) -> dict:
        """{(device, state dtype): device array} for the per-step scalars a captured step reads
        (made on the first CUDA step, so before any capture, outside a graph's pool)."""
        if self._dyn is None:
            from .kernels import optimizers as K
            cp = sys.modules["cupy"]
            dyn = {}
            for p, dt in zip(self.params, self._dtypes):
                key = (p.data.device_id, K.state_dtype(dt))
                if key not in dyn:
                    with cp.cuda.Device(key[0]):
                        dyn[key] = cp.zeros(3, key[1])
            self._dyn = dyn
        return self._dyn

    def _before_replay(self) -> None:
        """Before each replay of a captured step: this step's scalars into the device buffers (on
        the replay stream, ahead of the graph), then count the step, as step() does."""
        cp = sys.modules["cupy"]
        for (dev, sd), buf in self._dyn.items():
            v = self._dynamic_values(sd)
            with cp.cuda.Device(dev):
                buf[:len(v)].set(v)
        self.hyper.step += 1

    def _dynamic_values(self, state_dtype: str):
        raise NotImplementedError

    def _cuda_groups(self) -> _CudaGroups:
        if self._groups is None:
            self._groups = _CudaGroups(self.params, self._dtypes, list(self._state.values()),
                                       self._master if any(m is not None for m in self._master) else None)
        return self._groups

    def _step_cuda(self, grads, launch=None) -> None:
        launch = launch or self._launcher()
        if grads is self._own_grads:  # a tuple of our own arrays: valid by construction
            ptrs = None if self._table_grads == "own" else [g.data.ptr for g in grads]
            self._cuda_groups().run(ptrs, launch)
            self._table_grads = "own"
            return
        if self._table_grads == "last" and self._same_as_last(grads):
            self._cuda_groups().run(None, launch)  # the table already points at these arrays
            return
        gs = _as_list(grads, "grads")[0]
        try:  # the common case in one comparison: CuPy arrays of the right shape, dtype, device, layout
            sig = [(g.shape, g.dtype, g.data.device_id, True if g._c_contiguous else _order(g)) for g in gs]
        except AttributeError:
            sig = None
        checked = gs if sig == self._grad_sig else _check_grads(gs, self.params, self._dtypes, "cuda")
        self._cuda_groups().run([g.data.ptr for g in checked], launch)
        # Watch the arrays only when the table points at them themselves (no contiguous copies, no
        # views of foreign tensors, whose storage could move while the object lives on).
        self._table_grads = "last" if checked is gs or all(map(operator.is_, checked, gs)) else None
        if self._table_grads == "last":
            self._watch(gs)

    def _same_as_last(self, grads) -> bool:
        """Whether `grads` holds exactly the arrays of the last step, none of which died since:
        then no id was reused, and a live CuPy array keeps its address, size and layout."""
        ids = self._last_ids
        return (self._last_alive[0] and isinstance(grads, (list, tuple)) and len(grads) == len(ids)
                and list(map(id, grads)) == ids)

    def _watch(self, gs: list) -> None:
        alive = [True]

        def died(_ref, alive=alive):
            alive[0] = False
        self._last_refs = [weakref.ref(g, died) for g in gs]
        self._last_ids = list(map(id, gs))
        self._last_alive = alive

    def zero_state(self) -> None:
        """Zero every state buffer, set step to 0, and re-read master weights from the parameters
        (so parameters changed by hand are picked up). Buffers stay in place."""
        for lst in self._state.values():
            for s in lst:
                s.fill(0)
        for p, m in zip(self.params, self._master):
            if m is not None:
                m[...] = p.astype(m.dtype)
        self.hyper.step = 0

    def state_dict(self) -> dict:
        """{"optimizer": name, "hyper": OptimizerState fields, "shapes": the parameters' shapes,
        "state": {name: [NumPy copies]}}.

        The arrays are host copies, so the dict pickles and loads onto either backend."""
        def host(x):
            return None if x is None else (x.copy() if isinstance(x, np.ndarray) else x.get())
        hyper = asdict(self.hyper)
        hyper["betas"] = list(hyper["betas"])
        return {"optimizer": self._name, "hyper": hyper, "shapes": [list(p.shape) for p in self.params],
                "state": {k: [host(x) for x in v] for k, v in self.state.items()}}

    def load_state_dict(self, sd: dict) -> None:
        """Restore hyper-parameters, step and states saved by state_dict() of an optimizer of the
        same class over parameters of the same shapes. States are copied into the existing
        buffers. Raises ValueError / ShapeError naming what does not match."""
        if not isinstance(sd, dict) or sd.get("optimizer") != self._name:
            got = sd.get("optimizer") if isinstance(sd, dict) else type(sd).__name__
            raise ArgumentError(f"not a {self._name} state dict (optimizer: {got!r})")
        hyper = _hyper_from_dict(sd.get("hyper"), self._name)
        if not isinstance(sd.get("state"), dict):
            raise ArgumentError(f"{self._name} state dict: 'state' must be a dict of lists of arrays "
                                f"(got {type(sd.get('state')).__name__}); pass what state_dict() returned")
        if self._structure(hyper) != tuple(self._state):
            raise ArgumentError(f"{self._name}: the state dict's momentum / amsgrad settings need other buffers "
                                f"({', '.join(self._structure(hyper)) or 'none'}) than this optimizer keeps "
                                f"({', '.join(self._state) or 'none'})")
        if hyper.decoupled_weight_decay != self.hyper.decoupled_weight_decay:
            raise ArgumentError(f"{self._name}: the state dict's decoupled_weight_decay differs")
        shapes = sd.get("shapes")   # (SGD without momentum keeps no state to compare shapes by;
        if shapes is not None:      # state dicts saved before 'shapes' was written load without it)
            want = [list(p.shape) for p in self.params]
            if not isinstance(shapes, (list, tuple)) or not all(isinstance(s, (list, tuple)) for s in shapes) \
                    or [list(s) for s in shapes] != want:
                raise ShapeError(f"{self._name} state dict: saved for parameters of shapes {shapes!r}; this "
                                 f"optimizer's are {want}")
        mine = self.state
        theirs = sd["state"]
        bad = [k for k, v in theirs.items() if not isinstance(v, (list, tuple))]
        if bad:
            raise ArgumentError(f"{self._name} state dict: state[{bad[0]!r}] must be a list of arrays "
                                f"(got {type(theirs[bad[0]]).__name__})")
        if set(theirs) != set(mine):
            raise ArgumentError(f"state dict holds {sorted(theirs)}, this optimizer keeps {sorted(mine)} "
                                f"(momentum / amsgrad / master weights differ)")
        for k, lst in theirs.items():
            if len(lst) != len(mine[k]):
                raise ShapeError(f"state[{k!r}]: {len(lst)} arrays for {len(mine[k])} parameters")
            for i, (src, dst) in enumerate(zip(lst, mine[k])):
                if (src is None) != (dst is None):
                    raise ArgumentError(f"state[{k!r}][{i}]: master weights present in one and not the other")
                if src is not None and not _numeric_array(src):
                    raise ArgumentError(f"state[{k!r}][{i}]: expected an array of numbers, got {type(src).__name__}")
                if src is not None and tuple(np.shape(src)) != dst.shape:
                    raise ShapeError(f"state[{k!r}][{i}]: expected shape {dst.shape}, got {tuple(np.shape(src))}")
        for k, lst in theirs.items():
            for src, dst in zip(lst, mine[k]):
                if dst is not None:
                    _copy_into(dst, src)
        self.hyper = hyper


def _numeric_array(a) -> bool:
    dt = getattr(a, "dtype", None)
    return dt is not None and (np.dtype(dt).kind in "fiu" or np.dtype(dt).name == "bfloat16")


def _hyper_from_dict(h, name: str) -> OptimizerState:
    """The OptimizerState a state dict's 'hyper' entry describes, or ArgumentError naming what is
    missing or wrong (no KeyError/TypeError from deep inside)."""
    if not isinstance(h, dict):
        raise ArgumentError(f"{name} state dict: 'hyper' must be a dict of OptimizerState fields (got "
                            f"{type(h).__name__}); pass what state_dict() returned")
    fields = set(OptimizerState.__dataclass_fields__)
    unknown = sorted(set(h) - fields)
    if unknown:
        raise ArgumentError(f"{name} state dict: 'hyper' has unknown fields {unknown}; known: {sorted(fields)}")
    if "step" not in h:   # (a default of 0 would silently restart Adam's bias correction)
        raise ArgumentError(f"{name} state dict: 'hyper' has no 'step'; pass what state_dict() returned")
    betas = h.get("betas", OptimizerState.betas)
    if not isinstance(betas, (list, tuple)):
        raise ArgumentError(f"{name} state dict: hyper['betas'] must be a pair (got {betas!r})")
    return OptimizerState(**{**h, "betas": tuple(betas)})


def _copy_into(dst, src) -> None:
    src = np.asarray(src) if isinstance(src, np.ndarray) or not hasattr(src, "get") else src.get()
    if isinstance(dst, np.ndarray):
        dst[...] = src.astype(dst.dtype, copy=False)
    elif dst.flags.c_contiguous:
        dst.set(np.ascontiguousarray(src.astype(dst.dtype, copy=False)))
    else:   # a parameter's layout other than C: element by element through a device copy
        from .runtime import _cupy
        with _cupy.cupy().cuda.Device(dst.data.device_id):
            dst[...] = _cupy.cupy().asarray(np.ascontiguousarray(src.astype(dst.dtype, copy=False)))


class SGD(_Optimizer):
    """Stochastic gradient descent with optional momentum, dampening, Nesterov momentum and weight
    decay (torch.optim.SGD). params: a list of arrays (see the module docstring) updated in place
    by step(grads); lr in parameter units per unit of gradient.

    The momentum buffer (float32; float64 for float64 params) starts as the first gradient.
    master_weights keeps float32 master copies of float16/bfloat16 parameters.
    """

    _name = "SGD"

    def __init__(self, params, lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0, *, maximize: bool = False,
                 master_weights: bool = False):
        hyper = OptimizerState(lr=lr, weight_decay=weight_decay, momentum=momentum, dampening=dampening,
                               nesterov=nesterov, maximize=maximize)
        super().__init__(params, hyper, master_weights)

    @staticmethod
    def _structure(h: OptimizerState) -> tuple:
        return ("momentum_buffer",) if h.momentum != 0 else ()

    def _step_cpu(self, grads) -> None:
        c = _sgd_scalars(self.hyper)
        bufs = self._state.get("momentum_buffer") or [None] * len(self.params)
        for i, p in enumerate(self.params):
            _cpu_sgd(p, grads[i], bufs[i], self._master[i], c)

    def _launcher(self, dyn=None):
        return _launch_sgd(_sgd_scalars(self.hyper), dyn)

    def _dynamic_values(self, state_dtype: str):
        from .kernels import optimizers as K
        return K.sgd_dynamic(state_dtype, lr=float(self.hyper.lr), first_step=self.hyper.step == 0)


class Adam(_Optimizer):
    """Adam (torch.optim.Adam): bias-corrected first and second moment estimates, optional L2
    weight decay added to the gradient, AMSGrad. params: a list of arrays (see the module
    docstring) updated in place by step(grads).

    States exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad): float32 (float64 for float64
    params), zeros at the start. master_weights keeps float32 master copies of float16/bfloat16
    parameters.
    """

    _name = "Adam"
    _decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, master_weights: bool = False, *,
                 maximize: bool = False):
        hyper = OptimizerState(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                               decoupled_weight_decay=self._decoupled, maximize=maximize)
        super().__init__(params, hyper, master_weights)

    @staticmethod
    def _structure(h: OptimizerState) -> tuple:
        return ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if h.amsgrad else ())

    def _step_cpu(self, grads) -> None:
        c = _adam_scalars(self.hyper, self.hyper.step + 1)
        st = self._state
        vmax = st.get("max_exp_avg_sq") or [None] * len(self.params)
        for i, p in enumerate(self.params):
            _cpu_adam(p, grads[i], st["exp_avg"][i], st["exp_avg_sq"][i], vmax[i], self._master[i], c)

    def _launcher(self, dyn=None):
        return _launch_adam(_adam_scalars(self.hyper, self.hyper.step + 1), bool(self.hyper.amsgrad), dyn)

    def _dynamic_values(self, state_dtype: str):
        from .kernels import optimizers as K
        c = _adam_scalars(self.hyper, self.hyper.step + 1)
        return K.adam_dynamic(state_dtype, lr=c["lr"], beta1=c["beta1"], beta2=c["beta2"], weight_decay=c["wd"],
                              step=c["step"])


class AdamW(Adam):
    """AdamW (torch.optim.AdamW): Adam with decoupled weight decay, parameters scaled by
    1 - lr * weight_decay before each update. Arguments as Adam's; weight_decay defaults to 1e-2."""

    _name = "AdamW"
    _decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, master_weights: bool = False, *,
                 maximize: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, master_weights, maximize=maximize)
