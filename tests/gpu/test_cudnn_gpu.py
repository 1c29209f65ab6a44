"""The cuDNN path (kernels/cudnn.py, the `cudnn` extra) of conv2d and attention, forced for every
call, against the float64 references of tests/conv_checks.py and tests/attention_checks.py."""

import attention_checks as ac
import conv_checks as cc
import numpy as np
import pytest
from helpers import data, np_dtype

import cudakit
from cudakit.kernels import cudnn, paths

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")

from cupy_io import to_dev as _dev  # after the importorskip
from cupy_io import to_host as _host


@pytest.fixture
def only_cudnn(monkeypatch):
    """Every call with a cuDNN candidate takes it; a declined signature fails the test."""
    if not cudnn.available():
        pytest.skip(f"cuDNN not usable: {cudnn.why_unavailable()}")

    def run(op, key, candidates, timer=None):
        out = dict(candidates)["cudnn"]()
        assert out is not None, f"cuDNN declined {op} {key}: {cudnn.declined()}"
        paths._choice[(op, key)] = "cudnn"   # recorded as paths.run records it: the dispatch plans ask
        recorded.append((op, key))
        return out
    recorded: list = []
    monkeypatch.setattr(paths, "run", run)
    before = cudnn.stats["executions"]
    yield
    for k in recorded:   # later tests choose for themselves
        paths._choice.pop(k, None)
    assert cudnn.stats["executions"] > before, "no call ran on cuDNN"


@pytest.fixture
def prefer_cudnn(monkeypatch):
    """Each call with a cuDNN candidate takes it where cuDNN builds the graph, else the next
    candidate (no timing): which calls cuDNN takes and which it declines."""
    if not cudnn.available():
        pytest.skip(f"cuDNN not usable: {cudnn.why_unavailable()}")

    def run(op, key, candidates, timer=None):
        for _, fn in candidates:
            out = fn()
            if out is not None:
                return out
        return None
    monkeypatch.setattr(paths, "run", run)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("geo", [(2, 16, 9, 7, 32, 3, 3, 1, 1, 1), (4, 32, 28, 28, 64, 3, 3, 1, 1, 1),
                                 (3, 8, 13, 11, 16, 3, 2, (2, 1), (1, 2), 1), (2, 16, 10, 10, 24, 3, 3, 1, 2, 2),
                                 (2, 64, 14, 14, 32, 1, 1, 2, 0, 1)])
