"""float32 attention (tf32x3 products) against torch's float32 SDPA, in one run: the shipped
kernels, their tiles, and the split-operand kernels of _attention_f32_split.py (operands split into
TF32 parts and remainders once, ahead of the products, with the split passes inside the timed call),
each interleaved with torch, plus each variant's largest error against float64 on a small case.
    python3 benchmarks/sweeps/attention_f32_variants.py [--shapes 4x8x2048x128,16x8x512x64] [--bwd-only]
The backward's kernels (dK/dV, dQ, or the two fused with dQ summed atomically) are timed each on its
own, on operands split once (their split passes and delta timed apart), so the best pair shows.
--bwd-only: of the forward, torch's and the shipped kernel's rows only. --mat-shipped: the shipped
materialised backward (kernels/attention_materialized.py) with its FUSED_PREP, L2_ORDER or UNMASKED_LONG
option flipped or other score or long-product tiles, and each of its launches timed alone,
against torch, the flash kernels and backward()'s own choice, plain and causal, after its and the
flash kernels' error against float64. --fwd-tiles: the shipped forward on other tiles.
--integrated [--causal | --only-causal] [--all-tiles | --columns | --order]: the shipped split forward
(head dims 33..128) on other tiles, and its split pass (V's) alone; with --causal causal forwards too
(--only-causal: those alone); --tiles MxNxWxS,...: those tiles; --key-splits: the shipped tiles,
the keys in 2, 3 and 4 parts (kernels/attention.py KEY_SPLITS); --columns:
at head dims 65..128, its columns in one block of 128 or two (64 and the rest) on the tiles of
COLUMN_TILES; at head dims up to 64 also Triton's own tf32x3 products; --order: the shipped tiles
only, and causal forwards in the grid's program order and longest first over groups of batch*heads
(kernels/attention.py CAUSAL_GROUP); --v-in-place: each one-column-block tile also in the O^T form
(kernels/attention.py V_IN_PLACE: V read as it comes, no transposed copy). --transpose-tiles: V's
transposed copy (_transpose_v) on other tiles, in GB/s against a copy of V's bytes (cold L2).
--cold: each timed call behind an L2 flush, queued behind a spin kernel (device time alone; warm,
calls shorter than their host cost time the host: at B1 H16 S512 D128 the transpose pass alone
timed 0.022 ms warm, H100 2026-11-27 14:56 UTC). Prints VARIANT lines: median ms, TFLOP/s
(4 BH L^2 D forward, 10 BH L^2 D backward) and x torch."""
import math
import statistics
import sys
import time

import cupy as cp
import torch

import cudakit
from cudakit.kernels import attention as at
from cudakit.runtime.triton import TritonKernel

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import _attention_f32_split as sp  # noqa: E402
from _medians import run_medians  # noqa: E402

ROUNDS = 3
argv = sys.argv[1:]
shapes = [(4, 8, 2048, 128), (16, 8, 512, 64)]
if "--shapes" in argv:
    shapes = [tuple(int(x) for x in s.split("x")) for s in argv[argv.index("--shapes") + 1].split(",")]
sdpa = torch.nn.functional.scaled_dot_product_attention
cudakit.set_float32_precision("tf32x3")
_kern = {}


def kern(fn, **opts):
    key = (fn.__name__, tuple(sorted(opts.items())))
    if key not in _kern:
        nw, ns = opts.pop("num_warps"), opts.pop("num_stages")
        _kern[key] = TritonKernel(fn).specialized(num_warps=nw, num_stages=ns, **opts)
    return _kern[key]


