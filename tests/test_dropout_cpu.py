"""dropout / dropout_backward / dropout_mask on the CPU backend: Philox4x32-10 against Random123's
known answers, the mask's statistics and determinism, exact scaling, and argument errors."""
import math

import ml_dtypes
import numpy as np
import pytest
from helpers import DTYPES, np_dtype

from cudakit.backends import cpu_dropout, dropout_api, get_backend
from cudakit.errors import DTypeError, ShapeError


@pytest.fixture
def be():
    return get_backend("cpu")


KAT = [  # Random123 kat_vectors: philox4x32 10 rounds, counter, key -> output
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("ctr,key,want", KAT)
def test_philox_known_answers(ctr, key, want):
    got = cpu_dropout.philox4x32(ctr, key)
    assert tuple(int(w) for w in got) == want


def test_words_layout():
    """Element i uses word i % 4 of the call with counter (i // 4, 0, 0, 0) and key (lo, hi)."""
    seed = 0x0123456789ABCDEF
    w = cpu_dropout.random_words(11, seed)
    for i in range(11):
        c = cpu_dropout.philox4x32((i // 4, 0, 0, 0), (seed & 0xFFFFFFFF, seed >> 32))
        assert int(w[i]) == int(c[i % 4])


def test_threshold_and_scale():
    assert dropout_api.threshold(0.0) == 0
    assert dropout_api.threshold(0.5) == 2**31
    assert dropout_api.threshold(0.25) == 2**30
    assert dropout_api.threshold(1 - 2**-40) == 2**32 - 1      # clipped
    assert dropout_api.threshold(2**-33) == 0                   # round half to even
    assert dropout_api.scale(0.1, np.float32) == np.float32(1 / 0.9)
    assert dropout_api.scale(0.1, np.float64) == 1 / 0.9
    assert dropout_api.scale(0.1, ml_dtypes.bfloat16).dtype == np.float32


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_kept_fraction_within_5_sigma(be, p):
    n = 1 << 20
    m = be.dropout_mask((n,), p, 1234)
    assert m.dtype == np.bool_ and m.shape == (n,)
    q = 1 - p
    assert abs(m.mean() - q) < 5 * math.sqrt(q * (1 - q) / n)
    # each of the 4 words of a call is uniform too (no lane is biased)
    for j in range(4):
        assert abs(m[j::4].mean() - q) < 5 * math.sqrt(q * (1 - q) / (n // 4))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 7, (1 << 20) + 3])
def test_forward_backward_exact(be, rng, dtype, n):
    p, seed = 0.3, 987654321
    x = rng.standard_normal(n).astype(np.float32).astype(np_dtype(dtype))
    y = be.dropout(x, p, seed)
    assert y.dtype == x.dtype and y.shape == x.shape
    m = be.dropout_mask(n, p, seed)
    acc = np.float64 if dtype == "float64" else np.float32
    s = acc(1 / (1 - p))
    want = np.where(m, x.astype(acc) * s, acc(0) * x.astype(acc)).astype(x.dtype)
    np.testing.assert_array_equal(y.astype(np.float64), want.astype(np.float64))
    g = rng.standard_normal(n).astype(np.float32).astype(np_dtype(dtype))
    dx = be.dropout_backward(g, p, seed)
    want_dx = np.where(m, g.astype(acc) * s, acc(0)).astype(x.dtype)
    np.testing.assert_array_equal(dx.astype(np.float64), want_dx.astype(np.float64))
    # kept elements of y are nonzero wherever x is, dropped are zero
    nz = x.astype(np.float64) != 0
    assert np.all((y.astype(np.float64) != 0) == (m & nz))


def test_same_seed_same_mask_different_seed_different(be):
    a = be.dropout_mask((64, 65), 0.5, 7)
    assert np.array_equal(a, be.dropout_mask((64, 65), 0.5, 7))
    assert not np.array_equal(a, be.dropout_mask((64, 65), 0.5, 8))
    assert not np.array_equal(a, be.dropout_mask((64, 65), 0.5, 7 + (1 << 32)))   # the high key word counts
    # the mask depends only on the flat index, not on the shape
    assert np.array_equal(a.reshape(-1), be.dropout_mask(64 * 65, 0.5, 7))


def test_non_contiguous_input_uses_logical_index(be, rng):
    base = rng.standard_normal((30, 40)).astype(np.float32)
    v = base.T[::2]                                 # (20, 30), strided
    y = be.dropout(v, 0.4, 5)
    assert y.flags.c_contiguous and y.shape == v.shape
    np.testing.assert_array_equal(y, be.dropout(np.ascontiguousarray(v), 0.4, 5))
    m = be.dropout_mask(v.shape, 0.4, 5)
    np.testing.assert_array_equal(y, np.where(m, v * np.float32(1 / 0.6), np.float32(0)))


def test_eval_and_p0_return_copies(be, rng):
    x = rng.standard_normal((5, 6)).astype(np.float32)
    for y in (be.dropout(x, 0.5, 1, training=False), be.dropout(x, 0.0, 1), be.dropout_backward(x, 0.0, 1)):
        np.testing.assert_array_equal(y, x)
        assert y is not x and not np.shares_memory(x, y)
    assert be.dropout_mask((3, 3), 0.0, 1).all()


def test_nan_and_inf(be):
    x = np.array([np.nan, np.inf, -np.inf, 1.0] * 64, np.float32)
    y = be.dropout(x, 0.5, 3)
    m = be.dropout_mask(x.shape, 0.5, 3)
    assert np.isnan(y[~m & ~np.isfinite(x)]).all()          # dropped NaN/inf: x * 0 = NaN
    assert np.isnan(y[m & np.isnan(x)]).all() and np.isinf(y[m & np.isinf(x)]).all()


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, float("nan"), True, "0.5", None])
def test_bad_p(be, p):
    x = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="p must be a real number in \\[0, 1\\)"):
        be.dropout(x, p, 0)
    with pytest.raises(ValueError, match="p="):
        be.dropout_backward(x, p, 0)
    with pytest.raises(ValueError, match="p="):
        be.dropout_mask(4, p, 0)
    with pytest.raises(ValueError, match="p="):
        be.dropout(x, p, 0, training=False)


@pytest.mark.parametrize("seed,err", [(-1, ValueError), (1 << 64, ValueError), (1.0, TypeError), (True, TypeError),
                                      ("1", TypeError), (None, TypeError)])
def test_bad_seed(be, seed, err):
    with pytest.raises(err, match="seed"):
        be.dropout(np.zeros(4, np.float32), 0.5, seed)
    with pytest.raises(err, match="seed"):
        be.dropout_mask(4, 0.5, seed)


def test_seed_limits_and_numpy_ints(be):
    x = np.ones(16, np.float32)
    be.dropout(x, 0.5, (1 << 64) - 1)
    np.testing.assert_array_equal(be.dropout(x, 0.5, np.uint64(9)), be.dropout(x, 0.5, 9))


def test_bad_dtype_and_shape(be):
    with pytest.raises(DTypeError):
        be.dropout(np.zeros(4, np.int32), 0.5, 0)
    with pytest.raises(ShapeError):
        be.dropout_mask((2, -1), 0.5, 0)
    with pytest.raises(ShapeError):
        be.dropout_mask("abc", 0.5, 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_with_residual(be, rng, dtype):
    """residual + dropout(x): the product and the sum in the accumulation dtype, rounded once
    (exactly that formula); training=False and p == 0: x + residual; the public function takes it
    (planned as dropout_residual); a residual of another shape or dtype raises naming it."""
    import cudakit
    p, seed = 0.3, 12345
    x = rng.standard_normal((37, 21)).astype(np.float32).astype(np_dtype(dtype))
    r = (4 * rng.standard_normal((37, 21))).astype(np.float32).astype(np_dtype(dtype))
    y = be.dropout(x, p, seed, residual=r)
    acc = np.float64 if dtype == "float64" else np.float32
    m = be.dropout_mask(x.shape, p, seed)
    want = (np.where(m, x.astype(acc) * acc(1 / (1 - p)), acc(0)) + r.astype(acc)).astype(x.dtype)
    np.testing.assert_array_equal(y.astype(np.float64), want.astype(np.float64))
    np.testing.assert_array_equal(cudakit.dropout(x, p, seed, residual=r).astype(np.float64), y.astype(np.float64))
    for off in (be.dropout(x, p, seed, training=False, residual=r), be.dropout(x, 0.0, seed, residual=r)):
        np.testing.assert_array_equal(off.astype(np.float64), be.add(x, r).astype(np.float64))
    with pytest.raises(ShapeError, match="residual"):
        be.dropout(x, p, seed, residual=r[:3])
    with pytest.raises(DTypeError, match="residual"):
        be.dropout(x, p, seed, residual=r.astype(np.float64 if dtype != "float64" else np.float32))
