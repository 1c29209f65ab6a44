"""conv2d and pooling on the CPU backend against float64 references; argument errors."""
import re

import conv_checks as cc
import numpy as np
import pytest
from helpers import DTYPES

import cudakit
from cudakit.backends.cpu import CpuBackend


def _dev(x):
    return x


def _host(x):
    return np.asarray(x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geo", cc.CONV_GEOMETRIES + [(1, 4, 6, 6, 2, 1, 1, 1, 0, 1)])
def test_conv2d(geo, dtype, rng):
    n, c, h, w, k, r, s, stride, pad, dil = geo
    cc.check_conv2d(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geo,groups", cc.GROUPED_GEOMETRIES)
def test_conv2d_groups(geo, groups, dtype, rng):
    n, c, h, w, k, r, s, stride, pad, dil = geo
    cc.check_conv2d(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype, groups=groups)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geo,with_bias", [((2, 6, 13, 12, 6, 5, 5, (2, 1), (4, 2), 2), True),
                                           ((1, 5, 9, 9, 5, 1, 3, 1, (0, 1), 1), False)])
def test_conv2d_depthwise(geo, with_bias, dtype, rng):
    """The CPU backend's depthwise path (backends/cpu_conv.py): dilated 5x5 with unequal strides and
    paddings, a 1x3 window without bias."""
    n, c, h, w, k, r, s, stride, pad, dil = geo
    cc.check_conv2d(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype, with_bias=with_bias, groups=c)


def test_conv2d_without_bias(rng):
    cc.check_conv2d(_dev, _host, rng, 2, 3, 8, 8, 4, 3, 3, 1, 1, 1, "float32", with_bias=False)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("geo", cc.POOL_GEOMETRIES + [(1, 1, 5, 5, 5, None, 0)])
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


def test_pool_memory_format_errors(rng):
    cc.check_pool_memory_format_errors(_dev, rng)


def test_errors(rng):
    x = cc.data(rng, (1, 3, 8, 8), "float32")
    w = cc.data(rng, (4, 3, 3, 3), "float32")
    with pytest.raises(cudakit.ShapeError, match=r"weight must be \(K, C / groups, R, S\) with C / groups = 3"):
        cudakit.conv2d(x, cc.data(rng, (4, 2, 3, 3), "float32"))
    x4 = cc.data(rng, (1, 4, 8, 8), "float32")
    with pytest.raises(cudakit.ShapeError, match=r"C / groups = 2 \(x's channels over 2 group"):
        cudakit.conv2d(x4, w, groups=2)
    with pytest.raises(cudakit.ShapeError, match="3 channels are not divisible by groups = 2"):
        cudakit.conv2d(x, w, groups=2)
    with pytest.raises(cudakit.ShapeError, match="5 filters are not divisible by groups = 2"):
        cudakit.conv2d(x4, cc.data(rng, (5, 2, 3, 3), "float32"), groups=2)
    for bad in (0, 1.5, True, "2"):
        with pytest.raises(ValueError, match="groups must be an int >= 1"):
            cudakit.conv2d(x, w, groups=bad)
    with pytest.raises(ValueError, match="groups must be an int >= 1"):
        cudakit.conv2d_backward(cc.data(rng, (1, 4, 6, 6), "float32"), x, w, groups=0)
    with pytest.raises(cudakit.ShapeError, match=r"x must be \(N, C, H, W\)"):
        cudakit.conv2d(x[0], w)
    with pytest.raises(cudakit.ShapeError, match="larger than the padded input"):
        cudakit.conv2d(x[:, :, :2, :2], w)
    for pool in (cudakit.max_pool2d, cudakit.avg_pool2d):   # (a pool has no dilation to name)
        with pytest.raises(cudakit.ShapeError, match=re.escape("kernel_size 9 is larger than the padded input "
                                                               "along H (8 + 2 * 0)")):
            pool(cc.data(rng, (1, 2, 8, 8), "float32"), 9)
    with pytest.raises(ValueError, match="stride must be >= 1"):
        cudakit.conv2d(x, w, stride=0)
    with pytest.raises(ValueError, match="padding must be an int or a pair"):
        cudakit.conv2d(x, w, padding="same")
    with pytest.raises(cudakit.ShapeError, match=r"bias must have shape \(4,\)"):
        cudakit.conv2d(x, w, cc.data(rng, (3,), "float32"))
    with pytest.raises(cudakit.DTypeError):
        cudakit.conv2d(x, w.astype(np.float64))
    with pytest.raises(ValueError, match="padding must be <= half the kernel"):
        cudakit.max_pool2d(x, 2, padding=2)
    with pytest.raises(cudakit.ShapeError, match="grad_out must have shape"):
        cudakit.max_pool2d_backward(x, x, 2)


