"""Run by tests/test_attention_interpreter.py in a subprocess with TRITON_INTERPRET=1 (Triton picks
the interpreter when it is imported, so the flag must be set before that):
    TRITON_INTERPRET=1 python tests/attention_interpreter.py
runs the attention Triton kernels on NumPy arrays for each case in CASES against the float64
reference; an AssertionError names the case and the output that is off. NumPy arrays reach
the interpreter through tests/triton_numpy.py. float16 stands in for
the 16-bit types (same tiles as bfloat16, which the interpreter cannot read from NumPy)."""
import contextlib
import math
import os
import sys

sys.path[:0] = [os.path.dirname(__file__), os.path.join(os.path.dirname(__file__), "..", "src")]
import attention_checks as ac
import numpy as np
from helpers import data, f64
from triton_numpy import Tensor as _Tensor

from cudakit.kernels import _attention_triton as kernels
from cudakit.kernels import attention as host

# (batch*heads, Lq, Lk, head_dim, causal, dtype): full blocks, causal diagonals with Lq < Lk and
# Lq > Lk, ragged ends of the keys and queries (and Lq a multiple of the dK/dV kernel's query block,
# which compiles without row masks), head_dim below its block and a power of two
CASES = [(2, 70, 90, 24, False, "float32"), (2, 70, 90, 24, True, "float32"), (1, 64, 100, 16, True, "float32"),
         (1, 90, 200, 32, True, "float32"), (1, 300, 100, 16, True, "float32"),
         (1, 1, 50, 8, True, "float32"), (1, 65, 1, 8, False, "float32"),
         (1, 128, 128, 64, True, "float16"), (1, 129, 257, 64, True, "float16"),
         (1, 256, 256, 64, False, "float16"), (1, 130, 77, 80, False, "float16"),
         (1, 128, 300, 128, True, "float16"), (1, 200, 64, 64, True, "float16"),
         (1, 100, 260, 128, True, "float16"), (1, 192, 130, 128, False, "float16"),
         (1, 70, 100, 256, True, "float16"), (1, 40, 33, 160, False, "float32"),   # head dims past 128
         (2, 70, 150, 96, False, "float32"), (1, 130, 90, 128, True, "float32"),   # the split float32 forward,
         (1, 130, 77, 80, True, "float32"), (1, 129, 200, 90, True, "float32"),   # its columns in two blocks
         (1, 100, 130, 48, True, "float32"), (2, 64, 64, 64, False, "float32")]   # and one of 64


def _tiles(cfg):
    return {k: v for k, v in cfg.items() if k not in ("num_warps", "num_stages")}


def _seed_words(seed):
    """The kernels' (DSEED_LO, DSEED_HI) of a seed, as kernels/attention.py passes them."""
    from cudakit.kernels.attention import _signed32
    return _signed32(seed & 0xFFFFFFFF), _signed32(seed >> 32)


def _run(q, k, v, g, causal, dtype, fwd_tiles=None, window=None, lens=None, heads=1, err=None, bias=None,
         bias_heads=1, db=None, db_strides=(0, 0, 0, 0), db_mode=0, groups=1, dropout=None, splits=1,
         db_dims=None):
    """(out, lse, dq, dk, dv) from the four kernels launched as kernels/attention.py launches them;
    the outputs start as 7.0, a value no kernel leaves, so an element a kernel skips shows. lens:
    int64 key lengths of each batch of `heads` consecutive [BH] entries; err: the error flag.
    bias: a 4-D (Bb, Hb, Lq|1, Lk|1) array, [BH] entry t being batch t // bias_heads and head
    t % bias_heads; db: the buffer its gradient goes to (db_mode 1: stored, 2: added) with
    db_strides (db_mode 4: a workspace of per-tile partials, db_dims the bias's (DBQ, DBK)). groups > 1: k, v are [BH / groups, Lk, D] read in place (heads: q's heads), dk and
    dv come back per q head."""
    bh, lq, d = q.shape
    lk = k.shape[1]
    scale = 1 / math.sqrt(d)
    qk_scale = scale * math.log2(math.e)
    cfg = dict(host._config(dtype, d, None), **(fwd_tiles or {}))
    pos_scale = cfg.pop("POS_SCALE", True)   # the forward's path for a positive scale, as the host picks
    fv, fcfg = v, dict(cfg)
    dlo, dhi = host.key_bounds(lq, lk, causal, window)
    if host._split_forward(cfg, None, fwd_tiles):   # float32 tf32x3, head dims 33..128
        fcfg.update(host._split_tiles(d, bias is not None, host._bounded_above(dlo, dhi)))
        if host._v_in_place(fcfg, host._bounded_above(dlo, dhi)):   # O^T = V^T P^T: V as it comes
            fcfg["OT"] = True
        else:                        # V transposed first
            fv = np.full((k.shape[0], d, lk), np.nan, np.float32)
            kernels.tf32_split[(k.shape[0], math.ceil(lk / 32))](*map(_Tensor, (v, fv, fv)), lk, C=d, BLOCK_L=32,
                                                                 BLOCK_C=cfg["BLOCK_D"], TRANS=True, PARTS=False)
    out, dq = np.full_like(q, 7.0), np.full_like(q, 7.0)
    dk, dv = (np.full((bh, lk, d), 7.0, k.dtype) for _ in range(2))
    lse, delta = np.zeros((bh, lq), np.float32), np.zeros((bh, lq), np.float32)
    has = lens is not None
    lens_t = _Tensor(np.asarray(lens, np.int64) if has else np.zeros(1, np.int64))
    err_t = _Tensor(np.zeros(8, np.int64) if err is None else err)
    hb = bias is not None
    novar = (lens_t, lens_t, groups, 0, 0, 0, 0, 0)   # CU_Q, CU_K, TQ, TK, SQ, SK, SG: not read
    if dropout is not None:   # (p, seed): the kernels' (DSEED_LO, DSEED_HI, DTHRESH, DSCALE)
        from cudakit.backends.dropout_api import threshold
        novar += (*_seed_words(dropout[1]), threshold(dropout[0]), 1.0 / (1.0 - dropout[0]))
    else:
        novar += (0, 0, 0, 1.0)
    dr = dropout is not None
    b_args = (_Tensor(bias), *host._strides(bias), bias_heads) if hb else (_Tensor(lse), 0, 0, 0, 0, 1)
    d_args = (_Tensor(db), *db_strides) if db is not None else (_Tensor(lse), 0, 0, 0, 0)
    k1 = b_args[4] == 1   # the key stride 1 as a constant, as the host takes it (kernels/attention.py _unit_keys)
    db_k1 = db_mode in (1, 2) and db_strides[3] == 1
    fwd_out = (out, lse)
    if splits > 1:   # the keys in parts (host._forward_in_parts): float32 workspaces, NaN where unwritten
        fwd_out = (np.full((splits, bh, lq, d), np.nan, np.float32), np.full((splits, bh, lq), np.nan, np.float32))
    kernels.attn_fwd[(math.ceil(lq / fcfg["BLOCK_M"]) * splits, bh)](
        *map(_Tensor, (q, k, fv) + fwd_out), lens_t, err_t, qk_scale, lq, lk, dlo, dhi, heads, *b_args,
        *novar, 0, d, HAS_LENS=has, POS_SCALE=pos_scale and not hb, HAS_BIAS=hb, VARLEN=False, DROPOUT=dr,
        LEFT=dlo > -(1 << 30), LPT=host._order(dlo, dhi), KSPLIT=splits, BIAS_K1=k1, **_tiles(fcfg))
    if splits > 1:
        kernels.attn_fwd_combine[(math.ceil(lq / 32), bh)](*map(_Tensor, fwd_out + (out, lse)), lq, bh, D=d,
                                                            KSPLIT=splits, BLOCK_M=32, BLOCK_D=host.head_block(d))
    kernels.attn_bwd_delta[(math.ceil(lq / 64), bh)](_Tensor(out), _Tensor(g), _Tensor(delta), lq, 1, 0, d,
                                                     BLOCK_M=64, BLOCK_D=cfg["BLOCK_D"])
    kv, qc = host._backward_configs(dtype, cfg)
    args = (lens_t, qk_scale, scale, lq, lk, dlo, dhi, heads, *b_args)
    kernels.attn_bwd_dkdv[(math.ceil(lk / kv["BLOCK_N"]), bh)](
        *map(_Tensor, (q, k, v, g, lse, delta, dk, dv)), *args, *novar, 0, d, HAS_LENS=has,
        EVEN_Q=lq % kv["BLOCK_M"] == 0, HAS_BIAS=hb, VARLEN=False, DROPOUT=dr, BIAS_K1=k1, **_tiles(kv))
    dbq, dbk = (True, True) if db is None else (db_strides[2] != 0 or db.shape[2] > 1, db_strides[3] != 0)
    if db_dims is not None:
        dbq, dbk = db_dims
    kernels.attn_bwd_dq[(math.ceil(lq / qc["BLOCK_M"]), bh)](
        *map(_Tensor, (q, k, v, g, lse, delta, dq)), *args, *d_args, *novar, 0, d, HAS_LENS=has, HAS_BIAS=hb,
        DB_MODE=db_mode, DBQ=dbq, DBK=dbk, VARLEN=False, DROPOUT=dr, BIAS_K1=k1, DB_K1=db_k1, **_tiles(qc))
    return out, lse, dq, dk, dv


