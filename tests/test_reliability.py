"""Issue 29's reproducers on the CPU backend, each a regression test: wrong results, half-done
updates, generic exceptions instead of typed errors, valid inputs that crashed, the data loss of
`cudakit cache clear`, the CLI and environment. (The GPU halves are in tests/gpu/test_reliability_gpu.py.)"""
import json
import os
import shutil
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import cudakit as ck
from cudakit.errors import (ArgumentError, ArgumentTypeError, CacheError, CompileError, ConfigError, CudakitError,
                            DTypeError, ShapeError)

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.float32


def readonly(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


# ---- wrong results, silently -------------------------------------------------------------------

@pytest.mark.parametrize("dtype, big", [(np.float32, 100.0), (np.float32, 1e3), (np.float32, 1e4),
                                        (np.float64, 1e9), (np.float16, 200.0), (np.float16, 6e4),
                                        (BF16, 1e18)])
def test_attention_keeps_its_normalisation_for_large_scores(dtype, big):
    # every score equal: out is the mean of v's rows, column 0: (0 + 8 + 16 + 24) / 4 = 12
    q = np.full((1, 1, 8), big, dtype)
    k = np.full((1, 4, 8), big, dtype)
    v = np.arange(32, dtype=dtype).reshape(1, 4, 8)
    out, lse = ck.attention_with_lse(q, k, v)
    want = np.arange(32, dtype=np.float64).reshape(4, 8).mean(axis=0)
    np.testing.assert_array_equal(out[0, 0].astype(np.float64), want.astype(dtype).astype(np.float64))
    # the backward recomputes probabilities that sum to 1: dv = P^T dO = 1/4 of dO per key
    dq, dk, dv = ck.attention_backward(np.ones_like(out), q, k, v, out, lse)
    np.testing.assert_array_equal(dv.astype(np.float64), np.full((1, 4, 8), 0.25))
    assert np.isfinite(dq.astype(np.float64)).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, BF16])
@pytest.mark.parametrize("scale", [1e19, 1e25, 3e36])
def test_layernorm_and_rmsnorm_rows_whose_squares_overflow(dtype, scale):
    if np.dtype(dtype) == np.float64:
        scale = scale ** 8 if scale < 1e30 else 1e300   # where float64's squares overflow
    rng = np.random.default_rng(0)
    base = rng.standard_normal((5, 7))
    x = (base * scale).astype(dtype)
    xd = x.astype(np.float64) / scale
    tol = 2e-2 if np.dtype(dtype) == BF16 else 1e-5
    ln_ref = (xd - xd.mean(1, keepdims=True)) / xd.std(1, keepdims=True)
    rms_ref = xd / np.sqrt((xd * xd).mean(1, keepdims=True))
    y, mean, rstd = ck.layernorm_with_stats(x)
    np.testing.assert_allclose(y.astype(np.float64), ln_ref, atol=tol, rtol=tol)
    np.testing.assert_allclose(mean.astype(np.float64) / scale, xd.mean(1), rtol=tol, atol=tol)
    np.testing.assert_allclose(rstd.astype(np.float64) * scale, 1 / xd.std(1), rtol=tol)
    y, rstd = ck.rmsnorm_with_stats(x)
    np.testing.assert_allclose(y.astype(np.float64), rms_ref, atol=tol, rtol=tol)
    np.testing.assert_allclose(ck.rmsnorm(x).astype(np.float64), rms_ref, atol=tol, rtol=tol)
    np.testing.assert_allclose(ck.layernorm(x).astype(np.float64), ln_ref, atol=tol, rtol=tol)


def test_layernorm_rescue_keeps_inf_and_nan_rows_and_leaves_other_rows_bitwise():
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(F32)
    before = ck.layernorm(x)
    x2 = x.copy()
    x2[1] *= F32(1e20)
    x2[2, 3] = np.inf
    x2[3, 0] = np.nan
    y = ck.layernorm(x2)
    np.testing.assert_array_equal(y[0], before[0])   # a row that needed no rescue: the same bits
    assert np.isfinite(y[1]).all() and np.abs(y[1]).max() > 0.5
    assert np.isnan(y[2]).all() and np.isnan(y[3]).all()


def test_dropout_keeps_a_0d_shape():
    x = np.asarray(3.0, F32)
    assert ck.dropout(x, 0.5, 1).shape == ()
    assert ck.dropout_backward(x, 0.5, 1).shape == ()
    assert ck.dropout_mask((), 0.5, 1).shape == ()
    np.testing.assert_array_equal(ck.dropout(x, 0.5, 7).reshape(1),
                                  ck.dropout(x.reshape(1), 0.5, 7))   # the same mask bit


@pytest.mark.parametrize("op", [ck.sum_backward, ck.mean_backward])
@pytest.mark.parametrize("bad", ["23", (2.5, 3), (True, 3), (2, np.float64(3)), (2, -3), {2: 3}])
def test_sum_and_mean_backward_refuse_bad_x_shapes(op, bad):
    g = np.ones((2,), F32)
    with pytest.raises(ShapeError, match="x_shape"):
        op(g, bad, axis=1)


