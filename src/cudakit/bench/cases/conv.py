"""Benchmark cases: conv2d (im2col + cuBLAS) forward and backward and 2x2 max pooling, NCHW,
against torch's cuDNN kernels in the same run. FLOPs: 2 * N * K * Ho * Wo * C * R * S per product
(forward one, backward two); bytes: input, weight and output once each."""
from __future__ import annotations

import cudakit
from ..case import Case, Env
from ._inputs import ITEM as _ITEM
from ._inputs import rand as _rand


def _conv(env: Env, n, c, hw, k, dtype, backward):
    def setup():
        x, w = _rand(env, (n, c, hw, hw), dtype, 1), _rand(env, (k, c, 3, 3), dtype, 2, (9 * c) ** -0.5)
        b = _rand(env, (k,), dtype, 3)
        if backward:
            g = _rand(env, (n, k, hw, hw), dtype, 4)
            prov = {"cudakit": lambda: cudakit.conv2d_backward(g, x, w, 1, 1)}
        else:
            prov = {"cudakit": lambda: cudakit.conv2d(x, w, b, 1, 1)}
        if env.gpu and env.torch is not None:
            t = env.torch
            tx, tw, tb = (t.from_dlpack(a) for a in (x, w, b))
            if backward:
                rx, rw, rb = (v.detach().requires_grad_(True) for v in (tx, tw, tb))
                y = t.nn.functional.conv2d(rx, rw, rb, 1, 1)
                tg = t.from_dlpack(g)
                prov["torch"] = lambda: t.autograd.grad(y, (rx, rw, rb), tg, retain_graph=True)
            else:
                prov["torch"] = lambda: t.nn.functional.conv2d(tx, tw, tb, 1, 1)
        return prov
    flops = (2 if backward else 1) * 2 * n * k * hw * hw * c * 9
    nbytes = (n * c * hw * hw + k * c * 9 + n * k * hw * hw) * _ITEM[dtype] * (2 if backward else 1)
    return Case("conv2d_backward" if backward else "conv2d", "conv", (n, c, hw, hw, k), dtype, nbytes, setup,
                flops=flops)


def _maxpool(env: Env, n, c, hw, dtype):
    def setup():
        x = _rand(env, (n, c, hw, hw), dtype, 5)
        prov = {"cudakit": lambda: cudakit.max_pool2d(x, 2)}
        if env.gpu and env.torch is not None:
            tx = env.torch.from_dlpack(x)
            prov["torch"] = lambda: env.torch.nn.functional.max_pool2d(tx, 2)
        return prov
    return Case("max_pool2d", "conv", (n, c, hw, hw), dtype, n * c * hw * hw * _ITEM[dtype] * 5 // 4, setup)


def cases(env: Env) -> list[Case]:
    n, c, hw, k = (32, 64, 56, 64) if env.gpu and not env.quick else (2, 8, 16, 8)
    out = []
    for dtype in env.dtypes:
        out += [_conv(env, n, c, hw, k, dtype, False), _conv(env, n, c, hw, k, dtype, True),
                _maxpool(env, n, c, hw * 2 if env.gpu else hw, dtype)]
    return out
