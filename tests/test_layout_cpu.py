"""transpose / permute / permute_backward / matrix_transpose on the CPU backend: NumPy's transpose
as a new C-contiguous array, for every itemsize, strided views, and typed errors for bad axes."""
import ml_dtypes
import numpy as np
import pytest

from cudakit.backends import get_backend
from cudakit.errors import DTypeError, ShapeError

DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.int8, np.uint8, np.int16, np.int32,
          np.int64, np.bool_, np.complex64]


@pytest.fixture
def be():
    return get_backend("cpu")


def _data(rng, shape, dtype):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(-100 if dt.kind == "i" else 0, 100, size=shape).astype(dt)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return rng.standard_normal(shape).astype(np.float32).astype(dt)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_transpose_2d_and_default_axes(be, rng, dtype):
    x = _data(rng, (37, 45), dtype)
    for y in (be.transpose(x), be.transpose(x, (1, 0)), be.matrix_transpose(x), be.permute(x, (-1, -2))):
        assert y.flags.c_contiguous and y.dtype == x.dtype
        np.testing.assert_array_equal(y, x.T)
    x3 = _data(rng, (3, 4, 5), dtype)
    np.testing.assert_array_equal(be.transpose(x3), np.transpose(x3))


SHAPES_AXES = [((2, 64, 4, 32), (0, 2, 1, 3)), ((3, 5, 7, 11), (0, 1, 3, 2)), ((6, 40, 72), (2, 0, 1)),
               ((2, 3, 4, 5, 6), (4, 1, 3, 0, 2)), ((0, 5), (1, 0)), ((7,), (0,)), ((), ()), ((1, 1, 9), (2, 0, 1))]


@pytest.mark.parametrize("shape,axes", SHAPES_AXES)
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int8, np.float64], ids=lambda d: np.dtype(d).name)
def test_permute_and_backward(be, rng, shape, axes, dtype):
    x = _data(rng, shape, dtype)
    y = be.permute(x, axes)
    want = np.transpose(x, axes)
    assert y.flags.c_contiguous and y.shape == want.shape
    np.testing.assert_array_equal(y, want)
    assert not np.shares_memory(y, x)
    back = be.permute_backward(y, axes)
    assert back.shape == x.shape and back.flags.c_contiguous
    np.testing.assert_array_equal(back, x)


def test_result_is_new_even_for_identity(be, rng):
    x = _data(rng, (4, 5), np.float32)
    y = be.permute(x, (0, 1))
    assert y is not x and not np.shares_memory(x, y)
    z = be.transpose(np.float32(3.0) + np.zeros(()))
    assert z.shape == ()


def test_strided_views(be, rng):
    base = _data(rng, (20, 36, 50), np.float32)
    for v, axes in [(base[:, ::2, 1:], (2, 0, 1)), (base[::-1, :, ::-1], (1, 2, 0)), (base[:, 5, :], (1, 0)),
                    (np.broadcast_to(base[0, :1, :], (6, 36, 50)), (2, 1, 0))]:
        y = be.permute(v, axes)
        assert y.flags.c_contiguous
        np.testing.assert_array_equal(y, np.transpose(v, axes))


def test_matrix_transpose_batched(be, rng):
    x = _data(rng, (2, 3, 5, 7), ml_dtypes.bfloat16)
    np.testing.assert_array_equal(be.matrix_transpose(x), np.swapaxes(x, -1, -2))


@pytest.mark.parametrize("axes,match", [((0, 1), "has 2 entries"), ((0, 0, 1), "repeats axis 0"),
                                        ((0, 1, 3), "axis 3 .* out of range"), ((0, 1, -4), "axis -4"),
                                        ((0, 1.0, 2), "must be ints"), ((0, True, 2), "must be ints"),
                                        (5, "sequence of ints")])
def test_bad_axes(be, axes, match):
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ShapeError, match=match):
        be.transpose(x, axes)
    with pytest.raises(ShapeError, match=match):
        be.permute(x, axes)


def test_permute_requires_axes_and_matrix_transpose_2d(be):
    with pytest.raises(ShapeError, match="axes is required"):
        be.permute(np.zeros((2, 3)), None)
    with pytest.raises(ShapeError, match="at least 2 dims"):
        be.matrix_transpose(np.zeros(3))
    with pytest.raises(ShapeError, match="repeats"):
        be.permute_backward(np.zeros((2, 3)), (1, 1))


def test_bad_dtypes(be):
    with pytest.raises(DTypeError, match="itemsize 16"):
        be.transpose(np.zeros((2, 2), np.complex128))
    with pytest.raises(DTypeError, match="object"):
        be.transpose(np.array([[None, 1]], dtype=object))


def test_negative_axes_and_numpy_ints(be, rng):
    x = _data(rng, (2, 3, 4), np.float32)
    np.testing.assert_array_equal(be.permute(x, (np.int64(-1), 0, np.int32(1))), np.transpose(x, (2, 0, 1)))