def test_sum_backward_takes_int_shapes_of_any_integer_type():
    g = np.ones((2,), F32)
    assert ck.sum_backward(g, (np.int64(2), 3), axis=1).shape == (2, 3)
    assert ck.mean_backward(g, np.array([2, 3]), axis=1).shape == (2, 3)


@pytest.mark.parametrize("axes", [{1, 0}, {0: 1, 1: 0}, "10", frozenset({0, 1})])
def test_permute_and_transpose_refuse_unordered_axes(axes):
    x = np.ones((2, 3), F32)
    with pytest.raises(ShapeError):
        ck.permute(x, axes)
    with pytest.raises(ShapeError):
        ck.transpose(x, axes)


@pytest.mark.parametrize("field", ["lr", "eps", "weight_decay", "momentum"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), 10 ** 400])
def test_optimizer_state_refuses_non_finite_values(field, value):
    with pytest.raises(ArgumentError, match=field):
        ck.OptimizerState(**{field: value})


@pytest.mark.parametrize("training", ["no", "yes", 2, None, np.array([True])])
def test_training_flags_must_be_bools(training):
    x = np.ones((4, 3), F32)
    with pytest.raises(ArgumentTypeError, match="training"):
        ck.dropout(x, 0.5, 0, training=training)
    with pytest.raises(ArgumentTypeError, match="training"):
        ck.batch_norm(x, running_mean=np.zeros(3, F32), running_var=np.ones(3, F32), training=training)
    assert ck.dropout(x, 0.5, 0, training=np.bool_(False)) is not x


def test_one_array_twice_in_an_optimizer_is_refused_and_untouched():
    p = np.ones(3, F32)
    g = np.ones(3, F32)
    with pytest.raises(ArgumentError, match=r"params\[0\] and params\[1\] are the same array"):
        ck.sgd_update([p, p], [g, g], None, ck.OptimizerState(lr=1.0))
    np.testing.assert_array_equal(p, 1)
    big = np.ones(6, F32)
    with pytest.raises(ArgumentError, match="overlap"):
        ck.sgd_update([big[:4], big[2:]], [g[:1].repeat(4), g[:1].repeat(4)], None, ck.OptimizerState(lr=1.0))
    m = np.zeros(3, F32)
    with pytest.raises(ArgumentError, match=r"m_buffer\[0\] and v_buffer\[0\]"):
        ck.adam_update(p, g, m, m, ck.OptimizerState())
    with pytest.raises(ArgumentError, match="same array"):
        ck.SGD([p, p], lr=0.1)
    np.testing.assert_array_equal(m, 0)


# ---- half-done updates -------------------------------------------------------------------------

@pytest.mark.parametrize("ro", ["running_mean", "running_var"])
def test_batch_norm_validates_both_statistics_before_writing_either(ro):
    x = np.random.default_rng(2).standard_normal((8, 3)).astype(F32)
    stats = {"running_mean": np.zeros(3, F32), "running_var": np.ones(3, F32)}
    stats[ro] = readonly(stats[ro])
    snap = {k: v.copy() for k, v in stats.items()}
    with pytest.raises(ArgumentError, match=f"{ro} is read-only"):
        ck.batch_norm(x, training=True, **stats)
    for k in stats:
        np.testing.assert_array_equal(stats[k], snap[k])


@pytest.mark.parametrize("ro", ["m", "v", "v_max", "param"])
def test_adam_validates_every_state_before_writing_any(ro):
    arrs = {"param": np.ones(3, F32), "m": np.zeros(3, F32), "v": np.zeros(3, F32), "v_max": np.zeros(3, F32)}
    arrs[ro] = readonly(arrs[ro])
    snap = {k: v.copy() for k, v in arrs.items()}
    st = ck.OptimizerState(amsgrad=True)
    with pytest.raises(ArgumentError, match="read-only"):
        ck.adam_update(arrs["param"], np.ones(3, F32), arrs["m"], arrs["v"], st, v_max=arrs["v_max"])
    for k in arrs:
        np.testing.assert_array_equal(arrs[k], snap[k])
    assert st.step == 0


def test_sgd_with_a_read_only_momentum_buffer_changes_nothing():
    p, buf = np.ones(3, F32), readonly(np.zeros(3, F32))
    with pytest.raises(ArgumentError, match=r"momentum\[0\] is read-only"):
        ck.sgd_update(p, np.ones(3, F32), buf, ck.OptimizerState(lr=1.0, momentum=0.9))
    np.testing.assert_array_equal(p, 1)


# ---- typed errors instead of NumPy/Python internals --------------------------------------------

X = np.ones((2, 4), F32)
W4 = np.ones((1, 1, 1, 1), F32)


