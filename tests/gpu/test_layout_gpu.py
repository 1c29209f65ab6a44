"""transpose / permute / matrix_transpose on the CUDA backend (cudakit.kernels.transpose) against
NumPy, bit for bit, for every itemsize, both kernels (tiled and batched rows), every chunk width,
partial tiles, strided / negative-stride / broadcast views, and the benchmark shapes."""
import ml_dtypes
import numpy as np
import pytest

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")

DTYPES = [np.int8, np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.int64, np.bool_]


@pytest.fixture(scope="module")
def be():
    from cudakit.backends import get_backend
    return get_backend("cuda")


def _data(rng, shape, dtype):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(-100, 100, size=shape).astype(dt)
    return rng.standard_normal(shape).astype(np.float32).astype(dt)


def _same(got, want):
    assert isinstance(got, cp.ndarray) and got.flags.c_contiguous
    g = cp.asnumpy(got)
    assert g.shape == want.shape and g.dtype == want.dtype
    e = want.dtype.itemsize
    np.testing.assert_array_equal(g.view(f"u{e}"), np.ascontiguousarray(want).view(f"u{e}"))


CASES = [((37, 45), (1, 0)), ((64, 128), (1, 0)), ((300, 257), (1, 0)), ((48, 272), (1, 0)), ((272, 48), (1, 0)),
         ((1, 7), (1, 0)), ((129, 1), (1, 0)), ((4, 48, 3, 16), (0, 2, 1, 3)), ((2, 64, 4, 32), (0, 2, 1, 3)),
         ((3, 5, 7, 64), (0, 1, 3, 2)), ((6, 40, 72), (2, 0, 1)), ((6, 40, 72), (1, 2, 0)),
         ((5, 4, 3, 2), (3, 2, 1, 0)), ((8, 16, 24), (0, 1, 2)), ((2, 3, 4, 5, 6), (4, 1, 3, 0, 2)),
         ((16, 24, 40), (2, 1, 0)), ((0, 5), (1, 0)), ((7,), (0,)), ((), ())]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_permute_cases(be, rng, dtype):
    for shape, axes in CASES:
        x = _data(rng, shape, dtype)
        xd = cp.asarray(x)
        _same(be.permute(xd, axes), np.transpose(x, axes))
        y = be.permute(xd, axes)
        _same(be.permute_backward(y, axes), x)
    x = _data(rng, (3, 33, 65), dtype)
    _same(be.transpose(cp.asarray(x)), np.transpose(x))
    _same(be.matrix_transpose(cp.asarray(x)), np.swapaxes(x, -1, -2))


