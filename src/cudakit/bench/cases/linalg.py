"""Benchmark cases: matmul (square, and batched with a shared right operand), linear + GELU forward
and its backward. FLOPs: 2 * M * N * K per product (the GELU and the bias are not counted); bytes:
each operand read once and the result written once."""
from __future__ import annotations

import numpy as np

import cudakit
from ..case import Case, Env, check_batch
from ._inputs import ITEM as _ITEM
from ._inputs import rand as _rand


def _t(env: Env, *arrays):
    return tuple(env.torch.from_dlpack(a) for a in arrays)


def _matmul(env: Env, batch: int, m: int, k: int, n: int, dtype: str) -> Case:
    shape_a = (batch, m, k) if batch > 1 else (m, k)

    def setup():
        a, b = _rand(env, shape_a, dtype, 1), _rand(env, (k, n), dtype, 2)
        prov = {"cudakit": lambda: cudakit.matmul(a, b)}
        if env.gpu:
            if env.torch is not None:
                ta, tb = _t(env, a, b)
                prov["torch"] = lambda: env.torch.matmul(ta, tb)
            prov["cupy"] = lambda: env.xp.matmul(a, b)
        else:
            prov["numpy"] = lambda: a @ b
        return prov
    item = _ITEM[dtype]
    return Case("matmul", "linalg", (*shape_a, n), dtype, (batch * m * k + k * n + batch * m * n) * item, setup,
                flops=2 * batch * m * n * k,
                check=lambda: (cudakit.matmul, (_rand(env, check_batch(shape_a), dtype, 11),
                                                _rand(env, (k, n), dtype, 12))))


def _linear_gelu(env: Env, rows: int, fin: int, fout: int, dtype: str, backward: bool) -> Case:
    def setup():
        x = _rand(env, (rows, fin), dtype, 3)
        w = _rand(env, (fout, fin), dtype, 4, fin ** -0.5)
        b = _rand(env, (fout,), dtype, 5)
        if backward:
            _, pre = cudakit.fused_linear_gelu_with_preact(x, w, b)
            g = _rand(env, (rows, fout), dtype, 6)
            prov = {"cudakit": lambda: cudakit.fused_linear_gelu_backward(g, x, w, pre)}
        else:
            prov = {"cudakit": lambda: cudakit.fused_linear_gelu(x, w, b)}
        if env.gpu and env.torch is not None:
            t, F = env.torch, env.torch.nn.functional
            tx, tw, tb = _t(env, x, w, b)
            if backward:  # autograd through linear + gelu: the same three products and the GELU gradient
                txr, twr, tbr = (v.detach().requires_grad_(True) for v in (tx, tw, tb))
                y = F.gelu(F.linear(txr, twr, tbr), approximate="tanh")
                tg = env.torch.from_dlpack(g)
                prov["torch"] = lambda: t.autograd.grad(y, (txr, twr, tbr), tg, retain_graph=True)
            else:
                prov["torch"] = lambda: F.gelu(F.linear(tx, tw, tb), approximate="tanh")
        elif not env.gpu:
            def np_fwd():
                h = x.astype(np.float32) @ w.astype(np.float32).T + b.astype(np.float32)
                return (0.5 * h * (1 + np.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))).astype(x.dtype)
            if not backward:
                prov["numpy"] = np_fwd
        return prov
    item = _ITEM[dtype]
    products = 2 if backward else 1     # backward: grad_x and grad_weight
    nbytes = (rows * fin + fout * fin + rows * fout * (3 if backward else 1)) * item
    def check():
        x, w = _rand(env, check_batch((rows, fin)), dtype, 13), _rand(env, (fout, fin), dtype, 14, fin ** -0.5)
        b = _rand(env, (fout,), dtype, 15)
        if backward:
            g = _rand(env, (x.shape[0], fout), dtype, 16)
            return (lambda g, x, w, b: cudakit.fused_linear_gelu_backward(
                g, x, w, cudakit.fused_linear_gelu_with_preact(x, w, b)[1])), (g, x, w, b)
        return cudakit.fused_linear_gelu, (x, w, b)
    return Case("linear_gelu_backward" if backward else "linear_gelu", "linalg", (rows, fin, fout), dtype,
                nbytes, setup, flops=products * 2 * rows * fin * fout, check=check)


def cases(env: Env) -> list[Case]:
    if env.gpu:
        sq = 2048 if env.quick else 8192
        bm = (8, 1024, 1024, 1024) if env.quick else (32, 2048, 1024, 1024)
        lin = (4096, 1024, 4096) if env.quick else (16384, 4096, 16384)
    else:
        sq, bm, lin = 256, (4, 128, 128, 128), (512, 256, 1024)
    out = []
    for dtype in env.dtypes:
        out.append(_matmul(env, 1, sq, sq, sq, dtype))
        out.append(_matmul(env, *bm, dtype))
        out.append(_linear_gelu(env, *lin, dtype, backward=False))
        out.append(_linear_gelu(env, *lin, dtype, backward=True))
    return out
