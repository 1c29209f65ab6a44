"""Checks of attention (forward and backward) against float64 references, shared by the CPU and
GPU tests: `dev` (host array -> the backend's array) and `host` (the backend's array -> NumPy)."""
import math

import numpy as np
from helpers import data, f64, np_dtype

import cudakit

# per-dtype error allowance relative to the size of the terms (|P| |V| etc.): 16-bit operands are
# rounded on their way into the tensor cores (P and dS to 16 bits), float32 stays exact-ish
_TOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 2e-5, "float64": 1e-12}
# spacing of the 16-bit subnormals P and dS are rounded to (float16's start at 6e-5): an absolute
# error per term, summed over the terms of a product
_SUB = {"float16": 2.0**-24, "bfloat16": 2.0**-133, "float32": 0.0, "float64": 0.0}
# (leading dims, Lq, Lk, head_dim) run on both backends; the GPU tests add longer and wider ones
SHAPES = [((), 1, 1, 1), ((2, 3), 17, 29, 8), ((1,), 64, 64, 64), ((2,), 33, 5, 24), ((), 0, 4, 8)]
# (leading dims, Lq, Lk, head_dim, causal, window, key lengths per batch) run on both backends:
# windows narrower and wider than the sequence, one-sided, key lengths of 0 (rows that see nothing),
# Lq > Lk causal (bottom-right: the first Lq - Lk rows see nothing), Lq = 1
# (leading dims, Lq, Lk, head_dim, causal, the attn_bias's shape) run on both backends: a bias per
# score, one shared by the batch (ALiBi, relative positions), one per key (padding), a bias
# broadcast over everything, fewer dims than the scores, Lq > Lk causal
BIASES = [((2, 3), 17, 29, 8, False, (2, 3, 17, 29)),
          ((2, 3), 17, 29, 8, True, (1, 3, 17, 29)),
          ((2, 2), 40, 70, 16, False, (2, 1, 1, 70)),
          ((3,), 33, 5, 24, True, (33, 1)),
          ((2,), 1, 70, 8, False, ()),
          ((1, 2), 50, 20, 8, True, (2, 50, 20))]
MASKS = [((2, 3), 17, 29, 8, False, (4, 2), None),
         ((2, 3), 17, 29, 8, True, None, [29, 0]),
         ((3, 2), 40, 40, 16, True, (5, None), [40, 17, 1]),
         ((1,), 50, 20, 8, True, None, None),
         ((2,), 1, 70, 8, False, (3, 3), [70, 64]),
         ((2, 1), 33, 5, 24, False, (100, 100), [5, 2]),
         ((2,), 30, 30, 8, False, (None, 0), [30, 12]),
         ((2,), 21, 20, 8, True, (2**31 - 1, 2**31 - 1), None)]   # sides as wide as int32 holds




def allowed(lead: tuple, lq: int, lk: int, causal: bool, window=None, lens=None):
    """Which keys each query row sees, (*lead, lq, lk) bools: causal and window aligned bottom-right
    (row i at key position i + lk - lq), keys at or past lens[b] (b: the first leading index) masked."""
    i = np.arange(lq)[:, None] + (lk - lq)
    j = np.arange(lk)[None, :]
    ok = np.ones((lq, lk), bool)
    if causal:
        ok &= j <= i
    if window is not None:
        left, right = window
        if left is not None:
            ok &= j >= i - left
        if right is not None:
            ok &= j <= i + right
    ok = np.broadcast_to(ok, tuple(lead) + (lq, lk))
    if lens is not None:
        n = np.asarray(lens).reshape((-1,) + (1,) * (len(lead) + 1))
        ok = ok & (j < n)
    return ok


