"""layernorm, rmsnorm and batch_norm CUDA kernels (cudakit.kernels.normalization) against the
float64 references of tests/norm_reference.py, and against the CPU backend's implementations."""
import os

import norm_reference as ref
import numpy as np
import pytest
from helpers import DTYPES, np_dtype

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")

HIDDEN = [1, 127, 769, 4096, 8193, 65536]


def _nk():
    from cudakit.kernels import normalization
    return normalization


def _dev(a):
    return None if a is None else cp.asarray(a)


def _data(rng, shape, dtype, loc=0.0, scale=1.0):
    return ref.cast(loc + scale * rng.standard_normal(shape), dtype)


def _poisoned(shape, dtype):
    return cp.full(shape, np.nan, np_dtype(dtype))


def _rows_for(cols):
    return 3 if cols >= 65536 else 37


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", HIDDEN)
@pytest.mark.parametrize("affine", [False, True])
def test_layernorm_forward_backward(cols, dtype, affine, rng):
    nk = _nk()
    rows = _rows_for(cols)
    x = _data(rng, (rows, cols), dtype, loc=0.5)
    w = _data(rng, cols, dtype, loc=1.0, scale=0.5) if affine else None
    b = _data(rng, cols, dtype) if affine else None
    dy = _data(rng, (rows, cols), dtype)
    eps = 1e-5
    out = _poisoned((rows, cols), dtype)
    y, mean, rstd = nk.layernorm_forward(_dev(x), _dev(w), _dev(b), eps, out=out)
    assert y is out and y.dtype == np_dtype(dtype)
    acc = np.float64 if dtype == "float64" else np.float32
    assert mean.dtype == acc and rstd.dtype == acc and mean.shape == (rows,)
    yr, mr, rr = ref.layernorm(x, w, b, eps)
    ref.assert_close(y.get(), yr, dtype, "y")
    ref.assert_close(mean.get(), mr, "float32" if dtype != "float64" else dtype, "mean", scale=1.0)
    ref.assert_close(rstd.get(), rr, "float32" if dtype != "float64" else dtype, "rstd")
    dx_out = _poisoned((rows, cols), dtype)
    dx, dw, db = nk.layernorm_backward(_dev(dy), _dev(x), _dev(w), mean, rstd, out=dx_out)
    assert dx is dx_out and (dw is None) == (w is None)
    dxr, dwr, dbr = ref.layernorm_grad(dy, x, w, eps)
    ref.assert_close(dx.get(), dxr, dtype, "dx", scale=ref.grad_scale(dy, w, rr))
    if w is not None:
        ref.assert_close(dw.get(), dwr, dtype, "dweight", factor=4)
    ref.assert_close(db.get(), dbr, dtype, "dbias", factor=4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", HIDDEN)
@pytest.mark.parametrize("affine", [False, True])
def test_rmsnorm_forward_backward(cols, dtype, affine, rng):
    nk = _nk()
    rows = _rows_for(cols)
    x = _data(rng, (rows, cols), dtype, loc=0.3)
    w = _data(rng, cols, dtype, loc=1.0, scale=0.5) if affine else None
    dy = _data(rng, (rows, cols), dtype)
    eps = 1e-6
    y, rstd = nk.rmsnorm_forward(_dev(x), _dev(w), eps, out=_poisoned((rows, cols), dtype))
    yr, rr = ref.rmsnorm(x, w, eps)
    ref.assert_close(y.get(), yr, dtype, "y")
    ref.assert_close(rstd.get(), rr, "float32" if dtype != "float64" else dtype, "rstd")
    dx, dw = nk.rmsnorm_backward(_dev(dy), _dev(x), _dev(w), rstd, out=_poisoned((rows, cols), dtype))
    dxr, dwr = ref.rmsnorm_grad(dy, x, w, eps)
    ref.assert_close(dx.get(), dxr, dtype, "dx", scale=ref.grad_scale(dy, w, rr))
    if affine:
        ref.assert_close(dw.get(), dwr, dtype, "dweight", factor=4)
    else:
        assert dw is None


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("cols", [1, 127, 769, 8193])
def test_many_rows(cols, dtype, rng):
    """rows = 100003: many blocks, a ragged last block, row chunks of the partial sums."""
    nk = _nk()
    rows = 100003 if cols <= 769 else 5003
    x = _data(rng, (rows, cols), dtype)
    w, b = _data(rng, cols, dtype, loc=1.0), _data(rng, cols, dtype)
    dy = _data(rng, (rows, cols), dtype)
    y, mean, rstd = nk.layernorm_forward(_dev(x), _dev(w), _dev(b), 1e-5)
    ref.assert_close(y.get(), ref.layernorm(x, w, b, 1e-5)[0], dtype, "y")
    dx, dw, db = nk.layernorm_backward(_dev(dy), _dev(x), _dev(w), mean, rstd)
    dxr, dwr, dbr = ref.layernorm_grad(dy, x, w, 1e-5)
    ref.assert_close(dx.get(), dxr, dtype, "dx", scale=ref.grad_scale(dy, w, rstd.get()))
    ref.assert_close(dw.get(), dwr, dtype, "dweight", factor=4)
    ref.assert_close(db.get(), dbr, dtype, "dbias", factor=4)
    y, rstd = nk.rmsnorm_forward(_dev(x), _dev(w), 1e-6)
    ref.assert_close(y.get(), ref.rmsnorm(x, w, 1e-6)[0], dtype, "rms y")
    dx, dw = nk.rmsnorm_backward(_dev(dy), _dev(x), _dev(w), rstd)
    dxr, dwr = ref.rmsnorm_grad(dy, x, w, 1e-6)
    ref.assert_close(dx.get(), dxr, dtype, "rms dx", scale=ref.grad_scale(dy, w, rstd.get()))
    ref.assert_close(dw.get(), dwr, dtype, "rms dweight", factor=4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("cols", [3, 127, 4096, 8193, 20000])
@pytest.mark.parametrize("plan_nv", [1, 2, 4, 8])
def test_every_launch_plan(plan_nv, cols, dtype, rng):
    """The kernels under other vectors-per-thread targets than the default plans pick."""
    nk = _nk()
    rows = 19
    x, dy = _data(rng, (rows, cols), dtype, loc=0.5), _data(rng, (rows, cols), dtype)
    w, b = _data(rng, cols, dtype, loc=1.0), _data(rng, cols, dtype)
    y, mean, rstd = nk._norm_forward("ln", _dev(x), _dev(w), _dev(b), 1e-5, None, plan_nv=plan_nv)
    ref.assert_close(y.get(), ref.layernorm(x, w, b, 1e-5)[0], dtype, "y")
    dx, dw, db = nk._norm_backward("ln", _dev(dy), _dev(x), _dev(w), mean, rstd, plan_nv=plan_nv)
    dxr, dwr, dbr = ref.layernorm_grad(dy, x, w, 1e-5)
    ref.assert_close(dx.get(), dxr, dtype, "dx", scale=ref.grad_scale(dy, w, rstd.get()))
    ref.assert_close(dw.get(), dwr, dtype, "dweight", factor=4)
    ref.assert_close(db.get(), dbr, dtype, "dbias", factor=4)
    y, rstd = nk._norm_forward("rms", _dev(x), _dev(w), None, 1e-6, None, plan_nv=plan_nv)[::2]
    ref.assert_close(y.get(), ref.rmsnorm(x, w, 1e-6)[0], dtype, "rms y")
    dx, dw, _ = nk._norm_backward("rms", _dev(dy), _dev(x), _dev(w), None, rstd, plan_nv=plan_nv)
    dxr, dwr = ref.rmsnorm_grad(dy, x, w, 1e-6)
    ref.assert_close(dx.get(), dxr, dtype, "rms dx", scale=ref.grad_scale(dy, w, rstd.get()))
    ref.assert_close(dw.get(), dwr, dtype, "rms dweight", factor=4)


@pytest.mark.parametrize("cols", [768, 4096, 65536])
def test_large_mean_is_accurate(cols, rng):
    """x = 1000 + N(0, 1): E[x^2] - E[x]^2 in float32 would lose the variance entirely."""
    nk = _nk()
    x = (1000.0 + rng.standard_normal((8, cols))).astype(np.float32)
    y, _mean, rstd = nk.layernorm_forward(cp.asarray(x), None, None, 1e-5)
    yr, mr, rr = ref.layernorm(x, None, None, 1e-5)
    np.testing.assert_allclose(rstd.get(), rr, rtol=1e-4)
    # the bound float32 statistics guarantee (norm_reference.large_mean_atol), about 7e-4 to 1e-3 here
    assert np.all(np.abs(y.get() - yr) <= ref.large_mean_atol(yr, rr, mr, x.shape[1]))


@pytest.mark.parametrize("kind", ["ln", "rms"])
@pytest.mark.parametrize("shape", [(4099, 4096), (300, 65536), (100003, 127)])
def test_weight_grads_are_bitwise_deterministic(kind, shape, rng):
    nk = _nk()
    x = _data(rng, shape, "float32")
    dy = _data(rng, shape, "float32")
    w = _data(rng, shape[1], "float32", loc=1.0)
    dx, dw = cp.asarray(x), cp.asarray(dy)
    if kind == "ln":
        _, mean, rstd = nk.layernorm_forward(dx, cp.asarray(w), None, 1e-5)
        runs = [nk.layernorm_backward(dw, dx, cp.asarray(w), mean, rstd) for _ in range(3)]
        for r in runs[1:]:
            assert (r[1].view(cp.uint32) == runs[0][1].view(cp.uint32)).all()
            assert (r[2].view(cp.uint32) == runs[0][2].view(cp.uint32)).all()
    else:
        _, rstd = nk.rmsnorm_forward(dx, cp.asarray(w), 1e-6)
        runs = [nk.rmsnorm_backward(dw, dx, cp.asarray(w), rstd) for _ in range(3)]
        for r in runs[1:]:
            assert (r[1].view(cp.uint32) == runs[0][1].view(cp.uint32)).all()


def test_unaligned_rows_take_the_scalar_path(rng):
    """A view starting 1 element in: not 16-byte aligned, so V = 1; results must not change."""
    nk = _nk()
    base = cp.asarray(_data(rng, 1 + 64 * 256, "float32"))
    x = base[1:].reshape(64, 256)
    y, _mean, _rstd = nk.layernorm_forward(x, None, None, 1e-5)
    ref.assert_close(y.get(), ref.layernorm(x.get(), None, None, 1e-5)[0], "float32", "y")


def test_nan_inf_propagate():
    nk = _nk()
    x = cp.asarray(np.array([[1.0, np.nan, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0], [np.inf, 1.0, 2.0, 3.0]], np.float32))
    y, _mean, _rstd = nk.layernorm_forward(x, None, None, 1e-5)
    y = y.get()
    assert np.isnan(y[0]).all() and np.isfinite(y[1]).all() and np.isnan(y[2]).all()
    y, _rstd = nk.rmsnorm_forward(x, None, 1e-5)
    assert np.isnan(y.get()[0]).all() and np.isfinite(y.get()[1]).all()


def test_empty_rows():
    nk = _nk()
    x = cp.empty((0, 64), cp.float32)
    y, mean, rstd = nk.layernorm_forward(x, None, None, 1e-5)
    assert y.shape == (0, 64) and mean.shape == (0,)
    dx, dw, db = nk.layernorm_backward(x, x, cp.ones(64, cp.float32), mean, rstd)
    assert dx.shape == (0, 64) and float(abs(dw).sum()) == 0 and float(abs(db).sum()) == 0


def test_cpu_backend_agrees(rng):
    from cudakit.backends import cpu_normalization as cn
    nk = _nk()
    x = _data(rng, (33, 1000), "bfloat16")
    w, b = _data(rng, 1000, "bfloat16", loc=1.0), _data(rng, 1000, "bfloat16")
    yg, _mg, rg = nk.layernorm_forward(_dev(x), _dev(w), _dev(b), 1e-5)
    yc, _mc, rc = cn.layernorm_forward(x, w, b, 1e-5)
    np.testing.assert_allclose(rg.get(), rc, rtol=1e-5)
    diff = np.abs(yg.get().astype(np.float32) - yc.astype(np.float32))
    assert diff.max() <= 2 ** -6  # at most one bfloat16 rounding apart


# ---------------------------------------------------------------------------------- batch norm

# N*S up to BN_SMALL (4096) a channel: one launch; (4, 6, 32, 32) at it, (5, 2, 29, 31) just past.
# 2-D (S == 1) takes it only up to BN_SMALL_ROWS (65536) elements: (5000, 17) and (3000, 64) are past.
# 2-D past it with C a multiple of every dtype's vector width: the channels-last kernels (vectors of
# adjacent channels): 3 vector columns of bfloat16 (blocks of 3 x 85 threads), 65 (three blocks of
# 22 x 11), and 70001 rows of 16 channels (many row chunks). The finalize kernels take a warp a
# channel, 8 channels a block, where a channel has at most 64 partials (on 132 multiprocessors):
# (6000, 20) in float32 and (257, 2204, 4, 4) end on a part-filled block; (5, 2, 29, 31) and
# (5000, 17) take a block a channel
BN_SHAPES = [(64, 3), (1001, 17), (4, 5, 7, 9), (8, 16, 32, 32), (2, 3, 1, 1), (4, 6, 32, 32), (5, 2, 29, 31),
             (5000, 17), (3000, 64), (4099, 24), (4500, 520), (70001, 16), (6000, 20), (257, 2204, 4, 4)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", BN_SHAPES)
@pytest.mark.parametrize("affine", [False, True])
def test_batch_norm_training(shape, dtype, affine, rng):
    nk = _nk()
    c = shape[1]
    x = _data(rng, shape, dtype, loc=2.0, scale=3.0)
    dy = _data(rng, shape, dtype)
    gamma = _data(rng, c, dtype, loc=1.0, scale=0.3) if affine else None
    beta = _data(rng, c, dtype) if affine else None
    rm0, rv0 = _data(rng, c, dtype), ref.cast(np.abs(_data(rng, c, dtype)) + 0.5, dtype)
    rm, rv = cp.asarray(rm0), cp.asarray(rv0)
    eps, mom = 1e-5, 0.1
    y, smean, sinv = nk.batch_norm_forward(_dev(x), _dev(gamma), _dev(beta), rm, rv, True, mom, eps,
                                           out=_poisoned(shape, dtype))
    yr, mr, vr, vu = ref.batch_norm_train(x, gamma, beta, eps)
    ref.assert_close(y.get(), yr, dtype, "y", scale=ref.batch_norm_y_scale(yr, x, gamma, mr, 1 / np.sqrt(vr + eps)))
    sd = "float32" if dtype != "float64" else dtype
    ref.assert_close(smean.get(), mr, sd, "save_mean")
    ref.assert_close(sinv.get(), 1 / np.sqrt(vr + eps), sd, "save_invstd")
    ref.assert_close(rm.get(), (1 - mom) * ref.f64(rm0) + mom * mr, dtype, "running_mean")
    ref.assert_close(rv.get(), (1 - mom) * ref.f64(rv0) + mom * vu, dtype, "running_var")
    dx, dg, db = nk.batch_norm_backward(_dev(dy), _dev(x), _dev(gamma), smean, sinv, out=_poisoned(shape, dtype))
    dxr, dgr, dbr = ref.batch_norm_grad(dy, x, gamma, eps)
    gs = ref.grad_scale(dy, gamma, 1 / np.sqrt(vr + eps), channels=True)
    ref.assert_close(dx.get(), dxr, dtype, "dx", scale=gs, factor=2)
    if affine:
        ref.assert_close(dg.get(), dgr, dtype, "dgamma", factor=4)
    else:
        assert dg is None
    ref.assert_close(db.get(), dbr, dtype, "dbeta", factor=4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_batch_norm_inference_uses_running_stats(dtype, rng):
    nk = _nk()
    x = _data(rng, (6, 4, 5, 5), dtype)
    gamma, beta = _data(rng, 4, dtype), _data(rng, 4, dtype)
    rm, rv = _data(rng, 4, dtype), ref.cast(np.abs(_data(rng, 4, dtype)) + 0.5, dtype)
    rm_d, rv_d = cp.asarray(rm), cp.asarray(rv)
    y, _, _ = nk.batch_norm_forward(_dev(x), _dev(gamma), _dev(beta), rm_d, rv_d, False, 0.1, 1e-5)
    shp = (1, 4, 1, 1)
    want = (ref.f64(x) - ref.f64(rm).reshape(shp)) / np.sqrt(ref.f64(rv).reshape(shp) + 1e-5)
    want = want * ref.f64(gamma).reshape(shp) + ref.f64(beta).reshape(shp)
    ref.assert_close(y.get(), want, dtype, "y")
    assert (rm_d.get() == rm).all() and (rv_d.get() == rv).all()  # untouched in inference


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_channel_vectors_equal_single_elements(dtype, rng):
    """The channels-last kernels (vectors of V adjacent channels, lanes of their own) against the
    single-element kernels that an x one element off 16-byte alignment takes: both against the
    float64 reference, and within rounding of each other."""
    nk = _nk()
    shape, eps = (6000, 40), 1e-5
    x, dy = _data(rng, shape, dtype, loc=2.0, scale=3.0), _data(rng, shape, dtype)
    gamma, beta = _data(rng, 40, dtype, loc=1.0), _data(rng, 40, dtype)
    yr, mr, vr, _ = ref.batch_norm_train(x, gamma, beta, eps)
    dxr, dgr, dbr = ref.batch_norm_grad(dy, x, gamma, eps)
    inv = 1 / np.sqrt(vr + eps)
    runs = []
    for off in (0, 1):
        xd, gd = (cp.empty(x.size + off, np_dtype(dtype))[off:].reshape(shape) for _ in range(2))
        xd[...], gd[...] = cp.asarray(x), cp.asarray(dy)
        assert (xd.data.ptr % 16 == 0) == (off == 0)
        y, sm, si = nk.batch_norm_forward(xd, _dev(gamma), _dev(beta), None, None, True, 0.1, eps)
        dx, dg, db = nk.batch_norm_backward(gd, xd, _dev(gamma), sm, si)
        ref.assert_close(y.get(), yr, dtype, "y", scale=ref.batch_norm_y_scale(yr, x, gamma, mr, inv))
        ref.assert_close(sm.get(), mr, "float32" if dtype != "float64" else dtype, "save_mean")
        ref.assert_close(dx.get(), dxr, dtype, "dx", scale=ref.grad_scale(dy, gamma, inv, channels=True), factor=2)
        ref.assert_close(dg.get(), dgr, dtype, "dgamma", factor=4)
        ref.assert_close(db.get(), dbr, dtype, "dbeta", factor=4)
        runs.append([ref.f64(a.get()) for a in (y, dx, dg, db)])
    tol = {"float64": 1e-12, "float32": 1e-4}.get(dtype, 2e-2)
    for name, a, b in zip(("y", "dx", "dgamma", "dbeta"), *runs):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max(), err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape,channels_last", [((6000, 20), False), ((8, 64, 17, 19), True),
                                                 ((257, 2204, 4, 4), False)])
def test_batch_norm_inference_past_the_one_launch_size(shape, channels_last, dtype, rng, cuda_be):
    """Inference with the running statistics through the three-launch path: the finalize kernel's
    warp-a-channel mode without partials, and the channel-vector apply of channels-last rows."""
    c = shape[1]
    x = _data(rng, shape, dtype, loc=1.0)
    gamma, beta = _data(rng, c, dtype), _data(rng, c, dtype)
    rm, rv = _data(rng, c, dtype), ref.cast(np.abs(_data(rng, c, dtype)) + 0.5, dtype)
    xd = _channels_last(cp.asarray(x)) if channels_last else cp.asarray(x)
    y = cuda_be.batch_norm(xd, _dev(gamma), _dev(beta), _dev(rm), _dev(rv))
    assert y.strides == xd.strides
    shp = (1, c) + (1,) * (len(shape) - 2)
    want = (ref.f64(x) - ref.f64(rm).reshape(shp)) / np.sqrt(ref.f64(rv).reshape(shp) + 1e-5)
    ref.assert_close(y.get(), want * ref.f64(gamma).reshape(shp) + ref.f64(beta).reshape(shp), dtype, "y")


# the fused epilogue and relu mask on every kernel path: one launch (64, 3) and (4, 6, 32, 32); the
# NCHW vector kernels (8, 16, 32, 32); single elements (5, 2, 29, 31); channels-last rows (4500, 520)
# and (70001, 16); rows of 17 channels, single elements (5000, 17)
BN_FUSED_SHAPES = [(64, 3), (4, 6, 32, 32), (8, 16, 32, 32), (5, 2, 29, 31), (4500, 520), (70001, 16), (5000, 17)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", BN_FUSED_SHAPES)
def test_batch_norm_fused_residual_relu(shape, dtype, rng):
    """relu(bn(x) + residual), bn(x) + residual and relu(bn(x)) in the pass that writes y, against
    float64, a residual off 16-byte alignment too (single elements); the backward with relu (its
    mask, pre-activation > 0, recomputed from x) bitwise equal to the backward of relu_backward(dy, y),
    the unfused composition, whose mask is the rounded y > 0. The two differ only where a positive
    pre-activation rounds to 0 (float16 below 2^-25): dy is zeroed where bn(x) rounds to 0, for both."""
    import cudakit
    nk = _nk()
    c, eps = shape[1], 1e-5
    x, dy, r = _data(rng, shape, dtype, loc=2.0, scale=3.0), _data(rng, shape, dtype), _data(rng, shape, dtype)
    gamma, beta = _data(rng, c, dtype, loc=1.0, scale=0.3), _data(rng, c, dtype)
    yr, mr, vr, _ = ref.batch_norm_train(x, gamma, beta, eps)
    scale = np.maximum(ref.batch_norm_y_scale(yr, x, gamma, mr, 1 / np.sqrt(vr + eps)), np.abs(ref.f64(r)))
    r_off = cp.empty(r.size + 1, np_dtype(dtype))[1:].reshape(shape)   # one element off 16-byte alignment
    r_off[...] = _dev(r)
    for res, relu, want in ((_dev(r), True, np.maximum(yr + ref.f64(r), 0)), (_dev(r), False, yr + ref.f64(r)),
                            (r_off, True, np.maximum(yr + ref.f64(r), 0)), (None, True, np.maximum(yr, 0))):
        y, sm, si = nk.batch_norm_forward(_dev(x), _dev(gamma), _dev(beta), None, None, True, 0.1, eps,
                                          out=_poisoned(shape, dtype), residual=res, relu=relu)
        ref.assert_close(y.get(), want, dtype, f"y residual={res is not None} relu={relu}", scale=scale)
    plain = nk.batch_norm_forward(_dev(x), _dev(gamma), _dev(beta), None, None, True, 0.1, eps)[0]
    dy_d = cudakit.relu_backward(_dev(dy), cudakit.mul(plain, plain))   # 0 where bn(x) (or its square) rounds to 0
    got = nk.batch_norm_backward(dy_d, _dev(x), _dev(gamma), sm, si, out=_poisoned(shape, dtype),
                                 beta=_dev(beta), relu=True)
    want = nk.batch_norm_backward(cudakit.relu_backward(dy_d, y), _dev(x), _dev(gamma), sm, si)
    for name, a, b in zip(("dx", "dgamma", "dbeta"), got, want):
        assert (a.view(cp.uint8) == b.view(cp.uint8)).all(), name
    dxr, _, _ = ref.batch_norm_grad(ref.f64(dy_d.get()) * (ref.f64(y.get()) > 0), x, gamma, eps)   # forward's mask
    ref.assert_close(got[0].get(), dxr, dtype, "dx", scale=ref.grad_scale(dy, gamma, 1 / np.sqrt(vr + eps),
                                                                         channels=True), factor=2)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_api_batch_norm_fused_channels_last_and_planned(cuda_be, dtype, rng):
    """The fused batch norm through cudakit's planned calls on a channels-last x (a residual in the
    other layout copied into it), three calls each (the first checked, then traced plans): y and
    dx channels-last and equal on every call."""
    import cudakit
    shape = (8, 64, 9, 11)
    c = shape[1]
    x, r, dy = _data(rng, shape, dtype, loc=1.0), _data(rng, shape, dtype), _data(rng, shape, dtype)
    gamma, beta = _dev(_data(rng, c, dtype, loc=1.0)), _dev(_data(rng, c, dtype))
    xc, rc, dyc = (_channels_last(cp.asarray(a)) for a in (x, r, dy))
    yr, mr, vr, _ = ref.batch_norm_train(x, gamma.get(), beta.get(), 1e-5)
    scale = np.maximum(ref.batch_norm_y_scale(yr, x, gamma.get(), mr, 1 / np.sqrt(vr + 1e-5)), np.abs(ref.f64(r)))
    gs = ref.grad_scale(dy, gamma.get(), 1 / np.sqrt(vr + 1e-5), channels=True)
    outs = []
    for res in (rc, rc, rc, cp.asarray(r)):
        y, sm, si = cudakit.batch_norm_with_stats(xc, gamma, beta, None, None, True, residual=res, activation="relu")
        assert y.strides == xc.strides
        ref.assert_close(y.get(), np.maximum(yr + ref.f64(r), 0), dtype, "y", scale=scale)
        y1, sm1, si1 = cudakit.batch_norm_with_stats(xc, gamma, beta, None, None, True, activation="relu")
        dx, dg, db = cudakit.batch_norm_backward(dyc, xc, gamma, sm1, si1, beta=beta, activation="relu")
        assert dx.strides == xc.strides
        dxr, _, _ = ref.batch_norm_grad(ref.f64(dy) * (ref.f64(y1.get()) > 0), x, gamma.get(), 1e-5)
        ref.assert_close(dx.get(), dxr, dtype, "dx", scale=gs, factor=2)
        outs.append([a.get() for a in (y, y1, dx, dg, db)])
    for o in outs[1:]:
        for a, b in zip(o, outs[0]):
            assert np.array_equal(ref.f64(a), ref.f64(b))
    from cudakit import dispatch
    planned = {k[0] for k, p in dispatch._plans.items() if p is not None}
    assert {"batch_norm_with_stats_fused", "batch_norm_backward_fused"} <= planned, planned


def _bn_forward_launches(nk, *args, **kw):
    """batch_norm_forward(*args, **kw) and the names of the kernels it launched."""
    from cudakit.runtime import launch
    launch.recent_launches.clear()
    out = nk.batch_norm_forward(*args, **kw)
    return out, [name.split("<")[0] for name, _, _ in launch.recent_launches]


# the single-read training forward (x resident in shared memory) against the three launches, on
# each of its layouts: NCHW vectors (8, 16, 32, 32), (7, 33, 24, 32) and (301, 8, 4, 4) (chunks of
# 2 rows, the last of 1), single elements (5, 2, 29, 31) (float32 and float64: 16-bit single elements,
# under BN_TILE_MIN_BYTES, take the three launches either way); channels-last rows (2500, 520: x and dy fit
# on chip in float64 too) and rows of 24 channels
# (70001, 24: 6 vectors a row in float32, 3 in 16-bit: blocks of 6 x 42 or 3 x 85 threads, which end
# in a part-filled warp)
BN_RESIDENT_SHAPES = [(8, 16, 32, 32), (5, 2, 29, 31), (7, 33, 24, 32), (301, 8, 4, 4), (2500, 520), (70001, 24)]


def _partial_tiles(nk, monkeypatch, partial: bool) -> None:
    """partial: the single-read kernels' tiles hold at most 3 rows of a block's (the rest read twice)."""
    if partial:
        monkeypatch.setattr(nk, "BN_RESIDENT_TILE_ROWS_MAX", 3)
        monkeypatch.setattr(nk, "BN_RESIDENT_PARTIAL_FROM", 0.0)
        monkeypatch.setattr(nk, "BN_RESIDENT_PARTIAL_FROM_FORWARD", 0.0)


def _tile_vectors(nk, shape, dtype) -> bool:
    """Whether the batch norm of a C-contiguous, aligned x of this shape runs in vectors of
    BN_TILE_MIN_BYTES at least (cp.async's smallest copy, the single-read kernels' floor): channel
    vectors of (N, C) rows whose C the vector width divides, else a plane's vectors where it
    divides S, else single elements."""
    n, c, s = shape[0], shape[1], int(np.prod(shape[2:]))
    v = nk._bn_vectors(n, c, s, dtype, (cp.empty(1, np_dtype(dtype)),))[0]   # (an aligned array: its vectors)
    return v * np.dtype(np_dtype(dtype)).itemsize >= nk.BN_TILE_MIN_BYTES


def _three_launch_names(cl: bool, fwd: bool) -> list:
    """The kernels of the three-launch forward (fwd) or backward, channels-last rows (cl) or not."""
    if fwd:
        return ["ck_bn_stats_cl" if cl else "ck_bn_stats", "ck_bn_finalize", "ck_bn_apply"]
    return ["ck_bn_bwd_reduce_cl" if cl else "ck_bn_bwd_reduce", "ck_bn_bwd_finalize", "ck_bn_bwd_apply"]


def _forward_matches_three_launches(nk, monkeypatch, rng, shape, dtype, fused, switch, on_names, off_names,
                                    check_on=None) -> None:
    """batch_norm_forward with module flag `switch` on (launching on_names; check_on() looks at the
    launch further) and off (off_names), then on again: y (fused: relu(bn(x) + residual)), the saved
    statistics and the running statistics, updated once, against float64 and within rounding of each
    other (their sums merge in different trees), each path bitwise reproducible."""
    c, eps, mom = shape[1], 1e-5, 0.1
    x, r = _data(rng, shape, dtype, loc=2.0, scale=3.0), _data(rng, shape, dtype)
    gamma, beta = _data(rng, c, dtype, loc=1.0, scale=0.3), _data(rng, c, dtype)
    rm0, rv0 = _data(rng, c, dtype), ref.cast(np.abs(_data(rng, c, dtype)) + 0.5, dtype)
    yr, mr, vr, vu = ref.batch_norm_train(x, gamma, beta, eps)
    want = np.maximum(yr + ref.f64(r), 0) if fused else yr
    scale = ref.batch_norm_y_scale(yr, x, gamma, mr, 1 / np.sqrt(vr + eps))
    if fused:
        scale = np.maximum(scale, np.abs(ref.f64(r)))
    sd = "float32" if dtype != "float64" else dtype
    runs = {}
    for on in (True, False, True):
        monkeypatch.setattr(nk, switch, on)
        rm, rv = cp.asarray(rm0), cp.asarray(rv0)
        kw = {"residual": _dev(r), "relu": True} if fused else {}
        (y, sm, si), names = _bn_forward_launches(nk, _dev(x), _dev(gamma), _dev(beta), rm, rv, True, mom, eps,
                                                  out=_poisoned(shape, dtype), **kw)
        assert names == (on_names if on else off_names), names
        if on and check_on is not None:
            check_on()
        ref.assert_close(y.get(), want, dtype, f"y {switch}={on}", scale=scale)
        ref.assert_close(sm.get(), mr, sd, "save_mean")
        ref.assert_close(si.get(), 1 / np.sqrt(vr + eps), sd, "save_invstd")
        ref.assert_close(rm.get(), (1 - mom) * ref.f64(rm0) + mom * mr, dtype, "running_mean")
        ref.assert_close(rv.get(), (1 - mom) * ref.f64(rv0) + mom * vu, dtype, "running_var")
        got = [a.get() for a in (y, sm, si, rm, rv)]
        if on in runs:
            for a, b in zip(got, runs[on]):
                assert a.tobytes() == b.tobytes()
        runs[on] = got
    tol = {"float64": 1e-12, "float32": 1e-5}.get(dtype, 1e-2)
    for name, a, b in zip(("y", "save_mean", "save_invstd", "running_mean", "running_var"), runs[True], runs[False]):
        np.testing.assert_allclose(ref.f64(a), ref.f64(b), rtol=tol, atol=tol * np.abs(ref.f64(b)).max(), err_msg=name)


def _backward_matches_three_launches(nk, monkeypatch, rng, shape, dtype, relu, switch, on_names, off_names,
                                     check_on=None) -> None:
    """batch_norm_backward (relu: of relu(bn(x)), its mask the forward's) with module flag `switch` on
    (on_names; check_on() as _forward_matches_three_launches') and off (off_names), then on again: dx,
    dgamma and dbeta against float64 and within rounding of each other, each path bitwise reproducible."""
    from cudakit.runtime import launch
    c, eps = shape[1], 1e-5
    x, dy = _data(rng, shape, dtype, loc=2.0, scale=3.0), _data(rng, shape, dtype)
    gamma, beta = _data(rng, c, dtype, loc=1.0, scale=0.3), _data(rng, c, dtype)
    y, sm, si = nk.batch_norm_forward(_dev(x), _dev(gamma), _dev(beta), None, None, True, 0.1, eps, relu=relu)
    _, _, vr, _ = ref.batch_norm_train(x, gamma, beta, eps)
    g = ref.f64(dy) * (ref.f64(y.get()) > 0) if relu else dy   # relu: the forward's mask
    dxr, dgr, dbr = ref.batch_norm_grad(g, x, gamma, eps)
    gs = ref.grad_scale(dy, gamma, 1 / np.sqrt(vr + eps), channels=True)
    runs = {}
    for on in (True, False, True):
        monkeypatch.setattr(nk, switch, on)
        launch.recent_launches.clear()
        got = nk.batch_norm_backward(_dev(dy), _dev(x), _dev(gamma), sm, si, out=_poisoned(shape, dtype),
                                     beta=_dev(beta), relu=relu)
        names = [name.split("<")[0] for name, _, _ in launch.recent_launches]
        assert names == (on_names if on else off_names), names
        if on and check_on is not None:
            check_on()
        ref.assert_close(got[0].get(), dxr, dtype, f"dx {switch}={on}", scale=gs, factor=2)
        ref.assert_close(got[1].get(), dgr, dtype, "dgamma", factor=4)
        ref.assert_close(got[2].get(), dbr, dtype, "dbeta", factor=4)
        got = [a.get() for a in got]
        if on in runs:
            for a, b in zip(got, runs[on]):
                assert a.tobytes() == b.tobytes()
        runs[on] = got
    tol = {"float64": 1e-10, "float32": 1e-4}.get(dtype, 2e-2)
    for name, a, b in zip(("dx", "dgamma", "dbeta"), runs[True], runs[False]):
        np.testing.assert_allclose(ref.f64(a), ref.f64(b), rtol=tol, atol=tol * np.abs(ref.f64(b)).max(), err_msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", BN_RESIDENT_SHAPES)
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("partial", [False, True])
def test_batch_norm_resident_forward_matches_three_launches(shape, dtype, fused, partial, rng, monkeypatch):
    """ck_bn_resident (statistics, grid barrier, finalize, grid barrier, y from the shared-memory tile)
    against float64 and against the three-launch path (nk.BN_RESIDENT off), which must still be
    what runs there (_forward_matches_three_launches); each path bitwise reproducible: the first
    call's grid as the later calls' (its occupancy query once answered 1 block a multiprocessor
    before the kernel's shared-memory limit was raised, 2 after); partial: tiles of part of a
    block's rows (the rest read from x in both passes)."""
    nk = _nk()
    _partial_tiles(nk, monkeypatch, partial)
    monkeypatch.setattr(nk, "BN_RESIDENT_LANES_MIN_BYTES", 0)   # (channels-last rows of any size)
    off = _three_launch_names(len(shape) == 2, True)   # (and where 16-bit single elements leave it: (5, 2, 29, 31))
    _forward_matches_three_launches(nk, monkeypatch, rng, shape, dtype, fused, "BN_RESIDENT",
                                    ["ck_bn_barrier_zero", "ck_bn_resident"] if _tile_vectors(nk, shape, dtype) else off,
                                    off)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", BN_RESIDENT_SHAPES)
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("partial", [False, True])
def test_batch_norm_resident_backward_matches_three_launches(shape, dtype, relu, partial, rng, monkeypatch):
    """ck_bn_bwd_resident (dy's and x's tiles in shared memory, the channel sums between two grid
    barriers) against float64 and the three launches (_backward_matches_three_launches), with relu's
    mask too; partial: tiles of part of a block's rows."""
    nk = _nk()
    _partial_tiles(nk, monkeypatch, partial)
    monkeypatch.setattr(nk, "BN_RESIDENT_LANES_MIN_BYTES", 0)   # (channels-last rows of any size)
    off = _three_launch_names(len(shape) == 2, False)
    _backward_matches_three_launches(nk, monkeypatch, rng, shape, dtype, relu, "BN_RESIDENT",
                                     ["ck_bn_barrier_zero", "ck_bn_bwd_resident"] if _tile_vectors(nk, shape, dtype)
                                     else off, off)


# the staged one-block-a-channel kernels (ck_bn_small / ck_bn_bwd_small STAGED: a channel's x, and
# dy, in shared memory) past BN_SMALL: single elements (5, 7, 29, 31) (4495 a channel: 1024 threads of
# 4-5 vectors each) and vectors (3, 5, 40, 48) (blocks of 384 threads in float32); both fit one
# block's shared memory in float64 too, dy's and x's. The three launches whether staged or not: (N, C)
# rows of a strided column (6600, 11), not staged; 16-bit single elements (2 bytes, under cp.async's
# floor); the 16-bit backward (BN_STAGED_BWD_ITEMSIZE).
BN_STAGED_SHAPES = [(5, 7, 29, 31), (3, 5, 40, 48), (6600, 11)]


def _staged_only(nk, monkeypatch) -> None:
    """The staged kernels wherever a channel fits, whatever the channel count, and not the on-chip ones."""
    monkeypatch.setattr(nk, "BN_STAGED_FILL", 0.0)
    monkeypatch.setattr(nk, "BN_STAGED_ROUNDS", 0.0)
    monkeypatch.setattr(nk, "_bn_resident", lambda *a, **k: None)


def _staged_launch_is_a_block_a_channel(c: int) -> None:
    """The last launch was a staged kernel (STAGED true) on a grid of a block a channel."""
    from cudakit.runtime import launch
    expr, (gx, _, _), _ = launch.recent_launches[-1]
    assert expr.endswith(", true>") and gx == c, (expr, gx)


def _staged_vectors(nk, shape, dtype) -> bool:
    """Whether this shape's batch norm has planes (S > 1) in vectors of BN_TILE_MIN_BYTES at least
    (the staged kernels' floor)."""
    return len(shape) > 2 and int(np.prod(shape[2:])) > 1 and _tile_vectors(nk, shape, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", BN_STAGED_SHAPES)
@pytest.mark.parametrize("fused", [False, True])
def test_batch_norm_staged_forward_matches_three_launches(shape, dtype, fused, rng, monkeypatch):
    """ck_bn_small STAGED (x copied to shared memory once, both passes from there; a block a channel)
    against float64 and the three launches (nk.BN_STAGED off): _forward_matches_three_launches."""
    nk = _nk()
    _staged_only(nk, monkeypatch)
    c = shape[1]
    wide = _staged_vectors(nk, shape, dtype)   # (else 2-byte elements: the three launches either way)
    off = _three_launch_names(False, True)
    _forward_matches_three_launches(nk, monkeypatch, rng, shape, dtype, fused, "BN_STAGED",
                                    ["ck_bn_small"] if wide else off, off,
                                    (lambda: _staged_launch_is_a_block_a_channel(c)) if wide else None)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", BN_STAGED_SHAPES)
@pytest.mark.parametrize("relu", [False, True])
def test_batch_norm_staged_backward_matches_three_launches(shape, dtype, relu, rng, monkeypatch):
    """ck_bn_bwd_small STAGED (dy and x copied to shared memory once) against float64 and the three
    launches, with relu's mask too: _backward_matches_three_launches."""
    nk = _nk()
    _staged_only(nk, monkeypatch)
    c = shape[1]
    wide = _staged_vectors(nk, shape, dtype) and np.dtype(np_dtype(dtype)).itemsize >= nk.BN_STAGED_BWD_ITEMSIZE
    off = _three_launch_names(False, False)
    _backward_matches_three_launches(nk, monkeypatch, rng, shape, dtype, relu, "BN_STAGED",
                                     ["ck_bn_bwd_small"] if wide else off, off,
                                     (lambda: _staged_launch_is_a_block_a_channel(c)) if wide else None)


def test_batch_norm_staged_first_where_both_run(monkeypatch):
    """Where the staged kernels and ck_bn_resident's both run (x on chip whole, a channel in one
    block), BN_STAGED_FIRST picks: the staged ones when set, the grid-barrier ones when not; the
    forward and the backward alike."""
    from cudakit.runtime import launch
    nk = _nk()
    monkeypatch.setattr(nk, "BN_STAGED_FILL", 0.0)   # (16 channels: whatever the multiprocessor count)
    x = cp.asarray(_data(np.random.default_rng(0), (8, 16, 32, 32), "float32"))
    for first in (True, False):
        monkeypatch.setattr(nk, "BN_STAGED_FIRST", first)
        (_, sm, si), names = _bn_forward_launches(nk, x, None, None, None, None, True, 0.1, 1e-5)
        assert names == (["ck_bn_small"] if first else ["ck_bn_barrier_zero", "ck_bn_resident"]), (first, names)
        launch.recent_launches.clear()
        nk.batch_norm_backward(x, x, None, sm, si)
        names = [n.split("<")[0] for n, _, _ in launch.recent_launches]
        assert names == (["ck_bn_bwd_small"] if first else ["ck_bn_barrier_zero", "ck_bn_bwd_resident"]), (first, names)


def test_batch_norm_staged_plan_limits(monkeypatch):
    """The staged kernels only where a channel fits one block's shared memory (x's, and the
    backward's dy's too), in vectors of 4 bytes at least, and the channels use the device well
    enough (one round: a block on BN_STAGED_FILL of the multiprocessors; BN_STAGED_ROUNDS of the
    blocks the device holds at once over several),
    with blocks of whole warps from 128 to 1024 threads and the channel's bytes as their shared
    memory; off with BN_STAGED or BN_RESIDENT."""
    import cudakit
    nk = _nk()
    info = cudakit.get_device_info()
    sms = info.multiprocessors
    fwd, bwd = "ck_bn_small<float, 4, true>", "ck_bn_bwd_small<float, 4, false, true>"
    n = (info.max_shared_memory_per_block_optin - 1024) // (196 * 16)   # rows of 28x28 float32 planes that fit
    assert nk._bn_staged("float32", fwd, n, sms, 196, 16, 1) == (1024, n * 196 * 16)
    assert nk._bn_staged("float32", bwd, n, sms, 196, 16, 2) is None   # dy and x: twice the bytes
    assert nk._bn_staged("float32", fwd, 4 * n, sms, 196, 16, 1) is None
    slots = nk._occupancy("float32", fwd, 128, 2 * 196 * 16, floor=0) * sms
    assert nk._bn_staged("float32", fwd, 2, slots, 196, 16, 1) == (128, 2 * 196 * 16)
    assert nk._bn_staged("float32", fwd, 2, sms, 196, 16, 1) is not None   # one round, a block a multiprocessor
    assert nk._bn_staged("float32", fwd, 2, sms // 2, 196, 16, 1) is None   # half the multiprocessors idle
    assert nk._bn_staged("float32", fwd, 2, slots + slots // 2, 196, 16, 1) is None   # 1.5 rounds: 0.75 used
    assert nk._bn_staged("float32", fwd, 2, 2 * slots - slots // 10, 196, 16, 1) is not None
    assert nk._bn_staged("bfloat16", "ck_bn_small<ck_bf16, 1, true>", 2, slots, 784, 2, 1) is None
    with monkeypatch.context() as m:
        m.setattr(nk, "BN_STAGED_FILL", 0.0)
        m.setattr(nk, "BN_STAGED_ROUNDS", 0.0)
        assert nk._bn_staged("float32", fwd, 3, sms, 196, 16, 1)[0] == 160   # 588 vectors: 5 warps
    for flag in ("BN_STAGED", "BN_RESIDENT"):
        with monkeypatch.context() as m:
            m.setattr(nk, flag, False)
            assert nk._bn_staged("float32", fwd, 2, slots, 196, 16, 1) is None


def test_batch_norm_partial_tiles_take_at_least_their_fraction_of_the_rows(monkeypatch):
    """Where a block's rows do not fit its tile whole, the single-read kernels take tiles of part of
    them only from the fraction of the rows set (BN_RESIDENT_PARTIAL_FROM for the backward, .._FORWARD
    for the forward; None: never); the plan's tile rows and shared memory are what the launch gets."""
    from cudakit.runtime import launch
    nk = _nk()
    monkeypatch.setattr(nk, "BN_RESIDENT_LANES_MIN_BYTES", 0)
    monkeypatch.setattr(nk, "BN_RESIDENT_TILE_ROWS_MAX", 3)
    x = cp.ones((70001, 24), cp.float32)
    (_, sm, si), _ = _bn_forward_launches(nk, x, None, None, None, None, True, 0.1, 1e-5)
    for frac, resident in ((1.0, False), (None, False), (0.0, True)):
        monkeypatch.setattr(nk, "BN_RESIDENT_PARTIAL_FROM_FORWARD", frac)
        monkeypatch.setattr(nk, "BN_RESIDENT_PARTIAL_FROM", frac)
        _, names = _bn_forward_launches(nk, x, None, None, None, None, True, 0.1, 1e-5)
        assert names == (["ck_bn_barrier_zero", "ck_bn_resident"] if resident else
                         ["ck_bn_stats_cl", "ck_bn_finalize", "ck_bn_apply"]), (frac, names)
        fwd = launch.recent_launches[-1]
        launch.recent_launches.clear()
        nk.batch_norm_backward(x, x, None, sm, si)
        names = [n.split("<")[0] for n, _, _ in launch.recent_launches]
        assert names == (["ck_bn_barrier_zero", "ck_bn_bwd_resident"] if resident else
                         ["ck_bn_bwd_reduce_cl", "ck_bn_bwd_finalize", "ck_bn_bwd_apply"]), (frac, names)
    for (expr, grid, _), vbytes in ((fwd, 16), (launch.recent_launches[-1], 32)):
        block, gx, gy, chunk, rows, smem = nk._bn_resident("float32", expr, 70001, 6, True, vbytes, x.nbytes, 0.0)
        assert rows == 3 < chunk and smem == rows * block[0] * vbytes and tuple(grid)[:2] == (gx, gy)


def test_batch_norm_resident_only_where_x_fits_on_chip(rng, monkeypatch):
    """An x (or x and dy) larger than the shared memory of the blocks the device holds at once takes
    the three launches, as do channels-last rows under BN_RESIDENT_LANES_MIN_BYTES and anything
    with CUDAKIT_BN_SINGLE_READ=0; the single-read kernels' grids fit in what the occupancy allows
    (the staged kernels off: on a GPU of few multiprocessors they would take the 64 channels)."""
    import cudakit
    nk = _nk()
    monkeypatch.setattr(nk, "BN_STAGED", False)
    rows = nk.BN_RESIDENT_LANES_MIN_BYTES // (4 * 64)
    for n, want in ((rows - 1, ["ck_bn_stats_cl", "ck_bn_finalize", "ck_bn_apply"]),
                    (rows, ["ck_bn_barrier_zero", "ck_bn_resident"])):
        _, names = _bn_forward_launches(nk, cp.ones((n, 64), cp.float32), None, None, None, None, True, 0.1, 1e-5)
        assert names == want, (n, names)
    info = cudakit.get_device_info()
    room = info.multiprocessors * info.max_shared_memory_per_multiprocessor
    big = cp.ones((4, 8, room // 128 + 1, 8), cp.float32)   # 256 * (room/128 + 1) floats: 8 times room bytes
    _, names = _bn_forward_launches(nk, big, None, None, None, None, True, 0.1, 1e-5)
    assert names == ["ck_bn_stats", "ck_bn_finalize", "ck_bn_apply"], names
    x = cp.asarray(_data(rng, (32, 64, 28, 28), "float32"))
    from cudakit import config
    try:   # CUDAKIT_BN_SINGLE_READ=0: the three launches wherever x fits
        os.environ["CUDAKIT_BN_SINGLE_READ"] = "0"
        config.reload()
        _, names = _bn_forward_launches(nk, x, None, None, None, None, True, 0.1, 1e-5)
        assert names == ["ck_bn_stats", "ck_bn_finalize", "ck_bn_apply"], names
    finally:
        os.environ.pop("CUDAKIT_BN_SINGLE_READ", None)
        config.reload()
    (_, sm, si), names = _bn_forward_launches(nk, x, None, None, None, None, True, 0.1, 1e-5)
    assert names == ["ck_bn_barrier_zero", "ck_bn_resident"], names
    from cudakit.runtime import launch
    grids = [launch.recent_launches[-1]]
    launch.recent_launches.clear()
    nk.batch_norm_backward(x, x, None, sm, si)   # dy and x: twice the bytes, still on chip
    assert [n.split("<")[0] for n, _, _ in launch.recent_launches] == ["ck_bn_barrier_zero", "ck_bn_bwd_resident"]
    grids.append(launch.recent_launches[-1])
    for expr, grid, block in grids:   # every block resident at once: the occupancy (as the driver answers it) allows it
        plan = next(p for k, p in nk._resident_plans.items() if k[1:4] == (expr, 32, 64 * 28 * 28 // 4) and p is not None)
        per_sm = nk._occupancy("float32", expr, block[0] * block[1], plan[5], floor=0)
        assert tuple(grid)[:2] == (plan[1], plan[2]) and plan[1] * plan[2] <= per_sm * info.multiprocessors, (expr, grid)
    launch.recent_launches.clear()
    big_dy = cp.ones_like(big)
    _, sm_b, si_b = nk.batch_norm_forward(big, None, None, None, None, True, 0.1, 1e-5)
    launch.recent_launches.clear()
    nk.batch_norm_backward(big_dy, big, None, sm_b, si_b)
    assert [n.split("<")[0] for n, _, _ in launch.recent_launches] == ["ck_bn_bwd_reduce", "ck_bn_bwd_finalize",
                                                                        "ck_bn_bwd_apply"]
    ref.assert_close(sm.get(), ref.f64(x.get()).mean(axis=(0, 2, 3)), "float32", "save_mean")


@pytest.mark.parametrize("channels_last", [False, True])
def test_batch_norm_resident_in_graph_replays(channels_last, rng, monkeypatch):
    """The single-read forward and backward captured in a CUDA graph (their barrier counters zeroed
    by their own launches in the graph) and replayed on new inputs, back to back and on another
    stream: each replay equals the eager calls on the same inputs bit for bit."""
    import cudakit
    from cudakit.runtime import launch
    monkeypatch.setattr(_nk(), "BN_RESIDENT_LANES_MIN_BYTES", 0)   # (channels-last rows of any size)
    shape = (16, 32, 20, 24)
    xs = [cp.asarray(_data(rng, shape, "float32", loc=k, scale=k + 1.0)) for k in range(4)]
    gys = [cp.asarray(_data(rng, shape, "float32")) for _ in range(4)]
    if channels_last:
        xs, gys = [_channels_last(x) for x in xs], [_channels_last(gy) for gy in gys]
    g, b = cp.asarray(_data(rng, 32, "float32", loc=1.0)), cp.asarray(_data(rng, 32, "float32"))

    def fn(a, gy):
        y, sm, si = cudakit.batch_norm_with_stats(a, g, b, None, None, True, activation="relu")
        return (y, sm, si) + tuple(cudakit.batch_norm_backward(gy, a, g, sm, si, beta=b, activation="relu"))

    launch.recent_launches.clear()
    want = [[o.get() for o in fn(x, gy)] for x, gy in zip(xs, gys)]
    names = {name.split("<")[0] for name, _, _ in launch.recent_launches}
    assert {"ck_bn_resident", "ck_bn_bwd_resident"} <= names, names
    graph = cudakit.graph(fn, xs[0], gys[0], warmup=1)
    got = [[o.get() for o in graph(x, gy)] for x, gy in zip(xs[1:3], gys[1:3])]
    with cp.cuda.Stream(non_blocking=True):
        got.append([o.get() for o in graph(xs[3], gys[3])])
    for w, o in zip(want[1:], got):
        for a, c in zip(w, o):
            assert a.tobytes() == c.tobytes()
    from cudakit import dispatch
    dispatch.clear()   # (plans made under the patched threshold: not for the tests after this one)


def test_batch_norm_grads_are_bitwise_deterministic(rng):
    nk = _nk()
    x = cp.asarray(_data(rng, (16, 32, 40, 40), "float32"))
    dy = cp.asarray(_data(rng, (16, 32, 40, 40), "float32"))
    g = cp.asarray(_data(rng, 32, "float32"))
    _, sm, si = nk.batch_norm_forward(x, g, None, None, None, True, 0.1, 1e-5)
    runs = [nk.batch_norm_backward(dy, x, g, sm, si) for _ in range(3)]
    for r in runs[1:]:
        assert (r[1].view(cp.uint32) == runs[0][1].view(cp.uint32)).all()
        assert (r[2].view(cp.uint32) == runs[0][2].view(cp.uint32)).all()


# ------------------------------------------------------------------ the argument policy on the GPU

@pytest.fixture
def cuda_be():
    """The CUDA backend; before its class carries the normalization ops, a subclass that adds them."""
    import cudakit
    from cudakit.backends.normalization_api import CudaNormalizationHooks
    b = cudakit.get_backend("cuda")
    if hasattr(b, "layernorm"):
        return b
    return type("CudaNormBackend", (CudaNormalizationHooks, type(b)), {})()


def test_api_noncontiguous_input_and_bad_input(cuda_be, rng):
    import cudakit
    x = cp.asarray(_data(rng, (64, 300), "float32"))
    v = x[:, ::3]
    ref.assert_close(cuda_be.layernorm(v).get(), ref.layernorm(v.get(), None, None, 1e-5)[0], "float32", "y")
    ref.assert_close(cuda_be.rmsnorm(v.T).get(), ref.rmsnorm(v.T.get(), None, 1e-6)[0], "float32", "rms y")
    with pytest.raises(cudakit.ShapeError, match="weight must have shape"):
        cuda_be.layernorm(x, cp.ones(7, cp.float32))
    with pytest.raises(ValueError, match="eps must be"):
        cuda_be.rmsnorm(x, eps=0.0)
    with pytest.raises(cudakit.ShapeError, match="1-D"):
        cuda_be.batch_norm(cp.ones(5, cp.float32), training=True)
    with pytest.raises(cudakit.DeviceError):
        cuda_be.layernorm(x, np.ones(300, np.float32))


def _channels_last(a):
    """An (N, C, *spatial) view of a copy of a in (N, *spatial, C) memory (PyTorch's channels_last)."""
    perm = (0, *range(2, a.ndim), 1)
    return cp.ascontiguousarray(a.transpose(perm)).transpose(tuple(np.argsort(perm)))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(8, 64, 17, 19), (2, 24, 5, 33, 31), (4, 3, 40, 41), (3, 16, 7, 9)])
def test_api_batch_norm_of_channels_last_views(cuda_be, shape, dtype, rng):
    """Channels-last x: batch norm on its [N*spatial, C] rows in place (vectors of channels where
    V divides C, single elements for C = 3; one launch for the small (3, 16, 7, 9)), y and dx
    channels-last, against the float64 reference; a C-contiguous grad_out is taken too."""
    c = shape[1]
    x, dy = _data(rng, shape, dtype, loc=2.0, scale=3.0), _data(rng, shape, dtype)
    gamma, beta = _data(rng, c, dtype, loc=1.0), _data(rng, c, dtype)
    xc = _channels_last(cp.asarray(x))
    rm, rv = cp.zeros(c, np_dtype(dtype)), cp.ones(c, np_dtype(dtype))
    y, sm, si = cuda_be.batch_norm_with_stats(xc, _dev(gamma), _dev(beta), rm, rv, training=True)
    assert not y.flags.c_contiguous and y.strides == xc.strides
    yr, mr, vr, vu = ref.batch_norm_train(x, gamma, beta, 1e-5)
    inv = 1 / np.sqrt(vr + 1e-5)
    ref.assert_close(y.get(), yr, dtype, "y", scale=ref.batch_norm_y_scale(yr, x, gamma, mr, inv))
    ref.assert_close(rv.get(), 0.9 + 0.1 * vu, dtype, "running_var")
    dxr, dgr, dbr = ref.batch_norm_grad(dy, x, gamma, 1e-5)
    for g in (_channels_last(cp.asarray(dy)), cp.asarray(dy)):
        dx, dg, db = cuda_be.batch_norm_backward(g, xc, _dev(gamma), sm, si)
        assert dx.strides == xc.strides
        ref.assert_close(dx.get(), dxr, dtype, "dx", scale=ref.grad_scale(dy, gamma, inv, channels=True), factor=2)
        ref.assert_close(dg.get(), dgr, dtype, "dgamma", factor=4)
        ref.assert_close(db.get(), dbr, dtype, "dbeta", factor=4)


def test_api_updates_torch_running_stats_in_place(cuda_be):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    t = torch.randn(8, 4, 5, 5, device="cuda")
    rm, rv = torch.zeros(4, device="cuda"), torch.ones(4, device="cuda")
    y, _, _ = cuda_be.batch_norm_with_stats(t, None, None, rm, rv, training=True, momentum=0.1)
    xs = t.permute(1, 0, 2, 3).reshape(4, -1).double()
    np.testing.assert_allclose(rm.cpu().numpy(), 0.1 * xs.mean(1).cpu().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv.cpu().numpy(), 0.9 + 0.1 * xs.var(1, unbiased=True).cpu().numpy(), rtol=1e-5)
    assert isinstance(y, cp.ndarray) and y.shape == (8, 4, 5, 5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_unchecked_fast_call_equals_the_checked_path(dtype, rng):
    """layernorm/rmsnorm of a contiguous x with contiguous (cols,) parameters skip the argument
    checks (backends/normalization_api._norm_fast_rows) and reuse a cached launch plan: bitwise
    the result of the checked path (here forced by a strided weight of the same values), on new
    data and on several shapes, statistics shaped x.shape[:-1]."""
    import cudakit
    be = cudakit.get_backend("cuda")
    for shape in ((3, 5, 96), (64, 96), (96,), (64, 96)):
        x = _dev(_data(rng, shape, dtype))
        w, b = _dev(_data(rng, 96, dtype)), _dev(_data(rng, 96, dtype))
        u = cp.uint16 if w.dtype.itemsize == 2 else cp.uint32
        pair = cp.zeros((96, 2), u)
        pair[:, 0] = w.view(u)
        w_strided = pair.view(w.dtype)[:, 0]        # same values, not contiguous: the checked path
        assert not w_strided.flags.c_contiguous
        fast = be.layernorm_with_stats(x, w, b, 1e-5)
        slow = be.layernorm_with_stats(x, w_strided, b, 1e-5)
        for f, s in zip(fast, slow):
            assert f.shape == s.shape and f.dtype == s.dtype
            np.testing.assert_array_equal(f.get().astype(np.float64), s.get().astype(np.float64))
        assert fast[1].shape == shape[:-1]
        fast, slow = be.rmsnorm_with_stats(x, w, 1e-6), be.rmsnorm_with_stats(x, w_strided, 1e-6, normalized_ndim=1)
        for f, s in zip(fast, slow):
            np.testing.assert_array_equal(f.get().astype(np.float64), s.get().astype(np.float64))
    with pytest.raises(ValueError, match="normalized_ndim"):
        be.layernorm(x, w, b, normalized_ndim=True)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_the_planned_fast_forward_equals_the_checked_launch(dtype, rng, monkeypatch):
    """kernels.normalization's planned launch (no Python launch wrapper) for a contiguous CuPy x
    over its last dim with None or contiguous (cols,) parameters: bitwise the checked launch's y and
    statistics for register, looped and 16-byte-unaligned rows and any number of dims; other calls
    take the checked launch. (cudakit.layernorm & co. replay either through cudakit.dispatch.)"""
    import cudakit
    from cudakit.kernels import normalization as nk
    calls = []
    real = nk._launch_function
    monkeypatch.setattr(nk, "_launch_function", lambda *a: (calls.append(a[0]), real(*a)))
    shapes = [(3, 5, 96), (96,), (64, 4096), (5, 4097)]
    if dtype in ("float32", "bfloat16"):
        shapes.append((2, 65536 + 8))
    for shape in shapes:
        cols = shape[-1]
        x = _dev(_data(rng, shape, dtype))
        w, b = _dev(_data(rng, cols, dtype)), _dev(_data(rng, cols, dtype))
        rows = (-1, cols)
        for wb in ((w, b), (None, None), (w, None)):
            calls.clear()
            y = cudakit.layernorm(x, *wb)
            y2, mean, rstd = cudakit.layernorm_with_stats(x, *wb)
            yr = cudakit.rmsnorm(x, wb[0])
            yr2, rstd_r = cudakit.rmsnorm_with_stats(x, wb[0])
            assert calls == [] and y.shape == shape and mean.shape == rstd.shape == rstd_r.shape == shape[:-1]
            want = nk.layernorm_forward(x.reshape(rows), *wb, 1e-5)
            want_r = nk.rmsnorm_forward(x.reshape(rows), wb[0], 1e-6)
            assert len(calls) == 2
            for got, ref in ((y, want[0]), (y2, want[0]), (mean, want[1]), (rstd, want[2]), (yr, want_r[0]),
                             (yr2, want_r[0]), (rstd_r, want_r[1])):
                np.testing.assert_array_equal(got.reshape(ref.shape).get().astype(np.float64),
                                              ref.get().astype(np.float64))
    # unaligned x (a view one element in): the one-element plan, as the checked launch takes it
    base = _dev(_data(rng, (64 * 96 + 1,), dtype))
    x = base[1:].reshape(64, 96)
    assert x.flags.c_contiguous and x.data.ptr % 16
    np.testing.assert_array_equal(cudakit.layernorm(x).get().astype(np.float64),
                                  nk.layernorm_forward(x, None, None, 1e-5)[0].get().astype(np.float64))
    assert any(k[1] == (64, 96) and not k[4] for k in nk._fast)
    # not this path: an int eps, a 2-D weight, normalized_ndim=2 -- the checked path decides
    calls.clear()
    x = _dev(_data(rng, (4, 6, 8), dtype))
    w2 = _dev(_data(rng, (6, 8), dtype))
    cudakit.layernorm(x, eps=1)
    cudakit.layernorm(x, w2)
    cudakit.rmsnorm(x, normalized_ndim=2)
    assert len(calls) == 6   # each signature's first call, then the trace's recording run (kernels/trace_plans.py)
    with pytest.raises(ValueError, match="eps"):
        cudakit.layernorm(x, eps=-1.0)
    with cudakit.profile() as prof:
        cudakit.rmsnorm(x)
    assert [r["name"] for r in prof.table()][0].startswith("ck_rms_fwd")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [3, 127, 768, 769, 1024, 8193, 65536])
@pytest.mark.parametrize("kind", ["ln", "rms"])
def test_backward_with_residual_grad(kind, cols, dtype, rng):
    """residual= adds a residual path's gradient to dx in the pass that writes it (the register
    kernel, vectorized where the columns and pointers allow, the looped one for 65536 columns, the
    one-element path for an unaligned residual): dx + residual rounded once; dweight/dbias within
    the reference's bounds (the _res kernels' occupancy, and so their partial sums' split, may
    differ from the plain ones': not bitwise those of the plain call)."""
    nk = _nk()
    rows = _rows_for(cols)
    x, dy = _data(rng, (rows, cols), dtype, loc=0.5), _data(rng, (rows, cols), dtype)
    w, b = _data(rng, cols, dtype, loc=1.0), _data(rng, cols, dtype)
    res = _data(rng, (rows, cols), dtype, scale=3.0)
    if kind == "ln":
        _, mean, rstd = nk.layernorm_forward(_dev(x), _dev(w), _dev(b), 1e-5)
        dxr, *wr = ref.layernorm_grad(dy, x, w, 1e-5)
        run = lambda r: nk.layernorm_backward(_dev(dy), _dev(x), _dev(w), mean, rstd, residual=r)
    else:
        _, rstd = nk.rmsnorm_forward(_dev(x), _dev(w), 1e-6)
        dxr, *wr = ref.rmsnorm_grad(dy, x, w, 1e-6)
        run = lambda r: nk.rmsnorm_backward(_dev(dy), _dev(x), _dev(w), rstd, residual=r)
    big = cp.zeros(rows * cols + 1, np_dtype(dtype))
    unaligned = big[1:].reshape(rows, cols)       # 2 (16-bit) to 8 bytes off 16-byte alignment
    unaligned[...] = _dev(res)
    scale = np.maximum(ref.grad_scale(dy, w, rstd.get()), np.abs(ref.f64(res)))
    for r in (_dev(res), unaligned):
        got = run(r)
        ref.assert_close(got[0].get(), dxr + ref.f64(res), dtype, "dx + residual", scale=scale)
        for g, want, what in zip(got[1:], wr, ("dweight", "dbias")):
            ref.assert_close(g.get(), want, dtype, what, factor=4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_api_residual_grad_planned_and_checked(cuda_be, dtype, rng):
    """cudakit.layernorm_backward / rmsnorm_backward(..., residual_grad=) through the planned calls
    (the first checked, then traced plans) on (B, T, C) arrays: equal on every call, equal to the
    plain backward's dx plus the residual within one rounding; a non-contiguous residual_grad is
    taken; a residual_grad of another shape raises ShapeError naming it."""
    import cudakit
    from cudakit import dispatch
    dispatch.clear()   # (plans of earlier tests would satisfy the check below)
    shape = (4, 33, 768)
    x, dy = _dev(_data(rng, shape, dtype, loc=0.5)), _dev(_data(rng, shape, dtype))
    w, b = _dev(_data(rng, 768, dtype, loc=1.0)), _dev(_data(rng, 768, dtype))
    res = _dev(_data(rng, shape, dtype))
    _, mean, rstd = cudakit.layernorm_with_stats(x, w, b)
    _, rstd_r = cudakit.rmsnorm_with_stats(x, w)
    dxr = ref.layernorm_grad(dy.get().reshape(-1, 768), x.get().reshape(-1, 768), w.get(), 1e-5)[0]
    dxr_r = ref.rmsnorm_grad(dy.get().reshape(-1, 768), x.get().reshape(-1, 768), w.get(), 1e-6)[0]
    outs = []
    for _ in range(3):
        ln = cudakit.layernorm_backward(dy, x, w, mean, rstd, residual_grad=res)
        rms = cudakit.rmsnorm_backward(dy, x, w, rstd_r, residual_grad=res)
        outs.append([a.get() for a in (*ln, *rms)])
    for o in outs[1:]:
        for a, c in zip(o, outs[0]):
            np.testing.assert_array_equal(a.astype(np.float64), c.astype(np.float64))
    r64 = ref.f64(res.get()).reshape(-1, 768)
    for got, want, st in ((outs[0][0], dxr, rstd), (outs[0][3], dxr_r, rstd_r)):
        scale = np.maximum(ref.grad_scale(dy.get().reshape(-1, 768), w.get(), st.get().reshape(-1)), np.abs(r64))
        ref.assert_close(got.reshape(-1, 768), want + r64, dtype, "dx + residual", scale=scale)
    planned = {k[0] for k, p in dispatch._plans.items() if p is not None}
    assert {"layernorm_backward_residual", "rmsnorm_backward_residual"} <= planned, planned
    wide = cp.zeros(shape[:-1] + (2 * 768,), res.dtype)
    wide[..., ::2] = res
    got = cudakit.layernorm_backward(dy, x, w, mean, rstd, residual_grad=wide[..., ::2])
    np.testing.assert_array_equal(got[0].get().astype(np.float64), outs[0][0].astype(np.float64))
    with pytest.raises(cudakit.ShapeError, match="residual_grad"):
        cudakit.layernorm_backward(dy, x, w, mean, rstd, residual_grad=res[:, :5])