def test_conv2d_cudnn(geo, dtype, rng, only_cudnn):
    n, c, h, w, k, r, s, stride, pad, dil = geo
    cc.check_conv2d(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("geo", [(2, 16, 9, 7, 32, 3, 3, 1, 1, 1), (3, 8, 13, 11, 16, 3, 2, (2, 1), (1, 2), 1),
                                 (2, 64, 14, 14, 32, 1, 1, 2, 0, 1)])
def test_conv2d_channels_last_runs_cudnn_in_place(geo, dtype, rng, only_cudnn):
    """Channels-last calls (both forms) against float64, on graphs whose activations are described
    channels-last ("nhwc" signatures): cuDNN reads and writes that memory with no layout copies."""
    n, c, h, w, k, r, s, stride, pad, dil = geo
    cc.check_conv2d_channels_last(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype)
    kinds = {key[0] for key in cudnn._graphs if isinstance(key, tuple) and "nhwc" in key}
    assert kinds >= {"conv_fprop", "conv_dgrad", "conv_wgrad"}, list(cudnn._graphs)


GROUPED = [((2, 16, 9, 7, 32, 3, 3, 1, 1, 1), 2), ((3, 32, 13, 11, 32, 3, 2, (2, 1), (1, 2), 1), 4),
           ((2, 16, 10, 10, 16, 3, 3, 1, 1, 1), 16), ((2, 64, 14, 14, 32, 1, 1, 2, 0, 1), 8),
           ((2, 24, 12, 12, 48, 3, 3, 1, 2, 2), 3)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("geo,groups", GROUPED)
def test_conv2d_grouped_cudnn(geo, groups, dtype, rng, only_cudnn):
    """Grouped convolutions (depthwise, groups = channels = filters, among them) on cuDNN, forward
    and backward, against float64: cuDNN reads the group count off the weight's C / groups, on
    graphs of their own (the weight's shape is in the signature)."""
    n, c, h, w, k, r, s, stride, pad, dil = geo
    cc.check_conv2d(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype, groups=groups)
    shapes = {key[2] for key in cudnn._graphs if isinstance(key, tuple) and key[0] == "conv_fprop"}
    assert (k, c // groups, r, s) in shapes, shapes


@pytest.mark.parametrize("geo,groups", GROUPED[:3])
def test_conv2d_grouped_cudnn_channels_last_and_tf32(geo, groups, rng, only_cudnn, float32_precision):
    """Grouped convolutions on cuDNN: channels-last bfloat16 (both forms, read in place) and float32
    under precision "tf32" (cuDNN's TF32 engines), against float64."""
    n, c, h, w, k, r, s, stride, pad, dil = geo
    cc.check_conv2d_channels_last(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, "bfloat16", groups=groups)
    float32_precision("tf32")
    cc.check_conv2d(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, "float32", groups=groups,
                    product_u=cc.PRODUCT_U["tf32"])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_grouped_conv2d_plans_replay_cudnn(dtype, rng, only_cudnn):
    """After a grouped call's checked run on cuDNN, conv2d's and conv2d_backward's dispatch plans
    replay cuDNN's graphs: the forward bitwise, the gradients as cuDNN's engines sum them."""
    from cudakit import dispatch
    dispatch.clear()
    x = cp.asarray(data(rng, (3, 32, 11, 9), dtype))
    w = cp.asarray(data(rng, (64, 8, 3, 3), dtype))
    b = cp.asarray(data(rng, (64,), dtype))
    g = cp.asarray(data(rng, (3, 64, 11, 9), dtype))
    runs = [(cudakit.conv2d(x, w, b, 1, 1, 1, 4),) + tuple(cudakit.conv2d_backward(g, x, w, 1, 1, 1, True, 4))
            for _ in range(3)]
    planned = [p for (op, _), p in dispatch._plans.items() if op in ("conv2d", "conv2d_backward")]
    # path_plans' own plans, which replay cuDNN's graphs (the own kernels' would be traced Replays)
    assert len(planned) == 2 and all(getattr(p, "__module__", None) == "cudakit.kernels.path_plans"
                                     for p in planned), planned
    cp.testing.assert_array_equal(runs[0][0], runs[2][0])
    for a, b_ in zip(runs[0][1:], runs[2][1:]):
        cp.testing.assert_allclose(a.astype(cp.float32), b_.astype(cp.float32), rtol=2e-2, atol=2e-3)
    dispatch.clear()


@pytest.fixture
def cudnn_krsc(monkeypatch):
    """Every conv2d pass that offers the channels-last weight path ("cudnn-krsc") takes it, the
    others cuDNN; a declined signature fails the test."""
    if not cudnn.available():
        pytest.skip(f"cuDNN not usable: {cudnn.why_unavailable()}")
    from cudakit import dispatch
    taken, recorded = [], []

    def run(op, key, candidates, timer=None):
        name = "cudnn-krsc" if "cudnn-krsc" in dict(candidates) else "cudnn"
        out = dict(candidates)[name]()
        assert out is not None, f"cuDNN declined {op} {key}: {cudnn.declined()}"
        paths._choice[(op, key)] = name   # (the dispatch plans replay it)
        recorded.append((op, key))
        taken.append(name)
        return out
    dispatch.clear()
    monkeypatch.setattr(paths, "run", run)
    yield taken
    for k in recorded:
        paths._choice.pop(k, None)
    dispatch.clear()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("geo", [(2, 16, 9, 7, 32, 3, 3, 1, 1, 1), (3, 8, 13, 11, 16, 3, 2, (2, 1), (1, 2), 1),
                                 (2, 16, 10, 10, 24, 3, 3, 1, 2, 2)])
def test_conv2d_channels_last_weight_path(geo, dtype, rng, cudnn_krsc):
    """The channels-last path with the weight given to cuDNN as (K, R, S, C) memory too
    ("cudnn-krsc": kernels/transpose.py's permute copies the weight) against float64, both channels-last forms;
    dL/dw comes back C-contiguous."""
    n, c, h, w, k, r, s, stride, pad, dil = geo
    cc.check_conv2d_channels_last(_dev, _host, rng, n, c, h, w, k, r, s, stride, pad, dil, dtype)
    kinds = {key[0] for key in cudnn._graphs if isinstance(key, tuple) and "krsc" in key}
    assert kinds >= {"conv_fprop", "conv_dgrad", "conv_wgrad"}, list(cudnn._graphs)
    assert "cudnn-krsc" in cudnn_krsc
    x = cp.asarray(data(rng, (n, h, w, c), dtype)).transpose(0, 3, 1, 2)
    wt = cp.asarray(data(rng, (k, c, r, s), dtype))
    g = cp.ascontiguousarray(cudakit.conv2d(x, wt, None, stride, pad, dil).transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    for _ in range(2):   # (the second call through the dispatch plan)
        gw = cudakit.conv2d_backward(g, x, wt, stride, pad, dil, bias=False)[1]
        assert gw.flags.c_contiguous


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_conv2d_channels_last_weight_in_place(dtype, rng, cudnn_krsc, monkeypatch):
    """A channels-last weight (torch's channels_last: a (K, C, R, S) view of (K, R, S, C) memory)
    beside channels-last activations: on the "cudnn-krsc" path cuDNN reads it and writes dL/dw in
    place, no weight copy at all; values against float64 in every form (cc's weight_cl), dL/dw
    channels-last, every call (the later ones through the dispatch plans, which take such a weight)."""
    from cudakit import dispatch
    from cudakit.kernels import transpose
    cc.check_conv2d_channels_last(_dev, _host, rng, 2, 16, 9, 7, 32, 3, 3, 1, 1, 1, dtype, weight_cl=True)
    n, c, h, w, k = 2, 16, 9, 7, 32
    x = cp.asarray(data(rng, (n, h, w, c), dtype)).transpose(0, 3, 1, 2)
    wt = cp.asarray(data(rng, (k, 3, 3, c), dtype)).transpose(0, 3, 1, 2)
    g = cp.asarray(data(rng, (n, h, w, k), dtype)).transpose(0, 3, 1, 2)
    copies = []
    real = transpose.permute
    monkeypatch.setattr(transpose, "permute", lambda a, axes: copies.append(a.shape) or real(a, axes))
    cudnn_krsc.clear()   # (the check's NCHW form takes "cudnn": no channels-last path for NCHW activations)
    for _ in range(3):
        y = cudakit.conv2d(x, wt, None, 1, 1)
        gx, gw, _ = cudakit.conv2d_backward(g, x, wt, 1, 1, bias=False)
        assert gw.strides == wt.strides and y.strides[1] == y.itemsize and gx.strides[1] == gx.itemsize
    assert copies == [], copies
    assert set(cudnn_krsc) == {"cudnn-krsc"}
    planned = {k[0] for k, p in dispatch._plans.items() if p is not None}
    assert {"conv2d", "conv2d_backward"} <= planned, planned


def test_weight_copies_to_krsc_and_back_round_trip(rng):
    """cudnn.as_weight_layout both ways (permute's short runs for these short tap dims): to
    (K, R, S, C) memory and back, every word size cuDNN takes, odd sizes, several blocks a filter."""
    from cudakit.kernels import transpose
    for dtype, shape in (("bfloat16", (5, 7, 3, 3)), ("float32", (3, 130, 1, 5)), ("float16", (1, 1, 2, 2)),
                         ("bfloat16", (2, 300, 3, 3)), ("float32", (4, 70, 11, 11)), ("bfloat16", (512, 512, 3, 3))):
        w = cp.asarray(data(rng, shape, dtype))
        krsc = cudnn.as_weight_layout(w, True)
        assert krsc.shape == w.shape and krsc.strides[1] == krsc.itemsize
        np.testing.assert_array_equal(_host(cp.ascontiguousarray(krsc.transpose(0, 2, 3, 1))),
                                      _host(w).transpose(0, 2, 3, 1))
        back = cudnn.as_weight_layout(krsc)
        assert back.flags.c_contiguous
        if cudnn.is_krsc(krsc):   # (one channel: the two layouts are one memory, and the view is C-contiguous)
            assert cudnn.as_weight_layout(krsc, True) is krsc
        np.testing.assert_array_equal(_host(back), _host(w))
    assert transpose.plan((512, 512, 3, 3), (9216, 18, 6, 2), 2, (0, 2, 3, 1)).kind == "runs"

def test_conv2d_channels_last_output_is_cudnns_own_memory(rng, only_cudnn):
    """memory_format="nhwc": the (N, Ho, Wo, K) result is the very array cuDNN wrote (a transposed
    view of it, no copy kernel after the convolution), and a C-contiguous grad_out with a
    channels-last x (mixed layouts) still gives the right gradients."""
    x = _dev(data(rng, (2, 9, 11, 16), "bfloat16"))
    wt = _dev(data(rng, (24, 16, 3, 3), "bfloat16"))
    launches = []
    real = cudnn._Graph.run
    cudnn._Graph.run = lambda self, ptrs: (launches.append(ptrs[-1]), real(self, ptrs))[1]
    try:
        y = cudakit.conv2d(x, wt, None, 1, 1, memory_format="nhwc")
    finally:
        cudnn._Graph.run = real
    assert y.shape == (2, 9, 11, 24) and y.flags.c_contiguous and launches == [y.data.ptr]
    xv = x.transpose(0, 3, 1, 2)   # (N, C, H, W) view of channels-last memory
    g = _dev(data(rng, (2, 24, 9, 11), "bfloat16"))   # C-contiguous
    gx, gw, _ = cudakit.conv2d_backward(g, xv, wt, 1, 1, bias=False)
    xc = cp.ascontiguousarray(xv)
    rx, rw, _ = cudakit.conv2d_backward(g, xc, wt, 1, 1, bias=False)
    assert gx.strides[1] == gx.itemsize   # in x's layout
    assert cp.array_equal(cp.ascontiguousarray(gx), rx) and cp.array_equal(gw, rw)


def test_conv2d_cudnn_float32_ieee_runs_exact_plans(rng, only_cudnn):
    """float32 under "ieee" on cuDNN: only plans of FP32 arithmetic (FFT and Winograd ones included,
    as in torch's strict FP32), so the results meet the FMA-summation bound plus the transforms'
    roundings (PRODUCT_U["ieee_cudnn"], well under TF32's), forward and backward, NCHW and
    channels-last; their graphs are "ieee" signatures of their own."""
    old = cudakit.set_float32_precision("ieee")
    u = cc.PRODUCT_U["ieee_cudnn"]
    try:
        cc.check_conv2d(_dev, _host, rng, 2, 16, 12, 12, 32, 3, 3, 1, 1, 1, "float32", product_u=u)
        cc.check_conv2d(_dev, _host, rng, 3, 32, 9, 9, 16, 1, 1, 2, 0, 1, "float32", product_u=u)
        cc.check_conv2d(_dev, _host, rng, 4, 64, 20, 20, 64, 3, 3, 1, 1, 1, "float32", product_u=u)
        cc.check_conv2d_channels_last(_dev, _host, rng, 2, 16, 10, 10, 24, 3, 3, 1, 1, 1, "float32", product_u=u)
    finally:
        cudakit.set_float32_precision(old)
    assert {k[0] for k in cudnn._graphs if isinstance(k, tuple) and "ieee" in k} >= \
        {"conv_fprop", "conv_dgrad", "conv_wgrad"}


def test_conv2d_cudnn_float32_tf32(rng, only_cudnn):
    old = cudakit.set_float32_precision("tf32")
    try:
        cc.check_conv2d(_dev, _host, rng, 2, 16, 12, 12, 32, 3, 3, 1, 1, 1, "float32", product_u=cc.PRODUCT_U["tf32"])
    finally:
        cudakit.set_float32_precision(old)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lead,lq,lk,d", [((2, 3), 17, 29, 8), ((1,), 64, 64, 64), ((2, 2), 257, 300, 128),
                                          ((4,), 130, 130, 80), ((2,), 33, 5, 24), ((2,), 70, 90, 256),
                                          ((1, 2), 33, 33, 160)])
def test_attention_cudnn(lead, lq, lk, d, dtype, causal, rng, request):
    if causal and lq > lk:   # cuDNN declines (its bottom-right mask needs Lq <= Lk): the Triton kernels run it
        ac.check_attention(_dev, _host, rng, lead, lq, lk, d, dtype, causal)
        return
    request.getfixturevalue("only_cudnn")
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, dtype, causal)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lead,lq,lk,d,bias", [((2, 3), 96, 96, 64, (1, 3, 96, 96)), ((2, 4), 136, 136, 128, (4, 136, 136)),
                                               ((1, 2), 40, 72, 32, (1, 1, 40, 72)), ((2, 2), 96, 96, 64, (2, 2, 96, 96)),
                                               ((3, 2), 48, 48, 80, (3, 1, 48, 48)), ((2, 2), 64, 64, 256, (1, 2, 64, 64)),
                                               ((2, 3), 80, 80, 64, (2, 1, 1, 80))])
