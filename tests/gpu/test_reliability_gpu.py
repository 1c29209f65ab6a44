"""Issue 29 on the GPU: layernorm/rmsnorm rows whose squares overflow (the CUDA kernels scale by a
power of two before squaring, register and loop kernels), float64 attention with large scores
(the matrix-product path), the typed errors of the CUDA backend's argument checks."""
import numpy as np
import pytest

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")

import ml_dtypes  # noqa: E402

import cudakit as ck  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
COLS = [7, 128, 769, 4096, 8193, 65536]   # register kernels (one and several rows a block) and loop kernels


def _big(dtype) -> float:
    return 1e300 if np.dtype(dtype) == np.float64 else 1e25


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64])
@pytest.mark.parametrize("cols", COLS)
def test_norm_rows_whose_squares_overflow(dtype, cols):
    rng = np.random.default_rng(cols)
    base = rng.standard_normal((6, cols))
    x = base.astype(dtype)
    x[1] = (base[1] * _big(dtype)).astype(dtype)   # rows 1 and 4 overflow, the others are plain
    x[4] = (base[4] * _big(dtype) * 3).astype(dtype)
    xd = cp.asarray(x)
    alone = cp.asarray(np.delete(x, [1, 4], axis=0))
    for kind in ("ln", "rms"):
        fn, fn_stats = (ck.layernorm, ck.layernorm_with_stats) if kind == "ln" else (ck.rmsnorm, ck.rmsnorm_with_stats)
        want = fn(x)                                    # the CPU backend (tests/test_reliability.py checks it)
        got = fn(xd)                                    # the planned launch
        got_checked = ck.get_backend("cuda").layernorm(xd) if kind == "ln" else ck.get_backend("cuda").rmsnorm(xd)
        stats = fn_stats(xd)
        tol = 3e-2 if np.dtype(dtype) == BF16 else 1e-5
        for g in (got, got_checked, stats[0]):
            h = cp.asnumpy(g).astype(np.float64)
            assert np.isfinite(h).all()
            np.testing.assert_allclose(h, want.astype(np.float64), atol=tol, rtol=tol)
        # rows without overflow: the same bits as when computed without the overflowing rows
        np.testing.assert_array_equal(cp.asnumpy(got)[[0, 2, 3, 5]], cp.asnumpy(fn(alone)))
        rstd = cp.asnumpy(stats[-1]).astype(np.float64)
        assert np.all(rstd[[1, 4]] > 0) and np.all(np.isfinite(rstd))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_norm_inf_and_nan_rows_stay_nan(dtype):
    x = np.ones((3, 256), dtype)
    x[0, 5] = np.inf
    x[1, 9] = np.nan
    x[2] = (np.arange(256) * 1e30).astype(dtype)
    for fn in (ck.layernorm, ck.rmsnorm):
        y = cp.asnumpy(fn(cp.asarray(x))).astype(np.float64)
        assert np.isnan(y[1]).all() and np.isfinite(y[2]).all()
        assert not np.isfinite(y[0]).all()


def test_float64_attention_keeps_its_normalisation_for_large_scores():
    q = cp.full((1, 1, 8), 1e9)
    k = cp.full((1, 4, 8), 1e9)
    v = cp.arange(32.0).reshape(1, 4, 8)
    out, lse = ck.attention_with_lse(q, k, v)
    assert float(out[0, 0, 0]) == 12.0
    dq, dk, dv = ck.attention_backward(cp.ones_like(out), q, k, v, out, lse)
    np.testing.assert_array_equal(cp.asnumpy(dv), np.full((1, 4, 8), 0.25))


def test_cuda_backend_typed_errors():
    x = cp.ones((2, 4), cp.float32)
    with pytest.raises(ck.ArgumentTypeError, match="x is required"):
        ck.layernorm(None)
    with pytest.raises(ck.ArgumentTypeError, match="a is required"):
        ck.matmul(None, x)
    with pytest.raises(ck.ArgumentError, match="beyond the float range"):
        ck.add(x, 10 ** 400)
    with pytest.raises(ck.ShapeError, match="x_shape"):
        ck.sum_backward(cp.ones(2, cp.float32), "23", axis=1)
    assert ck.dropout(cp.asarray(3.0, cp.float32), 0.5, 1).shape == ()
    empty = cp.ones((0, 3), cp.float32)
    assert ck.batch_norm(empty, training=True).shape == (0, 3)


def test_out_that_is_not_an_array_and_huge_results_on_cuda():
    """7b4a717 on the CUDA backend: out= as a list, a NumPy scalar or a host array is refused
    (a copy would take the result), and a broadcast result past 256 TiB is a ShapeError."""
    x = cp.ones((2, 3), cp.float32)
    for bad in ([[0.0] * 3] * 2, np.float32(0)):
        with pytest.raises(ck.ArgumentTypeError, match="out must be an array"):
            ck.add(x, x, out=bad)
        with pytest.raises(ck.ArgumentTypeError, match="out must be an array"):
            ck.matmul(x, x.T, out=bad)
    with pytest.raises(ck.DeviceError):
        ck.relu(x, out=np.zeros((2, 3), np.float32))
    with pytest.raises(ck.ShapeError, match="the result of shape"):
        ck.mul(cp.ones((2 ** 24, 1), cp.float32), cp.ones((1, 2 ** 24), cp.float32))   # (1 PiB)
    y = cp.ones((2, 3), cp.float32)
    assert ck.add(x, x, out=y) is y and float(y[0, 0]) == 2.0
