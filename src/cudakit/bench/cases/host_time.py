"""Benchmark cases: host time per call (us/call, back-to-back calls on small float32 inputs -- bfloat16
for the packed-sequence rows --, where
the host's cost decides) of each op family's common call, next to torch's equivalent in the same
run. Rows are named <call>_host. GPU runs only: on the CPU backend the host time is the op.

torch's equivalents are its cheapest public (or ATen) calls doing the same work; where cudakit's
call returns more in one call (cross_entropy_with_grad: loss and gradient; linear_backward: three
gradients), the torch side makes the calls a training step needs for the same results, named in
the row's note.
"""
from __future__ import annotations

import itertools

import cudakit

from ..case import Case, Env
from ._inputs import rand

ROWS, COLS = 64, 128          # the small 2-D shape of the rows below
B, H, T, D = 2, 2, 64, 32     # attention and permute: (B, H, T, D)
N, C, S, K = 4, 8, 16, 8      # convolution, pooling, batch norm: (N, C, S, S), K filters
L = 64                        # conv1d: (N, C, L), K filters of 3 taps
N_TENSORS = 8                 # optimizer steps over this many (ROWS, COLS) tensors


def _arrays(env: Env):
    """The inputs every row draws from (float32 on the backend of env), and torch views of them."""
    a = {"x": rand(env, (ROWS, COLS), "float32", 1), "y": rand(env, (ROWS, COLS), "float32", 2),
         "g": rand(env, (ROWS, COLS), "float32", 3), "w": rand(env, (COLS, COLS), "float32", 4, 0.1),
         "b": rand(env, (COLS,), "float32", 5), "ln_w": rand(env, (COLS,), "float32", 6),
         "q": rand(env, (B, H, T, D), "float32", 7), "k": rand(env, (B, H, T, D), "float32", 8),
         "v": rand(env, (B, H, T, D), "float32", 9), "img": rand(env, (N, C, S, S), "float32", 10),
         "cw": rand(env, (K, C, 3, 3), "float32", 11, 0.1), "cg": rand(env, (N, K, S, S), "float32", 12),
         "gamma": rand(env, (C,), "float32", 13), "beta": rand(env, (C,), "float32", 14),
         "go": rand(env, (B, H, T, D), "float32", 15), "seq": rand(env, (N, C, L), "float32", 16),
         "att_bias": rand(env, (B, H, T, T), "float32", 19), "pad_bias": rand(env, (B, 1, 1, T), "float32", 60),
         "alibi_bias": rand(env, (1, H, T, T), "float32", 61),
         "c1w": rand(env, (K, C, 3), "float32", 17, 0.1), "c1g": rand(env, (N, K, L), "float32", 18)}
    # the image and its gradient as (N, H, W, C) arrays (memory_format="nhwc"; torch: channels_last views)
    a["img_nhwc"] = env.xp.ascontiguousarray(a["img"].transpose(0, 2, 3, 1))
    a["cg_nhwc"] = env.xp.ascontiguousarray(a["cg"].transpose(0, 2, 3, 1))
    a["targets"] = env.xp.arange(ROWS, dtype=env.xp.int64) % COLS
    a["rm"], a["rv"] = env.xp.zeros(C, env.xp.float32), env.xp.ones(C, env.xp.float32)
    a["params"] = [rand(env, (ROWS, COLS), "float32", 20 + i) for i in range(N_TENSORS)]
    a["grads"] = [rand(env, (ROWS, COLS), "float32", 40 + i) for i in range(N_TENSORS)]
    _, a["mean"], a["rstd"] = cudakit.layernorm_with_stats(a["x"], a["ln_w"], a["b"])
    a["att"], a["lse"] = cudakit.attention_with_lse(a["q"], a["k"], a["v"], causal=True)
    a["att_pad"], a["lse_pad"] = cudakit.attention_with_lse(a["q"], a["k"], a["v"], attn_bias=a["pad_bias"])
    a["att_alibi"], a["lse_alibi"] = cudakit.attention_with_lse(a["q"], a["k"], a["v"], attn_bias=a["alibi_bias"])
    # packed sequences (B * T, H, D) in bfloat16 (torch's varlen_attn takes 16-bit data), one
    # cu_seqlens array for q and k
    a["pq"], a["pk"], a["pv"], a["pg"] = (rand(env, (B * T, H, D), "float32", 50 + i).astype("bfloat16")
                                          for i in range(4))
    a["cu"] = env.xp.arange(0, B * T + 1, T, dtype=env.xp.int32)
    a["pout"], a["plse"] = cudakit.attention_varlen_with_lse(a["pq"], a["pk"], a["pv"], a["cu"], a["cu"], T, T)
    return a