def test_attention_bias_cudnn(lead, lq, lk, d, bias, dtype, causal, rng, prefer_cudnn):
    """A bias over every query row and key (broadcast over batch or heads at most: ALiBi's and a
    relative-position bias's (1, H, Lq, Lk), a shared (Lq, Lk) one, a per-batch (B, 1, Lq, Lk)) runs
    on cuDNN's graphs, forward and backward with its gradient, against float64 (a row of -inf, which
    sees no key, gives out 0 and lse -inf there). The calls cuDNN declines are the Triton kernels'
    from the start (attention.cudnn_bias): the backward at head dim 256 (no bias gradient there),
    both passes for a causal mask with Lq != Lk (cuDNN's bottom-right mask takes no bias). A padding
    bias (B, 1, 1, Lk) runs the forward on cuDNN (a zero row stride), its backward on the Triton
    kernels."""
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, dtype, causal, bias=bias)
    built = {key[0] for key, g in cudnn._graphs.items()
             if isinstance(g, cudnn._Graph) and key[0].endswith("_bias") and key[1][0][0] == tuple(lead) + (lq, d)
             and key[2] == dtype and key[4] == causal}
    if causal and lq != lk:
        assert not built, built
        return
    assert "sdpa_fwd_bias" in built and (d == 256 or bias[-2] == 1 or "sdpa_bwd_bias" in built), (built,
                                                                                              cudnn.declined())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("lk", [192, 256])
def test_attention_bias_backward_with_a_finite_masked_row(lk, dtype, rng, prefer_cudnn):
    """A whole row of a finite large negative bias (-1e4, as a finfo.min mask gives) puts that row's
    log-sum-exp far below ln(FLT_MAX); cuDNN's backward with a bias returned NaN in dQ for such rows
    where Lk % 128 == 64 (pytorch/pytorch#196678, fixed in backend 9.26): before 9.26 those key
    lengths take the Triton kernels' backward, and both lengths match float64 with no NaN."""
    ac.check_attention(_dev, _host, rng, (1, 2), lk, lk, 64, dtype, False, bias=(1, 2, lk, lk), row_fill=-1e4)
    from cudakit.kernels import attention
    took = attention._cudnn_bias_grad_ok(lk, lk, 64)
    assert took == (lk % 128 != 64 or int(cudnn.version()) >= attention._BIAS_BWD_FIXED)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b,h,hkv,lq,lk,d,bias", [(2, 8, 2, 96, 96, 64, (2, 1, 96, 96)), (1, 4, 1, 48, 48, 128, (1, 4, 48, 48)),
                                                  (2, 6, 3, 40, 40, 32, (40, 40))])
def test_attention_grouped_query_bias_cudnn(b, h, hkv, lq, lk, d, bias, dtype, causal, rng, only_cudnn):
    """Grouped-query k, v with a bias (a grouped-query model's (B, 1, Lq, Lk) float mask, ALiBi's
    (1, H, Lq, Lk), a shared (Lq, Lk) one) on cuDNN's graphs, each k, v head read in place for its
    group of q heads and its gradient summed over the group by cuDNN, against float64."""
    ac.check_attention_gqa(_dev, _host, rng, b, h, hkv, lq, lk, d, dtype, causal, bias=bias)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hkv", [3, 1])
def test_attention_bias_cudnn_plans_replay_the_checked_call(dtype, causal, hkv, rng, only_cudnn):
    """attention, attention_with_lse and attention_backward with a bias that cuDNN's graphs took
    replay those graphs from dispatch plans (kernels/path_plans.py _bias_cudnn: a trace cannot
    record cuDNN's work), the forward bitwise, the backward to rounding (cuDNN sums dQ and the bias
    gradient in no fixed order)."""
    from cudakit import dispatch
    dispatch.clear()
    q, g = (cp.asarray(data(rng, (2, 3, 128, 64), dtype)) for _ in range(2))
    k, v = (cp.asarray(data(rng, (2, hkv, 128, 64), dtype)) for _ in range(2))   # (hkv 1: grouped-query)
    b = cp.asarray(data(rng, (3, 128, 128), dtype))   # ALiBi's form, without the batch dim
    results = []
    for _ in range(3):   # the first call is checked, the second builds the plans, the third replays them
        out, lse = cudakit.attention_with_lse(q, k, v, None, causal, attn_bias=b)
        o2 = cudakit.attention(q, k, v, None, causal, attn_bias=b)
        grads = cudakit.attention_backward(g, q, k, v, out, lse, None, causal, attn_bias=b)
        results.append((out, lse, o2, *grads))
    plans = {op: p for (op, *_), p in dispatch._plans.items()}
    for op in ("attention_bias", "attention_with_lse_bias", "attention_backward_bias"):
        p = plans.get(op)
        assert p is not None and getattr(p, "__module__", "").endswith("path_plans"), (op, p)
    for i, (a, c) in enumerate(zip(results[0], results[2])):
        assert a.shape == c.shape and a.dtype == c.dtype
        if i < 3:
            cp.testing.assert_array_equal(a, c)
        else:
            cp.testing.assert_allclose(a.astype(cp.float32), c.astype(cp.float32), rtol=2e-2, atol=2e-2)
    assert results[0][6].shape == b.shape


def test_paths_choose_and_report(rng):
    """Without forcing, each op times its candidates once and reports the path it took."""
    if not cudnn.available():
        pytest.skip(f"cuDNN not usable: {cudnn.why_unavailable()}")
    x = cp.asarray(data(rng, (8, 64, 32, 32), "bfloat16"))
    wt = cp.asarray(data(rng, (64, 64, 3, 3), "bfloat16"))
    y1 = cudakit.conv2d(x, wt, None, 1, 1)
    y2 = cudakit.conv2d(x, wt, None, 1, 1)
    assert paths.last_paths()["conv2d"] in ("cudnn", "triton")
    cp.testing.assert_allclose(y1.astype(cp.float32), y2.astype(cp.float32), rtol=1e-2, atol=1e-2)
    from cudakit.cli import collect_info
    info = collect_info()
    assert info["cudnn"] == cudnn.version() and "conv2d" in info["paths"]
    assert sum(info["paths_kept"]["conv2d"].values()) >= 1   # (this signature's choice, at least)


@pytest.mark.parametrize("dtype,path", [("bfloat16", "cudnn"), ("bfloat16", "triton"), ("float16", "cudnn"),
                                        ("float32", "triton")])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_plans_replay_the_checked_call_bitwise(dtype, path, causal, rng):
    """The dispatch plan of attention_with_lse / attention_backward (kernels/path_plans.py) gives
    the checked call's results bit for bit, on either path."""
    from cudakit import dispatch
    if path == "cudnn" and not cudnn.available():
        pytest.skip(f"cuDNN not usable: {cudnn.why_unavailable()}")
    lead, lq, lk, d = (2, 3), 70, 90, 64
    bh, dev = 6, cp.cuda.runtime.getDevice()
    dispatch.clear()   # a signature's path is fixed by its first call: forget earlier parameters' plans
    for op, kind in (("attention", "fwd"), ("attention_backward", "bwd")):
        paths._choice[(op, (kind, bh, lq, lk, d, dtype, causal, dev))] = path
    q, k, v, g = (cp.asarray(data(rng, lead + (n, d), dtype)) for n in (lq, lk, lk, lq))
    first = cudakit.attention_with_lse(q, k, v, None, causal)
    grads = cudakit.attention_backward(g, q, k, v, *first, None, causal)
    for _ in range(2):   # the second call is planned
        again = cudakit.attention_with_lse(q, k, v, None, causal)
        grads_again = cudakit.attention_backward(g, q, k, v, *again, None, causal)
    planned = [p for (op, _), p in dispatch._plans.items() if op in ("attention_with_lse", "attention_backward")]
    assert planned and all(p is not None for p in planned)
    for i, (a, b) in enumerate(zip(first + grads, again + grads_again)):
        assert a.shape == b.shape and a.dtype == b.dtype
        if i >= 2 and path == "cudnn":   # cuDNN's backward sums dQ with atomics: not bitwise repeatable
            cp.testing.assert_allclose(a.astype(cp.float32), b.astype(cp.float32), rtol=2e-2, atol=2e-3)
        else:
            cp.testing.assert_array_equal(a, b)
    if dtype != "float32":   # float32 attention has one path (Triton): no choice recorded
        assert paths.last_paths()["attention"] == path


