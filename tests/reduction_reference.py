"""Independent float64 references for the reductions (sum, mean, max, min, argmax, argmin, var and
their backward passes), per-dtype tolerances, and checks shared by the CPU and GPU test files.

Tolerances: a 16-bit result is one rounding of a float32 result, so it may be 2 output ulps from
the float64 reference; accumulation error is bounded by K * eps(acc) * sum|x| for sums and by
K * eps(acc) * var for variances (shifted Welford / two-pass are both that accurate). Integer-valued
inputs sum exactly in float32, so with them every output must equal the reference rounded once:
a skipped or repeated element cannot hide in a tolerance.
"""
import numpy as np
from helpers import np_dtype

MANT = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}
EPS_ACC = {"float16": 2.0 ** -24, "bfloat16": 2.0 ** -24, "float32": 2.0 ** -24, "float64": 2.0 ** -53}
TINY = {"float16": 2.0 ** -14, "bfloat16": 2.0 ** -126, "float32": 2.0 ** -126, "float64": 2.0 ** -1022}
K_SUM = 32
K_VAR = 64


def f64(a):
    return np.asarray(a).astype(np.float64)


def cast(a, dtype):
    return np.asarray(a).astype(np.float64).astype(np_dtype(dtype))


def normal(rng, shape, dtype, loc=0.0, scale=1.0):
    return cast(loc + scale * rng.standard_normal(shape), dtype)


def ints(rng, shape, dtype, lo=-8, hi=8):
    """Small integers: their sums are exact in float32 and in float64."""
    return cast(rng.integers(lo, hi + 1, size=shape), dtype)


def ulp(v, dtype):
    """One unit in the last place of |v| in `dtype` (elementwise)."""
    a = np.maximum(np.abs(f64(v)), TINY[dtype])
    with np.errstate(all="ignore"):
        e = np.floor(np.log2(np.where(np.isfinite(a), a, 1.0)))
    return np.exp2(e - MANT[dtype])


def axes_of(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    t = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted(a % ndim for a in t))


def reference(op, x, axis=None, keepdims=False, ddof=0):
    """op over axis of x in float64 (argmax/argmin: NumPy's, on the exactly widened values).
    float64 inputs are reduced in long double: NumPy adds a non-last axis sequentially, whose
    float64 error (~sqrt(n) ulps of the running sum) exceeds that of the kernels' tree sums."""
    wide = np.asarray(x).dtype == np.float64 and op not in ("argmax", "argmin")
    x = np.asarray(x).astype(np.longdouble) if wide else f64(x)
    with np.errstate(all="ignore"):
        if op in ("argmax", "argmin"):
            return (np.argmax if op == "argmax" else np.argmin)(x, axis=axis, keepdims=keepdims)
        ax = axes_of(axis, x.ndim)
        n = int(np.prod([x.shape[d] for d in ax]))
        s = np.sum(x, axis=ax, keepdims=True)
        if op == "sum":
            r = s
        elif op == "mean":
            r = s / n
        elif op == "max":
            r = np.max(x, axis=ax, keepdims=True)
        elif op == "min":
            r = np.min(x, axis=ax, keepdims=True)
        elif op == "var":
            d = x - s / n
            r = np.sum(d * d, axis=ax, keepdims=True) / max(n - ddof, 0)
        else:
            raise ValueError(op)
    r = f64(r)
    return r if keepdims else r.reshape([m for i, m in enumerate(x.shape) if i not in ax])


def expected_shape(shape, axis, keepdims):
    ax = axes_of(axis, len(shape))
    return tuple(1 if i in ax else m for i, m in enumerate(shape)) if keepdims else \
        tuple(m for i, m in enumerate(shape) if i not in ax)