@pytest.mark.parametrize("call, arg", [
    (lambda: ck.layernorm(None), "x"),
    (lambda: ck.rmsnorm(None), "x"),
    (lambda: ck.matmul(None, X), "a"),
    (lambda: ck.matmul(X.T, None), "b"),
    (lambda: ck.conv2d(None, W4), "x"),
    (lambda: ck.conv2d(np.ones((1, 1, 2, 2), F32), None), "weight"),
    (lambda: ck.attention(None, X, X), "q"),
    (lambda: ck.attention_backward(X, X, X, X, X, None), "lse"),
    (lambda: ck.layernorm_backward(None, X, None, np.zeros(2, F32), np.ones(2, F32)), "grad_out"),
    (lambda: ck.batch_norm(None), "x"),
    (lambda: ck.add(None, X), "a"),
    (lambda: ck.relu(None), "x"),
    (lambda: ck.sgd_update(np.ones(3, F32), np.ones(3, F32), None, None), "optimizer_state"),
    (lambda: ck.adam_update(np.ones(3, F32), None, np.zeros(3, F32), np.zeros(3, F32), ck.OptimizerState()),
     "gradients"),
])
def test_none_as_an_array_is_a_typed_error_naming_the_argument(call, arg):
    with pytest.raises(ArgumentTypeError, match=arg):
        call()


ELEMENTWISE = ["add", "sub", "mul", "div", "relu", "relu_backward", "leaky_relu", "leaky_relu_backward", "sigmoid",
               "sigmoid_backward", "tanh", "tanh_backward", "silu", "silu_backward", "gelu", "gelu_backward"]


@pytest.mark.parametrize("op", ELEMENTWISE + ["matmul"])
def test_read_only_out_is_refused_before_anything_runs(op):
    fn = getattr(ck, op)
    two = op in ("add", "sub", "mul", "div", "matmul") or op.endswith("_backward")
    a = np.ones((4, 4), F32)
    out = readonly(np.full((4, 4), 7, F32))
    with pytest.raises(ArgumentError, match="out is read-only"):
        fn(a, a, out=out) if two else fn(a, out=out)
    np.testing.assert_array_equal(out, 7)


@pytest.mark.parametrize("call, match", [
    (lambda: ck.add(X, 10 ** 400), "beyond the float range"),
    (lambda: ck.sub(10 ** 400, X), "beyond the float range"),
    (lambda: ck.leaky_relu(X, 10 ** 400), "negative_slope"),
    (lambda: ck.layernorm(X, eps=10 ** 400), "eps"),
    (lambda: ck.var(X, ddof=10 ** 400), "ddof"),
    (lambda: ck.dropout(X, 10 ** 400, 0), "p"),
    (lambda: ck.max_pool2d(np.ones((1, 1, 4, 4), F32), 2, 10 ** 18), "stride"),
    (lambda: ck.avg_pool2d(np.ones((1, 1, 4, 4), F32), 2 ** 40), "kernel_size"),
    (lambda: ck.conv2d(np.ones((1, 1, 4, 4), F32), W4, padding=10 ** 9), "padded input"),
    (lambda: ck.conv2d(np.ones((1, 1, 4, 4), F32), W4, dilation=10 ** 30), "dilation"),
    (lambda: ck.dropout_mask((2 ** 40, 2 ** 40), 0.5, 1), "the mask"),
    (lambda: ck.attention(X[None], X[None], X[None], scale=np.array([0.3, 0.4])), "scale must be a single number"),
    (lambda: ck.attention(X[None], X[None], X[None], scale="0.5"), "scale"),
    (lambda: ck.attention(X[None], X[None], X[None], scale=10 ** 400), "scale"),
    (lambda: ck.mul(np.ones((2 ** 24, 1)), np.ones((1, 2 ** 24))), "the result of shape"),
    (lambda: ck.add(np.broadcast_to(np.ones((1, 1)), (2 ** 31, 1)), np.broadcast_to(np.ones((1, 1)), (1, 2 ** 31))),
     "over the"),
    (lambda: ck.matmul(np.broadcast_to(np.ones((1, 4, 4)), (2 ** 48, 4, 4)), np.ones((4, 4))), "the result"),
    (lambda: ck.dropout_mask((10 ** 400,), 0.5, 0), "about 1e"),
    (lambda: ck.sum_backward(np.ones(()), (2 ** 1100,)), "would need"),
    (lambda: ck.SGD([np.zeros(3)], 0.1, 0.9, 0.0, np.array([1, 2])), "nesterov"),
    (lambda: ck.relu(X, out=[[0.0] * 4] * 2), "out must be an array"),
    (lambda: ck.add(X, X, out=np.float32(0)), "out must be an array"),
    (lambda: ck.add(X, X, out=(1.0, 2.0)), "out must be an array"),
    (lambda: ck.matmul(np.ones((1, 2)), np.ones((2, 1)), out=[[0.0]]), "out must be an array"),
    (lambda: ck.get_backend("cpu").empty((10 ** 12, 10 ** 12)), "cannot make an array"),
    (lambda: ck.get_backend("cpu").zeros((10 ** 12, 10 ** 12), "float64"), "cannot make an array"),
])
def test_huge_and_array_valued_parameters_are_typed_errors(call, match):
    with pytest.raises(CudakitError, match=match):
        call()


