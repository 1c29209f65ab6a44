"""conv2d and pooling on the CUDA backend against the float64 references of tests/conv_checks.py."""
import conv_checks as cc
import numpy as np
import pytest
from helpers import DTYPES

import cudakit

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")

from cupy_io import to_dev as _dev  # after the importorskip
from cupy_io import to_host as _host


def _product_u(dtype):
    """The float32 products' relative error under the current precision (16-bit: exact products)."""
    return cc.PRODUCT_U[cudakit.float32_precision()] if dtype == "float32" else 0.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geo", cc.CONV_GEOMETRIES + [(4, 16, 28, 28, 32, 3, 3, 1, 1, 1)])
def test_conv2d(geo, dtype, rng):
    n, c, h, w, k, r, s, stride, pad, dil = geo
    cc.check_conv2d(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype, product_u=_product_u(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geo,groups", cc.GROUPED_GEOMETRIES + [((4, 32, 28, 28, 32, 3, 3, 1, 1, 1), 32),
                                                                 ((2, 16, 40, 39, 16, 5, 5, 1, 4, 2), 16),
                                                                 ((2, 64, 14, 14, 256, 3, 3, 2, 1, 1), 2),
                                                                 ((2, 32, 9, 10, 32, 3, 3, 1, 1, 1), 4)])
def test_conv2d_groups(geo, groups, dtype, rng):
    """Grouped: the implicit-GEMM kernels read x as N G images (16-bit, float32) when a group has
    more than 8 channels; depthwise and up to 8 channels a group (8 -> 8 last): the direct kernels;
    the im2col path runs group by group (float64)."""
    n, c, h, w, k, r, s, stride, pad, dil = geo
    cc.check_conv2d(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype, groups=groups,
                    product_u=_product_u(dtype))


def test_last_paths_name_the_direct_and_im2col_convolutions(rng):
    """paths.last_paths names what ran: "direct" for a depthwise convolution the own candidate
    runs on its direct kernels (not "triton", the candidate's name in the timed choice), "im2col"
    for float64 (no other path takes it)."""
    from cudakit.kernels import paths
    old = cudakit.set_float32_precision("tf32x3")   # (cudakit's own kernels only: cuDNN is no candidate)
    try:
        x = cp.asarray(cc.data(rng, (2, 16, 20, 20), "float32"))
        w = cp.asarray(cc.data(rng, (16, 1, 3, 3), "float32"))
        cudakit.conv2d(x, w, None, 1, 1, 1, 16)
        assert paths.last_paths()["conv2d"] == "direct"
    finally:
        cudakit.set_float32_precision(old)
    cudakit.conv2d(x.astype(cp.float64), w.astype(cp.float64), None, 1, 1, 1, 16)
    assert paths.last_paths()["conv2d"] == "im2col"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("geo", cc.POOL_GEOMETRIES + [(4, 8, 32, 32, 2, None, 0)])
def test_pool(geo, kind, dtype, rng):
    n, c, h, w, ks, st, pad = geo
    cc.check_pool(_dev, _host, rng, kind, n, c, h, w, ks, st, pad, dtype)


def test_max_pool_nan_propagates(rng):
    cc.check_pool(_dev, _host, rng, "max", 1, 1, 4, 4, 2, None, 0, "float32", nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("layout", ["view", "nhwc", "nchw"])
@pytest.mark.parametrize("geo", cc.POOL_CL_GEOMETRIES)
def test_pool_channels_last(geo, layout, kind, dtype, rng):
    """Channels-last pooling, each layout (conv_checks._pool_io): the results in the input's layout."""
    n, c, h, w, ks, st, pad = geo
    cc.check_pool(_dev, _host, rng, kind, n, c, h, w, ks, st, pad, dtype, layout=layout)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geo", [(2, 3, 37, 70, 5, 1, 2), (1, 2, 33, 65, 3, 2, 1),
                                 (2, 2, 18, 40, (3, 5), (1, 2), (1, 2)), (1, 1, 40, 40, 17, 1, 0),
                                 (1, 3, 20, 34, 16, 1, 8), (2, 16, 19, 23, 3, 2, 1), (1, 24, 20, 20, 5, 1, 2)])
@pytest.mark.parametrize("tiled", [True, False])
def test_max_pool_backward_of_overlapping_windows(geo, dtype, tiled, rng, monkeypatch):
    """The max backward of overlapping windows, NCHW and channels-last: NCHW in one launch of tiles
    (pooling.TILED), else winner bytes then a gather (stride 1 and 2, unequal windows, a 16 x 16
    window: 256 taps, the most a byte names) and, past 256 taps (17 x 17), the gather recomputing
    winners from x; untiled NCHW 16-bit data of 16 channels through the channels-last kernels
    (pooling.via_channels_last, here at any size)."""
    from cudakit import dispatch
    from cudakit.kernels import pooling
    monkeypatch.setattr(pooling, "VIA_CHANNELS_LAST_MIN_ELEMENTS", 0)
    monkeypatch.setattr(pooling, "TILED", tiled)
    dispatch.clear()   # (no plan traced under the other switch replays its launches, here or after)
    n, c, h, w, ks, st, pad = geo
    try:
        cc.check_pool(_dev, _host, rng, "max", n, c, h, w, ks, st, pad, dtype)
        cc.check_pool(_dev, _host, rng, "max", n, c, h, w, ks, st, pad, dtype, layout="view")
    finally:
        dispatch.clear()