def _cudakit_calls(a: dict) -> dict:
    """{row name: zero-argument cudakit call}."""
    x, y, g, w, b = a["x"], a["y"], a["g"], a["w"], a["b"]
    q, k, v = a["q"], a["k"], a["v"]
    adamw = cudakit.AdamW(a["params"], lr=1e-4)
    sgd = cudakit.SGD([p.copy() for p in a["params"]], lr=1e-4, momentum=0.9)
    grads = a["grads"]
    seeds = itertools.count(1)   # dropout with a new seed per call, as a training step draws them
    return {
        "add": lambda: cudakit.add(x, y),
        "gelu": lambda: cudakit.gelu(x),
        "softmax": lambda: cudakit.softmax(x),
        "sum_lastaxis": lambda: cudakit.sum(x, axis=-1),
        "layernorm_with_stats": lambda: cudakit.layernorm_with_stats(x, a["ln_w"], b),
        "layernorm_backward": lambda: cudakit.layernorm_backward(g, x, a["ln_w"], a["mean"], a["rstd"]),
        "permute": lambda: cudakit.permute(q, (0, 2, 1, 3)),
        "matmul": lambda: cudakit.matmul(x, w),
        "linear": lambda: cudakit.linear(x, w, b),
        "linear_backward": lambda: cudakit.linear_backward(g, x, w),
        "matmul_backward": lambda: cudakit.matmul_backward(g, x, w),
        "fused_linear_gelu_with_preact": lambda: cudakit.fused_linear_gelu_with_preact(x, w, b),
        "attention_with_lse": lambda: cudakit.attention_with_lse(q, k, v, causal=True),
        "attention_backward": lambda: cudakit.attention_backward(a["go"], q, k, v, a["att"], a["lse"], causal=True),
        "attention_with_lse_bias": lambda: cudakit.attention_with_lse(q, k, v, attn_bias=a["att_bias"]),
        "attention_backward_pad_bias": lambda: cudakit.attention_backward(a["go"], q, k, v, a["att_pad"], a["lse_pad"],
                                                                          attn_bias=a["pad_bias"]),
        "attention_backward_alibi_bias": lambda: cudakit.attention_backward(a["go"], q, k, v, a["att_alibi"],
                                                                            a["lse_alibi"], attn_bias=a["alibi_bias"]),
        "attention_with_lse_dropout": lambda: cudakit.attention_with_lse(q, k, v, causal=True, dropout_p=0.1,
                                                                         seed=next(seeds)),
        "attention_backward_dropout": lambda: cudakit.attention_backward(a["go"], q, k, v, a["att"], a["lse"],
                                                                         causal=True, dropout_p=0.1, seed=next(seeds)),
        "attention_varlen_with_lse": lambda: cudakit.attention_varlen_with_lse(a["pq"], a["pk"], a["pv"], a["cu"],
                                                                               a["cu"], T, T),
        "attention_varlen_backward": lambda: cudakit.attention_varlen_backward(
            a["pg"], a["pq"], a["pk"], a["pv"], a["pout"], a["plse"], a["cu"], a["cu"], T, T),
        "cross_entropy_with_grad": lambda: cudakit.cross_entropy_with_grad(x, a["targets"]),
        "dropout": lambda: cudakit.dropout(x, 0.1, 1234),
        "conv2d": lambda: cudakit.conv2d(a["img"], a["cw"], None, 1, 1),
        "conv2d_backward": lambda: cudakit.conv2d_backward(a["cg"], a["img"], a["cw"], 1, 1, bias=False),
        "conv2d_nhwc": lambda: cudakit.conv2d(a["img_nhwc"], a["cw"], None, 1, 1, memory_format="nhwc"),
        "conv2d_backward_nhwc": lambda: cudakit.conv2d_backward(a["cg_nhwc"], a["img_nhwc"], a["cw"], 1, 1, bias=False,
                                                                memory_format="nhwc"),
        "conv1d": lambda: cudakit.conv1d(a["seq"], a["c1w"], None, 1, 1),
        "conv1d_backward": lambda: cudakit.conv1d_backward(a["c1g"], a["seq"], a["c1w"], 1, 1, bias=False),
        "max_pool2d": lambda: cudakit.max_pool2d(a["img"], 2),
        "batch_norm_with_stats": lambda: cudakit.batch_norm_with_stats(a["img"], a["gamma"], a["beta"], a["rm"],
                                                                       a["rv"], True),
        "adamw_step": lambda: adamw.step(grads),
        "sgd_step": lambda: sgd.step(grads),
    }