def reference(q, k, v, scale, causal, g=None, window=None, lens=None, bias=None, want_ds=False):
    """float64 (out, lse, dq, dk, dv) of softmax(q k^T scale + bias) v, [..., L, D] arrays, with the
    masks of allowed(); a row that sees no key: out 0, lse -inf, no gradient. bias: broadcastable to
    the scores; want_ds: dS (the gradient of the scores, the bias's before its broadcast is summed)
    appended."""
    q, k, v = f64(q), f64(k), f64(v)
    s = q @ k.swapaxes(-1, -2) * scale
    if bias is not None:
        s = s + f64(bias)
    lq, lk = s.shape[-2:]
    if causal or window is not None or lens is not None:
        s = np.where(allowed(s.shape[:-2], lq, lk, causal, window, lens), s, -np.inf)
    m = s.max(-1, keepdims=True)
    seen = ~np.isneginf(m)   # a NaN score keeps its row NaN, as the softmax does
    with np.errstate(invalid="ignore", divide="ignore"):
        e = np.exp(s - np.where(seen, m, 0.0))
        total = e.sum(-1, keepdims=True)
        lse = np.where(seen, m + np.log(np.where(seen, total, 1.0)), -np.inf)[..., 0]
        p = np.where(seen, e / np.where(seen, total, 1.0), 0.0)
    out = p @ v
    if g is None:
        return out, lse, p
    g = f64(g)
    dv = p.swapaxes(-1, -2) @ g
    dp = g @ v.swapaxes(-1, -2)
    ds = p * (dp - (g * out).sum(-1, keepdims=True))
    r = out, lse, p, ds @ k * scale, ds.swapaxes(-1, -2) @ q * scale, dv
    return r + (ds,) if want_ds else r


def _close(got, want, scale_ref, dtype, what, sub_ref=0.0):
    got = f64(got)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert np.isfinite(got).all(), f"{what}: non-finite values"
    err = np.abs(got - want)
    # + _SUB: the result itself stored in the dtype (tiny gradients, e.g. dv with Lq = 1, are subnormal)
    tol = _TOL[dtype] * (scale_ref + np.abs(want)) + _SUB[dtype] * (sub_ref + 1) + 1e-30
    bad = err > tol
    assert not bad.any(), f"{what}: {bad.sum()} of {bad.size} off, worst err {err.max():.3g} (tol {tol.max():.3g})"


def _close_lse(got, want, dtype, what):
    """lse: -inf exactly where the reference's row sees no key, close elsewhere."""
    got = f64(got)
    unseen = np.isneginf(want)
    assert (np.isneginf(got) == unseen).all(), f"{what}: -inf rows differ"
    _close(np.where(unseen, 0.0, got), np.where(unseen, 0.0, want), np.ones_like(want), dtype, what)