def check(bh, lq, lk, d, causal, dtype, rng, fwd_tiles=None, window=None, lens=None, heads=1, splits=1):
    case = (bh, lq, lk, d, causal, dtype, window, lens, splits)
    q, g = (data(rng, (bh, lq, d), dtype) for _ in range(2))
    k, v = (data(rng, (bh, lk, d), dtype) for _ in range(2))
    out, lse, dq, dk, dv = _run(q, k, v, g, causal, dtype, fwd_tiles, window, lens, heads, splits=splits)
    blens = None if lens is None else np.repeat(np.asarray(lens), heads)   # per [BH] entry
    out_r, lse_r, _, dq_r, dk_r, dv_r = ac.reference(q, k, v, 1 / math.sqrt(d), causal, g, window, blens)
    tol = 2e-5 if dtype == "float32" else 4e-3
    np.testing.assert_allclose(f64(out), out_r, atol=tol * 4, rtol=tol, err_msg=f"out {case}")
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_r), err_msg=f"lse -inf rows {case}")
    fin = np.isfinite(lse_r)
    np.testing.assert_allclose(lse[fin], lse_r[fin], atol=1e-5, rtol=1e-5, err_msg=f"lse {case}")
    for name, got, want in (("dq", dq, dq_r), ("dk", dk, dk_r), ("dv", dv, dv_r)):
        # gradients are sums over up to 300 terms of size ~1: an absolute allowance on that scale
        np.testing.assert_allclose(f64(got), want, atol=tol * 10 * max(1.0, np.abs(want).max()), rtol=tol,
                                   err_msg=f"{name} {case}")


def check_unseen_key_inf():
    """Keys at or past a batch's key length are seen by no query, so their dK and dV are 0 even when
    the key holds inf (the padding rows of a query block must not turn it into NaN)."""
    rng = np.random.default_rng(1)
    bh, lq, lk, d = 1, 40, 100, 16
    q, g = (data(rng, (bh, lq, d), "float32") for _ in range(2))
    k, v = (data(rng, (bh, lk, d), "float32") for _ in range(2))
    k[0, 70] = np.inf
    _, _, _, dk, dv = _run(q, k, v, g, True, "float32", lens=[60])
    assert (dk[0, 60:] == 0).all() and (dv[0, 60:] == 0).all(), (dk[0, 60:], dv[0, 60:])


def check_bad_key_length():
    """A key length outside [0, Lk] is recorded in the error flag (code, batch, value, Lk) by the
    forward and clamped: batch 1's 130 acts as 100."""
    rng = np.random.default_rng(2)
    q, g = (data(rng, (4, 30, 16), "float32") for _ in range(2))
    k, v = (data(rng, (4, 100, 16), "float32") for _ in range(2))
    err = np.zeros(8, np.int64)
    out, *_ = _run(q, k, v, g, False, "float32", lens=[50, 130], heads=2, err=err)
    assert list(err[:4]) == [10, 1, 130, 100], err
    want = ac.reference(q, k, v, 0.25, False, g, None, np.array([50, 50, 100, 100]))[0]
    np.testing.assert_allclose(f64(out), want, atol=1e-4, rtol=2e-5)


def check_bias(b, h, lq, lk, d, causal, dtype, bshape, mode, neg_inf_row=False):
    """The bias added to the scores (read by its strides, broadcast dims at stride 0) and its
    gradient, against float64: mode "store" (an element per score, one writer), "atomic" (summed
    over the broadcast dims by atomics), "partial" (a bias broadcast over its rows or keys: each
    tile's sums stored as partials, summed here), "full" (the deterministic path: every score's dS stored in
    a [B, H, Lq, Lk] buffer, summed after). neg_inf_row: a query row whose bias is -inf at every key
    (output 0, lse -inf, no NaN in any gradient)."""
    rng = np.random.default_rng(5)
    bh = b * h
    case = (b, h, lq, lk, d, causal, dtype, bshape, mode)
    q, g = (data(rng, (bh, lq, d), dtype) for _ in range(2))
    k, v = (data(rng, (bh, lk, d), dtype) for _ in range(2))
    bias = rng.standard_normal(bshape).astype(np.float32)
    if neg_inf_row:
        bias[..., min(3, bshape[2] - 1), :] = -np.inf
    full = np.broadcast_to(bias, (b, h, lq, lk))
    dims, view = None, None
    if mode == "full":
        db = np.zeros((b, h, lq, lk), np.float32)
        st, m = (h * lq * lk, lq * lk, lk, 1), 1
    elif mode == "partial":   # per-tile partials, summed after (host._bias_partials' layout)
        _, qc = host._backward_configs(dtype, host._config(dtype, d, None))
        shape, st, view, sum_axes = host._partials_layout(bshape, h, bh, lq, lk, math.ceil(lq / qc["BLOCK_M"]),
                                                          math.ceil(lk / qc["BLOCK_N"]))
        db, m, dims = np.zeros(shape, np.float32), 4, (bshape[2] > 1, bshape[3] > 1)
    else:
        db = np.zeros(bshape, np.float32) if mode == "atomic" else np.full(bshape, 7.0, np.float32)
        st, m = host._strides(db), 1 if mode == "store" else 2
    out, lse, dq, dk, dv = _run(q, k, v, g, causal, dtype, bias=bias, bias_heads=h, db=db, db_strides=st,
                                db_mode=m, db_dims=dims)
    if mode == "partial":
        db = db.astype(np.float64).reshape(view).sum(axis=sum_axes).reshape(bshape)
    ref = ac.reference(q, k, v, 1 / math.sqrt(d), causal, g, bias=full.reshape(bh, lq, lk), want_ds=True)
    out_r, lse_r, _, dq_r, dk_r, dv_r, ds_r = ref
    axes = tuple(i for i in range(4) if bshape[i] == 1)
    db_r = ds_r.reshape(b, h, lq, lk).sum(axis=axes, keepdims=True)
    if mode == "full":
        db = db.sum(axis=axes, keepdims=True)
    tol = 2e-5 if dtype == "float32" else 4e-3
    np.testing.assert_allclose(f64(out), out_r, atol=tol * 4, rtol=tol, err_msg=f"out {case}")
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_r), err_msg=f"lse -inf rows {case}")
    for name, got, want in (("dq", dq, dq_r), ("dk", dk, dk_r), ("dv", dv, dv_r), ("dbias", db, db_r)):
        assert np.isfinite(got).all(), f"{name} {case}: non-finite"
        np.testing.assert_allclose(f64(got), want, atol=tol * 10 * max(1.0, np.abs(want).max()), rtol=tol,
                                   err_msg=f"{name} {case}")


def check_varlen(h, hkv, d, lq, lk, causal, dtype, window=None, max_pad=0, dropout=None, max_grid=None):
    """Packed sequences (VARLEN): q (total_q, H, D), k, v (total_k, Hkv, D) read in place (head
    h // (H / Hkv)), each sequence's masks aligned bottom-right on its own lengths, against the
    float64 reference of each sequence; sequences without rows or keys among them. max_pad: the
    launch's max_seqlen above the longest sequence. dropout: (p, seed), sequence b's mask that of
    the padded (B, H, max_seqlen_q, max_seqlen_k) scores in cudakit.dropout's stream. max_grid: the
    launches in slices of that many sequence*heads as kernels/attention.py's _grid_slices makes
    them past 65535 (each told its first, BH0)."""
    from cudakit.backends.cpu_dropout import mask
    from cudakit.backends.dropout_api import threshold
    from cudakit.backends.attention_masks import relative_bounds
    rng = np.random.default_rng(7)
    case = (h, hkv, d, lq, lk, causal, dtype, window)
    cq, ck = (np.concatenate([[0], np.cumsum(x)]).astype(np.int32) for x in (lq, lk))
    tq, tk, nb, grp = int(cq[-1]), int(ck[-1]), len(lq), h // hkv
    q, g = (data(rng, (tq, h, d), dtype) for _ in range(2))
    k, v = (data(rng, (tk, hkv, d), dtype) for _ in range(2))
    mq, mk = max(lq) + max_pad, max(lk) + max_pad
    scale = 1 / math.sqrt(d)
    qk_scale = scale * math.log2(math.e)
    cfg = host._config(dtype, d, None)
    out = np.full_like(q, 7.0)
    dq = np.full_like(q, 7.0)
    dk, dv = (np.full((tk, h, d), 7.0, q.dtype) for _ in range(2))
    lse, delta = np.zeros((tq, h), np.float32), np.zeros((tq, h), np.float32)
    err = np.zeros(8, np.int64)
    dlo, dhi = relative_bounds(causal, window, mq + mk + 1)
    drop, keep = (0, 0, 0, 1.0), None
    if dropout is not None:
        p, seed = dropout
        drop = (*_seed_words(seed), threshold(p), 1 / (1 - p))
        keep = mask((nb * h, mq, mk), threshold(p), seed)
    cu = (_Tensor(cq), _Tensor(ck), grp, tq, tk, h * d, hkv * d, 0, *drop)
    dummy = _Tensor(np.zeros(1, np.float32))
    nobias = (dummy, 0, 0, 0, 0, 1)
    saved = host._MAX_GRID_Y
    host._MAX_GRID_Y = max_grid or saved
    try:
        slices = list(host._grid_slices(nb * h))
    finally:
        host._MAX_GRID_Y = saved
    assert max_grid is None or len(slices) > 1, slices
    for bh0, n in slices:
        kernels.attn_fwd[(max(1, math.ceil(mq / cfg["BLOCK_M"])), n)](
            *map(_Tensor, (q, k, v, out, lse)), dummy, _Tensor(err), qk_scale, mq, mk, dlo, dhi, h, *nobias, *cu, bh0,
            d, HAS_LENS=False, POS_SCALE=True, HAS_BIAS=False, VARLEN=True, DROPOUT=keep is not None, **_tiles(cfg))
    assert not err.any(), err
    kernels.attn_bwd_delta[(math.ceil(tq * h / 64), 1)](_Tensor(out.reshape(1, -1, d)), _Tensor(g.reshape(1, -1, d)),
                                                       _Tensor(delta.reshape(1, -1)), tq * h, 1, 0, d, BLOCK_M=64,
                                                       BLOCK_D=cfg["BLOCK_D"])
    kv, qc = host._backward_configs(dtype, cfg)
    args = (dummy, qk_scale, scale, mq, mk, dlo, dhi, h, *nobias)
    for bh0, n in slices:
        kernels.attn_bwd_dkdv[(max(1, math.ceil(mk / kv["BLOCK_N"])), n)](
            *map(_Tensor, (q, k, v, g, lse, delta, dk, dv)), *args, *cu, bh0, d, HAS_LENS=False, EVEN_Q=False,
            HAS_BIAS=False, VARLEN=True, DROPOUT=keep is not None, **_tiles(kv))
        kernels.attn_bwd_dq[(max(1, math.ceil(mq / qc["BLOCK_M"])), n)](
            *map(_Tensor, (q, k, v, g, lse, delta, dq)), *args, dummy, 0, 0, 0, 0, *cu, bh0, d, HAS_LENS=False,
            HAS_BIAS=False, DB_MODE=0, DBQ=True, DBK=True, VARLEN=True, DROPOUT=keep is not None, **_tiles(qc))
    tol = 2e-5 if dtype == "float32" else 4e-3
    for b in range(nb):
        rq, rk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if lq[b] == 0:
            continue
        if lk[b] == 0:   # no keys: out 0, lse -inf
            assert (out[rq] == 0).all() and np.isneginf(lse[rq]).all(), case
            assert (dq[rq] == 0).all(), case
            continue
        qb, gb = (x[rq].transpose(1, 0, 2) for x in (q, g))
        kb, vb = (np.repeat(x[rk].transpose(1, 0, 2), grp, axis=0) for x in (k, v))
        out_r, lse_r, pr, dq_r, dk_r, dv_r = ac.reference(qb, kb, vb, scale, causal, gb, window)
        if keep is not None:   # the same products through sequence b's slice of the padded mask
            kb_keep = keep[b * h:(b + 1) * h, :lq[b], :lk[b]]
            pd = np.where(kb_keep, pr / (1 - dropout[0]), 0.0)
            out_r = pd @ f64(vb)
            dv_r = pd.swapaxes(1, 2) @ f64(gb)
            dp = np.where(kb_keep, (f64(gb) @ f64(vb).swapaxes(1, 2)) / (1 - dropout[0]), 0.0)
            ds = pr * (dp - (f64(gb) * out_r).sum(-1, keepdims=True))
            dq_r, dk_r = ds @ f64(kb) * scale, ds.swapaxes(1, 2) @ f64(qb) * scale
        big = max(1.0, np.abs(dk_r).max(), np.abs(dq_r).max())
        np.testing.assert_allclose(f64(out[rq].transpose(1, 0, 2)), out_r, atol=tol * 4, rtol=tol,
                                   err_msg=f"out {case} seq {b}")
        np.testing.assert_array_equal(np.isneginf(lse[rq].T), np.isneginf(lse_r), err_msg=f"lse {case} seq {b}")
        for name, got, want in (("dq", dq[rq], dq_r), ("dk", dk[rk], dk_r), ("dv", dv[rk], dv_r)):
            np.testing.assert_allclose(f64(got.transpose(1, 0, 2)), want, atol=tol * 10 * big, rtol=tol,
                                       err_msg=f"{name} {case} seq {b}")
    for b in range(nb):   # key rows of every sequence written (zeros where no query sees them)
        assert not (dk[ck[b]:ck[b + 1]] == 7.0).any(), (case, b)


