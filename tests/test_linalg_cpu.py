"""matmul, linear and fused_linear_gelu on the CPU backend (NumPy arrays) against float64 references."""
import linalg_checks as lc
import numpy as np
import pytest
from helpers import DTYPES

import cudakit


def _dev(x):
    return x


def _host(x):
    return np.asarray(x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa,sb", lc.MATMUL_SHAPES)
def test_matmul(sa, sb, dtype, rng):
    lc.check_matmul(_dev, _host, rng, sa, sb, dtype)


@pytest.mark.parametrize("layout", ["transposed", "strided"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("sa,sb", [((5, 7), (7, 3)), ((2, 3, 5, 7), (3, 7, 4)), ((4, 5, 7), (7, 6))])
def test_matmul_views(sa, sb, dtype, layout, rng):
    lc.check_matmul(_dev, _host, rng, sa, sb, dtype, layout)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa,sb", [((5, 7), (7, 3)), ((7,), (7, 4)), ((5, 7), (7,)), ((7,), (7,)),
                                   ((2, 3, 5, 7), (3, 7, 4)), ((2, 1, 5, 7), (1, 3, 7, 4)), ((4, 5, 7), (7, 6)),
                                   ((5, 7), (4, 7, 6)), ((0, 5, 7), (7, 3)), ((5, 0), (0, 3))])
def test_matmul_backward(sa, sb, dtype, rng):
    lc.check_matmul_backward(_dev, _host, rng, sa, sb, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead,fin,fout", [((), 7, 5), ((3,), 1, 1), ((4, 6), 31, 17), ((0,), 8, 3), ((2, 3), 64, 96)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear(lead, fin, fout, dtype, with_bias, rng):
    lc.check_linear(_dev, _host, rng, lead, fin, fout, dtype, with_bias)


def test_linear_transposed_weight(rng):
    lc.check_linear(_dev, _host, rng, (5,), 12, 9, "float32", True, weight_layout="transposed")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead,fin,fout", [((3,), 7, 5), ((4, 6), 31, 17)])
def test_fused_linear_gelu(lead, fin, fout, dtype, rng):
    lc.check_fused_linear_gelu(_dev, _host, rng, lead, fin, fout, dtype)


def test_errors():
    lc.check_errors(_dev)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_inf_propagate(dtype):
    lc.check_nan_inf(_dev, _host, dtype)


def test_out_and_aliases(rng):
    a, b = lc.data(rng, (4, 6), "float32"), lc.data(rng, (6, 3), "float32")
    out = np.full((4, 3), np.nan, np.float32)
    assert cudakit.matmul(a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(cudakit.matrix_multiply(a, b), out)
    be = cudakit.get_backend("cpu")
    np.testing.assert_array_equal(be.matrix_multiply(a, b), out)
    assert be.is_available and not be.has_custom_kernels


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_linear_strided_bias_and_offset_x(dtype, rng):
    lc.check_linear(_dev, _host, rng, (4, 5), 32, 16, dtype, True, strided=True)


def test_backward_bias_flag_must_be_bool(rng):
    x, w = lc.data(rng, (3, 4), "float32"), lc.data(rng, (5, 4), "float32")
    with pytest.raises(ValueError, match="bias must be a bool"):
        cudakit.linear_backward(lc.data(rng, (3, 5), "float32"), x, w, lc.data(rng, (5,), "float32"))


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
@pytest.mark.parametrize("lead,fin,fout", [((3,), 7, 5), ((4, 6), 32, 17)])
def test_linear_backward_through_gelu(lead, fin, fout, dtype, rng):
    lc.check_linear_backward_gelu(_dev, _host, rng, lead, fin, fout, dtype)


def test_linear_backward_gelu_pre_checks():
    x, w, g = np.ones((3, 4), np.float32), np.ones((5, 4), np.float32), np.ones((3, 5), np.float32)
    with pytest.raises(cudakit.ShapeError, match="gelu_pre must have x's shape"):
        cudakit.linear_backward(g, x, w, gelu_pre=np.ones((3, 5), np.float32))
    with pytest.raises(cudakit.DTypeError, match="gelu_pre"):
        cudakit.linear_backward(g, x, w, gelu_pre=np.ones((3, 4), np.float64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead,fin,fout", [((3,), 7, 5), ((4, 6), 32, 16)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_with_residual(lead, fin, fout, dtype, with_bias, rng):
    lc.check_linear_residual(_dev, _host, rng, lead, fin, fout, dtype, with_bias)
