"""Benchmark cases: transpose (2-D), permute (the attention head reshuffle (0, 2, 1, 3); a 3x3
convolution weight to (K, R, S, C) and a 3-channel image to channels-last and back) and
matrix_transpose (last two axes of the same 4-D array), cudakit
against torch's x.t().contiguous() / x.permute(...).contiguous() on the GPU and NumPy on the CPU.

Bytes: x read once + y written once = 2 * x.nbytes (layout moves every element exactly once).
cudakit is called through the public functions when they exist (cudakit.transpose,
cudakit.permute), else through the backend (get_backend(...).transpose / .permute).
"""
from __future__ import annotations

import numpy as np

import cudakit

from ..case import Case, Env, check_batch

_ITEM = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def _backend(env: Env):
    return cudakit.get_backend("cuda" if env.gpu else "cpu")


def _rand(env: Env, shape, dtype: str, seed: int):
    xp = env.xp
    n = int(np.prod(shape))
    if env.gpu:
        x = xp.random.default_rng(seed).standard_normal(n, dtype=xp.float32)
    else:
        x = np.random.default_rng(seed).standard_normal(n, dtype=np.float32)
    return x.reshape(shape).astype(_backend(env).empty(0, dtype).dtype)


def _fn(env: Env, name: str):
    return getattr(cudakit, name, None) or getattr(_backend(env), name)


def _transpose2d(env: Env, shape: tuple, dtype: str) -> Case:
    def setup():
        x = _rand(env, shape, dtype, 1)
        f = _fn(env, "transpose")
        prov = {"cudakit": lambda: f(x)}
        if env.gpu and env.torch is not None:
            tx = env.torch.from_dlpack(x)
            prov["torch"] = lambda: tx.t().contiguous()
        elif not env.gpu:
            prov["numpy"] = lambda: np.ascontiguousarray(x.T)
        return prov
    n = int(np.prod(shape))
    return Case("transpose", "layout", shape, dtype, 2 * n * _ITEM[dtype], setup, note="x.T, contiguous",
                check=lambda: (cudakit.transpose, (_rand(env, check_batch(shape), dtype, 11),)))


def _permute(env: Env, shape: tuple, axes: tuple, dtype: str) -> Case:
    def setup():
        x = _rand(env, shape, dtype, 2)
        f = _fn(env, "permute")
        prov = {"cudakit": lambda: f(x, axes)}
        if env.gpu and env.torch is not None:
            tx = env.torch.from_dlpack(x)
            prov["torch"] = lambda: tx.permute(*axes).contiguous()
        elif not env.gpu:
            prov["numpy"] = lambda: np.ascontiguousarray(x.transpose(axes))
        return prov
    n = int(np.prod(shape))
    return Case("permute", "layout", shape, dtype, 2 * n * _ITEM[dtype], setup, note=f"axes {axes}",
                check=lambda: ((lambda x: cudakit.permute(x, axes)), (_rand(env, check_batch(shape), dtype, 12),)))


def _matrix_transpose(env: Env, shape: tuple, dtype: str) -> Case:
    def setup():
        x = _rand(env, shape, dtype, 3)
        f = _fn(env, "matrix_transpose")
        prov = {"cudakit": lambda: f(x)}
        if env.gpu and env.torch is not None:
            tx = env.torch.from_dlpack(x)
            prov["torch"] = lambda: tx.transpose(-1, -2).contiguous()
        elif not env.gpu:
            prov["numpy"] = lambda: np.ascontiguousarray(np.swapaxes(x, -1, -2))
        return prov
    n = int(np.prod(shape))
    return Case("matrix_transpose", "layout", shape, dtype, 2 * n * _ITEM[dtype], setup, note="last two axes",
                check=lambda: (cudakit.matrix_transpose, (_rand(env, check_batch(shape), dtype, 13),)))


def cases(env: Env) -> list[Case]:
    if env.gpu:
        square = (4096, 4096) if env.quick else (16384, 16384)
        heads = (8, 512, 32, 128) if env.quick else (32, 2048, 32, 128)
    else:
        square = (512, 512) if env.quick else (2048, 2048)
        heads = (2, 64, 32, 128) if env.quick else (4, 512, 32, 128)
    # short dims on one side of the plane (permute's short runs): a 3x3 convolution weight to
    # (K, R, S, C), as channels-last cuDNN takes it, and a 3-channel image batch to channels-last and back
    if env.gpu and not env.quick:
        short = [((512, 512, 3, 3), (0, 2, 3, 1)), ((32, 3, 224, 224), (0, 2, 3, 1)), ((32, 224, 224, 3), (0, 3, 1, 2))]
    else:
        short = [((64, 32, 3, 3), (0, 2, 3, 1)), ((4, 3, 32, 32), (0, 2, 3, 1))]
    out = []
    for dtype in env.dtypes:
        out.append(_transpose2d(env, square, dtype))
        out.append(_permute(env, heads, (0, 2, 1, 3), dtype))
        out.append(_matrix_transpose(env, heads, dtype))   # (B, S, H, D) -> (B, S, D, H)
        out += [_permute(env, shape, axes, dtype) for shape, axes in short]
    return out