def test_max_pool_backward_of_overlapping_windows_nan():
    cc.check_pool(_dev, _host, np.random.default_rng(3), "max", 2, 2, 19, 35, 3, 1, 1, "float32", nan=True)


def test_pool_memory_format_errors(rng):
    cc.check_pool_memory_format_errors(_dev, rng)


def test_same_as_cpu(rng):
    x, w = cc.data(rng, (2, 3, 12, 12), "float32"), cc.data(rng, (5, 3, 3, 3), "float32")
    got = cp.asnumpy(cudakit.conv2d(cp.asarray(x), cp.asarray(w), padding=1))
    np.testing.assert_allclose(got, cudakit.conv2d(x, w, padding=1), rtol=1e-5, atol=1e-5)


def test_conv2d_zero_filters_strided_input_and_nan(rng):
    x = cc.data(rng, (2, 3, 8, 8), "float32")
    w = cc.data(rng, (4, 3, 3, 3), "float32")
    assert cudakit.conv2d(cp.asarray(x), cp.zeros((0, 3, 3, 3), cp.float32)).shape == (2, 0, 6, 6)
    xs = cp.repeat(cp.asarray(x), 2, axis=3)[..., ::2]
    np.testing.assert_allclose(cp.asnumpy(cudakit.conv2d(xs, cp.asarray(w), padding=1)),
                               cudakit.conv2d(x, w, padding=1), rtol=1e-5, atol=1e-5)
    x[0, 1, 2, 2] = np.nan
    y = cp.asnumpy(cudakit.conv2d(cp.asarray(x), cp.asarray(w)))
    assert np.isnan(y).sum() == 4 * 9


def test_max_pool_backward_of_all_inf_windows_stays_inside():
    x = cp.full((1, 1, 3, 3), -np.inf, cp.float32)
    gx = cudakit.max_pool2d_backward(cp.ones((1, 1, 3, 3), cp.float32), x, 3, 1, 1)
    assert float(gx.sum()) == 9


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("geo", [(2, 70, 20, 20, 130, 3, 3, 1, 1, 1), (3, 16, 15, 17, 8, 5, 5, 1, 2, 1),
                                 (2, 8, 14, 14, 16, 3, 3, 2, 1, 1), (1, 4, 12, 12, 6, 3, 3, 1, 2, 2),
                                 (2, 6, 17, 16, 5, 2, 2, 3, 0, 1)])
def test_conv2d_16bit_takes_the_implicit_gemm_kernel(geo, dtype, rng):
    """16-bit conv2d runs the Triton implicit-GEMM kernels (forward, input gradient - zero-interleaved
    for the strided case - weight and bias gradients): ragged channel blocks, positions past one
    block, 5x5, strided, dilated."""
    from cudakit.kernels import conv
    n, c, h, w, k, r, s, stride, pad, dil = geo
    ho, wo = (h + 2 * pad - dil * (r - 1) - 1) // stride + 1, (w + 2 * pad - dil * (s - 1) - 1) // stride + 1
    geom = (stride, stride, pad, pad, dil, dil, r, s, ho, wo)
    assert conv.usable(dtype, (n, c, h, w), k, geom)
    cc.check_conv2d(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype, product_u=_product_u(dtype))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_conv2d_16bit_nan_reaches_only_its_windows(dtype, rng):
    x = cc.data(rng, (2, 3, 8, 8), dtype)
    w = cc.data(rng, (4, 3, 3, 3), dtype)
    x[0, 1, 2, 2] = np.nan
    y = cp.asnumpy(cudakit.conv2d(cp.asarray(x), cp.asarray(w), padding=1)).astype(np.float32)
    assert np.isnan(y).sum() == 4 * 9 and np.isnan(y[0, :, 1:4, 1:4]).all()


@pytest.mark.parametrize("prec", ["ieee", "tf32x3", "tf32"])
@pytest.mark.parametrize("geo", [(2, 40, 12, 11, 70, 3, 3, 1, 1, 1), (2, 24, 13, 12, 130, 3, 3, 2, 1, 1),
                                 (3, 8, 9, 9, 16, 5, 5, 1, 2, 1)])
