"""batch_norm (training, with running statistics) forward and backward against torch, NCHW and
channels-last (torch's channels_last tensors; cudakit reads the same memory as (N, C, H, W) views
of it), bfloat16 and float32: ResNet-50's batch norms at batch 32 and a BatchNorm1d-shaped (N, C).
Device time, each call behind an L2 flush (bench.timing's cold samples), interleaved with torch
(F.batch_norm; the backward torch.autograd.grad of its output, whichever kernels torch picks) and
with a device-to-device copy of x's bytes (the anchor; copy GB/s counts its read and write).
GB/s from the bytes the two-pass algorithm moves: forward x read twice + y written (3 x's bytes);
backward x and dy read twice + dx written (5 x's bytes).
--fused: batch norm with its epilogue fused instead, against torch's eager composition of the same
work: "res+relu" relu(bn(x) + r) (cudakit's residual= and activation="relu", 4 x's bytes; torch
F.batch_norm, +, relu), "relu" relu(bn(x)) (3 x's bytes; torch F.batch_norm, relu), "bwd-relu"
the gradients of relu(bn(x)) (cudakit's batch_norm_backward(activation="relu"), 5 x's bytes;
torch.autograd.grad of torch's relu(bn(x)): threshold_backward, then the batch norm's backward).
--resident-ab: the forward and backward also as the three launches (x, and dy, read twice) with the
single-read kernels (ck_bn_resident, ck_bn_bwd_resident: kept in shared memory; the staged
ck_bn_small / ck_bn_bwd_small: a channel a block) switched off,
passes "fwd-3launch" and "bwd-3launch" ("res+relu-3launch", "bwd-relu-3launch" with --fused),
through the backend's unplanned call (device time); the pass's row gets x_three_launches, the three
launches' time over the pass's. Each pass is timed in its own window, interleaved with torch and
the copy, so x_three_launches compares two windows of one run: ratios within a few percent of 1
are within the drift between windows.
--whole-tiles: the single-read kernels only where x (and dy) fit on chip whole, not with tiles of
part of each block's rows (normalization.BN_RESIDENT_PARTIAL_FROM(_FORWARD) None: a run's A/B switch).
--no-staged: never the staged one-block-a-channel kernels (normalization.BN_STAGED off).
--nchw: the NCHW layout of each case only.
--order-ab: the forward and backward also with normalization.BN_STAGED_FIRST flipped (where both
the staged one-block-a-channel kernels and ck_bn_resident's grid-barrier ones run, the other
first), passes "fwd-order" and "bwd-order", x_order on the pass's row.
    python3 benchmarks/sweeps/batch_norm.py [--tag T] [--out F] [--fused] [--resident-ab] [--whole-tiles]
                                           [--no-staged] [--nchw] [--order-ab]
                                           [--cases NxCxHxW,...]
Prints VARIANT lines (median ms, x torch = torch's time / cudakit's); --out writes the rows."""
import sys

import cupy as cp
import torch
from _passes import time_passes
from _results import dump_rows

import cudakit

argv = sys.argv[1:]
tag = argv[argv.index("--tag") + 1] if "--tag" in argv else "tree"
# (N, C, H, W): ResNet-50's batch norms at batch 32 (224x224 input) and an (N, C) one
CASES = [(32, 64, 112, 112), (32, 256, 56, 56), (32, 128, 28, 28), (32, 512, 28, 28), (32, 1024, 14, 14),
         (32, 2048, 7, 7), (8192, 1024)]
if "--whole-tiles" in argv:
    from cudakit.kernels import normalization
    normalization.BN_RESIDENT_PARTIAL_FROM = normalization.BN_RESIDENT_PARTIAL_FROM_FORWARD = None
if "--no-staged" in argv:
    from cudakit.kernels import normalization
    normalization.BN_STAGED = False
if "--cases" in argv:   # --cases 32x128x28x28,8192x1024: these of CASES only
    CASES = [tuple(map(int, c.split("x"))) for c in argv[argv.index("--cases") + 1].split(",")]
rows = []