def check_forward(got, op, x, axis=None, keepdims=False, ddof=0, exact=False, what=""):
    """got (a NumPy array) against the float64 reference of op(x); exact: equal to the reference
    rounded once to the output dtype (1 ulp for mean: float32 then 16-bit is a double rounding)."""
    dtype = np.dtype(x.dtype).name
    want = reference(op, x, axis, keepdims, ddof)
    got = np.asarray(got)
    assert got.shape == expected_shape(x.shape, axis, keepdims), (what, got.shape, want.shape)
    if op in ("argmax", "argmin"):
        assert got.dtype == np.int64, (what, got.dtype)
        np.testing.assert_array_equal(got, want, err_msg=f"{what} {op}")
        return
    assert got.dtype == np_dtype(dtype), (what, got.dtype, dtype)
    g, w = f64(got), np.asarray(want, np.float64)
    nan = np.isnan(w)
    np.testing.assert_array_equal(np.isnan(g), nan, err_msg=f"{what} {op}: NaN positions differ")
    g, w = np.where(nan, 0, g), np.where(nan, 0, w)
    with np.errstate(over="ignore"):
        inf = np.isinf(w) | np.isinf(f64(cast(w, dtype)))  # a 16-bit sum may overflow: inf as the reference rounds
        w = np.where(inf, f64(cast(w, dtype)), w)
    np.testing.assert_array_equal(g[inf], w[inf], err_msg=f"{what} {op}: inf differs")
    g, w = np.where(inf, 0, g), np.where(inf, 0, w)
    if op in ("max", "min") or (exact and op == "sum"):
        np.testing.assert_array_equal(g, f64(cast(w, dtype)), err_msg=f"{what} {op}")
        return
    if exact and op != "var":
        tol = ulp(w, dtype) * (1.0 if dtype in ("float16", "bfloat16") else 0.5)
    else:
        ax = axes_of(axis, x.ndim)
        n = max(1, int(np.prod([x.shape[d] for d in ax])))
        xf = f64(x)
        with np.errstate(all="ignore"):
            xf = np.where(np.isfinite(xf), xf, 0)
        if op == "var":
            acc_err = K_VAR * EPS_ACC[dtype] * np.abs(w) + K_SUM * EPS_ACC[dtype] * np.abs(w)
        else:
            mag = np.sum(np.abs(xf), axis=ax, keepdims=keepdims)
            if not keepdims:
                mag = mag.reshape(w.shape)
            acc_err = K_SUM * EPS_ACC[dtype] * mag / (n if op == "mean" else 1)
        tol = 2 * ulp(w, dtype) + acc_err
        if dtype in ("float32", "float64"):
            tol = tol + ulp(w, dtype)
    err = np.abs(g - w)
    bad = err > tol
    assert not bad.any(), (f"{what} {op}: {int(bad.sum())} of {bad.size} outside tolerance; worst err "
                           f"{err.max():.3g} (tol there {np.ravel(tol * np.ones_like(err))[np.argmax(err)]:.3g})")


# ---- backward references -------------------------------------------------------------------

def _keep(g, shape, ax):
    return f64(g).reshape([1 if i in ax else m for i, m in enumerate(shape)])


def grad_reference(op, g, x_or_shape, axis=None, ddof=0):
    """d/dx of sum(g * op(x)) in float64 (g with the keepdims=False result shape)."""
    if op in ("sum", "mean"):
        shape = tuple(x_or_shape)
        ax = axes_of(axis, len(shape))
        n = int(np.prod([shape[d] for d in ax]))
        return np.broadcast_to(_keep(g, shape, ax) / (n if op == "mean" else 1), shape)
    x = f64(x_or_shape)
    ax = axes_of(axis, x.ndim)
    n = int(np.prod([x.shape[d] for d in ax]))
    if op == "var":
        mean = np.sum(x, axis=ax, keepdims=True) / n
        with np.errstate(all="ignore"):  # n - ddof == 0: inf or NaN, as the forward
            return _keep(g, x.shape, ax) * 2 * (x - mean) / (n - ddof)
    # max / min: one-hot at the first extreme (first NaN), the reduced axes flattened in C order
    kept = [d for d in range(x.ndim) if d not in ax]
    moved = np.transpose(x, kept + list(ax)).reshape([x.shape[d] for d in kept] + [n])
    pick = (np.argmax if op == "max" else np.argmin)(moved, axis=-1)
    hot = np.zeros_like(moved)
    np.put_along_axis(hot, pick[..., None], 1.0, axis=-1)
    hot = hot * f64(g)[..., None]
    hot = hot.reshape([x.shape[d] for d in kept] + [x.shape[d] for d in ax])
    return np.transpose(hot, np.argsort(kept + list(ax)))


