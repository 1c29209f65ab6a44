"""`cudakit bench --check`: each checked case's op against cudakit's CPU backend in float64.

This is not an independent reference: the float64 run is cudakit's own NumPy code (on a CPU run,
the very code under test, in float64), so it finds dtype and precision errors, not formula errors;
the tests check every op against independent float64 formulas.

A case's `check()` gives (fn, args): a cudakit call on fresh inputs like the benchmark's. fn runs
on them (the backend the inputs live on: the GPU in a GPU run) and on float64 host copies of the
floating inputs (integer inputs, e.g. class targets, are copied as they are), where cudakit's
CPU backend computes in float64. The error of each output is normwise:
max |got - want| / max |want| over the finite elements, inf where NaN or inf differ; integer
outputs (argmax) count mismatches (tolerance 0). It passes at the tolerance of the output's
dtype: 4 unit roundoffs for 16-bit outputs (u = 2^-8 bfloat16, 2^-11 float16; one rounding of the
result is 1 u), 1e-5 for float32 (about 170 u: reductions add millions of terms), 1e-12 float64.
"""
from __future__ import annotations

import numpy as np

import cudakit

TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "float16": 4 * 2.0 ** -11, "bfloat16": 4 * 2.0 ** -8}


def to_host(x):
    """x as a NumPy array (bfloat16 through ml_dtypes), wherever it lives."""
    if isinstance(x, np.ndarray):
        return x
    if np.isscalar(x):
        return np.asarray(x)
    return cudakit.get_backend("cuda").to_numpy(x)


def _float64(x):
    h = to_host(x)
    return h if h.dtype.kind in "biu" else h.astype(np.float64)


def _outputs(r) -> tuple:
    return tuple(r) if isinstance(r, (tuple, list)) else (r,)


def error(got, want) -> float:
    """Normwise relative error of `got` against the float64 `want` (see the module docstring)."""
    g, w = to_host(got), np.asarray(want)
    if g.shape != w.shape:
        return float("inf")
    if g.dtype.kind in "biu":
        return float(np.count_nonzero(g != w)) / max(g.size, 1)
    g = g.astype(np.float64)
    fin = np.isfinite(g) & np.isfinite(w)
    same_special = (np.isnan(g) & np.isnan(w)) | ((g == w) & np.isinf(w))
    if not np.all(fin | same_special):
        return float("inf")
    if not fin.any():
        return 0.0
    scale = float(np.abs(w[fin]).max()) or 1.0
    return float(np.abs(g[fin] - w[fin]).max()) / scale


def check(case) -> dict:
    """{"max_error", "tolerance", "ok", "elements"} of one case (the worst of its outputs)."""
    fn, args = case.check()
    got = _outputs(fn(*args))
    want = _outputs(fn(*(_float64(a) if hasattr(a, "dtype") else a for a in args)))
    results = []   # (error, tolerance) of each output
    for g, w in zip(got, want):
        h = to_host(g)
        tol = 0.0 if h.dtype.kind in "biu" else TOLERANCE.get(h.dtype.name, TOLERANCE["float32"])
        results.append((error(g, w), tol))
    worst, tol = max(results, key=lambda r: r[0] / r[1] if r[1] else (float("inf") if r[0] else 0.0))
    elements = sum(int(np.prod(a.shape)) for a in args if hasattr(a, "shape"))
    return {"max_error": worst, "tolerance": tol, "ok": all(e <= t for e, t in results), "elements": elements}
