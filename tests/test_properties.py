"""Property-based tests (hypothesis) of every op family on the CPU backend against float64
references: shapes (including size 0 and 1 and odd sizes), dtypes, strided views and parameters
drawn by hypothesis. The references and tolerances are tests/fuzz_ops.py's; the GPU's properties
(against the CPU backend) are in tests/gpu/test_properties_gpu.py."""
import math

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import cudakit as ck  # noqa: E402
import fuzz_ops as F  # noqa: E402

SETTINGS = settings(max_examples=40, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
dtypes = st.sampled_from(F.DTYPES)
dims = st.lists(st.integers(0, 6), min_size=1, max_size=3).map(tuple)
nonempty = st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple)


def arrays(draw, shape, dt, scale=1.0, strided=None):
    """A random array of shape and dtype; strided (drawn when None): a view with a step of 2 along
    the last axis (the same values, non-contiguous)."""
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    if strided is None:
        strided = draw(st.booleans())
    if strided and shape:
        full = (rng.standard_normal(shape[:-1] + (2 * shape[-1],)) * scale).astype(dt)
        return full[..., ::2]
    return np.asarray(rng.standard_normal(shape) * scale).astype(dt)


def close(got, want, dt, scale=None):
    err = F._error(np.asarray(got), np.asarray(want, np.float64), np.dtype(dt).name)
    if scale is not None and np.isfinite(err) and np.asarray(want).size:
        mx = float(np.abs(want).max())
        err = err * mx / max(mx, scale)
    assert err <= F.TOL[np.dtype(dt).name], err


@SETTINGS
@given(st.data(), dtypes, dims, st.sampled_from(sorted(F.BINARY)))
def test_binary_broadcasting(data, dt, shape, op):
    a = arrays(data.draw, shape, dt)
    k = data.draw(st.integers(0, len(shape)))
    b = arrays(data.draw, shape[k:], dt) + (np.asarray(3, dt) if op == "div" else np.asarray(0, dt))
    close(getattr(ck, op)(a, b), F.BINARY[op](F.f64(a), F.f64(b)), dt)


@SETTINGS
@given(st.data(), dtypes, dims, st.sampled_from(sorted(F.UNARY)), st.booleans())
def test_activations(data, dt, shape, name, bwd):
    x = arrays(data.draw, shape, dt, 3.0)
    fn = (lambda x: ck.gelu(x, "none")) if name == "gelu_erf" else getattr(ck, name)
    fwd, d = F.UNARY[name]
    # errors relative to the largest |value| or 1, whichever is larger: an array whose values all lie
    # in a far tail (gelu(-6.7) ~ 1e-13, 1 - tanh(x)^2 for large |x|) is computed, as in PyTorch,
    # with the cancellation of 1 + tanh(u) near -1, a relative error of 2e-4 in float64 there (an
    # absolute one of 3e-17) that the normwise error alone reads as a failure (1 draw in a few
    # thousand, 2026-11-28)
    if bwd and d is not None:
        g = arrays(data.draw, shape, dt)
        bfn = (lambda g, x: ck.gelu_backward(g, x, "none")) if name == "gelu_erf" else getattr(ck, name + "_backward")
        close(bfn(g, x), F.f64(g) * d(F.f64(x)), dt, scale=1.0)
    else:
        close(fn(x), fwd(F.f64(x)), dt, scale=1.0)


@SETTINGS
@given(st.data(), dtypes, nonempty, st.sampled_from(["sum", "mean", "max", "min", "var"]), st.booleans())
def test_reductions(data, dt, shape, op, keep):
    x = arrays(data.draw, shape, dt)
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1),
                               st.sets(st.integers(0, len(shape) - 1), min_size=1).map(lambda s: tuple(sorted(s)))))
    close(getattr(ck, op)(x, axis, keepdims=keep), getattr(np, op)(F.f64(x), axis=axis, keepdims=keep), dt)


@SETTINGS
@given(st.data(), dtypes, nonempty, st.booleans())
def test_softmax(data, dt, shape, log):
    x = arrays(data.draw, shape, dt, 4.0)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    close((ck.log_softmax if log else ck.softmax)(x, axis), F._softmax(F.f64(x), axis, log), dt)


@SETTINGS
@given(st.data(), dtypes, st.lists(st.integers(1, 9), min_size=2, max_size=3).map(tuple), st.booleans(),
       st.floats(1e-6, 1.0))