def check_varlen_bad_length():
    """A sequence longer than max_seqlen_q is recorded in the error flag (code 11, the sequence,
    its Lq and Lk) by the forward: the launch's grid does not cover its rows."""
    rng = np.random.default_rng(3)
    q = data(rng, (50, 1, 16), "float32")
    out, lse, err = np.zeros_like(q), np.zeros((50, 1), np.float32), np.zeros(8, np.int64)
    cu = _Tensor(np.array([0, 10, 50], np.int32))
    dummy = _Tensor(np.zeros(1, np.float32))
    cfg = host._config("float32", 16, None)
    kernels.attn_fwd[(1, 2)](*map(_Tensor, (q, q, q, out, lse)), dummy, _Tensor(err), 0.36, 32, 32,
                             -(1 << 30), 1 << 30, 1, dummy, 0, 0, 0, 0, 1, cu, cu, 1, 50, 50, 16, 16, 0, 0, 0, 0, 1.0, 0,
                             16,
                             HAS_LENS=False, POS_SCALE=True, HAS_BIAS=False, VARLEN=True, DROPOUT=False, **_tiles(cfg))
    assert list(err[:7]) == [11, 1, 40, 40, 32, 32, 2 | 16], err   # past max_seqlen_q and _k (one array for both)
    # a last entry past the packed total (50 rows): flagged, and the rows read and written stay inside
    err[:] = 0
    big = _Tensor(np.array([0, 10, 60], np.int32))
    kernels.attn_fwd[(2, 2)](*map(_Tensor, (q, q, q, out, lse)), dummy, _Tensor(err), 0.36, 64, 64,
                             -(1 << 30), 1 << 30, 1, dummy, 0, 0, 0, 0, 1, big, big, 1, 50, 50, 16, 16, 0, 0, 0, 0, 1.0, 0,
                             16,
                             HAS_LENS=False, POS_SCALE=True, HAS_BIAS=False, VARLEN=True, DROPOUT=False, **_tiles(cfg))
    assert list(err[:7]) == [11, 1, 50, 50, 64, 64, 4 | 32], err   # past the packed rows, both sides
    # a decreasing cu_seqlens_q beside a good cu_seqlens_k: only q's bit
    err[:] = 0
    dec, good = _Tensor(np.array([0, 30, 20], np.int32)), _Tensor(np.array([0, 10, 20], np.int32))
    kernels.attn_fwd[(1, 2)](*map(_Tensor, (q, q, q, out, lse)), dummy, _Tensor(err), 0.36, 32, 32,
                             -(1 << 30), 1 << 30, 1, dummy, 0, 0, 0, 0, 1, dec, good, 1, 50, 50, 16, 16, 0, 0, 0, 0, 1.0, 0,
                             16,
                             HAS_LENS=False, POS_SCALE=True, HAS_BIAS=False, VARLEN=True, DROPOUT=False, **_tiles(cfg))
    assert list(err[:7]) == [11, 1, -10, 10, 32, 32, 1], err


# (H, Hkv, head_dim, Lq per sequence, Lk per sequence, causal, dtype, window, max_seqlen padding)
# varlen with dropout: VARLEN_CASES' fields and (p, seed)
VARLEN_DROPOUT_CASES = [(2, 1, 16, [70, 0, 33], [90, 5, 40], True, "float32", None, 3, (0.3, 2**33 + 5)),
                        (2, 2, 24, [40, 17], [40, 17], False, "float16", (8, 0), 0, (0.1, 7))]
VARLEN_CASES = [(2, 2, 16, [70, 0, 130, 1], [90, 5, 130, 64], False, "float32", None, 0),
                (2, 2, 16, [70, 0, 130, 1], [90, 5, 130, 64], True, "float32", None, 3),
                (4, 2, 64, [129, 64], [257, 30], True, "float16", None, 0),
                (2, 1, 32, [50, 77], [50, 0], False, "float32", (10, 5), 0),
                (2, 2, 24, [100, 40, 7], [100, 40, 7], True, "float32", (16, None), 0)]

def check_gqa(b, h, hkv, lq, lk, d, causal, dtype, lens=None):
    """Grouped-query k, v ([B Hkv, Lk, D]) read in place by [B H, Lq, D] q's kernels, dK and dV per
    q head summed over each group here, against the float64 reference on repeated heads."""
    rng = np.random.default_rng(9)
    grp, case = h // hkv, (b, h, hkv, lq, lk, d, causal, dtype, lens)
    q, g = (data(rng, (b * h, lq, d), dtype) for _ in range(2))
    k, v = (data(rng, (b * hkv, lk, d), dtype) for _ in range(2))
    out, lse, dq, dk, dv = _run(q, k, v, g, causal, dtype, lens=lens, heads=h, groups=grp)
    kr, vr = (np.repeat(x, grp, axis=0) for x in (k, v))
    blens = None if lens is None else np.repeat(np.asarray(lens), h)
    out_r, lse_r, _, dq_r, dk_r, dv_r = ac.reference(q, kr, vr, 1 / math.sqrt(d), causal, g, None, blens)
    tol = 2e-5 if dtype == "float32" else 4e-3
    fold = lambda x: f64(x).reshape(b * hkv, grp, lk, d).sum(1)  # noqa: E731
    np.testing.assert_allclose(f64(out), out_r, atol=tol * 4, rtol=tol, err_msg=f"out {case}")
    for name, got, want in (("dq", f64(dq), dq_r), ("dk", fold(dk), fold(dk_r)), ("dv", fold(dv), fold(dv_r))):
        np.testing.assert_allclose(got, want, atol=tol * 10 * max(1.0, np.abs(want).max()), rtol=tol,
                                   err_msg=f"{name} {case}")


class _Launcher:
    """host._specialized's kernel under the interpreter: launch[grid](*args) with NumPy arrays."""

    def __init__(self, name, consts):
        self.fn = getattr(kernels, name)
        self.consts = {k: v for k, v in consts.items() if k not in ("num_warps", "num_stages", "PDL")}

    def __getitem__(self, grid):
        return lambda *args: self.fn[grid](*(_Tensor(a) if isinstance(a, np.ndarray) else a for a in args),
                                          **self.consts)


@contextlib.contextmanager
def _numpy_host(err):
    """kernels/attention.py's host functions on NumPy arrays: allocation and sums by NumPy, launches
    by the interpreter, key lengths' error flag `err` (the device's flag stands in)."""
    saved = host._cupy.cupy, host._specialized, host._mask_args, host.reduction.reduce

    def mask_args(masks, lq, lk, dummy):
        dlo, dhi = host.key_bounds(lq, lk, masks.causal, masks.window)
        if masks.lengths is None:
            return dummy, dummy, dlo, dhi, 1
        return masks.lengths, err, dlo, dhi, masks.heads
    host._cupy.cupy, host._specialized, host._mask_args = (lambda: np), _Launcher, mask_args
    host.reduction.reduce = lambda x, op, axes: x.sum(axis=axes)   # (a bias gradient's partials, "sum")
    try:
        yield
    finally:
        host._cupy.cupy, host._specialized, host._mask_args, host.reduction.reduce = saved