def test_one_element_arrays_are_single_numbers():
    """A scale or eps given as an array of one element, of any ndim, is that number (NumPy 2.4
    refuses float() of an array of ndim > 0)."""
    q = X[None]
    want = ck.attention(q, q, q, scale=0.3)
    for scale in (np.array([0.3]), np.array([[0.3]]), np.float64(0.3), np.array(0.3)):
        np.testing.assert_array_equal(ck.attention(q, q, q, scale=scale), want)
    np.testing.assert_array_equal(ck.layernorm(X, eps=np.array([1e-3])), ck.layernorm(X, eps=1e-3))


def test_a_one_element_array_scale_still_works():
    q = np.random.default_rng(3).standard_normal((1, 3, 4)).astype(F32)
    np.testing.assert_array_equal(ck.attention(q, q, q, scale=np.float32(0.5)), ck.attention(q, q, q, scale=0.5))
    np.testing.assert_array_equal(ck.attention(q, q, q, scale=np.array(0.5)), ck.attention(q, q, q, scale=0.5))


# ---- valid empty inputs ------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(0, 3), (0, 3, 2, 2), (2, 3, 0, 4)])
@pytest.mark.parametrize("with_stats, training", [(False, True), (True, True), (True, False)])
def test_batch_norm_of_an_empty_batch(shape, with_stats, training):
    x = np.ones(shape, F32)
    rm, rv = (np.full(3, 0.5, F32), np.full(3, 2.0, F32)) if with_stats else (None, None)
    snap = None if rm is None else (rm.copy(), rv.copy())
    y, sm, si = ck.batch_norm_with_stats(x, np.ones(3, F32), np.zeros(3, F32), rm, rv, training=training)
    assert y.shape == shape and y.dtype == F32 and sm.shape == si.shape == (3,)
    if snap is not None:   # nothing to learn from no values: the running statistics stay
        np.testing.assert_array_equal(rm, snap[0])
        np.testing.assert_array_equal(rv, snap[1])
    if not training:
        np.testing.assert_allclose(si, 1 / np.sqrt(2.0 + 1e-5), rtol=1e-6)
    dx, dg, db = ck.batch_norm_backward(np.ones(shape, F32), x, np.ones(3, F32), sm, si)
    assert dx.shape == shape
    np.testing.assert_array_equal(dg, 0)
    np.testing.assert_array_equal(db, 0)


def test_batch_norm_training_still_needs_more_than_one_value_per_channel():
    with pytest.raises(ArgumentError, match="more than one value per channel"):
        ck.batch_norm(np.ones((1, 3), F32), training=True)


# ---- bfloat16 statistics -----------------------------------------------------------------------

@pytest.mark.parametrize("stat_dtype", [np.float16, BF16, np.float32, np.float64])
def test_statistics_of_any_float_dtype_are_taken(stat_dtype):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 8)).astype(F32)
    g = rng.standard_normal((3, 8)).astype(F32)
    y, mean, rstd = ck.layernorm_with_stats(x)
    ref = ck.layernorm_backward(g, x, None, mean.astype(stat_dtype).astype(F32), rstd.astype(stat_dtype).astype(F32))
    got = ck.layernorm_backward(g, x, None, mean.astype(stat_dtype), rstd.astype(stat_dtype))
    np.testing.assert_array_equal(got[0], ref[0])
    _, r = ck.rmsnorm_with_stats(x)
    ck.rmsnorm_backward(g, x, None, r.astype(stat_dtype))
    xb = rng.standard_normal((4, 3)).astype(F32)
    _, sm, si = ck.batch_norm_with_stats(xb, training=True)
    ck.batch_norm_backward(xb, xb, None, sm.astype(stat_dtype), si.astype(stat_dtype))
    q = rng.standard_normal((1, 3, 4)).astype(F32)
    out, lse = ck.attention_with_lse(q, q, q)
    ck.attention_backward(q, q, q, q, out, lse.astype(stat_dtype))


def test_integer_statistics_are_still_refused():
    x = np.ones((2, 4), F32)
    with pytest.raises(DTypeError, match="bfloat16"):
        ck.layernorm_backward(x, x, None, np.zeros(2, np.int32), np.ones(2, F32))


# ---- modules and state dicts -------------------------------------------------------------------

@pytest.mark.parametrize("bad", [None, 3, b"k.ptx"[0], ["k.ptx"]])
def test_load_module_of_a_non_path(bad):
    with pytest.raises(ArgumentTypeError, match="load_module: path"):
        ck.load_module(bad)


@pytest.mark.parametrize("name, data, why", [
    ("k.cubin", b"garbage" * 20, "no ELF header"),
    ("k.fatbin", b"\x7fELF" + b"0" * 60, "fatbin magic"),
    ("k.ptx", b"garbage text", ".version"),
    ("k.ptx", b"\x7fELF\x00\x01\x02" + b".version .target", "not PTX text"),
    ("k.so", b"\x7fELF", "unknown kernel file type"),
])
def test_load_module_refuses_garbage_naming_the_file(tmp_path, name, data, why):
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(CompileError, match=why) as e:
        ck.load_module(p)
    assert str(p) in str(e.value)


