"""CUDA graphs (cudakit.graph, CUDAGraph): a captured step equals the eager step bit for bit, the
common ops capture, synchronising calls raise naming the op, replays keep memory flat."""
import numpy as np
import pytest

import cudakit

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")


def _mlp_params(rng, dtype, d_in=64, d_h=128, classes=10):
    mk = lambda *s: cp.asarray((rng.standard_normal(s) * 0.1).astype(np.float32)).astype(dtype)  # noqa: E731
    return [mk(d_h, d_in), mk(d_h), mk(d_h), mk(d_h), mk(classes, d_h), mk(classes)]


def _mlp_step(params, opt):
    """One training step of linear -> layernorm -> gelu -> linear -> cross-entropy, hand-written
    backward, optimizer step: every op family a model step uses, no host synchronisation."""
    w1, b1, g, beta, w2, b2 = params

    def step(x, t):
        h = cudakit.linear(x, w1, b1)
        n, mean, rstd = cudakit.layernorm_with_stats(h, g, beta)
        a = cudakit.gelu(n)
        logits = cudakit.linear(a, w2, b2)
        loss, dlogits = cudakit.cross_entropy_with_grad(logits, t)
        da, dw2, db2 = cudakit.linear_backward(dlogits, a, w2)
        dn = cudakit.gelu_backward(da, n)
        dh, dg, dbeta = cudakit.layernorm_backward(dn, h, g, mean, rstd)
        _, dw1, db1 = cudakit.linear_backward(dh, x, w1)
        opt.step([dw1, db1, dg, dbeta, dw2, db2])
        return loss
    return step


@pytest.mark.parametrize("opt_name, dtype", [("AdamW", "float32"), ("AdamW", "bfloat16"), ("SGD", "float32")])
def test_graphed_training_equals_eager_bitwise(opt_name, dtype):
    rng = np.random.default_rng(0)
    batches = [(cp.asarray(rng.standard_normal((32, 64)).astype(np.float32)).astype(dtype),
                cp.asarray(rng.integers(0, 10, 32))) for _ in range(8)]

    def make():
        params = _mlp_params(np.random.default_rng(1), dtype)
        kw = {"master_weights": True} if opt_name == "AdamW" and dtype == "bfloat16" else {}
        opt = cudakit.AdamW(params, lr=1e-2, **kw) if opt_name == "AdamW" else cudakit.SGD(params, lr=0.1,
                                                                                             momentum=0.9)
        return params, opt

    params_e, opt_e = make()
    step_e = _mlp_step(params_e, opt_e)
    losses_e = [float(step_e(*b).get()) for b in batches]

    params_g, opt_g = make()
    step_g = _mlp_step(params_g, opt_g)
    g = cudakit.graph(step_g, *batches[0], warmup=2)      # two real steps on batches[0]
    assert opt_g.hyper.step == 2
    # the eager run's first two steps used batches[0] and [1]: replay the graph over the same data
    params_g2, opt_g2 = make()
    step_g2 = _mlp_step(params_g2, opt_g2)
    losses_g = [float(step_g2(*b).get()) for b in batches[:2]]
    g2 = cudakit.graph(step_g2, *batches[2], warmup=1)    # warm-up is the third step (batch 2)
    losses_g.append(None)
    for b in batches[3:]:
        losses_g.append(float(g2(*b).get()))
    assert opt_g2.hyper.step == len(batches)
    assert losses_g[:2] == losses_e[:2] and losses_g[3:] == losses_e[3:]
    for pe, pg in zip(params_e, params_g2):
        assert bool((pe == pg).all()), "graphed parameters differ from eager ones"
    del g


def test_replay_with_new_shape_raises():
    x = cp.ones((4, 8), cp.float32)
    g = cudakit.graph(lambda a: cudakit.relu(a), x)
    with pytest.raises(cudakit.ShapeError, match=r"argument 0 must have the captured shape \(4, 8\)"):
        g(cp.ones((5, 8), cp.float32))
    with pytest.raises(cudakit.ShapeError, match="dtype float32"):
        g(cp.ones((4, 8), cp.float64))
    y = g(-cp.arange(32, dtype=cp.float32).reshape(4, 8) + 3)
    np.testing.assert_array_equal(y.get(), np.maximum(-np.arange(32, dtype=np.float32).reshape(4, 8) + 3, 0))