def check_attention(dev, host, rng, lead, lq, lk, d, dtype, causal, scale=None, block_size=None, strided=False,
                    window=None, lens=None, bias=None, layout="bhld", row_fill=-np.inf, bias_strided=False):
    """bias: the shape of an attn_bias to add (broadcastable to lead + (Lq, Lk)), drawn in dtype with
    its row 1 (where it has rows) row_fill: -inf, so that row sees nothing, or a finite value such
    as -1e4 (a whole row of it: a log-sum-exp far below ln(FLT_MAX)); its gradient is checked too.
    layout "blhd": q, k, v passed as (B, L, H, D) views (lead must be (B, H)). bias_strided: the bias
    passed as a view of every other key of a wider array (a key stride of 2, which the GPU kernels
    read element by element: kernels/attention.py _unit_keys)."""
    q, k, v = data(rng, lead + (lq, d), dtype), data(rng, lead + (lk, d), dtype), data(rng, lead + (lk, d), dtype)
    b_arr = None
    if bias is not None:
        b_arr = data(rng, bias, dtype)
        if len(bias) >= 2 and bias[-2] > 1:
            b_arr[..., 1, :] = row_fill
    if strided:  # non-contiguous views (every other head_dim column of a wider array)
        dev0 = dev
        dev = lambda a: dev0(np.repeat(a, 2, axis=-1))[..., ::2]
    g = data(rng, lead + (lq, d), dtype)
    sc = 1 / math.sqrt(d) if scale is None else scale
    out_r, lse_r, p, dq_r, dk_r, dv_r, ds_r = reference(q, k, v, sc, causal, g, window, lens, b_arr, want_ds=True)
    kw = {"window": window, "key_lengths": None if lens is None else dev(np.asarray(lens))}
    if b_arr is not None:
        kw["attn_bias"] = dev(np.repeat(b_arr, 2, axis=-1))[..., ::2] if bias_strided else dev(b_arr)
    if layout == "blhd":   # (B, L, H, D) views of (B, H, L, D) data, results transposed back
        kw["layout"] = "blhd"
        qd, kd, vd, gd = (dev(np.ascontiguousarray(a.swapaxes(1, 2))) for a in (q, k, v, g))
    if block_size is not None:
        out = host(cudakit.flash_attention(dev(q), dev(k), dev(v), scale, block_size=block_size, causal=causal, **kw))
        _close(out, out_r, np.abs(p) @ np.abs(f64(v)), dtype, "out (flash_attention)")
        return
    if layout != "blhd":
        qd, kd, vd, gd = dev(q), dev(k), dev(v), dev(g)
    out_d, lse_d = cudakit.attention_with_lse(qd, kd, vd, scale, causal, **kw)
    out, lse = host(out_d), host(lse_d)
    if layout == "blhd":
        out = out.swapaxes(1, 2)
    assert out.dtype == np_dtype(dtype) and out.shape == q.shape
    _close(out, out_r, np.abs(p) @ np.abs(f64(v)), dtype, "out")
    # lse is float32 (float64 for float64) from float32 scores: good to a few float32 ulps
    _close_lse(lse, lse_r, "float64" if dtype == "float64" else "float32", "lse")
    grads = cudakit.attention_backward(gd, qd, kd, vd, out_d, lse_d, scale, causal, **kw)
    assert len(grads) == (4 if b_arr is not None else 3)
    dq, dk, dv = (host(t).swapaxes(1, 2) if layout == "blhd" else host(t) for t in grads[:3])
    ag, aq, ak, av = (np.abs(f64(t)) for t in (g, q, k, v))
    # size of the terms: |dS| built from |P| (|dO| |V| + |dO . O|)
    ds_abs = np.abs(p) * (ag @ av.swapaxes(-1, -2) + np.abs((f64(g) * out_r).sum(-1, keepdims=True)))
    _close(dv, dv_r, np.abs(p).swapaxes(-1, -2) @ ag, dtype, "dv", ag.sum(-2, keepdims=True))
    asc = abs(sc)   # the size of the terms: a negative scale flips their sign, not their size
    _close(dq, dq_r, ds_abs @ ak * asc, dtype, "dq", ak.sum(-2, keepdims=True) * asc)
    _close(dk, dk_r, ds_abs.swapaxes(-1, -2) @ aq * asc, dtype, "dk", aq.sum(-2, keepdims=True) * asc)
    assert dq.dtype == dk.dtype == dv.dtype == np_dtype(dtype)
    if b_arr is not None:
        _check_bias_grad(host(grads[3]), b_arr, ds_r, ds_abs, dtype, "dbias")


def _check_bias_grad(db, b_arr, ds_r, ds_abs, dtype, what):
    """The bias's gradient: dS summed over the dims the bias broadcasts, in the bias's shape and dtype
    (ds_abs: the size of dS's terms)."""
    assert db.shape == b_arr.shape and db.dtype == b_arr.dtype
    pad = (1,) * (ds_r.ndim - b_arr.ndim) + b_arr.shape
    axes = tuple(i for i, n in enumerate(pad) if n == 1 and ds_r.shape[i] > 1)
    fold = lambda x: x.sum(axis=axes, keepdims=True).reshape(b_arr.shape)  # noqa: E731
    _close(db, fold(ds_r), fold(ds_abs), dtype, what, fold(np.ones_like(ds_abs)))