@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention_plans_replay_the_checked_call(causal, rng, only_cudnn):
    """Grouped-query attention (B, H, L, D) q with (B, Hkv, L, D) k, v takes dispatch plans on cuDNN
    too (attention's inference graph, attention_with_lse, attention_backward): the planned calls
    give the checked call's results (forwards bit for bit)."""
    from cudakit import dispatch
    dispatch.clear()
    q, g = (cp.asarray(data(rng, (2, 8, 70, 64), "bfloat16")) for _ in range(2))
    k, v = (cp.asarray(data(rng, (2, 2, 90, 64), "bfloat16")) for _ in range(2))
    runs = []
    for _ in range(3):   # the second and third calls are planned
        y = cudakit.attention(q, k, v, None, causal)
        out, lse = cudakit.attention_with_lse(q, k, v, None, causal)
        runs.append((y, out, lse) + tuple(cudakit.attention_backward(g, q, k, v, out, lse, None, causal)))
    planned = {op: p_ for (op, _), p_ in dispatch._plans.items()
               if op in ("attention", "attention_with_lse", "attention_backward")}
    assert set(planned) == {"attention", "attention_with_lse", "attention_backward"}, planned
    assert all(p_ is not None for p_ in planned.values())
    for i, (a, b_) in enumerate(zip(runs[0], runs[2])):
        assert a.shape == b_.shape and a.dtype == b_.dtype
        if i >= 3:   # cuDNN's backward sums with atomics: not bitwise repeatable
            cp.testing.assert_allclose(a.astype(cp.float32), b_.astype(cp.float32), rtol=2e-2, atol=2e-3)
        else:
            cp.testing.assert_array_equal(a, b_)
    assert runs[0][3].shape == q.shape and runs[0][4].shape == k.shape


def _choose_conv_paths(path, x_shape, w_shape, geo, bias, key_tail):
    """Record `path` as conv2d's choice for the forward, wgrad and dgrad of one signature
    (key_tail: the rest of kernels/paths.conv_path_key after groups and bias)."""
    for op, kind, b in (("conv2d", "fwd", bias), ("conv2d_weight_grad", "wgrad", bias),
                        ("conv2d_input_grad", "dgrad", False)):
        paths._choice[(op, (kind, x_shape, w_shape, geo, 1, b) + tuple(key_tail))] = path


def _checked_and_planned_conv(x, w, bb, g, bias):
    """(index, the checked call's result, the planned call's) for y, dL/dx, dL/dw, dL/db of three
    conv2d + conv2d_backward calls (stride (2, 1), padding 1): the first is checked, the second and
    third planned (both plans asserted made); a result None on both sides (no bias) is skipped."""
    from cudakit import dispatch
    runs = []
    for _ in range(3):
        y = cudakit.conv2d(x, w, bb, (2, 1), 1)
        runs.append((y,) + tuple(cudakit.conv2d_backward(g, x, w, (2, 1), 1, 1, bias)))
    planned = [p_ for (op, _), p_ in dispatch._plans.items() if op in ("conv2d", "conv2d_backward")]
    assert len(planned) == 2 and all(p_ is not None for p_ in planned)
    out = []
    for i, (a, b_) in enumerate(zip(runs[0], runs[2])):
        if a is None:
            assert b_ is None and i == 3
            continue
        out.append((i, a, b_))
    return out


@pytest.mark.parametrize("dtype,path,prec", [("bfloat16", "cudnn", ""), ("bfloat16", "triton", ""),
                                             ("float32", "cudnn", "tf32"), ("float32", "triton", "tf32x3")])
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d_plans_replay_the_checked_call(dtype, path, prec, bias, rng):
    """conv2d / conv2d_backward's dispatch plans give the checked call's results (bitwise but for
    cuDNN's gradients, whose engines may split their sums), and a float32 plan follows a change of
    float32_precision."""
    from cudakit import dispatch
    if path == "cudnn" and not cudnn.available():
        pytest.skip(f"cuDNN not usable: {cudnn.why_unavailable()}")
    old = cudakit.set_float32_precision(prec or None)
    try:
        dispatch.clear()
        dev = cp.cuda.runtime.getDevice()
        x_shape, w_shape = (3, 16, 11, 9), (24, 16, 3, 3)
        geo = (2, 1, 1, 1, 1, 1, 3, 3, 6, 9)
        p = prec if dtype == "float32" else ""
        _choose_conv_paths(path, x_shape, w_shape, geo, bias, (dtype, p, dev))
        x, w = cp.asarray(data(rng, x_shape, dtype)), cp.asarray(data(rng, w_shape, dtype))
        bb = cp.asarray(data(rng, (24,), dtype)) if bias else None
        g = cp.asarray(data(rng, (3, 24, 6, 9), dtype))
        for i, a, b_ in _checked_and_planned_conv(x, w, bb, g, bias):
            if path == "cudnn" and i >= 1:   # cuDNN's dgrad and wgrad may split the sum: not bitwise
                cp.testing.assert_allclose(a.astype(cp.float32), b_.astype(cp.float32), rtol=2e-2, atol=2e-3)
            else:
                cp.testing.assert_array_equal(a, b_)
        assert paths.last_paths()["conv2d"] == path
        if dtype == "float32":   # another precision: its checked call, then a plan of its own; and back
            y1 = cudakit.conv2d(x, w, bb, (2, 1), 1)
            cudakit.set_float32_precision("ieee")
            want = cc.conv_reference(cp.asnumpy(x), cp.asnumpy(w), None if bb is None else cp.asnumpy(bb), (2, 1),
                                     (1, 1), (1, 1))[:2]
            for i in range(3):
                cc._close(cp.asnumpy(cudakit.conv2d(x, w, bb, (2, 1), 1)), *want, 16 * 9 + 1, dtype,
                          f"conv2d after a precision change, call {i}", cc.PRODUCT_U["ieee_cudnn"])
            cudakit.set_float32_precision(prec)
            cp.testing.assert_array_equal(cudakit.conv2d(x, w, bb, (2, 1), 1), y1)
    finally:
        cudakit.set_float32_precision(old)


@pytest.mark.parametrize("dtype,path,prec", [("bfloat16", "cudnn", ""), ("bfloat16", "triton", ""),
                                             ("float32", "cudnn", "tf32"), ("float32", "triton", "tf32x3")])
@pytest.mark.parametrize("bias", [False, True])
def test_conv1d_plans_replay_the_checked_call(dtype, path, prec, bias, rng, float32_precision):
    """conv1d / conv1d_backward's dispatch plans (conv2d's plans on (N, C, 1, L) views, or a plan
    traced from the checked call for the Triton kernels) give the checked call's results in the
    checked call's shapes (bitwise but for cuDNN's gradients)."""
    from cudakit import dispatch
    if path == "cudnn" and not cudnn.available():
        pytest.skip(f"cuDNN not usable: {cudnn.why_unavailable()}")
    float32_precision(prec or None)
    dispatch.clear()
    dev = cp.cuda.runtime.getDevice()
    geo = (1, 2, 0, 1, 1, 1, 1, 3, 1, 19)   # stride 2, padding 1, 3 taps: L 37 -> Lo 19
    _choose_conv_paths(path, (3, 16, 1, 37), (24, 16, 1, 3), geo, bias,
                       (dtype, prec if dtype == "float32" else "", dev))
    x, w = cp.asarray(data(rng, (3, 16, 37), dtype)), cp.asarray(data(rng, (24, 16, 3), dtype))
    bb = cp.asarray(data(rng, (24,), dtype)) if bias else None
    g = cp.asarray(data(rng, (3, 24, 19), dtype))
    runs = []
    for _ in range(3):   # the first call checked, the second and third planned
        runs.append((cudakit.conv1d(x, w, bb, 2, 1),) + tuple(cudakit.conv1d_backward(g, x, w, 2, 1, 1, bias)))
    planned = {op: p_ for (op, _), p_ in dispatch._plans.items() if op in ("conv1d", "conv1d_backward")}
    assert set(planned) == {"conv1d", "conv1d_backward"} and all(p_ is not None for p_ in planned.values())
    assert paths.last_paths()["conv2d"] == path
    for i, (a, b_) in enumerate(zip(runs[0], runs[2])):
        if a is None:
            assert b_ is None and i == 3
            continue
        assert a.shape == b_.shape == [(3, 24, 19), x.shape, w.shape, (24,)][i]
        if path == "cudnn" and i >= 1:
            cp.testing.assert_allclose(a.astype(cp.float32), b_.astype(cp.float32), rtol=2e-2, atol=2e-3)
        else:
            cp.testing.assert_array_equal(a, b_)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("path", ["cudnn", "cudnn-krsc"])
