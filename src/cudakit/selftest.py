"""`cudakit selftest [--sanitize]`: a representative call of every kernel family on the GPU, each
checked against the CPU backend on the same inputs.

cases() lists the calls: every family (elementwise and activations, forward and backward;
reductions; softmax and cross-entropy; layernorm, rmsnorm, batch_norm; layout; dropout; matrix
products and the fused linear + GELU; attention; conv2d and pooling; the optimizers), every dtype
each takes, and shapes that reach each kernel variant (register, loop and shared-memory rows, split
and column reductions, the direct and implicit-GEMM convolutions), with odd sizes and misaligned or
strided views. run() calls each on a "device" backend and on the "reference" backend (CUDA and CPU
by default) and compares the outputs normwise (cudakit.bench.accuracy.error) within TOLERANCE.

With --sanitize the command runs itself again under NVIDIA compute-sanitizer once per tool
(memcheck, racecheck, synccheck, initcheck) and reports each tool's error count (sanitizer_command
and parse_error_summary). Nothing here needs a GPU until run() is called on the CUDA backend.
"""
from __future__ import annotations

import math
import re
import shutil
import sys
import time
from dataclasses import dataclass

import numpy as np

TOLERANCE = {"float16": 8 * 2.0 ** -11, "bfloat16": 8 * 2.0 ** -8, "float32": 1e-4, "float64": 1e-10}
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
FLOATS = ("float16", "bfloat16", "float32", "float64")


@dataclass
class Case:
    """fn(*args) on arrays of one backend; args: NumPy arrays (moved to each backend) and plain
    values; view: a function applied to each array argument after the move (a misaligned or
    strided view), or None."""
    family: str
    label: str
    fn: object
    args: tuple
    view: object = None
    exact: bool = False   # bit-identical on both backends (dropout's mask, layout)


def _dt(name):
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _rand(rng, shape, dtype, scale=1.0, loc=0.0):
    return np.asarray(loc + scale * rng.standard_normal(shape)).astype(_dt(dtype))


