"""The fused multi-tensor optimizer kernels against the float64 reference (100 steps, every option
combination, odd sizes, thousands of tensors in one launch, master weights), against the CPU
path, and step for step against torch.optim when torch with CUDA is importable."""
import numpy as np
import pytest

import cudakit
from cudakit import DeviceError, DTypeError, ShapeError
from cudakit import optim
from optim_reference import (PARAM_KINDS, ROUNDINGS, adam_options, assert_close, iter_ref_adam, iter_ref_sgd,
                             np_dtype, option_id, problem, ref_adam, ref_sgd, sgd_options)

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")

SMALL = [1, 3, 1023, 4097]
BIG = (1 << 20) + 7
STEPS = 100


def _kind_id(kind):
    return f"{kind[0]}{'-master' if kind[1] else ''}"


def _dev(arrays):
    return [cp.asarray(a) for a in arrays]


def _run(cls, opts, params, grads, master):
    """Run `cls` over device copies of `params` for every gradient list; returns the optimizer."""
    dp = _dev(params)
    opt = cls(dp, master_weights=master, **opts)
    for gs in grads:
        opt.step(_dev(gs))
    return opt


def _check(opt, want, dtype, master):
    if master:
        masters = opt.state["master"]
        assert_close(masters, want, dtype, True, "master")
        for p, m in zip(opt.params, masters):  # the 16-bit parameter is its master, rounded
            np.testing.assert_array_equal(p.get().view(np.uint16), m.get().astype(p.dtype).view(np.uint16))
    else:
        assert_close(opt.params, want, dtype, False)


@pytest.mark.parametrize("kind", PARAM_KINDS, ids=_kind_id)
@pytest.mark.parametrize("opts", sgd_options(), ids=option_id)
def test_sgd_matches_reference(opts, kind, rng):
    dtype, master = kind
    params, grads = problem(rng, SMALL, STEPS, dtype)
    opt = _run(optim.SGD, opts, params, grads, master)
    _check(opt, ref_sgd(params, grads, dtype, master, **opts), dtype, master)


@pytest.mark.parametrize("kind", PARAM_KINDS, ids=_kind_id)
@pytest.mark.parametrize("opts", adam_options(), ids=option_id)
def test_adam_matches_reference(opts, kind, rng):
    dtype, master = kind
    opts = dict(opts)
    cls = getattr(optim, opts.pop("cls"))
    params, grads = problem(rng, SMALL, STEPS, dtype)
    opt = _run(cls, opts, params, grads, master)
    _check(opt, ref_adam(params, grads, dtype, master, decoupled=cls is optim.AdamW, **opts), dtype, master)


def _device_problem(rng, sizes, steps, dtype="float32"):
    """problem() made on the GPU (float32 or float64): parameters ~ N(0, 1), per-tensor gradient
    scales in [1e-3, 10], ~1% exact zeros."""
    g = cp.random.default_rng(int(rng.integers(2**63)))
    dt = cp.dtype(dtype)
    params = [g.standard_normal(n, dtype=cp.float64).astype(dt) for n in sizes]
    scales = 10.0 ** rng.uniform(-3, 1, len(sizes))
    grads = []
    for _ in range(steps):
        gs = []
        for n, s in zip(sizes, scales):
            x = g.standard_normal(n, dtype=cp.float64) * s
            x[g.random(n) < 0.01] = 0
            gs.append(x.astype(dt))
        grads.append(gs)
    return params, grads


@pytest.mark.parametrize("opts", sgd_options() + adam_options(), ids=option_id)
def test_large_odd_tensor_every_option(opts, rng):
    """1<<20 + 7 elements beside tiny ones, float32, 100 steps, reference computed on the GPU."""
    opts = dict(opts)
    cls = getattr(optim, opts.pop("cls", "SGD"))
    params, grads = _device_problem(rng, [BIG, 1, 3, 4097], STEPS)
    opt = cls([p.copy() for p in params], **opts)
    for gs in grads:
        opt.step(gs)
    if cls is optim.SGD:
        want = ref_sgd(params, grads, "float32", False, **opts)
    else:
        want = ref_adam(params, grads, "float32", False, decoupled=cls is optim.AdamW, **opts)
    assert_close(opt.params, want, "float32", False)