def test_layernorm_and_rmsnorm(data, dt, shape, rms, eps):
    x = arrays(data.draw, shape, dt, 2.0)
    k = data.draw(st.integers(1, len(shape) - 1))
    w = arrays(data.draw, shape[len(shape) - k:], dt) if data.draw(st.booleans()) else None
    if rms:
        close(ck.rmsnorm(x, w, eps, k), F._ln(F.f64(x), F.f64(w), None, eps, k, rms=True), dt)
    else:
        close(ck.layernorm(x, w, None, eps, k), F._ln(F.f64(x), F.f64(w), None, eps, k), dt)


@SETTINGS
@given(st.data(), dtypes, st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple))
def test_permute_is_exact(data, dt, shape):
    x = arrays(data.draw, shape, dt)
    axes = tuple(data.draw(st.permutations(range(len(shape)))))
    np.testing.assert_array_equal(ck.permute(x, axes), np.transpose(x, axes))


@SETTINGS
@given(st.data(), dtypes, dims, st.floats(0.0, 0.99), st.integers(0, 2 ** 64 - 1))
def test_dropout_is_its_mask_times_the_scale(data, dt, shape, p, seed):
    x = arrays(data.draw, shape, dt)
    y = ck.dropout(x, p, seed)
    mask = ck.dropout_mask(shape, p, seed, backend="cpu")
    s = np.float64(1 / (1 - p)).astype(np.float64 if dt == np.float64 else np.float32).astype(np.float64)
    close(y, np.where(mask, F.f64(x) * s, 0.0), dt)


@SETTINGS
@given(st.data(), dtypes, st.integers(1, 7), st.integers(1, 7), st.integers(1, 7),
       st.lists(st.integers(1, 3), max_size=2).map(tuple))
def test_matmul(data, dt, m, k, n, batch):
    a, b = arrays(data.draw, batch + (m, k), dt), arrays(data.draw, (k, n), dt)
    close(ck.matmul(a, b), F.f64(a) @ F.f64(b), dt)


@SETTINGS
@given(st.data(), dtypes, st.integers(1, 5), st.integers(1, 6), st.integers(1, 6), st.integers(1, 8), st.booleans())
def test_attention(data, dt, bh, lq, lk, d, causal):
    q, k, v = (arrays(data.draw, (bh, length, d), dt) for length in (lq, lk, lk))
    causal = causal and lk >= lq
    close(ck.attention(q, k, v, None, causal), F._attention(F.f64(q), F.f64(k), F.f64(v), 1 / math.sqrt(d), causal), dt)


@SETTINGS
@given(st.data(), dtypes, st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(0, 1),
       st.integers(1, 2), st.integers(1, 2))
def test_conv2d(data, dt, c, kout, r, pad, stride, dil):
    h, w = data.draw(st.integers(dil * (r - 1) + 1, 9)), data.draw(st.integers(dil * (r - 1) + 1, 9))
    x = arrays(data.draw, (2, c, h, w), dt)
    wt = arrays(data.draw, (kout, c, r, r), dt)
    close(ck.conv2d(x, wt, None, stride, pad, dil), F._conv(F.f64(x), F.f64(wt), None, stride, pad, dil), dt)


@SETTINGS
@given(st.data(), dtypes, st.integers(1, 4), st.integers(1, 3))
def test_pooling(data, dt, ks, stride):
    pad = data.draw(st.integers(0, ks // 2))
    x = arrays(data.draw, (1, 2, data.draw(st.integers(ks, 9)), data.draw(st.integers(ks, 9))), dt)
    win = F._windows(F.f64(x), ks, ks, stride, stride, pad, pad, 1, 1, -np.inf)
    close(ck.max_pool2d(x, ks, stride, pad), win.max(axis=(4, 5)), dt)
    win = F._windows(F.f64(x), ks, ks, stride, stride, pad, pad, 1, 1, 0.0)
    close(ck.avg_pool2d(x, ks, stride, pad), win.mean(axis=(4, 5)), dt)


@SETTINGS
@given(st.data(), dtypes, nonempty, st.floats(1e-4, 1.0))
def test_sgd_step(data, dt, shape, lr):
    p = np.ascontiguousarray(arrays(data.draw, shape, dt, strided=False))
    g = arrays(data.draw, shape, dt)
    want = F.f64(p) - lr * F.f64(g)
    # the error of p - lr g is relative to its terms' size, not to a result they cancel down to
    terms = float(np.max(np.abs(F.f64(p)) + lr * np.abs(F.f64(g))))
    ck.sgd_update(p, g, None, ck.OptimizerState(lr=lr))
    close(p, want, dt, scale=terms)