def cases(quick: bool = False, families=None) -> list:
    """The selftest's calls (see the module docstring). quick: smaller shapes (for the sanitizer
    runs, which are 10-100x slower), the same variants where a smaller shape still reaches them."""
    import cudakit as ck
    rng = np.random.default_rng(29)
    big = 1 << (20 if quick else 23)
    out: list = []

    def add(family, label, fn, *args, view=None, exact=False):
        if families is None or family in families:
            out.append(Case(family, label, fn, args, view, exact))

    misaligned = lambda a: a[1:] if a.ndim == 1 else a  # noqa: E731
    strided = lambda a: a[..., ::2]  # noqa: E731
    for dt in FLOATS:
        for n in (1, 1023, big + 3):
            a, b = _rand(rng, n, dt), _rand(rng, n, dt, loc=3.0)
            for op in ("add", "sub", "mul", "div"):
                add("elementwise", f"{op} {dt} n={n}", getattr(ck, op), a, b)
            x, g = _rand(rng, n, dt, 3.0), _rand(rng, n, dt)
            for op in ("relu", "sigmoid", "tanh", "silu", "gelu"):
                add("activations", f"{op} {dt} n={n}", getattr(ck, op), x)
                add("activations", f"{op}_backward {dt} n={n}", getattr(ck, op + "_backward"), g, x)
            add("activations", f"gelu erf {dt} n={n}", lambda x: ck.gelu(x, "none"), x)
            add("activations", f"leaky_relu {dt} n={n}", lambda x: ck.leaky_relu(x, 0.1), x)
        add("elementwise", f"add misaligned {dt}", ck.add, _rand(rng, 4097, dt), _rand(rng, 4097, dt), view=misaligned)
        add("elementwise", f"mul strided {dt}", ck.mul, _rand(rng, (64, 66), dt), _rand(rng, (64, 66), dt), view=strided)
        add("elementwise", f"add broadcast {dt}", ck.add, _rand(rng, (33, 1, 7), dt), _rand(rng, (5, 7), dt))
        add("elementwise", f"add scalar {dt}", lambda a: ck.add(a, 2.5), _rand(rng, 999, dt))
        # reductions: one block, split, rows, columns, keepdims, unaligned
        for op in ("sum", "mean", "max", "min"):
            add("reduction", f"{op} all {dt} small", lambda x, op=op: getattr(ck, op)(x), _rand(rng, 77, dt))
            add("reduction", f"{op} all {dt} split", lambda x, op=op: getattr(ck, op)(x), _rand(rng, big + 5, dt))
            add("reduction", f"{op} rows {dt}", lambda x, op=op: getattr(ck, op)(x, -1), _rand(rng, (301, 1000), dt))
            add("reduction", f"{op} columns {dt}", lambda x, op=op: getattr(ck, op)(x, 0, True),
                _rand(rng, (1000, 301), dt))
        add("reduction", f"var {dt}", lambda x: ck.var(x, 1, 1), _rand(rng, (64, 513), dt, loc=100.0))
        add("reduction", f"argmax {dt}", lambda x: ck.argmax(x, 1), _rand(rng, (64, 513), dt))
        add("reduction", f"sum unaligned {dt}", lambda x: ck.sum(x), _rand(rng, 100003, dt), view=misaligned)
        # softmax rows: register, looped, shared-memory sizes; unaligned rows
        for cols in (7, 1000, 4096, 50001):
            x = _rand(rng, (16, cols), dt, 3.0)
            add("softmax", f"softmax {dt} cols={cols}", ck.softmax, x)
            add("softmax", f"log_softmax {dt} cols={cols}", ck.log_softmax, x)
            y = ck.softmax(x)
            add("softmax", f"softmax_backward {dt} cols={cols}", ck.softmax_backward, _rand(rng, (16, cols), dt), y)
            add("softmax", f"log_softmax_backward {dt} cols={cols}", ck.log_softmax_backward,
                _rand(rng, (16, cols), dt), ck.log_softmax(x))
        add("softmax", f"softmax axis 0 {dt}", lambda x: ck.softmax(x, 0), _rand(rng, (37, 5), dt))
        t = rng.integers(0, 1000, 64).astype(np.int64)
        t[3] = -100
        add("softmax", f"cross_entropy {dt}", lambda lg, t: ck.cross_entropy(lg, t), _rand(rng, (64, 1000), dt), t)
        add("softmax", f"cross_entropy_with_grad {dt}", lambda lg, t: ck.cross_entropy_with_grad(lg, t, "sum"),
            _rand(rng, (64, 1000), dt), t)
        # normalization: register rows (one and several a block), loop rows; statistics; backward
        for cols in (7, 768, 8193, 65536):
            rows = 4 if cols > 10000 else 33
            x = _rand(rng, (rows, cols), dt, 2.0, 1.0)
            w, b = _rand(rng, cols, dt), _rand(rng, cols, dt)
            add("normalization", f"layernorm {dt} cols={cols}", ck.layernorm_with_stats, x, w, b)
            add("normalization", f"rmsnorm {dt} cols={cols}", ck.rmsnorm_with_stats, x, w)
            _, m, r = ck.layernorm_with_stats(x, w, b)
            add("normalization", f"layernorm_backward {dt} cols={cols}", ck.layernorm_backward,
                _rand(rng, (rows, cols), dt), x, w, m, r)
            _, r2 = ck.rmsnorm_with_stats(x, w)
            add("normalization", f"rmsnorm_backward {dt} cols={cols}", ck.rmsnorm_backward,
                _rand(rng, (rows, cols), dt), x, w, r2)
        xb = _rand(rng, (8, 6, 9, 11), dt)
        add("normalization", f"batch_norm train {dt}",
            lambda x, rm, rv: ck.batch_norm_with_stats(x, None, None, rm, rv, True) + (rm, rv),
            xb, np.zeros(6, _dt(dt)), np.ones(6, _dt(dt)))
        _, sm, si = ck.batch_norm_with_stats(xb, training=True)
        add("normalization", f"batch_norm_backward {dt}", ck.batch_norm_backward, _rand(rng, xb.shape, dt), xb,
            np.ones(6, _dt(dt)), sm, si)
        # layout and dropout: bit-identical
        add("layout", f"transpose tiled {dt}", ck.transpose, _rand(rng, (257, 129), dt), exact=True)
        add("layout", f"permute rows {dt}", lambda x: ck.permute(x, (1, 0, 2)), _rand(rng, (5, 67, 33), dt),
            exact=True)
        add("layout", f"transpose strided {dt}", ck.transpose, _rand(rng, (64, 130), dt), view=strided, exact=True)
        for n in (1, 4097, big + 1):
            add("dropout", f"dropout {dt} n={n}", lambda x: ck.dropout(x, 0.3, 1234), _rand(rng, n, dt), exact=True)
        add("dropout", f"dropout_backward {dt}", lambda g: ck.dropout_backward(g, 0.5, 99), _rand(rng, 1001, dt),
            exact=True)
        add("dropout", f"dropout strided {dt}", lambda x: ck.dropout(x, 0.5, 7), _rand(rng, (40, 66), dt),
            view=strided, exact=True)
        # matrix products
        add("linalg", f"matmul {dt}", ck.matmul, _rand(rng, (3, 129, 65), dt), _rand(rng, (65, 257), dt))
        add("linalg", f"matmul transposed view {dt}", lambda a, b: ck.matmul(a.T, b), _rand(rng, (64, 96), dt),
            _rand(rng, (64, 33), dt))
        add("linalg", f"linear {dt}", ck.linear, _rand(rng, (77, 96), dt), _rand(rng, (130, 96), dt),
            _rand(rng, 130, dt))
        add("linalg", f"fused_linear_gelu {dt}", ck.fused_linear_gelu_with_preact, _rand(rng, (77, 96), dt),
            _rand(rng, (130, 96), dt), _rand(rng, 130, dt))
        add("linalg", f"linear_backward {dt}", ck.linear_backward, _rand(rng, (77, 130), dt),
            _rand(rng, (77, 96), dt), _rand(rng, (130, 96), dt))
        # attention: one short and one long sequence, causal, head dims
        for lq, lk, d, causal in ((17, 17, 64, True), (130, 257, 128, False), (1, 300, 32, False)):
            q, k, v = _rand(rng, (2, 3, lq, d), dt), _rand(rng, (2, 3, lk, d), dt), _rand(rng, (2, 3, lk, d), dt)
            add("attention", f"attention {dt} {lq}x{lk}x{d} causal={causal}",
                lambda q, k, v, c=causal: ck.attention_with_lse(q, k, v, None, c), q, k, v)
            o, lse = ck.attention_with_lse(q, k, v, None, causal)
            add("attention", f"attention_backward {dt} {lq}x{lk}x{d} causal={causal}",
                lambda g, q, k, v, o, lse, c=causal: ck.attention_backward(g, q, k, v, o, lse, None, c),
                _rand(rng, o.shape, dt), q, k, v, o, lse)
        # attention with masks: causal (bottom-right, Lq < Lk), a window and per-batch key lengths
        q, k, v = _rand(rng, (2, 3, 70, 64), dt), _rand(rng, (2, 3, 90, 64), dt), _rand(rng, (2, 3, 90, 64), dt)
        lens = np.array([90, 60], np.int64)
        kw = {"window": (30, None)}
        add("attention", f"attention masked {dt}",
            lambda q, k, v, n: ck.attention_with_lse(q, k, v, None, True, key_lengths=n, **kw), q, k, v, lens)
        o, lse = ck.attention_with_lse(q, k, v, None, True, key_lengths=lens, **kw)
        add("attention", f"attention_backward masked {dt}",
            lambda g, q, k, v, o, lse, n: ck.attention_backward(g, q, k, v, o, lse, None, True, key_lengths=n, **kw),
            _rand(rng, o.shape, dt), q, k, v, o, lse, lens)
        # convolution (implicit GEMM, depthwise direct, strided/dilated) and pooling
        x4 = _rand(rng, (2, 8, 17, 19), dt)
        add("conv", f"conv2d 3x3 {dt}", lambda x, w, b: ck.conv2d(x, w, b, 1, 1), x4, _rand(rng, (16, 8, 3, 3), dt),
            _rand(rng, 16, dt))
        add("conv", f"conv2d stride 2 dilation 2 {dt}", lambda x, w: ck.conv2d(x, w, None, 2, 2, 2), x4,
            _rand(rng, (5, 8, 3, 3), dt))
        add("conv", f"conv2d depthwise {dt}", lambda x, w: ck.conv2d(x, w, None, 1, 1, 1, 8), x4,
            _rand(rng, (8, 1, 3, 3), dt))
        add("conv", f"conv2d_backward {dt}", lambda g, x, w: ck.conv2d_backward(g, x, w, 1, 1), _rand(rng, (2, 16, 17, 19), dt),
            x4, _rand(rng, (16, 8, 3, 3), dt))
        add("conv", f"max_pool2d {dt}", lambda x: ck.max_pool2d(x, 3, 2, 1), x4)
        add("conv", f"avg_pool2d {dt}", lambda x: ck.avg_pool2d(x, 2), x4)
        add("conv", f"max_pool2d_backward {dt}", lambda g, x: ck.max_pool2d_backward(g, x, 3, 2, 1),
            _rand(rng, (2, 8, 9, 10), dt), x4)
        # optimizers: several tensors of one dtype (the multi-tensor launch), odd sizes
        shapes = [(3,), (129, 7), (1000,)]
        acc = "float64" if dt == "float64" else "float32"
        ps = [_rand(rng, s, dt) for s in shapes]
        gs = [_rand(rng, s, dt) for s in shapes]
        add("optimizers", f"adam {dt}", lambda *a: _adam(ck, a), *ps, *gs,
            *[np.zeros(s, acc) for s in shapes], *[np.zeros(s, acc) for s in shapes])
        add("optimizers", f"sgd momentum {dt}", lambda *a: _sgd(ck, a), *ps, *gs, *[np.zeros(s, acc) for s in shapes])
    return out