@pytest.mark.parametrize("kind", ["ptx", "cubin", "fatbin"])
def test_load_module_takes_what_nvcc_writes(tmp_path, kind):
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc is not on the PATH")
    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void one(float* x) { x[threadIdx.x] = 1.0f; }')
    out = tmp_path / f"k.{kind}"
    subprocess.run([nvcc, "-arch=sm_90", f"--{kind}", "-o", str(out), str(src)], check=True, capture_output=True)
    from cudakit.runtime import _cupy
    if _cupy.probe()[0]:
        pytest.skip("a GPU is usable: the driver loads it (tests/gpu/test_runtime_gpu.py)")
    assert ck.load_module(out).name == str(out)


def test_compile_for_a_named_arch_needs_no_gpu():
    from cudakit.runtime import _cupy
    try:
        from cudakit.runtime import compiler
        compiler.nvrtc_version()
    except Exception as e:  # noqa: BLE001 -- the dependency that is missing, named in the skip
        pytest.skip(f"NVRTC is not loadable here: {e}")
    if _cupy.probe()[0]:
        pytest.skip("a GPU is usable")
    k = ck.compile('extern "C" __global__ void z(float* x) { x[0] = 0.0f; }', "z", arch="sm_90")
    assert k is not None
    with pytest.raises(CompileError, match="error"):
        ck.compile('extern "C" __global__ void z(float* x) { x[0] = ; }', "z", arch="sm_90")


def test_load_state_dict_validates_the_dict_before_changing_anything():
    p = np.ones(3, F32)
    opt = ck.Adam([p], lr=0.1)
    opt.step([np.ones(3, F32)])
    sd = opt.state_dict()
    before = json.dumps({k: [a.tolist() for a in v] for k, v in sd["state"].items()})
    for bad in ({"optimizer": "Adam", "state": sd["state"]},                       # no 'hyper'
                {"optimizer": "Adam", "hyper": None, "state": sd["state"]},
                {"optimizer": "Adam", "hyper": {**sd["hyper"], "nosuch": 1}, "state": sd["state"]},
                {"optimizer": "Adam", "hyper": {**sd["hyper"], "lr": float("inf")}, "state": sd["state"]},
                {"optimizer": "Adam", "hyper": sd["hyper"]},                        # no 'state'
                {"optimizer": "Adam", "hyper": sd["hyper"],
                 "state": {"exp_avg": ["x"], "exp_avg_sq": sd["state"]["exp_avg_sq"]}}):
        with pytest.raises(ArgumentError):
            opt.load_state_dict(bad)
    after = opt.state_dict()
    assert json.dumps({k: [a.tolist() for a in v] for k, v in after["state"].items()}) == before
    assert after["hyper"] == sd["hyper"]


# ---- the cache: never delete what cudakit did not write -----------------------------------------

def _cli(*args, env=None):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "cudakit", *args], capture_output=True, text=True, env=e,
                          timeout=300)


def test_cache_clear_of_a_foreign_directory_deletes_nothing_and_says_why(tmp_path):
    docs = tmp_path / "documents"
    (docs / "nvrtc").mkdir(parents=True)
    (docs / "letter.txt").write_text("dear ...")
    (docs / "nvrtc" / "thesis.tex").write_text("chapter 1")   # even under one of cudakit's names
    r = _cli("cache", "clear", env={"CUDAKIT_CACHE_DIR": str(docs)})
    assert r.returncode == 2
    assert str(docs) in r.stderr and "marker" in r.stderr and "nothing was deleted" in r.stderr
    assert (docs / "letter.txt").read_text() == "dear ..." and (docs / "nvrtc" / "thesis.tex").exists()


def test_cache_clear_removes_only_cudakit_entries(tmp_path, monkeypatch):
    from cudakit import config
    from cudakit.runtime import cache
    monkeypatch.setenv("CUDAKIT_CACHE_DIR", str(tmp_path / "c"))
    config.reload()
    try:
        d = cache.subdir("nvrtc")   # what cudakit does before it writes: marks the root
        (d / "k.bin").write_bytes(b"1")
        (cache.subdir("autotune") / "a.json").write_text("{}")
        (cache.subdir("tune") / "t.json").write_text("{}")
        (tmp_path / "c" / "notes.txt").write_text("mine")
        (tmp_path / "c" / "other").mkdir()
        (tmp_path / "c" / "other" / "x").write_text("mine too")
        assert cache.is_marked() and cache.info()["entries"] == 2
        assert ck.clear_kernel_cache() == 2
        left = sorted(p.relative_to(tmp_path / "c").as_posix() for p in (tmp_path / "c").rglob("*"))
        assert left == [".cudakit-cache", "notes.txt", "other", "other/x", "tune", "tune/t.json"]
    finally:
        monkeypatch.undo()
        config.reload()