def test_bf16_master_weights_large(rng):
    params, grads = _device_problem(rng, [BIG, 4097, 5], 50)
    p16 = [p.astype(np.float32).get().astype(np_dtype("bfloat16")) for p in params]
    g16 = [[g.get().astype(np_dtype("bfloat16")) for g in gs] for gs in grads]
    opt = optim.AdamW(_dev(p16), lr=1e-3, weight_decay=0.05, master_weights=True)
    assert all(m.dtype == np.float32 for m in opt.state["master"])
    for gs in g16:
        opt.step(_dev(gs))
    want = ref_adam(p16, g16, "bfloat16", True, 1e-3, (0.9, 0.999), 1e-8, weight_decay=0.05, decoupled=True)
    _check(opt, want, "bfloat16", True)


def test_thousands_of_tensors_one_launch(rng):
    sizes = [int(s) for s in rng.integers(0, 300, 3000)] + [1, 2, 5, 4100]
    params, grads = problem(rng, sizes, 5, "float32")
    opt = optim.Adam(_dev(params), lr=0.01, weight_decay=0.01, amsgrad=True)
    dgrads = [_dev(gs) for gs in grads]
    opt.step(dgrads[0])  # compiles and builds the tables
    with cudakit.profile() as prof:
        for gs in dgrads[1:]:
            opt.step(gs)
    names = [r["name"] for r in prof.table()]
    assert names == ["ck_adam_mt<float, float, false, true>"], names
    assert prof.table()[0]["calls"] == 4
    assert_close(opt.params, ref_adam(params, grads, "float32", False, 0.01, (0.9, 0.999), 1e-8,
                                      weight_decay=0.01, amsgrad=True), "float32", False)


def test_own_gradient_buffers_and_reused_lists(rng):
    """step() over opt.grads, and a list of the same arrays step after step (filled in place, one
    replaced, one freed and reallocated), all give the reference's result."""
    params, grads = problem(rng, SMALL, 20, "float32")
    want = ref_adam(params, grads, "float32", False, 0.01, (0.9, 0.999), 1e-8, weight_decay=0.01)
    own = optim.Adam(_dev(params), lr=0.01, weight_decay=0.01)
    assert own.grads is own.grads and all(bool((g == 0).all()) for g in own.grads)
    same = optim.Adam(_dev(params), lr=0.01, weight_decay=0.01)
    bufs = [cp.zeros(n, cp.float32) for n in SMALL]
    for t, gs in enumerate(grads):
        for g, h in zip(own.grads, gs):
            g.set(h)
        own.step()
        if t == 7:
            bufs[1] = cp.empty(SMALL[1], cp.float32)   # replaced: a new object in the list
        if t == 12:
            del bufs[2]                                 # freed, a new array takes its place
            bufs.insert(2, cp.empty(SMALL[2], cp.float32))
        for g, h in zip(bufs, gs):
            g.set(h)
        same.step(bufs)
    assert_close(own.params, want, "float32", False)
    assert_close(same.params, want, "float32", False)