def _adam(ck, a):
    n = len(a) // 4
    p, g, m, v = (list(a[i * n:(i + 1) * n]) for i in range(4))
    st = ck.OptimizerState(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)
    for _ in range(2):
        ck.adam_update(p, g, m, v, st)
    return tuple(p + m + v)


def _sgd(ck, a):
    n = len(a) // 3
    p, g, b = (list(a[i * n:(i + 1) * n]) for i in range(3))
    st = ck.OptimizerState(lr=0.1, momentum=0.9, nesterov=True)
    for _ in range(2):
        ck.sgd_update(p, g, b, st)
    return tuple(p + b)


@dataclass
class Result:
    case: Case
    error: float | None      # the worst output's normwise error; None when the call raised
    tolerance: float
    ok: bool
    message: str = ""


def _outputs(r) -> tuple:
    return tuple(x for x in (r if isinstance(r, (tuple, list)) else (r,)) if x is not None)


def check(case: Case, device, reference) -> Result:
    """Run `case` on both backends (fresh copies of its arrays on each) and compare."""
    from .bench.accuracy import error
    dts = [a.dtype.name for a in case.args if isinstance(a, np.ndarray) and a.dtype.name in FLOATS]
    tol = 0.0 if case.exact else TOLERANCE[dts[0] if dts else "float32"]

    def call(be):
        args = [be.asarray(a.copy()) if isinstance(a, np.ndarray) else a for a in case.args]
        if case.view is not None:
            args = [case.view(a) if hasattr(a, "shape") and a.ndim else a for a in args]
        return [be.to_numpy(x) for x in _outputs(case.fn(*args))]
    try:
        got = call(device)
        device.synchronize()
        want = call(reference)
    except Exception as e:  # noqa: BLE001 -- a selftest reports every failure, and goes on
        return Result(case, None, tol, False, f"{type(e).__name__}: {e}"[:300])
    worst = 0.0
    for g, w in zip(got, want):
        if case.exact:
            e = 0.0 if (g.shape == w.shape and g.tobytes() == w.tobytes()) else math.inf
        else:
            e = error(g, w.astype(np.float64) if w.dtype.kind == "f" or w.dtype.name == "bfloat16" else w)
        worst = max(worst, e)
    if len(got) != len(want):
        return Result(case, math.inf, tol, False, f"{len(got)} outputs, the reference {len(want)}")
    return Result(case, worst, tol, worst <= tol)


