"""Benchmark cases: softmax forward and backward, log_softmax forward, and cross_entropy forward +
backward, against torch on the GPU and NumPy on the CPU.

Bytes, each array read or written once (the least any implementation must move):
  softmax / log_softmax forward: read x, write y                    2 * rows*cols * itemsize
  softmax backward:              read g, y; write dx                 3 * rows*cols * itemsize
  cross_entropy fwd + bwd:       read logits, write dlogits, read targets (int64)
                                 2 * N*C * itemsize + 8 * N
torch: F.softmax / F.log_softmax, aten._softmax_backward_data, and F.cross_entropy then
autograd.grad on a requires_grad leaf (forward and backward timed together). cudakit is called
through the backend (get_backend("cuda"/"cpu")); its cross_entropy is the fused
cross_entropy_with_grad.
"""
from __future__ import annotations

import numpy as np

import cudakit

from ..case import Case, Env, check_batch

_ITEM = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def _backend(env: Env):
    return cudakit.get_backend("cuda" if env.gpu else "cpu")


def _rand(env: Env, shape, dtype: str, seed: int, scale: float = 1.0):
    xp = env.xp
    n = int(np.prod(shape))
    if env.gpu:
        x = xp.random.default_rng(seed).standard_normal(n, dtype=xp.float32)
    else:
        x = np.random.default_rng(seed).standard_normal(n, dtype=np.float32)
    x *= np.float32(scale)
    return x.reshape(shape).astype(_backend(env).empty(0, dtype).dtype)


def _np_softmax(x, log=False):
    xa = x.astype(np.float32)
    xc = xa - xa.max(axis=1, keepdims=True)
    if log:
        return (xc - np.log(np.exp(xc).sum(axis=1, keepdims=True))).astype(x.dtype)
    e = np.exp(xc)
    return (e / e.sum(axis=1, keepdims=True)).astype(x.dtype)


def _forward(env: Env, rows: int, cols: int, dtype: str, log: bool) -> Case:
    def setup():
        be = _backend(env)
        x = _rand(env, (rows, cols), dtype, 1, 3.0)
        prov = {"cudakit": (lambda: be.log_softmax(x)) if log else (lambda: be.softmax(x))}
        if env.gpu and env.torch is not None:
            f = env.torch.nn.functional
            tx = env.torch.from_dlpack(x)
            prov["torch"] = (lambda: f.log_softmax(tx, -1)) if log else (lambda: f.softmax(tx, -1))
        elif not env.gpu:
            prov["numpy"] = lambda: _np_softmax(x, log)
        return prov
    return Case("log_softmax" if log else "softmax", "softmax", (rows, cols), dtype,
                2 * rows * cols * _ITEM[dtype], setup,
                check=lambda: (cudakit.log_softmax if log else cudakit.softmax,
                               (_rand(env, check_batch((rows, cols)), dtype, 6, 3.0),)))


def _backward(env: Env, rows: int, cols: int, dtype: str) -> Case:
    def setup():
        be = _backend(env)
        x, g = _rand(env, (rows, cols), dtype, 2, 3.0), _rand(env, (rows, cols), dtype, 3)
        y = be.softmax(x)
        prov = {"cudakit": lambda: be.softmax_backward(g, y)}
        if env.gpu and env.torch is not None:
            t = env.torch
            tg, ty = t.from_dlpack(g), t.from_dlpack(y)
            prov["torch"] = lambda: t.ops.aten._softmax_backward_data(tg, ty, -1, ty.dtype)
        elif not env.gpu:
            def np_bwd():
                ga, ya = g.astype(np.float32), y.astype(np.float32)
                return (ya * (ga - (ga * ya).sum(axis=1, keepdims=True))).astype(y.dtype)
            prov["numpy"] = np_bwd
        return prov
    def check():
        x, g = _rand(env, check_batch((rows, cols)), dtype, 7, 3.0), _rand(env, check_batch((rows, cols)), dtype, 8)
        return cudakit.softmax_backward, (g, cudakit.softmax(x))
    return Case("softmax_backward", "softmax", (rows, cols), dtype, 3 * rows * cols * _ITEM[dtype], setup,
                check=check)


def _cross_entropy(env: Env, n: int, c: int, dtype: str) -> Case:
    def setup():
        be = _backend(env)
        logits = _rand(env, (n, c), dtype, 4, 2.0)
        rng = np.random.default_rng(5)
        t_host = rng.integers(0, c, n).astype(np.int64)
        targets = env.xp.asarray(t_host)
        prov = {"cudakit": lambda: be.cross_entropy_with_grad(logits, targets)}
        if env.gpu and env.torch is not None:
            t = env.torch
            tl = t.from_dlpack(logits).detach().requires_grad_(True)
            tt = t.from_dlpack(targets)
            prov["torch"] = lambda: t.autograd.grad(t.nn.functional.cross_entropy(tl, tt), tl)
        elif not env.gpu:
            def np_ce():
                xa = logits.astype(np.float32)
                xc = xa - xa.max(axis=1, keepdims=True)
                e = np.exp(xc)
                s = e.sum(axis=1, keepdims=True)
                loss = (np.log(s[:, 0]) - xc[np.arange(n), t_host]).mean()
                p = e / s
                p[np.arange(n), t_host] -= 1
                return loss, (p / n).astype(logits.dtype)
            prov["numpy"] = np_ce
        return prov
    def check():
        shape = check_batch((n, c))
        targets = env.xp.asarray(np.random.default_rng(9).integers(0, c, shape[0]).astype(np.int64))
        return cudakit.cross_entropy_with_grad, (_rand(env, shape, dtype, 10, 2.0), targets)
    return Case("cross_entropy_fwd_bwd", "softmax", (n, c), dtype, 2 * n * c * _ITEM[dtype] + 8 * n, setup,
                note="fused forward + backward, reduction='mean'", check=check)


def cases(env: Env) -> list[Case]:
    if env.gpu:
        shapes = [(4096, 4096), (512, 32768), (32768, 128)] if env.quick else \
                 [(32768, 4096), (4096, 32768), (262144, 128)]
        ce = (2048, 32000) if env.quick else (16384, 32000)
    else:
        shapes = [(128, 1024), (16, 8192), (4096, 128)] if env.quick else [(2048, 4096), (256, 32768), (16384, 128)]
        ce = (64, 32000) if env.quick else (512, 32000)
    out = []
    for dtype in env.dtypes:
        for rows, cols in shapes:
            out.append(_forward(env, rows, cols, dtype, log=False))
            out.append(_backward(env, rows, cols, dtype))
            out.append(_forward(env, rows, cols, dtype, log=True))
        out.append(_cross_entropy(env, ce[0], ce[1], dtype))
    return out