def check_backward(got, op, g, x_or_shape, axis=None, ddof=0, what=""):
    dtype = np.dtype(g.dtype).name
    want = grad_reference(op, g, x_or_shape, axis, ddof)
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == g.dtype, (what, got.shape, want.shape, got.dtype)
    gg = f64(got)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(gg), nan, err_msg=f"{what} {op}_backward: NaN positions differ")
    gg, want = np.where(nan, 0, gg), np.where(nan, 0, want)
    if op in ("sum", "max", "min"):
        np.testing.assert_array_equal(gg, want, err_msg=f"{what} {op}_backward")
        return
    if op == "mean":
        tol = ulp(want, dtype)
    else:
        x = f64(x_or_shape)
        ax = axes_of(axis, x.ndim)
        n = int(np.prod([x.shape[d] for d in ax]))
        mean = np.abs(np.sum(x, axis=ax, keepdims=True) / n)
        with np.errstate(all="ignore"):
            scale = np.abs(_keep(g, x.shape, ax)) * 2 / (n - ddof)
        tol = 2 * ulp(want, dtype) + 8 * EPS_ACC[dtype] * scale * (np.abs(x) + mean + 1)
    err = np.abs(gg - want)
    assert not (err > tol).any(), f"{what} {op}_backward: worst err {err.max():.3g}"


# ---- cases and drivers shared by tests/test_reduction_cpu.py and tests/gpu/test_reduction_gpu.py

OPS = ("sum", "mean", "max", "min", "var", "argmax", "argmin")

# (shape, axis, keepdims, view): view "T" = x.T, "step" = x[:, ::2], "perm" = x.transpose(2, 0, 1),
# "perm4" = x.transpose(2, 1, 0, 3), "step4" = x[:, :, ::2, :]
FORWARD_CASES = [
    ((1,), None, False, None),
    ((7,), 0, True, None),
    ((13,), -1, False, None),
    ((1823, 781), -1, False, None),
    ((1823, 781), 0, False, None),
    ((1823, 781), None, True, None),
    ((1823, 781), (0, 1), False, None),
    ((3, 300007), -1, False, None),          # rows longer than 2^18 (split over blocks)
    ((270001, 3), 0, False, None),           # a reduction over 2^18+ along axis 0
    ((2 ** 18 + 5,), None, False, None),
    ((), None, False, None),                 # 0-d
    ((5, 6, 7), (0, 2), False, None),        # non-adjacent
    ((5, 6, 7), (1, 2), True, None),         # adjacent
    ((2, 3, 4, 5), (1, 3), True, None),
    ((2, 3, 4, 5), (-1, -3, 0), False, None),
    ((2, 3, 4, 5), -2, False, None),
    ((2, 1, 4, 1, 5), (0, 2), False, None),  # size-1 axes between reduced ones
    ((96, 130), 1, False, "step"),           # x[:, ::2]
    ((257, 129), 0, False, "T"),             # x.T, axis 0 of the view
    ((257, 129), -1, True, "T"),
    ((6, 7, 8), (0, 1), False, "perm"),      # transposed 3-D view, several axes
    ((64, 4096), -1, False, None),           # 16-byte loads along rows
    ((4096, 64), 0, False, None),            # 16-byte loads along columns
    ((8, 40, 64), 1, False, None),
    ((32, 24, 28, 28), (0, 2, 3), False, None),  # per-channel of NCHW: reduced in passes (two runs)
    ((3, 5, 4, 6, 7), (0, 2, 4), True, None),    # three runs of reduced axes, keepdims
    ((4, 3, 2, 5), (1, 3), False, "perm4"),      # passes over a transposed view, kept axes in another order
    ((3, 4, 5, 6), (0, 2), False, "step4"),      # passes after a C-order copy of a strided view
]


