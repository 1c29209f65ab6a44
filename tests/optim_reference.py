"""Independent float64 references for the optimizers, random problems and tolerances; shared by
tests/test_optim_cpu.py and tests/gpu/test_optim_gpu.py.

The references are the textbook forms of torch.optim's algorithms (as its documentation states
them), written here without looking at cudakit's code paths: Adam divides the bias-corrected
moments (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps), SGD keeps its buffer in float64.
"""
import itertools

import ml_dtypes
import numpy as np

F32_EPS = float(np.finfo(np.float32).eps)


def np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


# (param dtype, master weights): the parameter kinds every option combination runs on
PARAM_KINDS = [("float32", False), ("float64", False), ("bfloat16", True), ("float16", True),
               ("bfloat16", False)]


def sgd_options():
    """Every valid combination of SGD's options."""
    out = []
    for mom, damp, nest, wd, mx in itertools.product([0.0, 0.9], [0.0, 0.5], [False, True], [0.0, 0.01],
                                                     [False, True]):
        if nest and (mom == 0 or damp != 0):
            continue
        if mom == 0 and damp != 0:  # dampening only acts on the momentum buffer
            continue
        out.append(dict(lr=0.02, momentum=mom, dampening=damp, nesterov=nest, weight_decay=wd, maximize=mx))
    return out


def adam_options():
    """Every combination of Adam's / AdamW's options (cls: "Adam" or "AdamW")."""
    return [dict(cls=cls, lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd, amsgrad=ams, maximize=mx)
            for cls, ams, wd, mx in itertools.product(["Adam", "AdamW"], [False, True], [0.0, 0.1], [False, True])]


def option_id(opts):
    return "-".join(f"{k}={v}" for k, v in opts.items() if k not in ("lr", "betas", "eps"))


def problem(rng, sizes, steps, dtype):
    """Parameters ~ N(0, 1) and `steps` gradient lists; each tensor's gradients have their own
    scale in [1e-3, 10], and about 1% of gradient entries are exactly 0. In `dtype`."""
    dt = np_dtype(dtype)
    params = [rng.standard_normal(n).astype(np.float32).astype(dt) for n in sizes]
    scales = 10.0 ** rng.uniform(-3, 1, len(sizes))
    grads = []
    for _ in range(steps):
        gs = []
        for n, s in zip(sizes, scales):
            g = rng.standard_normal(n) * s
            g[rng.random(n) < 0.01] = 0.0
            gs.append(g.astype(np.float32).astype(dt))
        grads.append(gs)
    return params, grads


def _xp(x):
    """The array module of x: CuPy for CuPy arrays (references run on the GPU there), else NumPy."""
    mod = type(x).__module__
    if mod.startswith("cupy"):
        import cupy
        return cupy
    return np


def _round16(xp, p, dt):
    """float64 -> 16-bit (round to nearest even) -> float64, with float16/uint32 arithmetic only
    (so it also runs on CuPy arrays, which may lack bfloat16 casts)."""
    if dt == np.float16:
        return p.astype(xp.float16).astype(xp.float64)
    u = p.astype(xp.float32).view(xp.uint32)
    r = (u + xp.uint32(0x7FFF) + ((u >> 16) & xp.uint32(1))) & xp.uint32(0xFFFF0000)
    r = xp.where(xp.isnan(p), u | xp.uint32(0x400000), r)
    return r.view(xp.float32).astype(xp.float64)


def _rounder(dtype, master, xp=np):
    """The parameter rounding after each step: none when the parameter is the float master."""
    dt = np_dtype(dtype)
    if master or dt.itemsize >= 4:
        return lambda p: p
    return lambda p: _round16(xp, p, dt)


def _f64(xp, x):
    x = xp.asarray(x)
    if x.dtype.itemsize == 2 and x.dtype != np.float16:  # bfloat16: widen through its bits
        return (x.view(xp.uint16).astype(xp.uint32) << 16).view(xp.float32).astype(xp.float64)
    return x.astype(xp.float64)


class Result(list):
    """The reference's final parameters (float64 arrays), with `budget`: per element, the sum over
    the steps of the magnitudes that an implementation rounds in its arithmetic dtype (parameter
    before and after, and the update computed from absolute values). An implementation that
    rounds each operation once is within a small multiple of eps * budget of the reference."""
    budget: list
    steps: int


def _result(ps, budget, steps):
    out = Result(p.copy() for p in ps)
    out.budget, out.steps = [b.copy() for b in budget], steps
    return out


def _last(results):
    out = None
    for out in results:
        pass
    return out


