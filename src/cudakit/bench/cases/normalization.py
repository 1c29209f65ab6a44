"""Benchmark cases: layernorm, rmsnorm (forward and backward) and batch_norm (training forward and
backward), against torch on the GPU and NumPy on the CPU.

Bytes, each array read or written once (the least any implementation must move):
  layernorm forward:  read x, weight, bias; write y                (2*rows*cols + 2*cols) * itemsize
  rmsnorm forward:    read x, weight; write y                      (2*rows*cols + cols) * itemsize
  layernorm backward: read dy, x, weight; write dx, dweight, dbias (3*rows*cols + 3*cols) * itemsize
  rmsnorm backward:   read dy, x, weight; write dx, dweight        (3*rows*cols + 2*cols) * itemsize
  (the per-row statistics, rows * 4 bytes each, are left out)
  batch_norm training forward:  read x, write y                    2 * N*C*H*W * itemsize
  batch_norm training backward: read dy, x; write dx               3 * N*C*H*W * itemsize
cudakit is called through the public functions when they exist (cudakit.layernorm, ...), else
through the backend modules directly (cudakit.kernels.normalization on the GPU,
cudakit.backends.cpu_normalization on the CPU).
"""
from __future__ import annotations

import numpy as np

import cudakit

from ..case import Case, Env, check_batch

_ITEM = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
EPS = 1e-5


def _impl(env: Env):
    """The module holding cudakit's normalization functions for this environment."""
    if env.gpu:
        from ...kernels import normalization
        return normalization
    from ...backends import cpu_normalization
    return cpu_normalization


def _rand(env: Env, shape, dtype: str, seed: int, loc: float = 0.0):
    xp = env.xp
    n = int(np.prod(shape))
    if env.gpu:
        x = xp.random.default_rng(seed).standard_normal(n, dtype=xp.float32)
    else:
        x = np.random.default_rng(seed).standard_normal(n, dtype=np.float32)
    x += np.float32(loc)
    return x.reshape(shape).astype(cudakit.get_backend("cuda" if env.gpu else "cpu").empty(0, dtype).dtype)


def _torch(env: Env, *arrays):
    return tuple(env.torch.from_dlpack(a) for a in arrays)


def _np_layernorm(x, w, b):
    xa = x.astype(np.float32)
    mu = xa.mean(axis=1, keepdims=True)
    xc = xa - mu
    y = xc / np.sqrt((xc * xc).mean(axis=1, keepdims=True) + EPS)
    return (y * w.astype(np.float32) + b.astype(np.float32)).astype(x.dtype)


def _np_rmsnorm(x, w):
    xa = x.astype(np.float32)
    return (xa / np.sqrt((xa * xa).mean(axis=1, keepdims=True) + EPS) * w.astype(np.float32)).astype(x.dtype)


def _forward(env: Env, kind: str, rows: int, cols: int, dtype: str) -> Case:
    def setup():
        x = _rand(env, (rows, cols), dtype, 1)
        w, b = _rand(env, (cols,), dtype, 2, loc=1.0), _rand(env, (cols,), dtype, 3)
        public = getattr(cudakit, kind, None)
        impl = _impl(env)
        if kind == "layernorm":
            prov = {"cudakit": (lambda: public(x, w, b, eps=EPS)) if public else
                    (lambda: impl.layernorm_forward(x, w, b, EPS))}
        else:
            prov = {"cudakit": (lambda: public(x, w, eps=EPS)) if public else
                    (lambda: impl.rmsnorm_forward(x, w, EPS))}
        if env.gpu and env.torch is not None:
            f = env.torch.nn.functional
            tx, tw, tb = _torch(env, x, w, b)
            prov["torch"] = ((lambda: f.layer_norm(tx, (cols,), tw, tb, EPS)) if kind == "layernorm"
                             else (lambda: f.rms_norm(tx, (cols,), tw, EPS)))
        elif not env.gpu:
            prov["numpy"] = (lambda: _np_layernorm(x, w, b)) if kind == "layernorm" else (lambda: _np_rmsnorm(x, w))
        return prov
    def check():
        x = _rand(env, check_batch((rows, cols)), dtype, 21)
        w, b = _rand(env, (cols,), dtype, 22, loc=1.0), _rand(env, (cols,), dtype, 23)
        if kind == "layernorm":
            return (lambda x, w, b: cudakit.layernorm(x, w, b, eps=EPS)), (x, w, b)
        return (lambda x, w: cudakit.rmsnorm(x, w, eps=EPS)), (x, w)
    params = 2 if kind == "layernorm" else 1
    return Case(kind, "normalization", (rows, cols), dtype, (2 * rows * cols + params * cols) * _ITEM[dtype], setup,
                check=check)


