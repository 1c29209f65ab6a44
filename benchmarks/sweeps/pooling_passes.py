"""The max backward of overlapping windows pass by pass (kernels/pooling.py): the forward, the
winner bytes (ck_pool2d_argmax / ck_pool2d_cl_argmax), the gather from them (ck_pool2d_backward_idx
/ ck_pool2d_cl_backward_idx), the whole backward as the op runs it and, for NCHW, its two forms
(its own kernels; the channels-last ones, x and grad_out permuted and dx back:
pooling.VIA_CHANNELS_LAST_FROM), each launched alone, device time behind an L2 flush, next to
torch's backward; NCHW at 1 and 4 planes a thread, and channels-last.
(history/pooling/nvidia-h200-pooling-passes-tiled.json also times a one-pass NCHW form tried on
2026-11-29, by 16 x 32 tiles of dx of one plane with the windows' winners in shared memory: 2-3x
slower than the two passes at 3 x 3 / 2. The op now takes a form of 4 planes a block,
ck_pool2d_backward_tile, from 4 windows an element on average (pooling.TILED_FROM_WINDOWS): its
"op" column is that form there.)
    python3 benchmarks/sweeps/pooling_passes.py [--out F]
Prints VARIANT lines (median ms)."""
import sys

import cupy as cp
import torch
from _medians import medians
from _results import dump_rows

import cudakit
from cudakit.kernels import pooling as pl
from cudakit.kernels._common import ctype

argv = sys.argv[1:]
rows = []
planes = dict(pl.PLANES)   # (the shipped plane counts, restored after each case's variants)
for (n, c, hw, ks, st, pad) in ((32, 64, 112, 3, 2, 1), (32, 256, 28, 3, 1, 1), (32, 256, 20, 5, 1, 2),
                                (32, 8, 112, 3, 2, 1), (32, 4, 112, 3, 2, 1), (64, 12, 56, 3, 1, 1)):
    for dtype in ("bfloat16", "float32"):
        for cl in (False, True):
            tdt = getattr(torch, dtype)
            mf = torch.channels_last if cl else torch.contiguous_format
            tx = torch.randn(n, c, hw, hw, device="cuda", dtype=tdt).contiguous(memory_format=mf)
            ho = (hw + 2 * pad - ks) // st + 1
            tg = torch.randn(n, c, ho, ho, device="cuda", dtype=tdt).contiguous(memory_format=mf)
            _, tidx = torch.nn.functional.max_pool2d(tx, ks, st, pad, return_indices=True)
            x, g = cp.from_dlpack(tx), cp.from_dlpack(tg)
            geo = (st, st, pad, pad, 1, 1, ks, ks, ho, ho)
            ga = pl._geo(x.shape, geo)
            t = ctype(dtype)
            fns = {"torch_bwd": lambda: torch.ops.aten.max_pool2d_with_indices_backward(
                       tg, tx, [ks, ks], [st, st], [pad, pad], [1, 1], False, tidx),
                   "forward": lambda: cudakit.max_pool2d(x, ks, st, pad),
                   "backward": lambda: cudakit.max_pool2d_backward(g, x, ks, st, pad)}
            if cl:
                xt, gt = x.transpose(0, 2, 3, 1), g.transpose(0, 2, 3, 1)
                idx = cp.empty((n, ho, ho, c), cp.uint8)
                gx = cp.empty((n, hw, hw, c), x.dtype)
                v = pl._width(dtype, c, (xt, gt, gx))
                img, oimg = hw * hw * c, ho * ho * c
                fns["argmax"] = lambda: pl._cl(f"ck_pool2d_cl_argmax<{t}, {v}>", ((xt, img), (idx, oimg)), n,
                                               ho * ho, c // v, ga)
                fns["gather"] = lambda: pl._cl(f"ck_pool2d_cl_backward_idx<{t}, {v}>",
                                               ((idx, oimg), (gt, oimg), (gx, img)), n, hw * hw, c // v, ga)
            else:
                idx = cp.empty((n, c, ho, ho), cp.uint8)
                gx = cp.empty(x.shape, x.dtype)
                for p in (1, 4):
                    def argmax(p=p):
                        pl.PLANES["ck_pool2d_argmax"] = p
                        pl._nchw("ck_pool2d_argmax", t, ((x, hw * hw), (idx, ho * ho)), n * c, ho * ho, ga)

                    def gather(p=p):
                        pl.PLANES["ck_pool2d_backward_idx"] = p
                        pl._nchw("ck_pool2d_backward_idx", t, ((idx, ho * ho), (g, ho * ho), (gx, hw * hw)), n * c,
                                 hw * hw, ga)
                    fns[f"argmax_p{p}"], fns[f"gather_p{p}"] = argmax, gather

                def direct():
                    keep, pl.VIA_CHANNELS_LAST_FROM = pl.VIA_CHANNELS_LAST_FROM, None
                    try:
                        pl.pool2d_backward(g, x, "max", geo)
                    finally:
                        pl.VIA_CHANNELS_LAST_FROM = keep
                fns["nchw_kernels"] = direct
                fns["via_cl"] = lambda: pl._via_channels_last(g, x, "max", geo)
            m = medians(fns)
            pl.PLANES.update(planes)
            case = f"max{ks}s{st}p{pad} {n}x{c}x{hw}x{hw} {'cl' if cl else 'nchw'} {dtype}"
            rows.append({"case": case, **{f"{k}_ms": round(val, 4) for k, val in m.items()}})
            print(f"VARIANT {case:<40} " + " ".join(f"{k} {val:.4f}" for k, val in m.items()), flush=True)
dump_rows(argv, __doc__, rows)
