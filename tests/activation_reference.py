"""float64 references for the activations, and tolerances per dtype."""
import math

import ml_dtypes
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


# ---- element by element ------------------------------------------------------------------------
# A whole-array norm lets a kernel that returns 0 on a tail (gelu for x < -3, silu for x < -6,
# sigmoid for x < -8) pass in 16-bit: those elements are small next to the norm. Every element is
# checked instead: 16-bit results within one unit in the last place of the correctly rounded float64
# reference (float32 arithmetic rounded once), float32/float64 within a few units of their precision
# times the function's condition number at that input (|x f'(x) / f(x)|: the input's own rounding
# error, amplified, is the best any implementation can do).

def round_to(ref, dtype):
    """float64 -> dtype rounded once. NumPy's float64 -> float16 is correctly rounded; bfloat16 goes
    through float32 (ml_dtypes), so a float32 value exactly on a bfloat16 midpoint is nudged one
    float32 ulp towards the float64 value first (else it is rounded to even whichever side the true
    value lies on)."""
    ref = np.asarray(ref, np.float64)
    if np.dtype(dtype) != np.dtype(ml_dtypes.bfloat16):
        return ref.astype(dtype)
    f = ref.astype(np.float32)
    tie = (f.view(np.uint32) & 0xFFFF) == 0x8000
    m = f.astype(np.float64)
    f = np.where(tie & (ref > m), np.nextafter(f, np.float32(np.inf)),
                 np.where(tie & (ref < m), np.nextafter(f, np.float32(-np.inf)), f))
    return f.astype(dtype)


def ordered(bits):
    """16-bit float bit patterns as integers in the order of their values (adjacent values differ
    by 1; +0 and -0 are both 0)."""
    b = np.asarray(bits).astype(np.int32)
    return np.where(b & 0x8000, -(b & 0x7FFF), b)


def condition(fn, x):
    """|x f'(x) / f(x)| of the float64 function fn at x, by a central difference (relative step
    1e-6); 0 where f(x) is 0 or not finite."""
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        d = 1e-6
        f0 = fn(x)
        c = np.abs((fn(x * (1 + d)) - fn(x * (1 - d))) / (2 * d * f0))
    return np.where(np.isfinite(c), c, 0.0)


ELEMENT_ULPS = {"float32": 32, "float64": 32}   # units of the dtype's epsilon, times (1 + condition);
# the CPU backend reaches 16 (float32 gelu_backward at x = 5) and 19 (float64 silu_backward at x = 37)


def element_errors(got, ref, dtype, cond=None, tiny=0.0):
    """Boolean mask of the elements of `got` (dtype) outside the bound against the float64 `ref`:
    16-bit: more than 1 ulp from round_to(ref); float32/float64: |got - ref| > ELEMENT_ULPS * eps *
    (1 + cond) * |ref| + the dtype's smallest normal. NaN must match NaN. Elements whose reference is
    below `tiny` in magnitude and whose result is 0 are accepted (a flushed subnormal)."""
    dt = np.dtype(dtype)
    got = np.asarray(got)
    ref = np.asarray(ref, np.float64)
    g64 = got.astype(np.float64)
    nan = np.isnan(ref) | np.isnan(g64)
    bad = np.isnan(ref) != np.isnan(g64)
    if dt.itemsize == 2:
        r = round_to(ref, dt)
        dist = np.abs(ordered(got.view(np.uint16)) - ordered(r.view(np.uint16)))
        bad |= (dist > 1) & ~nan
    else:
        eps, small = float(np.finfo(dt).eps), float(np.finfo(dt).tiny)
        c = 0.0 if cond is None else cond
        with np.errstate(all="ignore"):
            err = np.abs(g64 - ref)
            lim = ELEMENT_ULPS[dt.name] * eps * (1 + c) * np.abs(ref) + small
        same_inf = np.isinf(ref) & (g64 == ref)
        bad |= ~(err <= lim) & ~nan & ~same_inf
    if tiny:
        bad &= ~((g64 == 0) & (np.abs(ref) < tiny))
    return bad


def assert_elementwise(got, ref, dtype, x=None, cond=None, what=""):
    """Raise AssertionError naming the first elements outside element_errors' bound."""
    bad = element_errors(got, ref, dtype, cond)
    if bad.any():
        idx = np.flatnonzero(bad)[:6]
        xs = "" if x is None else f" at x = {np.asarray(x).ravel()[idx]}"
        raise AssertionError(f"{what} {dtype}: {bad.sum()} of {bad.size} elements off{xs}: got "
                             f"{np.asarray(got).ravel()[idx]}, want {np.asarray(ref, np.float64).ravel()[idx]}")