def check_nan(dev, host, dtype):
    """A NaN in one key makes every row that attends to it NaN (as the float64 softmax does)."""
    rng = np.random.default_rng(3)
    q, k, v = (data(rng, (1, 6, 8), dtype) for _ in range(3))
    k[0, 2, 0] = np.nan
    out = f64(host(cudakit.attention(dev(q), dev(k), dev(v), causal=True)))
    want = reference(q, k, v, 1 / math.sqrt(8), True)[0]
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    assert np.isnan(out[0, 2:]).all() and np.isfinite(out[0, :2]).all()


def check_attention_blhd(dev, host, rng, b, lq, lk, h, d, dtype, causal):
    """layout="blhd": q, k, v as (B, L, H, D) views (of one packed (B, L, 3, H, D) qkv when Lq = Lk,
    as a transformer's projection gives them), against the (B, H, L, D) reference; outputs come back
    (B, Lq, H, D) C-contiguous, lse (B, H, Lq), gradients (B, L, H, D)."""
    if lq == lk:
        qkv = dev(data(rng, (b, lq, 3, h, d), dtype))
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    else:
        q, k, v = dev(data(rng, (b, lq, h, d), dtype)), dev(data(rng, (b, lk, h, d), dtype)), dev(data(rng, (b, lk, h, d), dtype))
    g = dev(data(rng, (b, lq, h, d), dtype))
    t = lambda x: np.ascontiguousarray(host(x).swapaxes(1, 2))   # noqa: E731 - to (B, H, L, D)
    sc = 1 / math.sqrt(d)
    out_r, lse_r, p, dq_r, dk_r, dv_r = reference(t(q), t(k), t(v), sc, causal, t(g))
    out_d, lse_d = cudakit.attention_with_lse(q, k, v, None, causal, layout="blhd")
    out = host(out_d)
    assert out.shape == (b, lq, h, d) and out_d.flags.c_contiguous and out.dtype == np_dtype(dtype)
    _close(out.swapaxes(1, 2), out_r, np.abs(p) @ np.abs(f64(t(v))), dtype, "out (blhd)")
    _close(host(lse_d), lse_r, np.ones_like(lse_r), "float64" if dtype == "float64" else "float32", "lse (blhd)")
    dq, dk, dv = (host(x) for x in cudakit.attention_backward(g, q, k, v, out_d, lse_d, None, causal, layout="blhd"))
    assert dq.shape == (b, lq, h, d) and dk.shape == dv.shape == (b, lk, h, d)
    ag, aq, ak, av = (np.abs(f64(t(x))) for x in (g, q, k, v))
    ds_abs = np.abs(p) * (ag @ av.swapaxes(-1, -2) + np.abs((f64(t(g)) * out_r).sum(-1, keepdims=True)))
    _close(dv.swapaxes(1, 2), dv_r, np.abs(p).swapaxes(-1, -2) @ ag, dtype, "dv (blhd)", ag.sum(-2, keepdims=True))
    _close(dq.swapaxes(1, 2), dq_r, ds_abs @ ak * sc, dtype, "dq (blhd)", ak.sum(-2, keepdims=True) * sc)
    _close(dk.swapaxes(1, 2), dk_r, ds_abs.swapaxes(-1, -2) @ aq * sc, dtype, "dk (blhd)", aq.sum(-2, keepdims=True) * sc)