@pytest.mark.parametrize("dtype", [np.int8, ml_dtypes.bfloat16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_strided_views(be, rng, dtype):
    base = _data(rng, (20, 36, 50), dtype)
    bd = cp.asarray(base)
    views = [(np.s_[:, ::2, 1:], (2, 0, 1)), (np.s_[::-1, :, ::-1], (1, 2, 0)), (np.s_[3:17, 4:36, 8:40], (0, 2, 1)),
             (np.s_[:, 5, :], (1, 0)), (np.s_[:, :, ::5], (0, 1, 2)), (np.s_[1:, :, 2:34], (2, 1, 0))]
    for sl, axes in views:
        _same(be.permute(bd[sl], axes), np.transpose(base[sl], axes))
    bc = cp.broadcast_to(bd[0, :1, :], (6, 36, 50))
    _same(be.permute(bc, (2, 1, 0)), np.transpose(np.broadcast_to(base[0, :1, :], (6, 36, 50)), (2, 1, 0)))


SHORT = [((5, 7, 9), (0, 2, 1)), ((5, 9, 7), (0, 2, 1)), ((64, 33, 3, 3), (0, 2, 3, 1)), ((64, 3, 3, 33), (0, 3, 1, 2)),
         ((2, 3, 17, 19), (0, 2, 3, 1)), ((2, 17, 19, 3), (0, 3, 1, 2)), ((3, 2, 301), (0, 2, 1)), ((3, 301, 2), (0, 2, 1)),
         ((4, 12, 1000), (0, 2, 1)), ((4, 1000, 12), (0, 2, 1)), ((2, 5, 3, 7, 2), (4, 1, 3, 0, 2))]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_permute_short_dims(be, rng, dtype):
    """Planes with a short side (kernels/transpose.py's short runs: one or four a thread, stores
    staged or not), contiguous and through strided views, and cudnn's weight copies' pattern."""
    from cudakit.kernels import transpose
    kinds = set()
    for shape, axes in SHORT:
        x = _data(rng, shape, dtype)
        xd = cp.asarray(x)
        kinds.add(transpose.plan(xd.shape, xd.strides, xd.itemsize, axes).expr.split(",", 2)[-1])
        _same(be.permute(xd, axes), np.transpose(x, axes))
    base = _data(rng, (6, 3, 3, 130), dtype)
    view = cp.asarray(base).transpose(0, 3, 1, 2)      # (K, C, R, S) view of (K, R, S, C) memory
    _same(be.permute(view, (0, 1, 2, 3)), base.transpose(0, 3, 1, 2))
    _same(be.permute(cp.asarray(base)[::-1, :, :, 1:], (0, 3, 1, 2)), base[::-1, :, :, 1:].transpose(0, 3, 1, 2))
    assert {" true, 1>", " false, 1>", " true, 4>", " false, 4>"} <= kinds, kinds


def test_more_than_8_dims(be, rng):
    x = _data(rng, (2,) * 10, np.float32)
    axes = (9, 0, 8, 1, 7, 2, 6, 3, 5, 4)
    _same(be.permute(cp.asarray(x), axes), np.transpose(x, axes))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
def test_benchmark_shapes(be, dtype):
    """The benchmark's shapes (2-D 4096^2 here, the attention reshuffle (0, 2, 1, 3)), checked
    on the device against CuPy's own transpose copy."""
    x = cp.random.default_rng(1).standard_normal((4096, 4096), dtype=cp.float32).astype(dtype)
    assert bool(cp.all(be.transpose(x).view(cp.uint16 if x.itemsize == 2 else cp.uint32)
                       == cp.ascontiguousarray(x.T).view(cp.uint16 if x.itemsize == 2 else cp.uint32)))
    a = cp.random.default_rng(2).standard_normal((8, 512, 32, 128), dtype=cp.float32).astype(dtype)
    want = cp.ascontiguousarray(a.transpose(0, 2, 1, 3))
    got = be.permute(a, (0, 2, 1, 3))
    assert bool(cp.all(got.view(cp.uint8) == want.view(cp.uint8)))
    got = be.matrix_transpose(a)
    assert bool(cp.all(got.view(cp.uint8) == cp.ascontiguousarray(cp.swapaxes(a, -1, -2)).view(cp.uint8)))


def test_torch_tensor_in(be, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    t = torch.randn(33, 65, device="cuda")
    y = be.transpose(t)
    np.testing.assert_array_equal(cp.asnumpy(y), t.t().contiguous().cpu().numpy())


def test_cuda_matches_cpu(be, rng):
    from cudakit.backends import get_backend
    cpu = get_backend("cpu")
    x = _data(rng, (3, 17, 40, 8), ml_dtypes.bfloat16)
    for axes in [(0, 2, 1, 3), (3, 2, 1, 0), (1, 0, 3, 2)]:
        np.testing.assert_array_equal(cp.asnumpy(be.permute(cp.asarray(x), axes)).view(np.uint16),
                                      cpu.permute(x, axes).view(np.uint16))


def test_errors(be):
    from cudakit.errors import DeviceError, ShapeError
    x = cp.zeros((2, 3, 4), cp.float32)
    with pytest.raises(ShapeError, match="repeats"):
        be.permute(x, (0, 0, 1))
    with pytest.raises(DeviceError):
        be.transpose(np.zeros((2, 3), np.float32))