@pytest.mark.parametrize("call, name", [
    (lambda x, t: cudakit.cross_entropy_with_grad(x, t, validate=True), "cross_entropy_with_grad"),
    (lambda x, t: cudakit.to_host(x), "to_host"),
    (lambda x, t: cudakit.check(), "check()"),
    (lambda x, t: cudakit.synchronize(), "synchronize()"),
])
def test_synchronising_call_raises_naming_it(call, name):
    x = cp.random.standard_normal((16, 10), dtype=cp.float32)
    t = cp.arange(16) % 10
    call(x, t)   # fine eagerly
    with pytest.raises(cudakit.GraphCaptureError, match=name.replace("(", r"\(").replace(")", r"\)")):
        cudakit.graph(lambda a, b: (cudakit.relu(a), call(a, b)), x, t, warmup=1)
    from cudakit import graphs
    assert graphs.capturing() is None
    cudakit.check()   # the device is fine afterwards


def test_functional_optimizer_update_refused_in_capture():
    p, gr = cp.ones(8, cp.float32), cp.ones(8, cp.float32)
    st = cudakit.OptimizerState(lr=0.1)
    with pytest.raises(cudakit.GraphCaptureError, match="sgd_update"):
        cudakit.graph(lambda: cudakit.sgd_update(p, gr, None, st), warmup=1)


def test_replays_keep_memory_stats_flat():
    rng = np.random.default_rng(2)
    params = _mlp_params(rng, "float32")
    opt = cudakit.AdamW(params, lr=1e-3)
    x = cp.asarray(rng.standard_normal((32, 64)).astype(np.float32))
    t = cp.asarray(rng.integers(0, 10, 32))
    g = cudakit.graph(_mlp_step(params, opt), x, t)
    g.replay()
    cp.cuda.get_current_stream().synchronize()
    before = cudakit.memory.stats()
    for _ in range(1000):
        g.replay()
    cp.cuda.get_current_stream().synchronize()
    after = cudakit.memory.stats()
    assert before.graph_reserved > 0
    for field in ("allocated", "reserved", "allocations", "frees", "graph_reserved"):
        assert getattr(after, field) == getattr(before, field), field
    assert opt.hyper.step == 2 + 1 + 1000


def test_common_ops_capture():
    """The calls of a model step, each captured alone, replay to the eager result."""
    rng = np.random.default_rng(3)
    f32 = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float32))  # noqa: E731
    q, k, v = (f32(2, 4, 64, 32).astype("bfloat16") for _ in range(3))
    x, w = f32(64, 96), f32(128, 96)
    img, wc = f32(2, 8, 12, 12), f32(16, 8, 3, 3)
    q32, k32, v32, g32 = (f32(2, 4, 200, 64) for _ in range(4))   # float32: the flash or materialised backward
    o32, lse32 = cudakit.attention_with_lse(q32, k32, v32, causal=True)
    cases = {
        "matmul": (lambda a, b: cudakit.matmul(a, b), (x, w.T.copy())),
        "matmul_batched": (lambda a, b: cudakit.matmul(a, b), (f32(3, 16, 24), f32(3, 24, 8))),
        "linear_backward": (lambda g, a, b: cudakit.linear_backward(g, a, b), (f32(64, 128), x, w)),
        "fused_linear_gelu_with_preact": (lambda a, b: cudakit.fused_linear_gelu_with_preact(
            a.astype("bfloat16"), b.astype("bfloat16")), (x, w)),
        "attention_with_lse": (lambda a, b, c: cudakit.attention_with_lse(a, b, c, causal=True), (q, k, v)),
        "attention_backward_float32": (lambda g, a, b, c, o, m: cudakit.attention_backward(g, a, b, c, o, m, causal=True),
                                       (g32, q32, k32, v32, o32, lse32)),
        "permute": (lambda a: cudakit.permute(a, (0, 2, 1, 3)), (q,)),
        "softmax": (lambda a: cudakit.softmax(a), (x,)),
        "sum": (lambda a: cudakit.sum(a, axis=0), (x,)),
        "dropout": (lambda a: cudakit.dropout(a, 0.1, 7), (x,)),
        "conv2d": (lambda a, b: cudakit.conv2d(a, b, padding=1), (img, wc)),
        "max_pool2d": (lambda a: cudakit.max_pool2d(a, 2), (img,)),
        "batch_norm": (lambda a: cudakit.batch_norm_with_stats(a, training=True), (img,)),
        "cross_entropy": (lambda a, t: cudakit.cross_entropy_with_grad(a, t), (x, cp.arange(64) % 96)),
    }
    failed = {}
    for name, (fn, args) in cases.items():
        want = fn(*args)
        try:
            g = cudakit.graph(fn, *args, warmup=1)
            got = g(*args)
        except Exception as e:  # noqa: BLE001 - collect every failing op for one message
            failed[name] = repr(e)
            continue
        flat_w = want if isinstance(want, tuple) else (want,)
        flat_g = got if isinstance(got, tuple) else (got,)
        for a, b in zip(flat_w, flat_g):
            if a is not None and not bool((a == b).all()):
                failed[name] = "replay differs from eager"
    assert not failed, failed