def test_backward_shape_errors_quote_the_callers_shapes(rng):
    """grad_out's expected shape in the form the caller passes it: (N, Ho, Wo, K) with
    memory_format="nhwc", (N, K, Lo) for conv1d."""
    x, w = cc.data(rng, (2, 7, 9, 4), "float32"), cc.data(rng, (6, 4, 3, 3), "float32")
    with pytest.raises(cudakit.ShapeError, match=r"grad_out must have shape \(2, 5, 7, 6\) \(got \(2, 6, 5, 7\)\)"):
        cudakit.conv2d_backward(cc.data(rng, (2, 6, 5, 7), "float32"), x, w, memory_format="nhwc")
    with pytest.raises(cudakit.ShapeError, match=r"grad_out must have shape \(2, 6, 8\) \(got \(2, 6, 3\)\)"):
        cudakit.conv1d_backward(cc.data(rng, (2, 6, 3), "float32"), cc.data(rng, (2, 4, 10), "float32"),
                                cc.data(rng, (6, 4, 3), "float32"))


def test_conv2d_zero_filters_and_strided_input(rng):
    x = cc.data(rng, (2, 3, 8, 8), "float32")
    assert cudakit.conv2d(x, cc.data(rng, (0, 3, 3, 3), "float32")).shape == (2, 0, 6, 6)
    xs = np.repeat(x, 2, axis=3)[..., ::2]          # a non-contiguous view
    w = cc.data(rng, (4, 3, 3, 3), "float32")
    np.testing.assert_allclose(cudakit.conv2d(xs, w, padding=1), cudakit.conv2d(x, w, padding=1), rtol=1e-6)


def test_conv2d_nan_propagates(rng):
    x, w = cc.data(rng, (1, 2, 6, 6), "float32"), cc.data(rng, (3, 2, 3, 3), "float32")
    x[0, 1, 2, 2] = np.nan
    y = cudakit.conv2d(x, w)
    want = cc.conv_reference(x, w, None, (1, 1), (0, 0), (1, 1))[0]
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    assert np.isnan(y).sum() == 3 * 9


def test_max_pool_backward_of_all_inf_windows_stays_inside():
    x = np.full((1, 1, 3, 3), -np.inf, np.float32)
    g = np.ones((1, 1, 3, 3), np.float32)
    gx = cudakit.max_pool2d_backward(g, x, 3, 1, 1)
    assert gx.sum() == 9  # every window's gradient lands on an element of x, none in the padding


def test_direct_routing():
    """Which grouped convolutions the GPU's direct kernels take (kernels/conv.py): depthwise with at
    most 7 x 7 taps, or at most 8 channels a group in and out with at most 3 x 3 taps; and usable()
    counts the grouped weight, not C x K."""
    from cudakit.kernels import conv
    geo3 = (1, 1, 1, 1, 1, 1, 3, 3, 56, 56)
    geo5 = (1, 1, 2, 2, 1, 1, 5, 5, 56, 56)
    geo9 = (1, 1, 4, 4, 1, 1, 9, 9, 56, 56)
    assert conv.direct((2, 64, 56, 56), (64, 1, 3, 3), 64, geo3)
    assert conv.direct((2, 64, 56, 56), (64, 1, 5, 5), 64, geo5)
    assert not conv.direct((2, 64, 56, 56), (64, 1, 9, 9), 64, geo9)    # 81 taps: implicit GEMM
    assert conv.direct((2, 64, 56, 56), (128, 1, 3, 3), 64, geo3)       # two filters a group
    assert conv.direct((2, 256, 56, 56), (256, 8, 3, 3), 32, geo3)      # ResNeXt's 8 -> 8
    assert not conv.direct((2, 256, 56, 56), (256, 8, 5, 5), 32, geo5)  # 8 -> 8 past 3 x 3
    assert not conv.direct((2, 256, 56, 56), (256, 16, 3, 3), 16, geo3)  # 16 channels fill a tile
    assert not conv.direct((2, 64, 56, 56), (64, 64, 3, 3), 1, geo3)
    big_w = 44_000_000   # 7 x 7 depthwise filters of 2.16e9 elements: int32 weight offsets would wrap
    assert not conv.direct((1, big_w, 6, 6), (big_w, 1, 7, 7), big_w, (1, 1, 3, 3, 1, 1, 7, 7, 6, 6))
    big = 70000   # more groups than grid z holds: the direct kernels still run them
    if conv.available():
        assert conv.usable("float32", (1, big, 8, 8), big, (1, 1, 1, 1, 1, 1, 3, 3, 8, 8), big)
        assert conv.usable("float32", (1, 2 * big, 8, 8), 2 * big, (1, 1, 1, 1, 1, 1, 3, 3, 8, 8), big)
        assert not conv.usable("float32", (1, 2 * big, 8, 8), 2 * big, (1, 1, 2, 2, 1, 1, 5, 5, 8, 8), big)
        geo = geo3[:8] + (8, 8)   # a weight of 2^35 elements in 8 groups of 2^29: int32 offsets within each
        assert conv.usable("bfloat16", (1, 65536, 8, 8), 65536, geo, 8)
        assert not conv.usable("bfloat16", (1, 65536, 8, 8), 65536, geo, 1)