def check_attention_gqa(dev, host, rng, b, h, hkv, lq, lk, d, dtype, causal, layout="bhld", bias=None):
    """Grouped-query attention: k and v with hkv heads shared by groups of h / hkv q heads, against
    the reference on repeated heads; dk and dv are the sums over each group. layout "bhld" (B, H, L, D)
    or "blhd" (B, L, H, D). bias: the shape of an attn_bias (broadcastable to (B, H, Lq, Lk)), its
    gradient checked too."""
    g = h // hkv
    q, k, v = data(rng, (b, h, lq, d), dtype), data(rng, (b, hkv, lk, d), dtype), data(rng, (b, hkv, lk, d), dtype)
    go = data(rng, (b, h, lq, d), dtype)
    b_arr = None if bias is None else data(rng, bias, dtype)
    kr, vr = np.repeat(f64(k), g, axis=1), np.repeat(f64(v), g, axis=1)
    sc = 1 / math.sqrt(d)
    out_r, lse_r, p, dq_r, dk_r, dv_r, ds_r = reference(q, kr, vr, sc, causal, go, bias=b_arr, want_ds=True)
    dk_r, dv_r = (x.reshape(b, hkv, g, lk, d).sum(2) for x in (dk_r, dv_r))
    t = (lambda x: np.ascontiguousarray(x.swapaxes(1, 2))) if layout == "blhd" else (lambda x: x)  # noqa: E731
    kw = {} if b_arr is None else {"attn_bias": dev(b_arr)}
    out_d, lse_d = cudakit.attention_with_lse(dev(t(q)), dev(t(k)), dev(t(v)), None, causal, layout=layout, **kw)
    out = t(host(out_d))
    assert out.shape == (b, h, lq, d) and out.dtype == np_dtype(dtype)
    _close(out, out_r, np.abs(p) @ np.abs(vr), dtype, f"out (gqa {layout})")
    _close(host(lse_d), lse_r, np.ones_like(lse_r), "float64" if dtype == "float64" else "float32", "lse (gqa)")
    grads = cudakit.attention_backward(dev(t(go)), dev(t(q)), dev(t(k)), dev(t(v)), out_d, lse_d, None, causal,
                                       layout=layout, **kw)
    assert len(grads) == (3 if b_arr is None else 4)
    dq, dk, dv = (t(host(x)) for x in grads[:3])
    assert dk.shape == dv.shape == (b, hkv, lk, d) and dq.shape == (b, h, lq, d)
    ag, aq, ak, av = np.abs(f64(go)), np.abs(f64(q)), np.abs(kr), np.abs(vr)
    ds_abs = np.abs(p) * (ag @ av.swapaxes(-1, -2) + np.abs((f64(go) * out_r).sum(-1, keepdims=True)))
    grp = lambda x: x.reshape(b, hkv, g, *x.shape[2:]).sum(2)   # noqa: E731
    _close(dv, dv_r, grp(np.abs(p).swapaxes(-1, -2) @ ag), dtype, "dv (gqa)", grp(ag.sum(-2, keepdims=True)))
    _close(dq, dq_r, ds_abs @ ak * sc, dtype, "dq (gqa)", ak.sum(-2, keepdims=True) * sc)
    _close(dk, dk_r, grp(ds_abs.swapaxes(-1, -2) @ aq * sc), dtype, "dk (gqa)", grp(aq.sum(-2, keepdims=True) * sc))
    if b_arr is not None:
        _check_bias_grad(host(grads[3]), b_arr, ds_r, ds_abs, dtype, "dbias (gqa)")


# packed sequences: (H, Hkv, head_dim, Lq per sequence, Lk per sequence, causal, window) run on both
# backends: sequences without rows or without keys, grouped-query heads, windows, Lq != Lk
VARLEN = [(2, 2, 8, [5, 0, 9, 3], [7, 4, 9, 0], False, None),
          (4, 2, 16, [17, 1, 30], [17, 29, 30], True, None),
          (2, 1, 24, [33, 12], [5, 40], True, (4, 2)),
          (3, 3, 40, [1, 64], [70, 64], False, (None, 0))]


