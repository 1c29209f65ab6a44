"""Benchmark cases: dropout forward and backward (p = 0.5), cudakit (Philox recomputed from the
seed, no mask stored) against torch.nn.functional.dropout / aten.native_dropout_backward on the
GPU (torch also writes a bool mask in the forward and reads it in the backward) and the NumPy
implementation of the CPU backend.

Bytes, the least any implementation must move: x (or grad) read + y (or dx) written,
2 * n * itemsize (torch's mask traffic, n bytes each way, is not counted).
"""
from __future__ import annotations

import numpy as np

import cudakit

from ..case import CHECK_ELEMENTS, Case, Env

_ITEM = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
P, SEED = 0.5, 1234


def _backend(env: Env):
    return cudakit.get_backend("cuda" if env.gpu else "cpu")


def _rand(env: Env, n: int, dtype: str, seed: int):
    xp = env.xp
    if env.gpu:
        x = xp.random.default_rng(seed).standard_normal(n, dtype=xp.float32)
    else:
        x = np.random.default_rng(seed).standard_normal(n, dtype=np.float32)
    return x.astype(_backend(env).empty(0, dtype).dtype)


def _fn(env: Env, name: str):
    return getattr(cudakit, name, None) or getattr(_backend(env), name)


def _forward(env: Env, n: int, dtype: str) -> Case:
    def setup():
        x = _rand(env, n, dtype, 1)
        f = _fn(env, "dropout")
        prov = {"cudakit": lambda: f(x, P, SEED)}
        if env.gpu and env.torch is not None:
            tx = env.torch.from_dlpack(x)
            prov["torch"] = lambda: env.torch.nn.functional.dropout(tx, P, training=True)
        return prov
    # the mask is the same Philox stream on both backends: the check compares the kept values
    return Case("dropout", "dropout", (n,), dtype, 2 * n * _ITEM[dtype], setup, note=f"p={P}",
                check=lambda: ((lambda x: cudakit.dropout(x, P, SEED)),
                               (_rand(env, min(n, CHECK_ELEMENTS), dtype, 3),)))


def _backward(env: Env, n: int, dtype: str) -> Case:
    def setup():
        g = _rand(env, n, dtype, 2)
        f = _fn(env, "dropout_backward")
        prov = {"cudakit": lambda: f(g, P, SEED)}
        if env.gpu and env.torch is not None:
            t = env.torch
            tg = t.from_dlpack(g)
            _, mask = t.ops.aten.native_dropout(tg, P, True)
            prov["torch"] = lambda: t.ops.aten.native_dropout_backward(tg, mask, 1.0 / (1.0 - P))
        return prov
    return Case("dropout_backward", "dropout", (n,), dtype, 2 * n * _ITEM[dtype], setup,
                note=f"p={P}; torch reads its stored mask",
                check=lambda: ((lambda g: cudakit.dropout_backward(g, P, SEED)),
                               (_rand(env, min(n, CHECK_ELEMENTS), dtype, 4),)))


def cases(env: Env) -> list[Case]:
    if env.gpu:
        n = (1 << 24) if env.quick else (1 << 28)
    else:
        n = (1 << 16) if env.quick else (1 << 20)
    out = []
    for dtype in env.dtypes:
        out.append(_forward(env, n, dtype))
        out.append(_backward(env, n, dtype))
    return out