def _backward(env: Env, kind: str, rows: int, cols: int, dtype: str) -> Case:
    def setup():
        x, dy = _rand(env, (rows, cols), dtype, 4), _rand(env, (rows, cols), dtype, 5)
        w, b = _rand(env, (cols,), dtype, 6, loc=1.0), _rand(env, (cols,), dtype, 7)
        impl = _impl(env)
        if kind == "layernorm":
            _, mean, rstd = impl.layernorm_forward(x, w, b, EPS)
            public = getattr(cudakit, "layernorm_backward", None)
            prov = {"cudakit": (lambda: public(dy, x, w, mean, rstd)) if public else
                    (lambda: impl.layernorm_backward(dy, x, w, mean, rstd))}
        else:
            _, rstd = impl.rmsnorm_forward(x, w, EPS)
            public = getattr(cudakit, "rmsnorm_backward", None)
            prov = {"cudakit": (lambda: public(dy, x, w, rstd)) if public else
                    (lambda: impl.rmsnorm_backward(dy, x, w, rstd))}
        if env.gpu and env.torch is not None:
            t = env.torch
            tx, tdy, tw, tb = _torch(env, x, dy, w, b)
            if kind == "layernorm":  # the ATen kernels autograd runs: dx, then dweight and dbias
                _, tm, tr = t.ops.aten.native_layer_norm(tx, (cols,), tw, tb, EPS)
                prov["torch"] = lambda: t.ops.aten.native_layer_norm_backward(
                    tdy, tx, (cols,), tm, tr, tw, tb, [True, True, True])
            else:
                txr, twr = tx.detach().requires_grad_(True), tw.detach().requires_grad_(True)
                y = t.nn.functional.rms_norm(txr, (cols,), twr, EPS)
                prov["torch"] = lambda: t.autograd.grad(y, (txr, twr), tdy, retain_graph=True)
        elif not env.gpu:
            prov["numpy"] = lambda: _np_norm_backward(kind, dy, x, w)
        return prov
    def check():   # the forward's statistics, then the backward, on each backend
        x, dy = _rand(env, check_batch((rows, cols)), dtype, 24), _rand(env, check_batch((rows, cols)), dtype, 25)
        w, b = _rand(env, (cols,), dtype, 26, loc=1.0), _rand(env, (cols,), dtype, 27)
        if kind == "layernorm":
            return (lambda dy, x, w, b: cudakit.layernorm_backward(
                dy, x, w, *cudakit.layernorm_with_stats(x, w, b, eps=EPS)[1:])), (dy, x, w, b)
        return (lambda dy, x, w: cudakit.rmsnorm_backward(
            dy, x, w, cudakit.rmsnorm_with_stats(x, w, eps=EPS)[1])), (dy, x, w)
    n_params = 3 if kind == "layernorm" else 2
    return Case(f"{kind}_backward", "normalization", (rows, cols), dtype,
                (3 * rows * cols + n_params * cols) * _ITEM[dtype], setup, check=check)


def _np_norm_backward(kind, dy, x, w):
    """Textbook NumPy backward in float32 (statistics recomputed, as a NumPy user would)."""
    xa, d, wa = x.astype(np.float32), dy.astype(np.float32), w.astype(np.float32)
    if kind == "layernorm":
        xc = xa - xa.mean(axis=1, keepdims=True)
        r = 1 / np.sqrt((xc * xc).mean(axis=1, keepdims=True) + EPS)
        xh = xc * r
        g = d * wa
        dx = r * (g - g.mean(axis=1, keepdims=True) - xh * (g * xh).mean(axis=1, keepdims=True))
        return dx.astype(x.dtype), (d * xh).sum(axis=0), d.sum(axis=0)
    r = 1 / np.sqrt((xa * xa).mean(axis=1, keepdims=True) + EPS)
    xh = xa * r
    g = d * wa
    dx = r * (g - xh * (g * xh).mean(axis=1, keepdims=True))
    return dx.astype(x.dtype), (d * xh).sum(axis=0)


