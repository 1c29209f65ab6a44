"""A fuzzer for cudakit's ops on the CPU backend: random valid calls of every op family checked
against independent float64 references, and the same calls with one argument replaced by a bad
value (None, strings, wrong dtypes and shapes, NaN/inf/huge numbers, non-bools, read-only arrays
the op writes, arrays where a number goes, sets as axes).

Every call is judged:
  wrong result   a valid call whose output differs from the float64 reference by more than the
                 dtype's tolerance (normwise: max |got - want| / max |want|; inf/NaN must match);
  generic error  an exception that is not a cudakit error (CudakitError): a bare AttributeError,
                 OverflowError, NumPy's "assignment destination is read-only", ...;
  partial update a call that raised but changed an array it writes in place (running statistics,
                 optimizer state, out=), or any call that changed an input it only reads.
A mutated call may also succeed (the "bad" value was acceptable): then only the inputs are checked.

Run it: `python tests/fuzz_ops.py [--cases N] [--seed S]` prints a summary and the first problems;
tests/test_fuzz_ops.py runs it in CI. The GPU is not involved (`cudakit selftest` covers that).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

import cudakit as ck
from cudakit.bench.accuracy import error as normwise_error
from cudakit.errors import CudakitError

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = (np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64))
# normwise tolerance per dtype: 8 unit roundoffs for 16-bit (one rounding of the result is 1),
# float32 accumulations of a few hundred terms, float64
TOL = {"float16": 8 * 2.0 ** -11, "bfloat16": 8 * 2.0 ** -8, "float32": 2e-5, "float64": 1e-11}
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


@dataclass
class Case:
    """One call: fn(**kwargs) -> outputs; ref(float64 kwargs) -> the wanted outputs (None: not
    checked); inplace: the kwargs the op writes (checked after the call against ref_inplace)."""
    family: str
    op: str
    fn: object
    kwargs: dict
    ref: object = None
    inplace: tuple = ()
    ref_inplace: object = None   # f(float64 kwargs) -> {name: wanted value after the call}
    scale: object = None         # f(float64 kwargs) -> the size of the terms of an output that
                                 # cancel (its error is relative to that, not to the result)
    inplace_scale: object = None  # f(float64 kwargs) -> {name: that size} for the kwargs written
    skip_mutation: tuple = ()    # kwargs whose bad values are not fuzzed (see the family's note)
    extra: dict = field(default_factory=dict)


def f64(a):
    return a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype in DTYPES else a


def _data(rng, shape, dt, scale=1.0):
    return np.asarray(rng.standard_normal(shape) * scale).astype(dt)


def _shape(rng, ndim_lo=1, ndim_hi=3, hi=6):
    return tuple(int(rng.integers(1, hi)) for _ in range(int(rng.integers(ndim_lo, ndim_hi + 1))))


# ---- float64 references ----------------------------------------------------------------------

def _sig(x):
    return 1 / (1 + np.exp(-x))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _gelu_tanh_d(x):
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
    t = np.tanh(u)
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x * x)


def _phi(x):
    return 0.5 * _erfc(-x / math.sqrt(2))


UNARY = {
    "relu": (lambda x: np.maximum(x, 0), None),
    "sigmoid": (_sig, lambda x: _sig(x) * (1 - _sig(x))),
    "tanh": (np.tanh, lambda x: 1 - np.tanh(x) ** 2),
    "silu": (lambda x: x * _sig(x), lambda x: _sig(x) * (1 + x * (1 - _sig(x)))),
    "gelu": (_gelu_tanh, _gelu_tanh_d),
    "gelu_erf": (lambda x: x * _phi(x), lambda x: _phi(x) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)),
}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


def _ln(x, w, b, eps, k, rms=False):
    ax = tuple(range(x.ndim - k, x.ndim))
    mu = 0 if rms else x.mean(axis=ax, keepdims=True)
    xc = x - mu
    y = xc / np.sqrt((xc * xc).mean(axis=ax, keepdims=True) + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def _softmax(x, axis, log=False):
    m = x.max(axis=axis, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    return (x - m - np.log(s)) if log else e / s


def _windows(x, r, s, sh, sw, ph, pw, dh, dw, pad_value):
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=pad_value)
    n, c, hp, wp = xp.shape
    ho = (hp - dh * (r - 1) - 1) // sh + 1
    wo = (wp - dw * (s - 1) - 1) // sw + 1
    out = np.empty((n, c, ho, wo, r, s))
    for i in range(r):
        for j in range(s):
            out[..., i, j] = xp[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw]
    return out


def _conv(x, w, b, stride, padding, dilation):
    win = _windows(x, w.shape[2], w.shape[3], stride, stride, padding, padding, dilation, dilation, 0.0)
    y = np.einsum("nchwrs,kcrs->nkhw", win, w)
    return y if b is None else y + b[None, :, None, None]


def _attention(q, k, v, scale, causal):
    s = np.einsum("bqd,bkd->bqk", q, k) * scale
    if causal:   # aligned bottom-right: query i sits at key position i + Lk - Lq
        s = np.where(np.arange(k.shape[1])[None, :] <= np.arange(q.shape[1])[:, None] + k.shape[1] - q.shape[1], s,
                     -np.inf)
    return np.einsum("bqk,bkd->bqd", _softmax(s, -1), v)


# ---- valid cases, one maker per op family -----------------------------------------------------

def make_elementwise(rng, dt):
    shape = _shape(rng)
    if rng.random() < 0.5:
        op = str(rng.choice(list(BINARY)))
        a = _data(rng, shape, dt)
        bshape = shape[int(rng.integers(0, len(shape))):] if rng.random() < 0.5 else shape
        b = _data(rng, bshape, dt) + (np.asarray(3, dt) if op == "div" else np.asarray(0, dt))
        if rng.random() < 0.3:   # a Python scalar operand, rounded to the array's dtype first
            b = float(np.asarray(rng.standard_normal() + 3, dt))
        return Case("elementwise", op, getattr(ck, op), {"a": a, "b": b},
                    lambda k, op=op: (BINARY[op](k["a"], k["b"]),))
    name = str(rng.choice(list(UNARY) + ["leaky_relu"]))
    x = _data(rng, shape, dt, 3.0)
    backward = rng.random() < 0.4 and name != "relu"
    if name == "leaky_relu":
        slope = float(rng.uniform(0, 0.5))
        if backward:
            return Case("activations", "leaky_relu_backward", ck.leaky_relu_backward,
                        {"grad_out": _data(rng, shape, dt), "x": x, "negative_slope": slope},
                        lambda k: (np.where(k["x"] > 0, k["grad_out"], k["grad_out"] * k["negative_slope"]),))
        return Case("activations", "leaky_relu", ck.leaky_relu, {"x": x, "negative_slope": slope},
                    lambda k: (np.where(k["x"] > 0, k["x"], k["x"] * k["negative_slope"]),))
    fwd, d = UNARY[name]
    kw = {"approximate": "none"} if name == "gelu_erf" else {}
    fn_name = "gelu" if name == "gelu_erf" else name
    if backward:
        # the derivatives are built from terms of about 1 + |x| (0.5 (1 + tanh u) in gelu's) that
        # cancel where the derivative is tiny: the error is relative to those terms, not to the
        # result (seed 1877653521: gelu_backward at x = -6.29, -5.32, derivatives 5e-11 and 2e-7,
        # 1 + tanh u off by 7e-16 in the reference and the kernel alike, read as 4.65e-9 normwise)
        return Case("activations", fn_name + "_backward", getattr(ck, fn_name + "_backward"),
                    {"grad_out": _data(rng, shape, dt), "x": x, **kw}, lambda k: (k["grad_out"] * d(k["x"]),),
                    scale=lambda k: float(np.abs(k["grad_out"] * (1 + np.abs(k["x"]))).max(initial=0.0)))
    # the forward likewise: gelu's x 0.5 (1 + tanh u) cancels to ~1e-13 at x = -6.7, an error relative
    # to |x| (fresh seed 447192721: gelu of one float64 element read as 1.04e-8 normwise)
    return Case("activations", fn_name, getattr(ck, fn_name), {"x": x, **kw}, lambda k: (fwd(k["x"]),),
                scale=lambda k: float(np.abs(k["x"]).max(initial=0.0)))


def _mean_rounding_scale(x, axes, eps, w) -> float:
    """The size of a normalisation's output error where y = (x - mean) rstd w cancels in x - mean:
    one rounding of the mean is relative to |x| rstd |w| (a group of close values around a large
    mean: rstd in the hundreds)."""
    spread = np.abs(x).max(axis=axes) / np.sqrt(x.var(axis=axes) + eps)
    return float(spread.max()) * (float(np.abs(w).max()) if w is not None else 1.0)


def make_normalization(rng, dt):
    kind = str(rng.choice(["layernorm", "rmsnorm", "layernorm_backward", "batch_norm"]))
    shape = _shape(rng, 2, 3, 7)
    x = _data(rng, shape, dt, 2.0) + np.asarray(rng.normal(0, 3), dt)
    k = 1 if rng.random() < 0.7 or len(shape) < 3 else 2
    norm = shape[len(shape) - k:]
    w = _data(rng, norm, dt) if rng.random() < 0.6 else None
    b = _data(rng, norm, dt) if rng.random() < 0.6 else None
    eps = float(rng.choice([1e-5, 1e-3, 0.1]))
    if kind == "layernorm":
        return Case("normalization", kind, ck.layernorm,
                    {"x": x, "weight": w, "bias": b, "eps": eps, "normalized_ndim": k},
                    lambda a: (_ln(a["x"], a["weight"], a["bias"], a["eps"], a["normalized_ndim"]),),
                    scale=lambda a: _mean_rounding_scale(a["x"], tuple(range(len(shape) - k, len(shape))), a["eps"],
                                                         a["weight"]))
    if kind == "rmsnorm":
        return Case("normalization", kind, ck.rmsnorm, {"x": x, "weight": w, "eps": eps, "normalized_ndim": k},
                    lambda a: (_ln(a["x"], a["weight"], None, a["eps"], a["normalized_ndim"], rms=True),))
    if kind == "layernorm_backward":
        _, mean, rstd = ck.layernorm_with_stats(x, w, None, eps, k)
        g = _data(rng, shape, dt)

        def ref(a):
            ax = tuple(range(len(shape) - k, len(shape)))
            m, r = a["mean"].reshape(mean.shape + (1,) * k), a["rstd"].reshape(rstd.shape + (1,) * k)
            xh = (a["x"] - m) * r
            gw = a["grad_out"] * (a["weight"] if a["weight"] is not None else 1)
            n = np.prod([shape[i] for i in ax])
            dx = r * (gw - gw.sum(axis=ax, keepdims=True) / n - xh * (gw * xh).sum(axis=ax, keepdims=True) / n)
            lead = tuple(range(len(shape) - k))
            dw = (a["grad_out"] * xh).sum(axis=lead) if a["weight"] is not None else None
            return (dx, dw, a["grad_out"].sum(axis=lead))
        # dx = rstd (g - mean(g) - xhat mean(g xhat)) cancels (to 0 for rows of two): its error is
        # relative to the terms, max |rstd g w|
        return Case("normalization", kind, ck.layernorm_backward,
                    {"grad_out": g, "x": x, "weight": w, "mean": mean, "rstd": rstd, "normalized_ndim": k}, ref,
                    scale=lambda a: float(np.abs(a["grad_out"] * (1 if a["weight"] is None else a["weight"])).max()
                                          * np.abs(a["rstd"]).max()))
    # batch_norm, training, with running statistics updated in place
    c = shape[1]
    rm, rv = _data(rng, (c,), dt), (np.abs(_data(rng, (c,), dt)) + np.asarray(0.5, dt)).astype(dt)
    if shape[0] * int(np.prod(shape[2:])) < 2:
        x = np.concatenate([x, x + np.asarray(1, dt)])
        shape = x.shape
    mom = float(rng.uniform(0, 1))
    gamma = _data(rng, (c,), dt) if rng.random() < 0.6 else None
    beta = _data(rng, (c,), dt) if rng.random() < 0.6 else None
    ax = (0,) + tuple(range(2, len(shape)))

    def bshape(v):
        return v.reshape((1, c) + (1,) * (len(shape) - 2))

    def ref(a):
        mu, var = a["x"].mean(axis=ax), a["x"].var(axis=ax)
        y = (a["x"] - bshape(mu)) / np.sqrt(bshape(var) + a["eps"])
        y = y * bshape(a["gamma"]) if a["gamma"] is not None else y
        return (y + bshape(a["beta"]) if a["beta"] is not None else y,)

    def ref_inplace(a):
        n = a["x"].size // c
        mu, var = a["x"].mean(axis=ax), a["x"].var(axis=ax) * n / (n - 1)
        m = a["momentum"]
        return {"running_mean": (1 - m) * a["running_mean"] + m * mu, "running_var": (1 - m) * a["running_var"] + m * var}
    def scale(a):
        return _mean_rounding_scale(a["x"], ax, a["eps"], a["gamma"])

    def inplace_scale(a):   # (1 - m) r + m mean may cancel; the mean carries roundings of |x|, the
        # variance (of x - mean) of 2 |x| std
        m, big = a["momentum"], np.abs(a["x"]).max(axis=ax)
        std = np.sqrt(a["x"].var(axis=ax))
        return {"running_mean": float(((1 - m) * np.abs(a["running_mean"]) + m * big).max()),
                "running_var": float(((1 - m) * np.abs(a["running_var"]) + m * (std * std + 2 * big * std)).max())}
    return Case("normalization", "batch_norm", ck.batch_norm,
                {"x": x, "gamma": gamma, "beta": beta, "running_mean": rm, "running_var": rv, "training": True,
                 "momentum": mom, "eps": eps}, ref, ("running_mean", "running_var"), ref_inplace, scale,
                inplace_scale=inplace_scale)


def make_reduction(rng, dt):
    op = str(rng.choice(["sum", "mean", "max", "min", "var", "argmax", "sum_backward"]))
    shape = _shape(rng, 1, 3, 7)
    x = _data(rng, shape, dt)
    nd = len(shape)
    if op == "argmax":
        axis = int(rng.integers(-nd, nd)) if rng.random() < 0.7 else None
        return Case("reduction", op, ck.argmax, {"x": x, "axis": axis},
                    lambda a: (np.argmax(a["x"], axis=a["axis"]),))
    axis = None if rng.random() < 0.3 else tuple(sorted(set(int(v) for v in rng.integers(0, nd, size=2))))
    keep = bool(rng.random() < 0.5)
    if op == "sum_backward":
        out_shape = np.sum(np.zeros(shape), axis=axis, keepdims=keep).shape
        return Case("reduction", op, ck.sum_backward,
                    {"grad_out": _data(rng, out_shape, dt), "x_shape": shape, "axis": axis, "keepdims": keep},
                    lambda a: (np.broadcast_to(np.sum(np.zeros(shape), axis=axis, keepdims=True) +
                                               a["grad_out"].reshape(np.sum(np.zeros(shape), axis=axis,
                                                                            keepdims=True).shape), shape),))
    if op == "var":
        return Case("reduction", op, ck.var, {"x": x, "axis": axis, "ddof": 0, "keepdims": keep},
                    lambda a: (np.var(a["x"], axis=a["axis"], keepdims=a["keepdims"]),))
    return Case("reduction", op, getattr(ck, op), {"x": x, "axis": axis, "keepdims": keep},
                lambda a, op=op: (getattr(np, op)(a["x"], axis=a["axis"], keepdims=a["keepdims"]),))


def make_softmax(rng, dt):
    shape = _shape(rng, 1, 3, 9)
    x = _data(rng, shape, dt, 4.0)
    axis = int(rng.integers(-len(shape), len(shape)))
    if rng.random() < 0.25:
        n, c = int(rng.integers(1, 6)), int(rng.integers(1, 9))
        logits = _data(rng, (n, c), dt, 3.0)
        t = rng.integers(0, c, size=n).astype(np.int64)
        red = str(rng.choice(["mean", "sum", "none"]))

        def ref(a):
            loss = np.log(np.exp(a["logits"] - a["logits"].max(1, keepdims=True)).sum(1)) + a["logits"].max(1) \
                - a["logits"][np.arange(n), a["targets"]]
            return (loss.mean() if red == "mean" else loss.sum() if red == "sum" else loss,)
        # loss = logsumexp - logits[t] cancels: its error is relative to the terms (summed for "sum")
        return Case("softmax", "cross_entropy", ck.cross_entropy, {"logits": logits, "targets": t, "reduction": red},
                    ref, scale=lambda a: (float(np.abs(a["logits"]).max()) + np.log(c)) * (n if red == "sum" else 1))
    log = bool(rng.random() < 0.5)
    fn = ck.log_softmax if log else ck.softmax
    return Case("softmax", fn.__name__, fn, {"x": x, "axis": axis}, lambda a: (_softmax(a["x"], a["axis"], log),))


def make_layout(rng, dt):
    shape = _shape(rng, 1, 4, 5)
    x = _data(rng, shape, dt)
    axes = tuple(int(a) for a in rng.permutation(len(shape)))
    if rng.random() < 0.3:
        return Case("layout", "transpose", ck.transpose, {"x": x, "axes": None}, lambda a: (np.transpose(a["x"]),))
    return Case("layout", "permute", ck.permute, {"x": x, "axes": axes}, lambda a: (np.transpose(a["x"], axes),))


def make_dropout(rng, dt):
    shape = _shape(rng, 0, 3, 9)
    x = _data(rng, shape, dt)
    p = float(rng.choice([0.0, 0.1, 0.5, 0.9]))
    seed = int(rng.integers(0, 2 ** 63))
    mask = ck.dropout_mask(shape, p, seed, backend="cpu")
    s = np.float64(np.float64(1 / (1 - p)).astype(np.float64 if dt == np.float64 else np.float32))
    return Case("dropout", "dropout", ck.dropout, {"x": x, "p": p, "seed": seed, "training": True},
                lambda a: (np.where(mask, a["x"] * s, 0.0),))


def make_linalg(rng, dt):
    m, k, n = (int(v) for v in rng.integers(1, 7, size=3))
    if rng.random() < 0.5:
        batch = _shape(rng, 0, 2, 3)
        a, b = _data(rng, batch + (m, k), dt), _data(rng, (k, n), dt)
        # (a dot product's terms may cancel: its error is relative to sum |a_i b_i|)
        return Case("linalg", "matmul", ck.matmul, {"a": a, "b": b}, lambda z: (z["a"] @ z["b"],),
                    scale=lambda z: float((np.abs(z["a"]) @ np.abs(z["b"])).max(initial=0.0)))
    x, w = _data(rng, (m, k), dt), _data(rng, (n, k), dt)
    bias = _data(rng, (n,), dt) if rng.random() < 0.5 else None
    return Case("linalg", "linear", ck.linear, {"x": x, "weight": w, "bias": bias},
                lambda z: (z["x"] @ z["weight"].T + (0 if z["bias"] is None else z["bias"]),),
                scale=lambda z: float((np.abs(z["x"]) @ np.abs(z["weight"]).T
                                       + (0 if z["bias"] is None else np.abs(z["bias"]))).max(initial=0.0)))


def make_attention(rng, dt):
    bh, lq, lk, d = (int(v) for v in rng.integers(1, 6, size=4))
    q, k, v = _data(rng, (bh, lq, d), dt), _data(rng, (bh, lk, d), dt), _data(rng, (bh, lk, d), dt)
    causal = bool(rng.random() < 0.4) and lk >= lq
    scale = None if rng.random() < 0.5 else float(rng.uniform(0.1, 1.0))
    return Case("attention", "attention", ck.attention, {"q": q, "k": k, "v": v, "scale": scale, "causal": causal},
                lambda a: (_attention(a["q"], a["k"], a["v"], 1 / math.sqrt(d) if a["scale"] is None else a["scale"],
                                      a["causal"]),),
                # (P V, a weighted mean of v, cancels where v's signs differ: its error is relative to
                # max |v|, times 1 + the largest |score| whose rounding moves the weights)
                scale=lambda a: float(np.abs(a["v"]).max()) * (1.0 + float(np.abs(
                    np.einsum("bqd,bkd->bqk", a["q"], a["k"])).max()) * (1 / math.sqrt(d) if a["scale"] is None
                                                                        else a["scale"])))


def make_conv(rng, dt):
    n, c, h, w = (int(v) for v in rng.integers(1, 5, size=4))
    h, w = h + 3, w + 3
    x = _data(rng, (n, c, h, w), dt)
    kind = str(rng.choice(["conv2d", "max_pool2d", "avg_pool2d"]))
    if kind == "conv2d":
        kout, r = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        wt = _data(rng, (kout, c, r, r), dt)
        bias = _data(rng, (kout,), dt) if rng.random() < 0.5 else None
        stride, pad, dil = int(rng.integers(1, 3)), int(rng.integers(0, 2)), int(rng.integers(1, 3))
        if min(h, w) + 2 * pad < dil * (r - 1) + 1:
            dil = 1
        return Case("conv", kind, ck.conv2d, {"x": x, "weight": wt, "bias": bias, "stride": stride, "padding": pad,
                                               "dilation": dil},
                    lambda a: (_conv(a["x"], a["weight"], a["bias"], a["stride"], a["padding"], a["dilation"]),),
                    # (its sums of products may cancel: the error is relative to the sums of |terms|)
                    scale=lambda a: float(_conv(np.abs(a["x"]), np.abs(a["weight"]),
                                                None if a["bias"] is None else np.abs(a["bias"]), a["stride"],
                                                a["padding"], a["dilation"]).max(initial=0.0)))
    ks = int(rng.integers(1, 4))
    stride = int(rng.integers(1, 3))
    pad = int(rng.integers(0, ks // 2 + 1))
    if kind == "max_pool2d":
        return Case("conv", kind, ck.max_pool2d, {"x": x, "kernel_size": ks, "stride": stride, "padding": pad},
                    lambda a: (_windows(a["x"], ks, ks, stride, stride, pad, pad, 1, 1, -np.inf).max(axis=(4, 5)),))
    return Case("conv", kind, ck.avg_pool2d, {"x": x, "kernel_size": ks, "stride": stride, "padding": pad},
                lambda a: (_windows(a["x"], ks, ks, stride, stride, pad, pad, 1, 1, 0.0).mean(axis=(4, 5)),))


def make_optim(rng, dt):
    shape = _shape(rng, 1, 2, 6)
    p, g = _data(rng, shape, dt), _data(rng, shape, dt)
    acc = np.float64 if dt == np.float64 else np.float32
    lr = float(rng.uniform(0.001, 0.5))
    if rng.random() < 0.5:
        st = ck.OptimizerState(lr=lr)
        return Case("optimizers", "sgd_update", ck.sgd_update,
                    {"params": p, "gradients": g, "momentum": None, "optimizer_state": st}, None, ("params",),
                    lambda a: {"params": a["params"] - lr * a["gradients"]},
                    # (p - lr g cancels: its error is relative to |p| + lr |g|)
                    inplace_scale=lambda a: {"params": float(np.abs(a["params"]).max()
                                                             + lr * np.abs(a["gradients"]).max())})
    st = ck.OptimizerState(lr=lr)
    m, v = np.zeros(shape, acc), np.zeros(shape, acc)

    def ref_inplace(a):
        gg = a["gradients"]
        m1, v1 = 0.1 * gg, 0.001 * gg * gg
        return {"params": a["params"] - lr * (m1 / 0.1) / (np.sqrt(v1 / 0.001) + 1e-8), "m_buffer": m1, "v_buffer": v1}
    return Case("optimizers", "adam_update", ck.adam_update,
                {"params": p, "gradients": g, "m_buffer": m, "v_buffer": v, "optimizer_state": st}, None,
                ("params", "m_buffer", "v_buffer"), ref_inplace,
                # (the first step moves p by lr m / sqrt(v), at most lr: p minus it may cancel)
                inplace_scale=lambda a: {"params": float(np.abs(a["params"]).max()) + lr})


MAKERS = {"elementwise": make_elementwise, "normalization": make_normalization, "reduction": make_reduction,
          "softmax": make_softmax, "layout": make_layout, "dropout": make_dropout, "linalg": make_linalg,
          "attention": make_attention, "conv": make_conv, "optimizers": make_optim}


# ---- bad values --------------------------------------------------------------------------------

def _object_array():
    a = np.empty(2, object)
    a[:] = [1, "x"]
    return a


def bad_values(value, rng):
    """Replacement values for an argument whose valid value is `value`."""
    if isinstance(value, np.ndarray):
        out = [None, "abc", 3j, _object_array(), np.array(["a", "b"]), value.astype(np.int32),
               value.astype(np.complex64), np.asarray(value.sum()), value[..., None],
               np.ones(tuple(d + 1 for d in value.shape), value.dtype), [[1.0, 2.0], [3.0]]]
        ro = value.copy()
        ro.flags.writeable = False
        out.append(ro)
        if value.dtype in DTYPES:
            other = [d for d in DTYPES if d != value.dtype]
            out.append(value.astype(other[int(rng.integers(0, len(other)))]))
        return out
    if isinstance(value, (bool, np.bool_)):
        return ["no", 2, None, np.array([True, False]), 0.5, "True"]
    if isinstance(value, ck.OptimizerState):
        return [None, {"lr": 0.1}, 0.1, "adam"]
    if isinstance(value, float):
        return [None, float("nan"), float("inf"), -float("inf"), -1.0, 10 ** 400, -10 ** 400, "1", True,
                np.array([1.0, 2.0]), 1 + 1j, 1e308]
    if isinstance(value, int):
        return [-1, 0, 10 ** 18, 2 ** 63, 10 ** 400, 2.5, "2", None, True, np.array([1, 2])]
    if isinstance(value, tuple):
        return [(-100,), (10 ** 18,), (2.5,), "01", {0, 1}, (True,), tuple(range(9)), ((0,),), None, [0, 0]]
    if isinstance(value, str):
        return ["nosuch", None, 3, "", b"none"]
    if value is None:
        return ["abc", 3j, np.array(["a"]), _object_array(), -5, {0: 1}]
    return [None]


# ---- running -------------------------------------------------------------------------------------

@dataclass
class Report:
    cases: int = 0
    valid: int = 0
    mutated: int = 0
    raised_typed: int = 0
    accepted: int = 0
    generic: list = field(default_factory=list)
    wrong: list = field(default_factory=list)
    partial: list = field(default_factory=list)
    families: set = field(default_factory=set)
    seconds: float = 0.0

    @property
    def problems(self) -> list:
        return self.generic + self.wrong + self.partial

    def summary(self) -> str:
        return (f"{self.cases} cases ({self.valid} valid, {self.mutated} with a bad argument: {self.raised_typed} "
                f"typed errors, {self.accepted} accepted) over {len(self.families)} families in {self.seconds:.1f} s: "
                f"{len(self.generic)} generic exceptions, {len(self.wrong)} wrong results, "
                f"{len(self.partial)} partial updates")


def _snapshot(kwargs) -> dict:
    return {k: v.copy() for k, v in kwargs.items() if isinstance(v, np.ndarray)}


def _same(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _state_snapshot(kwargs):
    st = kwargs.get("optimizer_state")
    return None if not isinstance(st, ck.OptimizerState) else st.step


def _outputs(r) -> tuple:
    return tuple(r) if isinstance(r, (tuple, list)) else (r,)


def _error(got, want, dt: str) -> float:
    """Normwise error (cudakit.bench.accuracy.error), less the dtype's subnormal spacing on each
    element: a result below the smallest subnormal correctly rounds to 0 (5e-9 in float16)."""
    err = normwise_error(got, want)
    if not np.isfinite(err) or err == 0 or got.dtype.kind in "biu":
        return err
    tiny = float((ml_dtypes.finfo(ml_dtypes.bfloat16) if dt == "bfloat16" else np.finfo(np.dtype(dt))).smallest_subnormal)
    g, w = got.astype(np.float64), want.astype(np.float64)
    fin = np.isfinite(g) & np.isfinite(w)
    if not fin.any():
        return err
    scale = float(np.abs(w[fin]).max()) or 1.0
    return float(np.maximum(np.abs(g[fin] - w[fin]) - 2 * tiny, 0).max()) / scale


def _relative_to(err: float, want, size: float) -> float:
    """_error's err (relative to max |want|) relative to max(max |want|, size) instead: size, the
    terms that cancel in the result."""
    if not np.isfinite(err):
        return err
    mx = float(np.abs(want).max()) if want.size else 0.0
    return err * mx / max(mx, size, 1e-300)


def _check_valid(case: Case, rep: Report) -> None:
    kw64 = {k: f64(v) for k, v in case.kwargs.items()}
    before = _snapshot(case.kwargs)
    label = f"{case.op} {[(k, getattr(v, 'shape', v)) for k, v in case.kwargs.items()]}"
    try:
        got = _outputs(case.fn(**case.kwargs))
    except Exception as e:  # noqa: BLE001 -- a valid call must not raise at all
        rep.wrong.append(f"{label}: raised {type(e).__name__}: {e}")
        return
    dt = next((v.dtype.name for v in case.kwargs.values() if isinstance(v, np.ndarray) and v.dtype in DTYPES),
              "float32")
    tol = TOL[dt]
    if case.ref is not None:
        with np.errstate(all="ignore"):
            want = case.ref(kw64)
        for g, w in zip(got, want):
            if w is None:
                continue
            w = np.asarray(w)
            if np.asarray(g).shape != w.shape:
                rep.wrong.append(f"{label}: shape {np.asarray(g).shape}, want {w.shape}")
                return
            err = _error(np.asarray(g), w, dt)
            if case.scale is not None:
                err = _relative_to(err, w, case.scale(kw64))
            if err > tol:
                rep.wrong.append(f"{label} {dt}: error {err:.3g} > {tol:.3g}")
                return
    if case.ref_inplace is not None:
        with np.errstate(all="ignore"):
            want = case.ref_inplace(kw64)
        sizes = case.inplace_scale(kw64) if case.inplace_scale is not None else {}
        for k, w in want.items():
            err = _error(case.kwargs[k], np.asarray(w), dt)
            if k in sizes:
                err = _relative_to(err, np.asarray(w), sizes[k])
            if err > tol:
                rep.wrong.append(f"{label} {dt}: in-place {k} error {err:.3g} > {tol:.3g}")
                return
    for k, v in before.items():
        if k not in case.inplace and not _same(v, case.kwargs[k]):
            rep.partial.append(f"{label}: changed its input {k}")


def _check_mutated(case: Case, key: str, bad, rep: Report) -> None:
    kwargs = dict(case.kwargs)
    for k in case.inplace:   # fresh copies of what the op writes, so that each call starts alike
        kwargs[k] = kwargs[k].copy()
    kwargs[key] = bad
    before = _snapshot(kwargs)
    step = _state_snapshot(kwargs)
    label = f"{case.op}({key}={_short(bad)})"
    try:
        with np.errstate(all="ignore"):
            case.fn(**kwargs)
    except CudakitError:
        rep.raised_typed += 1
        changed = [k for k, v in before.items() if not _same(v, kwargs[k])]
        if changed or step != _state_snapshot(kwargs):
            rep.partial.append(f"{label}: raised but changed {changed or ['optimizer_state.step']}")
        return
    except Exception as e:  # noqa: BLE001 -- what the fuzzer is looking for
        rep.generic.append(f"{label}: {type(e).__name__}: {str(e)[:160]}")
        return
    rep.accepted += 1
    for k, v in before.items():
        if k not in case.inplace and k != key and not _same(v, kwargs[k]):
            rep.partial.append(f"{label}: changed its input {k}")


def _short(v) -> str:
    if isinstance(v, np.ndarray):
        return f"array{v.shape}:{v.dtype}" + ("(ro)" if not v.flags.writeable else "")
    s = repr(v)
    return s if len(s) < 30 else s[:27] + "..."


def run(cases: int = 2400, seed: int = 0, mutations_per_case: int = 4) -> Report:
    """Run about `cases` calls (valid ones and mutations of them, spread over every family and
    dtype) and return the Report."""
    rng = np.random.default_rng(seed)
    rep = Report()
    t0 = time.perf_counter()
    fams = list(MAKERS)
    i = 0
    while rep.cases < cases:
        fam = fams[i % len(fams)]
        dt = DTYPES[(i // len(fams)) % len(DTYPES)]
        i += 1
        case = MAKERS[fam](rng, dt)
        rep.families.add(case.family)
        _check_valid(case, rep)
        rep.valid += 1
        rep.cases += 1
        keys = [k for k in case.kwargs if k not in case.skip_mutation]
        for _ in range(mutations_per_case):
            key = keys[int(rng.integers(0, len(keys)))]
            pool = bad_values(case.kwargs[key], rng)
            bad = pool[int(rng.integers(0, len(pool)))]
            _check_mutated(case, key, bad, rep)
            rep.mutated += 1
            rep.cases += 1
    rep.seconds = time.perf_counter() - t0
    return rep


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", type=int, default=2400)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    rep = run(a.cases, a.seed)
    print(rep.summary())
    for line in rep.problems[:40]:
        print("  " + line)
    return 1 if rep.problems else 0


if __name__ == "__main__":
    sys.exit(main())