def _inputs(shape, dtype, cl):
    """torch's (x and a residual r in the case's layout, grad_out g, weight w and bias b (x, w and b
    requiring grad), running mean and var), then CuPy's views of the same memory (running
    statistics of their own)."""
    tdt = getattr(torch, dtype)
    c = shape[1]
    fmt = torch.channels_last if cl and len(shape) == 4 else torch.contiguous_format
    tx, tr, tg = (torch.randn(*shape, device="cuda", dtype=tdt).contiguous(memory_format=fmt) for _ in range(3))
    tw, tb = torch.randn(c, device="cuda", dtype=tdt), torch.randn(c, device="cuda", dtype=tdt)
    for t in (tx, tw, tb):
        t.requires_grad_(True)
    trm, trv = torch.zeros(c, device="cuda", dtype=tdt), torch.ones(c, device="cuda", dtype=tdt)
    x, r, g = cp.from_dlpack(tx.detach()), cp.from_dlpack(tr), cp.from_dlpack(tg)
    w, b = cp.from_dlpack(tw.detach()), cp.from_dlpack(tb.detach())
    return (tx, tr, tg, tw, tb, trm, trv), (x, r, g, w, b, cp.zeros(c, x.dtype), cp.ones(c, x.dtype))


def _with_switch(name, value, method, *args, **kw):
    """The backend's `method` (no traced plan) with normalization's switch `name` set to `value`
    for the call."""
    from cudakit.kernels import normalization as nk
    was = getattr(nk, name)
    setattr(nk, name, value)
    try:
        return getattr(cudakit.get_backend("cuda"), method)(*args, **kw)
    finally:
        setattr(nk, name, was)


def _three_launches(method, *args, **kw):
    """The backend's `method` with the single-read kernels off."""
    return _with_switch("BN_RESIDENT", False, method, *args, **kw)


def _other_order(method, *args, **kw):
    """The backend's `method` with normalization.BN_STAGED_FIRST flipped."""
    from cudakit.kernels import normalization as nk
    return _with_switch("BN_STAGED_FIRST", not nk.BN_STAGED_FIRST, method, *args, **kw)


def run(shape, dtype, cl):
    (tx, _, tg, tw, tb, trm, trv), (x, _, g, w, b, rm, rv) = _inputs(shape, dtype, cl)
    tf = lambda: torch.nn.functional.batch_norm(tx, trm, trv, tw, tb, True, 0.1, 1e-5)  # noqa: E731
    ty = tf()
    tbwd = lambda: torch.autograd.grad(ty, (tx, tw, tb), tg, retain_graph=True)  # noqa: E731
    y, sm, si = cudakit.batch_norm_with_stats(x, w, b, rm, rv, True, 0.1, 1e-5)
    err = float(cp.abs(y.astype(cp.float32) - cp.from_dlpack(ty.detach()).astype(cp.float32)).max())
    dx = cudakit.batch_norm_backward(g, x, w, sm, si)[0]
    tdx = tbwd()[0]
    derr = float(cp.abs(dx.astype(cp.float32) - cp.from_dlpack(tdx).astype(cp.float32)).max())
    cl_out = bool(len(shape) == 4 and y.strides[1] == y.itemsize and dx.strides[1] == dx.itemsize)
    name = f"{'x'.join(map(str, shape))} {'cl' if cl else 'nchw'} {dtype}"
    passes = [("fwd", lambda: cudakit.batch_norm_with_stats(x, w, b, rm, rv, True, 0.1, 1e-5), tf, 3 * x.nbytes),
              ("bwd", lambda: cudakit.batch_norm_backward(g, x, w, sm, si), tbwd, 5 * x.nbytes)]
    if "--resident-ab" in argv:
        passes += [("fwd-3launch", lambda: _three_launches("batch_norm_with_stats", x, w, b, rm, rv, True, 0.1, 1e-5),
                    tf, 3 * x.nbytes),
                   ("bwd-3launch", lambda: _three_launches("batch_norm_backward", g, x, w, sm, si), tbwd, 5 * x.nbytes)]
    if "--order-ab" in argv:
        passes += [("fwd-order", lambda: _other_order("batch_norm_with_stats", x, w, b, rm, rv, True, 0.1, 1e-5),
                    tf, 3 * x.nbytes),
                   ("bwd-order", lambda: _other_order("batch_norm_backward", g, x, w, sm, si), tbwd, 5 * x.nbytes)]
    time_passes(rows, tag, name, 30, x.nbytes, passes,
                {"output_channels_last": cl_out, "max_abs_y_vs_torch": err, "max_abs_dx_vs_torch": derr},
                f"out {'cl' if cl_out else 'nchw'} err {err:.3g} {derr:.3g}")