def check_varlen(dev, host, rng, h, hkv, d, lq, lk, causal, dtype, window=None, max_pad=0, one_cu=False):
    """attention_varlen forward and backward against each sequence's float64 reference (the heads
    of k, v repeated for the reference only); cu_seqlens given as host lists and as device arrays,
    and where lq == lk as one device array for both (the form cuDNN's ragged path takes). one_cu:
    only the forms cuDNN's ragged path takes (equal host lists, one device array)."""
    cq, ck = (np.concatenate([[0], np.cumsum(x)]).astype(np.int32) for x in (lq, lk))
    grp = h // hkv
    q, g = data(rng, (int(cq[-1]), h, d), dtype), data(rng, (int(cq[-1]), h, d), dtype)
    k, v = data(rng, (int(ck[-1]), hkv, d), dtype), data(rng, (int(ck[-1]), hkv, d), dtype)
    mq, mk = max(lq) + max_pad, max(lk) + max_pad
    sc = 1 / math.sqrt(d)
    cus = [(cq.tolist(), ck.tolist())] + ([] if one_cu else [(dev(cq), dev(ck))])
    if list(lq) == list(lk):
        one = dev(cq)
        cus.append((one, one))
    for cu in cus:
        out_d, lse_d = cudakit.attention_varlen_with_lse(dev(q), dev(k), dev(v), *cu, mq, mk, causal=causal,
                                                         window=window)
        dq, dk, dv = (host(t) for t in cudakit.attention_varlen_backward(dev(g), dev(q), dev(k), dev(v), out_d, lse_d,
                                                                         *cu, mq, mk, causal=causal, window=window))
        out, lse = host(out_d), host(lse_d)
        assert out.shape == q.shape and lse.shape == q.shape[:2] and dk.shape == k.shape and dq.dtype == q.dtype
        for b in range(len(lq)):
            rq, rk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
            if lq[b] and not lk[b]:
                assert (out[rq] == 0).all() and np.isneginf(lse[rq]).all() and (dq[rq] == 0).all()
            if not (lq[b] and lk[b]):
                assert (f64(dk[rk]) == 0).all() and (f64(dv[rk]) == 0).all()
                continue
            qb, gb = (x[rq].transpose(1, 0, 2) for x in (q, g))
            kb, vb = (np.repeat(x[rk].transpose(1, 0, 2), grp, axis=0) for x in (k, v))
            out_r, lse_r, p, dq_r, dk_r, dv_r = reference(qb, kb, vb, sc, causal, gb, window)
            what = f"sequence {b} of {lq}/{lk}"
            _close(out[rq].transpose(1, 0, 2), out_r, np.abs(p) @ np.abs(f64(vb)), dtype, f"out {what}")
            _close_lse(lse[rq].T, lse_r, "float64" if dtype == "float64" else "float32", f"lse {what}")
            ag, aq, ak, av = (np.abs(f64(t)) for t in (gb, qb, kb, vb))
            ds_abs = np.abs(p) * (ag @ av.swapaxes(-1, -2) + np.abs((f64(gb) * out_r).sum(-1, keepdims=True)))
            fold = lambda x: x.reshape(hkv, grp, *x.shape[1:]).sum(1)  # noqa: E731 -- a k head's q heads
            _close(dq[rq].transpose(1, 0, 2), dq_r, ds_abs @ ak * sc, dtype, f"dq {what}", ak.sum(-2, keepdims=True) * sc)
            _close(dk[rk].transpose(1, 0, 2), fold(dk_r), fold(ds_abs.swapaxes(-1, -2) @ aq * sc), dtype, f"dk {what}",
                   fold(np.broadcast_to(aq.sum(-2, keepdims=True) * sc, dk_r.shape)))
            _close(dv[rk].transpose(1, 0, 2), fold(dv_r), fold(np.abs(p).swapaxes(-1, -2) @ ag), dtype, f"dv {what}",
                   fold(np.broadcast_to(ag.sum(-2, keepdims=True), dv_r.shape)))


