"""max_pool2d / avg_pool2d forward and backward against torch, NCHW and channels-last (torch's
channels_last tensors; cudakit reads the same memory as (N, C, H, W) views of it), bfloat16 and
float32: does pooling run near copy bandwidth? Device time, each call behind an L2 flush
(bench.timing's cold samples), interleaved with torch. torch's max backward is the op autograd
calls (max_pool2d_with_indices_backward, reading the int64 indices its forward saved); cudakit's
recomputes each window's winner from x. The anchor: a device-to-device copy of x's bytes, timed
in the same interleaving (copy GB/s counts its read and write). GB/s from the bytes each side must
move: forward x read + y written; backward dy read + dx written, + x read for max (cudakit; torch
reads its indices instead).
    python3 benchmarks/sweeps/pooling.py [--tag T] [--planes all=P | kernel=P,...] [--nchw] [--two-pass] [--out F]
--planes: the planes a thread of cudakit's NCHW kernels takes (kernels/pooling.py PLANES; 1 or 4);
--nchw: the NCHW cases only; --two-pass: the NCHW max backward of overlapping windows by its two
launches (pooling.TILED False: 16-bit data of many channels then through the channels-last kernels)
rather than the one launch of tiles.
Prints VARIANT lines (median ms, x torch = torch's time / cudakit's); --out writes the rows."""
import sys

import cupy as cp
import torch
from _passes import time_passes
from _results import dump_rows

import cudakit

argv = sys.argv[1:]
tag = argv[argv.index("--tag") + 1] if "--tag" in argv else "tree"
if "--planes" in argv:
    from cudakit.kernels import pooling
    for item in argv[argv.index("--planes") + 1].split(","):
        k, v = item.split("=")
        for name in (pooling.PLANES if k == "all" else [k]):
            pooling.PLANES[name] = int(v)
if "--two-pass" in argv:
    from cudakit.kernels import pooling
    pooling.TILED = False
# (kind, N, C, H = W, kernel, stride, padding)
CASES = [("max", 32, 64, 112, 2, 2, 0),     # the bench's max_pool2d row
         ("max", 32, 64, 112, 3, 2, 1),     # ResNet's stem pooling: overlapping windows
         ("avg", 32, 64, 112, 2, 2, 0),
         ("max", 32, 256, 28, 3, 1, 1),     # stride 1: every input element in nine windows
         ("max", 32, 256, 20, 5, 1, 2),     # YOLO's SPPF pooling: 25 windows an element
         ("max", 32, 512, 13, 5, 1, 2),     # ... at a 416 image: odd planes
         ("max", 16, 128, 56, 3, 1, 1),     # planes cut into tiles
         ("avg", 64, 512, 14, 3, 2, 1)]
ITEM = {"bfloat16": 2, "float32": 4}
rows = []


def run(kind, n, c, hw, ks, st, pad, dtype, cl):
    tdt = getattr(torch, dtype)
    tx = torch.randn(n, c, hw, hw, device="cuda", dtype=tdt)
    if cl:
        tx = tx.contiguous(memory_format=torch.channels_last)
    ho = (hw + 2 * pad - ks) // st + 1
    tg = torch.randn(n, c, ho, ho, device="cuda", dtype=tdt)
    if cl:
        tg = tg.contiguous(memory_format=torch.channels_last)
    x, g = cp.from_dlpack(tx), cp.from_dlpack(tg)
    fwd = getattr(cudakit, f"{kind}_pool2d")
    bwd = getattr(cudakit, f"{kind}_pool2d_backward")
    tf = getattr(torch.nn.functional, f"{kind}_pool2d")
    if kind == "max":
        _, idx = torch.nn.functional.max_pool2d(tx, ks, st, pad, return_indices=True)
        tb = lambda: torch.ops.aten.max_pool2d_with_indices_backward(tg, tx, [ks, ks], [st, st], [pad, pad],  # noqa: E731
                                                                     [1, 1], False, idx)
    else:
        tb = lambda: torch.ops.aten.avg_pool2d_backward(tg, tx, [ks, ks], [st, st], [pad, pad], False, True, None)  # noqa: E731
    # outputs agree with torch (a max is exact; a mean to rounding)
    y = fwd(x, ks, st, pad)
    ty = tf(tx, ks, st, pad)
    err = float(cp.abs(y.astype(cp.float32) - cp.from_dlpack(ty).astype(cp.float32)).max())
    cl_out = bool(y.strides[1] == y.itemsize)
    big, small = n * c * hw * hw * ITEM[dtype], n * c * ho * ho * ITEM[dtype]
    name = f"{kind}{ks}s{st}p{pad} {n}x{c}x{hw}x{hw} {'cl' if cl else 'nchw'} {dtype}"
    time_passes(rows, tag, name, 44, big,
                (("fwd", lambda: fwd(x, ks, st, pad), lambda: tf(tx, ks, st, pad), big + small),
                 ("bwd", lambda: bwd(g, x, ks, st, pad), tb, small + big + (big if kind == "max" else 0))),
                {"output_channels_last": cl_out, "max_abs_vs_torch": err}, f"out {'cl' if cl_out else 'nchw'}")

for case in CASES:
    for dtype in ("bfloat16", "float32"):
        for cl in (False,) if "--nchw" in argv else (False, True):
            run(*case, dtype, cl)
dump_rows(argv, __doc__, rows)
