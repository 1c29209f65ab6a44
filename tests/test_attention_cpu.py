"""attention on the CPU backend against float64 references; the Triton kernels compiled for sm_90
without a GPU; argument errors."""
import math
import re
import subprocess
import sys

import attention_checks as ac
import numpy as np
import pytest
from helpers import DTYPES

import cudakit


def _dev(x):
    return x


def _host(x):
    return np.asarray(x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lead,lq,lk,d", ac.SHAPES)
def test_attention(lead, lq, lk, d, dtype, causal, rng):
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, dtype, causal)


# issue 27's correctness shapes on the CPU backend (the GPU's are in tests/gpu/test_attention_gpu.py):
# lengths 1, 17, 1000 and 4097 (past the CPU backend's 64 MiB chunks of heads and query rows), head
# dims 40, 80, 96, 128 and 256, one query row against 4096 keys, fully masked rows (key lengths of 0),
# a window wider than the sequence, and a non-contiguous view
LONG_CASES = [((1,), 4097, 4097, 40, True, None, None), ((1, 2), 1000, 1000, 80, False, (1500, 2000), [1000]),
              ((2,), 1, 4096, 96, False, None, None), ((1, 1), 17, 4097, 128, True, None, [0]),
              ((2, 1), 300, 1000, 256, True, (50, 0), [0, 999])]


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
@pytest.mark.parametrize("case", LONG_CASES)
def test_attention_issue_shapes(case, dtype, rng):
    lead, lq, lk, d, causal, window, lens = case
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, dtype, causal, window=window, lens=lens,
                       strided=d == 96)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("case", ac.MASKS)
def test_attention_masks(case, dtype, rng):
    lead, lq, lk, d, causal, window, lens = case
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, dtype, causal, window=window, lens=lens)