def test_conv2d_channels_last_plans_replay_the_checked_call(bias, path, rng):
    """Channels-last views (torch's channels_last) take dispatch plans too (their strides are part
    of the signature): the planned calls give the checked call's results, in channels-last memory,
    with cuDNN reading and writing that memory (no layout copies); "cudnn-krsc": the weight given to
    cuDNN channels-last too, dL/dw back C-contiguous."""
    from cudakit import dispatch
    if not cudnn.available():
        pytest.skip(f"cuDNN not usable: {cudnn.why_unavailable()}")
    dispatch.clear()
    dev = cp.cuda.runtime.getDevice()
    x_shape, w_shape = (3, 16, 11, 9), (24, 16, 3, 3)
    geo = (2, 1, 1, 1, 1, 1, 3, 3, 6, 9)
    _choose_conv_paths(path, x_shape, w_shape, geo, bias, ("bfloat16", "", dev, "nhwc", "krsc"))   # (3x3: offered)
    cl = lambda a: cp.asarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)  # noqa: E731 -- channels-last views
    x, g = cl(data(rng, x_shape, "bfloat16")), cl(data(rng, (3, 24, 6, 9), "bfloat16"))
    w = cp.asarray(data(rng, w_shape, "bfloat16"))
    bb = cp.asarray(data(rng, (24,), "bfloat16")) if bias else None
    for i, a, b_ in _checked_and_planned_conv(x, w, bb, g, bias):
        assert a.strides == b_.strides
        if i in (0, 1):   # y and dL/dx in x's layout
            assert a.strides[1] == a.itemsize, a.strides
        if i >= 1:   # cuDNN's dgrad and wgrad may split the sum: not bitwise
            cp.testing.assert_allclose(a.astype(cp.float32), b_.astype(cp.float32), rtol=2e-2, atol=2e-3)
        else:
            cp.testing.assert_array_equal(a, b_)
        if i == 2:
            assert b_.flags.c_contiguous
    krsc = path == "cudnn-krsc"
    assert any(isinstance(k, tuple) and k[0] == "conv_fprop" and "nhwc" in k and ("krsc" in k) == krsc
               for k in cudnn._graphs)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype,path", [("bfloat16", "cudnn"), ("bfloat16", "cudnn-krsc"), ("float32", "triton")])
def test_channels_last_memory_format_calls_take_plans(dtype, path, bias, rng, float32_precision):
    """conv2d(..., memory_format="nhwc") on (N, H, W, C) arrays and conv1d(..., memory_format="nlc")
    on (N, L, C) arrays, forward and backward, take dispatch plans (conv2d's on the channels-last
    views the checked calls make; for cudakit's Triton kernels, which compute in NCHW, a plan traced
    from the checked call, its layout copies cudakit's permute launches) that give the checked
    call's results, shapes and strides."""
    from cudakit import dispatch
    if path != "triton" and not cudnn.available():
        pytest.skip(f"cuDNN not usable: {cudnn.why_unavailable()}")
    prec = "tf32x3" if dtype == "float32" else ""
    float32_precision(prec or "tf32x3")
    dispatch.clear()
    dev = cp.cuda.runtime.getDevice()
    tail = (dtype, prec, dev, "nhwc", "krsc")
    _choose_conv_paths(path, (3, 16, 11, 9), (24, 16, 3, 3), (2, 1, 1, 1, 1, 1, 3, 3, 6, 9), bias, tail)
    _choose_conv_paths(path, (3, 16, 1, 37), (24, 16, 1, 3), (1, 2, 0, 1, 1, 1, 1, 3, 1, 19), bias, tail)
    w = cp.asarray(data(rng, (24, 16, 3, 3), dtype))
    w1 = cp.asarray(data(rng, (24, 16, 3), dtype))
    bb = cp.asarray(data(rng, (24,), dtype)) if bias else None
    x, g = cp.asarray(data(rng, (3, 11, 9, 16), dtype)), cp.asarray(data(rng, (3, 6, 9, 24), dtype))
    x1, g1 = cp.asarray(data(rng, (3, 37, 16), dtype)), cp.asarray(data(rng, (3, 19, 24), dtype))
    runs = []
    for _ in range(3):   # the first call checked, the second and third planned
        runs.append((cudakit.conv2d(x, w, bb, (2, 1), 1, memory_format="nhwc"),
                     *cudakit.conv2d_backward(g, x, w, (2, 1), 1, 1, bias, memory_format="nhwc"),
                     cudakit.conv1d(x1, w1, bb, 2, 1, memory_format="nlc"),
                     *cudakit.conv1d_backward(g1, x1, w1, 2, 1, 1, bias, memory_format="nlc")))
    planned = {op: p_ for (op, _), p_ in dispatch._plans.items()
               if op in ("conv2d_nhwc", "conv2d_backward_nhwc", "conv1d_nlc", "conv1d_backward_nlc")}
    # (the Triton backward with a bias sums dL/db by CuPy, which a trace does not record: no plan)
    want = 2 if path == "triton" and bias else 4
    assert len(planned) == 4 and sum(p_ is not None for p_ in planned.values()) >= want, planned
    assert paths.last_paths()["conv2d"] == path
    shapes = [(3, 6, 9, 24), x.shape, w.shape, (24,), (3, 19, 24), x1.shape, w1.shape, (24,)]
    for i, (a, b_) in enumerate(zip(runs[0], runs[2])):
        if a is None:
            assert b_ is None and i in (3, 7)
            continue
        assert a.shape == b_.shape == shapes[i] and a.strides == b_.strides and b_.flags.c_contiguous, i
        if i not in (0, 4) and path != "triton":   # cuDNN's dgrad and wgrad may split the sum: not bitwise
            cp.testing.assert_allclose(a.astype(cp.float32), b_.astype(cp.float32), rtol=2e-2, atol=2e-3)
        else:
            cp.testing.assert_array_equal(a, b_)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b,lq,lk,h,d", [(2, 64, 64, 4, 64), (2, 33, 70, 2, 32), (1, 100, 100, 3, 80),
                                         (2, 257, 257, 2, 128)])
def test_attention_blhd_cudnn(b, lq, lk, h, d, dtype, causal, rng, only_cudnn):
    """layout="blhd" views (of a packed qkv where Lq = Lk) read in place by cuDNN."""
    ac.check_attention_blhd(_dev, _host, rng, b, lq, lk, h, d, dtype, causal)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("b,length,h,d", [(2, 64, 4, 64), (1, 100, 3, 80), (2, 257, 2, 128)])
def test_attention_backward_qkv_packed_cudnn(b, length, h, d, dtype, rng, only_cudnn):
    """qkv_packed=True on cuDNN: dQ, dK, dV written in place as the thirds of one C-contiguous
    (B, L, 3, H, D) array, equal to the unpacked call's gradients (dK, dV bitwise; dQ, which cuDNN
    accumulates with atomics, within rounding)."""
    be = cudakit.get_backend("cuda")
    qkv = _dev(rng.standard_normal((b, length, 3, h, d)).astype(np_dtype(dtype)))
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    g = _dev(rng.standard_normal((b, length, h, d)).astype(np_dtype(dtype)))
    out, lse = be.attention_with_lse(q, k, v, causal=True, layout="blhd")
    dq, dk, dv = be.attention_backward(g, q, k, v, out, lse, causal=True, layout="blhd")
    dqkv = be.attention_backward(g, q, k, v, out, lse, causal=True, layout="blhd", qkv_packed=True)
    assert dqkv.shape == (b, length, 3, h, d) and dqkv.flags.c_contiguous
    assert cudnn.packed_base(dqkv[:, :, 0], dqkv[:, :, 1], dqkv[:, :, 2]) is dqkv
    for i, want in ((1, dk), (2, dv)):
        cp.testing.assert_array_equal(dqkv[:, :, i], want)
    cp.testing.assert_allclose(dqkv[:, :, 0].astype(cp.float32), dq.astype(cp.float32), rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ["bhld", "blhd"])
@pytest.mark.parametrize("b,h,hkv,lq,lk,d", [(2, 8, 2, 64, 64, 64), (1, 6, 1, 33, 70, 128), (2, 4, 4, 40, 40, 32)])
def test_attention_grouped_query_cudnn(b, h, hkv, lq, lk, d, dtype, causal, layout, rng, only_cudnn):
    """Grouped-query attention read in place by cuDNN (Hkv = H included: plain attention)."""
    ac.check_attention_gqa(_dev, _host, rng, b, h, hkv, lq, lk, d, dtype, causal, layout)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", [(2, 2, 64, [300, 1, 0, 517], True), (4, 2, 128, [129, 257], False),
                                  (3, 1, 40, [33, 7, 64], True), (2, 2, 256, [70, 131], True)])