def split(x, normal=True, trans=False):
    """(hi, lo, hiT, loT): x's TF32 parts and remainders in its layout and/or transposed (x itself
    in the slots not asked for), by the shipped tf32_split."""
    bh, L, d = x.shape
    outs = []
    for want, t in ((normal, False), (trans, True)):
        if not want:
            outs += [x, x]
            continue
        shape = (bh, d, L) if t else x.shape
        hi, lo = cp.empty(shape, x.dtype), cp.empty(shape, x.dtype)
        at._specialized("tf32_split", {"C": d, "BLOCK_L": 32, "BLOCK_C": d, "TRANS": t, "num_warps": 4})[
            (bh, L // 32)](x, hi, lo, L)
        outs += [hi, lo]
    return outs


def fwd_split(q, k, v, scale, cfg):
    bh, L, d = q.shape
    qreg = cfg.get("QREG", False)
    qh, ql = (q, q) if qreg else split(q)[:2]
    kh, kl = split(k)[:2]
    _, _, vth, vtl = split(v, normal=False, trans=True)
    o = cp.empty_like(q)
    lse = cp.empty((bh, L), cp.float32)
    c = dict(cfg)
    bm = c.pop("BLOCK_M")
    kern(sp.fwd_split, D=d, BLOCK_M=bm, QREG=qreg, **{k_: v_ for k_, v_ in c.items() if k_ != "QREG"})[
        (L // bm, bh)](qh, ql, kh, kl, vth, vtl, o, lse, scale * math.log2(math.e), L)
    return o, lse


def bwd_parts(do, q, k, v, o):
    """The backward's split operands and delta, computed once (the split kernels' arguments)."""
    qh, ql, qth, qtl = split(q, trans=True)
    kh, kl, kth, ktl = split(k, trans=True)
    vh, vl = split(v)[:2]
    doh, dol, doth, dotl = split(do, trans=True)
    return dict(qh=qh, ql=ql, qth=qth, qtl=qtl, kh=kh, kl=kl, kth=kth, ktl=ktl, vh=vh, vl=vl, doh=doh, dol=dol,
                doth=doth, dotl=dotl, delta=(o * do).sum(axis=-1))


def _launch(fn, d, cfg, grid_block):
    c = {k: v for k, v in cfg.items() if k != "RELOAD" or v}
    return kern(fn, D=d, **c), c[grid_block]


def dkdv_only(P, lse, scale, cfg, dk, dv, dq=None):
    """dK, dV by dkdv_split; with dq, dQ too (its FUSE_DQ: summed atomically into dq, zeroed here)."""
    bh, L, d = P["qh"].shape
    fuse = dq is not None
    if fuse:
        dq.fill(0)
    k, bn = _launch(sp.dkdv_split, d, dict(cfg, FUSE_DQ=fuse) if fuse else cfg, "BLOCK_N")
    k[(L // bn, bh)](P["qh"], P["ql"], P["qth"], P["qtl"], P["kh"], P["kl"], P["vh"], P["vl"], P["doh"], P["dol"],
                     P["doth"], P["dotl"], lse, P["delta"], dk, dv, P["kth"], P["ktl"], dq if fuse else dk,
                     scale * math.log2(math.e), scale, L)


def dq_only(P, lse, scale, cfg, dq):
    bh, L, d = P["qh"].shape
    k, bm = _launch(sp.dq_split, d, cfg, "BLOCK_M")
    k[(L // bm, bh)](P["qh"], P["ql"], P["kh"], P["kl"], P["kth"], P["ktl"], P["vh"], P["vl"], P["doh"], P["dol"],
                     lse, P["delta"], dq, scale * math.log2(math.e), scale, L)


SHIPPED_BWD_TILES = [((32, 128, 8, 1), (128, 32, 8, 1)), ((16, 128, 8, 1), (128, 16, 8, 1)),
                     ((16, 64, 4, 1), (64, 16, 4, 1))]


def _tiles(rows, names=("BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "RELOAD")):
    return [dict(zip(names, r)) for r in rows]


# backward tiles (BLOCK_M, BLOCK_N, num_warps, num_stages, RELOAD) of each kernel, timed on their
# own: the ones whose sm_90 SASS (Triton 3.9, CPU) spilled least
DKDV = {64: _tiles([(16, 64, 4, 1, False), (32, 128, 8, 1, False), (16, 128, 8, 1, True), (32, 128, 8, 1, True),
                    (64, 128, 8, 1, True)]),
        128: _tiles([(16, 64, 4, 1, False), (32, 128, 8, 1, False), (16, 128, 8, 1, True), (32, 128, 8, 1, True),
                     (16, 64, 4, 2, False)])}
DQ = {64: _tiles([(128, 32, 8, 1, False), (64, 32, 4, 1, False), (64, 16, 4, 1, False), (128, 64, 8, 1, False)]),
      128: _tiles([(128, 32, 8, 1, False), (64, 16, 4, 1, False), (128, 16, 8, 1, False), (64, 32, 4, 1, False)])}
FUSED = {64: _tiles([(16, 128, 8, 1, False), (16, 64, 4, 1, False), (16, 128, 8, 1, True), (32, 128, 8, 1, False)]),
         128: _tiles([(16, 64, 4, 1, False), (16, 64, 4, 2, False), (16, 128, 8, 1, False)])}


# tiles that fit 227 KiB of shared memory: q's two parts (unless QREG: split in registers) and, a
# stage, four key-block tiles (K, V parts) of 4-byte elements
_FWD = {64: [(128, 64, 8, 2, False), (128, 64, 8, 1, False), (64, 64, 4, 2, False), (128, 32, 8, 2, False),
             (64, 32, 4, 2, False), (128, 128, 8, 1, False), (128, 64, 8, 2, True), (64, 64, 4, 2, True)],
        128: [(64, 32, 4, 2, False), (64, 64, 4, 1, False), (128, 32, 8, 1, False), (64, 64, 4, 1, True),
              (128, 64, 8, 1, True), (64, 32, 4, 2, True), (128, 32, 8, 2, True), (64, 64, 8, 1, True)]}
FWD_BUILTIN = [{"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
               {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2},
               {"BLOCK_M": 128, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2},
               {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3}]

def fwd_split_cfgs(d):
    return [dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=nw, num_stages=ns, QREG=qr) for bm, bn, nw, ns, qr in _FWD[d]]


# --integrated --columns: (tiles, columns in two blocks) by head dim (the smallest key covering it);
# at 64 also against Triton's own tf32x3 (the split forward off)
COLUMN_TILES = {64: [((128, 64, 8, 3), False), ((128, 64, 8, 2), False), ((64, 64, 4, 3), False)],
                80: [((128, 64, 8, 3), True), ((128, 64, 8, 2), True)],
                96: [((128, 64, 8, 1), True), ((128, 64, 8, 2), True), ((128, 32, 8, 2), True), ((128, 32, 8, 3), True)],
                128: [((128, 64, 8, 1), False), ((128, 64, 8, 1), True), ((128, 32, 8, 2), True),
                      ((128, 32, 8, 2), False)]}


def report(label, fns, flops):
    ms, errors = run_medians(fns, ROUNDS, reps=6, cold="--cold" in argv)
    base = statistics.median(ms.pop("torch")) if "torch" in ms else float("nan")
    print(f"VARIANT {label} torch {base:8.3f} ms {flops / base / 1e9:6.1f} TFLOP/s", flush=True)
    for name, v in sorted(ms.items(), key=lambda kv: statistics.median(kv[1])):
        m = statistics.median(v)
        print(f"VARIANT {label} {name:<70} {m:8.3f} ms {flops / m / 1e9:6.1f} TFLOP/s x torch {base / m:.3f}", flush=True)
    for name, e in errors.items():
        print(f"VARIANT {label} {name:<70} failed: {type(e).__name__}: {str(e)[:150]}", flush=True)


def reference(d):
    """(q, k, v, dO in float32 (2x256xd), scale, {"o", "dq", "dk", "dv": float64 results}) of a
    small case every variant's accuracy is checked on."""
    rng = cp.random.default_rng(5)
    q64, k64, v64, g64 = (rng.standard_normal((2, 256, d)) for _ in range(4))
    scale = d ** -0.5
    s = (q64 @ k64.transpose(0, 2, 1)) * scale
    p = cp.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = g64 @ v64.transpose(0, 2, 1)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    ref = {"o": p @ v64, "dq": ds @ k64 * scale, "dk": ds.transpose(0, 2, 1) @ q64 * scale,
           "dv": p.transpose(0, 2, 1) @ g64}
    return (*(a.astype(cp.float32) for a in (q64, k64, v64, g64)), scale, ref)


def print_errors(d, name, vals, ref):
    """A VARIANT accuracy line: each output's largest error over the reference's largest magnitude."""
    print(f"VARIANT accuracy d={d} {name}: " + " ".join(
        f"{n} {float(cp.abs(vals[n] - ref[n]).max() / cp.abs(ref[n]).max()):.2e}" for n in vals), flush=True)


def accuracy(d):
    """Largest error of each variant against float64, relative to the output's largest magnitude."""
    q, k, v, g, scale, ref = reference(d)

    def err(name, vals):
        print_errors(d, name, vals, ref)
    o, lse = at.forward(q, k, v, scale, False, "float32")
    err("shipped", {"o": o, **dict(zip(("dq", "dk", "dv"), at.backward(g, q, k, v, o, lse, scale, False, "float32")))})
    for c in fwd_split_cfgs(d):
        try:
            o2, lse2 = fwd_split(q, k, v, scale, c)
            err(f"split {tuple(c.values())}", {"o": o2})
        except Exception as e:   # noqa: BLE001 -- tiles this GPU cannot run
            print(f"VARIANT accuracy d={d} split {tuple(c.values())} failed: {type(e).__name__}: {str(e)[:120]}")
    P = bwd_parts(g, q, k, v, o)
    for name, tiles in (("dkdv", DKDV), ("dq", DQ), ("fused", FUSED)):
        for c in tiles[d]:
            dq, dk, dv = cp.zeros_like(q), cp.zeros_like(k), cp.zeros_like(v)
            try:
                if name == "dkdv":
                    dkdv_only(P, lse, scale, c, dk, dv)
                    got = {"dk": dk, "dv": dv}
                elif name == "dq":
                    dq_only(P, lse, scale, c, dq)
                    got = {"dq": dq}
                else:
                    dkdv_only(P, lse, scale, c, dk, dv, dq)
                    got = {"dq": dq, "dk": dk, "dv": dv}
                err(f"{name} {tuple(c.values())}", got)
            except Exception as e:   # noqa: BLE001 -- tiles this GPU cannot run
                print(f"VARIANT accuracy d={d} {name} {tuple(c.values())} failed: {type(e).__name__}: {str(e)[:120]}")


if "--fwd-tiles" in argv:   # the shipped forward kernel (Triton's own tf32x3 below head dim 65) on other tiles
    for b, h, L, d in shapes:
        rng = cp.random.default_rng(0)
        q, k, v = (rng.standard_normal((b * h, L, d), dtype=cp.float32) for _ in range(3))
        tq, tk, tv = (torch.from_dlpack(a).view(b, h, L, d) for a in (q, k, v))
        fns = {"torch": lambda: sdpa(tq, tk, tv), "shipped": lambda: at.forward(q, k, v, d ** -0.5, False, "float32")}
        for bm, bn, nw, ns in ((128, 64, 8, 2), (128, 64, 8, 3), (128, 128, 8, 1), (128, 128, 8, 2), (64, 64, 4, 2),
                               (64, 64, 4, 3), (64, 128, 4, 2), (128, 32, 8, 3), (128, 64, 4, 2), (64, 32, 4, 4)):
            t = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": nw, "num_stages": ns}
            fns[f"tiles {(bm, bn, nw, ns)}"] = lambda t=t: at.forward(q, k, v, d ** -0.5, False, "float32", tiles=t)
        report(f"{b}x{h}x{L}x{d} forward tiles", fns, 4 * b * h * L * L * d)
    sys.exit(0)
if "--mat-shipped" in argv:   # the shipped materialised backward (kernels/attention_materialized.py) and its knobs
    from cudakit.kernels import attention_materialized as am
    for b, h, L, d in shapes:
        q_, k_, v_, g_, sc, ref = reference(d)
        o_, lse_ = at.forward(q_, k_, v_, sc, False, "float32")
        m0 = at.Masks(False)
        for name, f in (("flash", at._triton_backward), ("materialized", at._materialized_backward)):
            args = (g_, q_, k_, v_, o_, lse_, sc, m0) + (("float32",) if name == "flash" else ())
            print_errors(d, name, dict(zip(("dq", "dk", "dv"), f(*args))), ref)
        for causal in (False, True):
            rng = cp.random.default_rng(0)
            q, k, v, g = (rng.standard_normal((b * h, L, d), dtype=cp.float32) for _ in range(4))
            scale = d ** -0.5
            tq, tk, tv, tg = (torch.from_dlpack(a).view(b, h, L, d) for a in (q, k, v, g))
            o, lse = at.forward(q, k, v, scale, causal, "float32")
            masks = at.Masks(causal)
            rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
            y = sdpa(rq, rk, rv, is_causal=causal)
            fns = {"torch": lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True),
                   "flash kernels": lambda: at._triton_backward(g, q, k, v, o, lse, scale, masks, "float32"),
                   "backward() as chosen": lambda: at.backward(g, q, k, v, o, lse, scale, causal, "float32")}

            def knobs(**kw):
                def f():
                    old = {n: getattr(am, n) for n in kw}
                    for n, x in kw.items():
                        setattr(am, n, x)
                    try:
                        return at._materialized_backward(g, q, k, v, o, lse, scale, masks)
                    finally:
                        for n, x in old.items():
                            setattr(am, n, x)
                return f
            fns["materialized shipped"] = knobs()
            flip = not am.fused_prep(am.head_block(d))
            fns[f"materialized FUSED_PREP={flip}"] = knobs(FUSED_PREP=flip)
            flip = not am.l2_order(am.head_block(d))
            fns[f"materialized L2_ORDER={flip}"] = knobs(L2_ORDER=flip)
            fns[f"materialized UNMASKED_LONG={not am.UNMASKED_LONG}"] = knobs(UNMASKED_LONG=not am.UNMASKED_LONG)
            shipped_tile = am.score_tiles(am.head_block(d))
            for t in ({"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1},
                      {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 1},
                      {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 1}):
                if t != shipped_tile and (d <= 64 or t["BLOCK_N"] == 64):
                    fns[f"materialized score {tuple(t.values())}"] = knobs(SCORE_TILES=t)
            from cudakit.runtime.device import get_device_info
            sms = get_device_info(q.data.device_id).multiprocessors
            shipped_cols = am.long_columns(am.head_block(d), math.ceil(L / am.LONG_TILES["BLOCK_M"]) * b * h, sms)
            for cols in (1, 2, 4):
                if cols != shipped_cols and am.head_block(d) // cols >= 16:
                    fns[f"materialized LONG_COLUMNS={cols}"] = knobs(LONG_COLUMNS=cols)
            fns["materialized long (64, 32, 4, 4)"] = knobs(
                LONG_TILES={"BLOCK_M": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 4})
            # the shipped sequence's launches recorded once, then each timed alone (and all of them
            # without the host's allocations): where the time goes
            rec = []
            dlo, dhi = at.key_bounds(L, L, causal, None)
            am.run(g, q, k, v, o, lse, float(scale), dlo, dhi, empty=lambda s: cp.empty(s, cp.float32),
                   launch=lambda n, gr, a, c: rec.append((n, gr, a, c)), sms=sms)

            def replay(items):
                def f():
                    for n, gr, a, c in items:
                        at._specialized(n, c)[gr](*a)
                return f
            for i, r in enumerate(rec):
                extra = {n: r[3][n] for n in ("TRANS_A", "ALIGNED", "OWN_DELTA", "BLOCK_N", "COLS") if n in r[3]}
                fns[f"part {i} {r[0]} {extra}"] = replay([r])
            fns["parts all, no host allocation"] = replay(rec)
            report(f"{b}x{h}x{L}x{d}{' causal' if causal else ''} backward (shipped materialized)", fns,
                   10 * b * h * L * L * d // (2 if causal else 1))
            got = at._materialized_backward(g, q, k, v, o, lse, scale, masks)
            want = at._triton_backward(g, q, k, v, o, lse, scale, masks, "float32")
            print(f"VARIANT {b}x{h}x{L}x{d} causal={causal} materialized vs flash: " + " ".join(
                f"{n} {float(cp.abs(x - y).max() / cp.abs(y).max()):.2e}" for n, x, y in zip(("dq", "dk", "dv"), got, want)),
                flush=True)
    sys.exit(0)
if "--transpose-tiles" in argv:   # V's transposed copy (kernels/attention.py _transpose_v) on other tiles,
    for b, h, L, d in shapes:     # against a copy of V's bytes (the bandwidth anchor)
        v = cp.random.default_rng(0).standard_normal((b * h, L, d), dtype=cp.float32)
        vt = cp.empty((b * h, d, L), cp.float32)
        copy_to = cp.empty_like(v)
        fns = {"copy (cupy)": lambda: copy_to.__setitem__(Ellipsis, v)}
        for rows in (32, 64, 128):
            for warps in (4, 8):
                def f(rows=rows, warps=warps):
                    at._specialized("tf32_split", {"C": d, "BLOCK_L": rows, "BLOCK_C": at.head_block(d), "TRANS": True,
                                                   "PARTS": False, "num_warps": warps})[(b * h, math.ceil(L / rows))](
                        v, vt, vt, L)
                fns[f"transpose BLOCK_L={rows} warps={warps}" + (" (shipped)" if (rows, warps) == (32, 4) else "")] = f
        fns["shipped _transpose_v"] = lambda: at._transpose_v(v, at.head_block(d))
        from cudakit.bench import timing   # (behind an L2 flush: V's bytes would otherwise sit in L2)
        res, errors = timing.time_gpu_interleaved(fns, warmup=2, reps=10, rounds=3, cold=True)
        ms = {name: [r["median_ms"]] for name, r in res.items()}
        nbytes = 2 * v.nbytes
        for name, t in sorted(ms.items(), key=lambda kv: statistics.median(kv[1])):
            m = statistics.median(t)
            print(f"VARIANT {b}x{h}x{L}x{d} {name:<40} {m * 1e3:8.1f} us {nbytes / m / 1e6:7.0f} GB/s x copy "
                  f"{statistics.median(ms['copy (cupy)']) / m:.3f}", flush=True)
        for name, e in errors.items():
            print(f"VARIANT {b}x{h}x{L}x{d} {name} failed: {type(e).__name__}: {str(e)[:150]}", flush=True)
    sys.exit(0)
if "--integrated" in argv:   # the shipped split forward's tiles (kernels/attention.py _SPLIT_TILES) only
    warm = torch.randn(8192, 8192, device="cuda")   # the GPU's clocks up first: the first shape ran up to
    end = time.perf_counter() + 2                    # 1.6x slower without (H100, 2026-11-27 10:29 UTC)
    while time.perf_counter() < end:
        warm @ warm
        torch.cuda.synchronize()
    for b, h, L, d in shapes:
        for causal in ((True,) if "--only-causal" in argv else (False, True) if "--causal" in argv else (False,)):
            rng = cp.random.default_rng(0)
            q, k, v = (rng.standard_normal((b * h, L, d), dtype=cp.float32) for _ in range(3))
            tq, tk, tv = (torch.from_dlpack(a).view(b, h, L, d) for a in (q, k, v))
            fns = {"torch": lambda: sdpa(tq, tk, tv, is_causal=causal)}
            if not causal and d == 128:   # (the sweep kernel takes D == BLOCK_D only)
                fns["sweep kernel (128, 64, 8, 1, QREG)"] = lambda: fwd_split(q, k, v, d ** -0.5, dict(
                    BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=1, QREG=True))
            shipped, shipped_blocks = at._split_tiles, at.SPLIT_BLOCK_DS

            def own():   # Triton's own tf32x3 products (the split forward off)
                at.SPLIT_BLOCK_DS = ()
                try:
                    return at.forward(q, k, v, d ** -0.5, causal, "float32")
                finally:
                    at.SPLIT_BLOCK_DS = shipped_blocks
            if d <= 64:
                fns["Triton's own tf32x3"] = own

            def with_tiles(t, two):   # (in one part, unless set: the parts' choice is kept per shape, not per tile)
                def f():
                    at._split_tiles = lambda d, *args, **kw: dict(t, SPLIT=True,
                                                                  **(at.column_blocks(d) if two else {}))
                    parts, vip = at.KEY_SPLITS, at.V_IN_PLACE   # (and V's transposed copy unless set)
                    at.KEY_SPLITS = 1 if parts is None else parts
                    at.V_IN_PLACE = False if vip is None else vip
                    try:
                        return at.forward(q, k, v, d ** -0.5, causal, "float32")
                    finally:
                        at._split_tiles, at.SPLIT_BLOCK_DS, at.KEY_SPLITS = shipped, shipped_blocks, parts
                        at.V_IN_PLACE = vip
                return f
            from cudakit.runtime.device import get_device_info
            mine = shipped(d, causal=causal, blocks=b * h * math.ceil(L / 128),
                           sms=get_device_info().multiprocessors)
            mine = ((mine["BLOCK_M"], mine["BLOCK_N"], mine["num_warps"], mine["num_stages"]), "BLOCK_D2" in mine)
            tiles = ((128, 64, 8, 1), (128, 32, 8, 1), (64, 32, 4, 2)) if "--all-tiles" not in argv else (
                (128, 64, 8, 1), (128, 32, 8, 1), (64, 64, 4, 1), (64, 64, 4, 2), (64, 32, 4, 1), (64, 32, 4, 2),
                (64, 128, 4, 1))
            if "--tiles" in argv:   # e.g. --tiles 64x64x8x1,128x64x8x1 (BLOCK_M x BLOCK_N x warps x stages)
                tiles = [tuple(int(x) for x in t.split("x")) for t in argv[argv.index("--tiles") + 1].split(",")]
            tiles = [(t, mine[1]) for t in tiles]
            if "--columns" in argv:   # the columns in one block of 128 or two (64 and the rest), other tiles
                tiles = COLUMN_TILES[min(c for c in COLUMN_TILES if c >= d)]
            if "--key-splits" in argv:   # the keys in 2..4 parts (KEY_SPLITS), on the shipped tiles and on
                want = at.forward(q, k, v, d ** -0.5, causal, "float32")[0]   # those of --tiles
                for t in [None] + list(tiles) * ("--tiles" in argv):
                    for splits in (2, 3, 4):
                        def in_parts(splits=splits, t=t):
                            at.KEY_SPLITS = splits
                            try:
                                return (with_tiles(dict(zip(("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"),
                                                            t[0])), t[1]) if t else
                                        lambda: at.forward(q, k, v, d ** -0.5, causal, "float32"))()
                            finally:
                                at.KEY_SPLITS = None
                        name = f"keys in {splits} parts" + (f" on {t[0]}" if t else "")
                        got = in_parts()[0]
                        print(f"VARIANT {b}x{h}x{L}x{d}{' causal' if causal else ''} {name}: largest difference "
                              f"from one part {float(cp.abs(got - want).max()):.2e}", flush=True)
                        fns[name] = in_parts
                if "--tiles" not in argv:
                    tiles = []
            if "--order" in argv:   # the shipped tiles only, the causal forward's program orders instead
                tiles = []
                shipped_group = at.CAUSAL_GROUP
                for group in (0, 8, 16, 32, 1 << 20) if causal else ():
                    def ordered(group=group):
                        at.CAUSAL_GROUP = group
                        try:
                            return at.forward(q, k, v, d ** -0.5, causal, "float32")
                        finally:
                            at.CAUSAL_GROUP = shipped_group
                    fns[f"longest first, groups of {group} batch*heads" if group else "grid order"] = ordered
            for t, two in dict.fromkeys([mine] + list(tiles)):
                fns[f"integrated {t}{' two column blocks' if two else ' one column block'}"
                    + (" shipped" if (t, two) == mine else "")] = with_tiles(
                    dict(zip(("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"), t)), two)
            if "--v-in-place" in argv:   # the same tiles (one column block) in the O^T form, V as it comes
                for t, two in dict.fromkeys([mine] + list(tiles)):
                    if not two:
                        def in_place(f=with_tiles(dict(zip(("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"), t)),
                                                  two)):
                            at.V_IN_PLACE = True
                            try:
                                return f()
                            finally:
                                at.V_IN_PLACE = None
                        got = in_place()[0]
                        want = with_tiles(dict(zip(("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"), t)), two)()[0]
                        print(f"VARIANT {b}x{h}x{L}x{d}{' causal' if causal else ''} V in place {t}: largest "
                              f"difference from V transposed {float(cp.abs(got - want).max()):.2e}", flush=True)
                        fns[f"V in place {t}" + (" (shipped tiles)" if (t, two) == mine else "")] = in_place
            fns["transpose pass alone (V)"] = lambda: at._transpose_v(v, 128)
            report(f"{b}x{h}x{L}x{d}{' causal' if causal else ''} forward", fns,
                   4 * b * h * L * L * d // (2 if causal else 1))
    sys.exit(0)
for d in sorted({s[3] for s in shapes}):
    accuracy(d)
for b, h, L, d in shapes:
    rng = cp.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((b * h, L, d), dtype=cp.float32) for _ in range(4))
    scale = d ** -0.5
    tq, tk, tv, tg = (torch.from_dlpack(a).view(b, h, L, d) for a in (q, k, v, g))
    per = b * h * L * L * d
    tag = f"{b}x{h}x{L}x{d}"
    fns = {"torch": lambda: sdpa(tq, tk, tv),
           "shipped": lambda: at.forward(q, k, v, scale, False, "float32")}
    for t in ([] if "--bwd-only" in argv else FWD_BUILTIN):
        fns[f"builtin {tuple(t.values())}"] = lambda t=t: at.forward(q, k, v, scale, False, "float32", tiles=t)
    for c in ([] if "--bwd-only" in argv else fwd_split_cfgs(d)):
        fns[f"split {tuple(c.values())}"] = lambda c=c: fwd_split(q, k, v, scale, c)
    fns["split K,V passes alone"] = lambda: (split(k), split(v, normal=False, trans=True))
    report(f"{tag} forward", fns, 4 * per)
    o, lse = at.forward(q, k, v, scale, False, "float32")
    rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
    y = sdpa(rq, rk, rv)
    fns = {"torch": lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True),
           "shipped": lambda: at.backward(g, q, k, v, o, lse, scale, False, "float32")}
    for kt, qt in SHIPPED_BWD_TILES:   # the shipped kernels (Triton's own tf32x3) on other tiles
        tiles = (dict(zip(("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"), kt)),
                 dict(zip(("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"), qt)))
        fns[f"shipped tiles kv{kt} q{qt}"] = lambda t=tiles: at.backward(g, q, k, v, o, lse, scale, False, "float32",
                                                                         tiles=t)
    P = bwd_parts(g, q, k, v, o)
    dq, dk, dv = cp.zeros_like(q), cp.zeros_like(k), cp.zeros_like(v)
    for c in DKDV[d]:
        fns[f"dkdv kernel {tuple(c.values())}"] = lambda c=c: dkdv_only(P, lse, scale, c, dk, dv)
    for c in DQ[d]:
        fns[f"dq kernel {tuple(c.values())}"] = lambda c=c: dq_only(P, lse, scale, c, dq)
    for c in FUSED[d]:
        fns[f"fused kernel {tuple(c.values())}"] = lambda c=c: dkdv_only(P, lse, scale, c, dk, dv, dq)
    fns["split passes and delta"] = lambda: bwd_parts(g, q, k, v, o)
    report(f"{tag} backward", fns, 10 * per)
