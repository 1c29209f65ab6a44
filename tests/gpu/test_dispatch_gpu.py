"""cudakit.dispatch with the matrix-product planners: a planned call equals the checked call bit
for bit, layouts the planners do not cover keep the checked path, bad input still gets its error."""
import numpy as np
import pytest

import cudakit
from cudakit import dispatch

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")


def _r(rng, shape, dtype):
    return cp.asarray(rng.standard_normal(shape).astype(np.float32)).astype(dtype)


def _same(a, b):
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and a.dtype == b.dtype and bool(
        (a.reshape(-1).view(cp.uint8) == b.reshape(-1).view(cp.uint8)).all())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
@pytest.mark.parametrize("rows, fin, fout", [(64, 96, 128), (3, 17, 40), (2 * 7, 33, 8)])
def test_planned_linear_family_equals_checked(dtype, rows, fin, fout):
    rng = np.random.default_rng(rows + fin)
    be = cudakit.get_backend("cuda")
    x, w, b = _r(rng, (2, rows // 2 or 1, fin), dtype), _r(rng, (fout, fin), dtype), _r(rng, (fout,), dtype)
    g = _r(rng, x.shape[:-1] + (fout,), dtype)
    calls = [
        ("linear", (x, w, b)), ("linear", (x, w, None)), ("linear", (x, w.T.copy().T, b)),
        ("linear_backward", (g, x, w, True)), ("linear_backward", (g, x, w, False)),
        ("fused_linear_gelu", (x, w, b, "tanh")), ("fused_linear_gelu_with_preact", (x, w, b, "tanh")),
        ("matmul", (x, w.T.copy())), ("matmul", (x, _r(rng, (2, fin, fout), dtype)[:x.shape[0]])),
        ("matrix_multiply", (x, w.T.copy())), ("matmul_backward", (g, x, w.T.copy())),
        ("matmul_backward", (g, x, _r(rng, (2, fin, fout), dtype)[:x.shape[0]]))]
    for op, args in calls:
        want = getattr(be, "matmul" if op == "matrix_multiply" else op)(*args)
        for _ in range(3):   # first call checked (plan made), then planned
            got = getattr(cudakit, op)(*args)
            want_t = want if isinstance(want, tuple) else (want,)
            got_t = got if isinstance(got, tuple) else (got,)
            assert all(_same(a, b) for a, b in zip(want_t, got_t)), (op, dtype)
    planned = {k[0] for k, p in dispatch._plans.items() if p is not None}
    assert "matmul_backward" in planned, planned   # (traced: its cuBLASLt calls replayed)


def test_gemm_plans_replay_natively():
    """matmul, linear and linear_backward plans are native Replays (runtime/_native.c): one C call
    allocates, calls cuBLASLt and builds the outputs."""
    dispatch.clear()
    x, w = cp.ones((32, 64), "bfloat16"), cp.ones((128, 64), "bfloat16")
    g = cp.ones((32, 128), "bfloat16")
    for _ in range(3):
        cudakit.matmul(x, w.T)
        cudakit.linear(x, w)
        gx, gw, gb = cudakit.linear_backward(g, x, w)
    kinds = {k[0]: type(p).__name__ for k, p in dispatch._plans.items() if p is not None}
    assert kinds.get("matmul") == "Replay" and kinds.get("linear") == "Replay", kinds
    assert "linear_backward" in kinds, kinds
    np.testing.assert_array_equal(gw.get().astype(np.float32), np.full((128, 64), 32, np.float32))
    np.testing.assert_array_equal(gb.get().astype(np.float32), np.full((128,), 32, np.float32))


def test_plans_are_made_and_reused():
    dispatch.clear()
    x, w = cp.ones((32, 64), "bfloat16"), cp.ones((128, 64), "bfloat16")
    for _ in range(3):
        cudakit.linear(x, w)
    keys = [k for k, p in dispatch._plans.items() if k[0] == "linear" and p is not None]
    assert len(keys) == 1
    xt = cp.ones((64, 32), "bfloat16").T          # not C-contiguous: the checked path's copy
    for _ in range(2):
        y = cudakit.linear(xt, w)
    assert [p for k, p in dispatch._plans.items() if k[0] == "linear" and k[1][1][0][1] == xt.strides] == [None]
    np.testing.assert_array_equal(y.get().astype(np.float32), np.full((32, 128), 64, np.float32))


def test_errors_unchanged_after_plans():
    x, w = cp.ones((8, 16), cp.float32), cp.ones((4, 16), cp.float32)
    cudakit.linear(x, w)
    cudakit.linear(x, w)
    with pytest.raises(cudakit.ShapeError, match="in_features"):
        cudakit.linear(cp.ones((8, 15), cp.float32), w)
    with pytest.raises(cudakit.DTypeError):
        cudakit.linear(x, w.astype(cp.float64))


def test_profiler_sees_planned_calls():
    x, w = cp.ones((8, 16), cp.float32), cp.ones((8, 16), cp.float32)
    for _ in range(2):
        cudakit.linear(x, w)
    with cudakit.profile() as prof:
        cudakit.linear(x, w)
    assert any("cublaslt" in r.name for r in prof.records), [r.name for r in prof.records]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_traced_plans_equal_checked(dtype, monkeypatch):
    """layernorm/rmsnorm/batch_norm (channels-last too), cross-entropy, permute, transpose and pooling: the
    traced plan (kernels/trace_plans.py) replays bitwise what the checked call computes, on fresh
    data of the same signature."""
    from cudakit.kernels import pooling
    monkeypatch.setattr(pooling, "VIA_CHANNELS_LAST_MIN_ELEMENTS", 0)   # (the NCHW pooling call below)
    be = cudakit.get_backend("cuda")
    rng = np.random.default_rng(5)
    for trial in range(3):   # the first call is checked, the second builds the plan, the third replays
        x = _r(rng, (37, 200), dtype)
        g = _r(rng, (37, 200), dtype)
        w = _r(rng, (200,), dtype)
        mean, rstd = be.layernorm_with_stats(x, w, None)[1:]
        rr = be.rmsnorm_with_stats(x, w)[1]
        t = cp.asarray(rng.integers(0, 200, 37))
        img = _r(rng, (3, 5, 9, 11), dtype)
        gimg = _r(rng, (3, 5, 4, 5), dtype)
        bn_g = _r(rng, (3, 5, 9, 11), dtype)
        _, sm, si = be.batch_norm_with_stats(img, training=True)
        q = _r(rng, (2, 7, 3, 16), dtype)
        calls = [("layernorm_backward", (g, x, w, mean, rstd)), ("rmsnorm_backward", (g, x, w, rr)),
                 ("cross_entropy_with_grad", (x, t)), ("cross_entropy", (x, t, "none")),
                 ("cross_entropy_backward", (1.0, x, t)),
                 ("permute", (q, (0, 2, 1, 3))), ("permute_backward", (q, (0, 2, 1, 3))), ("transpose", (x,)),
                 ("max_pool2d", (img, 2)), ("max_pool2d_backward", (gimg, img, 2)),
                 ("avg_pool2d", (img, 2)), ("avg_pool2d_backward", (gimg, img, 2)),
                 ("batch_norm_backward", (bn_g, img, None, sm, si))]
        # channels-last pooling: (N, C, H, W) views of (N, H, W, C) memory in and out, and
        # (N, H, W, C) arrays with memory_format="nhwc"; overlapping 3x3 windows of stride 2
        img_t, gimg_t = cp.ascontiguousarray(img.transpose(0, 2, 3, 1)), _r(rng, (3, 5, 6, 5), dtype)
        nhwc = {"memory_format": "nhwc"}
        calls += [("max_pool2d", (img_t.transpose(0, 3, 1, 2), 3, 2, 1)),
                  ("max_pool2d_backward", (gimg_t.transpose(0, 3, 1, 2), img_t.transpose(0, 3, 1, 2), 3, 2, 1)),
                  ("avg_pool2d", (img_t, 3, 2, 1), nhwc), ("avg_pool2d_backward", (gimg_t, img_t, 3, 2, 1), nhwc),
                  ("max_pool2d_backward", (gimg_t, img_t, 3, 2, 1), nhwc),
                  # NCHW 16-bit data of 16 channels: through the channels-last kernels, permutes around them
                  ("max_pool2d_backward", (_r(rng, (2, 16, 5, 6), dtype), _r(rng, (2, 16, 9, 11), dtype), 3, 2, 1))]
        # channels-last batch norm (past the one-launch size: the channel-vector kernels), result in place
        bn_cl, bn_gcl = (cp.ascontiguousarray(_r(rng, (4, 33, 35, 16), dtype)).transpose(0, 3, 1, 2) for _ in range(2))
        _, sm_cl, si_cl = be.batch_norm_with_stats(bn_cl, training=True)
        calls += [("batch_norm_with_stats", (bn_cl, None, None, None, None, True)),
                  ("batch_norm_backward", (bn_gcl, bn_cl, None, sm_cl, si_cl))]
        for op, args, *kw in calls:
            kw = kw[0] if kw else {}
            want = getattr(be, op)(*args, **kw)
            got = getattr(cudakit, op)(*args, **kw)
            want_t = want if isinstance(want, tuple) else (want,)
            got_t = got if isinstance(got, tuple) else (got,)
            assert len(want_t) == len(got_t) and all(_same(a, b) for a, b in zip(want_t, got_t)), (op, dtype, trial)
            if "pool" in op or "batch_norm" in op:   # the layout too: a channels-last result stays so when replayed
                assert want_t[0].strides == got_t[0].strides, (op, want_t[0].strides, got_t[0].strides)
    traced = {k[0] for k, p in dispatch._plans.items() if p is not None}
    # permute/transpose pass a parameter struct: traced as its bytes, replayed natively
    assert {"layernorm_backward", "rmsnorm_backward", "cross_entropy_with_grad", "max_pool2d", "permute",
            "avg_pool2d_nhwc", "max_pool2d_backward_nhwc"} <= traced, traced
    native = {k[0] for k, p in dispatch._plans.items() if type(p).__name__ == "Replay"}
    assert {"layernorm_backward", "cross_entropy_with_grad", "permute", "batch_norm_backward"} <= native, native


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("bias_shape,deterministic", [((2, 3, 40, 56), False), ((1, 3, 1, 56), False),
                                                      ((2, 1, 40, 1), True), ((1, 3, 40, 56), True),
                                                      ((1, 3, 40, 56), False), ((1, 1, 40, 56), False)])
def test_attention_with_a_bias_takes_traced_plans(dtype, bias_shape, deterministic, monkeypatch):
    """attention, attention_with_lse and attention_backward with an attn_bias (read in place by the
    Triton kernels) take plans traced from the checked call, which replay bitwise what the checked
    call computes on fresh data of the signature. The backward's bias gradient buffers are zeroed
    by a launch (a memset is not traced), a bias broadcast over its rows or keys has its gradient
    summed from per-tile partials by cudakit's reduction (not atomics, whose order a bitwise check
    of the trace cannot rely on; not CuPy's sum, which a trace does not record), and the full
    per-score buffer of the deterministic backward, or of a bias broadcast over batch or heads alone
    (ALiBi's (1, H, L, L), within the partials' bound), is summed by cudakit's reduction too.
    (The Triton kernels' plans: cuDNN's graphs, which may take a bias over every row and key, have
    their own, test_cudnn_gpu.py.)"""
    from cudakit.kernels import attention
    monkeypatch.setattr(attention, "cudnn_bias", lambda *a, **kw: False)
    be = cudakit.get_backend("cuda")
    rng = np.random.default_rng(9)
    dispatch.clear()
    for trial in range(3):   # the first call is checked, the second builds the plan, the third replays
        q, g = _r(rng, (2, 3, 40, 32), dtype), _r(rng, (2, 3, 40, 32), dtype)
        k, v = _r(rng, (2, 3, 56, 32), dtype), _r(rng, (2, 3, 56, 32), dtype)
        b = _r(rng, bias_shape, dtype)
        want = be.attention_with_lse(q, k, v, causal=True, attn_bias=b)
        got = cudakit.attention_with_lse(q, k, v, causal=True, attn_bias=b)
        assert all(_same(x, y) for x, y in zip(want, got)), (dtype, trial)
        assert _same(be.attention(q, k, v, attn_bias=b), cudakit.attention(q, k, v, attn_bias=b)), (dtype, trial)
        kw = dict(causal=True, attn_bias=b, deterministic=deterministic)
        grads_want = be.attention_backward(g, q, k, v, *want, **kw)
        grads = cudakit.attention_backward(g, q, k, v, *want, **kw)
        assert len(grads) == 4 and grads[3].shape == b.shape
        for x, y in zip(grads_want, grads):   # (no atomics: the bias's gradient too)
            assert _same(x, y), (dtype, trial)
    traced = {k[0] for k, p in dispatch._plans.items() if p is not None}
    assert {"attention_bias", "attention_with_lse_bias", "attention_backward_bias"} <= traced, traced


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_with_dropout_takes_traced_plans_with_a_seed_per_call(dtype, causal, cudakit_dropout_stream):
    """attention, attention_with_lse and attention_backward with dropout, and flash_attention, take
    plans traced from the checked call whose native replays write each call's seed into the kernels' seed words: on fresh
    data and seeds (words at and above 2^31, multiples of 16 and not) every planned call is bitwise
    the checked call, and different seeds give different results."""
    be = cudakit.get_backend("cuda")
    rng = np.random.default_rng(13)
    dispatch.clear()
    seeds = (7, 2**31 + 5, 2**63 + 3 * 2**32 + 16, 0x0123456789ABCDEF, 48, 2**64 - 1)
    for seed in seeds:   # the first call is checked, the second builds the plan, the rest replay
        q, g = _r(rng, (2, 3, 40, 32), dtype), _r(rng, (2, 3, 40, 32), dtype)
        k, v = _r(rng, (2, 3, 56, 32), dtype), _r(rng, (2, 3, 56, 32), dtype)
        kw = dict(causal=causal, dropout_p=0.2, seed=seed)
        want = be.attention_with_lse(q, k, v, **kw)
        got = cudakit.attention_with_lse(q, k, v, **kw)
        assert all(_same(x, y) for x, y in zip(want, got)), (dtype, hex(seed))
        assert _same(be.attention(q, k, v, **kw), cudakit.attention(q, k, v, **kw)), (dtype, hex(seed))
        for fkw in (kw, dict(causal=causal)):   # flash_attention at a named block size, with and without dropout
            assert _same(be.flash_attention(q, k, v, None, 32, **fkw), cudakit.flash_attention(q, k, v, None, 32, **fkw))
        grads_want = be.attention_backward(g, q, k, v, *want, **kw)
        grads = cudakit.attention_backward(g, q, k, v, *want, **kw)
        assert all(_same(x, y) for x, y in zip(grads_want, grads)), (dtype, hex(seed))
    kinds = {k[0]: type(p).__name__ for k, p in dispatch._plans.items() if p is not None}
    a, b = (cudakit.attention(q, k, v, dropout_p=0.2, seed=s) for s in (1, 2))
    assert not _same(a, b)
    for op in ("attention_dropout", "attention_with_lse_dropout", "flash_attention"):
        # a per-call seed is the native replay's alone; float32's plans sit behind their precision guard
        assert kinds.get(op) == ("Replay" if dtype != "float32" else "function"), kinds
    # (float32: the materialised backward's score kernel, 18 pointers and 2 seed words, needs the
    # native replay's 32 substitutions a step; at 16 its plan was refused, H100 2026-11-27 23:10 UTC)
    assert kinds.get("attention_backward_dropout") == ("Replay" if dtype != "float32" else "function"), kinds


@pytest.mark.parametrize("variant", ["gqa", "window", "key_lengths", "blhd", "no_dropout_seed"])
def test_attention_with_dropout_plans_keep_the_masks(variant, cudakit_dropout_stream):
    """Dropout with grouped-query heads, a window, device key_lengths, (B, L, H, D) views, and a seed
    with dropout_p 0: every call (the checked one, then planned ones where a trace serves) is
    bitwise the checked call's, on fresh data and seeds."""
    be = cudakit.get_backend("cuda")
    rng = np.random.default_rng(23)
    dispatch.clear()
    for seed in (3, 2**32 + 17, 2**63 + 1, 99):
        q, g = _r(rng, (2, 4, 40, 32), "bfloat16"), _r(rng, (2, 4, 40, 32), "bfloat16")
        k, v = _r(rng, (2, 4, 56, 32), "bfloat16"), _r(rng, (2, 4, 56, 32), "bfloat16")
        kw = dict(causal=True, dropout_p=0.2, seed=seed)
        if variant == "gqa":
            k, v = k[:, :2].copy(), v[:, :2].copy()
        elif variant == "window":
            kw["window"] = (9, 3)
        elif variant == "key_lengths":
            kw["key_lengths"] = cp.asarray([56, 23], cp.int32)
        elif variant == "blhd":
            q, g, k, v = (x.transpose(0, 2, 1, 3) for x in (q, g, k, v))   # (B, L, H, D) views
            kw["layout"] = "blhd"
        else:
            kw["dropout_p"] = 0.0
        want = be.attention_with_lse(q, k, v, **kw)
        got = cudakit.attention_with_lse(q, k, v, **kw)
        assert all(_same(x, y) for x, y in zip(want, got)), (variant, seed)
        grads_want = be.attention_backward(g, q, k, v, *want, **kw)
        grads = cudakit.attention_backward(g, q, k, v, *want, **kw)
        for x, y in zip(grads_want, grads):
            if kw["dropout_p"]:   # the Triton kernels: no atomics
                assert _same(x, y), (variant, seed)
            else:   # no dropout: cuDNN may run it, whose dQ is accumulated with atomics
                cp.testing.assert_allclose(x.astype(cp.float32), y.astype(cp.float32), rtol=2e-2, atol=2e-2)
    cudakit.check()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_attention_varlen_takes_plans(dtype):
    """attention_varlen and attention_varlen_with_lse with device cu_seqlens take plans (the path
    the signature's checked call chose: cuDNN's ragged graphs replayed where it chose them -- forced
    in test_cudnn_gpu.py -- or the Triton kernels traced, with dropout's seed per call) that give the
    checked call's results on fresh data and sequences; cu_seqlens as tuples and float64 keep the
    checked path (a copy to the device, a read to the host), with no false error flagged."""
    be = cudakit.get_backend("cuda")
    rng = np.random.default_rng(17)
    dispatch.clear()
    h, hkv, d, mx = 4, 2, 64, 96
    for trial, lens in enumerate(([40, 96, 14], [96, 1, 53], [0, 60, 90], [50, 50, 50])):
        cu = cp.asarray(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
        cu_k = cu.copy()   # other arrays for q and k: the Triton kernels
        q, g = _r(rng, (150, h, d), dtype), _r(rng, (150, h, d), dtype)
        k, v = _r(rng, (150, hkv, d), dtype), _r(rng, (150, hkv, d), dtype)
        for kw in (dict(causal=True), dict(causal=False, dropout_p=0.1, seed=trial * 2**33 + 5)):
            for c_k in (cu, cu_k):
                want = be.attention_varlen_with_lse(q, k, v, cu, c_k, mx, mx, **kw)
                got = cudakit.attention_varlen_with_lse(q, k, v, cu, c_k, mx, mx, **kw)
                assert _same(want[0], got[0]) and _same(want[1], got[1]), (lens, kw)
                assert _same(want[0], cudakit.attention_varlen(q, k, v, cu, c_k, mx, mx, **kw)), (lens, kw)
                grads_want = be.attention_varlen_backward(g, q, k, v, *want, cu, c_k, mx, mx, **kw)
                grads = cudakit.attention_varlen_backward(g, q, k, v, *want, cu, c_k, mx, mx, **kw)
                for x, y in zip(grads_want, grads):
                    if dtype == "float32":   # the Triton kernels: no atomics
                        assert _same(x, y), (lens, kw)
                    else:   # (where cuDNN runs it, its dQ is accumulated with atomics)
                        cp.testing.assert_allclose(x.astype(cp.float32), y.astype(cp.float32), rtol=2e-2, atol=2e-2)
        host = tuple(int(c) for c in cu.get())   # a tuple: the signature takes it by value; the checked call
        for _ in range(3):                        # copies it to the device, so its plan is the checked path
            got = cudakit.attention_varlen_with_lse(q, k, v, host, host, mx, mx, causal=True)
            want = be.attention_varlen_with_lse(q, k, v, host, host, mx, mx, causal=True)
            assert _same(want[0], got[0]) and _same(want[1], got[1]), lens
        cudakit.check()   # (a trace verified on poisoned sequences would have set the device error flag)
    planned = {key[0] for key, p in dispatch._plans.items() if p is not None}
    assert {"attention_varlen", "attention_varlen_with_lse", "attention_varlen_shared",
            "attention_varlen_with_lse_shared"} <= planned, planned
    q64, k64, v64 = (x.astype(cp.float64) for x in (q, k, v))
    for lens in ([40, 96, 14], [40, 96, 14], [40, 96, 14], [96, 1, 53]):   # the signature's later calls: new sequences
        cu = cp.asarray(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
        assert _same(be.attention_varlen(q64, k64, v64, cu, cu, mx, mx), cudakit.attention_varlen(q64, k64, v64, cu, cu,
                                                                                                   mx, mx)), lens


def test_traced_cross_entropy_still_reports_bad_targets():
    x = cp.zeros((4, 7), cp.float32)
    good = cp.asarray(np.array([0, 1, 2, 3]))
    for _ in range(3):
        cudakit.cross_entropy_with_grad(x, good)
    cudakit.check()
    bad = cp.asarray(np.array([0, 1, 9, 3]))
    cudakit.cross_entropy_with_grad(x, bad)   # the planned replay, same signature
    with pytest.raises(cudakit.TargetIndexError, match=r"targets\[2\] = 9"):
        cudakit.check()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_batch_norm_training_plan_updates_running_stats_once_per_call(dtype, rng):
    """batch_norm_with_stats(training=True) is traced (kernels/trace_plans.INPLACE): planning copies
    and restores the running statistics, so after four calls they hold exactly four updates, as
    on the CPU backend."""
    from cupy_io import to_dev, to_host
    from helpers import data
    dispatch.clear()
    x = data(rng, (8, 4, 5, 5), dtype)
    rm_h, rv_h = data(rng, (4,), dtype), (np.abs(data(rng, (4,), "float32")) + 1).astype(x.dtype)
    rm, rv = to_dev(rm_h), to_dev(rv_h)
    xd = to_dev(x)
    for _ in range(4):
        y, sm, si = cudakit.batch_norm_with_stats(xd, None, None, rm, rv, True, 0.1, 1e-5)
        y_h, sm_h, si_h = cudakit.batch_norm_with_stats(x, None, None, rm_h, rv_h, True, 0.1, 1e-5)
    plans = [p for (op, _), p in dispatch._plans.items() if op == "batch_norm_with_stats"]
    assert plans and plans[0] is not None
    tol = 1e-5 if dtype == "float32" else 2e-2
    for got, want in ((rm, rm_h), (rv, rv_h), (y, y_h), (sm, sm_h), (si, si_h)):
        np.testing.assert_allclose(to_host(got).astype(np.float64), np.asarray(want).astype(np.float64),
                                   rtol=tol, atol=tol)


def test_batch_norm_plan_refuses_running_stats_that_overlap(rng):
    """A batch_norm signature planned with separate running statistics: a later call with the same
    shapes, strides and alignment whose running_mean and running_var overlap in one buffer gets the
    checked call's ArgumentError (the plan checks their spans), and leaves the buffer as it was;
    separate ones still replay."""
    import cupy as cp
    from cupy_io import to_dev
    from helpers import data
    dispatch.clear()
    xd = to_dev(data(rng, (8, 4, 5, 5), "float32"))
    rm, rv = cp.zeros(4, cp.float32), cp.ones(4, cp.float32)
    for _ in range(3):
        cudakit.batch_norm_with_stats(xd, None, None, rm, rv, True, 0.1, 1e-5)
    plans = [p for (op, _), p in dispatch._plans.items() if op == "batch_norm_with_stats"]
    assert plans and plans[0] is not None
    buf = cp.ones(4 + 256 // 4, cp.float32)   # the second view 256 bytes on: the same address % 256
    before = buf.copy()
    with pytest.raises(cudakit.ArgumentError, match="running_mean and running_var overlap in memory"):
        cudakit.batch_norm_with_stats(xd, None, None, buf[:4], buf[:4], True, 0.1, 1e-5)
    assert bool((buf == before).all())
    # the guard's two branches, told apart: its plan counted, its checked path refused
    from cudakit.kernels import trace_plans
    key = next(k for k in dispatch._plans if k[0] == "batch_norm_with_stats")
    replay, hits = dispatch._plans[key].plan, []

    def counted(*a):
        hits.append(1)
        return replay(*a)

    def refused(*a):
        raise AssertionError("the checked path ran")
    args = (xd, None, None, rm, rv, True, 0.1, 1e-5)
    dispatch._plans[key] = trace_plans._separate(counted, refused, args, (3, 4))
    dispatch._plans_changed and dispatch._plans_changed()   # (plan_call's inline cache)
    far_m, far_v = buf[:4], buf[64:68]   # 256 bytes apart: separate, the same signature
    cudakit.batch_norm_with_stats(xd, None, None, far_m, far_v, True, 0.1, 1e-5)
    assert hits == [1] and float(far_m.sum()) != 4.0
    with pytest.raises(AssertionError, match="the checked path ran"):
        cudakit.batch_norm_with_stats(xd, None, None, buf[:4], buf[:4], True, 0.1, 1e-5)
    assert hits == [1]
    # inference writes nothing: its plan is not wrapped
    for _ in range(3):
        cudakit.batch_norm_with_stats(xd, None, None, rm, rv, False, 0.1, 1e-5)
    inference = [p for (op, sig), p in dispatch._plans.items() if op == "batch_norm_with_stats" and p is not None
                 and not hasattr(p, "plan")]
    assert inference, "the inference signature's plan is the replay itself"


def _packed_qkv(seed: int):
    """(the CUDA backend, q, k, v as the (B, L, H, D) thirds of one packed bfloat16 qkv, a gradient
    like q), skipping without cuDNN's frontend."""
    from cudakit.kernels import cudnn
    if not cudnn.available():
        pytest.skip("cuDNN's frontend is not installed")
    rng = np.random.default_rng(seed)
    qkv = _r(rng, (2, 64, 3, 4, 64), "bfloat16")
    return cudakit.get_backend("cuda"), qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], _r(rng, (2, 64, 4, 64), "bfloat16")


def test_qkv_packed_backward_plan_replays_cudnn_into_one_array():
    """attention_backward(..., qkv_packed=True) on views of a packed qkv: later calls replay cuDNN's
    graph writing the three gradients into one (B, L, 3, H, D) array (path_plans
    plan_attention_backward_packed), equal to the checked call's (dQ within cuDNN's atomics)."""
    be, q, k, v, g = _packed_qkv(4)
    out, lse = cudakit.attention_with_lse(q, k, v, causal=True, layout="blhd")
    for _ in range(3):
        got = cudakit.attention_backward(g, q, k, v, out, lse, causal=True, layout="blhd", qkv_packed=True)
        assert got.shape == (2, 64, 3, 4, 64) and got.flags.c_contiguous
    want = be.attention_backward(g, q, k, v, out, lse, causal=True, layout="blhd", qkv_packed=True)
    assert _same(got[:, :, 1:], want[:, :, 1:])
    cp.testing.assert_allclose(got[:, :, 0].astype(cp.float32), want[:, :, 0].astype(cp.float32), rtol=2e-2,
                               atol=2e-3)
    assert any(k[0] == "attention_backward_packed" and p is not None for k, p in dispatch._plans.items())


def test_blhd_attention_plans_replay_cudnn_in_place():
    """attention_with_lse / attention_backward on (B, L, H, D) views of one packed qkv (the GPT
    example's layout): where cuDNN ran the first call, later calls replay its graph (path_plans),
    bitwise the checked call's results."""
    be, q, k, v, g = _packed_qkv(3)
    for _ in range(3):
        out, lse = cudakit.attention_with_lse(q, k, v, causal=True, layout="blhd")
        grads = cudakit.attention_backward(g, q, k, v, out, lse, causal=True, layout="blhd")
    want_out, want_lse = be.attention_with_lse(q, k, v, causal=True, layout="blhd")
    want = be.attention_backward(g, q, k, v, want_out, want_lse, causal=True, layout="blhd")
    assert _same(out, want_out) and _same(lse, want_lse)
    assert all(_same(a, b) for a, b in zip(grads, want))
    planned = {k[0] for k, p in dispatch._plans.items() if p is not None}
    assert {"attention_with_lse", "attention_backward"} <= planned, planned
