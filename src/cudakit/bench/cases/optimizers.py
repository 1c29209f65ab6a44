"""Benchmark cases: fused multi-tensor optimizer steps (Adam, AdamW with master weights, SGD with
momentum) over many tensors, against torch.optim's fused implementations on the same arrays.

Bytes per parameter element, each array read or written once (float32 states):
  Adam, float32 params:       read param, grad, exp_avg, exp_avg_sq; write param, exp_avg,
                              exp_avg_sq                                          = 7 * 4 = 28
  AdamW, bfloat16 params with float32 master weights: read master (4), grad (2), exp_avg (4),
                              exp_avg_sq (4); write master (4), param (2), exp_avg (4), exp_avg_sq (4)
                                                                                  = 28
  SGD with momentum, float32: read param, grad, buffer; write param, buffer       = 5 * 4 = 20
Each timed call is one optimizer step (host work included: cudakit's step checks its arguments in
Python; torch's step builds its tensor lists in Python).
"""
from __future__ import annotations

import numpy as np

from ..case import CHECK_ELEMENTS, Case, Env

ADAM_BYTES = 28
SGD_MOMENTUM_BYTES = 20


def _arrays(env: Env, n_tensors: int, size: int, dtype: str, seed: int) -> list:
    """n_tensors arrays of `size` elements ~ N(0, 1) in `dtype` (float32 or bfloat16)."""
    xp = env.xp
    if env.gpu:
        g = xp.random.default_rng(seed)
        flat = g.standard_normal(n_tensors * size, dtype=xp.float32)
    else:
        flat = np.random.default_rng(seed).standard_normal(n_tensors * size, dtype=np.float32)
    if dtype == "bfloat16":
        import ml_dtypes
        host = (flat.get() if env.gpu else flat).astype(ml_dtypes.bfloat16)
        flat = xp.asarray(host)
    # separate allocations, as a model's parameters are (not views of one buffer)
    return [flat[i * size:(i + 1) * size].copy() for i in range(n_tensors)]


def _torch_provider(env: Env, kind: str, params: list, grads: list, **kw):
    """torch.optim's fused optimizer over torch copies of the parameters, gradients shared
    zero-copy with cudakit's (torch.from_dlpack of the same CuPy arrays)."""
    t = env.torch
    tp = [t.from_dlpack(p.copy()) for p in params]
    for x, g in zip(tp, grads):
        x.grad = t.from_dlpack(g)
    opt = {"adam": t.optim.Adam, "sgd": t.optim.SGD}[kind](tp, fused=True, **kw)
    return opt.step