def check_blhd(b, h, hkv, lq, lk, d, causal, dtype, window=None, lens=None, bias_shape=None, dropout=None,
               packed=False, max_grid=None, views=None):
    """Layout "blhd" read in place (triton_forward_blhd, triton_backward_blhd: VARLEN's UNIFORM
    form) against the [BH, L, D] kernels (_run) on transposed copies, with the same masks: q (B, Lq,
    H, D), k, v (B, Lk, Hkv, D); packed: q, k, v the thirds of one (B, L, 3, H, D) array (rows 3 H D
    elements apart); bias_shape: a bias of that 4-D shape, its gradient stored (an element per
    score) or added atomically (broadcast); max_grid: the launches in slices of that many
    batch*heads (past 65535 on a GPU); views: a function rng -> (q, k, v) of these shapes (views of
    other arrays)."""
    from cudakit.backends.attention_masks import Masks
    from cudakit.backends.dropout_api import threshold
    rng = np.random.default_rng(11)
    grp = h // hkv
    case = (b, h, hkv, lq, lk, d, causal, dtype, window, lens, bias_shape, dropout, packed)
    if views is not None:
        q, k, v = views(rng)
        assert q.shape == (b, lq, h, d) and k.shape == v.shape == (b, lk, hkv, d), case
    elif packed:
        assert lk == lq and hkv == h, case   # (the thirds of one array)
        qkv = data(rng, (b, lq, 3, h, d), dtype)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    else:
        q = data(rng, (b, lq, h, d), dtype)
        k, v = (data(rng, (b, lk, hkv, d), dtype) for _ in range(2))
    assert host.blhd_readable(q, k, v), case
    g = data(rng, (b, lq, h, d), dtype)
    def t(x):   # (B, L, H, D) -> [B H, L, D]
        return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(-1, x.shape[1], d)
    bias = None if bias_shape is None else rng.standard_normal(bias_shape).astype(np.float32)
    drop = None if dropout is None else (threshold(dropout[0]), 1 / (1 - dropout[0]), dropout[1])
    err = np.zeros(8, np.int64)
    masks = Masks(causal, window, None if lens is None else np.asarray(lens, np.int64), h, bias, h, drop)
    saved = host._MAX_GRID_Y
    host._MAX_GRID_Y = max_grid or saved
    try:
        with _numpy_host(err):
            out, lse = host.triton_forward_blhd(q, k, v, 1 / math.sqrt(d), masks, dtype, groups=grp)
            grads = host.triton_backward_blhd(g, q, k, v, out, lse, 1 / math.sqrt(d), masks, dtype, groups=grp)
            if packed:   # (qkv_packed: the gradients written as the thirds of one (B, L, 3, H, D) array)
                pk = host.triton_backward_blhd(g, q, k, v, out, lse, 1 / math.sqrt(d), masks, dtype, packed=True)
    finally:
        host._MAX_GRID_Y = saved
    assert not err.any(), err
    if packed:
        base = pk[0].base
        assert base.shape == (b, lq, 3, h, d) and base.flags.c_contiguous, case
        for i, (x, y) in enumerate(zip(pk[:3], grads[:3])):
            assert x.base is base and x.ctypes.data == base.ctypes.data + i * h * d * x.itemsize, case
            np.testing.assert_array_equal(x, y, err_msg=f"packed gradient {i} {case}")
    db_mode, db = 0, None
    if bias is not None:
        full = bias.shape == (b, h, lq, lk)
        db_mode = 1 if full else 2
        db = np.full(bias.shape, 7.0, np.float32) if full else np.zeros(bias.shape, np.float32)
    want = _run(t(q), t(k), t(v), t(g), causal, dtype, {"SPLIT": False}, window, lens, h, bias=bias, bias_heads=h,
                db=db, db_strides=(0, 0, 0, 0) if db is None else host._strides(db), db_mode=db_mode, groups=grp,
                dropout=dropout)
    tol = 2e-5 if dtype == "float32" else 4e-3
    def back(x, n):   # [B n, L, D] -> (B, L, n, D)
        return f64(x).reshape(b, n, -1, d).transpose(0, 2, 1, 3)

    def fold(x):   # (B, Lk, H, D) of each q head -> (B, Lk, Hkv, D)
        return x.reshape(x.shape[0], x.shape[1], hkv, grp, d).sum(3)
    got = {"out": f64(out), "lse": f64(lse).reshape(b * h, lq), "dq": f64(grads[0]), "dk": fold(f64(grads[1])),
           "dv": fold(f64(grads[2]))}
    ref = {"out": back(want[0], h), "lse": f64(want[1]), "dq": back(want[2], h), "dk": fold(back(want[3], h)),
           "dv": fold(back(want[4], h))}
    if bias is not None:
        got["dbias"], ref["dbias"] = f64(grads[3]), f64(db)
    for name, x in got.items():
        w = ref[name]
        fin = np.isfinite(w)
        np.testing.assert_array_equal(np.isfinite(x), fin, err_msg=f"{name} {case}")
        np.testing.assert_allclose(x[fin], w[fin], atol=tol * 10 * max(1.0, np.abs(w[fin]).max()), rtol=tol,
                                   err_msg=f"{name} {case}")


def _one_row_views(rng):
    """q (3, 1, 2, 8): row 1 of a longer (3, 4, 2, 8) sequence; k, v (3, 1, 1, 8): row 3 of a (3, 7, 2, 1, 8)
    cache of keys and values (one row: its rows' stride is the batches')."""
    cache = data(rng, (3, 7, 2, 1, 8), "float32")
    return data(rng, (3, 4, 2, 8), "float32")[:, 1:2], cache[:, 3:4, 0], cache[:, 3:4, 1]


def _one_head_views(rng):
    """q, k, v (2, 6, 1, 8): the thirds of a (2, 6, 3, 1, 8) projection (one head, its stride 3 D)."""
    x = data(rng, (2, 6, 3, 1, 8), "float32")
    return x[:, :, 0], x[:, :, 1], x[:, :, 2]


# layout "blhd" in place: (B, H, Hkv, Lq, Lk, D, causal, dtype) and the keywords of check_blhd
BLHD_CASES = [((2, 3, 3, 70, 90, 24, True, "float32"), {}),
              ((2, 2, 2, 65, 65, 32, False, "float16"), {"packed": True}),
              ((1, 4, 2, 50, 130, 16, True, "float32"), {"window": (20, 0), "lens": [100]}),
              ((3, 2, 1, 40, 40, 16, False, "float32"), {"packed": False, "lens": [40, 0, 17], "max_grid": 4}),
              ((2, 2, 2, 33, 33, 32, True, "float32"), {"dropout": (0.25, 77), "packed": True}),
              ((2, 4, 2, 33, 47, 32, True, "float32"), {"dropout": (0.25, 78)}),   # Lq != Lk, grouped
              # L = 1 with B > 1 (rows then the batches' stride), q rows of a longer sequence, k, v one
              # row of a longer cache, grouped; L = 1 packed; one head of an odd head stride
              ((3, 2, 1, 1, 1, 8, False, "float32"), {"views": _one_row_views}),
              ((3, 2, 2, 1, 1, 8, True, "float32"), {"packed": True}),
              ((2, 1, 1, 6, 6, 8, False, "float32"), {"views": _one_head_views}),
              ((2, 2, 2, 40, 60, 16, False, "float32"), {"bias_shape": (2, 2, 40, 60)}),
              ((2, 2, 2, 40, 60, 16, True, "float16"), {"bias_shape": (1, 2, 1, 60)}),
              ((1, 2, 2, 1, 1, 8, False, "float32"), {})]


