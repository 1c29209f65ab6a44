"""Property-based tests (hypothesis) on the GPU against the CPU backend: shapes, dtypes, strided
views and parameters drawn by hypothesis, each op run on CuPy arrays and on NumPy copies."""
import numpy as np
import pytest

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")
pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import cudakit as ck  # noqa: E402
import fuzz_ops as F  # noqa: E402

SETTINGS = settings(max_examples=30, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
dtypes = st.sampled_from(F.DTYPES)
nonempty = st.lists(st.integers(1, 300), min_size=1, max_size=3).map(tuple)
TOL = {"float16": 8 * 2.0 ** -11, "bfloat16": 8 * 2.0 ** -8, "float32": 1e-4, "float64": 1e-10}


def _pair(draw, shape, dt, scale=1.0):
    """(NumPy array, the same values on the GPU): a contiguous array or a step-2 view."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    if draw(st.booleans()):
        full = (rng.standard_normal(shape[:-1] + (2 * shape[-1],)) * scale).astype(dt)
        return full[..., ::2], cp.asarray(full)[..., ::2]
    h = np.asarray(rng.standard_normal(shape) * scale).astype(dt)
    return h, cp.asarray(h)


def _same(got, want, dt):
    err = F._error(cp.asnumpy(got), np.asarray(want).astype(np.float64), np.dtype(dt).name)
    assert err <= TOL[np.dtype(dt).name], err


@SETTINGS
@given(st.data(), dtypes, nonempty, st.sampled_from(["add", "mul", "sub", "div", "relu", "gelu", "silu", "sigmoid"]))
def test_elementwise(data, dt, shape, op):
    a, da = _pair(data.draw, shape, dt, 3.0)
    if op in F.BINARY:
        b, db = _pair(data.draw, shape, dt)
        _same(getattr(ck, op)(da, db), getattr(ck, op)(a, b), dt)
    else:
        _same(getattr(ck, op)(da), getattr(ck, op)(a), dt)


@SETTINGS
@given(st.data(), dtypes, nonempty, st.sampled_from(["sum", "mean", "max", "min"]), st.booleans())
def test_reductions(data, dt, shape, op, keep):
    x, dx = _pair(data.draw, shape, dt)
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    _same(getattr(ck, op)(dx, axis, keep), getattr(ck, op)(x, axis, keep), dt)


@SETTINGS
@given(st.data(), dtypes, nonempty, st.booleans())
def test_softmax_and_norms(data, dt, shape, log):
    x, dx = _pair(data.draw, shape, dt, 3.0)
    _same((ck.log_softmax if log else ck.softmax)(dx), (ck.log_softmax if log else ck.softmax)(x), dt)
    _same(ck.layernorm(dx), ck.layernorm(x), dt)
    _same(ck.rmsnorm(dx), ck.rmsnorm(x), dt)