def test_conv2d_float32_precisions(geo, prec, float32_precision, rng, monkeypatch):
    """Each float32 precision (and the tiles made for it: K >= 128 takes the wide weight-gradient
    tile) within its bound: ieee within float32's own on cudakit's kernels (and, where cuDNN is a
    candidate too, within the allowance for its FFT and Winograd plans), tf32x3 within about 2^-20
    of each product, tf32 within TF32's (2^-9 of the magnitudes: both operands rounded to 10-bit
    mantissas)."""
    from cudakit import dispatch
    from cudakit.kernels import cudnn
    float32_precision(prec)
    n, c, h, w, k, r, s, stride, pad, dil = geo
    if prec == "ieee" and cudnn.available():
        with monkeypatch.context() as m:   # cudakit's FMA kernels alone: the exact bound
            m.setattr(cudnn, "wanted", lambda: False)
            dispatch.clear()
            cc.check_conv2d(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, "float32", product_u=0.0)
        dispatch.clear()
        prec = "ieee_cudnn"
    cc.check_conv2d(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, "float32",
                    product_u=cc.PRODUCT_U[prec])


def test_conv2d_float32_precision_is_applied(float32_precision, rng):
    """The setting reaches the kernels: tf32's error against float64 is far above tf32x3's, and
    tf32x3 stays within a few float32 ulps of ieee's."""
    from cudakit.kernels import paths
    x, w = cc.data(rng, (4, 64, 20, 20), "float32"), cc.data(rng, (32, 64, 3, 3), "float32")
    want = cc.conv_reference(x, w, None, (1, 1), (1, 1), (1, 1))[0]
    err = {}
    for prec in ("ieee", "tf32x3", "tf32"):
        float32_precision(prec)
        y = cp.asnumpy(cudakit.conv2d(cp.asarray(x), cp.asarray(w), padding=1)).astype(np.float64)
        err[prec] = np.abs(y - want).max()
    if paths.last_paths().get("conv2d") != "cudnn":   # tf32 lets cuDNN pick an exact engine too
        assert err["tf32"] > 30 * err["tf32x3"], err
    assert err["tf32x3"] < 4 * err["ieee"] + 1e-6, err


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("geo", cc.CONV1D_GEOMETRIES + [(4, 64, 1000, 128, 3, 1, 1, 1, 1), (2, 32, 257, 32, 7, 2, 3, 1, 32)])
@pytest.mark.parametrize("nlc", [False, True], ids=["ncl", "nlc"])
def test_conv1d(geo, dtype, nlc, rng):
    n, c, length, k, r, stride, pad, dil, groups = geo
    cc.check_conv1d(_dev, _host, rng, n, c, length, k, r, stride, pad, dil, dtype, groups, product_u=_product_u(dtype),
                    nlc=nlc)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [(2, 5, 9, 7, 6, 3, 3, (2, 1), 1, 1, 1), (3, 6, 7, 8, 6, 3, 2, 1, (1, 0), (2, 1), 6),
                                  (4, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1), (2, 32, 13, 11, 64, 1, 1, 2, 0, 1, 1)])
@pytest.mark.parametrize("weight_cl", [False, True], ids=["weight", "weight_cl"])
def test_conv2d_channels_last(case, dtype, weight_cl, rng):
    n, c, h, w, k, r, s, stride, pad, dil, groups = case
    cc.check_conv2d_channels_last(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype, groups,
                                  product_u=_product_u(dtype), weight_cl=weight_cl)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geo,groups,form", cc.CONV_RELU_CASES)
def test_conv_relu(geo, groups, form, dtype, rng):
    """conv2d / conv1d with activation="relu" (the path each signature times: cuDNN's fused graph or
    convolution then relu, the own kernels' fused store, im2col for float64) and the backward with y."""
    n, c, h, w, k, r, s, stride, pad, dil = geo
    cc.check_conv_relu(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype, groups, form,
                       product_u=_product_u(dtype))


def test_conv_relu_triton_kernels_fuse_it(rng, monkeypatch):
    """The own candidate ("triton": implicit GEMM, and the direct kernels of a depthwise one) applies
    the relu in its store: forced, both match max(conv, 0) in float64 and the plans replay them."""
    from cudakit import dispatch
    from cudakit.kernels import paths
    real = paths.run

    def run(op, key, candidates, timer=None):
        if op == "conv2d" and key[-1] == "relu":
            return dict(candidates)["triton"]()
        return real(op, key, candidates, timer)
    monkeypatch.setattr(paths, "run", run)
    dispatch.clear()
    for geo, groups, form in cc.CONV_RELU_CASES[:2]:
        n, c, h, w, k, r, s, stride, pad, dil = geo
        cc.check_conv_relu(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, "bfloat16", groups, form)
    for dtype in ("bfloat16", "float32"):   # a NaN kept by the fused store (implicit GEMM; direct: groups 4)
        for groups in (1, 4):
            cc.check_conv_relu_nan(_dev, _host, rng, dtype, groups)


def test_conv_activation_errors(rng):
    cc.check_conv_activation_errors(_dev, rng)
