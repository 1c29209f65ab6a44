"""Independent float64 references for layernorm, rmsnorm and batch_norm (forward and backward),
and tolerances per dtype. Written from the definitions, not from cudakit's code."""
import numpy as np
from helpers import np_dtype

# |got - ref| <= RTOL * |ref| + ATOL * scale(ref): 16-bit outputs are one rounding of a float32
# result; ATOL covers cancellation (dx = a - b - c) at the accumulation precision.
RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-5, "float64": 1e-11}
ATOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-5, "float64": 1e-11}


def f64(a):
    return None if a is None else np.asarray(a).astype(np.float64)


def layernorm(x, w, b, eps):
    x = f64(x)
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    r = 1.0 / np.sqrt(var + eps)
    y = (x - mu) * r
    if w is not None:
        y = y * f64(w)
    if b is not None:
        y = y + f64(b)
    return y, mu[:, 0], r[:, 0]


def layernorm_grad(dy, x, w, eps):
    """d/dx, d/dw, d/db of sum(dy * layernorm(x)) in float64, from the chain rule."""
    x, dy = f64(x), f64(dy)
    n = x.shape[1]
    mu = x.mean(axis=1, keepdims=True)
    xc = x - mu
    var = (xc ** 2).mean(axis=1, keepdims=True)
    r = 1.0 / np.sqrt(var + eps)
    xh = xc * r
    g = dy * f64(w) if w is not None else dy
    # y = xh * w + b; dxh = g; dx = r * (g - mean(g) - xh * mean(g * xh))
    dx = r * (g - g.sum(axis=1, keepdims=True) / n - xh * (g * xh).sum(axis=1, keepdims=True) / n)
    return dx, (dy * xh).sum(axis=0), dy.sum(axis=0)


def rmsnorm(x, w, eps):
    x = f64(x)
    r = 1.0 / np.sqrt((x ** 2).mean(axis=1, keepdims=True) + eps)
    y = x * r
    if w is not None:
        y = y * f64(w)
    return y, r[:, 0]


def rmsnorm_grad(dy, x, w, eps):
    x, dy = f64(x), f64(dy)
    n = x.shape[1]
    r = 1.0 / np.sqrt((x ** 2).mean(axis=1, keepdims=True) + eps)
    g = dy * f64(w) if w is not None else dy
    # d(x_i r)/dx_j = r delta_ij - x_i x_j r^3 / n
    dx = r * g - x * r ** 3 * (g * x).sum(axis=1, keepdims=True) / n
    return dx, (dy * x * r).sum(axis=0)


def batch_norm_train(x, gamma, beta, eps):
    """(y, mean, biased var, unbiased var) of training-mode batch norm, in float64."""
    x = f64(x)
    axes = (0,) + tuple(range(2, x.ndim))
    shp = (1, -1) + (1,) * (x.ndim - 2)
    mu = x.mean(axis=axes)
    var = x.var(axis=axes)
    m = x.size // x.shape[1]
    y = (x - mu.reshape(shp)) / np.sqrt(var.reshape(shp) + eps)
    if gamma is not None:
        y = y * f64(gamma).reshape(shp)
    if beta is not None:
        y = y + f64(beta).reshape(shp)
    return y, mu, var, var * m / (m - 1)


def batch_norm_grad(dy, x, gamma, eps):
    x, dy = f64(x), f64(dy)
    axes = (0,) + tuple(range(2, x.ndim))
    shp = (1, -1) + (1,) * (x.ndim - 2)
    m = x.size // x.shape[1]
    mu = x.mean(axis=axes).reshape(shp)
    r = 1.0 / np.sqrt(x.var(axis=axes).reshape(shp) + eps)
    xh = (x - mu) * r
    g = f64(gamma).reshape(shp) if gamma is not None else 1.0
    dxh = dy * g
    dx = r * (dxh - dxh.sum(axis=axes, keepdims=True) / m - xh * (dxh * xh).sum(axis=axes, keepdims=True) / m)
    return dx, (dy * xh).sum(axis=axes), dy.sum(axis=axes)


def grad_scale(dy, w, rstd, channels=False):
    """The size of the terms a dx is the difference of: max |rstd * dy * w| (cancellation in
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) leaves errors of that size, not of |dx|).
    Row norms: w along the last axis, rstd along the first; channels=True (batch norm): both
    along axis 1."""
    g = np.abs(f64(dy))
    if channels:
        shp = (1, -1) + (1,) * (g.ndim - 2)
        s = np.abs(f64(rstd)) * (np.abs(f64(w)) if w is not None else 1.0)
        g = g * s.reshape(shp)
    else:
        if w is not None:
            g = g * np.abs(f64(w))
        g = g * np.abs(f64(rstd)).reshape(-1, 1)
    return max(float(g.max(initial=0.0)), 1e-30)


def batch_norm_y_scale(y_ref, x, gamma, mean_ref, invstd_ref):
    """Elementwise scale for batch norm's y: max |y_ref|, or |mean| invstd |gamma| where that is
    larger. The mean of a channel carries roundings of size u |mean|, and y = (x - mean) invstd
    gamma scales them by invstd |gamma|: a channel whose spread is small against its mean and
    against sqrt(eps) (two samples close together, say) amplifies them past max |y_ref|."""
    shp = (1, -1) + (1,) * (np.ndim(x) - 2)
    s = np.abs(f64(mean_ref)) * np.abs(f64(invstd_ref))
    if gamma is not None:
        s = s * np.abs(f64(gamma))
    return np.maximum(max(float(np.abs(y_ref).max(initial=0.0)), 1e-30), s.reshape(shp))


def assert_close(got, ref, dtype, what="", scale=None, factor=1.0):
    """Elementwise |got - ref| <= factor * (RTOL |ref| + ATOL scale), scale = max |ref| (>= 1e-30)
    unless given (a number, or an array that broadcasts against ref)."""
    got = np.asarray(got).astype(np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    assert np.isfinite(got).all() == np.isfinite(ref).all(), f"{what}: non-finite values"
    if ref.size == 0:
        return
    s = scale if scale is not None else max(float(np.abs(ref).max()), 1e-30)
    tol = factor * (RTOL[dtype] * np.abs(ref) + ATOL[dtype] * s)
    err = np.abs(got - ref)
    bad = ~(err <= tol)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, err - tol, -np.inf)), ref.shape)
        raise AssertionError(f"{what} ({dtype}): {int(bad.sum())} of {ref.size} elements off; worst at {i}: "
                             f"got {got[i]!r}, want {ref[i]!r}, tolerance {tol[i]:.3g}")


def cast(a, dtype):
    return np.asarray(a).astype(np_dtype(dtype))


def large_mean_atol(y_ref, rstd_ref, mean_ref, cols):
    """The elementwise bound on |y - y_ref| that float32 statistics guarantee for rows with a large
    mean: the mean of `cols` values carries at most ~log2(cols) roundings of its magnitude (pairwise
    or tree sums), each u |mean|, and y = (x - mean) rstd scales that error by rstd; y's own
    rounding and rstd's add a few u |y|. u = 2^-24."""
    import numpy as np
    u = 2.0 ** -24
    return ((np.ceil(np.log2(cols)) + 2) * u * np.abs(mean_ref)[:, None] * rstd_ref[:, None]
            + 8 * u * np.abs(y_ref))
