"""softmax, log_softmax, their backward passes and cross_entropy of the CPU backend (through
get_backend("cpu")) against the float64 references of tests/softmax_reference.py, which finite
differences validate in turn; argument checks and special values."""
import typing

import numpy as np
import pytest
import softmax_reference as ref
from helpers import DTYPES, np_dtype

import cudakit
from cudakit.errors import TargetIndexError
from cudakit.errors import DeviceError, DTypeError, ShapeError

SHAPES = [(1, 1), (1, 7), (3, 1), (5, 127), (7, 1823), (4, 4097), (513, 128), (1823, 781), (2, 300007)]


@pytest.fixture(scope="module")
def be():
    return cudakit.get_backend("cpu")


def _data(rng, shape, dtype, scale=3.0):
    return ref.cast(scale * rng.standard_normal(shape), dtype)


def _shape_ok(shape, dtype):
    return not (shape == (1823, 781) and dtype in ("float16", "float64"))  # keep the file quick


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_forward_backward(be, shape, dtype, rng):
    if not _shape_ok(shape, dtype):
        pytest.skip("covered by the other dtypes")
    x = _data(rng, shape, dtype)
    g = _data(rng, shape, dtype, 1.0)
    y = be.softmax(x)
    assert y.dtype == np_dtype(dtype) and y.shape == shape
    ref.assert_close(y, ref.softmax(x), dtype, "softmax")
    ly = be.log_softmax(x)
    assert ly.dtype == np_dtype(dtype)
    ref.assert_close(ly, ref.log_softmax(x), dtype, "log_softmax", scale=1.0)
    dx = be.softmax_backward(g, y)
    want, sc = ref.softmax_grad(g, y)
    ref.assert_close(dx, want, dtype, "softmax_backward", scale=sc)
    dx = be.log_softmax_backward(g, ly)
    want, sc = ref.log_softmax_grad(g, ly)
    ref.assert_close(dx, want, dtype, "log_softmax_backward", scale=sc)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("axis", [0, 1, -2, 2])
def test_other_axes(be, axis, dtype, rng):
    x = _data(rng, (6, 35, 9), dtype)
    g = _data(rng, (6, 35, 9), dtype, 1.0)
    y = be.softmax(x, axis=axis)
    assert y.shape == x.shape and y.flags.c_contiguous
    ref.assert_close(y, ref.softmax(x, axis), dtype, "softmax")
    ly = be.log_softmax(x, axis)
    ref.assert_close(ly, ref.log_softmax(x, axis), dtype, "log_softmax", scale=1.0)
    want, sc = ref.softmax_grad(g, y, axis)
    ref.assert_close(be.softmax_backward(g, y, axis=axis), want, dtype, "softmax_backward", scale=sc)
    want, sc = ref.log_softmax_grad(g, ly, axis)
    ref.assert_close(be.log_softmax_backward(g, ly, axis), want, dtype, "log_softmax_backward", scale=sc)


def test_non_contiguous_views(be, rng):
    base = _data(rng, (40, 66), "float32")
    gbase = _data(rng, (140, 70), "float32", 1.0)
    for v in (base[:, ::2], base.T, base[::3, 1:-1]):
        ref.assert_close(be.softmax(v), ref.softmax(v), "float32", "softmax")
        ref.assert_close(be.log_softmax(v, axis=0), ref.log_softmax(v, 0), "float32", "log_softmax", scale=1.0)
        g = gbase[:2 * v.shape[0]:2, :v.shape[1]]  # a strided view too
        y = be.softmax(v)
        want, sc = ref.softmax_grad(g, y)
        ref.assert_close(be.softmax_backward(g, y[:, ::-1][:, ::-1]), want, "float32", "softmax_backward", scale=sc)


@pytest.mark.parametrize("shape,axis", [((0, 5), -1), ((5, 0), -1), ((0,), 0), ((3, 0, 4), 1), ((3, 0, 4), 2),
                                        ((0, 5), 0)])
def test_size_zero(be, shape, axis):
    x = np.zeros(shape, np.float32)
    for f in (be.softmax, be.log_softmax):
        y = f(x, axis)
        assert y.shape == shape and y.dtype == np.float32
    assert be.softmax_backward(x, x, axis).shape == shape
    assert be.log_softmax_backward(x, x, axis).shape == shape


