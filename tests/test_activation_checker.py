"""The activation tests' element-by-element check (activation_reference.element_errors) rejects the
broken kernels of issue 29 in every dtype -- gelu returning 0 for x < -3, silu 0 for x < -6,
sigmoid 0 for x < -8 -- which the whole-array norm (rel_err < TOL) lets through in 16-bit; and it
accepts the correct results of both backends' formulas (the CPU backend's here; the GPU's in
tests/gpu/test_activations_gpu.py, which uses the same check)."""
import numpy as np
import pytest

import cudakit
from activation_reference import TOL, condition, element_errors, forward, rel_err
from helpers import DTYPES, np_dtype

BROKEN = [("gelu", -3.0), ("silu", -6.0), ("sigmoid", -8.0)]   # (activation, returns 0 below this x)


def _inputs(dtype):
    # the tested range: 3 * standard normal values plus a grid through the tails
    rng = np.random.default_rng(0)
    x = np.concatenate([3 * rng.standard_normal(4000), np.linspace(-12, 12, 2401)])
    return x.astype(np_dtype(dtype))


def _correct(name, x):
    return getattr(cudakit.get_backend("cpu"), name)(x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, below", BROKEN)
def test_the_element_check_rejects_a_zeroed_tail(name, below, dtype):
    x = _inputs(dtype)
    ref = forward(name, x)
    cond = condition(lambda z: forward(name, z), x)
    good = _correct(name, x)
    assert not element_errors(good, ref, dtype, cond).any()
    broken = np.where(x.astype(np.float64) < below, np.zeros_like(good), good).astype(good.dtype)
    assert element_errors(broken, ref, dtype, cond).any(), (name, dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name, below", BROKEN)
def test_the_norm_alone_would_have_passed_them_in_16_bit(name, below, dtype):
    # why the element check exists: in 16-bit the norm check misses every one of them
    x = _inputs(dtype)
    broken = _correct(name, x).copy()
    broken[x.astype(np.float64) < below] = 0
    assert rel_err(broken, forward(name, x)) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_element_check_rejects_one_ulp_too_far_in_16_bit_and_nan_for_a_number(dtype):
    x = _inputs(dtype)
    ref = forward("silu", x)
    good = _correct("silu", x)
    bad = good.copy()
    bad[7] = np.nan
    assert element_errors(bad, ref, dtype).any()
    if np_dtype(dtype).itemsize == 2:   # two ulps away from the correctly rounded value
        b = good.copy().view(np.uint16)
        i = int(np.argmax(np.abs(ref)))
        b[i] = b[i] + 2 if good[i] >= 0 else b[i] - 2
        assert element_errors(b.view(good.dtype), ref, dtype).any()
