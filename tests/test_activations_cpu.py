"""Activations, their backward, sub and div on the CPU backend against float64 references."""
import ml_dtypes
import numpy as np
import pytest

import cudakit
from activation_reference import TOL, assert_elementwise, condition, derivative, forward
from helpers import DTYPES, assert_same, np_dtype, random, reference

ACTS = ["leaky_relu", "sigmoid", "tanh", "silu", "gelu", "gelu_erf"]


def _call(be, name, x):
    if name == "gelu_erf":
        return be.gelu(x, approximate="none")
    return getattr(be, name)(x)


def _call_bwd(be, name, g, x):
    if name == "gelu_erf":
        return be.gelu_backward(g, x, approximate="none")
    return getattr(be, name + "_backward")(g, x)


def _norm_bound(fn, dtype, x, want) -> float:
    """The bound on ||got - want|| (want rounded to got's dtype, as rel_err) of a result fn(x)
    (an activation, or its derivative times a gradient): TOL times ||want||, for float32 and float64
    at least 64 eps times fn's condition number at each input, weighted by |want| (where the
    derivative nearly cancels, gelu's near x = -0.75, its float32 value carries a relative error of
    about eps times that condition: 2.5e-4 at one such input; gelu_erf's forward has condition
    about x^2 on its left tail), plus the dtype's smallest normal per element (a result in the
    subnormal range, gelu's between x = -10.1 and -10.8 in float32, may flush to zero: for one
    element a relative error of 1)."""
    w = np.abs(np.asarray(want, np.float64))
    tol = max(TOL[dtype], 1e-7 if dtype == "float64" else 0)
    if dtype in ("float32", "float64"):
        cond = condition(fn, x)
        tol = max(tol, 64 * np.finfo(dtype).eps * np.linalg.norm((1 + cond) * w) / max(np.linalg.norm(w), 1e-300))
    return tol * np.linalg.norm(w) + float(ml_dtypes.finfo(np_dtype(dtype)).tiny) * np.sqrt(w.size)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ACTS)
@pytest.mark.parametrize("n", [1, 257, 1823 * 3])
def test_activation_forward_and_backward(name, dtype, n, rng):
    be = cudakit.get_backend("cpu")
    x = (3 * rng.standard_normal(n)).astype(np_dtype(dtype))
    g = rng.standard_normal(n).astype(np_dtype(dtype))
    y = _call(be, name, x)
    assert y.dtype == np_dtype(dtype) and y.shape == x.shape
    for got, want, fn in ((y, forward(name, x), lambda z: forward(name, z)),
                          (_call_bwd(be, name, g, x), np.asarray(g, np.float64) * derivative(name, x),
                           lambda z: derivative(name, z))):
        err = np.linalg.norm(np.asarray(got, np.float64) - np.asarray(want).astype(got.dtype).astype(np.float64))
        assert err <= _norm_bound(fn, dtype, x, want), (err, np.linalg.norm(want))
    # and every element (a norm lets a zeroed tail through in 16-bit; see element_errors)
    assert_elementwise(y, forward(name, x), dtype, x, condition(lambda z: forward(name, z), x), name)
    ones = np.ones_like(x)
    keep = np.abs(x.astype(np.float64)) <= (12 if name == "gelu" else 600)   # the reference's range
    d = _call_bwd(be, name, ones, x)[keep]
    assert_elementwise(d, derivative(name, x[keep]), dtype, x[keep],
                       condition(lambda z: derivative(name, z), x[keep]), name + "_backward")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bwd", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("name", ACTS)
def test_every_16_bit_input_within_one_ulp(name, bwd, dtype):
    # every finite value of the dtype: within one unit in the last place of the correctly rounded
    # float64 result (the GPU's test is tests/gpu/test_activations_gpu.py)
    be = cudakit.get_backend("cpu")
    x = np.arange(1 << 16, dtype=np.uint16).view(np_dtype(dtype))
    x = x[np.isfinite(x.astype(np.float32))]
    if bwd:   # past |x| = 600 (gelu: 12) the derivative is its limit to 16-bit rounding
        lim = 12 if name == "gelu" else 600
        got, ref = _call_bwd(be, name, np.ones_like(x), x), derivative(name, np.clip(x.astype(np.float64), -lim, lim))
    else:
        got, ref = _call(be, name, x), forward(name, x)
    assert_elementwise(got, ref, dtype, x, what=name + ("_backward" if bwd else ""))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sub", "div"])
def test_sub_div(op, dtype, rng):
    a, b = random(rng, (7, 1, 5), dtype), random(rng, (6, 5), dtype)
    got = getattr(cudakit, op)(a, b)
    acc = np.float64 if dtype == "float64" else np.float32
    want = (a.astype(acc) - b.astype(acc)) if op == "sub" else (a.astype(acc) / b.astype(acc))
    assert_same(got, want.astype(np_dtype(dtype)))


def test_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 100.0, -100.0], np.float32)
    assert_same(cudakit.sigmoid(x), [np.nan, 1, 0, 0.5, 0.5, 1, forward("sigmoid", -100.0).astype(np.float32)])
    assert_same(cudakit.tanh(x), [np.nan, 1, -1, 0, 0, 1, -1])
    assert_same(cudakit.leaky_relu(x, 0.5), [np.nan, np.inf, -np.inf, 0, 0, 100, -50])
    assert np.isnan(cudakit.gelu(x)[0]) and cudakit.gelu(x)[1] == np.inf and cudakit.gelu(x)[5] == 100
    assert_same(cudakit.div(np.float32([1, -1, 0]), np.float32([0, 0, 0])), [np.inf, -np.inf, np.nan])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu_backward_of_huge_inputs_is_its_limit(dtype):
    # x^3 overflows (float32 past 7e12) where sigmoid(2u)(1 - sigmoid(2u)) is 0: 1 and 0, not NaN
    x = np.array([1e30, -1e30, 3e38 if dtype == "float32" else 1e300], dtype)
    assert_same(cudakit.gelu_backward(np.ones_like(x), x), [1, 0, 1])


def test_activation_by_kind_and_bad_input():
    import enum

    class ActivationType(enum.Enum):
        RELU = 1
        GELU = 2
    x = np.linspace(-2, 2, 9).astype(np.float32)
    assert_same(cudakit.activation(x, ActivationType.GELU), cudakit.gelu(x))
    assert_same(cudakit.activation(x, "relu"), reference("relu", x, dtype="float32"))
    with pytest.raises(ValueError, match="unknown activation 'softplus'; known:"):
        cudakit.activation(x, "softplus")
    with pytest.raises(ValueError, match="approximate must be 'tanh' or 'none'"):
        cudakit.gelu(x, approximate="fast")
    with pytest.raises(cudakit.ArgumentTypeError, match="approximate must be 'tanh' or 'none'"):
        cudakit.gelu(x, approximate=np.array(["tanh", "none"]))   # (was NumPy's truth-value error)
    with pytest.raises(ValueError, match="negative_slope must be a finite number"):
        cudakit.leaky_relu(x, float("nan"))
    with pytest.raises(cudakit.ShapeError):
        cudakit.sigmoid_backward(np.ones(3, np.float32), np.ones(4, np.float32))
    with pytest.raises(cudakit.DTypeError):
        cudakit.tanh(np.ones(3, np.int64))
