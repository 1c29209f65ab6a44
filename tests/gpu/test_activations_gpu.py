"""Activations, their backward, sub and div on the GPU against float64 references and the CPU backend."""
import numpy as np
import pytest

import cudakit
from activation_reference import TOL, derivative, element_errors, forward, rel_err
from helpers import DTYPES, assert_same, np_dtype, random

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")

ACTS = ["leaky_relu", "sigmoid", "tanh", "silu", "gelu", "gelu_erf"]


def _call(mod, name, *args, bwd=False):
    suffix = "_backward" if bwd else ""
    if name == "gelu_erf":
        return getattr(mod, "gelu" + suffix)(*args, approximate="none")
    return getattr(mod, name + suffix)(*args)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ACTS)
@pytest.mark.parametrize("n", [1, 257, (1 << 20) + 3])
def test_activation_forward_and_backward(name, dtype, n, rng):
    x = (3 * rng.standard_normal(n)).astype(np_dtype(dtype))
    g = rng.standard_normal(n).astype(np_dtype(dtype))
    dx, dg = cp.asarray(x), cp.asarray(g)
    y = _call(cudakit, name, dx).get()
    assert y.dtype == np_dtype(dtype)
    assert rel_err(y, forward(name, x)) < TOL[dtype]
    d = _call(cudakit, name, dg, dx, bwd=True).get()
    assert rel_err(d, np.asarray(g, np.float64) * derivative(name, x)) < max(TOL[dtype], 1e-7 if dtype == "float64" else 0)
    # the CPU backend computes the same formulas: equal within an ulp or two of the dtype
    ycpu = _call(cudakit, name, x)
    assert rel_err(y, ycpu) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_broadcast_and_out(dtype, rng):
    m = (2 * random(rng, (34, 65), dtype)).astype(np_dtype(dtype))
    dm = cp.asarray(m)
    out = cp.full((17, 22), np.nan, np_dtype(dtype))
    cudakit.gelu(dm[::2, ::3], out=out)
    assert rel_err(out.get(), forward("gelu", m[::2, ::3])) < TOL[dtype]
    col, row = random(rng, (7, 1, 5), dtype), random(rng, (6, 5), dtype)
    got = cudakit.leaky_relu_backward(cp.asarray(row), cp.asarray(col), 0.2).get()
    want = np.broadcast_to(row.astype(np.float64), (7, 6, 5)) * derivative("leaky_relu", np.broadcast_to(col, (7, 6, 5)), 0.2)
    assert rel_err(got, want) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sub", "div"])
def test_sub_div_equal_cpu(op, dtype, rng):
    a, b = random(rng, 4099, dtype), random(rng, 4099, dtype)
    assert_same(getattr(cudakit, op)(cp.asarray(a), cp.asarray(b)).get(), getattr(cudakit, op)(a, b))


def test_special_values_gpu():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, 100.0, -100.0], np.float32)
    dx = cp.asarray(x)
    for name in ("sigmoid", "tanh", "silu", "gelu", "gelu_erf"):
        got, want = _call(cudakit, name, dx).get(), _call(cudakit, name, x)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30, err_msg=name)
    assert_same(cudakit.leaky_relu(dx, 0.5).get(), [np.nan, np.inf, -np.inf, 0, 100, -50])
    huge = cp.asarray(np.array([1e30, -1e30, 3e38], np.float32))   # x^3 overflows: the limits, not NaN
    assert_same(cudakit.gelu_backward(cp.ones_like(huge), huge).get(), [1, 0, 1])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bwd", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("name", ["sigmoid", "tanh", "silu", "gelu", "gelu_erf"])
def test_every_16_bit_input_within_one_ulp(name, bwd, dtype):
    # every finite value of the dtype: the fast math of 16-bit storage (tanh.approx, ex2.approx, the
    # fitted erfc) stays within one unit in the last place of the correctly rounded result (issue
    # 29: float16 was checked only by a whole-array norm, which a zeroed tail passes)
    bits = np.arange(1 << 16, dtype=np.uint16)
    x = bits.view(np_dtype(dtype))
    x = x[np.isfinite(x.astype(np.float32))]
    dx = cp.asarray(x)
    if bwd:
        got = _call(cudakit, name, cp.ones_like(dx), dx, bwd=True).get()
        # past |x| = 600 (gelu: 12, its exponent is cubic) the derivative is its limit (0, or 1
        # for x > 0) to 16-bit rounding; the complex-step reference would overflow there
        lim = 12 if name == "gelu" else 600
        ref = derivative(name, np.clip(x.astype(np.float64), -lim, lim))
    else:
        got, ref = _call(cudakit, name, dx).get(), forward(name, x)
    # ex2.approx flushes results below float32's normal range (2^-126) to 0, and the activations
    # multiply such a factor by |x| <= 88 (silu(-88) = -5e-37 comes out -0): results under 2^-118
    # may be 0
    bad = element_errors(got, ref, dtype, tiny=2.0 ** -118)
    assert not bad.any(), (name, x[bad][:8], got[bad][:8], ref[bad][:8])
