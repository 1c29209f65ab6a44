"""Reductions on the CPU backend (cudakit.backends.get_backend("cpu")) against the float64
references of tests/reduction_reference.py: every op, dtype and case, NaN/inf, backward, bad input."""
import ml_dtypes
import numpy as np
import pytest
import reduction_reference as ref
from helpers import DTYPES, np_dtype

from cudakit.backends import get_backend
from cudakit.errors import DTypeError, ShapeError


@pytest.fixture(scope="module")
def b():
    return get_backend("cpu")


def _dev(a):
    return np.asarray(a)


def _host(a):
    assert isinstance(a, np.ndarray), type(a)
    return a


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ref.FORWARD_CASES, ids=ref.case_id)
def test_forward(b, rng, case, dtype):
    ref.run_forward_case(b, _dev, _host, rng, case, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ref.BACKWARD_CASES, ids=str)
def test_backward(b, rng, case, dtype):
    ref.run_backward_case(b, _dev, _host, rng, case, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ref.LIKE_CASES, ids=str)
def test_backward_in_the_layout_of_like(b, rng, case, dtype):
    ref.run_backward_like(b, _dev, _host, rng, case, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_inf(b, dtype):
    ref.run_nan_inf(b, _dev, _host, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_var_large_mean(b, rng, dtype):
    x = ref.normal(rng, (64, 4096), dtype, loc=1e4)
    for axis in (-1, None):
        ref.check_forward(b.var(x, axis=axis), "var", x, axis, what="large mean")
    ref.check_forward(b.var(np.ascontiguousarray(x.T), axis=0), "var", np.ascontiguousarray(x.T), 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty(b, dtype):
    dt = np_dtype(dtype)
    x = np.zeros((3, 0), dt)
    assert b.sum(x, axis=1).tolist() == [0, 0, 0] and b.sum(x, axis=1).dtype == dt
    assert np.isnan(b.mean(x, axis=1).astype(np.float64)).all()
    assert np.isnan(b.var(x).astype(np.float64))
    assert b.sum(x, axis=0).shape == (0,) and b.max(x, axis=0).shape == (0,)  # nothing to reduce per output
    assert b.argmax(x, axis=0).shape == (0,) and b.argmax(x, axis=0).dtype == np.int64
    for op in ("max", "min", "argmax", "argmin"):
        for axis in (None, 1):
            with pytest.raises(ShapeError, match="empty"):
                getattr(b, op)(x, axis=axis)
    assert b.sum_backward(np.zeros(3, dt), (3, 0), axis=1).shape == (3, 0)


def test_zero_d_and_keepdims(b):
    x = np.array(2.5, np.float32)
    for op in ("sum", "mean", "max", "min", "var"):
        r = getattr(b, op)(x)
        assert r.shape == () and r.dtype == np.float32
    assert float(b.var(x)) == 0.0 and int(b.argmax(x)) == 0
    y = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert b.argmax(y, keepdims=True).shape == (1, 1, 1) and int(b.argmax(y)) == 23
    assert b.sum(y, axis=(0, 2), keepdims=True).shape == (1, 3, 1)
    assert b.sum(y, axis=()).shape == (2, 3, 4)
    assert b.sum(y, axis=[0, 1]).shape == (4,)  # a list works as a tuple
    assert b.sum(y, axis=np.int64(1)).shape == (2, 4)


def test_bad_input(b):
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ShapeError, match=r"axis 2 .*ndim 2"):
        b.sum(x, axis=2)
    with pytest.raises(ShapeError, match=r"axis -3 .*ndim 2"):
        b.mean(x, axis=-3)
    with pytest.raises(ShapeError, match="repeated"):
        b.sum(x, axis=(1, -1))
    with pytest.raises(ShapeError, match="axis must be None or an int"):
        b.argmax(x, axis=(0, 1))
    with pytest.raises(ShapeError):
        b.sum(x, axis=1.0)
    with pytest.raises(ShapeError):
        b.sum(x, axis=True)
    with pytest.raises(ShapeError, match="0-d"):
        b.sum(np.array(1.0, np.float32), axis=0)
    with pytest.raises(DTypeError):
        b.sum(np.ones(3, np.int32))
    with pytest.raises(DTypeError):
        b.argmax(np.ones(3, np.int64))
    with pytest.raises(ValueError, match="ddof"):
        b.var(x, ddof=float("nan"))
    with pytest.raises(ShapeError, match="grad_out must have shape"):
        b.sum_backward(np.ones(3, np.float32), (2, 3), axis=1)
    with pytest.raises(ShapeError, match="keepdims=True shape"):
        b.sum_backward(np.ones((2, 1), np.float32), (2, 3), axis=1)
    with pytest.raises(DTypeError):
        b.max_backward(np.ones(2, np.float64), x, axis=1)
    with pytest.raises(DTypeError):
        b.var_backward(np.ones(2, ml_dtypes.bfloat16), x, axis=1)
    with pytest.raises(ShapeError, match="repeated"):
        b.mean_backward(np.ones(2, np.float32), (2, 3), axis=(1, 1))


def test_16bit_accumulates_in_float32(b):
    # 4096 values of 1 + 1/1024: a float16 running sum would stall at 2048; the result is exact in
    # float32 and rounds once to float16
    for dtype in ("float16", "bfloat16"):
        x = np.full(4096, 1 + 2 ** -7, np_dtype(dtype))
        want = np.float64(4096 * (1 + 2 ** -7))
        assert float(b.sum(x)) == float(np.float64(want).astype(np_dtype(dtype)))
        assert float(b.mean(x)) == 1 + 2 ** -7
    big = np.full(1000, 60000, np.float16)  # the sum overflows float16, the mean does not
    assert float(b.mean(big)) == 60000 and np.isinf(float(b.sum(big)))
