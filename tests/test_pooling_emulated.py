"""kernels/pooling.py run on the CPU by tests/kernel_emulation.py (every thread of the real launch
grid, float32 and float64) against the CPU backend's pooling: window bounds with padding, strides
unequal to the window, ties, NaN, windows of -inf, and the grid's y dimension striding over the
planes."""
import ctypes

import numpy as np
import pytest
from helpers import kernel_source
from kernel_emulation import build

import cudakit
from cudakit.kernels import pooling

_DRIVER = r"""
#define CK_GEO_PARAMS int h, int w, int ho, int wo, int r, int s, int sh, int sw, int ph, int pw
#define CK_GEO h, w, ho, wo, r, s, sh, sw, ph, pw
#define CK_DRIVERS(SFX, T)                                                                          \
extern "C" void fwd_##SFX(const T* x, T* y, long long planes, int avg, unsigned gx, unsigned gy,     \
                          CK_GEO_PARAMS) {                                                         \
  if (avg) CK_EMULATE(gx, gy, 256, (ck_pool2d<T, true>(x, y, planes, CK_GEO)))                      \
  else CK_EMULATE(gx, gy, 256, (ck_pool2d<T, false>(x, y, planes, CK_GEO)))                         \
}                                                                                                  \
extern "C" void bwd_##SFX(const T* x, const T* g, T* gxo, long long planes, int avg, unsigned gx,   \
                          unsigned gy, CK_GEO_PARAMS) {                                            \
  if (avg) CK_EMULATE(gx, gy, 256, (ck_pool2d_backward<T, true>(x, g, gxo, planes, CK_GEO)))        \
  else CK_EMULATE(gx, gy, 256, (ck_pool2d_backward<T, false>(x, g, gxo, planes, CK_GEO)))           \
}                                                                                                  \
extern "C" void bwdc_##SFX(const T* x, const T* g, T* gxo, long long planes, int avg, unsigned gx,  \
                           unsigned gy, CK_GEO_PARAMS) {                                           \
  if (avg) CK_EMULATE(gx, gy, 256, (ck_pool2d_backward_cells<T, true>(x, g, gxo, planes, CK_GEO)))  \
  else CK_EMULATE(gx, gy, 256, (ck_pool2d_backward_cells<T, false>(x, g, gxo, planes, CK_GEO)))     \
}
CK_DRIVERS(f32, float)
CK_DRIVERS(f64, double)
"""

# (x shape, kernel_size, stride, padding)
GEOMETRIES = [((2, 3, 7, 9), 2, None, 0), ((1, 2, 8, 8), 3, 2, 1), ((2, 2, 5, 6), (3, 2), (1, 2), (1, 1)),
              ((1, 1, 1, 1), 1, None, 0), ((3, 2, 17, 13), 3, 1, 1), ((1, 3, 16, 16), 4, 3, 2),
              ((1, 1, 33, 40), 2, 2, 1), ((5, 3, 6, 6), (1, 3), (2, 1), (0, 1)),
              # windows that do not overlap (one thread per window): stride above the window,
              # ragged ends, padding, one window
              ((2, 2, 9, 11), 2, 3, 0), ((1, 2, 10, 7), (2, 3), (3, 4), (1, 1)), ((1, 1, 3, 5), 3, 4, 1),
              ((2, 3, 112, 112), 2, None, 0)]


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build(kernel_source(pooling), _DRIVER, tmp_path_factory.mktemp("pool"))


def _two(v):
    return (v, v) if isinstance(v, int) else v


def _run(lib, kind, x, ks, st, pad, g, grid_y_limit):
    """(y, dx) from the emulated kernels with the grid pooling._launch uses (y capped at grid_y_limit)."""
    n, c, h, w = x.shape
    (r, s), (ph, pw) = _two(ks), _two(pad)
    sh, sw = (r, s) if st is None else _two(st)
    ho, wo = (h + 2 * ph - r) // sh + 1, (w + 2 * pw - s) // sw + 1
    sfx = "f32" if x.dtype == np.float32 else "f64"
    # the kernels' geometry arguments as pooling.py builds them from conv_api's tuple
    geo = [ctypes.c_int(int(v)) for v in pooling._geo(x.shape, (sh, sw, ph, pw, 1, 1, r, s, ho, wo))]
    common = (ctypes.c_longlong(n * c), ctypes.c_int(kind == "avg"))
    gy = ctypes.c_uint(min(n * c, grid_y_limit))
    y = np.full((n, c, ho, wo), 7.0, x.dtype)   # a value no output keeps: every one is written
    getattr(lib, "fwd_" + sfx)(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data), *common,
                               ctypes.c_uint(-(-ho * wo // pooling.THREADS)), gy, *geo)
    dx = np.full(x.shape, 7.0, x.dtype)
    kernel, per_plane = pooling.backward_kernel(x.shape, (sh, sw, ph, pw, 1, 1, r, s, ho, wo))
    getattr(lib, ("bwdc_" if kernel.endswith("cells") else "bwd_") + sfx)(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(g.ctypes.data),
                               ctypes.c_void_p(dx.ctypes.data), *common,
                               ctypes.c_uint(-(-per_plane // pooling.THREADS)), gy, *geo)
    return y, dx


def _check(lib, kind, x, ks, st, pad, rng, grid_y_limit=65535):
    cpu = cudakit.get_backend("cpu")
    fwd, bwd = (cpu.max_pool2d, cpu.max_pool2d_backward) if kind == "max" else (cpu.avg_pool2d, cpu.avg_pool2d_backward)
    want = fwd(x, ks, st, pad)
    g = rng.standard_normal(want.shape).astype(x.dtype)
    y, dx = _run(lib, kind, x, ks, st, pad, g, grid_y_limit)
    tol = 1e-6 if x.dtype == np.float32 else 1e-13
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(dx, bwd(g, x, ks, st, pad), rtol=10 * tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("geo", GEOMETRIES)
def test_pooling_kernels_emulated(lib, geo, kind, dtype, rng):
    shape, ks, st, pad = geo
    x = rng.standard_normal(shape).astype(dtype)
    x[..., ::3, 1::2] = np.round(x[..., ::3, 1::2])   # ties: the first largest wins
    _check(lib, kind, x, ks, st, pad, rng)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_nan_inf_windows_and_grid_y_striding(lib, kind, rng):
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    x[0, 0, 2, 3] = np.nan
    x[0, 0, 2, 4] = np.nan   # two NaNs in a window: the first one takes its gradient
    x[0, 1, :3, :3] = -np.inf
    _check(lib, kind, x, 3, 1, 1, rng)
    _check(lib, kind, x, 3, 1, 1, rng, grid_y_limit=2)   # planes past grid y: the kernels stride
    _check(lib, kind, x, 2, None, 0, rng)   # the same through the one-thread-per-window backward
    _check(lib, kind, x, 2, None, 0, rng, grid_y_limit=2)
