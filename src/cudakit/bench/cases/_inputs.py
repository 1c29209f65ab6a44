"""Inputs shared by the matmul, attention and conv benchmark cases."""
from __future__ import annotations

import numpy as np

import cudakit
from ..case import Env

ITEM = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}   # bytes per element


def rand(env: Env, shape, dtype: str, seed: int, scale: float = 1.0):
    """Standard normal values times `scale` in `dtype`: CuPy on a GPU run, NumPy otherwise."""
    dt = cudakit.get_backend("cuda" if env.gpu else "cpu").empty(0, dtype).dtype
    if env.gpu:
        x = env.xp.random.default_rng(seed).standard_normal(shape, dtype=env.xp.float32)
    else:
        x = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
    return (x * scale).astype(dt)
