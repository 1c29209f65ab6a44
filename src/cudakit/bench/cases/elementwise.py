"""Benchmark cases: add, sub, mul, div (two arrays, and an array with a Python scalar), relu and
every activation forward and backward, and the host cost of a tiny add."""
from __future__ import annotations

import functools
import itertools

import numpy as np

import cudakit
from ..case import CHECK_ELEMENTS, Case, Env

_ITEM = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def _rand(env: Env, n: int, dtype: str, seed: int):
    xp = env.xp
    if env.gpu:
        x = xp.random.default_rng(seed).standard_normal(n, dtype=xp.float32)
    else:
        x = np.random.default_rng(seed).standard_normal(n, dtype=np.float32)
    return x.astype(cudakit.get_backend("cuda" if env.gpu else "cpu").empty(0, dtype).dtype)


def _torch_views(env, *arrays):
    t = env.torch
    return tuple(t.from_dlpack(a) for a in arrays)


def _sets(env: Env, nbytes: int) -> int:
    """How many input sets to rotate through so that one pass over them exceeds twice the
    last-level cache: each timed call then reads from device memory, not from L2."""
    if env.gpu:
        llc = cudakit.get_device_info().l2_cache_size
    else:
        llc = 32 << 20
    return max(1, min(64, -(-2 * llc // max(nbytes, 1))))


def _cycle(fn, arg_sets):
    it = itertools.cycle(arg_sets)
    return lambda: fn(*next(it))


def _binary(env: Env, op: str, n: int, dtype: str) -> Case:
    def setup():
        sets = [(_rand(env, n, dtype, 2 * k + 1), _rand(env, n, dtype, 2 * k + 2))
                for k in range(_sets(env, 3 * n * _ITEM[dtype]))]
        prov = {"cudakit": _cycle(getattr(cudakit, op), sets)}
        if env.gpu:
            if env.torch is not None:
                tf = {"add": env.torch.add, "mul": env.torch.mul, "sub": env.torch.sub, "div": env.torch.div,
                      "relu_backward": lambda g, x: env.torch.ops.aten.threshold_backward(g, x, 0)}[op]
                prov["torch"] = _cycle(tf, [_torch_views(env, *s) for s in sets])
            if op in ("add", "mul", "sub", "div"):
                prov["cupy"] = _cycle(getattr(env.xp, {"add": "add", "mul": "multiply", "sub": "subtract",
                                                       "div": "divide"}[op]), sets)
        else:
            nf = {"add": np.add, "mul": np.multiply, "sub": np.subtract, "div": np.divide,
                  "relu_backward": lambda g, x: np.where(x > 0, g, 0).astype(g.dtype)}[op]
            prov["numpy"] = _cycle(nf, sets)
        return prov
    k = min(n, CHECK_ELEMENTS)
    return Case(op, "elementwise", (n,), dtype, 3 * n * _ITEM[dtype], setup,
                check=lambda: (getattr(cudakit, op), (_rand(env, k, dtype, 1), _rand(env, k, dtype, 2))))


def _scalar(env: Env, op: str, n: int, dtype: str) -> Case:
    """x op 2.5 with a Python scalar: one read stream and one write."""
    def setup():
        sets = [(_rand(env, n, dtype, 300 + k),) for k in range(_sets(env, 2 * n * _ITEM[dtype]))]
        fn = getattr(cudakit, op)
        prov = {"cudakit": _cycle(lambda x: fn(x, 2.5), sets)}
        if env.gpu:
            if env.torch is not None:
                tf = getattr(env.torch, op)
                prov["torch"] = _cycle(lambda x: tf(x, 2.5), [_torch_views(env, *s) for s in sets])
        else:
            nf = {"add": np.add, "mul": np.multiply, "sub": np.subtract, "div": np.divide}[op]
            prov["numpy"] = _cycle(lambda x: nf(x, 2.5), sets)
        return prov
    k = min(n, CHECK_ELEMENTS)
    return Case(op + "_scalar", "elementwise", (n,), dtype, 2 * n * _ITEM[dtype], setup,
                check=lambda: ((lambda x: getattr(cudakit, op)(x, 2.5)), (_rand(env, k, dtype, 3),)))


def _relu(env: Env, n: int, dtype: str) -> Case:
    def setup():
        sets = [(_rand(env, n, dtype, 100 + k),) for k in range(_sets(env, 2 * n * _ITEM[dtype]))]
        prov = {"cudakit": _cycle(cudakit.relu, sets)}
        if env.gpu:
            if env.torch is not None:
                prov["torch"] = _cycle(env.torch.relu, [_torch_views(env, *s) for s in sets])
            prov["cupy"] = _cycle(lambda x: env.xp.maximum(x, 0), sets)
        else:
            prov["numpy"] = _cycle(lambda x: np.maximum(x, 0), sets)
        return prov
    return Case("relu", "elementwise", (n,), dtype, 2 * n * _ITEM[dtype], setup,
                check=lambda: (cudakit.relu, (_rand(env, min(n, CHECK_ELEMENTS), dtype, 4),)))


# activation -> torch forward (on x) and torch backward (on grad, x), as their own kernels take them
def _torch_acts(t):
    F, aten = t.nn.functional, t.ops.aten
    return {
        "gelu": (lambda x: F.gelu(x, approximate="tanh"), lambda g, x: aten.gelu_backward(g, x, approximate="tanh")),
        "silu": (F.silu, aten.silu_backward),
        "gelu_erf": (F.gelu, aten.gelu_backward),
        # torch's sigmoid/tanh backward take the forward's output; the traffic is the same
        "sigmoid": (t.sigmoid, aten.sigmoid_backward), "tanh": (t.tanh, aten.tanh_backward),
        "leaky_relu": (F.leaky_relu, lambda g, x: aten.leaky_relu_backward(g, x, 0.01, False)),
    }


def _activation(env: Env, name: str, n: int, dtype: str, backward: bool) -> Case:
    arity = 2 if backward else 1

    def function():
        fn = getattr(cudakit, ("gelu" if name == "gelu_erf" else name) + ("_backward" if backward else ""))
        return functools.partial(fn, approximate="none") if name == "gelu_erf" else fn

    def setup():
        sets = [tuple(_rand(env, n, dtype, 200 + 2 * k + i) for i in range(arity))
                for k in range(_sets(env, (arity + 1) * n * _ITEM[dtype]))]
        prov = {"cudakit": _cycle(function(), sets)}
        if env.gpu and env.torch is not None:
            tf = _torch_acts(env.torch)[name][1 if backward else 0]
            if tf is not None:
                prov["torch"] = _cycle(tf, [_torch_views(env, *s) for s in sets])
        return prov
    k = min(n, CHECK_ELEMENTS)
    return Case(name + ("_backward" if backward else ""), "activations", (n,), dtype,
                (arity + 1) * n * _ITEM[dtype], setup,
                check=lambda: (function(), tuple(_rand(env, k, dtype, 5 + i) for i in range(arity))))


def _tiny_add(env: Env) -> Case:
    n = 1000

    def setup():
        a, b = _rand(env, n, "float32", 4), _rand(env, n, "float32", 5)
        prov = {"cudakit": lambda: cudakit.add(a, b)}
        if env.gpu:
            if env.torch is not None:
                ta, tb = _torch_views(env, a, b)
                prov["torch"] = lambda: env.torch.add(ta, tb)
            prov["cupy"] = lambda: env.xp.add(a, b)
        else:
            prov["numpy"] = lambda: np.add(a, b)
        return prov
    return Case("add_host_overhead", "overhead", (n,), "float32", 3 * n * 4, setup, mode="host",
                note="host time per call, back-to-back")


def cases(env: Env) -> list[Case]:
    n = (1 << 24) if env.quick else (1 << 28)
    if not env.gpu:
        n = (1 << 20) if env.quick else (1 << 24)
    out = []
    for dtype in env.dtypes:
        for op in ("add", "sub", "mul", "div", "relu_backward"):
            out.append(_binary(env, op, n, dtype))
        for op in ("add", "sub", "mul", "div"):
            out.append(_scalar(env, op, n, dtype))
        out.append(_relu(env, n, dtype))
        # gelu_erf on the CPU calls math.erfc per element (NumPy has no erf): GPU runs only
        for name in ("gelu", "gelu_erf", "silu", "sigmoid", "tanh", "leaky_relu"):
            if name == "gelu_erf" and not env.gpu:
                continue
            out.append(_activation(env, name, n, dtype, False))
            out.append(_activation(env, name, n, dtype, True))
    out.append(_tiny_add(env))
    top = 24 if env.quick or not env.gpu else 28
    for e in range(12, top + 1, 2):  # add float32 over sizes: where the launch cost stops mattering
        c = _binary(env, "add", 1 << e, "float32")
        c.family, c.sweep = "elementwise_sizes", True
        out.append(c)
    return out