def iter_ref_sgd(params, grad_steps, dtype, master, lr, momentum=0.0, dampening=0.0, nesterov=False,
                 weight_decay=0.0, maximize=False):
    """float64 SGD: yields a Result (the parameters, unrounded master) after every step."""
    xp = _xp(params[0])
    rnd = _rounder(dtype, master, xp)
    ps = [_f64(xp, p) for p in params]
    budget = [xp.zeros_like(p) for p in ps]
    bufs, babs = [None] * len(ps), [None] * len(ps)
    for t, gs in enumerate(grad_steps, start=1):
        for i, g in enumerate(gs):
            g = _f64(xp, g)
            d = (-g if maximize else g) + weight_decay * ps[i]
            dabs = xp.abs(g) + weight_decay * xp.abs(ps[i])
            if momentum:
                if bufs[i] is None:
                    bufs[i], babs[i] = d.copy(), dabs
                else:
                    bufs[i] = momentum * bufs[i] + (1 - dampening) * d
                    babs[i] = momentum * babs[i] + abs(1 - dampening) * dabs
                d, dabs = (d + momentum * bufs[i], dabs + momentum * babs[i]) if nesterov else (bufs[i], babs[i])
            new = rnd(ps[i] - lr * d)
            budget[i] += xp.abs(ps[i]) + xp.abs(new) + lr * dabs
            ps[i] = new
        yield _result(ps, budget, t)


def iter_ref_adam(params, grad_steps, dtype, master, lr, betas, eps, weight_decay=0.0, amsgrad=False,
                  maximize=False, decoupled=False):
    """float64 Adam / AdamW (decoupled): yields a Result after every step."""
    xp = _xp(params[0])
    rnd = _rounder(dtype, master, xp)
    b1, b2 = betas
    ps = [_f64(xp, p) for p in params]
    budget = [xp.zeros_like(p) for p in ps]
    m, mabs, v, vmax = ([xp.zeros_like(p) for p in ps] for _ in range(4))
    for t, gs in enumerate(grad_steps, start=1):
        for i, g in enumerate(gs):
            g = _f64(xp, g)
            p = ps[i]
            d, dabs = (-g if maximize else g), xp.abs(g)
            if decoupled:
                p = p * (1 - lr * weight_decay)
            else:
                d, dabs = d + weight_decay * p, dabs + weight_decay * xp.abs(p)
            m[i] = b1 * m[i] + (1 - b1) * d
            mabs[i] = b1 * mabs[i] + (1 - b1) * dabs
            v[i] = b2 * v[i] + (1 - b2) * d * d
            vmax[i] = xp.maximum(vmax[i], v[i])
            denom = xp.sqrt((vmax[i] if amsgrad else v[i]) / (1 - b2 ** t)) + eps
            new = rnd(p - lr * (m[i] / (1 - b1 ** t)) / denom)
            budget[i] += xp.abs(ps[i]) + xp.abs(new) + lr * (mabs[i] / (1 - b1 ** t)) / denom
            ps[i] = new
        yield _result(ps, budget, t)


def ref_sgd(*args, **kwargs) -> "Result":
    """The parameters after the last step of iter_ref_sgd (same arguments)."""
    return _last(iter_ref_sgd(*args, **kwargs))


def ref_adam(*args, **kwargs) -> "Result":
    """The parameters after the last step of iter_ref_adam (same arguments)."""
    return _last(iter_ref_adam(*args, **kwargs))


# multiples of eps * budget allowed. The update rounds up to about 8 times on its way (moments,
# square root, bias corrections, division, product, sum) before the parameter rounds once: a single
# step can be a few eps * budget off where the parameter is near 0 (its budget is then mostly the
# update's). Over many steps errors of independent roundings mostly cancel: after 100 steps the
# worst seen over every option combination was 0.13 eps * budget (NumPy path).
ROUNDINGS = 4


def assert_close(got, want: Result, dtype, master, what="params"):
    """`got` (parameters, or master weights) against the reference within its rounding budget.

    16-bit parameters updated without master weights are compared at their own precision: 4 ulps
    of the final value plus of the trajectory's mean magnitude, since a rounding decision that
    differs once between float32 and float64 arithmetic leaves the two a 16-bit ulp apart."""
    dt = np_dtype(dtype)
    for i, (g, w) in enumerate(zip(got, want)):
        g, w, budget = _host(g).astype(np.float64), _host(w), _host(want.budget[i])
        err = np.abs(g - w)
        if dt.itemsize == 2 and not master:
            e16 = float(ml_dtypes.finfo(dt).eps)
            bound = 4 * e16 * (np.abs(w) + budget / max(want.steps, 1))
        else:
            e = float(np.finfo(np.float64 if dt == np.float64 else np.float32).eps)
            bound = ROUNDINGS * e * budget
        bad = ~(err <= bound)
        assert not bad.any(), (f"{what}[{i}] (n={w.size}): {int(bad.sum())} elements off, worst "
                               f"{float(np.max(err / bound)):.3g}x the tolerance")


def _host(x):
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)