def test_mixed_dtypes_misaligned_and_empty(rng):
    """float32 and bfloat16 parameters in one list (two launches), views whose addresses are not
    16-byte aligned (element-wise path), an empty tensor."""
    base_host = rng.standard_normal(4000).astype(np.float32)
    base = cp.asarray(base_host)
    p32 = [base[1:1001], base[1002:1005], cp.empty(0, cp.float32)]          # misaligned views
    p16 = [cp.asarray(rng.standard_normal(777).astype(np_dtype("bfloat16")))]
    params = p32 + p16
    host0 = [p.get() for p in params]
    opt = optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=0.01, master_weights=True)
    grads_host = []
    for _ in range(STEPS):
        gs = [rng.standard_normal(p.shape).astype(np.float32).astype(p.dtype) for p in host0]
        grads_host.append(gs)
        opt.step(_dev(gs))
    want = ref_sgd(host0[:3], [g[:3] for g in grads_host], "float32", False, 0.05, 0.9, weight_decay=0.01)
    assert_close(params[:3], want, "float32", False)
    want16 = ref_sgd(host0[3:], [g[3:] for g in grads_host], "bfloat16", True, 0.05, 0.9, weight_decay=0.01)
    assert_close(opt.state["master"][3:], want16, "bfloat16", True, "master")
    untouched = np.r_[0, 1001, 1005:4000]  # elements outside the views keep their values
    np.testing.assert_array_equal(base.get()[untouched], base_host[untouched])


def test_gpu_agrees_with_cpu_path(rng):
    params, grads = problem(rng, SMALL, 30, "float32")
    host = [p.copy() for p in params]
    cpu = optim.Adam(host, lr=0.01, amsgrad=True, weight_decay=0.1)
    gpu = optim.Adam(_dev(params), lr=0.01, amsgrad=True, weight_decay=0.1)
    for gs in grads:
        cpu.step(gs)
        gpu.step(_dev(gs))
    want = ref_adam(params, grads, "float32", False, 0.01, (0.9, 0.999), 1e-8, weight_decay=0.1, amsgrad=True)
    assert_close(gpu.params, want, "float32", False)
    for a, b, w, bud in zip(gpu.params, host, want, want.budget):
        assert np.all(np.abs(a.get() - b) <= 2 * ROUNDINGS * np.finfo(np.float32).eps * bud)


def test_functional_api_reuses_its_table(rng):
    params, grads = problem(rng, SMALL, 10, "float32")
    dp = _dev(params)
    m = [cp.zeros(p.shape, cp.float32) for p in dp]
    v = [cp.zeros(p.shape, cp.float32) for p in dp]
    st = optim.OptimizerState(lr=0.01)
    optim._TABLE_CACHE.clear()
    for gs in grads:
        optim.adam_update(dp, _dev(gs), m, v, st)
    assert len(optim._TABLE_CACHE) == 1 and st.step == 10
    assert_close(dp, ref_adam(params, grads, "float32", False, 0.01, (0.9, 0.999), 1e-8), "float32", False)
    buf = cp.zeros(BIG, cp.float32)
    p = cp.ones(BIG, cp.float32)
    sst = optim.OptimizerState(lr=0.5, momentum=0.5)
    optim.sgd_update(p, cp.ones(BIG, cp.float32), buf, sst)   # first step: buf = g
    optim.sgd_update(p, cp.ones(BIG, cp.float32), buf, sst)   # buf = 0.5 + 1
    assert bool((buf == 1.5).all()) and bool((p == 1 - 0.5 - 0.75).all())


def test_noncontiguous_grads_and_torch_tensors(rng):
    params, grads = problem(rng, [4097], 5, "float32")
    a, b = _dev(params), _dev(params)
    oa, ob = optim.SGD(a, lr=0.1, momentum=0.9), optim.SGD(b, lr=0.1, momentum=0.9)
    for gs in grads:
        wide = cp.zeros(2 * 4097, cp.float32)
        wide[::2] = cp.asarray(gs[0])
        oa.step([wide[::2]])
        ob.step(_dev(gs))
    np.testing.assert_array_equal(a[0].get(), b[0].get())
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    t = torch.zeros(10, device="cuda")
    optim.SGD([t], lr=0.5).step([torch.ones(10, device="cuda")])
    assert torch.all(t == -0.5)