def test_masks_with_grouped_heads_and_blhd_match_the_plain_layout(rng):
    """Masks on (B, L, H, D) views and with grouped-query k, v give the (B, H, L, D) results."""
    b, h, hkv, lq, lk, d = 2, 4, 2, 9, 13, 8
    q, g = ac.data(rng, (b, h, lq, d), "float32"), ac.data(rng, (b, h, lq, d), "float32")
    k, v = ac.data(rng, (b, hkv, lk, d), "float32"), ac.data(rng, (b, hkv, lk, d), "float32")
    kw = {"causal": True, "window": (3, None), "key_lengths": np.array([13, 6])}
    kr, vr = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    out_r, lse_r = cudakit.attention_with_lse(q, kr, vr, **kw)
    out, lse = cudakit.attention_with_lse(q, k, v, **kw)
    np.testing.assert_allclose(out, out_r, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(lse, lse_r)
    grads = cudakit.attention_backward(g, q, k, v, out, lse, **kw)
    dq_r, dk_r, dv_r = cudakit.attention_backward(g, q, kr, vr, out_r, lse_r, **kw)
    np.testing.assert_allclose(grads[0], dq_r, rtol=1e-6, atol=1e-7)
    for got, want in zip(grads[1:], (dk_r, dv_r)):
        np.testing.assert_allclose(got, want.reshape(b, hkv, 2, lk, d).sum(2), rtol=1e-5, atol=1e-6)
    t = lambda x: np.ascontiguousarray(x.swapaxes(1, 2))   # noqa: E731
    out_b, lse_b = cudakit.attention_with_lse(t(q), t(kr), t(vr), layout="blhd", **kw)
    np.testing.assert_allclose(out_b, t(out_r), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(lse_b, lse_r)
    dq_b = cudakit.attention_backward(t(g), t(q), t(kr), t(vr), out_b, lse_b, layout="blhd", **kw)[0]
    np.testing.assert_allclose(dq_b, t(dq_r), rtol=1e-6, atol=1e-7)


def test_mask_argument_errors(rng):
    q = ac.data(rng, (2, 3, 5, 8), "float32")
    for w in (5, (1, 2, 3), (-1, 2), (1.5, 2), (True, 1)):
        with pytest.raises(cudakit.ArgumentError, match="window must be None or"):
            cudakit.attention(q, q, q, window=w)
    with pytest.raises(cudakit.ShapeError, match=r"key_lengths must have shape \(2,\)"):
        cudakit.attention(q, q, q, key_lengths=np.array([5, 5, 5]))
    with pytest.raises(cudakit.DTypeError, match="key_lengths must be an integer array"):
        cudakit.attention(q, q, q, key_lengths=np.array([5.0, 5.0]))
    with pytest.raises(cudakit.ArgumentError, match=r"key_lengths\[1\] = 6 is outside \[0, Lk = 5\]"):
        cudakit.attention(q, q, q, key_lengths=[5, 6])
    with pytest.raises(cudakit.ArgumentError, match=r"key_lengths\[0\] = -1"):
        cudakit.attention_backward(q, q, q, q, q, np.zeros((2, 3, 5), np.float32), key_lengths=[-1, 2])


def test_deterministic_backward_flag(rng):
    q = ac.data(rng, (2, 2, 9, 8), "float32")
    out, lse = cudakit.attention_with_lse(q, q, q, causal=True)
    want = cudakit.attention_backward(q, q, q, q, out, lse, causal=True)
    got = cudakit.attention_backward(q, q, q, q, out, lse, causal=True, deterministic=True)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(cudakit.ArgumentTypeError, match="deterministic"):
        cudakit.attention_backward(q, q, q, q, out, lse, deterministic="yes")


def test_varlen_deterministic_backward_flag_and_lse_dtype(rng):
    q = ac.data(rng, (12, 2, 8), "float32")
    cu = np.array([0, 5, 12], np.int32)
    out, lse = cudakit.attention_varlen_with_lse(q, q, q, cu, cu, 7, 7, causal=True)
    want = cudakit.attention_varlen_backward(q, q, q, q, out, lse, cu, cu, 7, 7, causal=True)
    got = cudakit.attention_varlen_backward(q, q, q, q, out, lse, cu, cu, 7, 7, causal=True, deterministic=True)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(cudakit.ArgumentTypeError, match="attention_varlen_backward: deterministic"):
        cudakit.attention_varlen_backward(q, q, q, q, out, lse, cu, cu, 7, 7, deterministic="yes")
    with pytest.raises(cudakit.DTypeError, match="attention_varlen_backward: lse must be a float array"):
        cudakit.attention_varlen_backward(q, q, q, q, out, lse.astype(np.int32), cu, cu, 7, 7)


@pytest.mark.parametrize("bias", [[[0.0, 1.0, -2.0]] * 3, (0.5, -1.0, 2.0), 0.25])
def test_backward_takes_the_bias_in_the_form_the_forward_took(bias, rng):
    """A nested list, a tuple or a Python float as attn_bias: the backward's bias gradient comes back
    in its shape, equal to the array bias's."""
    q, k, v, g = (ac.data(rng, (1, 2, 3, 4), "float64") for _ in range(4))
    out, lse = cudakit.attention_with_lse(q, k, v, attn_bias=bias)
    got = cudakit.attention_backward(g, q, k, v, out, lse, attn_bias=bias)
    want = cudakit.attention_backward(g, q, k, v, out, lse, attn_bias=np.asarray(bias, np.float64))
    assert np.shape(got[3]) == np.shape(bias)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_errors_name_the_function(rng):
    q = ac.data(rng, (1, 2, 3, 4), "float32")
    with pytest.raises(cudakit.ShapeError, match="^attention_with_lse: "):
        cudakit.attention_with_lse(q, q[..., :2], q)
    with pytest.raises(cudakit.DTypeError, match="^attention: q: dtype int32"):
        cudakit.attention(q.astype(np.int32), q, q)


def test_key_lengths_in_a_tuple_and_of_a_narrow_integer_type(rng):
    """A tuple of lengths (a plan signature of its own) and int16 lengths give the list's result."""
    q = ac.data(rng, (2, 2, 9, 8), "float32")
    want = cudakit.attention(q, q, q, key_lengths=[9, 4])
    for lens in ((9, 4), np.array([9, 4], np.int16), np.array([9, 4], np.uint8)):
        np.testing.assert_array_equal(cudakit.attention(q, q, q, key_lengths=lens), want)


def test_an_empty_list_of_lengths_is_the_empty_batchs_lengths():
    """[] has no element to take a dtype from (NumPy makes it float64): for a batch of 0 it is the
    (0,) lengths; cu_seqlens of [] is refused for its length (B + 1 entries), not its dtype."""
    q = np.zeros((0, 4, 5, 8), np.float32)
    assert cudakit.attention(q, q, q, key_lengths=[]).shape == (0, 4, 5, 8)
    p = np.zeros((0, 2, 8), np.float32)
    with pytest.raises(cudakit.ShapeError, match="cu_seqlens_q must be 1-D with B \\+ 1 >= 1 entries"):
        cudakit.attention_varlen(p, p, p, [], [], 0, 0)
    with pytest.raises(cudakit.ShapeError, match="key_lengths"):
        cudakit.attention(np.zeros((2, 4, 5, 8), np.float32), *(np.zeros((2, 4, 5, 8), np.float32),) * 2,
                          key_lengths=[])


def test_rows_that_see_no_key_give_zero_and_minus_inf(rng):
    q = ac.data(rng, (2, 6, 8), "float32")
    k = ac.data(rng, (2, 4, 8), "float32")
    out, lse = cudakit.attention_with_lse(q, k, k, causal=True)   # bottom-right: rows 0, 1 see nothing
    assert (out[:, :2] == 0).all() and np.isneginf(lse[:, :2]).all() and np.isfinite(out).all()
    out, lse = cudakit.attention_with_lse(q, k, k, key_lengths=[0, 4])
    assert (out[0] == 0).all() and np.isneginf(lse[0]).all() and np.isfinite(lse[1]).all()
    grads = cudakit.attention_backward(q, q, k, k, out, lse, key_lengths=[0, 4])
    assert all(np.isfinite(x).all() for x in grads) and (grads[0][0] == 0).all() and (grads[1][0] == 0).all()


def test_flash_attention_seed_call(rng):
    """cuda_backend.flash_attention(q, k, v, scale, block_size=64) with a 0-d array as scale."""
    ac.check_attention(_dev, _host, rng, (2, 2), 40, 40, 16, "float32", False, scale=np.float32(0.25), block_size=64)
    q = ac.data(rng, (1, 2, 8, 16), "float32")
    scale = 1.0 / np.sqrt(np.float32(16))
    np.testing.assert_allclose(cudakit.flash_attention(q, q, q, scale, block_size=64),
                               cudakit.attention(q, q, q), rtol=1e-6)


def test_errors(rng):
    q = ac.data(rng, (2, 5, 8), "float32")
    with pytest.raises(cudakit.ShapeError, match="k and v must be"):
        cudakit.attention(q, ac.data(rng, (2, 5, 4), "float32"), ac.data(rng, (2, 5, 4), "float32"))
    with pytest.raises(cudakit.ShapeError, match="at least one position"):
        cudakit.attention(q, ac.data(rng, (2, 0, 8), "float32"), ac.data(rng, (2, 0, 8), "float32"))
    with pytest.raises(cudakit.ShapeError, match="length, head_dim"):
        cudakit.attention(q[0, 0], q[0, 0], q[0, 0])
    with pytest.raises(cudakit.DTypeError):
        cudakit.attention(q, q.astype(np.float64), q)
    with pytest.raises(ValueError, match="block_size must be one of"):
        cudakit.flash_attention(q, q, q, block_size=48)
    with pytest.raises(ValueError, match="scale must be a finite number"):
        cudakit.attention(q, q, q, scale=float("inf"))
    assert cudakit.flash_attention(q, q, q, block_size=np.int64(64)).shape == q.shape   # an integer, as documented
    for block in (64.0, True, np.float32(64)):
        with pytest.raises(cudakit.ArgumentError, match=re.escape(f"block_size must be one of (16, 32, 64, 128) "
                                                                  f"(got {block!r})")):
            cudakit.flash_attention(q, q, q, block_size=block)
    for big in (1e39, -1e300):   # finite, but past float32's arithmetic: every output would be NaN
        with pytest.raises(cudakit.ArgumentError, match="attention: scale must be at most 2.359e[+]38 in magnitude "
                                                        "for float32 data"):
            cudakit.attention(q, q, q, scale=big)
    cu = np.array([0, 5], np.int32)
    with pytest.raises(cudakit.ArgumentError, match="attention_varlen: scale must be at most"):
        cudakit.attention_varlen(q.swapaxes(0, 1).copy(), q.swapaxes(0, 1).copy(), q.swapaxes(0, 1).copy(), cu, cu,
                                 5, 5, scale=1e39)
    q64 = q.astype(np.float64)
    assert np.isfinite(cudakit.attention(q64, q64, q64, scale=1e39)).all()   # float64 arithmetic takes it
    out, lse = cudakit.attention_with_lse(q, q, q)
    with pytest.raises(cudakit.ShapeError, match="lse must have shape"):
        cudakit.attention_backward(out, q, q, q, out, lse[:, :3])
    with pytest.raises(cudakit.DTypeError, match="attention_backward: lse must be a float array"):
        cudakit.attention_backward(out, q, q, q, out, "abc")
    with pytest.raises(cudakit.ShapeError, match="grad_out must have q's shape"):
        cudakit.attention_backward(out[:, :3], q, q, q, out, lse)


def test_the_split_float32_forward_is_chosen_where_it_was_measured_faster():
    """The float32 forward transposes V once per call and splits K's and V's tiles in the kernel
    (SPLIT) under tf32x3 at head dims 33..128 with the shipped tiles; Triton's own products
    elsewhere: 16-bit data, head dims up to 32, 129..256, ieee and tf32, flash_attention's block
    sizes and explicit tiles."""
    from cudakit.kernels import attention as at
    old = cudakit.set_float32_precision("tf32x3")
    try:
        assert all(at._split_forward(at._config("float32", d, None), None, None) for d in (33, 40, 64, 65, 96, 128))
        assert not any(at._split_forward(at._config("float32", d, None), None, None) for d in (16, 32, 160, 256))
        # one column block of 64 at head dims up to 64, two (64 and the rest's power of two) up to 96
        assert [at._split_tiles(d).get("BLOCK_D2", 0) for d in (40, 64, 65, 80, 81, 96, 97, 128)] == [
            0, 0, 16, 16, 32, 32, 0, 0]
        assert at._split_tiles(80, bias=True)["num_stages"] == 1
        # causal forwards at head dims 81..96 on 64-row tiles (two column blocks still), elsewhere as plain ones
        assert [at._split_tiles(d, causal=True)["BLOCK_M"] for d in (64, 80, 81, 96, 97, 128)] == [
            128, 128, 64, 64, 128, 128]
        assert at._split_tiles(90, causal=True)["BLOCK_D2"] == 32
        # grids of fewer 128-row blocks than SMs, past head dim 80: 64-row tiles
        assert [at._split_tiles(d, blocks=b, sms=132)["BLOCK_M"] for d, b in ((128, 64), (128, 132), (96, 131),
                                                                             (80, 10))] == [64, 128, 64, 128]
        assert not at._split_forward(at._config("bfloat16", 128, None), None, None)
        assert not at._split_forward(at._config("float32", 128, 64), 64, None)
        assert not at._split_forward(at._config("float32", 128, None), None, {"BLOCK_M": 64})
        for prec in ("ieee", "tf32"):
            cudakit.set_float32_precision(prec)
            assert not at._split_forward(at._config("float32", 128, None), None, None), prec
    finally:
        cudakit.set_float32_precision(old)


def test_triton_kernels_compile_for_sm90_without_gpu():
    """Every attention kernel, 16-bit and float32, with key lengths or a bias (each of the bias gradient's
    modes) or neither, compiles for sm_90 here."""
    pytest.importorskip("triton")
    code = r'''
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
import triton
from cudakit.kernels import _attention_triton as src
from cudakit.kernels.attention import _backward_configs, _config
target = GPUTarget("cuda", 90, 32)
def compile(fn, types, consts):
    names = [p.name for p in fn.params]
    consts = dict(consts, **({"PDL": True} if "PDL" in names else {}))   # (as the runtime compiles for sm_90)
    opts = {k: consts.pop(k) for k in ("num_warps", "num_stages") if k in consts}
    sig, cidx = {}, {}
    rt = [n for n in names if n not in consts]
    assert len(rt) == len(types), (rt, types)
    for n, t in zip(rt, types):
        sig[n] = t
    for n, v in consts.items():
        sig[n] = "constexpr"
        cidx[(names.index(n),)] = v
    c = triton.compile(ASTSource(fn, sig, cidx), target=target, options=opts)
    assert len(c.asm["cubin"]) > 1000
    return c
I = ["i32"]
for dt, code, d in (("bfloat16", "bf16", 64), ("bfloat16", "bf16", 128), ("float32", "fp32", 64)):
    cfg = _config(dt, d, None)
    kv, qc = _backward_configs(dt, cfg)
    p = "*" + code
    bias = [p] + I * 5 + ["*i32", "*i32"] + I * 6 + ["i64", "i32", "i64", "fp32"]   # BIAS, strides, HB; CU_Q, CU_K, G,
    # TQ, TK, SQ, SK, SG; the dropout's seed halves, threshold and scale
    # (lens, bias, varlen, dropout, uniform: layout "blhd" read in place, with every mask)
    for lens, hb, var, dr, uni in ((False, False, False, False, False), (True, False, False, False, False)) + (
            ((False, True, False, False, False), (False, False, True, False, False),
             (False, False, False, True, False), (True, True, True, True, True))
            if d == 64 and code == "bf16" else ()):
        for pos in ((False, True) if not (hb or var or dr) else (False,)):
            compile(src.attn_fwd, [p] * 4 + ["*fp32", "*i64", "*i64", "fp32"] + I * 5 + bias + I,   # Q, K, V, O
                    dict(cfg, D=d, HAS_LENS=lens, POS_SCALE=pos, HAS_BIAS=hb, VARLEN=var, DROPOUT=dr, SPLIT=False,
                         LEFT=lens, BLOCK_D2=0, LPT=32 if pos and not (lens or hb or var or dr) else 0,
                         KSPLIT=2 if lens and not var else 1, OT=False, BIAS_K1=hb, UNIFORM=uni))
        for even in (False, True) if not (hb or var or dr) else (False,):
            compile(src.attn_bwd_dkdv, [p] * 4 + ["*fp32"] * 2 + [p] * 2 + ["*i64", "fp32", "fp32"] + I * 5 + bias + I,
                    dict(kv, D=d, HAS_LENS=lens, EVEN_Q=even, HAS_BIAS=hb, VARLEN=var, DROPOUT=dr,
                         BIAS_K1=False, UNIFORM=uni))   # (a bias of strided keys)
        modes = ((1, True, True), (2, True, True), (2, True, False), (2, False, True), (2, False, False))
        for mode, dbq, dbk in (((0, True, True),) if not hb else modes[:1] if uni else modes):
            compile(src.attn_bwd_dq, [p] * 4 + ["*fp32"] * 2 + [p, "*i64", "fp32", "fp32"] + I * 5 + bias[:6]
                    + ["*fp32"] + I * 4 + bias[6:] + I,
                    dict(qc, D=d, HAS_LENS=lens, HAS_BIAS=hb, DB_MODE=mode, DBQ=dbq, DBK=dbk, VARLEN=var, DROPOUT=dr,
                         BIAS_K1=hb and mode == 1, DB_K1=hb and mode == 1, UNIFORM=uni))   # (mode 2: strided keys)
    for uni in (False, True):
        compile(src.attn_bwd_delta, [p] * 2 + ["*fp32"] + I * 3, {"D": d, "BLOCK_M": 64, "BLOCK_D": cfg["BLOCK_D"],
                                                                   "UNIFORM": uni})
compile(src.cast_copy, ["*fp32", "*bf16", "i32"], {"BLOCK": 1024})
print("COMPILED")
'''
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "COMPILED" in r.stdout


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_attention_non_contiguous(dtype, rng):
    ac.check_attention(_dev, _host, rng, (2,), 9, 11, 8, dtype, True, strided=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_nan(dtype):
    ac.check_nan(_dev, _host, dtype)


def test_causal_must_be_bool(rng):
    q = ac.data(rng, (2, 5, 8), "float32")
    with pytest.raises(ValueError, match="causal must be a bool"):
        cudakit.attention(q, q, q, causal=2)
    assert cudakit.attention(q, q, q, causal=np.True_).shape == q.shape


@pytest.mark.parametrize("budget,lead,lq,lk", [(2 * 17 * 29 * 8, (2, 3), 17, 29),   # chunks of 2 heads
                                                (5 * 29 * 8, (2,), 17, 29),         # chunks of 5 query rows
                                                (8, (1,), 9, 40)])                  # one row a chunk
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("causal", [False, True])
def test_matmul_attention_chunks(budget, lead, lq, lk, dtype, causal, rng, monkeypatch):
    """The matrix-product attention (the CPU backend's, and float64's on the GPU) in chunks of heads
    and query rows, forward and backward, as the whole: the causal mask follows each chunk's rows,
    dK and dV sum over the row chunks."""
    from cudakit.backends import matmul_attention
    monkeypatch.setattr(matmul_attention, "_SCORE_BYTES", budget)
    chunks = list(matmul_attention._chunks(math.prod(lead), lq, lk, 8))
    assert len(chunks) > 1
    ac.check_attention(_dev, _host, rng, lead, lq, lk, 8, dtype, causal)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b,lq,lk,h,d", [(2, 17, 17, 3, 8), (1, 5, 9, 2, 16)])
def test_attention_blhd_layout(b, lq, lk, h, d, dtype, causal, rng):
    ac.check_attention_blhd(_dev, _host, rng, b, lq, lk, h, d, dtype, causal)


def test_attention_layout_errors():
    from cudakit.errors import ArgumentError, ShapeError
    q = np.zeros((2, 4, 3, 8), np.float32)
    with pytest.raises(ArgumentError, match="layout must be 'bhld'.*got 'bshd'"):
        cudakit.attention(q, q, q, layout="bshd")
    with pytest.raises(ShapeError, match="layout 'blhd' k must be \\(B, L, H, D\\)"):
        cudakit.attention(q, q[0], q, layout="blhd")
    with pytest.raises(ShapeError, match="k and v must be"):
        cudakit.attention(q, np.zeros((2, 4, 3, 16), np.float32), q, layout="blhd")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ["bhld", "blhd"])
@pytest.mark.parametrize("b,h,hkv,lq,lk,d", [(2, 4, 2, 9, 13, 8), (1, 6, 1, 17, 17, 16)])
def test_attention_grouped_query(b, h, hkv, lq, lk, d, dtype, causal, layout, rng):
    ac.check_attention_gqa(_dev, _host, rng, b, h, hkv, lq, lk, d, dtype, causal, layout)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [(1, 6, 9, 13), (2, 1, 9, 13), (9, 13), (2, 1, 1, 13), (2, 6, 9, 13)])
def test_attention_grouped_query_with_a_bias(bias, dtype, rng):
    """Grouped-query k, v with an additive bias (the (B, 1, Lq, Lk) float mask a grouped-query model
    passes, ALiBi's (1, H, Lq, Lk), ...), forward and backward with the bias's gradient."""
    ac.check_attention_gqa(_dev, _host, rng, 2, 6, 2, 9, 13, 8, dtype, True, bias=bias)


@pytest.mark.parametrize("score_bytes", [None, 4 * 13 * 4 * 3, 4 * 5 * 4])
def test_grouped_query_reads_k_and_v_in_place(score_bytes, rng, monkeypatch):
    """The CPU backend repeats no k, v heads (forward, backward, varlen): matmul_attention reads them
    in place, whole groups a chunk or one head a chunk (score_bytes: chunks of 3 heads, rounded down
    to the group of 2, and of 5 query rows of one head), and matches the float64 reference."""
    from cudakit.backends import matmul_attention
    be = cudakit.get_backend("cpu")
    if score_bytes is not None:
        monkeypatch.setattr(matmul_attention, "_SCORE_BYTES", score_bytes)
    monkeypatch.setattr(type(be), "_repeat_heads", lambda *a: pytest.fail("k, v heads repeated"))
    ac.check_attention_gqa(_dev, _host, rng, 2, 6, 3, 9, 13, 8, "float32", True)
    ac.check_attention_gqa(_dev, _host, rng, 1, 4, 2, 9, 13, 8, "bfloat16", False, "blhd", bias=(1, 4, 9, 13))
    ac.check_varlen(_dev, _host, rng, 4, 2, 16, [17, 1, 30], [17, 29, 30], True, "float32")


@pytest.mark.parametrize("layout", ["bhld", "blhd"])
def test_grouped_query_backward_takes_gradients_summed_by_the_kernels(layout, rng, monkeypatch):
    """A backward module that reads grouped k, v in place may return dk, dv either per q head (the
    backend sums each group) or already summed like k, v (the GPU's materialised float32 kernels):
    both give the reference's gradients. Here the CPU backend's module is made to do the latter."""
    be = cudakit.get_backend("cpu")
    mod = be._attention_module("float32")

    class Summing:
        @staticmethod
        def forward(q, k, v, scale, causal, name, block_n=None, masks=None, need_lse=True, groups=1, q_heads=1):
            kr, vr = (np.repeat(x, groups, axis=0) for x in (k, v))
            return mod.forward(q, kr, vr, scale, causal, name, block_n, masks=masks, need_lse=need_lse)

        @staticmethod
        def backward(do, q, k, v, out, lse, scale, causal, name, masks=None, deterministic=False, groups=1,
                     q_heads=1):
            kr, vr = (np.repeat(x, groups, axis=0) for x in (k, v))
            dq, dk, dv = mod.backward(do, q, kr, vr, out, lse, scale, causal, name, masks=masks)
            return (dq,) + tuple(x.reshape(-1, groups, *x.shape[1:]).sum(1) for x in (dk, dv))

    monkeypatch.setattr(type(be), "_gqa_in_place", lambda self, *a, **k: True)
    monkeypatch.setattr(type(be), "_attention_module", lambda self, name: Summing)
    ac.check_attention_gqa(_dev, _host, rng, 2, 6, 2, 9, 13, 8, "float32", True, layout)


def test_attention_grouped_query_errors():
    from cudakit.errors import ShapeError
    q, k = np.zeros((2, 6, 5, 8), np.float32), np.zeros((2, 4, 5, 8), np.float32)
    with pytest.raises(ShapeError, match="k and v have 4 heads and q has 6: .*Hkv dividing H"):
        cudakit.attention(q, k, k)
    with pytest.raises(ShapeError, match="k and v have 2 heads and q has 0"):   # no q heads
        cudakit.attention(np.zeros((2, 0, 5, 8), np.float32), *(np.zeros((2, 2, 5, 8), np.float32),) * 2)
    with pytest.raises(ShapeError, match="k and v must be"):
        cudakit.attention(q, np.zeros((2, 3, 5, 8), np.float32), np.zeros((2, 2, 5, 8), np.float32))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("case", ac.BIASES)
def test_attention_bias(case, dtype, rng):
    lead, lq, lk, d, causal, bias = case
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, dtype, causal, bias=bias)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("case", ac.BIASES[:3])
def test_attention_bias_with_strided_keys(case, dtype, rng):
    """A bias passed as a view whose keys are strided (the GPU kernels read it by element, not as vectors)."""
    lead, lq, lk, d, causal, bias = case
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, dtype, causal, bias=bias, bias_strided=True)