def run_fused(shape, dtype, cl):
    (tx, tr, tg, tw, tb, trm, trv), (x, r, g, w, b, rm, rv) = _inputs(shape, dtype, cl)
    F = torch.nn.functional
    t_res = lambda: torch.relu(F.batch_norm(tx, trm, trv, tw, tb, True, 0.1, 1e-5) + tr)  # noqa: E731
    t_relu = lambda: torch.relu(F.batch_norm(tx, trm, trv, tw, tb, True, 0.1, 1e-5))  # noqa: E731
    ty = t_relu()
    t_bwd = lambda: torch.autograd.grad(ty, (tx, tw, tb), tg, retain_graph=True)  # noqa: E731
    y, sm, si = cudakit.batch_norm_with_stats(x, w, b, rm, rv, True, 0.1, 1e-5, activation="relu")
    err = float(cp.abs(y.astype(cp.float32) - cp.from_dlpack(ty.detach()).astype(cp.float32)).max())
    dx = cudakit.batch_norm_backward(g, x, w, sm, si, beta=b, activation="relu")[0]
    derr = float(cp.abs(dx.astype(cp.float32) - cp.from_dlpack(t_bwd()[0]).astype(cp.float32)).max())
    name = f"{'x'.join(map(str, shape))} {'cl' if cl else 'nchw'} {dtype}"
    passes = [("res+relu", lambda: cudakit.batch_norm_with_stats(x, w, b, rm, rv, True, 0.1, 1e-5, residual=r,
                                                                 activation="relu"), t_res, 4 * x.nbytes),
              ("relu", lambda: cudakit.batch_norm_with_stats(x, w, b, rm, rv, True, 0.1, 1e-5, activation="relu"),
               t_relu, 3 * x.nbytes),
              ("bwd-relu", lambda: cudakit.batch_norm_backward(g, x, w, sm, si, beta=b, activation="relu"), t_bwd,
               5 * x.nbytes)]
    if "--resident-ab" in argv:
        passes += [("res+relu-3launch", lambda: _three_launches("batch_norm_with_stats", x, w, b, rm, rv, True, 0.1,
                                                                1e-5, residual=r, activation="relu"), t_res, 4 * x.nbytes),
                   ("bwd-relu-3launch", lambda: _three_launches("batch_norm_backward", g, x, w, sm, si, beta=b,
                                                                activation="relu"), t_bwd, 5 * x.nbytes)]
    time_passes(rows, tag, name, 30, x.nbytes, passes,
                {"fused": True, "max_abs_y_vs_torch": err, "max_abs_dx_vs_torch": derr},
                f"fused err {err:.3g} {derr:.3g}")


for shape in CASES:
    for dtype in ("bfloat16", "float32"):
        for cl in (False, True) if len(shape) == 4 and "--nchw" not in argv else (False,):
            (run_fused if "--fused" in argv else run)(shape, dtype, cl)


def variant_ratios(rows: list, suffix: str, field: str) -> None:
    """Each pass timed also as a variant (pass name + suffix: the three launches of --resident-ab,
    "-3launch"; the other order of --order-ab, "-order") gets `field`, the variant's time over its
    own (above 1: the pass faster), on the pass's row."""
    alone = {(r["case"], r["pass"][:-len(suffix)]): r["cudakit_ms"] for r in rows if r["pass"].endswith(suffix)}
    for r in rows:
        if (r["case"], r["pass"]) in alone:
            r[field] = round(alone[(r["case"], r["pass"])] / r["cudakit_ms"], 3)


variant_ratios(rows, "-3launch", "x_three_launches")
variant_ratios(rows, "-order", "x_order")
dump_rows(argv, __doc__, rows)