def test_cache_dir_that_is_a_file(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    env = {"CUDAKIT_CACHE_DIR": str(f)}
    for args in (("cache", "info"), ("cache", "clear")):
        r = _cli(*args, env=env)
        assert r.returncode == 2 and "is a file, not a directory" in r.stderr and "Traceback" not in r.stderr
    r = _cli("info", env=env)
    assert r.returncode == 0 and "is a file, not a directory" in r.stdout and "Traceback" not in r.stderr
    assert f.read_text() == "x"


def test_writing_a_cache_entry_marks_the_root(tmp_path, monkeypatch):
    from cudakit import config
    from cudakit.runtime import cache, compiler
    monkeypatch.setenv("CUDAKIT_CACHE_DIR", str(tmp_path / "new"))
    config.reload()
    try:
        compiler._write_entry(compiler.cache_dir() / "nvrtc" / "k.bin", b"cubin", {"a": "b"})
        assert cache.is_marked() and compiler._read_entry(compiler.cache_dir() / "nvrtc" / "k.bin") == (
            b"cubin", {"a": "b"})
    finally:
        monkeypatch.undo()
        config.reload()


# ---- CLI and environment -----------------------------------------------------------------------

@pytest.mark.parametrize("var, value, accepted", [
    ("CUDAKIT_BACKEND", "bogus", "auto, cpu, cuda"),
    ("CUDAKIT_GPU_MEMORY_LIMIT", "garbage", "'8GiB'"),
    ("CUDAKIT_GPU_MEMORY_LIMIT", "-5", "'80%'"),
    ("CUDAKIT_GPU_CACHE_SIZE", "lots", "'512MB'"),
    ("CUDAKIT_FLOAT32_PRECISION", "bogus", "'tf32x3'"),
    ("CUDAKIT_LAUNCH_BLOCKING", "maybe", "yes"),
])
def test_bad_settings_fail_at_first_use_naming_the_variable(var, value, accepted, monkeypatch):
    from cudakit import config
    monkeypatch.setenv(var, value)
    try:
        with pytest.raises(ConfigError, match=var) as e:
            config.reload()
        assert accepted in str(e.value) and repr(value) in str(e.value)
        with pytest.raises(ConfigError, match=var):
            ck.get_backend("cpu")
    finally:
        monkeypatch.undo()
        config.reload()
    r = _cli("info", env={var: value})
    assert r.returncode == 1 and f"configuration error: {var}" in r.stdout and "Traceback" not in r.stderr


def test_ops_on_numpy_arrays_see_a_bogus_backend_setting():
    code = "import numpy as np, cudakit as ck; ck.relu(np.ones(3, np.float32))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, CUDAKIT_BACKEND="bogus"), timeout=120)
    assert r.returncode != 0 and "ConfigError" in r.stderr and "CUDAKIT_BACKEND='bogus'" in r.stderr


@pytest.mark.parametrize("args, env, msg", [
    (("--dtype", "int8"), {}, "unknown dtype(s) int8"),
    (("--compare", "nosuch"), {}, "unknown --compare provider(s) nosuch"),
    ((), {"CUDAKIT_BACKEND": "bogus"}, "CUDAKIT_BACKEND='bogus'"),
])
def test_bench_refuses_bad_arguments_before_creating_out(tmp_path, args, env, msg):
    out = tmp_path / "out"
    r = _cli("bench", "--quick", "--out", str(out), *args, env=env)
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_bench_with_cuda_backend_and_no_gpu(tmp_path):
    from cudakit.runtime import _cupy
    if _cupy.probe()[0]:
        pytest.skip("a GPU is usable")
    r = _cli("bench", "--quick", "--out", str(tmp_path / "o"), env={"CUDAKIT_BACKEND": "cuda"})
    assert r.returncode == 2 and "CUDA backend is unavailable" in r.stderr


def test_report_skips_corrupt_and_foreign_files_naming_them(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    good = "nvidia-h200-optimizers.json"
    shutil.copy(os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results", "history", good), res / good)
    (res / "corrupt.json").write_text("{not json")
    (res / "foreign.json").write_text(json.dumps({"hello": "world"}))
    (res / "list.json").write_text("[1, 2]")
    r = _cli("report", "--results", str(res), "--output", str(tmp_path / "B.md"))
    assert r.returncode == 0, r.stderr
    for bad in ("corrupt.json", "foreign.json", "list.json"):
        assert bad in r.stderr
    assert "from 1 result files" in r.stdout and "NVIDIA H200" in (tmp_path / "B.md").read_text()


def test_cache_error_types():
    assert issubclass(CacheError, CudakitError) and issubclass(ConfigError, ValueError)
    assert issubclass(ArgumentTypeError, TypeError) and issubclass(ArgumentTypeError, ValueError)


def test_float16_log_softmax_past_its_range_warns_nothing_and_var_backward_past_ddof():
    """A log-probability below float16's range rounds to -inf with no NumPy RuntimeWarning; the
    gradient of a variance with N - ddof <= 0 is +-inf, as var_backward's docstring says."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = ck.log_softmax(np.array([[65504, -65504]], np.float16))
    assert y[0, 0] == 0 and np.isneginf(y[0, 1])
    g = ck.var_backward(np.array([1.0]), np.array([[1.0, 2.0]]), axis=1, ddof=2)
    assert g[0, 0] == -np.inf and g[0, 1] == np.inf


# ---- the kernel cache and the compile arguments (a CPU probe of the runtime, 2026-11-28) ----------
def _fresh_cache(tmp_path, monkeypatch):
    from cudakit import config
    monkeypatch.setenv("CUDAKIT_CACHE_DIR", str(tmp_path / "cache"))
    config.reload()


def test_damaged_cache_entries_are_compiled_again(tmp_path, monkeypatch):
    """A truncated, overwritten or malformed entry reads as missing (compiled again), not loaded."""
    import struct
    from cudakit import config
    from cudakit.runtime import compiler
    _fresh_cache(tmp_path, monkeypatch)
    try:
        p = compiler.cache_dir() / "nvrtc" / "k.bin"
        compiler._write_entry(p, b"\x7fELF" + bytes(range(200)), {"k<1>": "_Z1kILi1EEvv"})
        assert compiler._read_entry(p) == (b"\x7fELF" + bytes(range(200)), {"k<1>": "_Z1kILi1EEvv"})
        whole = p.read_bytes()
        for damaged in (whole[:len(whole) - 50], whole[:-1] + b"x", whole + b"junk",
                        struct.pack("<I", 5) + b"[1,2]" + b"\x7fELF", whole[:6]):
            p.write_bytes(damaged)
            assert compiler._read_entry(p) is None
        assert not [f for f in p.parent.iterdir() if f.name.startswith(".tmp-")]
        p.unlink()
        p.mkdir()   # os.replace onto a folder fails: the entry is not written and no temporary file stays
        compiler._write_entry(p, b"cubin", {})
        assert not [f for f in p.parent.iterdir() if f.name.startswith(".tmp-")]
    finally:
        monkeypatch.undo()
        config.reload()


def test_an_edited_header_changes_the_cache_key(tmp_path, monkeypatch):
    from cudakit.runtime import compiler
    monkeypatch.setattr(compiler, "nvrtc_version", lambda: (13, 0))
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "val.h").write_text('#include "deeper.h"\n#define VAL 3.0f\n')
    (inc / "deeper.h").write_text("#define DEEP 1\n")
    src = '#include "val.h"\n#include <cuda_fp16.h>\nextern "C" __global__ void k(float* x) { x[0] = VAL; }\n'
    for opts in ((f"-I{inc}",), ("-I", str(inc)), (f"--include-path={inc}",)):
        key = compiler._cache_key(src, opts, (), "sm_90")
        assert compiler._cache_key(src, opts, (), "sm_90") == key
        (inc / "deeper.h").write_text("#define DEEP 2\n")   # (a header the included one includes)
        assert compiler._cache_key(src, opts, (), "sm_90") != key
        (inc / "deeper.h").write_text("#define DEEP 1\n")
        assert compiler._cache_key(src, opts, (), "sm_90") == key


def test_headers_next_to_the_including_header_and_the_memory_cache(tmp_path, monkeypatch):
    """A quoted include is searched in the including header's folder first (as the compiler does),
    so editing it changes the key; a memory-cache hit checks the headers' stat and reads none."""
    from cudakit.runtime import compiler
    monkeypatch.setattr(compiler, "nvrtc_version", lambda: (13, 0))
    (tmp_path / "inc" / "sub").mkdir(parents=True)
    (tmp_path / "inc" / "sub" / "a.h").write_text('#include "b.h"\n')
    (tmp_path / "inc" / "sub" / "b.h").write_text("#define B 1\n")
    src, opts = '#include "sub/a.h"\n', (f"-I{tmp_path / 'inc'}",)
    found = compiler._included(src, opts)
    assert [os.path.basename(p) for p, _, _ in found] == ["a.h", "b.h"] and compiler._headers_unchanged(found)
    key = compiler._cache_key(src, opts, (), "sm_90")
    (tmp_path / "inc" / "sub" / "b.h").write_text("#define B 22\n")
    assert compiler._cache_key(src, opts, (), "sm_90") != key and not compiler._headers_unchanged(found)
    assert compiler._included('extern "C" __global__ void k() {}', opts) == []   # (no include: nothing read)


@pytest.mark.parametrize("call, err, match", [
    (lambda c: c.compile(b"__global__ void f() {}", "f", arch="sm_90"), "ArgumentTypeError", "decode bytes"),
    (lambda c: c.compile(None, "f", arch="sm_90"), "ArgumentTypeError", "source must be"),
    (lambda c: c.compile("x", 3, arch="sm_90"), "ArgumentTypeError", "name must be"),
    (lambda c: c.compile("x", "f", name_expressions=None, arch="sm_90"), "ArgumentTypeError", "name_expressions"),
    (lambda c: c.compile("x", "f", name_expressions=[1], arch="sm_90"), "ArgumentTypeError", "name_expressions"),
    (lambda c: c.compile("x", "f", arch="compute_90"), "ArgumentError", "compile_ptx"),
    (lambda c: c.compile("x", "f", arch=90), "ArgumentError", "arch must be a real architecture"),
    (lambda c: c.compile_module("x", arch="sm90"), "ArgumentError", "arch must be"),
])
def test_compile_arguments_are_typed_errors_before_the_compiler_runs(call, err, match):
    from cudakit import errors
    from cudakit.runtime import compiler
    with pytest.raises(getattr(errors, err), match=match):
        call(compiler)


def test_one_name_expression_string_is_one_expression():
    from cudakit.runtime import compiler
    assert compiler._name_expressions("g<1>") == ("g<1>",)
    assert compiler._name_expressions(["g<1>", "g<2>"]) == ("g<1>", "g<2>")


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_nvcc_ptx_of_a_cpp_named_source():
    from cudakit.runtime import compiler
    ptx = compiler.compile_ptx('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }', arch="sm_90",
                               source_name="k.cpp", compiler="nvcc")
    assert ".entry k" in ptx


def test_numpy_integers_are_device_indices(monkeypatch):
    from cudakit.runtime import device
    monkeypatch.setattr(device, "device_count", lambda: 2)
    assert device._check_index(np.int64(1)) == 1 and type(device._check_index(np.int32(0))) is int
    for bad in (np.bool_(True), np.int64(2), 1.0):
        with pytest.raises(ck.DeviceError):
            device._check_index(bad)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the native launcher is built on Linux")
def test_a_damaged_native_launcher_is_built_again(tmp_path, monkeypatch):
    from cudakit.runtime import native
    from cudakit.runtime.native import NativeBuildError
    p = tmp_path / "native" / "_cudakit_native-test.so"
    try:
        native.build(p)
    except NativeBuildError as e:
        pytest.skip(f"no C toolchain here: {e}")
    whole = p.read_bytes()
    p.write_bytes(whole[:len(whole) // 3])   # (loading this one killed the process with SIGBUS)
    assert native.build(p) == p and p.read_bytes() == whole
    before = p.stat().st_mtime_ns
    (p.parent / (p.name + ".digest")).unlink()   # (built before digests: trusted and given one, not rebuilt,
    assert native.build(p) == p and native._intact(p)   # so a host without a compiler keeps its launcher)
    assert p.stat().st_mtime_ns == before


def test_numpy_scalars_alone_are_zero_d_arrays():
    """ck.relu(np.float32(-1)) was 'at least one argument must be an array' while ck.sum took it;
    a NumPy scalar beside an array stays a scalar operand (the array's dtype wins)."""
    r = ck.relu(np.float32(-1.0))
    assert r.shape == () and r.dtype == np.float32 and r == 0
    assert ck.add(np.float64(1.0), 2.0).dtype == np.float64 and ck.mul(np.float32(2), np.float32(3)) == 6
    assert ck.add(np.ones(3, np.float16), np.float32(2.0)).dtype == np.float16
    with pytest.raises(ck.DTypeError, match="only scalars"):
        ck.add(1.0, 2.0)


def test_optimizer_state_dicts_name_shapes_and_refuse_what_would_load_wrongly():
    """SGD without momentum keeps no state: its dict now names the parameters' shapes, so loading
    it into other parameters is a ShapeError; a dict without hyper['step'] (Adam's bias correction
    restarted) or with a state that is not a list is an ArgumentError, nothing loaded."""
    f = np.float32
    sd = ck.SGD([np.ones(3, f)], lr=0.1).state_dict()
    assert sd["shapes"] == [[3]]
    with pytest.raises(ck.ShapeError, match="shapes"):
        ck.SGD([np.ones(4, f), np.ones(1, f)], lr=0.1).load_state_dict(sd)
    adam = ck.Adam([np.ones(3, f)], lr=0.1)
    adam.step([np.ones(3, f)])
    for edit, match in ((lambda d: d["hyper"].pop("step"), "no 'step'"),
                        (lambda d: d["state"].__setitem__("exp_avg", None), "must be a list")):
        d = adam.state_dict()
        edit(d)
        with pytest.raises(ck.ArgumentError, match=match):
            adam.load_state_dict(d)
    assert adam.hyper.step == 1
    for shapes in ([6], [None]):
        d = adam.state_dict()
        d["shapes"] = shapes
        with pytest.raises(ck.ShapeError, match="saved for parameters of shapes"):
            adam.load_state_dict(d)
    d = adam.state_dict()
    del d["shapes"]   # (a dict saved before 'shapes' was written still loads)
    adam.load_state_dict(d)
    np.testing.assert_array_equal(ck.transpose(np.arange(6).reshape(1, 2, 3), range(3)), np.arange(6).reshape(1, 2, 3))


def test_out_may_be_anything_written_through():
    """out= refuses what a copy would take (lists, tuples, scalars) and nothing else: a memoryview,
    an array.array or an object with __array__ over a NumPy buffer take the result."""
    import array

    class Wrapped:
        def __init__(self, a):
            self.a = a

        def __array__(self, dtype=None, copy=None):
            return self.a
    x = np.array([-1.0, 2.0, -3.0])
    for make in (lambda: memoryview(np.zeros(3)), lambda: array.array("d", [0.0] * 3),
                 lambda: Wrapped(np.zeros(3))):
        o = make()
        ck.relu(x, out=o)
        assert list(np.asarray(o)) == [0.0, 2.0, 0.0]
    m = np.ones((2, 2))
    o = memoryview(np.zeros((2, 2)))
    ck.matmul(m, m, out=o)
    assert np.asarray(o).tolist() == [[2.0, 2.0], [2.0, 2.0]]
