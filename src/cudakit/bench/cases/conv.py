"""Benchmark cases: conv2d forward and backward (each signature's timed path: cuDNN, the Triton
implicit-GEMM or direct kernels of kernels/conv.py), 3x3 dense, depthwise (groups = channels) and
grouped (ResNeXt's groups of 8 channels) with a bias, NCHW, and dense and grouped channels-last
(`_nhwc` rows); 2x2 max pooling forward and backward and average pooling, NCHW; each against torch
in the same run (cuDNN for conv2d, ATen's own
kernels for pooling; torch's max-pooling backward reads the int64 indices its forward saved, ours
reads x). FLOPs: 2 * N * K * Ho * Wo * C * R * S per product (forward one, backward two); bytes:
input, weight and output once each."""
from __future__ import annotations

import cudakit
from ..case import Case, Env, check_batch
from ._inputs import ITEM as _ITEM
from ._inputs import rand as _rand


def _in_layout(a, channels_last: bool):
    """a (N, C, H, W), or where channels_last an (N, C, H, W) view of a copy in (N, H, W, C) memory."""
    return a.transpose(0, 2, 3, 1).copy().transpose(0, 3, 1, 2) if channels_last else a


def _conv(env: Env, n, c, hw, k, dtype, backward, groups=1, channels_last: bool = False, relu: bool = False):
    """A 3x3 convolution (stride 1, padding 1) with a bias, whose backward returns dL/db too.
    channels_last: x and dL/dy are (N, C, H, W) views of (N, H, W, C) memory on both sides (torch's
    channels_last; the results come back so), the weight C-contiguous. relu (`conv2d_relu` rows):
    relu(conv2d(...)), cudakit's activation="relu" (fused; its backward masks dL/dy by y) against
    torch's F.relu(F.conv2d(...)) and the gradients of that."""
    cg = c // groups
    act = {"activation": "relu"} if relu else {}

    def layout(a):
        return _in_layout(a, channels_last)

    def setup():
        x, w = layout(_rand(env, (n, c, hw, hw), dtype, 1)), _rand(env, (k, cg, 3, 3), dtype, 2, (9 * cg) ** -0.5)
        b = _rand(env, (k,), dtype, 3)
        if backward:
            g = layout(_rand(env, (n, k, hw, hw), dtype, 4))
            yk = {"y": cudakit.conv2d(x, w, b, 1, 1, groups=groups, **act)} if relu else {}
            prov = {"cudakit": lambda: cudakit.conv2d_backward(g, x, w, 1, 1, groups=groups, **act, **yk)}
        else:
            prov = {"cudakit": lambda: cudakit.conv2d(x, w, b, 1, 1, groups=groups, **act)}
        if env.gpu and env.torch is not None:
            t = env.torch
            tx, tw, tb = (t.from_dlpack(a) for a in (x, w, b))
            f = t.nn.functional
            fwd = (lambda x, w, b: f.relu(f.conv2d(x, w, b, 1, 1, 1, groups))) if relu else \
                (lambda x, w, b: f.conv2d(x, w, b, 1, 1, 1, groups))
            if backward:
                rx, rw, rb = (v.detach().requires_grad_(True) for v in (tx, tw, tb))
                y = fwd(rx, rw, rb)
                tg = t.from_dlpack(g)
                prov["torch"] = lambda: t.autograd.grad(y, (rx, rw, rb), tg, retain_graph=True)
            else:
                prov["torch"] = lambda: fwd(tx, tw, tb)
        return prov
    flops = (2 if backward else 1) * 2 * n * k * hw * hw * cg * 9
    nbytes = (n * c * hw * hw + k * cg * 9 + n * k * hw * hw) * _ITEM[dtype] * (2 if backward else 1)
    kind = "" if groups == 1 else "_depthwise" if groups == c == k else "_grouped"
    name = "conv2d" + kind + ("_relu" if relu else "") + ("_nhwc" if channels_last else "") + \
        ("_backward" if backward else "")
    def check():
        x = layout(_rand(env, check_batch((n, c, hw, hw)), dtype, 11))
        w, b = _rand(env, (k, cg, 3, 3), dtype, 12, (9 * cg) ** -0.5), _rand(env, (k,), dtype, 13)
        if backward:
            g = layout(_rand(env, (x.shape[0], k, hw, hw), dtype, 14))
            yk = {"y": cudakit.conv2d(x, w, b, 1, 1, groups=groups, **act)} if relu else {}
            return (lambda g, x, w: cudakit.conv2d_backward(g, x, w, 1, 1, groups=groups, **act, **yk)), (g, x, w)
        return (lambda x, w, b: cudakit.conv2d(x, w, b, 1, 1, groups=groups, **act)), (x, w, b)
    return Case(name, "conv", (n, c, hw, hw, k), dtype, nbytes, setup, flops=flops, check=check)