def _batch_norm(env: Env, shape: tuple, dtype: str, backward: bool) -> Case:
    c = shape[1]

    def setup():
        x, dy = _rand(env, shape, dtype, 8), _rand(env, shape, dtype, 9)
        g, b = _rand(env, (c,), dtype, 10, loc=1.0), _rand(env, (c,), dtype, 11)
        rm, rv = _rand(env, (c,), dtype, 12) * 0, _rand(env, (c,), dtype, 13) * 0 + 1
        impl = _impl(env)
        if backward:
            _, sm, si = impl.batch_norm_forward(x, g, b, rm, rv, True, 0.1, EPS)
            public = getattr(cudakit, "batch_norm_backward", None)
            prov = {"cudakit": (lambda: public(dy, x, g, sm, si)) if public else
                    (lambda: impl.batch_norm_backward(dy, x, g, sm, si))}
        else:
            public = getattr(cudakit, "batch_norm", None)
            prov = {"cudakit": (lambda: public(x, g, b, rm, rv, training=True, momentum=0.1, eps=EPS)) if public
                    else (lambda: impl.batch_norm_forward(x, g, b, rm, rv, True, 0.1, EPS))}
        if env.gpu and env.torch is not None:
            t = env.torch
            f = t.nn.functional
            tx, tdy, tg, tb, trm, trv = _torch(env, x, dy, g, b, rm.copy(), rv.copy())
            if backward:
                txr, tgr, tbr = (a.detach().requires_grad_(True) for a in (tx, tg, tb))
                y = f.batch_norm(txr, trm, trv, tgr, tbr, True, 0.1, EPS)
                prov["torch"] = lambda: t.autograd.grad(y, (txr, tgr, tbr), tdy, retain_graph=True)
            else:
                prov["torch"] = lambda: f.batch_norm(tx, trm, trv, tg, tb, True, 0.1, EPS)
        elif not env.gpu:
            prov["numpy"] = lambda: _np_batch_norm(x, g, b)
        return prov
    def check():
        x, dy = _rand(env, check_batch(shape), dtype, 28), _rand(env, check_batch(shape), dtype, 29)
        g, b = _rand(env, (c,), dtype, 30, loc=1.0), _rand(env, (c,), dtype, 31)
        if backward:
            return (lambda dy, x, g, b: cudakit.batch_norm_backward(
                dy, x, g, *cudakit.batch_norm_with_stats(x, g, b, training=True, eps=EPS)[1:])), (dy, x, g, b)
        return (lambda x, g, b: cudakit.batch_norm(x, g, b, training=True, eps=EPS)), (x, g, b)
    n = int(np.prod(shape))
    return Case("batch_norm_backward" if backward else "batch_norm", "normalization", shape, dtype,
                (3 if backward else 2) * n * _ITEM[dtype], setup, note="training mode", check=check)


def _np_batch_norm(x, g, b):
    xa = x.astype(np.float32)
    axes = (0,) + tuple(range(2, x.ndim))
    shp = (1, -1) + (1,) * (x.ndim - 2)
    mu = xa.mean(axis=axes).reshape(shp)
    var = xa.var(axis=axes).reshape(shp)
    y = (xa - mu) / np.sqrt(var + EPS) * g.astype(np.float32).reshape(shp) + b.astype(np.float32).reshape(shp)
    return y.astype(x.dtype)


def cases(env: Env) -> list[Case]:
    if env.gpu:
        shapes = [(8192, 4096), (1024, 16384)] if env.quick else [(32768, 4096), (4096, 16384)]
        bn = (8, 64, 128, 128) if env.quick else (32, 64, 128, 128)
    else:
        shapes = [(256, 4096), (64, 16384)] if env.quick else [(2048, 4096), (512, 16384)]
        bn = (4, 64, 32, 32) if env.quick else (8, 64, 64, 64)
    out = []
    for dtype in env.dtypes:
        for rows, cols in shapes:
            for kind in ("layernorm", "rmsnorm"):
                out.append(_forward(env, kind, rows, cols, dtype))
                out.append(_backward(env, kind, rows, cols, dtype))
        out.append(_batch_norm(env, bn, dtype, backward=False))
        out.append(_batch_norm(env, bn, dtype, backward=True))
    return out