def check_tf32_split():
    """tf32_split: parts with TF32's 10-bit mantissas (the low 13 bits zero) and remainders x - hi
    exactly, whose TF32 truncation (what the tensor cores read of them) restores x to within 2^-21
    of it (exactly where x needs no more bits), in x's layout and transposed per [L, C] matrix,
    with a ragged last row block and C below its block."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 45, 40)) * np.exp2(rng.integers(-20, 20, (3, 45, 40)))).astype(np.float32)
    x[0, 0, :4] = [0.0, -0.0, 1.0, np.float32(1 + 2.0 ** -23)]
    for trans in (False, True):
        shape = (3, 40, 45) if trans else x.shape
        hi, lo = np.full(shape, 7.0, np.float32), np.full(shape, 7.0, np.float32)
        kernels.tf32_split[(3, math.ceil(45 / 32))](*map(_Tensor, (x, hi, lo)), 45, C=40, BLOCK_L=32, BLOCK_C=64,
                                                    TRANS=trans)
        if trans:
            hi, lo = hi.transpose(0, 2, 1), lo.transpose(0, 2, 1)
        assert not (hi.view(np.uint32) & 0x1FFF).any(), trans
        assert (hi.astype(np.float64) + lo == x).all(), trans
        read = (lo.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)   # the tensor cores' truncation
        err = np.abs(hi.astype(np.float64) + read - x)
        assert (err <= 2.0 ** -21 * np.abs(x)).all(), (trans, float((err / np.maximum(np.abs(x), 1e-38)).max()))
        assert hi[0, 0, 2] == 1.0 and lo[0, 0, 2] == 0.0 and hi[0, 0, 3] + lo[0, 0, 3] == x[0, 0, 3]


def check_zero_fill():
    """zero_fill (kernels/attention.py zeros, the bias gradient's buffers): every element 0, NaN
    bits before included, over a ragged last block; nothing past N written."""
    for dtype in (np.float32, np.float16):
        y = np.full(2600, np.nan, dtype)
        kernels.zero_fill[(math.ceil(2500 / 1024),)](_Tensor(y.reshape(1, -1)), 2500, BLOCK=1024)
        assert not y[:2500].view(np.uint8).any() and np.isnan(y[2500:]).all(), dtype


# the materialised float32 backward (kernels/attention_materialized.py): (BH, Lq, Lk, head_dim,
# causal, window, workspace budget): ragged ends, causal with Lq < Lk and Lq > Lk (rows that see no
# key), a window, Lq = 1, head dims below their block, heads in chunks (budget); with the module's
# options: the prep pass folded into the score kernel or not, dQ's heads in reverse order
MAT_CASES = [(2, 70, 90, 24, False, None, None, {"FUSED_PREP": True}),
             (2, 70, 90, 24, True, None, None, {"FUSED_PREP": False}),
             (1, 150, 60, 80, True, None, None, {"FUSED_PREP": True, "L2_ORDER": True}),
             (1, 100, 150, 32, False, (20, 5), None, {"FUSED_PREP": True}),
             (1, 1, 200, 16, True, None, None, {"FUSED_PREP": False}),
             (3, 40, 33, 128, False, None, 8 * 128 * 128, {"FUSED_PREP": True}),
             (3, 40, 33, 96, True, (3, None), 8 * 128 * 128, {"FUSED_PREP": True, "L2_ORDER": True}),
             (2, 300, 140, 64, True, (50, None), None, {"FUSED_PREP": True}),
             (5, 130, 70, 64, False, None, 2 * 8 * 256 * 128, {"FUSED_PREP": False, "L2_ORDER": True}),  # chunks 2, 2, 1
             (5, 130, 70, 40, True, None, 2 * 8 * 256 * 128, {"FUSED_PREP": True}),
             # the long products' masked reads: not aligned to the score tiles, or the mask asked for
             (1, 200, 260, 32, True, (40, 3), None, {"LONG_TILES": {"BLOCK_M": 128, "BLOCK_K": 32, "num_warps": 8,
                                                                    "num_stages": 3}}),
             (2, 70, 190, 96, True, (10, 20), None, {"UNMASKED_LONG": False}),
             (1, 190, 130, 64, True, (0, 0), None, {"SCORE_TILES": {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4,
                                                                    "num_stages": 1}}),
             # the long products' columns in blocks (mat_long's COLS), head dims 128 (two of 64) and 40 (four of 16)
             (2, 150, 90, 128, True, None, None, {"LONG_COLUMNS": 2}),
             (3, 70, 130, 40, False, (30, 5), None, {"LONG_COLUMNS": 4})]
# grouped k, v and key lengths: (case as above, groups, key lengths per batch, q heads a batch): a
# length of 0 (rows that see nothing), one past a score tile and one inside the first, lengths
# with causal and a window, groups split over chunks of heads (budget) or not, both prep forms
MAT_MASK_CASES = [((4, 70, 90, 24, True, None, None, {"FUSED_PREP": True}), 2, None, 4),
                  ((6, 50, 140, 96, False, None, 4 * 8 * 256 * 256, {"FUSED_PREP": False}), 3, None, 6),  # chunks 3, 3
                  ((4, 65, 150, 16, False, None, None, {"FUSED_PREP": True}), 1, [150, 0, 64, 1], 1),
                  ((4, 90, 200, 64, True, None, None, {"FUSED_PREP": False}), 1, [200, 35], 2),
                  ((4, 60, 140, 80, True, (40, 10), None, {"FUSED_PREP": True}), 2, [140, 0], 2),
                  ((8, 40, 300, 32, False, None, 5 * 8 * 128 * 384, {"FUSED_PREP": True}), 4, [129, 300], 4),  # chunks 4, 4
                  # the group sums with the long products' columns in blocks, and with their masked reads
                  ((4, 70, 90, 128, True, None, None, {"LONG_COLUMNS": 2}), 2, None, 4),
                  ((6, 100, 70, 40, True, (30, 5), None, {"UNMASKED_LONG": False}), 3, [70, 20], 3)]


@contextlib.contextmanager
def _mat_options(options):
    """attention_materialized's module switches set to `options` inside, restored after."""
    from cudakit.kernels import attention_materialized as am
    saved = {n: getattr(am, n) for n in options}
    for n, x in options.items():
        setattr(am, n, x)
    try:
        yield am
    finally:
        for n, x in saved.items():
            setattr(am, n, x)


def _mat_launch(name, grid, args, consts):
    """attention_materialized.run's launcher in the interpreter: kernel `name` of
    _attention_mat_triton on NumPy arrays, the launch options dropped."""
    from cudakit.kernels import _attention_mat_triton as mat
    getattr(mat, name)[grid](*(_Tensor(a) if isinstance(a, np.ndarray) else a for a in args),
                             **{n: c for n, c in consts.items() if n not in ("num_warps", "num_stages")})


def _nan_empty(shape):
    """run()'s allocator: NaN everywhere (an entry read before it is written shows)."""
    return np.full(shape, np.nan, np.float32)


def check_materialized(bh, lq, lk, d, causal, window, budget, options, groups=1, lens=None, heads=1):
    """The materialised backward's launch sequence (attention_materialized.run, as the GPU runs it)
    on the float64 reference's out and lse, against its gradients; every array it allocates starts as NaN
    (an entry read before it is written shows, padding included). options:
    the module's switches to set for the case (restored after); groups: q heads a k, v head serves
    (dk, dv: each k, v head's sum over its group); lens: key lengths per batch of `heads` [BH] entries."""
    with _mat_options(options) as am:
        _check_materialized(am, bh, lq, lk, d, causal, window, budget, options, groups, lens, heads)


def _check_materialized(am, bh, lq, lk, d, causal, window, budget, options, groups, lens, heads):
    case = ("materialized", bh, lq, lk, d, causal, window, budget, options, groups, lens, heads)
    rng = np.random.default_rng(4)
    q, g = (data(rng, (bh, lq, d), "float32") for _ in range(2))
    k, v = (data(rng, (bh // groups, lk, d), "float32") for _ in range(2))
    scale = 1 / math.sqrt(d)
    blens = None if lens is None else np.repeat(np.asarray(lens), heads)   # per [BH] entry
    # on k, v repeated over each group; each k, v head's gradient the sum over its group
    out_r, lse_r, _, dq_r, dk_r, dv_r = ac.reference(q, np.repeat(k, groups, 0), np.repeat(v, groups, 0), scale,
                                                     causal, g, window, blens)
    dk_r, dv_r = (x.reshape(bh // groups, groups, lk, d).sum(1) for x in (dk_r, dv_r))

    dlo, dhi = host.key_bounds(lq, lk, causal, window)
    # sms None: dK, dV summed over each group by the kernels; a GPU too large for the grid to fill:
    # per q head (am.sum_groups), summed here
    for sms in (None, 1 << 30) if groups > 1 else (None,):
        got = am.run(g, q, k, v, np.ascontiguousarray(out_r, np.float32), np.ascontiguousarray(lse_r, np.float32),
                     scale, dlo, dhi, empty=_nan_empty, launch=_mat_launch, budget=budget, sms=sms, groups=groups, lengths=None if lens is None else np.asarray(lens, np.int64),
                     heads=heads)
        assert got is not None, case
        dq, dk, dv = got
        assert dk.shape == ((bh // groups if sms is None else bh), lk, d), (case, sms)
        if dk.shape[0] == bh:
            dk, dv = (x.reshape(bh // groups, groups, lk, d).sum(1) for x in (dk, dv))
        for name, x, want in zip(("dq", "dk", "dv"), (dq, dk, dv), (dq_r, dk_r, dv_r)):
            np.testing.assert_allclose(f64(x), want, atol=2e-4 * max(1.0, np.abs(want).max()), rtol=2e-5,
                                       err_msg=f"{name} {case} sms={sms}")
    assert am.run(g, q, k, v, out_r, lse_r, scale, dlo, dhi, empty=None, launch=None, budget=100) is None


# the materialised backward with a bias: (batch, heads, Lq, Lk, head_dim, causal, window, the bias's
# 4-D shape, its gradient's mode, a row the bias masks whole, the module's options); heads in chunks
# (a budget) with a stored gradient
MAT_BIAS_CASES = [(2, 2, 70, 90, 24, False, None, (2, 2, 70, 90), "store", True, {"FUSED_PREP": True}, None),
                  (2, 2, 70, 150, 96, True, (30, 4), (1, 2, 70, 150), "atomic", False, {"FUSED_PREP": False}, None),
                  (2, 3, 65, 130, 64, False, None, (2, 1, 1, 130), "atomic", False, {"FUSED_PREP": True}, None),
                  (1, 3, 40, 50, 16, True, None, (1, 1, 40, 1), "atomic", True, {}, None),
                  (2, 1, 30, 20, 40, False, None, (1, 1, 1, 1), "atomic", False, {}, None),
                  (3, 2, 50, 70, 32, True, None, (3, 2, 50, 70), "store", False, {}, 2 * 8 * 128 * 128),  # chunks 2, 2, 2
                  # summed from the workspace (mat_bias_sum): whole tiles over the batch, over the heads,
                  # rows and keys summed too, with a window (tiles no row sees skipped), over chunks
                  (3, 2, 70, 150, 64, False, None, (1, 2, 70, 150), "reduce", True, {"FUSED_PREP": True}, None),
                  (2, 3, 130, 200, 96, True, (50, 3), (2, 1, 130, 200), "reduce", False, {}, None),
                  (2, 3, 65, 130, 40, True, None, (2, 1, 1, 130), "reduce", False, {}, 2 * 8 * 128 * 256),
                  # per-tile partials (keys, rows, neither), a window's unvisited tiles, over chunks
                  (2, 3, 65, 130, 64, True, (40, 2), (2, 1, 1, 130), "partial", False, {"FUSED_PREP": True}, None),
                  (1, 3, 140, 50, 16, True, None, (1, 3, 140, 1), "partial", True, {}, 2 * 8 * 256 * 128),
                  (2, 1, 30, 20, 40, False, None, (1, 1, 1, 1), "partial", False, {}, None),
                  (3, 2, 140, 70, 16, False, (20, 20), (1, 1, 140, 1), "reduce", False, {}, 4 * 8 * 256 * 128),
                  (2, 2, 30, 20, 24, True, None, (1, 1, 1, 1), "reduce", False, {}, None)]


def check_materialized_bias(b, h, lq, lk, d, causal, window, bshape, mode, neg_inf_row, options, budget):
    """The materialised backward with an attn_bias read by its strides (broadcast dims at stride 0):
    the gradients and the bias's, stored (one writer an element), summed by atomics or from the
    workspace after the score kernel (mode "reduce"), against
    float64, the forward's out and lse from the reference; neg_inf_row: a query row whose bias is
    -inf at every key (no NaN in any gradient)."""
    with _mat_options(options) as am:
        rng = np.random.default_rng(6)
        bh = b * h
        case = ("materialized bias", b, h, lq, lk, d, causal, window, bshape, mode, options, budget)
        q, g = (data(rng, (bh, lq, d), "float32") for _ in range(2))
        k, v = (data(rng, (bh, lk, d), "float32") for _ in range(2))
        bias = rng.standard_normal(bshape).astype(np.float32)
        if neg_inf_row:
            bias[..., min(3, bshape[2] - 1), :] = -np.inf
        full = np.broadcast_to(bias, (b, h, lq, lk)).reshape(bh, lq, lk)
        scale = 1 / math.sqrt(d)
        out_r, lse_r, _, dq_r, dk_r, dv_r, ds_r = ac.reference(q, k, v, scale, causal, g, window, bias=full,
                                                               want_ds=True)
        axes = tuple(i for i in range(4) if bshape[i] == 1)
        db_r = ds_r.reshape(b, h, lq, lk).sum(axis=axes, keepdims=True)
        db = np.zeros(bshape, np.float32)
        grad = (db, *host._strides(db), {"store": 1, "atomic": 2, "reduce": 3}.get(mode), bshape[2] > 1, bshape[3] > 1)
        if mode == "partial":   # per-tile partials of the score kernel's tiles, summed here
            sc = am.score_tiles(am.head_block(d))
            shape, st, view, sum_axes = host._partials_layout(bshape, h, bh, lq, lk, am.padded(lq) // sc["BLOCK_M"],
                                                              am.padded(lk) // sc["BLOCK_N"])
            db = np.zeros(shape, np.float32)
            grad = (db, *st, 4, bshape[2] > 1, bshape[3] > 1)

        dlo, dhi = host.key_bounds(lq, lk, causal, window)
        got = am.run(g, q, k, v, np.ascontiguousarray(out_r, np.float32), np.ascontiguousarray(lse_r, np.float32), scale, dlo, dhi,
                     empty=_nan_empty, launch=_mat_launch, budget=budget, bias=(bias, *host._strides(bias), h),
                     bias_grad=grad)
        assert got is not None, case
        if mode == "partial":
            db = db.astype(np.float64).reshape(view).sum(axis=sum_axes).reshape(bshape)
        for name, x, want in zip(("dq", "dk", "dv", "dbias"), (*got, db), (dq_r, dk_r, dv_r, db_r)):
            assert np.isfinite(x).all(), f"{name} {case}: non-finite"
            np.testing.assert_allclose(f64(x), want, atol=2e-4 * max(1.0, np.abs(want).max()), rtol=2e-5,
                                       err_msg=f"{name} {case}")


# the materialised backward with dropout: (BH, Lq, Lk, head_dim, causal, p, seed, workspace budget,
# the module's options): both prep forms, a causal diagonal, heads in chunks (the mask indexes the
# whole arrays' heads), a seed whose words are negative int32s
MAT_DROPOUT_CASES = [(2, 70, 90, 24, False, 0.3, 12345, None, {"FUSED_PREP": True}),
                     (3, 130, 100, 96, True, 0.2, 0xF00DFACE_9ABCDEF0, None, {"FUSED_PREP": False}),
                     (5, 50, 140, 40, True, 0.5, 2**40 + 7, 2 * 8 * 128 * 256, {})]   # chunks 2, 2, 1


def check_materialized_dropout(bh, lq, lk, d, causal, p, seed, budget, options):
    """The materialised backward with dropout on the probabilities: the mask regenerated from
    cudakit.dropout's Philox stream over the flat (BH, Lq, Lk) scores, so the gradients match the
    float64 reference under that mask (out and lse from the reference)."""
    from cudakit.backends.cpu_dropout import mask
    from cudakit.backends.dropout_api import threshold
    with _mat_options(options) as am:
        rng = np.random.default_rng(12)
        case = ("materialized dropout", bh, lq, lk, d, causal, p, seed, budget, options)
        q, g = (data(rng, (bh, lq, d), "float32") for _ in range(2))
        k, v = (data(rng, (bh, lk, d), "float32") for _ in range(2))
        keep = mask((bh, lq, lk), threshold(p), seed)
        sc = 1 / math.sqrt(d)
        _, lse_r, pr = ac.reference(q, k, v, sc, causal)
        pd = np.where(keep, pr / (1 - p), 0.0)
        out_r = pd @ f64(v)
        dp = np.where(keep, (f64(g) @ f64(v).swapaxes(1, 2)) / (1 - p), 0.0)
        ds = pr * (dp - (f64(g) * out_r).sum(-1, keepdims=True))
        want = (ds @ f64(k) * sc, ds.swapaxes(1, 2) @ f64(q) * sc, pd.swapaxes(1, 2) @ f64(g))

        dlo, dhi = host.key_bounds(lq, lk, causal, None)
        lo, hi = _seed_words(seed)
        got = am.run(g, q, k, v, np.ascontiguousarray(out_r, np.float32), np.ascontiguousarray(lse_r, np.float32), sc,
                     dlo, dhi, empty=_nan_empty, launch=_mat_launch, budget=budget,
                     dropout=(lo, hi, threshold(p), 1.0 / (1.0 - p)))
        assert got is not None, case
        for name, x, w in zip(("dq", "dk", "dv"), got, want):
            np.testing.assert_allclose(f64(x), w, atol=2e-4 * max(1.0, np.abs(w).max()), rtol=2e-5,
                                       err_msg=f"{name} {case}")


# the float32 forward on float16 parts (_attention_f16p_triton.py, kernels/attention.py
# _f16_candidates): (BH, Lq, Lk, head_dim, causal, window, groups, key lengths per batch, q heads a
# batch, key parts, tiles): ragged ends, causal with Lq < Lk and Lq > Lk, windows, Lq = 1, head dims
# below their block (parts padded with zeros), grouped k, v, lengths of 0, the keys in parts
F16P_CASES = [(2, 70, 90, 24, False, None, 1, None, 1, 1, None),
              (2, 70, 90, 40, True, None, 1, None, 1, 1, None),
              (1, 150, 60, 80, True, None, 1, None, 1, 1, None),
              (1, 100, 150, 64, False, (20, 5), 1, None, 1, 1, None),
              (1, 1, 200, 48, True, None, 1, None, 1, 1, None),
              (2, 300, 140, 96, True, (50, None), 1, None, 1, 2, None),
              (2, 130, 300, 128, False, None, 1, None, 1, 3, "small"),
              (4, 70, 90, 128, True, None, 2, None, 4, 2, None),
              (6, 50, 140, 100, False, None, 3, [140, 0], 3, 1, "small"),
              (4, 60, 140, 80, True, (40, 10), 2, [140, 0], 2, 2, None),
              (1, 65, 1, 40, False, None, 1, None, 1, 4, None),
              (2, 70, 96, 40, False, None, 1, None, 1, 1, None),   # D < DP, Lk whole key tiles
              # EVEN (no masked block, whole row and column tiles): one part, in parts, small tiles
              (2, 128, 192, 64, False, None, 1, None, 1, 1, None),
              (2, 256, 320, 128, False, None, 2, None, 2, 3, None),
              (3, 64, 128, 64, False, None, 1, None, 1, 2, "small")]


def _nan_after(x):
    """x as a view at the start of a buffer whose rest (a few tiles' worth) is NaN."""
    buf = np.full(x.size + 8192, np.nan, x.dtype)
    buf[:x.size] = x.ravel()
    return buf[:x.size].reshape(x.shape)


def check_f16_parts(bh, lq, lk, d, causal, window, groups, lens, heads, splits, tiles, bias=None, bias_heads=1,
                    dropout=None, data_scale=None, v_scale=None):
    """The float16-parts forward's launch sequence (f16_split_kv of k and v, attn_fwd_f16p, with key parts
    attn_fwd_combine) against the float64 reference's out and lse; outputs start as 7.0, the parts'
    arrays as NaN. bias: a 4-D array ([BH] entry t its batch t // bias_heads, head t % bias_heads);
    dropout: (p, seed); data_scale: rows of q, k spread over 10^-data_scale .. 1, of v over
    10^-data_scale .. 10^data_scale, V's elements over three more decades. Each output element is
    held to the float32 bound of its terms' size (attention_checks._close), as the GPU tests.
    tiles: None (_F16_TILES) or "small" (_F16_SMALL_GRID_TILES); k and v are followed in memory by
    NaN (a read past their end shows). v_scale: every row of v that small (no row of scale 1 to
    hide a masked key's scale counted in V's running largest)."""
    from cudakit.kernels import _attention_f16p_triton as f16p
    case = ("f16 parts", bh, lq, lk, d, causal, window, groups, lens, heads, splits, tiles,
            None if bias is None else bias.shape, dropout, data_scale is not None, v_scale)
    rng = np.random.default_rng(8)
    q = data(rng, (bh, lq, d), "float32")
    k, v = (data(rng, (bh // groups, lk, d), "float32") for _ in range(2))
    if v_scale is not None:
        v *= np.float32(v_scale)
    if data_scale is not None:   # rows of very different magnitudes (q, k up to 1: scores float32 can
        # resolve), an all-zero key, and elements far below their row's largest
        q *= np.float32(10.0) ** rng.integers(-data_scale, 1, (bh, lq, 1))
        k *= np.float32(10.0) ** rng.integers(-data_scale, 1, (bh // groups, lk, 1))
        v *= np.float32(10.0) ** rng.integers(-data_scale, data_scale + 1, (bh // groups, lk, 1))
        v *= np.float32(10.0) ** rng.integers(-3, 1, v.shape)
        k[:, 0] = 0.0
    k, v = (_nan_after(x) for x in (k, v))
    scale = 1 / math.sqrt(d)
    blens = None if lens is None else np.repeat(np.asarray(lens), heads)
    kr, vr = np.repeat(k, groups, 0), np.repeat(v, groups, 0)
    full = None if bias is None else np.broadcast_to(
        bias, (bh // bias_heads, bias_heads, lq, lk)).reshape(bh, lq, lk)
    out_r, lse_r, pr = ac.reference(q, kr, vr, scale, causal, None, window, blens, bias=full)
    drop, pd = (0, 0, 0, 1.0), pr   # pd: the probabilities as dropout scales them
    if dropout is not None:
        from cudakit.backends.cpu_dropout import mask
        from cudakit.backends.dropout_api import threshold
        p, seed = dropout
        pd = np.where(mask((bh, lq, lk), threshold(p), seed), pr / (1 - p), 0.0)
        out_r = pd @ f64(vr)
        drop = (*_seed_words(seed), threshold(p), 1.0 / (1.0 - p))
    dp = host.head_block(d)
    # (as the host lays them out: views of one float16 and one float32 array, so a store past one
    # part's end lands in the next)
    hl, sc = np.full((4, *k.shape[:2], dp), np.nan, np.float16), np.full((2, *k.shape[:2]), np.nan, np.float32)
    parts = [hl[0], hl[1], sc[0], hl[2], hl[3], sc[1]]
    per = host._F16_SPLIT_ROWS
    f16p.f16_split_kv[(math.ceil(lk / per), k.shape[0], 2)](*map(_Tensor, (k, v, *parts)), lk, D=d, DP=dp,
                                                            BLOCK_L=per)
    t = host._F16_SMALL_GRID_TILES if tiles == "small" else host._F16_TILES
    dlo, dhi = host.key_bounds(lq, lk, causal, window)
    err = np.zeros(8, np.int64)
    lens_a = np.asarray(lens if lens is not None else [0], np.int64)
    b_args = (np.zeros(1, np.float32), 0, 0, 0, 0, 1) if bias is None else (bias, *host._strides(bias), bias_heads)
    even = host.f16_even(dlo, dhi, lens is not None, lq, lk, d, t)
    consts = dict(D=d, DP=dp, HAS_LENS=lens is not None, BLOCK_M=t["BLOCK_M"], BLOCK_N=t["BLOCK_N"],
                  POS_SCALE=bias is None, HAS_BIAS=bias is not None, DROPOUT=dropout is not None,
                  LEFT=dlo > -host._UNBOUNDED, LPT=host._order(dlo, dhi), KSPLIT=splits, EVEN=even,
                  BIAS_K1=b_args[4] == 1)
    out, lse = np.full(q.shape, 7.0, np.float32), np.full((bh, lq), 7.0, np.float32)
    ow, lw = (out, lse) if splits == 1 else (np.full((splits, bh, lq, d), 7.0, np.float32),
                                             np.full((splits, bh, lq), 7.0, np.float32))
    rows = math.ceil(lq / t["BLOCK_M"]) * splits
    args = (q, *parts, ow, lw, lens_a, err, scale * math.log2(math.e), lq, lk, dlo, dhi,
            heads if (lens is not None or groups > 1) else 1, *b_args, groups, *drop, 0)
    f16p.attn_fwd_f16p[(rows, bh)](*(_Tensor(a) if isinstance(a, np.ndarray) else a for a in args), **consts)
    if splits > 1:
        kernels.attn_fwd_combine[(math.ceil(lq / 8), bh)](*map(_Tensor, (ow, lw, out, lse)), lq, bh, D=d,
                                                          KSPLIT=splits, BLOCK_M=8, BLOCK_D=dp)
    assert not err.any(), f"error flag {case}: {err}"
    # each element within the float32 bound of its terms' size, as the GPU tests hold it
    # (attention_checks.check_attention), |P| |V| of the probabilities as dropout scales them
    ac._close(out, out_r, np.abs(pd) @ np.abs(f64(vr)), "float32", f"out {case}")
    assert (np.isneginf(lse) == np.isneginf(lse_r)).all(), f"lse {case}: -inf rows"
    fin = np.isfinite(lse_r)
    np.testing.assert_allclose(lse[fin], lse_r[fin], atol=1e-5 * max(1.0, np.abs(lse_r[fin]).max()), rtol=1e-5,
                               err_msg=f"lse {case}")


def check_f16_parts_extras():
    """The float16-parts forward with a bias (broadcast over heads, a row it masks whole), with
    dropout, on operands whose rows span many magnitudes (and an all-zero key), and with every
    row of v tiny (both tilings). Returns the cases run."""
    rng = np.random.default_rng(9)
    bias = rng.standard_normal((2, 1, 70, 150)).astype(np.float32)
    bias[..., 3, :] = -np.inf
    check_f16_parts(4, 70, 150, 96, True, (30, 4), 1, None, 1, 1, None, bias=bias, bias_heads=2)
    check_f16_parts(2, 65, 90, 40, False, None, 1, None, 1, 2, None,
                    bias=rng.standard_normal((1, 1, 1, 90)).astype(np.float32))
    check_f16_parts(2, 70, 90, 64, False, None, 1, None, 1, 1, None, dropout=(0.3, 12345))
    check_f16_parts(3, 130, 100, 128, True, None, 1, None, 1, 2, "small", dropout=(0.2, 0xF00DFACE_9ABCDEF0))
    check_f16_parts(2, 90, 130, 64, False, None, 1, None, 1, 1, None, data_scale=6)
    check_f16_parts(2, 300, 140, 128, True, None, 1, None, 1, 1, None, data_scale=3)   # rows seeing few keys
    check_f16_parts(2, 300, 140, 128, True, None, 1, None, 1, 2, "small", data_scale=3)
    check_f16_parts(3, 130, 100, 96, True, (40, 3), 1, None, 1, 2, "small", dropout=(0.2, 77),
                    bias=rng.standard_normal((3, 1, 130, 100)).astype(np.float32))
    for tiles in (None, "small"):   # every row of v tiny: a masked key's scale must not count in c
        check_f16_parts(2, 70, 90, 64, False, None, 1, None, 1, 1, tiles, v_scale=1e-7)
        check_f16_parts(1, 60, 100, 40, True, None, 1, None, 1, 2, tiles, v_scale=1e-7)
    return 12


def check_dropout(bh, lq, lk, d, causal, dtype, p, seed):
    """Dropout on the probabilities: the kernels' Philox mask (regenerated in the backward) equals
    cudakit.dropout's stream over the flat (BH, Lq, Lk) scores, so out and the gradients match the
    float64 reference with that mask."""
    from cudakit.backends.cpu_dropout import mask
    from cudakit.backends.dropout_api import threshold
    rng = np.random.default_rng(11)
    case = (bh, lq, lk, d, causal, dtype, p, seed)
    q, g = (data(rng, (bh, lq, d), dtype) for _ in range(2))
    k, v = (data(rng, (bh, lk, d), dtype) for _ in range(2))
    out, lse, dq, dk, dv = _run(q, k, v, g, causal, dtype, dropout=(p, seed))
    keep = mask((bh, lq, lk), threshold(p), seed)
    sc = 1 / math.sqrt(d)
    _, lse_r, pr = ac.reference(q, k, v, sc, causal)
    pd = np.where(keep, pr / (1 - p), 0.0)
    out_r = pd @ f64(v)
    dv_r = pd.swapaxes(1, 2) @ f64(g)
    dp = np.where(keep, (f64(g) @ f64(v).swapaxes(1, 2)) / (1 - p), 0.0)
    ds = pr * (dp - (f64(g) * out_r).sum(-1, keepdims=True))
    tol = 2e-5 if dtype == "float32" else 4e-3
    for name, got, want in (("out", out, out_r), ("dq", dq, ds @ f64(k) * sc), ("dk", dk, ds.swapaxes(1, 2) @ f64(q) * sc),
                            ("dv", dv, dv_r)):
        np.testing.assert_allclose(f64(got), want, atol=tol * 10 * max(1.0, np.abs(want).max()), rtol=tol,
                                   err_msg=f"{name} {case}")
    fin = np.isfinite(lse_r)
    np.testing.assert_allclose(lse[fin], lse_r[fin], atol=1e-5, rtol=1e-5, err_msg=f"lse {case}")


DROPOUT_CASES = [(2, 70, 90, 24, False, "float32", 0.3, 12345), (1, 129, 200, 64, True, "float16", 0.1, 2**40 + 7),
                 (3, 40, 33, 16, True, "float32", 0.5, 1), (1, 50, 70, 72, False, "float32", 0.2, 99),
                 (2, 33, 47, 32, True, "float32", 0.25, 0xF00DFACE_9ABCDEF0),   # both words >= 2^31: negative int32s
                 # key strides of a multiple of 4 (a Philox call serves four keys: _keep_tile), odd Lq
                 (2, 71, 92, 24, True, "float32", 0.3, 77), (1, 65, 128, 64, False, "float16", 0.2, 2**33 + 5)]

GQA_CASES = [(2, 4, 2, 70, 90, 24, True, "float32", None), (1, 8, 1, 129, 200, 64, False, "float16", None),
             (2, 6, 3, 50, 50, 16, True, "float32", [50, 17]), (1, 4, 2, 40, 70, 80, True, "float32", [33])]

# bias: (batch, heads, Lq, Lk, head_dim, causal, dtype, the bias's 4-D shape, its gradient's mode)
BIAS_CASES = [(2, 2, 70, 90, 24, False, "float32", (2, 2, 70, 90), "store"),
              (2, 2, 70, 90, 24, True, "float32", (1, 2, 70, 90), "atomic"),
              (2, 2, 65, 130, 16, False, "float32", (2, 1, 1, 130), "atomic"),
              (1, 3, 40, 50, 16, True, "float32", (1, 1, 40, 1), "atomic"),
              (2, 1, 30, 20, 16, False, "float32", (1, 1, 1, 1), "atomic"),
              (1, 2, 129, 150, 64, True, "float16", (1, 2, 129, 150), "atomic"),
              (2, 2, 50, 70, 16, False, "float32", (1, 2, 50, 70), "full"),
              (1, 2, 40, 70, 96, True, "float32", (1, 2, 40, 70), "store"),
              # per-tile partials: keys only (padding), rows only, neither; a window and causal
              # diagonals leave tiles unvisited (zeros)
              (2, 2, 65, 130, 16, True, "float32", (2, 1, 1, 130), "partial"),
              (2, 3, 100, 70, 32, False, "float16", (1, 3, 100, 1), "partial"),
              (3, 2, 30, 150, 16, True, "float32", (3, 1, 1, 1), "partial"),
              (1, 2, 129, 300, 64, True, "float16", (1, 2, 1, 300), "partial")]

# masks: (case, window, key lengths per batch, heads a batch): windows narrower and wider than the
# sequence, one-sided, with causal, Lq != Lk (bottom-right), lengths of 0 (rows that see nothing)
MASK_CASES = [((2, 70, 90, 24, False, "float32"), (10, 5), None, 1),
              ((2, 70, 90, 24, True, "float32"), (30, None), None, 1),
              ((1, 130, 130, 32, True, "float16"), (200, 200), None, 1),
              ((1, 100, 260, 64, False, "float16"), (None, 3), None, 1),
              ((4, 65, 150, 16, False, "float32"), None, [150, 0, 64, 1], 1),
              ((4, 90, 70, 16, True, "float32"), None, [70, 35], 2),
              ((2, 129, 257, 64, True, "float16"), (64, 0), [200, 100], 1),
              ((1, 300, 100, 16, True, "float32"), None, None, 1),       # Lq > Lk: the first 200 rows see nothing
              ((2, 40, 100, 16, False, "float32"), (0, 0), [100, 30], 1),   # one key a row
              ((1, 20, 20, 16, True, "float32"), (2**31 - 1, None), None, 1),  # sides past int32's reach
              ((1, 21, 20, 16, False, "float32"), (None, 2**31 - 1), None, 1),
              ((2, 60, 140, 100, True, "float32"), (40, 10), [140, 0], 1),   # the split float32 forward
              ((2, 60, 140, 80, False, "float32"), (30, 20), [100, 7], 1)]

# the forward with the keys in parts (attn_fwd's KSPLIT, attn_fwd_combine): (case, window, key lengths,
# parts): the split float32 forward in one column block and two, causal parts past the diagonal
# (no key: lse -inf, merged away), a window and a batch of no keys, parts beyond the only key block
SPLIT_KEY_CASES = [((2, 130, 300, 128, False, "float32"), None, None, 2),
                   ((1, 129, 200, 90, True, "float32"), None, None, 3),
                   ((2, 60, 140, 100, True, "float32"), (40, 10), [140, 0], 2),
                   ((1, 150, 170, 64, True, "float16"), None, None, 2),
                   ((1, 65, 1, 8, False, "float32"), None, None, 4),
                   ((1, 300, 300, 64, True, "float32"), (50, 0), None, 3)]   # row blocks past key 0

# the split forward's O^T form (host.V_IN_PLACE, attn_fwd's OT: V read as it comes), one column block
# (head dims 33..64 and 97..128) and two (80, 90): (case, window, key lengths, parts)
V_IN_PLACE_CASES = [((2, 130, 300, 128, False, "float32"), None, None, 1),
                    ((1, 129, 200, 112, True, "float32"), None, None, 1),
                    ((2, 150, 170, 48, True, "float32"), None, None, 1),
                    ((2, 60, 140, 100, True, "float32"), (40, 10), [140, 0], 1),
                    ((2, 130, 300, 64, False, "float32"), None, None, 2),
                    ((1, 300, 300, 128, True, "float32"), (50, 0), None, 3),
                    ((1, 100, 130, 80, True, "float32"), None, None, 1),
                    ((1, 129, 200, 90, False, "float32"), None, [150], 3)]

# forward tile overrides (flash_attention's block_size sets BLOCK_N): narrow and wide key blocks
TILE_CASES = [((1, 150, 170, 64, True, "float16"), {"BLOCK_N": 16}),
              ((1, 150, 300, 64, False, "float16"), {"BLOCK_N": 128}),
              ((1, 100, 130, 32, True, "float32"), {"BLOCK_M": 32, "BLOCK_N": 128}),
              # the forward's path for a zero or negative scale (scaled scores), here with a positive one
              ((1, 150, 170, 64, True, "float16"), {"POS_SCALE": False})]

if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("set TRITON_INTERPRET=1 (before Triton is imported)")
    for case in CASES:
        check(*case, np.random.default_rng(0))
    for case, tiles in TILE_CASES:
        check(*case, np.random.default_rng(0), fwd_tiles=tiles)
    for case, window, lens, heads in MASK_CASES:
        check(*case, np.random.default_rng(0), window=window, lens=lens, heads=heads)
    for case, window, lens, splits in SPLIT_KEY_CASES:
        check(*case, np.random.default_rng(0), window=window, lens=lens, splits=splits)
    check_unseen_key_inf()
    check_bad_key_length()
    for case in BIAS_CASES:
        check_bias(*case)
    check_bias(2, 2, 40, 60, 16, False, "float32", (2, 2, 40, 60), "store", neg_inf_row=True)
    check_bias(1, 2, 40, 60, 16, True, "float32", (1, 2, 40, 60), "atomic", neg_inf_row=True)
    for case in VARLEN_CASES:
        check_varlen(*case[:7], window=case[7], max_pad=case[8])
    for case in VARLEN_DROPOUT_CASES:
        check_varlen(*case[:7], window=case[7], max_pad=case[8], dropout=case[9])
    # launches in slices of 3 sequence*heads (past 65535 on a GPU), one ending inside a sequence's heads
    check_varlen(*VARLEN_DROPOUT_CASES[0][:7], window=VARLEN_DROPOUT_CASES[0][7], max_pad=3,
                 dropout=VARLEN_DROPOUT_CASES[0][9], max_grid=3)
    check_varlen(*VARLEN_CASES[2][:7], max_grid=3)
    check_varlen_bad_length()
    for case in GQA_CASES:
        check_gqa(*case)
    for case, kw in BLHD_CASES:
        check_blhd(*case, **kw)
    for case in DROPOUT_CASES:
        check_dropout(*case)
    check_tf32_split()
    check_zero_fill()
    shipped = host._SPLIT_TILES   # the split forward's other forms: one column block at 80, two at 112
    for top, two in ((96, False), (128, True)):
        host._SPLIT_TILES = ((top, {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1}, two),)
        check(1, 100, 130, top - 16, True, "float32", np.random.default_rng(0))
    host._SPLIT_TILES = shipped
    # the split forward's tiles for grids of fewer row blocks than SMs (64 x 64, one block of 128 columns)
    split_tiles = host._split_tiles
    host._split_tiles = lambda d, bias=False, causal=False, *_: split_tiles(d, bias, causal, 1, 2)
    for causal in (False, True):
        check(1, 100, 130, 112, causal, "float32", np.random.default_rng(0))
    host._split_tiles = split_tiles
    group = host.CAUSAL_GROUP   # the causal split forward's longest-first order, over groups of 2
    host.CAUSAL_GROUP = 2       # batch*heads and a last group of 1 (every output starts at 7.0)
    check(5, 130, 150, 48, True, "float32", np.random.default_rng(0))
    host.CAUSAL_GROUP = group
    host.V_IN_PLACE = True   # the split forward's O^T form (V read as it comes, attn_fwd OT)
    for case, window, lens, splits in V_IN_PLACE_CASES:
        check(*case, np.random.default_rng(0), window=window, lens=lens, splits=splits)
    host._split_tiles = lambda d, bias=False, causal=False, *_: split_tiles(d, bias, causal, 1, 2)
    check(1, 100, 130, 128, True, "float32", np.random.default_rng(0))   # on the small-grid tiles
    host._split_tiles = split_tiles
    host.V_IN_PLACE = False   # and the transposed copy where the shipped choice (None) takes V in place
    check(1, 129, 200, 112, True, "float32", np.random.default_rng(0))
    host.V_IN_PLACE = None
    for case in MAT_CASES:
        check_materialized(*case)
    for case, groups, lens, heads in MAT_MASK_CASES:
        check_materialized(*case, groups=groups, lens=lens, heads=heads)
    for case in MAT_BIAS_CASES:
        check_materialized_bias(*case)
    for case in MAT_DROPOUT_CASES:
        check_materialized_dropout(*case)
    for case in F16P_CASES:
        check_f16_parts(*case)
    for case in F16P_CASES:   # each on the other tiling too
        check_f16_parts(*case[:-1], None if case[-1] == "small" else "small")
    extras = check_f16_parts_extras()
    n = (2 * len(F16P_CASES) + extras + len(MAT_CASES) + len(MAT_MASK_CASES) + len(MAT_BIAS_CASES) + len(MAT_DROPOUT_CASES) + len(CASES) + len(TILE_CASES) + len(MASK_CASES) + len(SPLIT_KEY_CASES) + len(BIAS_CASES) + len(VARLEN_CASES) + len(VARLEN_DROPOUT_CASES) + len(GQA_CASES)
         + len(DROPOUT_CASES) + len(V_IN_PLACE_CASES) + len(BLHD_CASES) + 14)
    print(f"{n} cases match the float64 reference")