def test_bad_input_gpu():
    p = [cp.zeros(3, cp.float32), cp.zeros((2, 2), cp.float32)]
    opt = optim.Adam(p)
    with pytest.raises(ShapeError, match="expected 2 gradients"):
        opt.step([cp.zeros(3, cp.float32)])
    with pytest.raises(ShapeError, match=r"grads\[1\]"):
        opt.step([cp.zeros(3, cp.float32), cp.zeros(4, cp.float32)])
    with pytest.raises(DTypeError, match=r"grads\[0\].*float16"):
        opt.step([cp.zeros(3, cp.float16), cp.zeros((2, 2), cp.float32)])
    with pytest.raises(DeviceError, match="host arrays but the parameters are CUDA"):
        opt.step([np.zeros(3, np.float32), np.zeros((2, 2), np.float32)])
    with pytest.raises(DeviceError, match=r"params\[1\]"):
        optim.SGD([cp.zeros(3, cp.float32), np.zeros(3, np.float32)], lr=0.1)
    with pytest.raises(DTypeError, match="int32"):
        optim.SGD([cp.zeros(3, cp.int32)], lr=0.1)
    assert opt.hyper.step == 0 and not bool(p[0].any())


def test_nan_inf_propagate_gpu():
    p = cp.zeros(6, cp.float32)
    opt = optim.Adam([p], lr=0.1)
    opt.step([cp.asarray([np.nan, 1, -1, np.inf, 0, 2], cp.float32)])
    h = p.get()
    assert np.isnan(h[0]) and np.isnan(h[3])
    np.testing.assert_allclose(h[[1, 2, 4, 5]], [-0.1, 0.1, 0.0, -0.1], rtol=1e-6)


def test_state_dict_moves_between_backends(rng):
    params, grads = problem(rng, SMALL, 20, "float32")
    gpu = optim.Adam(_dev(params), lr=0.01, amsgrad=True)
    for gs in grads[:10]:
        gpu.step(_dev(gs))
    sd = gpu.state_dict()
    host = [p.get() for p in gpu.params]
    cpu = optim.Adam(host, lr=0.01, amsgrad=True)
    cpu.load_state_dict(sd)
    for gs in grads[10:]:
        gpu.step(_dev(gs))
        cpu.step(gs)
    want = ref_adam(params, grads, "float32", False, 0.01, (0.9, 0.999), 1e-8, amsgrad=True)
    assert_close(gpu.params, want, "float32", False)
    assert_close(host, want, "float32", False)


# ---- step for step against torch.optim -------------------------------------------------------------

def _torch():
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    return torch


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "foreach"])
@pytest.mark.parametrize("opts", sgd_options() + adam_options(), ids=option_id)
def test_matches_torch_step_for_step(opts, fused, rng):
    """After every one of 100 steps, cudakit's float32 parameters and torch.optim's are both within
    float32 rounding of the float64 reference's parameters after that step (and so of each other)."""
    torch = _torch()
    opts = dict(opts)
    name = opts.pop("cls", "SGD")
    params, grads = _device_problem(rng, SMALL + [BIG], STEPS)
    ours = getattr(optim, name)([p.copy() for p in params], **opts)
    tp = [torch.from_dlpack(p.copy()) for p in params]
    kw = {"fused": True} if fused else {"foreach": True}
    theirs = getattr(torch.optim, name)(tp, **opts, **kw)
    if name == "SGD":
        ref = iter_ref_sgd(params, grads, "float32", False, **opts)
    else:
        ref = iter_ref_adam(params, grads, "float32", False, decoupled=name == "AdamW", **opts)
    eps = float(np.finfo(np.float32).eps)
    slack = 0.0
    for t, (gs, want) in enumerate(zip(grads, ref), start=1):
        ours.step(gs)
        for x, g in zip(tp, gs):
            x.grad = torch.from_dlpack(g)
        theirs.step()
        if name != "SGD":
            # torch forms 1 - beta2^t in float32 (foreach: from float32 step counts), which cancels:
            # its Adam step carries a relative error of up to ~eps / (1 - beta2^t) more than ours
            slack += 4 * opts["lr"] * eps / (1 - opts["betas"][1] ** t)
        for i, (a, x, w, budget) in enumerate(zip(ours.params, tp, want, want.budget)):
            b = cp.from_dlpack(x.detach())
            bound = ROUNDINGS * eps * budget
            off_ours = ~(cp.abs(a - w) <= bound)
            off_torch = ~(cp.abs(b - w) <= bound + slack)
            if bool(off_ours.any()) or bool(off_torch.any()):
                j = int(cp.argmax(off_ours | off_torch))
                pytest.fail(f"step {t}, tensor {i} (n={a.size}): {int(off_ours.sum())} of cudakit's and "
                            f"{int(off_torch.sum())} of torch's elements off the reference, e.g. [{j}]: cudakit "
                            f"{float(a[j])!r}, torch {float(b[j])!r}, float64 {float(w[j])!r}, bound "
                            f"{float(bound[j]):.3g} (+{slack:.3g} for torch), start {float(params[i][j])!r}, "
                            f"grad {float(gs[i][j])!r}")