def check_varlen_dropout(dev, host, rng, h, hkv, d, lq, lk, causal, dtype, p=0.3, seed=11):
    """attention_varlen with dropout against attention() on the same sequences padded to
    (B, H, max Lq, max Lk) with key_lengths, same p and seed (the varlen scores index the dropout
    stream as the padded ones do): forward, lse and backward. causal: lq == lk per sequence and
    the same maxima, so the padded call's bottom-right mask is each sequence's."""
    cq, ck = (np.concatenate([[0], np.cumsum(x)]).astype(np.int32) for x in (lq, lk))
    grp, nb, mq, mk = h // hkv, len(lq), max(lq), max(lk)
    q, g = data(rng, (int(cq[-1]), h, d), dtype), data(rng, (int(cq[-1]), h, d), dtype)
    k, v = data(rng, (int(ck[-1]), hkv, d), dtype), data(rng, (int(ck[-1]), hkv, d), dtype)
    drop = {"dropout_p": p, "seed": seed}
    out_d, lse_d = cudakit.attention_varlen_with_lse(dev(q), dev(k), dev(v), dev(cq), dev(ck), mq, mk, causal=causal,
                                                     **drop)
    grads = [host(t) for t in cudakit.attention_varlen_backward(dev(g), dev(q), dev(k), dev(v), out_d, lse_d, dev(cq),
                                                                dev(ck), mq, mk, causal=causal, **drop)]
    out, lse = host(out_d), host(lse_d)
    pad = lambda x, cu, rows, heads: np.stack([np.pad(x[cu[b]:cu[b + 1]], ((0, rows - (cu[b + 1] - cu[b])), (0, 0), (0, 0))).swapaxes(0, 1)  # noqa: E731
                                               for b in range(nb)])[:, :heads]
    qp, gp = pad(q, cq, mq, h), pad(g, cq, mq, h)
    kp, vp = (np.repeat(pad(x, ck, mk, hkv), grp, axis=1) for x in (k, v))
    lens = np.asarray(lk, np.int64)
    o_p, l_p = cudakit.attention_with_lse(dev(qp), dev(kp), dev(vp), causal=causal, key_lengths=lens, **drop)
    want = [host(t) for t in cudakit.attention_backward(dev(gp), dev(qp), dev(kp), dev(vp), o_p, l_p, causal=causal,
                                                        key_lengths=lens, **drop)]
    o_p, l_p = host(o_p), host(l_p)
    tol = {"float64": 1e-10, "float32": 1e-4}.get(dtype, 2e-2)   # (a wrong mask is off by O(0.1))
    for b in range(nb):
        rq, rk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        what = f"sequence {b} of {lq}/{lk}"
        np.testing.assert_allclose(f64(out[rq]).swapaxes(0, 1), f64(o_p[b, :, :lq[b]]), rtol=tol, atol=tol, err_msg=what)
        np.testing.assert_allclose(f64(lse[rq]).T, f64(l_p[b, :, :lq[b]]), rtol=tol, atol=tol, err_msg=what)
        np.testing.assert_allclose(f64(grads[0][rq]).swapaxes(0, 1), f64(want[0][b, :, :lq[b]]), rtol=tol, atol=tol,
                                   err_msg=f"dq {what}")
        for name, got, full in (("dk", grads[1], want[1]), ("dv", grads[2], want[2])):
            summed = f64(full[b, :, :lk[b]]).reshape(hkv, grp, lk[b], d).sum(1)   # a k head's q heads
            np.testing.assert_allclose(f64(got[rk]).swapaxes(0, 1), summed, rtol=tol, atol=tol * grp,
                                       err_msg=f"{name} {what}")
    undropped = host(cudakit.attention_varlen(dev(q), dev(k), dev(v), dev(cq), dev(ck), mq, mk, causal=causal))
    assert not np.allclose(f64(undropped), f64(out)), "dropout changed nothing"


VARLEN_DROPOUT = [(2, 2, 8, [5, 0, 9, 3], [7, 4, 9, 2], False), (4, 2, 16, [17, 1, 30], [17, 1, 30], True),
                  (2, 1, 64, [130, 7], [200, 70], False)]


# dropout on the probabilities: (leading dims, Lq, Lk, head_dim, causal, p, seed) on both backends
DROPOUTS = [((2, 3), 17, 29, 8, False, 0.3, 12345), ((1, 2), 40, 33, 16, True, 0.5, 2**40 + 7),
            ((3,), 1, 70, 24, False, 0.1, 1)]


