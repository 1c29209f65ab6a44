"""Benchmark cases: fused attention forward and backward, (batch, heads, L, 64/128), against
PyTorch's scaled_dot_product_attention (its flash kernels; for float32 the kernel it picks for float32)
in the same run. FLOPs: 4 * B * H * L^2 * D
forward and 10 * B * H * L^2 * D backward (halved with causal); bytes: q, k, v read and out written
(forward), plus dO read and dq, dk, dv written (backward)."""
from __future__ import annotations

import cudakit
from ..case import Case, Env, check_batch
from ._inputs import ITEM as _ITEM
from ._inputs import rand as _rand


def _case(env: Env, shape, dtype: str, causal: bool, backward: bool, hkv: int | None = None) -> Case:
    """One attention row. hkv: grouped-query attention, k and v with hkv heads (q's shape otherwise),
    against torch's scaled_dot_product_attention(..., enable_gqa=True)."""
    b, h, seq, d = shape
    kv_shape = shape if hkv is None else (b, hkv, seq, d)
    gqa = {} if hkv is None else {"enable_gqa": True}

    def setup():
        q, k, v = _rand(env, shape, dtype, 1), _rand(env, kv_shape, dtype, 2), _rand(env, kv_shape, dtype, 3)
        if backward:
            out, lse = cudakit.attention_with_lse(q, k, v, causal=causal)
            g = _rand(env, shape, dtype, 4)
            prov = {"cudakit": lambda: cudakit.attention_backward(g, q, k, v, out, lse, causal=causal)}
        else:
            prov = {"cudakit": lambda: cudakit.attention(q, k, v, causal=causal)}
        if env.gpu and env.torch is not None:
            t = env.torch
            tq, tk, tv = (t.from_dlpack(a) for a in (q, k, v))
            sdpa = t.nn.functional.scaled_dot_product_attention
            if backward:
                rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
                y = sdpa(rq, rk, rv, is_causal=causal, **gqa)
                tg = t.from_dlpack(g)
                prov["torch"] = lambda: t.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True)
            else:
                prov["torch"] = lambda: sdpa(tq, tk, tv, is_causal=causal, **gqa)
        return prov
    per = b * h * seq * seq * d * (0.5 if causal else 1.0)
    flops = int((10 if backward else 4) * per)
    hk = h if hkv is None else hkv
    nbytes = (2 if backward else 1) * (2 * b * h * seq * d + 2 * b * hk * seq * d) * _ITEM[dtype]
    name = ("attention" + ("" if hkv is None else "_gqa") + ("_causal" if causal else "")
            + ("_backward" if backward else ""))
    if hkv is not None:
        return Case(name, "attention", shape + (hkv,), dtype, nbytes, setup, flops=flops)

    def check():   # the backward takes the forward's out and lse from the same backend
        q, k, v, g = (_rand(env, check_batch(shape), dtype, s) for s in (11, 12, 13, 14))
        if backward:
            return (lambda g, q, k, v: cudakit.attention_backward(
                g, q, k, v, *cudakit.attention_with_lse(q, k, v, causal=causal), causal=causal)), (g, q, k, v)
        return (lambda q, k, v: cudakit.attention(q, k, v, causal=causal)), (q, k, v)
    return Case(name, "attention", shape, dtype, nbytes, setup, flops=flops, check=check)


def cases(env: Env) -> list[Case]:
    if env.gpu:
        # the shapes of issue 27's acceptance (torch SDPA runs cuDNN's flash kernels at them)
        shapes = [(4, 16, 1024, 64)] if env.quick else [(4, 16, 4096, 128), (16, 16, 1024, 64)]
    else:
        shapes = [(1, 2, 128, 64)]
    out = []
    for dtype in env.dtypes:
        # float32 (products as cudakit.float32_precision() names): smaller, non-causal instances
        f32 = env.gpu and dtype == "float32"
        for shape in ([(b, h // 2, seq // 2, d) for b, h, seq, d in shapes] if f32 else shapes):
            for causal in ((False,) if f32 else (False, True)):
                out.append(_case(env, shape, dtype, causal, backward=False))
                out.append(_case(env, shape, dtype, causal, backward=True))
        if env.gpu and dtype != "float32":   # issue 27's GQA shape: H32, Hkv8, D128, S4096
            gqa = (1, 8, 1024, 128) if env.quick else (2, 32, 4096, 128)
            out += [_case(env, gqa, dtype, True, bw, hkv=gqa[1] // 4) for bw in (False, True)]
    return out
