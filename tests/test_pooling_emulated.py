"""kernels/pooling.py run on the CPU by tests/kernel_emulation.py (every thread of the real launch
grid, float32 and float64) against the CPU backend's pooling: window bounds with padding, strides
unequal to the window, ties, NaN, windows of -inf, plane counts that are not a multiple of the
planes a thread takes, launches split into chunks (pooling.chunks with a small thread limit), and
the channels-last kernels at every channel width V."""
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
typedef unsigned char u8;
// each driver: the kernel once per thread of `blocks` blocks of 256; (a, b, c) its array arguments
// (the forward kernels take (x, y): their drivers get (x, x, y) and drop the middle one)
#define CK_RUN(KCALL) CK_EMULATE(blocks, 1, 256, (KCALL))
#define CK_NCHW(NAME, T, K)                                                                         \
extern "C" void NAME(const void* a, const void* b, void* c, int planes, int avg, int p, unsigned blocks,   \
                     CK_GEO_PARAMS) {                                                               \
  const T* x = (const T*)a; const T* g = (const T*)b; T* o = (T*)c;                                 \
  if (avg && p == 4) CK_RUN((K<T, true, 4>(x, g, o, planes, CK_GEO)))                                 \
  else if (avg) CK_RUN((K<T, true, 1>(x, g, o, planes, CK_GEO)))                                      \
  else if (p == 4) CK_RUN((K<T, false, 4>(x, g, o, planes, CK_GEO)))                                  \
  else CK_RUN((K<T, false, 1>(x, g, o, planes, CK_GEO)))                                              \
}
#define CK_TWO_PASS(SFX, T)                                                                         \
extern "C" void argmax_##SFX(const void* a, const void*, void* c, int planes, int, int p, unsigned blocks, \
                             CK_GEO_PARAMS) {                                                       \
  if (p == 4) CK_RUN((ck_pool2d_argmax<T, 4>((const T*)a, (u8*)c, planes, CK_GEO)))                 \
  else CK_RUN((ck_pool2d_argmax<T, 1>((const T*)a, (u8*)c, planes, CK_GEO)))                        \
}                                                                                                   \
extern "C" void bwdi_##SFX(const void* a, const void* b, void* c, int planes, int, int p, unsigned blocks, \
                           CK_GEO_PARAMS) {                                                         \
  if (p == 4) CK_RUN((ck_pool2d_backward_idx<T, 4>((const u8*)a, (const T*)b, (T*)c, planes, CK_GEO)))  \
  else CK_RUN((ck_pool2d_backward_idx<T, 1>((const u8*)a, (const T*)b, (T*)c, planes, CK_GEO)))     \
}
#define CK_CL(NAME, T, V, K)                                                                        \
extern "C" void NAME(const void* a, const void* b, void* c, int total, int cv, int avg, unsigned blocks,   \
                     CK_GEO_PARAMS) {                                                               \
  if (avg) CK_RUN((K<T, true, V>((const T*)a, (const T*)b, (T*)c, total, cv, CK_GEO)))              \
  else CK_RUN((K<T, false, V>((const T*)a, (const T*)b, (T*)c, total, cv, CK_GEO)))                 \
}
#define CK_CL_TWO_PASS(SFX, T, V)                                                                   \
extern "C" void clargmax_##SFX##_##V(const void* a, const void*, void* c, int total, int cv, int,    \
                                     unsigned blocks, CK_GEO_PARAMS) {                              \
  CK_RUN((ck_pool2d_cl_argmax<T, V>((const T*)a, (u8*)c, total, cv, CK_GEO)));                       \
}                                                                                                   \
extern "C" void clbwdi_##SFX##_##V(const void* a, const void* b, void* c, int total, int cv, int,    \
                                   unsigned blocks, CK_GEO_PARAMS) {                                \
  CK_RUN((ck_pool2d_cl_backward_idx<T, V>((const u8*)a, (const T*)b, (T*)c, total, cv, CK_GEO)));    \
}
// the one-launch tiled max backward, one thread a block (its phases in order; see kernel_emulation)
__attribute__((aligned(16))) unsigned char ck_pool_smem[1 << 20];
#define CK_TILE(SFX, T)                                                                             \
extern "C" int tile_##SFX(const void* a, const void* b, void* c, const int* plan, unsigned blocks,  \
                          CK_GEO_PARAMS) {                                                          \
  if (plan[8] > (int)sizeof(ck_pool_smem)) return 1;                                                \
  std::memset(ck_pool_smem, 0xff, plan[8]);   /* garbage, as shared memory is */                     \
  CK_EMULATE(blocks, 1, 1, (ck_pool2d_backward_tile<T, 4>((const T*)a, (const T*)b, (T*)c, plan[9], plan[0], \
             plan[1], plan[2], plan[3], plan[4], plan[5], plan[6], plan[7], CK_GEO)));              \
  return 0;                                                                                         \
}
CK_TILE(f32, float)
CK_TILE(f64, double)
template <typename T, bool AVG, int P> void ck_fwd(const T* x, const T*, T* y, int planes, CK_GEO_PARAMS) {
  ck_pool2d<T, AVG, P>(x, y, planes, CK_GEO);
}
template <typename T, bool AVG, int V> void ck_fwd_cl(const T* x, const T*, T* y, int total, int cv, CK_GEO_PARAMS) {
  ck_pool2d_cl<T, AVG, V>(x, y, total, cv, CK_GEO);
}
#define CK_DRIVERS(SFX, T)                                  \
  CK_NCHW(fwd_##SFX, T, ck_fwd)                             \
  CK_NCHW(bwd_##SFX, T, ck_pool2d_backward)                 \
  CK_NCHW(bwdc_##SFX, T, ck_pool2d_backward_cells)          \
  CK_TWO_PASS(SFX, T)
#define CK_CL_DRIVERS(SFX, T, V)                            \
  CK_CL(clfwd_##SFX##_##V, T, V, ck_fwd_cl)                 \
  CK_CL(clbwd_##SFX##_##V, T, V, ck_pool2d_cl_backward)     \
  CK_CL(clbwdc_##SFX##_##V, T, V, ck_pool2d_cl_backward_cells) \
  CK_CL_TWO_PASS(SFX, T, V)
CK_DRIVERS(f32, float)
CK_DRIVERS(f64, double)
CK_CL_DRIVERS(f32, float, 1)
CK_CL_DRIVERS(f32, float, 2)
CK_CL_DRIVERS(f32, float, 4)
CK_CL_DRIVERS(f64, double, 1)
CK_CL_DRIVERS(f64, double, 2)
"""

# (x shape, kernel_size, stride, padding)
GEOMETRIES = [((2, 3, 7, 9), 2, None, 0), ((1, 2, 8, 8), 3, 2, 1), ((2, 2, 5, 6), (3, 2), (1, 2), (1, 1)),
              ((1, 1, 1, 1), 1, None, 0), ((3, 2, 17, 13), 3, 1, 1), ((1, 3, 16, 16), 4, 3, 2),
              ((1, 1, 33, 40), 2, 2, 1), ((5, 3, 6, 6), (1, 3), (2, 1), (0, 1)),
              # windows that do not overlap (one thread per window): stride above the window,
              # ragged ends, padding, one window
              ((2, 2, 9, 11), 2, 3, 0), ((1, 2, 10, 7), (2, 3), (3, 4), (1, 1)), ((1, 1, 3, 5), 3, 4, 1),
              ((2, 3, 112, 112), 2, None, 0), ((1, 9, 12, 12), 3, 2, 1)]


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build(kernel_source(pooling), _DRIVER, tmp_path_factory.mktemp("pool"))


def _ptr(a):
    return ctypes.c_void_p(a.ctypes.data)


_NAMES = {"ck_pool2d_backward": "bwd_", "ck_pool2d_backward_cells": "bwdc_", "ck_pool2d_backward_idx": "bwdi_"}


def _launches(kernel, per_plane, x, g, y, dx, h, w, ho, wo, c=1):
    """The launches pooling.py makes for one forward and one backward (kernel, per_plane:
    pooling.backward_kernel's): (driver prefix, arrays, elements of each a unit (plane or image),
    threads a unit) - the two-pass max backward's argmax into a byte buffer first."""
    big, small = h * w * c, ho * wo * c
    out = [("fwd_", (x, x, y), (big, big, small), ho * wo)]
    if kernel == "ck_pool2d_backward_idx":
        idx = np.full(y.size, 255, np.uint8)
        out += [("argmax_", (x, x, idx), (big, big, small), ho * wo),
                ("bwdi_", (idx, g, dx), (small, small, big), per_plane)]
    else:
        out += [(_NAMES[kernel], (x, g, dx), (big, small, big), per_plane)]
    return out


def _run_nchw(lib, kind, x, g, geo, limit, planes):
    """(y, dx) from the emulated NCHW kernels, each taking `planes` planes a thread, launched as
    pooling._nchw does (chunks of planes under `limit` threads, each chunk's arrays offset by its
    first plane)."""
    n, c, h, w = x.shape
    ho, wo = geo[8], geo[9]
    sfx = "f32" if x.dtype == np.float32 else "f64"
    args = [ctypes.c_int(int(v)) for v in pooling._geo(x.shape, geo)]
    y = np.full((n, c, ho, wo), 7.0, x.dtype)   # a value no output keeps: every one is written
    dx = np.full(x.shape, 7.0, x.dtype)
    for name, arrs, sizes, per in _launches(*pooling.backward_kernel(x.shape, geo, kind), x.reshape(-1), g.reshape(-1),
                                            y.reshape(-1), dx.reshape(-1), h, w, ho, wo):
        for p0, np_ in pooling.chunks(n * c, per, planes, limit):
            threads = -(-np_ // planes) * per
            getattr(lib, name + sfx)(*(_ptr(a[p0 * e:]) for a, e in zip(arrs, sizes)), ctypes.c_int(np_),
                                     ctypes.c_int(kind == "avg"), ctypes.c_int(planes),
                                     ctypes.c_uint(-(-threads // 256)), *args)
    return y, dx


def _run_cl(lib, kind, x, g, geo, v, limit):
    """(y, dx) from the emulated channels-last kernels of width v on x's (N, H, W, C) copy, launched
    as pooling._cl does; returned as (N, C, ...) arrays."""
    n, c, h, w = x.shape
    ho, wo = geo[8], geo[9]
    sfx = "f32" if x.dtype == np.float32 else "f64"
    args = [ctypes.c_int(int(a)) for a in pooling._geo(x.shape, geo)]
    xt, gt = np.ascontiguousarray(x.transpose(0, 2, 3, 1)), np.ascontiguousarray(g.transpose(0, 2, 3, 1))
    yt = np.full((n, ho, wo, c), 7.0, x.dtype)
    dxt = np.full(xt.shape, 7.0, x.dtype)
    cv = c // v
    for name, arrs, sizes, per in _launches(*pooling.backward_kernel(x.shape, geo, kind), xt.reshape(-1),
                                            gt.reshape(-1), yt.reshape(-1), dxt.reshape(-1), h, w, ho, wo, c):
        for n0, nn in pooling.chunks(n, per * cv, 1, limit):
            total = nn * per * cv
            getattr(lib, f"cl{name}{sfx}_{v}")(*(_ptr(a[n0 * e:]) for a, e in zip(arrs, sizes)), ctypes.c_int(total),
                                               ctypes.c_int(cv), ctypes.c_int(kind == "avg"),
                                               ctypes.c_uint(-(-total // 256)), *args)
    return yt.transpose(0, 3, 1, 2), dxt.transpose(0, 3, 1, 2)


def _run_tiled(lib, x, g, geo):
    """dx from the emulated ck_pool2d_backward_tile (4 planes a block), launched as
    pooling._tiled_backward does (its tile_plan), all planes in one launch; None where tile_plan has
    no tile."""
    assert pooling.TILE_PLANES == 4   # the driver's instantiation
    plan = pooling.tile_plan(x.shape, geo, x.dtype.name)
    if plan is None:
        return None
    n, c, h, w = x.shape
    dx = np.full(x.shape, 7.0, x.dtype)
    sfx = "f32" if x.dtype == np.float32 else "f64"
    args = [ctypes.c_int(int(v)) for v in pooling._geo(x.shape, geo)]
    ints = np.array((*plan, n * c), np.int32)
    assert getattr(lib, "tile_" + sfx)(_ptr(x), _ptr(g), _ptr(dx), _ptr(ints), ctypes.c_uint(-(-n * c // 4) * plan[3]),
                                       *args) == 0
    return dx


# (TILE_WIDTH, TILE_ELEMENTS, TILE_SMEM_BYTES): the shipped tiles, tiles of a few elements (halos on
# every side, ragged last tiles), and a shared-memory budget that halves the tile's rows
_TILINGS = [(pooling.TILE_WIDTH, pooling.TILE_ELEMENTS, pooling.TILE_SMEM_BYTES), (4, 12, 1 << 20), (5, 64, 4000)]


def _tiled_results(lib, kind, x, g, geo):
    if kind != "max" or pooling.backward_kernel(x.shape, geo, kind)[0] != "ck_pool2d_backward_idx":
        return []
    out = []
    for width, elements, smem in _TILINGS:
        with pytest.MonkeyPatch.context() as m:
            m.setattr(pooling, "TILE_WIDTH", width)
            m.setattr(pooling, "TILE_ELEMENTS", elements)
            m.setattr(pooling, "TILE_SMEM_BYTES", smem)
            dx = _run_tiled(lib, x, g, geo)
        if dx is not None:
            out.append(dx)
    return out


def _check(lib, kind, x, ks, st, pad, rng, limit=pooling._MAX_THREADS):
    cpu = cudakit.get_backend("cpu")
    fwd, bwd = (cpu.max_pool2d, cpu.max_pool2d_backward) if kind == "max" else (cpu.avg_pool2d, cpu.avg_pool2d_backward)
    want = fwd(x, ks, st, pad)
    g = rng.standard_normal(want.shape).astype(x.dtype)
    want_dx = bwd(g, x, ks, st, pad)
    geo = cpu._pool_args("max_pool2d", x, ks, st, pad)[1]
    tol = 1e-6 if x.dtype == np.float32 else 1e-13
    results = [_run_nchw(lib, kind, x, g, geo, limit, p) for p in (1, 4)]
    c = x.shape[1]
    for v in pooling.widths(x.dtype.name):
        if c % v == 0:
            results.append(_run_cl(lib, kind, x, g, geo, v, limit))
    for y, dx in results:
        np.testing.assert_allclose(y, want, rtol=tol, atol=tol)
        np.testing.assert_allclose(dx, want_dx, rtol=10 * tol, atol=tol)
    for dx in _tiled_results(lib, kind, x, g, geo):
        np.testing.assert_allclose(dx, want_dx, rtol=10 * tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("geo", GEOMETRIES)
def test_pooling_kernels_emulated(lib, geo, kind, dtype, rng):
    shape, ks, st, pad = geo
    x = rng.standard_normal(shape).astype(dtype)
    x[..., ::3, 1::2] = np.round(x[..., ::3, 1::2])   # ties: the first largest wins
    _check(lib, kind, x, ks, st, pad, rng)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_nan_inf_windows_and_chunked_launches(lib, kind, rng):
    x = rng.standard_normal((3, 4, 6, 6)).astype(np.float32)
    x[0, 0, 2, 3] = np.nan
    x[0, 0, 2, 4] = np.nan   # two NaNs in a window: the first one takes its gradient
    x[0, 1, :3, :3] = -np.inf
    x[1, 2, 1, :] = np.nan
    for ks, st, pad in ((3, 1, 1), (2, None, 0), (3, 2, 1)):
        _check(lib, kind, x, ks, st, pad, rng)
        # launches of at most 300 threads: several chunks of planes / images, offsets included
        _check(lib, kind, x, ks, st, pad, rng, limit=300)


def test_backward_kernel_choice():
    three_s2 = (2, 2, 1, 1, 1, 1, 3, 3, 56, 56)
    assert pooling.backward_kernel((1, 1, 112, 112), three_s2, "max") == ("ck_pool2d_backward_idx", 112 * 112)
    assert pooling.backward_kernel((1, 1, 112, 112), three_s2, "avg")[0] == "ck_pool2d_backward"
    assert pooling.backward_kernel((1, 1, 112, 112), (2, 2, 0, 0, 1, 1, 2, 2, 56, 56), "max") == \
        ("ck_pool2d_backward_cells", 56 * 56)
    big = (1, 1, 8, 8, 1, 1, 17, 17, 24, 24)   # 289 taps: no byte for its winner
    assert pooling.backward_kernel((1, 1, 40, 40), big, "max")[0] == "ck_pool2d_backward"


def test_tiles_take_the_max_backward_from_four_windows_an_element_on_average():
    three_s2 = (2, 2, 1, 1, 1, 1, 3, 3, 14, 14)   # 2.25 windows an element: no launch, x untouched
    assert pooling._tiled_backward(None, None, None, three_s2) is False
    assert pooling.tile_plan((2, 8, 28, 28), (1, 1, 1, 1, 1, 1, 3, 3, 28, 28), "float32") is not None
    sixteen = (1, 1, 8, 8, 1, 1, 16, 16, 64, 64)   # no tile of a row fits 48 KiB
    assert pooling.tile_plan((1, 3, 64, 64), sixteen, "float32") is None


def test_tile_chunks_keep_blocks_and_planes_under_2_31():
    assert pooling.tile_chunks(10, 3) == [(0, 10)]
    for planes, tiles in ((2**31, 1), (2**33 + 5, 2), (2**31 + 7, 3), (3 * 2**30, 4096)):
        got = pooling.tile_chunks(planes, tiles)
        assert got[0][0] == 0 and sum(k for _, k in got) == planes
        assert all(a + k == b for (a, k), (b, _) in zip(got, got[1:]))
        for p0, k in got:
            blocks = -(-k // pooling.TILE_PLANES) * tiles
            assert k < 2**31 and blocks < 2**31 and p0 % pooling.TILE_PLANES == 0
            assert (-(-k // pooling.TILE_PLANES) - 1) * pooling.TILE_PLANES < 2**31   # the kernel's last group's first plane


def test_nchw_max_backward_goes_channels_last_for_large_16_bit_data_of_many_channels(monkeypatch):
    geo = (2, 2, 1, 1, 1, 1, 3, 3, 32, 32)   # 3 x 3 / 2 of 64 x 64 planes
    via = pooling.via_channels_last
    assert via((16, 16, 64, 64), geo, "bfloat16") and via((1, 256, 64, 64), geo, "float16")
    assert not via((16, 12, 64, 64), geo, "bfloat16")
    assert not via((1, 256, 64, 64), geo, "float32") and not via((1, 256, 64, 64), geo, "float64")
    assert not via((1, 255, 64, 64), geo, "bfloat16")   # 2^20 - 4096 elements: host time first
    big = (2, 2, 1, 1, 1, 1, 3, 3, 6000, 6000)
    assert not via((1, 64, 12000, 12000), big, "bfloat16")   # an image past one launch's 2^31 threads
    assert not pooling.cl_fits((1, 64, 12000, 12000), big) and pooling.cl_fits((1, 14, 12000, 12000), big)
    monkeypatch.setattr(pooling, "VIA_CHANNELS_LAST_FROM", None)
    assert not via((1, 256, 64, 64), geo, "bfloat16")


def test_chunks_cover_every_unit_once():
    assert pooling.chunks(10, 100, 4, limit=250) == [(0, 8), (8, 2)]
    # one thread a 4 planes of 1 element: a launch's plane count stays under 2^31 (int32 argument)
    first = pooling.chunks(2**31 + 256, 1, 4)
    assert first[0] == (0, 2**31 - 1 - 256 * 4) and sum(n for _, n in first) == 2**31 + 256
    assert pooling.chunks(3, 7, 1, limit=7) == [(0, 1), (1, 1), (2, 1)]
    assert pooling.chunks(5, 10) == [(0, 5)]
    with pytest.raises(cudakit.ShapeError, match="<= 9"):
        pooling.chunks(1, 10, 1, limit=9)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_channel_width_follows_channels_and_alignment(dtype):
    class A:   # an array stand-in: its device address only
        def __init__(self, ptr):
            self.data = type("D", (), {"ptr": ptr})()
    item = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    widest = 16 // item
    assert pooling._width(dtype, 64, (A(256), A(512))) == widest
    assert pooling._width(dtype, 6, (A(256), A(512))) == 2
    assert pooling._width(dtype, 5, (A(256),)) == 1
    assert pooling._width(dtype, 64, (A(256), A(256 + item))) == 1   # one array off by an element