# row name -> (shape of the inputs, torch's equivalent)
_SPEC = {
    "add": ((ROWS, COLS), "torch.add"),
    "gelu": ((ROWS, COLS), "F.gelu(approximate='tanh')"),
    "softmax": ((ROWS, COLS), "torch.softmax"),
    "sum_lastaxis": ((ROWS, COLS), "Tensor.sum(-1)"),
    "layernorm_with_stats": ((ROWS, COLS), "aten.native_layer_norm (returns the statistics)"),
    "layernorm_backward": ((ROWS, COLS), "aten.native_layer_norm_backward"),
    "permute": ((B, H, T, D), "permute(0, 2, 1, 3).contiguous()"),
    "matmul": ((ROWS, COLS, COLS), "torch.matmul"),
    "linear": ((ROWS, COLS, COLS), "F.linear"),
    "linear_backward": ((ROWS, COLS, COLS), "g @ w, g.t() @ x, g.sum(0): three calls"),
    "matmul_backward": ((ROWS, COLS, COLS), "g @ w.t(), x.t() @ g: two calls"),
    "fused_linear_gelu_with_preact": ((ROWS, COLS, COLS), "F.linear then F.gelu: two calls"),
    "attention_with_lse": ((B, H, T, D), "F.scaled_dot_product_attention(is_causal=True), no lse returned"),
    "attention_backward": ((B, H, T, D), "torch.autograd.grad of scaled_dot_product_attention"),
    "attention_with_lse_bias": ((B, H, T, D), "F.scaled_dot_product_attention(attn_mask=the bias), no lse returned"),
    "attention_backward_pad_bias": ((B, H, T, D), ("torch.autograd.grad of scaled_dot_product_attention(attn_mask=a "
                                                   "(B, 1, 1, T) bias), the bias's gradient too")),
    "attention_backward_alibi_bias": ((B, H, T, D), ("torch.autograd.grad of scaled_dot_product_attention(attn_mask="
                                                     "a (1, H, T, T) bias), the bias's gradient too")),
    "attention_with_lse_dropout": ((B, H, T, D), ("F.scaled_dot_product_attention(dropout_p=0.1, is_causal=True), "
                                                  "no lse returned; cudakit's seed new on every call")),
    "attention_backward_dropout": ((B, H, T, D), ("torch.autograd.grad of scaled_dot_product_attention(dropout_p=0.1, "
                                                  "is_causal=True)")),
    "attention_varlen_with_lse": ((B * T, H, D), ("torch.nn.attention.varlen.varlen_attn, no lse returned; "
                                                  "bfloat16, B sequences of T"), "bfloat16"),
    "attention_varlen_backward": ((B * T, H, D), ("torch.autograd.grad of varlen_attn; bfloat16, B sequences of T"),
                                  "bfloat16"),
    "cross_entropy_with_grad": ((ROWS, COLS), ("F.cross_entropy, forward only (cudakit's call also returns "
                                               "the gradient)")),
    "dropout": ((ROWS, COLS), "F.dropout"),
    "conv2d": ((N, C, S, S, K), "F.conv2d (cuDNN)"),
    "conv2d_backward": ((N, C, S, S, K), "aten.convolution_backward (input and weight gradients)"),
    "conv2d_nhwc": ((N, S, S, C, K), "F.conv2d on channels_last views (cuDNN)"),
    "conv2d_backward_nhwc": ((N, S, S, C, K), "aten.convolution_backward on channels_last views"),
    "conv1d": ((N, C, L, K), "F.conv1d (cuDNN)"),
    "conv1d_backward": ((N, C, L, K), "aten.convolution_backward (input and weight gradients)"),
    "max_pool2d": ((N, C, S, S), "F.max_pool2d"),
    "batch_norm_with_stats": ((N, C, S, S), "F.batch_norm(training=True)"),
    "adamw_step": ((N_TENSORS, ROWS, COLS), "torch.optim.AdamW(fused=True).step()"),
    "sgd_step": ((N_TENSORS, ROWS, COLS), "torch.optim.SGD(momentum=0.9, foreach=True).step()"),
}