def run(device="cuda", reference="cpu", quick: bool = False, families=None, progress=None) -> list:
    """Every case of cases(quick, families) on the `device` backend against the `reference` one;
    a list of Result. progress(result) is called after each."""
    from .backends import get_backend
    dev, ref = get_backend(device), get_backend(reference)
    results = []
    for c in cases(quick, families):
        r = check(c, dev, ref)
        results.append(r)
        if progress is not None:
            progress(r)
    return results


def sanitizer_command(tool: str, argv: list, sanitizer: str | None = None) -> list:
    """The command that runs `python -m cudakit selftest <argv>` under compute-sanitizer `tool`."""
    if tool not in TOOLS:
        raise ValueError(f"unknown compute-sanitizer tool {tool!r}; the selftest runs {', '.join(TOOLS)}")
    exe = sanitizer or shutil.which("compute-sanitizer") or "compute-sanitizer"
    extra = ["--racecheck-report", "all"] if tool == "racecheck" else []
    return [exe, "--tool", tool, *extra, "--error-exitcode", "0", "--print-limit", "20",
            sys.executable, "-m", "cudakit", "selftest", *argv]


_SUMMARY = re.compile(r"=========\s+(?:RACECHECK SUMMARY|ERROR SUMMARY):\s+(\d+)\s+(?:hazards? displayed|errors?)")


def parse_error_summary(output: str) -> int | None:
    """The error count of compute-sanitizer's output ("========= ERROR SUMMARY: 3 errors"; racecheck
    "RACECHECK SUMMARY: 2 hazards displayed (...)"): the sum of every summary line; None when there
    is none (the tool did not run to the end)."""
    counts = [int(m.group(1)) for m in _SUMMARY.finditer(output)]
    return sum(counts) if counts else None


def sanitize(argv: list, tools=TOOLS, timeout: float = 7200.0, log=None) -> dict:
    """Run the selftest (with argv) under each tool: {tool: {"errors", "seconds", "returncode",
    "tail"}}; errors None when the summary is missing."""
    import subprocess
    out = {}
    for tool in tools:
        t0 = time.perf_counter()
        cmd = sanitizer_command(tool, argv)
        if log is not None:
            log(" ".join(cmd))
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        text = p.stdout + p.stderr
        out[tool] = {"errors": parse_error_summary(text), "seconds": time.perf_counter() - t0,
                     "returncode": p.returncode, "tail": text[-3000:]}
    return out