class _KeyedCpu(CpuBackend):
    """The CPU backend with _plan_key filled in (as the CUDA backend's: NumPy arrays stand in for
    CuPy's), counting the full argument checks."""

    def __init__(self):
        super().__init__()
        self._conv_plans, self.checks = {}, 0

    def _plan_key(self, named):
        if not all(v is None or type(v) is np.ndarray for v in named.values()):
            return None
        return tuple(None if v is None else (v.shape, v.dtype) for v in named.values())

    def _conv_args(self, *args):
        self.checks += 1
        return super()._conv_args(*args)


def test_conv_plan_cache(rng):
    """The argument checks run once per call signature (ConvOps._conv_plan): a repeat call reuses
    them with the same result; a new shape, dtype, bias or geometry checks again; bools, lists and
    failing calls are never cached; arrays of another type bypass the cache."""
    be = _KeyedCpu()
    x, w = rng.standard_normal((2, 4, 7, 7)), rng.standard_normal((4, 1, 3, 3))
    want = be.conv2d(x, w, None, 1, 1, 1, 4)
    np.testing.assert_array_equal(be.conv2d(x, w, None, 1, 1, 1, 4), want)
    assert be.checks == 1 and len(be._conv_plans) == 1
    be.conv2d(x[:1], w, None, 1, 1, 1, 4)
    be.conv2d(x.astype(np.float32), w.astype(np.float32), None, 1, 1, 1, 4)
    be.conv2d(x, w, None, 1, (1, 1), 1, 4)
    be.conv2d(x, w, np.zeros(4), 1, 1, 1, 4)
    assert be.checks == 5
    be.conv2d(x, w, None, [1, 1], 1, 1, 4)      # a list: unhashable, checked
    be.conv2d(x, w, None, 1, 1, 1, 4)
    assert be.checks == 6
    with pytest.raises(ValueError):
        be.conv2d(x, w, None, True, 1, 1, 4)    # True == 1, but a bool stride is an error every time
    for _ in range(2):
        with pytest.raises(cudakit.ShapeError):
            be.conv2d(x, w, None, 1, 1, 1, 2)   # 4 channels over 2 groups need 2-channel filters
    assert be.checks == 9
    g = rng.standard_normal(want.shape)
    first = be.conv2d_backward(g, x, w, 1, 1, 1, False, 4)
    again = be.conv2d_backward(g, x, w, 1, 1, 1, False, 4)
    assert be.checks == 10 and all(a is None or np.array_equal(a, b) for a, b in zip(first, again))
    be.conv2d(list(x), w, None, 1, 1, 1, 4)     # not the backend's own arrays: no key, checked
    assert be.checks == 11