def case_id(c):
    shape, axis, keepdims, view = c
    return f"{'x'.join(map(str, shape)) or '0d'}-ax{axis}{'-k' if keepdims else ''}{'-' + view if view else ''}"


def apply_view(a, view):
    if view is None:
        return a
    if view == "T":
        return a.T
    if view == "step":
        return a[:, ::2]
    if view == "perm":
        return a.transpose(2, 0, 1)
    if view == "perm4":
        return a.transpose(2, 1, 0, 3)
    if view == "step4":
        return a[:, :, ::2, :]
    raise ValueError(view)


def _base_shape(shape: tuple, view):
    """The shape of the array apply_view makes a view of `shape` from."""
    if view == "T":
        return shape[::-1]
    if view == "step":
        return (shape[0], shape[1] * 2)
    if view == "perm":
        return (shape[1], shape[2], shape[0])
    if view == "perm4":
        return (shape[2], shape[1], shape[0], shape[3])
    if view == "step4":
        return (shape[0], shape[1], shape[2] * 2, shape[3])
    return shape


def run_forward_case(b, dev, host, rng, case, dtype):
    """Every op on one case: normal data against tolerances, integer data exactly."""
    shape, axis, keepdims, view = case
    base_shape = _base_shape(shape, view)
    for kind in ("normal", "ints"):
        xb = normal(rng, base_shape, dtype, loc=0.5) if kind == "normal" else ints(rng, base_shape, dtype)
        x = apply_view(xb, view)
        xd = apply_view(dev(xb), view)
        assert x.shape == tuple(shape)
        for op in OPS:
            if op in ("argmax", "argmin") and not (axis is None or isinstance(axis, int)):
                continue
            got = getattr(b, op)(xd, axis=axis, keepdims=keepdims)
            check_forward(host(got), op, x, axis, keepdims, exact=kind == "ints",
                          what=f"{dtype} {kind} {case_id(case)}")
            if op == "var":
                got = b.var(xd, axis=axis, ddof=1, keepdims=keepdims)
                check_forward(host(got), op, x, axis, keepdims, ddof=1, what=f"{dtype} {kind} ddof=1 {case_id(case)}")
    assert np.array_equal(host(b.reduce_sum(xd, axis)), host(b.sum(xd, axis)))


BACKWARD_CASES = [
    ((37,), None, False),
    ((31, 45), -1, False),
    ((31, 45), 0, True),
    ((4, 5, 6), (0, 2), False),
    ((4, 5, 6), (1, 2), True),
    ((3, 300007), 1, False),
    ((), None, False),
]


def run_backward_case(b, dev, host, rng, case, dtype):
    shape, axis, keepdims = case
    x = normal(rng, shape, dtype, loc=3.0)
    x_int = ints(rng, shape, dtype)  # ties: the gradient must go to the first extreme only
    rshape = expected_shape(shape, axis, keepdims)
    g = normal(rng, rshape, dtype)
    g_flat = g.reshape(expected_shape(shape, axis, False))
    what = f"{dtype} {shape} axis={axis} keepdims={keepdims}"
    check_backward(host(b.sum_backward(dev(g), shape, axis, keepdims)), "sum", g_flat, shape, axis, what=what)
    check_backward(host(b.mean_backward(dev(g), shape, axis, keepdims)), "mean", g_flat, shape, axis, what=what)
    for ddof in (0, 1):
        check_backward(host(b.var_backward(dev(g), dev(x), axis, ddof, keepdims)), "var", g_flat, x, axis, ddof,
                       what=what)
    for xx in (x, x_int):
        check_backward(host(b.max_backward(dev(g), dev(xx), axis, keepdims)), "max", g_flat, xx, axis, what=what)
        check_backward(host(b.min_backward(dev(g), dev(xx), axis, keepdims)), "min", g_flat, xx, axis, what=what)


