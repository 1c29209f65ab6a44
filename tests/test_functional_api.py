"""The functional API (cudakit.<op>) reaches the backend method of the same name with the same
arguments, for every op of the reduction, softmax, layout and dropout families."""
import numpy as np
import pytest

import cudakit
from cudakit.backends import get_backend

RNG = np.random.default_rng(7)
X = RNG.standard_normal((5, 7)).astype(np.float32)
G = RNG.standard_normal((5, 7)).astype(np.float32)
T = np.array([0, 6, 3, -100, 2], dtype=np.int64)

# (name, args, kwargs) with every keyword given so a wrapper that drops one is caught
CASES = [
    ("sum", (X,), dict(axis=1, keepdims=True)),
    ("mean", (X,), dict(axis=(0,), keepdims=False)),
    ("max", (X,), dict(axis=0, keepdims=True)),
    ("min", (X,), dict(axis=None, keepdims=False)),
    ("argmax", (X,), dict(axis=1, keepdims=True)),
    ("argmin", (X,), dict(axis=0)),
    ("var", (X,), dict(axis=1, ddof=1, keepdims=True)),
    ("reduce_sum", (X,), dict(axis=0)),
    ("sum_backward", (G[:, :1], X.shape), dict(axis=1, keepdims=True)),
    ("mean_backward", (G[0], X.shape), dict(axis=0, keepdims=False)),
    ("var_backward", (G[:, 0], X), dict(axis=1, ddof=1, keepdims=False)),
    ("max_backward", (G[0], X), dict(axis=0)),
    ("min_backward", (G[:, 0], X), dict(axis=1)),
    ("softmax", (X,), dict(axis=0)),
    ("log_softmax", (X,), dict(axis=-1)),
    ("softmax_backward", (G, X), dict(axis=0)),
    ("log_softmax_backward", (G, X), dict(axis=0)),
    ("cross_entropy", (X, T), dict(reduction="sum", ignore_index=-100)),
    ("cross_entropy_backward", (np.float32(2.0), X, T), dict(reduction="mean", ignore_index=-100)),
    ("transpose", (X,), dict(axes=(1, 0))),
    ("permute", (X[None],), dict(axes=(2, 0, 1))),
    ("permute_backward", (X[None],), dict(axes=(1, 2, 0))),
    ("matrix_transpose", (X,), {}),
    ("dropout", (X,), dict(p=0.3, seed=11, training=True)),
    ("dropout_backward", (G,), dict(p=0.3, seed=11)),
]


@pytest.mark.parametrize("name,args,kwargs", CASES, ids=[c[0] for c in CASES])
def test_functional_matches_backend(name, args, kwargs):
    got = getattr(cudakit, name)(*args, **kwargs)
    want = getattr(get_backend("cpu"), name)(*args, **kwargs)
    assert type(got) is type(want)
    np.testing.assert_array_equal(got, want)


def test_cross_entropy_with_grad_and_mask():
    loss, d = cudakit.cross_entropy_with_grad(X, T, reduction="none", ignore_index=-100)
    be = get_backend("cpu")
    np.testing.assert_array_equal(loss, be.cross_entropy(X, T, reduction="none"))
    np.testing.assert_array_equal(d, be.cross_entropy_backward(np.ones(5, np.float32), X, T, reduction="none"))
    m = cudakit.dropout_mask((5, 7), 0.3, 11, backend="cpu")
    np.testing.assert_array_equal(cudakit.dropout(X, 0.3, 11) != 0, m & (X != 0))


def test_target_index_error_is_exported():
    with pytest.raises(cudakit.TargetIndexError, match="out of range"):
        cudakit.cross_entropy(X, np.array([0, 1, 2, 3, 7]))
    assert issubclass(cudakit.TargetIndexError, IndexError)