@pytest.mark.parametrize("nlc", [False, True], ids=["ncl", "nlc"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geo", cc.CONV1D_GEOMETRIES)
def test_conv1d(geo, dtype, nlc, rng):
    n, c, length, k, r, stride, pad, dil, groups = geo
    cc.check_conv1d(_dev, _host, rng, n, c, length, k, r, stride, pad, dil, dtype, groups, with_bias=groups != 4,
                    nlc=nlc)


def test_conv1d_errors(rng):
    x, w = np.ones((2, 4, 10), np.float32), np.ones((3, 4, 3), np.float32)
    with pytest.raises(cudakit.ShapeError, match=r"conv1d: x must be \(N, C, L\)"):
        cudakit.conv1d(x[0], w)
    with pytest.raises(cudakit.ShapeError, match=r"conv1d: weight must be \(K, C / groups, R\)"):
        cudakit.conv1d(x, w[:, :, :, None])
    with pytest.raises(cudakit.ArgumentError, match="conv1d: stride must be an int or a 1-tuple"):
        cudakit.conv1d(x, w, stride=(1, 2))
    for bad in (1.5, True, (2.0,), None):   # the value as given, not conv2d's "pair of ints"
        with pytest.raises(cudakit.ArgumentError, match=re.escape(f"conv1d: dilation must be an int or a 1-tuple "
                                                                  f"(got {bad!r})")):
            cudakit.conv1d(x, w, dilation=bad)
    with pytest.raises(cudakit.ArgumentError, match=re.escape("conv1d: stride must be >= 1 (got (0,))")):
        cudakit.conv1d(x, w, stride=(0,))
    with pytest.raises(cudakit.ShapeError, match=re.escape("conv1d: weight (3, 4, 0) has an empty dimension")):
        cudakit.conv1d(x, np.ones((3, 4, 0), np.float32))
    with pytest.raises(cudakit.ArgumentError, match="conv1d: padding must be >= 0"):
        cudakit.conv1d(x, w, padding=-1)
    with pytest.raises(cudakit.ShapeError, match="conv1d: x's 4 channels are not divisible by groups = 3"):
        cudakit.conv1d(x, w, groups=3)
    # NumPy integers as conv2d takes them (found by a probing helper, 2026-11-28)
    np.testing.assert_array_equal(cudakit.conv1d(x, w, stride=np.int64(2), padding=(np.int32(1),)),
                                  cudakit.conv1d(x, w, stride=2, padding=1))
    with pytest.raises(cudakit.ShapeError, match=r"conv1d: weight must be \(K, C / groups, R\) .* got \(3, 2, 3\)"):
        cudakit.conv1d(x, w[:, :2])
    with pytest.raises(cudakit.ShapeError, match="larger than the padded input along L"):
        cudakit.conv1d(x, np.ones((3, 4, 30), np.float32))
    with pytest.raises(cudakit.ShapeError, match="conv1d_backward: grad_out must be"):
        cudakit.conv1d_backward(np.ones((2, 3, 8, 1), np.float32), x, w)
    with pytest.raises(cudakit.ArgumentError, match="conv1d: memory_format must be None, 'ncl' or 'nlc'"):
        cudakit.conv1d(x, w, memory_format="nhwc")
    with pytest.raises(cudakit.ShapeError, match=r"conv1d: x must be \(N, L, C\)"):
        cudakit.conv1d(x[0], w, memory_format="nlc")
    with pytest.raises(cudakit.ShapeError, match=r"conv1d_backward: grad_out must be \(N, Lo, K\)"):
        cudakit.conv1d_backward(np.ones((2, 3), np.float32), x, w, memory_format="nlc")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [(2, 5, 9, 7, 6, 3, 3, (2, 1), 1, 1, 1), (1, 4, 6, 5, 8, 1, 1, 1, 0, 1, 2),
                                  (3, 6, 7, 8, 6, 3, 2, 1, (1, 0), (2, 1), 6)])
@pytest.mark.parametrize("weight_cl", [False, True], ids=["weight", "weight_cl"])
def test_conv2d_channels_last(case, dtype, weight_cl, rng):
    n, c, h, w, k, r, s, stride, pad, dil, groups = case
    cc.check_conv2d_channels_last(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype, groups,
                                  weight_cl=weight_cl)


def test_conv2d_memory_format_errors(rng):
    x = np.zeros((1, 3, 5, 5), np.float32)
    w = np.zeros((2, 3, 3, 3), np.float32)
    with pytest.raises(cudakit.ArgumentError, match="memory_format must be None, 'nchw' or 'nhwc'"):
        cudakit.conv2d(x, w, memory_format="channels_last")
    with pytest.raises(cudakit.ShapeError, match=r"x must be \(N, H, W, C\)"):
        cudakit.conv2d(x[0], w, memory_format="nhwc")
    y = cudakit.conv2d(np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2), w, memory_format="nchw")
    assert y.flags.c_contiguous


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geo,groups,form", cc.CONV_RELU_CASES)
def test_conv_relu(geo, groups, form, dtype, rng):
    """conv2d / conv1d with activation="relu" and their backward with y, every layout."""
    n, c, h, w, k, r, s, stride, pad, dil = geo
    cc.check_conv_relu(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype, groups, form)


def test_conv_activation_errors(rng):
    cc.check_conv_activation_errors(_dev, rng)


@pytest.mark.parametrize("groups", [1, 4])
def test_conv_relu_keeps_nan(groups, rng):
    cc.check_conv_relu_nan(_dev, _host, rng, "float32", groups)