def test_attention_varlen_cudnn_ragged(case, dtype, rng, only_cudnn):
    """attention_varlen on cuDNN's ragged graphs (the same sequences for q and k, no window): every
    sequence's forward, lse and gradients against float64, grouped-query heads and head dim 256
    included; cu_seqlens as host lists and as one device array."""
    h, hkv, d, lens, causal = case
    ac.check_varlen(_dev, _host, rng, h, hkv, d, lens, lens, causal, dtype, one_cu=True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_varlen_plans_replay_cudnns_ragged_graphs(dtype, causal, only_cudnn):
    """attention_varlen, attention_varlen_with_lse and attention_varlen_backward with one device
    cu_seqlens array for q and k take plans that replay cuDNN's ragged graphs: on fresh data and
    fresh sequences of the signature the forward is bitwise the checked call's and the gradients
    agree (cuDNN accumulates dQ with atomics); a cu_seqlens_k that is another array gets the checked
    path (the Triton kernels), whose result it returns."""
    from cudakit import dispatch
    be = cudakit.get_backend("cuda")
    rng = np.random.default_rng(21)
    dispatch.clear()
    h, hkv, d, mx = 4, 2, 64, 96

    def same(a, b):
        return a.shape == b.shape and a.dtype == b.dtype and bool((a.view(cp.uint8) == b.view(cp.uint8)).all())
    for lens in ([40, 96, 14], [96, 1, 53], [0, 60, 90], [50, 50, 50]):   # the same totals: one signature
        cu = cp.asarray(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
        q, g = (cp.asarray(rng.standard_normal((150, h, d)), dtype) for _ in range(2))
        k, v = (cp.asarray(rng.standard_normal((150, hkv, d)), dtype) for _ in range(2))
        want = be.attention_varlen_with_lse(q, k, v, cu, cu, mx, mx, causal=causal)
        got = cudakit.attention_varlen_with_lse(q, k, v, cu, cu, mx, mx, causal=causal)
        assert same(want[0], got[0]) and same(want[1], got[1]), lens
        assert same(want[0], cudakit.attention_varlen(q, k, v, cu, cu, mx, mx, causal=causal)), lens
        grads_want = be.attention_varlen_backward(g, q, k, v, *want, cu, cu, mx, mx, causal=causal)
        grads = cudakit.attention_varlen_backward(g, q, k, v, *want, cu, cu, mx, mx, causal=causal)
        for x, y in zip(grads_want, grads):
            assert x.shape == y.shape and x.dtype == y.dtype
            cp.testing.assert_allclose(x.astype(cp.float32), y.astype(cp.float32), rtol=2e-2, atol=2e-2)
        cu_k = cu.copy()   # the same sequences in another array: the Triton kernels (checked, then traced)
        assert same(be.attention_varlen(q, k, v, cu, cu_k, mx, mx, causal=causal),
                    cudakit.attention_varlen(q, k, v, cu, cu_k, mx, mx, causal=causal)), lens
    planned = {key[0] for key, p in dispatch._plans.items() if p is not None}
    dispatch.clear()   # (these plans replay cuDNN, which only_cudnn forced: later tests choose for themselves)
    assert {"attention_varlen_shared", "attention_varlen_with_lse_shared", "attention_varlen_backward_shared"} <= planned, \
        planned


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_attention_varlen_cudnn_holds_its_offsets_until_the_launch(dtype, rng, only_cudnn, monkeypatch):
    """The ragged graphs read lengths and offsets the call makes on the device: they stay allocated
    until the launch is queued. Here every graph launch first takes small blocks from the pool and
    fills them with 0xFF, as cuDNN's workspace (cleared, then accumulated into) may take them: a
    freed offsets array would come back among them and the results would be wrong."""
    from cudakit import dispatch
    real, real_executor = cudnn._Graph.run, cudnn.executor

    def grab():
        return [cp.full(64, -1, cp.int64) for _ in range(16)]   # (512-byte blocks, the offsets' size)

    def run(self, ptrs):   # the checked calls' launches
        taken = grab()
        real(self, ptrs)
        del taken

    def executor(sig):   # the dispatch plans' launches (kernels/path_plans.py)
        launch = real_executor(sig)
        if launch is None:
            return None

        def replay(*ptrs):
            taken = grab()
            launch(*ptrs)
            del taken
        return replay
    monkeypatch.setattr(cudnn._Graph, "run", run)
    monkeypatch.setattr(cudnn, "executor", executor)
    dispatch.clear()
    for _ in range(3):   # each signature's checked call, then its plan's replays
        ac.check_varlen(_dev, _host, rng, 3, 1, 40, [33, 7, 64], [33, 7, 64], True, dtype, one_cu=True)
        ac.check_varlen(_dev, _host, rng, 2, 2, 64, [300, 1, 0, 517], [300, 1, 0, 517], True, dtype, one_cu=True)
    planned = {key[0] for key, p in dispatch._plans.items() if p is not None}
    dispatch.clear()   # (plans of cuDNN, which only_cudnn forced)
    assert {"attention_varlen_with_lse_shared", "attention_varlen_backward_shared"} <= planned, planned


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("q_shape,hkv,causal", [((2, 4, 257, 64), None, False), ((1, 8, 128, 128), None, True),
                                                ((2, 8, 100, 64), 2, True)])
def test_attention_without_lse_runs_the_inference_graph(q_shape, hkv, causal, dtype, rng, only_cudnn):
    """attention() (no lse wanted) on cuDNN's inference graph, which writes no statistics, as torch's
    SDPA does for inputs that need no gradient: against float64, the first (checked) call and the
    planned calls after it alike; grouped-query heads read in place."""
    import math
    import numpy as np
    b, h, lq, d = q_shape
    kv_shape = q_shape if hkv is None else (b, hkv, lq, d)
    q, k, v = (data(rng, s, dtype) for s in (q_shape, kv_shape, kv_shape))
    grp = 1 if hkv is None else h // hkv
    kr, vr = (np.repeat(x.astype(np.float64), grp, axis=1) for x in (k, v))
    want = ac.reference(q.astype(np.float64), kr, vr, 1 / math.sqrt(d), causal)[0]
    outs = [cp.asnumpy(cudakit.attention(_dev(q), _dev(k), _dev(v), causal=causal)).astype(np.float64)
            for _ in range(3)]
    for o in outs:
        np.testing.assert_allclose(o, want, rtol=2e-2, atol=2e-2)
    assert any(isinstance(key, tuple) and key[0] == "sdpa_fwd_inf" for key in cudnn._graphs), list(cudnn._graphs)


# -- dropout by cuDNN (CUDAKIT_ATTENTION_DROPOUT=cudnn): its own Philox stream ---------------------

@pytest.fixture
def cudnn_dropout(cudnn_dropout_stream):
    """CUDAKIT_ATTENTION_DROPOUT=cudnn for the test (its plans and choices cleared before and after),
    where cuDNN is usable."""
    if not cudnn.available():
        pytest.skip(f"cuDNN not usable: {cudnn.why_unavailable()}")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("lead,lq,lk,d,causal,p,seed", [((2, 3), 128, 128, 64, False, 0.1, 7),
                                                        ((1, 2), 200, 200, 128, True, 0.3, 2**63 + 5),
                                                        ((3,), 64, 96, 40, False, 0.5, 11)])
def test_attention_dropout_by_cudnn_matches_float64_with_its_mask(dtype, lead, lq, lk, d, causal, p, seed, rng,
                                                                  cudnn_dropout):
    """attention_with_lse and attention_backward with dropout under CUDAKIT_ATTENTION_DROPOUT=cudnn
    run cuDNN's fused dropout: against float64 with the keep mask cuDNN dumps for the same (p,
    seed) (its rng_dump), the forward's outputs and the backward's gradients (the mask regenerated);
    the mask drops about p of the probabilities, a seed gives the same mask every call, another
    seed another one."""
    q, g = (cp.asarray(data(rng, lead + (lq, d), dtype)) for _ in range(2))
    k, v = (cp.asarray(data(rng, lead + (lk, d), dtype)) for _ in range(2))
    kw = dict(causal=causal, dropout_p=p, seed=seed)
    before = cudnn.stats["executions"]
    out, lse = cudakit.attention_with_lse(q, k, v, **kw)
    grads = cudakit.attention_backward(g, q, k, v, out, lse, **kw)
    assert cudnn.stats["executions"] >= before + 2, "the dropout calls did not run on cuDNN"
    bh = int(np.prod(lead))
    keep = cp.full((bh, 1, lq, lk), 0.5, cp.float32)
    r3 = [x.reshape(bh, x.shape[-2], d) for x in (q, k, v)]
    assert cudnn.sdpa_forward(*r3, d ** -0.5, causal, dropout=(p, seed), rng_dump=keep) is not None
    keep = cp.asnumpy(keep).reshape(bh, lq, lk)
    seen = np.broadcast_to(np.tril(np.ones((lq, lk), bool)) if causal else np.ones((lq, lk), bool), keep.shape)
    assert set(np.unique(keep[seen])) <= {0.0, 1.0}, np.unique(keep[seen])[:8]
    assert abs((keep[seen] == 0).mean() - p) < 0.05, (keep[seen] == 0).mean()
    keep = np.where(seen, keep, 0.0)   # (what cuDNN leaves above a causal diagonal meets p = 0 there)
    h = [_host(x).astype(np.float64).reshape(bh, x.shape[-2], d) for x in (q, k, v, g)]
    want = ac.dropout_reference(*h, keep, p, d ** -0.5, causal)[:5]
    got = (out, lse, *grads)
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    for name, x, w in zip(("out", "lse", "dq", "dk", "dv"), got, want):
        x = _host(x).astype(np.float64).reshape(w.shape)
        np.testing.assert_allclose(x, w, atol=tol * max(1.0, np.abs(w).max()), rtol=tol, err_msg=name)
    again = cudakit.attention_with_lse(q, k, v, **kw)[0]
    np.testing.assert_array_equal(_host(again), _host(out))
    other = cudakit.attention_with_lse(q, k, v, **dict(kw, seed=seed + 1))[0]
    assert not np.array_equal(_host(other), _host(out))


def test_attention_dropout_by_cudnn_leaves_what_cudnn_cannot_take_to_cudakits_stream(rng, cudnn_dropout,
                                                                                     monkeypatch):
    """Under CUDAKIT_ATTENTION_DROPOUT=cudnn, grouped-query k, v, key lengths and float32 keep
    cudakit.dropout's stream in the forward and the backward alike: bitwise what the default
    setting computes."""
    from cudakit import config
    b, h, hkv, L, d = 2, 4, 2, 96, 64
    q, g = (cp.asarray(data(rng, (b, h, L, d), "bfloat16")) for _ in range(2))
    k, v = (cp.asarray(data(rng, (b, hkv, L, d), "bfloat16")) for _ in range(2))
    q32, k32, v32, g32 = (cp.asarray(data(rng, (b, h, L, d), "float32")) for _ in range(4))
    calls = [(q, k, v, g, {}), (q, cp.repeat(k, 2, axis=1), cp.repeat(v, 2, axis=1), g, {"key_lengths": [50, 96]}),
             (q32, k32, v32, g32, {})]
    kw = dict(causal=True, dropout_p=0.2, seed=3)
    got = []
    for qq, kk, vv, gg, extra in calls:
        out, lse = cudakit.attention_with_lse(qq, kk, vv, **kw, **extra)
        got.append((out, lse, *cudakit.attention_backward(gg, qq, kk, vv, out, lse, **kw, **extra)))
    monkeypatch.setenv("CUDAKIT_ATTENTION_DROPOUT", "cudakit")
    config.reload()
    for (qq, kk, vv, gg, extra), have in zip(calls, got):
        out, lse = cudakit.attention_with_lse(qq, kk, vv, **kw, **extra)
        want = (out, lse, *cudakit.attention_backward(gg, qq, kk, vv, out, lse, **kw, **extra))
        for x, y in zip(have, want):
            np.testing.assert_array_equal(_host(x), _host(y))


def test_attention_dropout_takes_cudnn_by_default(rng, monkeypatch):
    """With CUDAKIT_ATTENTION_DROPOUT unset, 16-bit attention with dropout that cuDNN takes runs
    cuDNN's fused dropout, forward and backward (deterministic=True too: the signature was taken
    only because its deterministic graph builds), the same results as under "cudnn"; float32 and
    grouped k, v stay on cudakit's stream (bitwise what "cudakit" computes)."""
    if not cudnn.available():
        pytest.skip(f"cuDNN not usable: {cudnn.why_unavailable()}")
    from cudakit import config
    monkeypatch.delenv("CUDAKIT_ATTENTION_DROPOUT", raising=False)
    assert config.reload().attention_dropout == "cudnn"
    q, k, v, g = (cp.asarray(data(rng, (2, 3, 192, 64), "bfloat16")) for _ in range(4))
    kw = dict(causal=True, dropout_p=0.15, seed=2**40 + 9)
    before = cudnn.stats["executions"]
    out, lse = cudakit.attention_with_lse(q, k, v, **kw)
    det = [cudakit.attention_backward(g, q, k, v, out, lse, deterministic=True, **kw) for _ in range(2)]
    assert cudnn.stats["executions"] >= before + 3, "the dropout calls did not run on cuDNN"
    for a, b in zip(*det):
        np.testing.assert_array_equal(_host(a), _host(b))
    keep = cp.full((6, 1, 192, 192), 0.5, cp.float32)
    r3 = [x.reshape(6, 192, 64) for x in (q, k, v)]
    assert cudnn.sdpa_forward(*r3, 64 ** -0.5, True, dropout=(0.15, kw["seed"]), rng_dump=keep) is not None
    h = [_host(x).astype(np.float64).reshape(6, 192, 64) for x in (q, k, v, g)]
    keep = np.where(np.tril(np.ones((192, 192), bool)), cp.asnumpy(keep).reshape(6, 192, 192), 0.0)
    want = ac.dropout_reference(*h, keep, 0.15, 64 ** -0.5, True)[:5]
    for name, x, w in zip(("out", "lse", "dq", "dk", "dv"), (out, lse, *det[0]), want):
        x = _host(x).astype(np.float64).reshape(w.shape)
        np.testing.assert_allclose(x, w, atol=2e-2 * max(1.0, np.abs(w).max()), rtol=2e-2, err_msg=name)
    q32, k32, v32 = (cp.asarray(data(rng, (2, 3, 96, 64), "float32")) for _ in range(3))
    kg, vg = k[:, :1].copy(), v[:, :1].copy()
    calls = [(q32, k32, v32), (q, kg, vg)]
    got = [cudakit.attention_with_lse(*a, **kw) for a in calls]
    monkeypatch.setenv("CUDAKIT_ATTENTION_DROPOUT", "cudakit")
    config.reload()
    try:
        for a, have in zip(calls, got):
            for x, y in zip(have, cudakit.attention_with_lse(*a, **kw)):
                np.testing.assert_array_equal(_host(x), _host(y))
    finally:
        monkeypatch.delenv("CUDAKIT_ATTENTION_DROPOUT")
        config.reload()


def test_attention_dropout_by_cudnn_agrees_across_layouts_and_views(rng, cudnn_dropout):
    """cuDNN's dropout mask is a function of the call's signature and seed, whatever form the
    arrays come in: (B, L, H, D) views of one packed qkv (layout="blhd"), non-contiguous (B, H, L,
    D) views and C-contiguous arrays give the same forward and deterministic backward (to bfloat16
    rounding: another mask would move them by tenths), on the checked call and on the planned ones
    after it; each form's forward and backward agree on the mask (the gradients match each other,
    so no form's backward regenerated another mask)."""
    b, h, L, d = 2, 3, 160, 64
    qkv = cp.asarray(data(rng, (b, L, 3, h, d), "bfloat16"))
    g = cp.asarray(data(rng, (b, h, L, d), "bfloat16"))
    kw = dict(causal=True, dropout_p=0.2, seed=2**63 + 17)
    bl = [qkv[:, :, i] for i in range(3)]                       # (B, L, H, D) strided views
    views = [x.transpose(0, 2, 1, 3) for x in bl]                # (B, H, L, D) non-contiguous views
    dense = [cp.ascontiguousarray(x) for x in views]
    t = lambda x: x.transpose(0, 2, 1, 3)   # noqa: E731
    for _ in range(3):   # the first call checked, the second plans, the third replays
        want_o, want_l = cudakit.attention_with_lse(*dense, **kw)
        want_g = cudakit.attention_backward(g, *dense, want_o, want_l, deterministic=True, **kw)
        for arrays, layout in ((views, "bhld"), (bl, "blhd")):
            gg = cp.ascontiguousarray(t(g)) if layout == "blhd" else g
            o, lse = cudakit.attention_with_lse(*arrays, layout=layout, **kw)
            grads = cudakit.attention_backward(gg, *arrays, o, lse, layout=layout, deterministic=True, **kw)
            if layout == "blhd":
                o, grads = t(o), [t(x) for x in grads]
            f32 = lambda x: _host(x).astype(np.float32)   # noqa: E731
            np.testing.assert_allclose(f32(o), f32(want_o), rtol=2e-2, atol=2e-2, err_msg=layout)
            np.testing.assert_allclose(f32(lse), f32(want_l), rtol=1e-3, atol=1e-3, err_msg=layout)
            for name, x, w in zip(("dq", "dk", "dv"), grads, want_g):
                np.testing.assert_allclose(f32(x), f32(w), rtol=2e-2, atol=2e-2, err_msg=f"{layout} {name}")


@pytest.mark.parametrize("failure", ["declined", "out_of_memory"])
def test_attention_dropout_keeps_cudakits_stream_where_a_cudnn_graph_fails(failure, rng, monkeypatch):
    """The default setting with CUDAKIT_CUDNN=1: where cuDNN declines the signature's deterministic
    backward graph (raising under =1) or memory runs out while the graphs are built, the forward and
    the backward both keep cudakit's stream, bitwise what CUDAKIT_ATTENTION_DROPOUT=cudakit
    computes, and the answer is kept for the process (the graphs are not asked again)."""
    if not cudnn.available():
        pytest.skip(f"cuDNN not usable: {cudnn.why_unavailable()}")
    from cudakit import config
    from cudakit.errors import BackendUnavailableError
    from cudakit.kernels import attention as at
    q, k, v, g = (cp.asarray(data(rng, (2, 2, 160, 64), "bfloat16")) for _ in range(4))
    kw = dict(causal=True, dropout_p=0.125, seed=77)
    results = {}
    for stream in ("cudakit", "cudnn"):
        monkeypatch.setenv("CUDAKIT_ATTENTION_DROPOUT", stream)
        monkeypatch.setenv("CUDAKIT_CUDNN", "1")
        config.reload()
        at._cudnn_dropout_ok.clear()
        asked = []
        real = cudnn.sdpa_backward

        def failing(*a, deterministic=False, **kws):
            asked.append(deterministic)
            if deterministic and failure == "declined":
                raise BackendUnavailableError("CUDAKIT_CUDNN=1 but cuDNN declined sdpa_bwd_dropout_deterministic")
            if deterministic:
                raise cp.cuda.memory.OutOfMemoryError(1 << 40, 0)
            return real(*a, deterministic=deterministic, **kws)
        monkeypatch.setattr(cudnn, "sdpa_backward", failing)
        try:
            out, lse = cudakit.attention_with_lse(q, k, v, **kw)
            results[stream] = (out, lse, *cudakit.attention_backward(g, q, k, v, out, lse, **kw))
            n = len(asked)
            cudakit.attention_with_lse(q, k, v, **kw)
            assert len(asked) == n, "the failed signature was asked again"
        finally:
            monkeypatch.setattr(cudnn, "sdpa_backward", real)
            monkeypatch.delenv("CUDAKIT_CUDNN")
            monkeypatch.delenv("CUDAKIT_ATTENTION_DROPOUT")
            config.reload()
            at._cudnn_dropout_ok.clear()
    for x, y in zip(results["cudnn"], results["cudakit"]):
        np.testing.assert_array_equal(_host(x), _host(y))


def test_attention_dropout_by_cudnn_deterministic_backward_is_bitwise_repeatable(rng, cudnn_dropout):
    """deterministic=True with cuDNN's dropout: cuDNN's deterministic algorithm, bitwise the same
    gradients run after run, close to the default algorithm's."""
    q, k, v, g = (cp.asarray(data(rng, (2, 4, 256, 64), "bfloat16")) for _ in range(4))
    kw = dict(causal=True, dropout_p=0.1, seed=21)
    out, lse = cudakit.attention_with_lse(q, k, v, **kw)
    runs = [[_host(x).astype(np.float32) for x in cudakit.attention_backward(g, q, k, v, out, lse, deterministic=True,
                                                                              **kw)] for _ in range(3)]
    for run in runs[1:]:
        for a, b in zip(run, runs[0]):
            np.testing.assert_array_equal(a, b)
    fast = cudakit.attention_backward(g, q, k, v, out, lse, **kw)
    for a, b in zip(runs[0], fast):
        np.testing.assert_allclose(a, _host(b).astype(np.float32), rtol=3e-2, atol=3e-2)


def test_attention_dropout_by_cudnn_takes_plans_with_a_seed_per_call(rng, cudnn_dropout):
    """Under CUDAKIT_ATTENTION_DROPOUT=cudnn, attention, attention_with_lse and attention_backward
    with dropout take plans executing cuDNN's dropout graphs with each call's seed
    (kernels/path_plans.py): on fresh data and seeds (at and above 2^63 too), bitwise what the checked
    call computes (the backward deterministic: cuDNN's default one may sum in any order)."""
    from cudakit import dispatch
    be = cudakit.get_backend("cuda")
    bits = lambda x: _host(x).view(np.uint8)   # noqa: E731
    for seed in (7, 2**63 + 5, 12345, 2**64 - 1):   # the first call is checked, the second plans, the rest replay
        q, k, v, g = (cp.asarray(data(rng, (2, 3, 128, 64), "bfloat16")) for _ in range(4))
        kw = dict(causal=True, dropout_p=0.2, seed=seed)
        want = be.attention_with_lse(q, k, v, **kw)
        got = cudakit.attention_with_lse(q, k, v, **kw)
        for x, y in zip(want, got):
            np.testing.assert_array_equal(bits(x), bits(y))
        np.testing.assert_array_equal(bits(be.attention(q, k, v, **kw)), bits(cudakit.attention(q, k, v, **kw)))
        gw = be.attention_backward(g, q, k, v, *want, deterministic=True, **kw)
        gg = cudakit.attention_backward(g, q, k, v, *want, deterministic=True, **kw)
        for x, y in zip(gw, gg):
            np.testing.assert_array_equal(bits(x), bits(y))
    kinds = {key[0]: type(p).__name__ for key, p in dispatch._plans.items() if p is not None}
    for op in ("attention_dropout", "attention_with_lse_dropout", "attention_backward_dropout"):
        assert kinds.get(op) == "function", kinds


def test_attention_dropout_by_cudnn_reads_each_calls_seed_by_value(rng, cudnn_dropout):
    """cuDNN's dropout graphs take the seed by value (kernels/cudnn.py dropout_operands: host words
    read when the graph is executed): a backward regenerates its forward's mask whatever ran in
    between (another seed's forward) and on another stream, bit for bit, planned or not; a CUDA
    graph replays the seed it captured, eager calls with other seeds around it."""
    q, k, v, g = (cp.asarray(data(rng, (2, 2, 128, 64), "bfloat16")) for _ in range(4))
    kw = dict(causal=True, dropout_p=0.2)
    o, lse = cudakit.attention_with_lse(q, k, v, seed=91, **kw)
    first = [_host(x) for x in cudakit.attention_backward(g, q, k, v, o, lse, seed=91, deterministic=True, **kw)]
    for _ in range(3):   # the checked calls, then the planned ones
        o2, lse2 = cudakit.attention_with_lse(q, k, v, seed=91, **kw)
        np.testing.assert_array_equal(_host(o2), _host(o))
        cudakit.attention_with_lse(q, k, v, seed=92, **kw)
        again = cudakit.attention_backward(g, q, k, v, o, lse, seed=91, deterministic=True, **kw)
        side = cp.cuda.Stream(non_blocking=True)
        with side:
            other = cudakit.attention_backward(g, q, k, v, o, lse, seed=91, deterministic=True, **kw)
        side.synchronize()
        for a, b, c in zip(first, again, other):
            np.testing.assert_array_equal(a, _host(b))
            np.testing.assert_array_equal(a, _host(c))
    assert not (_host(cudakit.attention_with_lse(q, k, v, seed=92, **kw)[0]) == _host(o)).all()
    step = cudakit.graph(lambda a, b, c: cudakit.attention_with_lse(a, b, c, seed=91, **kw), q, k, v, warmup=1)
    for seed in (93, 94):
        cudakit.attention_with_lse(q, k, v, seed=seed, **kw)
        got = step(q, k, v)
        np.testing.assert_array_equal(_host(got[0]), _host(o))
        np.testing.assert_array_equal(_host(got[1]), _host(lse))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("form", ["view", "nchw", "nhwc"])
@pytest.mark.parametrize("path", ["cudnn", "cudnn-unfused"])
def test_conv2d_relu_on_cudnn(path, form, dtype, rng, monkeypatch):
    """conv2d(..., activation="relu") on cuDNN: its graph with a ReLU node ("cudnn"; skipped, with
    cuDNN's reason, where it has no engine for the fused graph) or its plain convolution and a relu
    pass ("cudnn-unfused"), against float64, the backward with y; the dispatch plans of the forward
    replay the checked call bit for bit."""
    from cudakit import dispatch
    if not cudnn.available():
        pytest.skip(f"cuDNN not usable: {cudnn.why_unavailable()}")
    real = paths.run
    took = []

    def run(op, key, candidates, timer=None):
        if op == "conv2d" and key[-1] == "relu":
            out = dict(candidates)[path]()
            if out is None:
                pytest.skip(f"cuDNN declined the fused graph: {cudnn.declined()}")
            paths._choice[(op, key)] = path
            paths.ran(op, path)   # (as paths.run records the path it took)
            took.append((op, key))
            return out
        return real(op, key, candidates, timer)
    monkeypatch.setattr(paths, "run", run)
    dispatch.clear()
    try:
        cc.check_conv_relu(_dev, _host, rng, 2, 16, 9, 10, 24, 3, 3, (1, 1), (1, 1), (1, 1), dtype, form=form)
        if form != "nhwc":   # a NaN stays NaN through the relu, on cuDNN's fused node too
            cc.check_conv_relu_nan(_dev, _host, rng, dtype, 1, form)
        x = cc.data(rng, (2, 16, 9, 10), dtype)
        x = _dev(x) if form == "nchw" else _dev(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
        if form == "view":
            x = x.transpose(0, 3, 1, 2)
        w, b = _dev(cc.data(rng, (24, 16, 3, 3), dtype)), _dev(cc.data(rng, (24,), dtype))
        kw = {"memory_format": "nhwc"} if form == "nhwc" else {}
        runs = [cudakit.conv2d(x, w, b, 1, 1, activation="relu", **kw) for _ in range(3)]
        assert took and paths.last_paths()["conv2d"] == path
        if form != "nhwc":   # (memory_format="nhwc" with an activation: the checked call, no plan)
            assert [p_ for (op, _), p_ in dispatch._plans.items() if op == "conv2d_act"] != [None]
        cp.testing.assert_array_equal(runs[0], runs[2])
    finally:
        for k in took:
            paths._choice.pop(k, None)