@pytest.mark.parametrize("dtype,master", [("float32", False), ("bfloat16", True), ("float16", False)])
@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_channels_last_params(kind, dtype, master, rng):
    """A channels-last parameter (as a torch channels_last model's conv weight) and a transposed one,
    updated by the multi-tensor kernels over their memory: bitwise their C-contiguous copies' update
    from gradients in either layout (a channels-last gradient read in place, a C one copied into
    the layout), the states and master weights in the parameter's layout; a torch channels_last
    weight taken zero-copy."""
    w = cp.asarray(rng.standard_normal((16, 8, 3, 3)).astype(np.float32)).astype(np_dtype(dtype))
    m = cp.asarray(rng.standard_normal((24, 40)).astype(np.float32)).astype(np_dtype(dtype))
    cl = cp.ascontiguousarray(w.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    tr = cp.ascontiguousarray(m.T).T
    make = (lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, master_weights=master)) \
        if kind == "sgd" else (lambda ps: optim.AdamW(ps, lr=0.01, master_weights=master))
    ref, got = [w.copy(), m.copy()], [cl, tr]
    o_ref, o_got = make(ref), make(got)
    for step in range(4):
        gw = cp.asarray(rng.standard_normal(w.shape).astype(np.float32)).astype(w.dtype)
        gm = cp.asarray(rng.standard_normal(m.shape).astype(np.float32)).astype(m.dtype)
        o_ref.step([gw, gm])
        gw_cl = cp.ascontiguousarray(gw.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        o_got.step([gw_cl if step % 2 else gw, gm if step % 2 else cp.ascontiguousarray(gm.T).T])
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g.get().astype(np.float64), r.get().astype(np.float64))
    # a size-1 axis, whose stride means nothing: a gradient of the parameter's memory order but
    # another stride there is read in place (the fast path: the table points at it), not copied
    p1 = cp.zeros((4, 1, 5, 3), cp.float32).transpose(0, 3, 1, 2)        # strides (60, 4, 60, 12)
    g1 = cp.lib.stride_tricks.as_strided(cp.ones(60, cp.float32), p1.shape, (60, 4, 4, 12))
    o1 = optim.SGD([p1], lr=0.5)
    o1.step([g1])
    o1.step([g1])
    assert o1._table_grads == "last" and bool((p1 == -1.0).all())
    for s4, s2 in list(o_got._state.values()) + ([o_got._master] if master else []):
        assert s4.strides[1] == s4.itemsize and s2.strides[0] == s2.itemsize   # the parameters' fastest axes
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    t = torch.zeros(4, 3, 3, 3, device="cuda").to(memory_format=torch.channels_last)
    optim.SGD([t], lr=0.5).step([torch.ones(4, 3, 3, 3, device="cuda").to(memory_format=torch.channels_last)])
    assert torch.all(t == -0.5) and t.is_contiguous(memory_format=torch.channels_last)
