"""Independent float64 references for softmax, log_softmax, their backward passes and
cross_entropy (torch semantics), and tolerances per dtype. Written from the definitions.

Special values: the references use the formula exp(x - max) / sum(...) in NumPy, which defines
the expected behaviour: a slice holding NaN or +inf, or only -inf, is NaN everywhere.
"""
import numpy as np
from helpers import np_dtype

# |got - ref| <= RTOL * |ref| + ATOL * scale + FLOOR: 16-bit outputs are one rounding of a float32
# result; ATOL * scale covers cancellation at the accumulation precision; FLOOR the underflow of
# tiny probabilities (float16 subnormals, float32 flush-to-zero below 1.2e-38).
RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-5, "float64": 1e-11}
ATOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-5, "float64": 1e-11}
FLOOR = {"float16": 1e-7, "bfloat16": 1e-37, "float32": 1e-37, "float64": 1e-300}


def f64(a):
    return np.asarray(a).astype(np.float64)


def cast(a, dtype):
    return np.asarray(a, np.float64).astype(np_dtype(dtype))


def acc_dtype(dtype):
    """The loss / accumulation dtype cudakit promises for inputs of `dtype`."""
    return "float64" if dtype == "float64" else "float32"


def softmax(x, axis=-1):
    x = f64(x)
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    x = f64(x)
    with np.errstate(all="ignore"):
        xc = x - x.max(axis=axis, keepdims=True)
        return xc - np.log(np.exp(xc).sum(axis=axis, keepdims=True))


def softmax_grad(g, y, axis=-1):
    """dx of softmax from its output y: y * (g - sum(g*y)); and the scale of its cancellation."""
    g, y = f64(g), f64(y)
    s = (g * y).sum(axis=axis, keepdims=True)
    return y * (g - s), np.abs(y) * (np.abs(g) + np.abs(g * y).sum(axis=axis, keepdims=True))


def log_softmax_grad(g, y, axis=-1):
    """dx of log_softmax from its output y: g - exp(y) * sum(g); and its cancellation scale."""
    g, y = f64(g), f64(y)
    s = g.sum(axis=axis, keepdims=True)
    return g - np.exp(y) * s, np.abs(g) + np.exp(y) * np.abs(g).sum(axis=axis, keepdims=True)


def cross_entropy(logits, targets, reduction="mean", ignore_index=-100, grad_loss=None):
    """(loss, dlogits) in float64 with torch's semantics; grad_loss None means 1."""
    x = f64(logits)
    t = np.asarray(targets).astype(np.int64)
    n = x.shape[0]
    use = t != ignore_index
    loss = np.zeros(n)
    p = np.zeros_like(x)
    onehot = np.zeros_like(x)
    with np.errstate(all="ignore"):
        for i in np.nonzero(use)[0]:
            m = x[i].max()
            e = np.exp(x[i] - m)
            loss[i] = np.log(e.sum()) + m - x[i, t[i]]
            p[i] = e / e.sum()
            onehot[i, t[i]] = 1.0
    cnt = int(use.sum())
    if reduction == "none":
        w = np.ones(n) if grad_loss is None else f64(grad_loss).reshape(n)
        out = loss
    else:
        w0 = 1.0 if grad_loss is None else float(f64(grad_loss).reshape(-1)[0])
        with np.errstate(all="ignore"):
            w = np.full(n, w0 / cnt if reduction == "mean" else w0)
            out = np.float64(loss.sum() / cnt) if reduction == "mean" else np.float64(loss.sum())
    w = np.where(use, w, 0.0)
    grad = (p - onehot) * w[:, None]
    return out, grad, np.abs(w)[:, None] * (p + onehot)


def assert_close(got, ref, dtype, what="", scale=0.0):
    got, ref = f64(got), f64(ref)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    both_nan = np.isnan(got) & np.isnan(ref)
    assert np.array_equal(np.isnan(got), np.isnan(ref)), f"{what}: NaN where the reference has none, or not"
    same_inf = np.isinf(ref) & (got == ref)
    ok = both_nan | same_inf
    with np.errstate(all="ignore"):
        tol = RTOL[dtype] * np.abs(ref) + ATOL[dtype] * np.asarray(scale) + FLOOR[dtype]
        err = np.where(ok, 0.0, np.abs(got - ref))
    bad = ~ok & ~(err <= tol)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, err / np.maximum(tol, 1e-300), 0)), err.shape)
        raise AssertionError(f"{what} ({dtype}): {int(bad.sum())} of {err.size} beyond tolerance; worst at "
                             f"{i}: got {got[i]!r}, ref {ref[i]!r}, tol {tol if np.ndim(tol) == 0 else tol[i]!r}")
