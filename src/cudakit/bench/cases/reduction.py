"""Benchmark cases: sum over a whole array, and sum / max / argmax / var of a matrix along its rows
(axis -1) and along its columns (axis 0), against torch on the GPU (torch.sum, torch.amax,
torch.argmax, torch.var(correction=0)) and NumPy on the CPU.

Bytes (each array read or written once):
  full sum of n elements:          n * itemsize + itemsize
  (rows, cols) along axis -1 / 0:  rows * cols * itemsize + outputs * out_itemsize
                                   (ops named <op>_axis-1 and <op>_axis0)
                                   (outputs = rows or cols; out_itemsize = 8 for argmax's int64)
cudakit is called through the public functions when they exist (cudakit.sum, ...), else through
the backend (cudakit.get_backend(...).sum).
"""
from __future__ import annotations

import numpy as np

import cudakit

from ..case import Case, Env, check_batch

_ITEM = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
_TORCH = {"sum": lambda t, x, d: t.sum(x) if d is None else t.sum(x, dim=d),
          "max": lambda t, x, d: t.amax(x, dim=d),
          "argmax": lambda t, x, d: t.argmax(x, dim=d),
          "var": lambda t, x, d: t.var(x, dim=d, correction=0)}
_NUMPY = {"sum": np.sum, "max": np.max, "argmax": np.argmax, "var": np.var}


def _backend(env: Env):
    return cudakit.get_backend("cuda" if env.gpu else "cpu")


def _fn(env: Env, op: str):
    public = getattr(cudakit, op, None)
    return public if callable(public) else getattr(_backend(env), op)


def _dtype(env: Env, dtype: str):
    return _backend(env).empty(0, dtype).dtype


def _rand(env: Env, shape, dtype: str, seed: int):
    n = int(np.prod(shape))
    if env.gpu:
        x = env.xp.random.default_rng(seed).standard_normal(n, dtype=env.xp.float32)
    else:
        x = np.random.default_rng(seed).standard_normal(n, dtype=np.float32)
    return x.reshape(shape).astype(_dtype(env, dtype))


def _case(env: Env, op: str, shape: tuple, axis, dtype: str) -> Case:
    def setup():
        x = _rand(env, shape, dtype, 17)
        f = _fn(env, op)
        prov = {"cudakit": (lambda: f(x)) if axis is None else (lambda: f(x, axis=axis))}
        if env.gpu and env.torch is not None:
            t = env.torch
            tx = t.from_dlpack(x)
            d = None if axis is None else axis
            prov["torch"] = lambda: _TORCH[op](t, tx, d)
        elif not env.gpu:
            nf = _NUMPY[op]
            prov["numpy"] = (lambda: nf(x)) if axis is None else (lambda: nf(x, axis=axis))
        return prov
    n = int(np.prod(shape))
    outputs = 1 if axis is None else n // shape[axis]
    out_item = 8 if op == "argmax" else _ITEM[dtype]
    name = op if axis is None else f"{op}_axis{axis}"  # the table shows op, shape, dtype: name the axis
    def check():
        # |x|: sums of positive terms, whose float32 accumulation error the tolerance bounds (a sum of
        # signed normal values cancels to about sqrt(n) and its relative error is unbounded)
        x = abs(_rand(env, check_batch(shape), "float32", 18))
        f = getattr(cudakit, op)
        return ((lambda a: f(a)) if axis is None else (lambda a: f(a, axis=axis))), (x.astype(_dtype(env, dtype)),)
    return Case(name, "reduction", shape, dtype, n * _ITEM[dtype] + outputs * out_item, setup,
                note="all axes" if axis is None else f"axis={axis}", check=check)


def cases(env: Env) -> list[Case]:
    if env.gpu:
        n = (1 << 22) if env.quick else (1 << 28)
        mat = (2048, 1024) if env.quick else (32768, 4096)
    else:
        n = (1 << 18) if env.quick else (1 << 22)
        mat = (256, 512) if env.quick else (2048, 1024)
    out = [_case(env, "sum", (n,), None, dtype) for dtype in ("float32", "bfloat16")]
    for dtype in env.dtypes:
        for axis in (-1, 0):
            for op in ("sum", "max", "argmax", "var"):
                out.append(_case(env, op, mat, axis, dtype))
    return out