def _numpy_adam(params, grads, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    """A plain NumPy Adam (textbook expressions, temporaries and all): the CPU baseline."""
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    state = {"t": 0}

    def step():
        state["t"] += 1
        t = state["t"]
        for p, g, mi, vi in zip(params, grads, m, v):
            mi[...] = b1 * mi + (1 - b1) * g
            vi[...] = b2 * vi + (1 - b2) * g * g
            p -= np.float32(lr / (1 - b1 ** t)) * mi / (np.sqrt(vi / np.float32(1 - b2 ** t)) + np.float32(eps))
    return step


def _numpy_sgd(params, grads, lr=1e-2, momentum=0.9):
    bufs = [np.zeros_like(p) for p in params]

    def step():
        for p, g, b in zip(params, grads, bufs):
            b *= np.float32(momentum)
            b += g
            p -= np.float32(lr) * b
    return step


def _steps(kind: str, p, g):
    """Three steps of the optimizer on a copy of one tensor p with gradient g: the updated copy."""
    from cudakit import optim
    params = [p.copy()]
    opt = optim.Adam(params, lr=1e-3) if kind == "adam" else optim.SGD(params, lr=1e-2, momentum=0.9)
    for _ in range(3):
        opt.step([g])
    return params[0]


def _check(env: Env, kind: str, size: int):
    n = min(size, CHECK_ELEMENTS)
    return lambda: ((lambda p, g: _steps(kind, p, g)),
                    (_arrays(env, 1, n, "float32", 17)[0], _arrays(env, 1, n, "float32", 18)[0]))


def _adam_case(env: Env, n_tensors: int, size: int) -> Case:
    def setup():
        from cudakit import optim
        params = _arrays(env, n_tensors, size, "float32", 11)
        grads = _arrays(env, n_tensors, size, "float32", 12)
        opt = optim.Adam(params, lr=1e-3)
        prov = {"cudakit": lambda: opt.step(grads)}
        if env.gpu and env.torch is not None:
            prov["torch"] = _torch_provider(env, "adam", params, grads, lr=1e-3)
        if not env.gpu:
            prov["numpy"] = _numpy_adam([p.copy() for p in params], grads)
        return prov
    return Case("adam_step", "optimizers", (n_tensors, size), "float32", ADAM_BYTES * n_tensors * size, setup,
                note=f"{n_tensors} tensors x {size}", check=_check(env, "adam", size))


def _adam_own_grads_case(env: Env, n_tensors: int, size: int) -> Case:
    """Adam stepping over the optimizer's own gradient buffers (opt.grads, filled in place): the
    host cost no longer grows with the number of tensors. torch reads its persistent p.grad."""
    def setup():
        from cudakit import optim
        params = _arrays(env, n_tensors, size, "float32", 11)
        grads = _arrays(env, n_tensors, size, "float32", 12)
        opt = optim.Adam(params, lr=1e-3)
        for g, h in zip(opt.grads, grads):
            g[...] = h
        prov = {"cudakit": lambda: opt.step()}
        if env.gpu and env.torch is not None:
            prov["torch"] = _torch_provider(env, "adam", params, grads, lr=1e-3)
        return prov
    return Case("adam_step_own_grads", "optimizers", (n_tensors, size), "float32", ADAM_BYTES * n_tensors * size,
                setup, note=f"{n_tensors} tensors x {size}, step() over opt.grads")


def _adamw_master_case(env: Env, n_tensors: int, size: int) -> Case:
    def setup():
        from cudakit import optim
        params = _arrays(env, n_tensors, size, "bfloat16", 13)
        grads = _arrays(env, n_tensors, size, "bfloat16", 14)
        opt = optim.AdamW(params, lr=1e-3, master_weights=True)
        return {"cudakit": lambda: opt.step(grads)}
    return Case("adamw_master_step", "optimizers", (n_tensors, size), "bfloat16", ADAM_BYTES * n_tensors * size,
                setup, note="bf16 params, fp32 master weights and states")


def _sgd_case(env: Env, n_tensors: int, size: int) -> Case:
    def setup():
        from cudakit import optim
        params = _arrays(env, n_tensors, size, "float32", 15)
        grads = _arrays(env, n_tensors, size, "float32", 16)
        opt = optim.SGD(params, lr=1e-2, momentum=0.9)
        opt.step(grads)  # past the first step, which writes the buffer without reading it
        prov = {"cudakit": lambda: opt.step(grads)}
        if env.gpu and env.torch is not None:
            step = _torch_provider(env, "sgd", params, grads, lr=1e-2, momentum=0.9)
            step()
            prov["torch"] = step
        if not env.gpu:
            prov["numpy"] = _numpy_sgd([p.copy() for p in params], grads)
        return prov
    return Case("sgd_momentum_step", "optimizers", (n_tensors, size), "float32",
                SGD_MOMENTUM_BYTES * n_tensors * size, setup, note=f"{n_tensors} tensors x {size}",
                check=_check(env, "sgd", size))


def cases(env: Env) -> list[Case]:
    if env.gpu:
        big = (20, 1 << 20) if env.quick else (100, 1 << 20)
        many = (1000, 1000) if env.quick else (10_000, 1000)
    else:
        big = (4, 1 << 18) if env.quick else (10, 1 << 20)
        many = (100, 1000) if env.quick else (1000, 1000)
    out = [_adam_case(env, *big), _adam_case(env, *many), _adam_own_grads_case(env, *many), _sgd_case(env, *big)]
    if env.gpu and "bfloat16" in env.dtypes:
        out.append(_adamw_master_case(env, *big))
    return out
