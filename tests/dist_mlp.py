"""A two-layer MLP on cudakit ops (NumPy or CuPy arrays), forward and hand-written backward, for
the data-parallel tests: logits = linear(gelu(linear(x, w1, b1)), w2, b2), mean cross-entropy."""
import numpy as np

import cudakit


def array_module(backend: str):
    """(xp, host) of a distributed test worker: CuPy and cupy.asnumpy for "nccl", NumPy and
    np.asarray for "cpu"."""
    if backend == "nccl":
        import cupy
        return cupy, cupy.asnumpy
    return np, np.asarray


def init_params(seed, d_in=13, d_hidden=33, n_cls=5):
    """[w1, b1, w2, b2] as float32 NumPy arrays."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * 0.3).astype(np.float32)
            for s in ((d_hidden, d_in), (d_hidden,), (n_cls, d_hidden), (n_cls,))]


def batch(seed, rows, d_in=13, n_cls=5):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, d_in)).astype(np.float32), rng.integers(0, n_cls, rows).astype(np.int64)


def loss_and_grads(params, x, y, on_grad=None):
    """(loss, [dw1, db1, dw2, db2]); on_grad(i, g) is called as each gradient is produced, in
    the backward's order (b2, w2, b1, w1)."""
    w1, b1, w2, b2 = params
    pre = cudakit.linear(x, w1, b1)
    h = cudakit.gelu(pre)
    logits = cudakit.linear(h, w2, b2)
    loss, dlogits = cudakit.cross_entropy_with_grad(logits, y)
    dh, dw2, db2 = cudakit.linear_backward(dlogits, h, w2)
    grads = [None] * 4
    for i, g in ((3, db2), (2, dw2)):
        grads[i] = g
        if on_grad:
            on_grad(i, g)
    dpre = cudakit.gelu_backward(dh, pre)
    _, dw1, db1 = cudakit.linear_backward(dpre, x, w1)
    for i, g in ((1, db1), (0, dw1)):
        grads[i] = g
        if on_grad:
            on_grad(i, g)
    return loss, grads