# (x's shape, the memory order of `like` (slowest axis first), axis, keepdims) of sum/mean_backward
# with like=: global average pooling of a channels-last (N, C, H, W) x (and 3-D / 5-D), a reduction
# over the channels, a transpose, and keepdims
LIKE_CASES = [((4, 6, 5, 7), (0, 2, 3, 1), (2, 3), False), ((3, 8, 9), (0, 2, 1), 2, False),
              ((2, 4, 3, 5, 6), (0, 2, 3, 4, 1), (2, 3, 4), True), ((4, 6, 5, 7), (0, 2, 3, 1), 1, False),
              ((5, 7), (1, 0), 0, True), ((3, 4, 5), (0, 2, 1), 0, False)]   # (the last: kept axes reordered)


def run_backward_like(b, dev, host, rng, case, dtype):
    """sum_backward / mean_backward with like= a dense view in another memory order: the gradient in
    like's layout (its strides), values as without like; a like that is not dense (a slice) or
    C-contiguous gives a C-contiguous gradient."""
    shape, order, axis, keepdims = case
    base = dev(np.zeros(tuple(shape[a] for a in order), np_dtype(dtype)))
    like = base.transpose(tuple(np.argsort(order)))   # an x-shaped view of memory in `order`
    g = normal(rng, expected_shape(shape, axis, keepdims), dtype)
    g_flat = g.reshape(expected_shape(shape, axis, False))
    what = f"{dtype} {shape} order={order} axis={axis}"
    for op in ("sum", "mean"):
        r = getattr(b, f"{op}_backward")(dev(g), shape, axis, keepdims, like=like)
        assert r.shape == shape and r.strides == like.strides, (what, r.strides, like.strides)
        check_backward(host(r), op, g_flat, shape, axis, what=what)
    plain = dev(np.zeros(shape, np_dtype(dtype)))
    wide = dev(np.zeros(shape[:-1] + (2 * shape[-1],), np_dtype(dtype)))[..., ::2]   # not dense
    for other in (plain, wide):
        r = b.mean_backward(dev(g), shape, axis, keepdims, like=other)
        assert r.flags.c_contiguous, what
        check_backward(host(r), "mean", g_flat, shape, axis, what=what)


def run_nan_inf(b, dev, host, dtype):
    """NaN and inf as NumPy: sum/mean/max/min/var propagate NaN, argmax returns the first NaN."""
    dt = np_dtype(dtype)
    n = 5000
    x = np.zeros((6, n), np.float64)
    x[:, :] = np.linspace(-1, 1, n)
    x[0, 4000] = np.nan                       # one NaN late in the row
    x[1, 3999], x[1, 7] = np.nan, np.nan      # the first NaN wins
    x[2, 10] = np.inf                         # sum inf, var NaN
    x[3, 10], x[3, 20] = np.inf, -np.inf      # sum NaN
    x[4, :] = -np.inf                         # argmax 0, max -inf
    x[5, 123] = np.inf
    x[5, 4567] = np.inf                       # tie of infs: first
    x = x.astype(dt)
    xd = dev(x)
    for axis in (1, None):
        for op in OPS:
            check_forward(host(getattr(b, op)(xd, axis=axis)), op, x, axis, what=f"{dtype} nan/inf axis={axis}")
    xt = np.ascontiguousarray(x.T)            # the same along columns
    xtd = dev(xt)
    for op in OPS:
        check_forward(host(getattr(b, op)(xtd, axis=0)), op, xt, 0, what=f"{dtype} nan/inf columns")
    assert host(b.argmax(xd, axis=1))[1] == 7
    assert host(b.argmax(xd, axis=1))[5] == 123