def test_attention_bias_with_masks_blhd_and_grouped_heads(rng):
    ac.check_attention(_dev, _host, rng, (2, 3), 17, 29, 8, "float32", True, window=(4, 2), lens=[29, 9],
                       bias=(1, 3, 17, 29))
    ac.check_attention(_dev, _host, rng, (2, 3), 17, 29, 8, "float32", False, bias=(2, 1, 17, 29), layout="blhd")
    q = ac.data(rng, (2, 4, 9, 8), "float32")
    k, v = (ac.data(rng, (2, 2, 11, 8), "float32") for _ in range(2))
    bias = ac.data(rng, (1, 4, 9, 11), "float32")
    out, lse = cudakit.attention_with_lse(q, k, v, attn_bias=bias)
    kr, vr = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    np.testing.assert_allclose(out, cudakit.attention(q, kr, vr, attn_bias=bias), rtol=1e-6, atol=1e-6)
    g = ac.data(rng, out.shape, "float32")
    dq, dk, dv, db = cudakit.attention_backward(g, q, k, v, out, lse, attn_bias=bias)
    dq_r, dk_r, dv_r, db_r = cudakit.attention_backward(g, q, kr, vr, out, lse, attn_bias=bias)
    np.testing.assert_allclose(dk, dk_r.reshape(2, 2, 2, 11, 8).sum(2), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(db, db_r, rtol=1e-6, atol=1e-7)


def test_attention_bias_errors(rng):
    q = ac.data(rng, (2, 3, 5, 8), "float32")
    with pytest.raises(cudakit.ShapeError, match=r"attn_bias of shape \(2, 2, 5, 5\) cannot broadcast to the "
                                                 r"scores' shape \(2, 3, 5, 5\)"):
        cudakit.attention(q, q, q, attn_bias=np.zeros((2, 2, 5, 5), np.float32))
    with pytest.raises(cudakit.ShapeError, match="attn_bias"):
        cudakit.attention(q, q, q, attn_bias=np.zeros((1, 2, 3, 5, 5), np.float32))
    with pytest.raises(cudakit.DTypeError, match="attn_bias must be a float array"):
        cudakit.attention(q, q, q, attn_bias=np.zeros((5, 5), np.int32))
    out, lse = cudakit.attention_with_lse(q, q, q)
    with pytest.raises(cudakit.ShapeError, match="attn_bias"):
        cudakit.attention_backward(q, q, q, q, out, lse, attn_bias=np.zeros((4, 1, 1), np.float32))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("case", ac.VARLEN)
def test_attention_varlen(case, dtype, rng):
    h, hkv, d, lq, lk, causal, window = case
    ac.check_varlen(_dev, _host, rng, h, hkv, d, lq, lk, causal, dtype, window)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", ac.VARLEN_DROPOUT)
def test_attention_varlen_dropout_matches_padded_attention(case, dtype, rng):
    ac.check_varlen_dropout(_dev, _host, rng, *case, dtype)


def test_attention_varlen_dropout_errors(rng):
    q = ac.data(rng, (12, 2, 8), "float32")
    cu = [0, 5, 12]
    with pytest.raises(cudakit.ArgumentError, match="attention_varlen: dropout_p must be a real number in"):
        cudakit.attention_varlen(q, q, q, cu, cu, 7, 7, dropout_p=1.0)
    with pytest.raises(cudakit.ArgumentError, match="attention_varlen_backward: dropout_p"):
        cudakit.attention_varlen_backward(q, q, q, q, q, np.zeros((12, 2), np.float32), cu, cu, 7, 7, dropout_p=-0.1)
    with pytest.raises(cudakit.ArgumentError, match="attention_varlen_with_lse: seed"):
        cudakit.attention_varlen_with_lse(q, q, q, cu, cu, 7, 7, dropout_p=0.1, seed=-1)


def test_attention_varlen_errors(rng):
    q = ac.data(rng, (12, 2, 8), "float32")
    k = ac.data(rng, (12, 2, 8), "float32")
    f = cudakit.attention_varlen
    with pytest.raises(cudakit.ArgumentError, match=r"cu_seqlens_q must be non-decreasing: cu_seqlens_q\[2\] = 3 "
                                                    r"< cu_seqlens_q\[1\] = 5"):
        f(q, k, k, [0, 5, 3, 12], [0, 4, 8, 12], 9, 9)
    with pytest.raises(cudakit.ArgumentError, match=r"cu_seqlens_k\[-1\] = 11 must be the packed total, 12 rows"):
        f(q, k, k, [0, 12], [0, 11], 12, 12)
    with pytest.raises(cudakit.ArgumentError, match="more than max_seqlen_q = 8"):
        f(q, k, k, [0, 12], [0, 12], 8, 12)
    with pytest.raises(cudakit.ArgumentError, match=r"cu_seqlens_q\[0\] must be 0"):
        f(q, k, k, [1, 12], [0, 12], 12, 12)
    with pytest.raises(cudakit.ShapeError, match="both be"):
        f(q, k, k, [0, 12], [0, 6, 12], 12, 12)
    with pytest.raises(cudakit.DTypeError, match="integer array"):
        f(q, k, k, np.array([0.0, 12.0]), [0, 12], 12, 12)
    with pytest.raises(cudakit.ArgumentTypeError, match="attention_varlen: cu_seqlens_k is required"):
        f(q, k, k, [0, 12], None, 12, 12)
    with pytest.raises(cudakit.ShapeError, match="Hkv must divide H"):
        f(ac.data(rng, (12, 3, 8), "float32"), k, k, [0, 12], [0, 12], 12, 12)
    with pytest.raises(cudakit.ShapeError, match=r"q must be \(total, heads, head_dim\)"):
        f(q[0], k, k, [0, 12], [0, 12], 12, 12)
    with pytest.raises(cudakit.ArgumentError, match="max_seqlen_k must be an int >= 0"):
        f(q, k, k, [0, 12], [0, 12], 12, -1)
    out, lse = cudakit.attention_varlen_with_lse(q, k, k, [0, 12], [0, 12], 12, 12)
    with pytest.raises(cudakit.DTypeError, match="attention_varlen_backward: grad_out is float64 but q is float32"):
        cudakit.attention_varlen_backward(out.astype(np.float64), q, k, k, out, lse, [0, 12], [0, 12], 12, 12)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("case", ac.DROPOUTS)
def test_attention_dropout(case, dtype, rng):
    lead, lq, lk, d, causal, p, seed = case
    ac.check_dropout(_dev, _host, rng, lead, lq, lk, d, dtype, causal, p, seed)


def test_attention_dropout_arguments(rng):
    q = ac.data(rng, (2, 3, 5, 8), "float32")
    with pytest.raises(cudakit.ArgumentError, match=r"dropout_p must be a real number in \[0, 1\) \(got 1.0\)"):
        cudakit.attention(q, q, q, dropout_p=1.0)
    with pytest.raises(cudakit.ArgumentError, match="seed must be in"):
        cudakit.attention(q, q, q, dropout_p=0.1, seed=-1)
    with pytest.raises(cudakit.ArgumentTypeError, match="seed must be an int"):
        cudakit.attention(q, q, q, dropout_p=0.1, seed=1.5)
    np.testing.assert_array_equal(cudakit.attention(q, q, q, dropout_p=0.0, seed=5), cudakit.attention(q, q, q))


def test_bias_broadcast_over_some_outer_dims_gets_its_gradient_summed_back(rng):
    """A bias that broadcasts some of q's outer leading dims and not others (copied out to all of
    them for the kernels) gets its gradient summed back over the ones it broadcasts."""
    q, k, v = (ac.data(rng, (2, 3, 2, 4, 8), "float64") for _ in range(3))
    for shape in [(2, 1, 2, 4, 4), (1, 3, 2, 4, 4), (2, 3, 1, 1, 4)]:
        b = ac.data(rng, shape, "float64")
        out, lse = cudakit.attention_with_lse(q, k, v, attn_bias=b)
        g = ac.data(rng, out.shape, "float64")
        db = cudakit.attention_backward(g, q, k, v, out, lse, attn_bias=b)[3]
        full = cudakit.attention_backward(g, q, k, v, out, lse, attn_bias=np.ascontiguousarray(
            np.broadcast_to(b, (2, 3, 2, 4, 4))))[3]
        axes = tuple(i for i, n in enumerate(shape) if n == 1)
        np.testing.assert_allclose(db, full.sum(axis=axes, keepdims=True), rtol=1e-12, atol=1e-14)


def test_dropout_arguments_are_checked_on_every_path(rng):
    q = ac.data(rng, (2, 3, 5, 8), "float32")
    t = np.ascontiguousarray(q.swapaxes(1, 2))
    for kw in ({"seed": -1}, {"dropout_p": None}, {"dropout_p": 0.0, "seed": 2**64},
               {"dropout_p": np.array([0.1, 0.2])}, {"seed": np.array([1, 2])}):   # (arrays: no NumPy truth error)
        with pytest.raises((cudakit.ArgumentError, cudakit.ArgumentTypeError)):
            cudakit.attention(q, q, q, **kw)
        with pytest.raises((cudakit.ArgumentError, cudakit.ArgumentTypeError)):
            cudakit.attention_with_lse(q, q, q, **kw)
        with pytest.raises((cudakit.ArgumentError, cudakit.ArgumentTypeError)):
            cudakit.attention_backward(q, q, q, q, q, q[..., 0], **kw)
        with pytest.raises((cudakit.ArgumentError, cudakit.ArgumentTypeError)):
            cudakit.attention(t, t, t, layout="blhd", **kw)


def test_attention_varlen_with_one_cu_seqlens_array_equals_two(rng):
    """One cu_seqlens array for q and k goes through its own planned op (ops._VARLEN_SHARED, the
    array passed once) and hands the backend both arguments: the results equal a call with two
    arrays of the same sequences, with dropout and the backward's keywords."""
    q = ac.data(rng, (30, 4, 8), "float32")
    k, v = ac.data(rng, (30, 2, 8), "float32"), ac.data(rng, (30, 2, 8), "float32")
    g = ac.data(rng, (30, 4, 8), "float32")
    cu = np.array([0, 10, 25, 30], np.int32)
    kw = dict(causal=True, window=(6, 0), dropout_p=0.2, seed=2**40 + 3)
    # max_seqlen_q != max_seqlen_k (the dropout stream's index takes both): a mapping that swapped them shows
    one = cudakit.attention_varlen_with_lse(q, k, v, cu, cu, 15, 17, **kw)
    two = cudakit.attention_varlen_with_lse(q, k, v, cu, cu.copy(), 15, 17, **kw)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(one[0], cudakit.attention_varlen(q, k, v, cu, cu, 17, 15, **kw))
    np.testing.assert_array_equal(cudakit.attention_varlen(q, k, v, cu, cu, 15, 17, **kw), one[0])
    grads = [cudakit.attention_varlen_backward(g, q, k, v, *one, cu, c, 15, 17, deterministic=True, **kw)
             for c in (cu, cu.copy())]
    for a, b in zip(*grads):
        np.testing.assert_array_equal(a, b)


def test_bias_partials_layout_and_bound():
    """A bias broadcast over its rows or keys has its gradient summed from per-tile partials: the
    workspace [BH, row blocks, Lk] (a key dim), [BH, key blocks, Lq] (a row dim) or [BH, row
    blocks, key blocks] (neither), the axes summed the batches and heads it broadcasts plus the
    tiles'; taken while it fits PARTIALS_MAX_BYTES, or always when deterministic; never for a bias
    with both dims (broadcast over batch or heads alone) or for an unbroadcast one's bound."""
    import numpy as np

    from cudakit.backends.attention_masks import Masks
    from cudakit.kernels import attention as at
    assert at._partials_layout((2, 1, 1, 300), 4, 8, 100, 300, 1, 5) == ((8, 1, 300), (300, 0, 300, 0),
                                                                        (2, 4, 1, 300), (1, 2))
    assert at._partials_layout((1, 4, 100, 1), 4, 8, 100, 300, 1, 5) == ((8, 5, 100), (500, 0, 0, 100),
                                                                        (2, 4, 5, 100), (0, 2))
    assert at._partials_layout((1, 1, 1, 1), 4, 8, 100, 300, 2, 5) == ((8, 2, 5), (10, 0, 5, 1),
                                                                      (2, 4, 2, 5), (0, 1, 2, 3))
    pad = Masks(False, bias=np.zeros((4, 1, 1, 32768), np.float32), bias_heads=32)
    small = Masks(False, bias=np.zeros((4, 1, 1, 1024), np.float32), bias_heads=32)
    both = Masks(False, bias=np.zeros((1, 32, 1024, 1024), np.float32), bias_heads=32)
    big = (128, 32768, 32768, 256, 512)   # 4 GiB of partials
    assert not at._partial_bias(pad, *big, False) and at._partial_bias(pad, *big, True)
    assert at._partial_bias(small, 128, 1024, 1024, 8, 16, False)
    assert not at._partial_bias(both, 128, 1024, 1024, 8, 16, True)


def test_cudnn_bias_backward_leaves_out_known_cudnn_failures():
    """cuDNN's backward with a bias is not asked at head dim 256 (no bias gradient there), for one
    query row, or, before backend 9.26, where Lk % 128 == 64 (NaN dQ for rows of very negative
    log-sum-exp: pytorch/pytorch#196678)."""
    from cudakit.kernels import attention as at
    assert at._cudnn_bias_grad_ok(192, 192, 64, 91900) is False
    assert at._cudnn_bias_grad_ok(64, 64, 64, 91900) is False
    assert at._cudnn_bias_grad_ok(192, 192, 64, 92600) is True
    assert at._cudnn_bias_grad_ok(256, 256, 64, 91900) is True
    assert at._cudnn_bias_grad_ok(100, 1000, 128, 91900) is True
    assert at._cudnn_bias_grad_ok(1, 256, 64, 92600) is False
    assert at._cudnn_bias_grad_ok(128, 128, 256, 92600) is False
    assert at._cudnn_bias_grad_ok(192, 192, 64, "not a version") is False


def test_full_bias_gradient_bound():
    """A bias broadcast over batch or heads alone (ALiBi's (1, H, Lq, Lk)) has every score's dS
    stored and summed by cudakit's reduction (no atomics) while that float32 buffer fits
    PARTIALS_MAX_BYTES; past it (or for a bias broadcast over its rows or keys, summed from partials
    instead) it is not."""
    import numpy as np

    from cudakit.backends.attention_masks import Masks
    from cudakit.kernels import attention as at
    alibi = Masks(False, bias=np.zeros((1, 8, 256, 256), np.float32), bias_heads=8)
    assert at._full_bias(alibi, 16, 256, 256)                                   # 4 MiB
    assert at._full_bias(alibi, 256, 256, 256)                                  # 64 MiB: the bound
    assert not at._full_bias(alibi, 257, 256, 256)
    pad = Masks(False, bias=np.zeros((2, 1, 1, 256), np.float32), bias_heads=8)
    rows = Masks(False, bias=np.zeros((1, 8, 256, 1), np.float32), bias_heads=8)
    assert not at._full_bias(pad, 16, 256, 256) and not at._full_bias(rows, 16, 256, 256)
    assert not at._full_bias(Masks(False), 16, 256, 256)


def test_argument_errors_name_what_the_caller_passed(rng):
    """Checks shared by both backends (found by a probing helper, 2026-11-28): with layout "blhd"
    the shape errors quote the (B, L, H, D) shapes as given, not the (B, H, L, D) views checked
    after; nested lists work there as with "bhld"; a wrong type is an ArgumentTypeError (also a
    TypeError); ragged lists and NumPy complex scales are refused; varlen's dropout index must fit
    in 64 bits and its cu_seqlens counts are compared before their entries."""
    q = ac.data(rng, (2, 5, 4, 8), "float32")
    k = ac.data(rng, (2, 6, 4, 8), "float32")
    blhd = dict(layout="blhd")
    out, lse = cudakit.attention_with_lse(q, k, k, **blhd)
    with pytest.raises(cudakit.ShapeError, match=re.escape("out must have q's shape (2, 5, 4, 8) (got (2, 5, 2, 8))")):
        cudakit.attention_backward(q, q, k, k, np.zeros((2, 5, 2, 8), np.float32), lse, **blhd)
    with pytest.raises(cudakit.ShapeError, match=re.escape("got q (2, 5, 4, 8), k (1, 6, 4, 8)")):
        cudakit.attention(q, k[:1], k[:1], **blhd)
    with pytest.raises(cudakit.ShapeError, match="k and v have 3 heads and q has 4"):
        cudakit.attention(q, k[:, :, :3], k[:, :, :3], **blhd)
    q64, k64 = q.astype(np.float64), k.astype(np.float64)
    np.testing.assert_array_equal(cudakit.attention(q64.tolist(), k64.tolist(), k64.tolist(), **blhd),
                                  cudakit.attention(q64, k64, k64, **blhd))
    typed = [(lambda: cudakit.attention(q, k, k, key_lengths=[[1], [2, 3]], **blhd), "key_lengths"),
             (lambda: cudakit.attention(q, k, k, scale=np.complex128(0.3 + 5j), **blhd), "scale must be a real"),
             (lambda: cudakit.attention(q, k, k, dropout_p=None, **blhd), "dropout_p"),
             (lambda: cudakit.attention(q, k, k, window="ab", **blhd), "window"),
             (lambda: cudakit.attention(q, k, k, layout=None), "layout"),
             (lambda: cudakit.flash_attention(q, k, k, block_size="64", **blhd), "block_size")]
    for call, what in typed:
        with pytest.raises(cudakit.ArgumentTypeError, match=what):
            call()
    with pytest.raises(cudakit.ArgumentError, match="window") as e:
        cudakit.attention(q, k, k, window=(-1, 2), **blhd)
    assert not isinstance(e.value, TypeError)
    vq = ac.data(rng, (8, 2, 8), "float32")
    cu = [0, 4, 8]
    for big in (2 ** 32, 2 ** 70):   # the padded scores' count past 2^63: the masks would repeat
        with pytest.raises(cudakit.ArgumentError, match=re.escape("must be below 2**63")):
            cudakit.attention_varlen(vq, vq, vq, cu, cu, big, big, dropout_p=0.5, seed=7)
    assert cudakit.attention_varlen(vq, vq, vq, cu, cu, 2 ** 32, 2 ** 32).shape == vq.shape   # (no dropout)
    with pytest.raises(cudakit.ArgumentTypeError, match="max_seqlen_q must be an int"):
        cudakit.attention_varlen(vq, vq, vq, cu, cu, "5", 4)
    with pytest.raises(cudakit.ShapeError, match=re.escape("(got 3 and 2 entries)")):
        cudakit.attention_varlen(vq, vq, vq, cu, [0, 8], 4, 8)
    with pytest.raises(cudakit.ArgumentTypeError, match="cu_seqlens_q must be an integer array"):
        cudakit.attention_varlen(vq, vq, vq, [[0], [3, 7], 12], cu, 4, 4)
    with pytest.raises(cudakit.DTypeError, match="lse must be a float array"):
        cudakit.attention_varlen_backward(vq, vq, vq, vq, vq, "abc", cu, cu, 4, 4)


def test_the_kernels_take_the_bias_key_stride_as_a_constant_only_where_it_is_1():
    """kernels/attention.py's BIAS_K1 (_bias_args' key stride 1, _unit_keys): a bias whose keys are contiguous,
    broadcast over its other dims or not; not a bias broadcast over its keys (stride 0), nor a view
    whose keys are strided or transposed, nor no bias."""
    from cudakit.backends.attention_masks import Masks
    from cudakit.kernels.attention import _bias_args, _unit_keys
    full = np.zeros((2, 3, 5, 7), np.float32)
    for bias, want in ((full, True), (full[:1, :, :1], True), (np.zeros((2, 1, 1, 7), np.float16), True),
                       (full[..., ::2], False), (full.transpose(0, 1, 3, 2), False),
                       (np.broadcast_to(full[..., :1], full.shape), False), (full[..., :1], False), (None, False)):
        assert (_bias_args(Masks(False, bias=bias), None)[4] == 1) is want, (None if bias is None else bias.strides)
        assert bias is None or _unit_keys(bias) is want


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_attention_backward_qkv_packed(dtype, rng):
    """qkv_packed=True: one C-contiguous (B, L, 3, H, D) dqkv equal to the three gradients stacked
    (the bias's gradient after it with attn_bias); typed errors for another layout, grouped heads
    and a flag that is not a bool."""
    be = cudakit.get_backend("cpu")
    qkv = rng.standard_normal((2, 7, 3, 3, 8)).astype(dtype)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    g = rng.standard_normal((2, 7, 3, 8)).astype(dtype)
    for bias in (None, rng.standard_normal((1, 3, 7, 7)).astype(dtype)):
        out, lse = be.attention_with_lse(q, k, v, causal=True, layout="blhd", attn_bias=bias)
        want = be.attention_backward(g, q, k, v, out, lse, causal=True, layout="blhd", attn_bias=bias)
        got = cudakit.attention_backward(g, q, k, v, out, lse, causal=True, layout="blhd", attn_bias=bias,
                                         qkv_packed=True)
        dqkv = got if bias is None else got[0]
        assert dqkv.shape == (2, 7, 3, 3, 8) and dqkv.flags.c_contiguous and dqkv.dtype == q.dtype
        np.testing.assert_array_equal(dqkv, np.stack(want[:3], axis=2))
        if bias is not None:
            np.testing.assert_array_equal(got[1], want[3])
    with pytest.raises(cudakit.ArgumentError, match="qkv_packed=True needs layout 'blhd'"):
        qh = np.ascontiguousarray(q.transpose(0, 2, 1, 3))
        be.attention_backward(qh, qh, qh, qh, qh, lse, qkv_packed=True)
    with pytest.raises(cudakit.ArgumentError, match="q, k, v of one shape"):
        kv = k[:, :, :1]
        be.attention_backward(g, q, kv, kv, out, lse, layout="blhd", qkv_packed=True)
    with pytest.raises(cudakit.ArgumentTypeError, match="qkv_packed must be a bool"):
        be.attention_backward(g, q, k, v, out, lse, layout="blhd", qkv_packed="yes")


def test_device_cu_seqlens_errors_name_the_array_and_what_is_wrong():
    """The message of a bad GPU cu_seqlens (kernels/attention._cu_seqlens_error, from the kernels'
    flag words: sequence, Lq, Lk, max_seqlen_q, max_seqlen_k, what is wrong on each side) names
    cu_seqlens_q or cu_seqlens_k and the fault; pure host code, no GPU."""
    from cudakit.kernels.attention import _cu_seqlens_error
    e = _cu_seqlens_error("attention_varlen", [1, 40, 40, 32, 64, 2, 0])
    assert isinstance(e, cudakit.ArgumentError)
    assert str(e).startswith("attention_varlen: sequence 1: its Lq = 40 is past max_seqlen_q = 32 (found")
    e = _cu_seqlens_error("attention_varlen", [2, 5, -3, 8, 8, 8, 0])
    assert "sequence 2: cu_seqlens_k decreases there (Lk = -3) or is negative" in str(e)
    assert "cu_seqlens_q" not in str(e)
    e = _cu_seqlens_error("attention_varlen", [0, 9, 9, 8, 8, 4 | 16 | 32, 0])
    msg = str(e)
    assert "cu_seqlens_q reaches past the packed q's rows" in msg and "its Lk = 9 is past max_seqlen_k = 8" in msg
    assert "cu_seqlens_k reaches past the packed k's rows" in msg


# ---- layout "blhd" read in place by the GPU's Triton kernels: the host's decisions ----------------
def test_blhd_readable_takes_views_the_kernels_can_address():
    """kernels/attention.py blhd_readable (pure host code on shapes and strides): C-contiguous
    (B, L, H, D) arrays, the thirds of one (B, L, 3, H, D) projection and heads split off a
    (B, L, H + 2 Hkv, D) one are read in place; (B, H, L, D) data viewed as (B, L, H, D) (heads not
    D apart), a strided head dim, negative strides and strides of part of an element are not."""
    from cudakit.kernels import attention as at
    x = np.zeros((2, 5, 3, 4, 8), np.float32)
    assert at.blhd_readable(x[:, :, 0], x[:, :, 1], x[:, :, 2])
    assert at._row_strides(x[:, :, 0], x[:, :, 1]) == (3 * 4 * 8, 3 * 4 * 8)
    y = np.zeros((2, 5, 6 + 2 * 2, 8), np.float16)
    q, k = y[:, :, :6], y[:, :, 6:8]
    assert at.blhd_readable(q, k) and at._row_strides(q, k) == (10 * 8, 10 * 8)
    assert at.blhd_readable(np.zeros((2, 5, 4, 8), np.float32))
    assert not at.blhd_readable(np.zeros((2, 4, 5, 8), np.float32).swapaxes(1, 2))   # heads L D apart
    assert not at.blhd_readable(np.zeros((2, 5, 4, 16), np.float32)[..., ::2])       # D strided
    assert not at.blhd_readable(np.zeros((2, 5, 4, 8), np.float32)[:, ::-1])         # negative
    raw = np.zeros(2 * 5 * 4 * 8 * 4 + 2, np.uint8)[2:].view(np.float32).reshape(2, 5, 4, 8)
    odd = np.lib.stride_tricks.as_strided(raw, strides=(642, 130, 32, 4))            # part of an element
    assert not at.blhd_readable(odd)
    # one row: its stride is the batches' (rows of a longer sequence, one row of a cache)
    long = np.zeros((3, 7, 2, 8), np.float32)
    assert at.blhd_readable(long[:, 3:4]) and at._row_strides(long[:, 3:4], long[:, 3:4])[0] == 7 * 2 * 8


class _Dev:
    """An array's device as CuPy arrays carry it (data.device_id)."""
    device_id = 0


class _Arr:
    """A (B, L, H, D) stand-in for a CuPy array: NumPy's shape and strides, a device."""

    def __init__(self, a):
        self.shape, self.strides, self.itemsize, self.dtype, self.ndim = a.shape, a.strides, a.itemsize, a.dtype, a.ndim
        self.data = _Dev


@pytest.mark.parametrize("cudnn_stream", [False, True])
def test_blhd_in_place_declines_where_the_transposing_path_takes_cudnns_dropout(monkeypatch, cudnn_stream):
    """A (B, L, H, D) call with dropout whose transposing path would draw cuDNN's stream is never
    read in place, forward or backward (a timed choice could otherwise pair a forward on one stream
    with a backward on the other); otherwise both passes go to the timed layout choice, keyed by the
    backward's flags too."""
    from cudakit.backends.attention_masks import Masks
    from cudakit.kernels import attention as at
    from cudakit.kernels import paths
    asked, keys = [], []
    monkeypatch.setattr(at, "cudnn_dropout", lambda *a: asked.append(a) or cudnn_stream)
    monkeypatch.setattr(paths, "run", lambda op, key, cands, timer=None: keys.append((op, key)) or "ran")
    x = np.zeros((2, 64, 3, 4, 16), np.float16)
    q, k, v = (_Arr(x[:, :, i]) for i in range(3))
    masks = Masks(True, dropout=(1 << 30, 1.25, 7))
    fwd = at.forward_blhd_in_place(q, k, v, 0.25, masks, "float16", None, copy=None)
    bwd = at.backward_blhd_in_place(q, q, k, v, q, None, 0.25, masks, "float16", False, None, None, packed=True)
    assert len(asked) == 2 and asked[0][1:4] == (2 * 4, 64, 64)   # (B H, Lq, Lk) of the transposing path
    if cudnn_stream:
        assert fwd is None and bwd is None and not keys
    else:
        assert fwd == bwd == "ran" and [op for op, _ in keys] == ["attention_layout"] * 2
        assert keys[0][1][0] == "fwd" and keys[1][1][0] == "bwd" and (False, True) in keys[1][1]
    # without dropout cuDNN's stream is never asked about
    asked.clear()
    at.forward_blhd_in_place(q, k, v, 0.25, Masks(True, window=(8, 0)), "float16", None, copy=None)
    assert not asked
