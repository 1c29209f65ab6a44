"""dropout on the CUDA backend (cudakit.kernels.dropout): masks and outputs BIT-IDENTICAL to the
CPU backend's NumPy Philox for the same seed and shape, statistics, backward, edge sizes."""
import math

import numpy as np
import pytest
from helpers import DTYPES, np_dtype

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def be():
    from cudakit.backends import get_backend
    return get_backend("cuda")


@pytest.fixture(scope="module")
def cpu():
    from cudakit.backends import get_backend
    return get_backend("cpu")


def _bits(a):
    a = cp.asnumpy(a) if isinstance(a, cp.ndarray) else a
    return a.view(f"u{a.dtype.itemsize}")


SEEDS = [0, 1, 0xDEADBEEF, 0x0123456789ABCDEF, 2**64 - 1]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_mask_bit_identical_to_cpu(be, cpu, seed, p):
    for shape in [(1,), (3,), (4,), (5, 7), ((1 << 20) + 3,)]:
        m = be.dropout_mask(shape, p, seed)
        assert isinstance(m, cp.ndarray) and m.dtype == cp.bool_ and m.shape == shape
        np.testing.assert_array_equal(cp.asnumpy(m), cpu.dropout_mask(shape, p, seed))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 3, 4, 7, 1001, (1 << 20) + 3])
def test_forward_backward_bit_identical_to_cpu(be, cpu, rng, dtype, n):
    p, seed = 0.3, 0x123456789
    x = rng.standard_normal(n).astype(np.float32).astype(np_dtype(dtype))
    if n > 8:
        x[:4] = [np.nan, np.inf, -np.inf, -0.0]
    y = be.dropout(cp.asarray(x), p, seed)
    assert y.dtype == x.dtype and y.shape == x.shape
    want = cpu.dropout(x, p, seed)
    got = cp.asnumpy(y)
    np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64)))
    fin = ~np.isnan(want.astype(np.float64))
    np.testing.assert_array_equal(_bits(got)[fin], _bits(want)[fin])
    g = rng.standard_normal(n).astype(np.float32).astype(np_dtype(dtype))
    np.testing.assert_array_equal(_bits(be.dropout_backward(cp.asarray(g), p, seed)), _bits(cpu.dropout_backward(g, p, seed)))


def test_misaligned_and_strided_inputs(be, cpu, rng):
    base = rng.standard_normal(4099).astype(np.float32)
    bd = cp.asarray(base)
    for sl in (np.s_[1:], np.s_[3:4003], np.s_[::3]):   # unaligned start (scalar path), strided
        np.testing.assert_array_equal(_bits(be.dropout(bd[sl], 0.5, 11)), _bits(cpu.dropout(base[sl], 0.5, 11)))
    x = rng.standard_normal((30, 40)).astype(np.float16)
    xd = cp.asarray(x)
    np.testing.assert_array_equal(_bits(be.dropout(xd.T, 0.2, 4)), _bits(cpu.dropout(x.T, 0.2, 4)))
    m = be.dropout_mask(1001, 0.5, 3)   # an odd size: the tail takes the scalar path
    np.testing.assert_array_equal(cp.asnumpy(m), cpu.dropout_mask(1001, 0.5, 3))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_kept_fraction(be, p):
    n = 1 << 24
    m = be.dropout_mask(n, p, 99)
    q = 1 - p
    assert abs(float(m.mean()) - q) < 5 * math.sqrt(q * (1 - q) / n)


def test_large_2_28_matches_cpu_on_a_window(be):
    """2^28 elements (the benchmark size): the last elements agree with NumPy's Philox."""
    from cudakit.backends import cpu_dropout
    n = 1 << 28
    y = be.dropout(cp.ones(n, cp.float32), 0.5, 5)
    g = np.arange((n - 4100) // 4, n // 4, dtype=np.uint64)   # the groups of elements n - 4100 .. n - 1
    words = np.stack(cpu_dropout.philox4x32((g, 0, 0, 0), (5, 0)), axis=1).reshape(-1)
    np.testing.assert_array_equal(cp.asnumpy(y[n - 4100:]) != 0, words >= np.uint32(2**31))


def test_eval_p0_and_errors(be, rng):
    x = cp.asarray(rng.standard_normal((5, 6)).astype(np.float32))
    for y in (be.dropout(x, 0.5, 1, training=False), be.dropout(x, 0.0, 1)):
        assert bool(cp.all(y == x)) and y.data.ptr != x.data.ptr
    with pytest.raises(ValueError, match="p="):
        be.dropout(x, 1.0, 0)
    with pytest.raises(TypeError, match="seed"):
        be.dropout(x, 0.5, 1.5)
    from cudakit.errors import DeviceError
    with pytest.raises(DeviceError):
        be.dropout(np.zeros(3, np.float32), 0.5, 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 7, 1001, (1 << 20) + 3])
def test_dropout_with_residual_bit_identical_to_cpu(be, cpu, rng, dtype, n):
    """residual + dropout(x) (ck_dropout_res, vectorized and, at a pointer offset, element by
    element): bitwise the CPU backend's, through the planned calls too."""
    import cudakit
    p, seed = 0.3, 0x2468ACE
    x = rng.standard_normal(n).astype(np.float32).astype(np_dtype(dtype))
    r = (4 * rng.standard_normal(n)).astype(np.float32).astype(np_dtype(dtype))
    want = _bits(cpu.dropout(x, p, seed, residual=r))
    dx, dr = cp.asarray(x), cp.asarray(r)
    wide = cp.zeros(n + 1, dr.dtype)
    off = wide[1:]
    off[...] = dr
    for res in (dr, off):
        np.testing.assert_array_equal(_bits(be.dropout(dx, p, seed, residual=res)), want)
    for _ in range(3):
        np.testing.assert_array_equal(_bits(cudakit.dropout(dx, p, seed, residual=dr)), want)