@pytest.mark.parametrize("dtype", DTYPES)
def test_special_values(be, dtype):
    inf, nan = np.inf, np.nan
    x = ref.cast([[1.0, inf, 2.0, 3.0],      # +inf: NaN everywhere (inf - inf)
                  [-inf, -inf, -inf, -inf],  # only -inf: NaN everywhere
                  [1.0, nan, 2.0, 0.0],      # NaN: NaN everywhere
                  [1.0, -inf, 2.0, 0.5],     # -inf among finite values: 0 (log: -inf)
                  [1e4, -1e4, 0.0, 1e4]], dtype)  # large magnitudes stay finite
    y = be.softmax(x)
    ly = be.log_softmax(x)
    ref.assert_close(y, ref.softmax(x), dtype, "softmax")
    ref.assert_close(ly, ref.log_softmax(x), dtype, "log_softmax", scale=1.0)
    assert np.isnan(np.asarray(y[:3], np.float64)).all() and y[3, 1] == 0 and ly[3, 1] == -np.inf
    assert np.isfinite(np.asarray(y[4], np.float64)).all()


def _numeric_grad(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        g[i] = (f(xp) - f(xm)) / (2 * h)
    return g


def test_references_match_finite_differences(rng):
    """The analytic float64 gradients every other test trusts."""
    x = rng.standard_normal((3, 7))
    g = rng.standard_normal((3, 7))
    num = _numeric_grad(lambda z: (g * ref.softmax(z)).sum(), x)
    np.testing.assert_allclose(ref.softmax_grad(g, ref.softmax(x))[0], num, atol=1e-8)
    num = _numeric_grad(lambda z: (g * ref.log_softmax(z)).sum(), x)
    np.testing.assert_allclose(ref.log_softmax_grad(g, ref.log_softmax(x))[0], num, atol=1e-8)
    t = np.array([2, -100, 6])
    for red, gl in (("mean", 0.7), ("sum", 1.3), ("none", rng.standard_normal(3))):
        def f(z, red=red, gl=gl):
            loss = ref.cross_entropy(z, t, red)[0]
            return float((loss * gl).sum()) if red == "none" else float(loss) * gl
        np.testing.assert_allclose(ref.cross_entropy(x, t, red, grad_loss=gl)[1], _numeric_grad(f, x), atol=1e-8)


# ---------------------------------------------------------------------------------- cross entropy

def _targets(rng, n, c, itype, ignore=-100, frac_ignored=0.2):
    t = rng.integers(0, c, n)
    t[rng.random(n) < frac_ignored] = ignore
    return t.astype(itype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (33, 127), (64, 1823), (9, 4097), (2, 300007)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(be, shape, dtype, reduction, rng):
    n, c = shape
    x = _data(rng, shape, dtype)
    t = _targets(rng, n, c, np.int64 if c % 2 else np.int32, frac_ignored=0.2 if n > 2 else 0.0)
    acc = ref.acc_dtype(dtype)
    want, wgrad, sc = ref.cross_entropy(x, t, reduction)
    loss = be.cross_entropy(x, t, reduction)
    assert loss.dtype == np.dtype(acc) and loss.shape == (() if reduction != "none" else (n,))
    ref.assert_close(loss, want, acc, "loss", scale=1.0)
    loss2, grad = be.cross_entropy_with_grad(x, t, reduction)
    ref.assert_close(loss2, want, acc, "fused loss", scale=1.0)
    assert grad.dtype == np_dtype(dtype) and grad.shape == shape
    ref.assert_close(grad, wgrad, dtype, "fused dlogits", scale=sc)
    gl = rng.standard_normal(n) if reduction == "none" else np.asarray(rng.standard_normal(), np.float64)
    gl = gl.astype(acc)
    _, wgrad, sc = ref.cross_entropy(x, t, reduction, grad_loss=gl)
    ref.assert_close(be.cross_entropy_backward(gl, x, t, reduction), wgrad, dtype, "dlogits", scale=sc)


def test_cross_entropy_ignore_index(be, rng):
    x = _data(rng, (6, 5), "float32")
    t = np.array([1, 3, 3, 0, 4, 3])
    want, wgrad, _ = ref.cross_entropy(x, t, "mean", ignore_index=3)
    loss, grad = be.cross_entropy_with_grad(x, t, ignore_index=3)
    ref.assert_close(loss, want, "float32", "loss", scale=1.0)
    assert (grad[[1, 2, 5]] == 0).all()
    ref.assert_close(grad, wgrad, "float32", "dlogits", scale=1.0)
    # every target ignored: "mean" is NaN (as torch), "sum" 0, gradients 0
    t = np.full(6, -100)
    loss, grad = be.cross_entropy_with_grad(x, t)
    assert np.isnan(loss) and (grad == 0).all()
    assert be.cross_entropy(x, t, "sum") == 0
    assert (be.cross_entropy(x, t, "none") == 0).all()


def test_cross_entropy_empty(be):
    x = np.zeros((0, 5), np.float32)
    t = np.zeros(0, np.int64)
    assert np.isnan(be.cross_entropy(x, t)) and be.cross_entropy(x, t, "sum") == 0
    assert be.cross_entropy(x, t, "none").shape == (0,)
    _, grad = be.cross_entropy_with_grad(x, t)
    assert grad.shape == (0, 5)


def test_cross_entropy_special_values(be):
    x = np.array([[1.0, np.nan, 0.0], [1.0, np.inf, 0.0], [1.0, -np.inf, 0.0]], np.float32)
    t = np.array([0, 0, 0])
    want, wgrad, _ = ref.cross_entropy(x, t, "none")
    loss, grad = be.cross_entropy_with_grad(x, t, "none")
    ref.assert_close(loss, want, "float32", "loss", scale=1.0)
    ref.assert_close(grad, wgrad, "float32", "dlogits", scale=1.0)
    assert np.isnan(loss[:2]).all() and np.isfinite(loss[2])


def test_cross_entropy_other_integer_targets(be, rng):
    x = _data(rng, (5, 9), "float32")
    t = np.array([1, 2, 3, 4, 5], np.int16)
    ref.assert_close(be.cross_entropy(x, t), ref.cross_entropy(x, t)[0], "float32", "loss", scale=1.0)
    xs = _data(rng, (5, 18), "float32")[:, ::2]  # non-contiguous logits
    ref.assert_close(be.cross_entropy(xs, t), ref.cross_entropy(xs, t)[0], "float32", "loss", scale=1.0)


# ---------------------------------------------------------------------------------- errors

def test_softmax_errors(be):
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(ShapeError, match="axis 2"):
        be.softmax(x, axis=2)
    with pytest.raises(ShapeError, match="axis -3"):
        be.log_softmax(x, axis=-3)
    with pytest.raises(TypeError, match="axis"):
        be.softmax(x, axis=1.0)
    with pytest.raises(ShapeError, match="0-d"):
        be.softmax(np.float32(1.0))
    with pytest.raises(DTypeError, match="int64"):
        be.softmax(np.zeros((3, 4), np.int64))
    with pytest.raises(DTypeError, match="y is float64"):
        be.softmax_backward(x, x.astype(np.float64))
    with pytest.raises(ShapeError, match=r"\(3, 5\)"):
        be.log_softmax_backward(x, np.zeros((3, 5), np.float32))

    class OnCuda:
        __cuda_array_interface__: typing.ClassVar[dict] = {"shape": (3,), "typestr": "<f4", "data": (0, False), "version": 3}
    with pytest.raises(DeviceError):
        be.softmax(OnCuda())


def test_cross_entropy_errors(be):
    x = np.zeros((3, 4), np.float32)
    t = np.array([0, 1, 2])
    with pytest.raises(ShapeError, match="2-D"):
        be.cross_entropy(np.zeros((3, 4, 2), np.float32), t)
    with pytest.raises(ShapeError, match=r"\(3,\)"):
        be.cross_entropy(x, np.array([0, 1]))
    with pytest.raises(DTypeError, match="float32"):
        be.cross_entropy(x, t.astype(np.float32))
    with pytest.raises(DTypeError, match="int64"):
        be.cross_entropy(x.astype(np.int64), t)
    with pytest.raises(ValueError, match="'avg'"):
        be.cross_entropy(x, t, reduction="avg")
    with pytest.raises(TypeError, match="ignore_index"):
        be.cross_entropy(x, t, ignore_index=1.5)
    for bad, val in (([0, 4, 2], 4), ([0, 1, -1], -1)):
        with pytest.raises(TargetIndexError, match=rf"= {val} is out of range \[0, 4\)"):
            be.cross_entropy_with_grad(x, np.array(bad))
        with pytest.raises(IndexError):
            be.cross_entropy_backward(1.0, x, np.array(bad))
    # ignore_index itself may be anything, in range or not
    assert np.isfinite(be.cross_entropy(x, np.array([0, 7, 2]), ignore_index=7))
    with pytest.raises(ShapeError, match="grad_loss"):
        be.cross_entropy_backward(np.ones(2, np.float32), x, t)
    with pytest.raises(ShapeError, match="grad_loss"):
        be.cross_entropy_backward(1.0, x, t, reduction="none")