def _torch_calls(t, a: dict) -> dict:
    """{row name: zero-argument torch call} on torch views of the same arrays (see _SPEC)."""
    F = t.nn.functional
    tv = {n: t.from_dlpack(v) for n, v in a.items() if n not in ("params", "grads")}
    x, y, g, w, b = tv["x"], tv["y"], tv["g"], tv["w"], tv["b"]
    q, k, v, img = tv["q"], tv["k"], tv["v"], tv["img"]
    _, mean, rstd = t.ops.aten.native_layer_norm(x, (COLS,), tv["ln_w"], b, 1e-5)
    qa, ka, va = (u.detach().requires_grad_(True) for u in (q, k, v))
    att = F.scaled_dot_product_attention(qa, ka, va, is_causal=True)
    att_drop = F.scaled_dot_product_attention(qa, ka, va, dropout_p=0.1, is_causal=True)
    pad_a = tv["pad_bias"].detach().requires_grad_(True)
    att_pad = F.scaled_dot_product_attention(qa, ka, va, attn_mask=pad_a)
    alibi_a = tv["alibi_bias"].detach().requires_grad_(True)
    att_alibi = F.scaled_dot_product_attention(qa, ka, va, attn_mask=alibi_a)
    pq, pk, pv, cu = tv["pq"], tv["pk"], tv["pv"], tv["cu"]
    pqa, pka, pva = (u.detach().requires_grad_(True) for u in (pq, pk, pv))

    def varlen(q, k, v):
        from torch.nn.attention.varlen import varlen_attn
        return varlen_attn(q, k, v, cu, cu, T, T)
    pout = varlen(pqa, pka, pva)

    def with_grads(params):
        for p, gr in zip(params, a["grads"]):
            p.grad = t.from_dlpack(gr)
        return params
    adamw = t.optim.AdamW(with_grads([t.from_dlpack(p).clone() for p in a["params"]]), lr=1e-4, fused=True)
    sgd = t.optim.SGD(with_grads([t.from_dlpack(p).clone() for p in a["params"]]), lr=1e-4, momentum=0.9,
                      foreach=True)
    aten = t.ops.aten
    img_cl, cg_cl = tv["img_nhwc"].permute(0, 3, 1, 2), tv["cg_nhwc"].permute(0, 3, 1, 2)   # channels_last views
    return {
        "add": lambda: t.add(x, y),
        "gelu": lambda: F.gelu(x, approximate="tanh"),
        "softmax": lambda: t.softmax(x, -1),
        "sum_lastaxis": lambda: x.sum(-1),
        "layernorm_with_stats": lambda: aten.native_layer_norm(x, (COLS,), tv["ln_w"], b, 1e-5),
        "layernorm_backward": lambda: aten.native_layer_norm_backward(g, x, (COLS,), mean, rstd, tv["ln_w"], b,
                                                                      [True, True, True]),
        "permute": lambda: q.permute(0, 2, 1, 3).contiguous(),
        "matmul": lambda: t.matmul(x, w),
        "linear": lambda: F.linear(x, w, b),
        "linear_backward": lambda: (g @ w, g.t() @ x, g.sum(0)),
        "matmul_backward": lambda: (g @ w.t(), x.t() @ g),
        "fused_linear_gelu_with_preact": lambda: F.gelu(F.linear(x, w, b), approximate="tanh"),
        "attention_with_lse": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "attention_backward": lambda: t.autograd.grad(att, (qa, ka, va), tv["go"], retain_graph=True),
        "attention_with_lse_bias": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=tv["att_bias"]),
        "attention_backward_pad_bias": lambda: t.autograd.grad(att_pad, (qa, ka, va, pad_a), tv["go"],
                                                               retain_graph=True),
        "attention_backward_alibi_bias": lambda: t.autograd.grad(att_alibi, (qa, ka, va, alibi_a), tv["go"],
                                                                 retain_graph=True),
        "attention_with_lse_dropout": lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True),
        "attention_backward_dropout": lambda: t.autograd.grad(att_drop, (qa, ka, va), tv["go"], retain_graph=True),
        "attention_varlen_with_lse": lambda: varlen(pq, pk, pv),
        "attention_varlen_backward": lambda: t.autograd.grad(pout, (pqa, pka, pva), tv["pg"], retain_graph=True),
        "cross_entropy_with_grad": lambda: F.cross_entropy(x, tv["targets"]),
        "dropout": lambda: F.dropout(x, 0.1, True),
        "conv2d": lambda: F.conv2d(img, tv["cw"], None, 1, 1),
        "conv2d_backward": lambda: aten.convolution_backward(tv["cg"], img, tv["cw"], None, [1, 1], [1, 1], [1, 1],
                                                             False, [0, 0], 1, [True, True, False]),
        "conv2d_nhwc": lambda: F.conv2d(img_cl, tv["cw"], None, 1, 1),
        "conv2d_backward_nhwc": lambda: aten.convolution_backward(cg_cl, img_cl, tv["cw"], None, [1, 1], [1, 1],
                                                                  [1, 1], False, [0, 0], 1, [True, True, False]),
        "conv1d": lambda: F.conv1d(tv["seq"], tv["c1w"], None, 1, 1),
        "conv1d_backward": lambda: aten.convolution_backward(tv["c1g"], tv["seq"], tv["c1w"], None, [1], [1], [1],
                                                             False, [0], 1, [True, True, False]),
        "max_pool2d": lambda: F.max_pool2d(img, 2),
        "batch_norm_with_stats": lambda: F.batch_norm(img, tv["rm"], tv["rv"], tv["gamma"], tv["beta"], True),
        "adamw_step": lambda: adamw.step(),
        "sgd_step": lambda: sgd.step(),
    }


def host_cases(env: Env) -> list[Case]:
    """The rows, for any env (the tests build them on the CPU backend); the inputs are made once,
    at the first row's setup, and shared."""
    shared: dict = {}

    def arrays():
        if not shared:
            shared.update(_arrays(env))
        return shared

    def row(name, shape, torch_what, dtype="float32"):
        def setup():
            a = arrays()
            prov = {"cudakit": _cudakit_calls(a)[name]}
            if env.gpu and env.torch is not None:
                prov["torch"] = _torch_calls(env.torch, a)[name]
            return prov
        return Case(f"{name}_host", "host_time", shape, dtype, 0, setup, mode="host",
                    note=f"host time per call, back-to-back; torch: {torch_what}")
    return [row(name, *spec) for name, spec in _SPEC.items()]


def cases(env: Env) -> list[Case]:
    return host_cases(env) if env.gpu else []