# (C, H = W, K, R = S, stride): every distinct 3x3 and 1x1 convolution of ResNet-50 (torchvision's,
# the stride on the 3x3 of each stage's first block) at 224x224 input; padding R // 2
RESNET50 = [(64, 56, 64, 1, 1), (64, 56, 64, 3, 1), (64, 56, 256, 1, 1), (256, 56, 64, 1, 1),
            (256, 56, 128, 1, 1), (128, 56, 128, 3, 2), (128, 28, 512, 1, 1), (256, 56, 512, 1, 2),
            (512, 28, 128, 1, 1), (128, 28, 128, 3, 1), (512, 28, 256, 1, 1), (256, 28, 256, 3, 2),
            (256, 14, 1024, 1, 1), (512, 28, 1024, 1, 2), (1024, 14, 256, 1, 1), (256, 14, 256, 3, 1),
            (1024, 14, 512, 1, 1), (512, 14, 512, 3, 2), (512, 7, 2048, 1, 1), (1024, 14, 2048, 1, 2),
            (2048, 7, 512, 1, 1), (512, 7, 512, 3, 1)]


def _r50(env: Env, n, c, hw, k, r, stride, dtype, prec, backward, channels_last: bool = False,
         weight_cl: bool = False):
    """One ResNet-50 convolution, no bias (a batch norm follows each). float32 rows run under
    cudakit.float32_precision `prec` against torch with cuDNN's TF32 allowed (torch's default) for
    "tf32" and forbidden (strict FP32) otherwise; 16-bit rows name no precision. channels_last:
    the activations are (N, C, H, W) views of (N, H, W, C) memory on both sides (torch's
    channels_last memory format; cudakit detects it from the strides); weight_cl: the weight too
    (a model in channels_last, as torch's model.to(memory_format=torch.channels_last) makes it:
    neither side copies a weight, and dL/dw comes back channels-last on both)."""
    pad = r // 2
    ho = (hw + 2 * pad - r) // stride + 1

    def layout(a, cl=channels_last):
        return _in_layout(a, cl)

    def setup():
        x = layout(_rand(env, (n, c, hw, hw), dtype, 1))
        w = layout(_rand(env, (k, c, r, r), dtype, 2, (r * r * c) ** -0.5), weight_cl)
        tf32 = prec == "tf32"

        def ours(fn):
            if prec is None:
                return fn
            def call():
                old = cudakit.set_float32_precision(prec)
                try:
                    return fn()
                finally:
                    cudakit.set_float32_precision(old)
            return call
        if backward:
            g = layout(_rand(env, (n, k, ho, ho), dtype, 4))
            prov = {"cudakit": ours(lambda: cudakit.conv2d_backward(g, x, w, stride, pad, bias=False))}
        else:
            prov = {"cudakit": ours(lambda: cudakit.conv2d(x, w, None, stride, pad))}
        if env.gpu and env.torch is not None:
            t = env.torch
            tx, tw = t.from_dlpack(x), t.from_dlpack(w)

            def theirs(fn):
                def call():
                    old = t.backends.cudnn.allow_tf32
                    t.backends.cudnn.allow_tf32 = tf32 or prec is None
                    try:
                        return fn()
                    finally:
                        t.backends.cudnn.allow_tf32 = old
                return call
            if backward:
                rx, rw = (v.detach().requires_grad_(True) for v in (tx, tw))
                with t.backends.cudnn.flags(allow_tf32=tf32 or prec is None):
                    y = t.nn.functional.conv2d(rx, rw, None, stride, pad)
                tg = t.from_dlpack(g)
                prov["torch"] = theirs(lambda: t.autograd.grad(y, (rx, rw), tg, retain_graph=True))
            else:
                prov["torch"] = theirs(lambda: t.nn.functional.conv2d(tx, tw, None, stride, pad))
        return prov
    flops = (2 if backward else 1) * 2 * n * k * ho * ho * c * r * r
    nbytes = (n * c * hw * hw + k * c * r * r + n * k * ho * ho) * _ITEM[dtype] * (2 if backward else 1)
    name = "conv2d_r50" + ("_nhwc" if channels_last else "") + ("_wcl" if weight_cl else "") + \
        (f"_{prec}" if prec else "") + ("_backward" if backward else "")
    return Case(name, "conv_resnet50", (n, c, hw, hw, k, r, stride), dtype, nbytes, setup, flops=flops)