def dropout_reference(q, k, v, g, keep, p, scale, causal):
    """float64 (out, lse, dq, dk, dv, the probabilities, the dropped and scaled ones, dS) of
    attention with dropout p by the keep mask `keep` (the scores' shape, nonzero: kept), as
    reference()'s: lse is the undropped softmax's."""
    _, lse, pr = reference(q, k, v, scale, causal)
    pd = np.where(keep, pr / (1 - p), 0.0)
    out = pd @ f64(v)
    dp = np.where(keep, (f64(g) @ f64(v).swapaxes(-1, -2)) / (1 - p), 0.0)
    ds = pr * (dp - (f64(g) * out).sum(-1, keepdims=True))
    return (out, lse, ds @ f64(k) * scale, ds.swapaxes(-1, -2) @ f64(q) * scale, pd.swapaxes(-1, -2) @ f64(g),
            pr, pd, ds)


def check_dropout(dev, host, rng, lead, lq, lk, d, dtype, causal, p, seed):
    """attention with dropout_p = p against float64 with cudakit.dropout's mask of the flattened
    (BH, Lq, Lk) scores (the documented stream), forward and backward; the same seed gives the same
    output, another seed another one."""
    from cudakit.backends.cpu_dropout import mask
    from cudakit.backends.dropout_api import threshold
    q, g = data(rng, lead + (lq, d), dtype), data(rng, lead + (lq, d), dtype)
    k, v = data(rng, lead + (lk, d), dtype), data(rng, lead + (lk, d), dtype)
    sc = 1 / math.sqrt(d)
    keep = mask((math.prod(lead), lq, lk), threshold(p), seed).reshape(lead + (lq, lk))
    out_r, lse_r, dq_r, dk_r, dv_r, pr, pd, _ = dropout_reference(q, k, v, g, keep, p, sc, causal)
    kw = {"dropout_p": p, "seed": seed}
    out_d, lse_d = cudakit.attention_with_lse(dev(q), dev(k), dev(v), None, causal, **kw)
    out = host(out_d)
    ag, aq, ak, av = (np.abs(f64(t)) for t in (g, q, k, v))
    apd = np.abs(pd)
    _close(out, out_r, apd @ av, dtype, "out (dropout)")
    _close_lse(host(lse_d), lse_r, "float64" if dtype == "float64" else "float32", "lse (dropout)")
    dq, dk, dv = (host(t) for t in cudakit.attention_backward(dev(g), dev(q), dev(k), dev(v), out_d, lse_d, None,
                                                              causal, **kw))
    # the size of dS's terms: the kept |dO| |V| products (their sum's rounding is on that scale, not
    # on the cancelled |dO . V|), as check_attention's
    # and delta = rowsum(dO * O) from the stored (rounded) output: its rounding on the |dO| |O| scale
    ds_abs = np.abs(pr) * (np.where(keep, ag @ av.swapaxes(-1, -2) / (1 - p), 0.0)
                           + (ag * np.abs(out_r)).sum(-1, keepdims=True))
    _close(dv, dv_r, apd.swapaxes(-1, -2) @ ag, dtype, "dv (dropout)", ag.sum(-2, keepdims=True))
    _close(dq, dq_r, ds_abs @ ak * sc, dtype, "dq (dropout)", ak.sum(-2, keepdims=True) * sc)
    _close(dk, dk_r, ds_abs.swapaxes(-1, -2) @ aq * sc, dtype, "dk (dropout)", aq.sum(-2, keepdims=True) * sc)
    again = host(cudakit.attention(dev(q), dev(k), dev(v), None, causal, **kw))
    np.testing.assert_array_equal(again, out)
    other = host(cudakit.attention(dev(q), dev(k), dev(v), None, causal, dropout_p=p, seed=seed + 1))
    assert lq * lk < 8 or not np.array_equal(other, out)
