"""float64 references for the activations, and tolerances per dtype."""
import math

import numpy as np

_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def forward(name, x, slope=0.01):
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        if name == "leaky_relu":
            return np.where(x > 0, x, slope * x)
        if name == "sigmoid":
            return np.where(x > 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))
        if name == "tanh":
            return np.tanh(x)
        if name == "silu":
            return x * forward("sigmoid", x)
        if name == "gelu":  # 0.5 x (1 + tanh(u)) written as x / (1 + exp(-2u)): 1 + tanh(u) cancels in float64 too
            return x / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
        if name == "gelu_erf":
            return 0.5 * x * _erfc(-x / math.sqrt(2))
    raise ValueError(name)


_ANALYTIC = {  # the textbook definitions, evaluated on complex arguments for the complex step
    "sigmoid": lambda z: 1 / (1 + np.exp(-z)),
    "tanh": np.tanh,
    "silu": lambda z: z / (1 + np.exp(-z)),
    # 0.5 z (1 + tanh(u)) as z / (1 + exp(-2u)): 1 + tanh(u) cancels in float64 for u < -19 (seen:
    # a 0.9% error of the reference at x = -7.78, where the kernels were right)
    "gelu": lambda z: z / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3))),
}


def derivative(name, x, slope=0.01):
    """d forward / dx in float64, independent of the kernels' formulas: complex-step
    differentiation, Im f(x + ih) / h, exact to rounding (no cancellation, unlike finite
    differences); gelu_erf from its definition Phi(x) + x phi(x); leaky_relu piecewise."""
    x = np.asarray(x, np.float64)
    if name == "leaky_relu":
        return np.where(x > 0, 1.0, slope)
    if name == "gelu_erf":
        return 0.5 * _erfc(-x / math.sqrt(2)) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    h = 1e-30
    with np.errstate(all="ignore"):
        return _ANALYTIC[name](x + 1j * h).imag / h


# relative error bound on ||got - ref|| / ||ref||, by dtype: a few ulps times the condition number
# of the function (sigmoid(z) carries |z| times z's rounding error: |z| reaches ~20 on the tested
# inputs, so float32 gets 1e-5); 16-bit results may land two units in the last place from the
# rounded reference (one from the float32 math near a rounding boundary, seen once in 40 runs)
TOL = {"float64": 1e-9, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def rel_err(got, ref):
    """||got - ref|| / ||ref|| with ref first rounded to got's dtype: the best any implementation
    can return (a true value below the dtype's range rounds to 0 and must count as exact)."""
    got = np.asarray(got)
    ref = np.asarray(ref, np.float64).astype(got.dtype).astype(np.float64)
    got = got.astype(np.float64)
    return np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300)