def _pool(env: Env, n, c, hw, dtype, kind: str, backward: bool):
    """2x2 pooling with stride 2; bytes: x read and y written (forward), dy and x read and dx
    written (max backward)."""
    name = f"{kind}_pool2d" + ("_backward" if backward else "")

    def setup():
        x = _rand(env, (n, c, hw, hw), dtype, 5)
        g = _rand(env, (n, c, hw // 2, hw // 2), dtype, 6)
        ours = getattr(cudakit, name)
        prov = {"cudakit": (lambda: ours(g, x, 2)) if backward else (lambda: ours(x, 2))}
        if env.gpu and env.torch is not None:
            t = env.torch
            tx, tg = t.from_dlpack(x), t.from_dlpack(g)
            if backward:  # the pooling op's own backward, as autograd calls it
                _, idx = t.nn.functional.max_pool2d(tx, 2, return_indices=True)
                prov["torch"] = lambda: t.ops.aten.max_pool2d_with_indices_backward(tg, tx, [2, 2], [2, 2], [0, 0],
                                                                                    [1, 1], False, idx)
            else:
                f = getattr(t.nn.functional, f"{kind}_pool2d")
                prov["torch"] = lambda: f(tx, 2)
        return prov
    quarter = n * c * hw * hw * _ITEM[dtype] // 4
    nbytes = (9 if backward else 5) * quarter
    def check():
        x = _rand(env, check_batch((n, c, hw, hw)), dtype, 15)
        if backward:
            g = _rand(env, (x.shape[0], c, hw // 2, hw // 2), dtype, 16)
            return (lambda g, x: getattr(cudakit, name)(g, x, 2)), (g, x)
        return (lambda x: getattr(cudakit, name)(x, 2)), (x,)
    return Case(name, "conv", (n, c, hw, hw), dtype, nbytes, setup, check=check)


def cases(env: Env) -> list[Case]:
    n, c, hw, k = (32, 64, 56, 64) if env.gpu and not env.quick else (2, 8, 16, 8)
    out = []
    for dtype in env.dtypes:
        out += [_conv(env, n, c, hw, k, dtype, False), _conv(env, n, c, hw, k, dtype, True),
                _conv(env, n, 2 * c, hw, 2 * c, dtype, False, 2 * c), _conv(env, n, 2 * c, hw, 2 * c, dtype, True, 2 * c),
                _conv(env, n, 4 * c, hw // 2, 4 * c, dtype, False, c // 2), _conv(env, n, 4 * c, hw // 2, 4 * c, dtype, True, c // 2),
                # channels-last with a bias (dL/db summed from channels-last dL/dy: CuPy's sum there
                # had taken 0.6-2.3 ms a call until 2026-11-28, unseen by the bias-free rows)
                _conv(env, n, c, hw, k, dtype, False, channels_last=True),
                _conv(env, n, c, hw, k, dtype, True, channels_last=True),
                _conv(env, n, 4 * c, hw // 2, 4 * c, dtype, True, c // 2, channels_last=True),
                # conv2d(..., activation="relu") against torch's relu(conv2d): NCHW and channels-last
                *(_conv(env, n, c, hw, k, dtype, bw, channels_last=cl, relu=True)
                  for cl in (False, True) for bw in (False, True)),
                _pool(env, n, c, hw * 2 if env.gpu else hw, dtype, "max", False),
                _pool(env, n, c, hw * 2 if env.gpu else hw, dtype, "max", True),
                _pool(env, n, c, hw * 2 if env.gpu else hw, dtype, "avg", False)]
    if env.gpu and any(o.startswith("conv2d_r50") for o in env.ops):   # asked by name only: 44 shapes a mode
        batch = 8 if env.quick else 32
        for dtype in env.dtypes:
            for prec in (("tf32", "ieee") if dtype == "float32" else (None,)):
                for c_, hw_, k_, r_, st_ in RESNET50:
                    out += [_r50(env, batch, c_, hw_, k_, r_, st_, dtype, prec, False),
                            _r50(env, batch, c_, hw_, k_, r_, st_, dtype, prec, True)]
            # channels-last (cuDNN reads it in place), against torch's channels_last; with the 3x3
            # weights channels-last too ("_wcl": a 1x1 weight's two layouts are one memory)
            for prec in (("tf32", "ieee") if dtype == "float32" else (None,)):
                for c_, hw_, k_, r_, st_ in RESNET50:
                    out += [_r50(env, batch, c_, hw_, k_, r_, st_, dtype, prec, False, True),
                            _r50(env, batch, c_, hw_, k_, r_, st_, dtype, prec, True, True)]
                    if r_ > 1:
                        out += [_r50(env, batch, c_, hw_, k_, r_, st_, dtype, prec, bw, True, True)
                                for bw in (False, True)]
    return out
