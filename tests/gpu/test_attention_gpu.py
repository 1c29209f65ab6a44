"""attention through the Triton kernels (kernels/attention.py) against float64 references."""
import math

import attention_checks as ac
import numpy as np
import pytest

import cudakit

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")
pytest.importorskip("triton")

GPU_DTYPES = ["float16", "bfloat16", "float32"]

from cupy_io import to_dev as _dev  # after the importorskip
from cupy_io import to_host as _host


@pytest.mark.parametrize("dtype", GPU_DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lead,lq,lk,d", ac.SHAPES + [((1, 2), 257, 300, 128), ((4,), 130, 130, 80),
                                                   ((2, 2), 1000, 1000, 64)])
def test_attention(lead, lq, lk, d, dtype, causal, rng):
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, dtype, causal)


@pytest.mark.parametrize("block_size", [16, 32, 64, 128])
def test_flash_attention_block_sizes(block_size, rng):
    ac.check_attention(_dev, _host, rng, (2, 2), 200, 190, 64, "bfloat16", False, block_size=block_size)


def test_seed_example(rng):
    """The seed's call: float32 (4, 8, 512, 64), scale = 1 / cp.sqrt(head_dim) (a 0-d array)."""
    q, k, v = (cp.asarray(ac.data(rng, (4, 8, 512, 64), "float32")) for _ in range(3))
    out = cudakit.get_backend("cuda").flash_attention(q, k, v, 1.0 / cp.sqrt(64), block_size=64)
    want = ac.reference(cp.asnumpy(q), cp.asnumpy(k), cp.asnumpy(v), 0.125, False)[0]
    np.testing.assert_allclose(cp.asnumpy(out), want, rtol=1e-4, atol=1e-4)


def test_one_element_scale_and_empty_lengths(rng):
    """A scale given as a one-element CuPy array of ndim 1 or 2 is that number; key_lengths=[] is
    the (0,) lengths of a batch of 0 (17e4f53: the CUDA backend takes the same checks)."""
    q = cp.asarray(ac.data(rng, (2, 3, 40, 32), "float32"))
    want = cp.asnumpy(cudakit.attention(q, q, q, scale=0.3))
    for scale in (cp.array([0.3]), cp.array([[0.3]]), cp.array(0.3)):
        np.testing.assert_array_equal(cp.asnumpy(cudakit.attention(q, q, q, scale=scale)), want)
    z = cp.zeros((0, 4, 5, 8), cp.float32)
    assert cudakit.attention(z, z, z, key_lengths=[]).shape == (0, 4, 5, 8)


@pytest.mark.parametrize("scale", [-0.3, 0.0, 0.05])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_any_scale(scale, causal, rng):
    """A positive scale takes the forward's folded-scale path (the row max on the raw scores), a
    zero or negative one the scaled-scores path: both match float64."""
    ac.check_attention(_dev, _host, rng, (2,), 130, 150, 64, "bfloat16", causal, scale=scale)


def test_same_as_cpu_and_errors(rng):
    q = ac.data(rng, (2, 3, 40, 32), "bfloat16")
    got = cp.asnumpy(cudakit.attention(cp.asarray(q), cp.asarray(q), cp.asarray(q), causal=True))
    want = cudakit.attention(q, q, q, causal=True)
    np.testing.assert_allclose(ac.f64(got), ac.f64(want), atol=2e-2, rtol=2e-2)
    assert cudakit.attention(*(cp.zeros((1, 4, 256), cp.float32),) * 3).shape == (1, 4, 256)   # the wide tiles
    with pytest.raises(cudakit.ShapeError, match="head_dim must be <= 256"):
        cudakit.attention(*(cp.zeros((1, 4, 264), cp.float16),) * 3)
    with pytest.raises(cudakit.DeviceError):
        cudakit.get_backend("cuda").attention(q, cp.asarray(q), cp.asarray(q))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lead,lq,lk,d", [((2, 3), 17, 29, 8), ((1,), 300, 257, 160), ((2,), 0, 4, 8)])
def test_attention_float64(lead, lq, lk, d, causal, rng, monkeypatch):
    """float64 on the GPU by CuPy matrix products (backends/matmul_attention.py; no head_dim limit),
    in chunks of query rows too (a small score budget)."""
    from cudakit.backends import matmul_attention
    monkeypatch.setattr(matmul_attention, "_SCORE_BYTES", 64 * lk * 8)
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, "float64", causal)
    q = cp.asarray(ac.data(rng, (2, 5, 8), "float64"))
    assert isinstance(cudakit.attention(q, q, q), cp.ndarray)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("lead,lq,lk,d,causal", [((2, 2), 130, 97, 256, True), ((1, 3), 70, 200, 160, False),
                                                 ((1, 1), 1, 300, 200, True)])
def test_attention_wide_head_dims_on_the_triton_kernels(lead, lq, lk, d, causal, dtype, rng, monkeypatch):
    """Head dims 129..256 on the Triton kernels (their narrower tiles), cuDNN kept out: forward and
    backward against float64, every float dtype."""
    from cudakit.kernels import attention
    monkeypatch.setattr(attention, "_cudnn_candidate", lambda *a: False)
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, dtype, causal)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_attention_non_contiguous(dtype, rng):
    ac.check_attention(_dev, _host, rng, (2,), 90, 110, 32, dtype, True, strided=True)


@pytest.mark.parametrize("dtype", GPU_DTYPES)
def test_attention_nan(dtype):
    ac.check_nan(_dev, _host, dtype)


@pytest.mark.parametrize("prec", ["ieee", "tf32x3"])
@pytest.mark.parametrize("lq,lk,d,causal", [(200, 190, 64, True), (130, 257, 128, False), (64, 64, 40, True),
                                           (150, 300, 72, True), (260, 200, 96, False)])
def test_attention_float32_precisions(lq, lk, d, causal, prec, float32_precision, rng):
    """ieee and tf32x3 (with the tiles made for each) within float32's bounds, forward and backward."""
    float32_precision(prec)
    ac.check_attention(_dev, _host, rng, (2,), lq, lk, d, "float32", causal)


@pytest.fixture
def only_path(monkeypatch):
    """only_path(name): kernels/paths.run taking candidate `name` alone where offered (no timing, no
    choice kept; elsewhere the first candidate);
    returns a list that gets the op of each call that took it. The dispatch plans are cleared before and after: a plan built earlier in the
    process for the same signature would replay its path without asking paths.run."""
    from cudakit import dispatch
    from cudakit.kernels import paths
    dispatch.clear()

    def only(name) -> list:
        took = []

        def run(op, key, candidates, timer=None):
            if name not in (n for n, _ in candidates):   # another choice (the forward's key parts): the first
                return next(out for _, fn in candidates if (out := fn()) is not None)
            took.append(op)
            return next(fn() for n, fn in candidates if n == name)
        monkeypatch.setattr(paths, "run", run)
        return took
    yield only
    dispatch.clear()


@pytest.mark.parametrize("lead,lq,lk,d,causal,window", [
    ((2, 2), 17, 17, 40, False, None), ((1, 3), 1000, 1000, 80, True, None), ((2,), 1, 4096, 96, False, None),
    ((1,), 4097, 300, 128, True, None), ((2,), 300, 4097, 64, False, (100, 0)), ((1, 2), 150, 60, 128, True, None)])
def test_attention_float32_materialized_backward(lead, lq, lk, d, causal, window, rng, monkeypatch, only_path,
                                                 float32_precision):
    """The materialised float32 backward (kernels/attention_materialized.py), taken alone, against
    float64: ragged lengths, head dims below their block, Lq = 1, rows that see no key (causal with
    Lq > Lk), a window; then non-contiguous views with heads in chunks of one (a small budget)."""
    from cudakit.kernels import attention_materialized as am
    float32_precision("tf32x3")
    took = only_path("materialized")
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, "float32", causal, window=window)
    assert "attention_backward" in took
    monkeypatch.setattr(am, "WORKSPACE_BYTES", 8 * am.padded(lq) * am.padded(lk))
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, "float32", causal, window=window, strided=True)


@pytest.mark.parametrize("b,h,hkv,lq,lk,d,causal", [(2, 8, 2, 100, 300, 128, True), (1, 6, 3, 257, 130, 40, False),
                                                     (2, 4, 1, 1, 600, 80, False)])
def test_attention_float32_materialized_backward_grouped(b, h, hkv, lq, lk, d, causal, rng, only_path,
                                                         float32_precision):
    """The materialised float32 backward with grouped-query k, v (read in place, dk, dv summed over
    each group by its long products), taken alone, against float64."""
    float32_precision("tf32x3")
    took = only_path("materialized")
    ac.check_attention_gqa(_dev, _host, rng, b, h, hkv, lq, lk, d, "float32", causal)
    assert "attention_backward" in took


@pytest.mark.parametrize("lead,lq,lk,d,causal,window,lens", [
    ((3, 2), 70, 300, 64, False, None, [300, 0, 129]), ((2,), 200, 150, 128, True, None, [150, 1]),
    ((2, 2), 90, 260, 96, True, (40, 5), [17, 260])])
def test_attention_float32_materialized_backward_key_lengths(lead, lq, lk, d, causal, window, lens, rng, only_path,
                                                             float32_precision):
    """The materialised float32 backward with key lengths (0: rows that see nothing; with causal
    and a window), taken alone, against float64."""
    float32_precision("tf32x3")
    took = only_path("materialized")
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, "float32", causal, window=window, lens=lens)
    assert "attention_backward" in took


@pytest.mark.parametrize("lead,lq,lk,d,causal,bias", [
    ((2, 3), 70, 300, 64, False, (2, 3, 70, 300)), ((2, 2), 200, 150, 128, True, (1, 2, 200, 150)),
    ((2, 2), 90, 260, 96, False, (2, 1, 1, 260)), ((3,), 1, 4096, 80, False, (1, 1, 4096))])
def test_attention_float32_materialized_backward_bias(lead, lq, lk, d, causal, bias, rng, only_path,
                                                      float32_precision):
    """The materialised float32 backward with an attn_bias (its row 1 -inf where it has rows: a
    row that sees nothing) and the bias's gradient, stored or summed over broadcast dims by
    atomics, taken alone, against float64."""
    float32_precision("tf32x3")
    took = only_path("materialized")
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, "float32", causal, bias=bias)
    assert "attention_backward" in took


@pytest.mark.parametrize("bias_shape", [(1, 4, 300, 200), (2, 1, 1, 200), (1, 1, 300, 1)])
def test_attention_float32_materialized_backward_bias_deterministic(bias_shape, rng, only_path, float32_precision):
    """deterministic=True with a bias that broadcasts: the materialised backward sums its gradient
    from the workspace (no atomics): bitwise the same on every call, and as the default call's."""
    float32_precision("tf32x3")
    took = only_path("materialized")
    q, g = (cp.asarray(ac.data(rng, (2, 4, 300, 64), "float32")) for _ in range(2))
    k, v = (cp.asarray(ac.data(rng, (2, 4, 200, 64), "float32")) for _ in range(2))
    b = cp.asarray(ac.data(rng, bias_shape, "float32"))
    out, lse = cudakit.attention_with_lse(q, k, v, causal=True, attn_bias=b)
    first = [cp.asnumpy(t) for t in cudakit.attention_backward(g, q, k, v, out, lse, causal=True, attn_bias=b,
                                                               deterministic=True)]
    for _ in range(2):
        again = cudakit.attention_backward(g, q, k, v, out, lse, causal=True, attn_bias=b, deterministic=True)
        for a, want in zip(again, first):
            np.testing.assert_array_equal(cp.asnumpy(a), want)
    loose = cudakit.attention_backward(g, q, k, v, out, lse, causal=True, attn_bias=b)
    for a, want in zip(loose, first):
        np.testing.assert_allclose(cp.asnumpy(a), want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())))
    assert "attention_backward" in took


@pytest.mark.parametrize("lead,lq,lk,d,causal,p,seed", [((2, 3), 130, 257, 64, True, 0.2, 7),
                                                         ((1, 2), 300, 200, 128, False, 0.5, 2**40 + 3)])
def test_attention_float32_materialized_backward_dropout(lead, lq, lk, d, causal, p, seed, rng, only_path,
                                                         float32_precision):
    """The materialised float32 backward with dropout (the mask regenerated from cudakit.dropout's
    stream), taken alone, against float64 under that mask."""
    float32_precision("tf32x3")
    took = only_path("materialized")
    ac.check_dropout(_dev, _host, rng, lead, lq, lk, d, "float32", causal, p, seed)
    assert "attention_backward" in took


@pytest.fixture
def f16_path(monkeypatch):
    """f16_path(parts=False, one_stage=False): kernels/paths.run taking the float32 forward on
    float16 parts (kernels/attention.py _f16_candidates; in key parts with parts=True, on the
    one-stage small-grid tiles with one_stage=True) alone where offered, the first accepting
    candidate elsewhere (no timing, no plan); returns the names taken. Offered whatever
    CUDAKIT_ATTENTION_F16_PARTS says (kernels/attention.py F16_PARTS set True)."""
    from cudakit import dispatch
    from cudakit.kernels import attention as at
    from cudakit.kernels import paths
    monkeypatch.setattr(at, "F16_PARTS", True)
    dispatch.clear()

    def take(parts: bool = False, one_stage: bool = False) -> list:
        took = []

        def run(op, key, candidates, timer=None):
            names = [n for n, _ in candidates if n.startswith("f16-parts") and ("keys-in" in n) == parts
                     and (not one_stage or n.endswith("-one-stage"))]
            if not names:
                return next(out for _, fn in candidates if (out := fn()) is not None)
            took.append(names[0])
            return dict(candidates)[names[0]]()
        monkeypatch.setattr(paths, "run", run)
        return took
    yield take
    dispatch.clear()


F16_FORWARD_CASES = [
    ((2, 2), 17, 17, 40, False, None, None, None), ((1, 3), 1000, 1000, 80, True, None, None, None),
    ((2,), 1, 4096, 96, False, None, None, None), ((1,), 4097, 300, 128, True, None, None, None),
    ((2,), 300, 4097, 64, False, (100, 0), None, None), ((1, 2), 150, 60, 128, True, None, None, None),
    ((3, 2), 70, 300, 64, False, None, [300, 0, 129], None), ((2, 2), 90, 260, 96, True, (40, 5), [17, 260], None),
    ((2, 3), 70, 300, 64, False, None, None, (2, 3, 70, 300)), ((2, 2), 90, 260, 100, False, None, None, (2, 1, 1, 260)),
    ((2, 2), 200, 150, 128, True, None, None, (1, 2, 200, 150)),
    ((2, 2), 256, 512, 64, False, None, None, None), ((1, 2), 128, 256, 128, False, None, None, (1, 2, 128, 256)),
    ((2, 1), 70, 96, 40, False, None, None, None)]


@pytest.mark.parametrize("lead,lq,lk,d,causal,window,lens,bias", F16_FORWARD_CASES)
def test_attention_float32_f16_parts_forward(lead, lq, lk, d, causal, window, lens, bias, rng, f16_path,
                                             float32_precision):
    """The float32 forward on float16 parts (_attention_f16p_triton.py), taken alone, against float64
    within float32's bounds: ragged lengths, head dims below their block, Lq = 1 against 4096 keys,
    rows that see no key (causal with Lq > Lk, key lengths of 0), windows, a bias with a row of -inf,
    and whole tiles without masks (the kernel's EVEN form)."""
    float32_precision("tf32x3")
    took = f16_path()
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, "float32", causal, window=window, lens=lens, bias=bias)
    assert took


@pytest.mark.parametrize("lead,lq,lk,d,causal", [((1, 1), 64, 2048, 128, False), ((1, 2), 100, 1500, 80, True),
                                                 ((1, 1), 1, 4096, 64, False)])
def test_attention_float32_f16_parts_forward_in_key_parts(lead, lq, lk, d, causal, rng, f16_path, float32_precision):
    """The float16-parts forward with the keys in parts (merged by attn_fwd_combine) on grids the
    key-parts model splits, against float64."""
    float32_precision("tf32x3")
    took = f16_path(parts=True)
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, "float32", causal)
    assert took and "keys-in" in took[0]


@pytest.mark.parametrize("lead,lq,lk,d,causal,parts", [((1, 2), 100, 700, 80, True, True), ((2, 3), 130, 260, 128, False, False),
                                                       ((1, 4), 256, 256, 96, False, True)])
def test_attention_float32_f16_parts_forward_one_stage(lead, lq, lk, d, causal, parts, rng, f16_path,
                                                       float32_precision):
    """The float16-parts forward on the small-grid tiles without the loop's second stage
    (_F16_FILL_TILES), in one part and in the part count that fills two programs an SM."""
    float32_precision("tf32x3")
    took = f16_path(parts=parts, one_stage=True)
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, "float32", causal)
    assert took and took[0].endswith("-one-stage") and ("keys-in" in took[0]) == parts


@pytest.mark.parametrize("parts", [False, True])
def test_attention_float32_pdl_launches_give_the_same_bits(parts, f16_path, float32_precision, monkeypatch):
    """Programmatic dependent launch (each attention kernel waits for the one before it first
    thing) changes when a kernel starts, not what it computes: the float16-parts forward (K's and
    V's split, the forward, with parts the combine) and the backward return the same bits with it
    and without, and the kernels launched with it were compiled and registered for it."""
    from cudakit import dispatch
    from cudakit.kernels import attention as at
    from cudakit.runtime import triton as rt
    if not rt.pdl_supported():
        pytest.skip("no programmatic dependent launch here (compute capability below 9.0 or no cuLaunchKernelEx)")
    float32_precision("tf32x3")
    took = f16_path(parts=parts)
    rng = np.random.default_rng(5)
    q, k, v, g = (cp.asarray(rng.standard_normal((1, 16, 256, 80), dtype=np.float32)) for _ in range(4))
    res = {}
    for flag in (False, True):
        monkeypatch.setattr(at, "PDL", flag)
        dispatch.clear()   # (no plan replays the other flag's launches: each call reads at.PDL)
        out, lse = cudakit.attention_with_lse(q, k, v, causal=True)
        grads = cudakit.attention_backward(g, q, k, v, out, lse, causal=True)
        res[flag] = [cp.asnumpy(x) for x in (out, lse, *grads)]
    assert took and ("keys-in" in took[0]) == parts
    for a, b in zip(res[False], res[True]):
        np.testing.assert_array_equal(a, b)
    compiled = []   # (PDL asked, registered) of each compiled kernel (a kernel's specialisations share its cache)
    for kern in at._kernels.values():
        if "PDL" in kern._const_names:
            i = kern._const_names.index("PDL")
            compiled += [(ckey[2][i], c.pdl) for ckey, c in kern._cache.items()]
    assert (False, False) in compiled and (True, True) in compiled
    assert all(pdl == (flag is not False) for flag, pdl in compiled)   # (None: as pdl_supported, here True)


@pytest.mark.parametrize("b,h,hkv,lq,lk,d,causal", [(2, 8, 2, 100, 300, 128, True), (2, 4, 1, 1, 600, 80, False)])
def test_attention_float32_f16_parts_forward_grouped(b, h, hkv, lq, lk, d, causal, rng, f16_path, float32_precision):
    """The float16-parts forward with grouped-query k, v (each k, v head split once, for its group
    of q heads), taken alone."""
    float32_precision("tf32x3")
    took = f16_path()
    ac.check_attention_gqa(_dev, _host, rng, b, h, hkv, lq, lk, d, "float32", causal)
    assert took


def test_attention_float32_f16_parts_forward_dropout(rng, f16_path, float32_precision):
    """The float16-parts forward with dropout: cudakit.dropout's stream, as the other kernels."""
    float32_precision("tf32x3")
    took = f16_path()
    ac.check_dropout(_dev, _host, rng, (2, 3), 130, 257, 64, "float32", True, 0.2, 7)
    assert took


@pytest.mark.parametrize("spread", [3, 6])
def test_attention_float32_f16_parts_forward_magnitudes(spread, rng, f16_path, float32_precision):
    """Rows of q and k spanning 10^-spread .. 1 and of v 10^-spread .. 10^spread (each row its own
    power-of-two scale), an all-zero key: within float32's bound of the output's largest magnitude
    of float64 (the other tests' 2e-5; in Triton's interpreter the kernel's error was 0.5-0.8 of
    2^-20 of it), lse within float32's bound."""
    float32_precision("tf32x3")
    took = f16_path()
    b, h, lq, lk, d = 2, 2, 150, 300, 128
    q, k, v = (ac.data(rng, (b, h, n, d), "float32") for n in (lq, lk, lk))
    for x, top in ((q, 0), (k, 0), (v, spread)):
        x *= np.float32(10.0) ** rng.integers(-spread, top + 1, x.shape[:-1] + (1,))
    k[:, :, 7] = 0.0
    scale = 1 / math.sqrt(d)
    out, lse = cudakit.attention_with_lse(cp.asarray(q), cp.asarray(k), cp.asarray(v), scale)
    out_r, lse_r, _ = ac.reference(q, k, v, scale, False)
    assert took
    got = cp.asnumpy(out).astype(np.float64)
    assert np.abs(got - out_r).max() <= 2e-5 * np.abs(out_r).max(), np.abs(got - out_r).max()
    np.testing.assert_allclose(cp.asnumpy(lse), lse_r, rtol=2e-5, atol=2e-5 * max(1.0, np.abs(lse_r).max()))


def test_f16_parts_forward_records_bad_device_key_lengths(rng, f16_path, float32_precision):
    """A GPU key_lengths past Lk reaches cudakit.check() as an ArgumentError from the float16-parts
    forward too."""
    float32_precision("tf32x3")
    took = f16_path()
    q = cp.asarray(ac.data(rng, (3, 2, 40, 64), "float32"))
    cudakit.attention(q, q, q, key_lengths=cp.asarray([40, 41, 3]))
    assert took
    with pytest.raises(cudakit.ArgumentError, match=r"key_lengths\[1\] = 41 is outside \[0, Lk = 40\]"):
        cudakit.check()


@pytest.mark.parametrize("options", [{"FUSED_PREP": True}, {"FUSED_PREP": False}, {"L2_ORDER": True},
                                     {"L2_ORDER": False},
                                     {"UNMASKED_LONG": False},
                                     {"LONG_TILES": {"BLOCK_M": 128, "BLOCK_K": 32, "num_warps": 8, "num_stages": 3}}])
@pytest.mark.parametrize("lead,lq,lk,d,causal,window", [((1, 3), 1000, 1000, 80, True, None),
                                                        ((2,), 300, 1100, 128, False, (100, 0))])
def test_attention_float32_materialized_options(lead, lq, lk, d, causal, window, options, rng, monkeypatch,
                                                only_path, float32_precision):
    """The materialised backward's options against float64: the prep pass folded into the score
    kernel at every head dim or at none (FUSED_PREP), dQ's heads in reverse order or not (L2_ORDER), the
    long products' masked reads (asked for, or long-product rows not aligned to the score tiles)."""
    from cudakit.kernels import attention_materialized as am
    float32_precision("tf32x3")
    took = only_path("materialized")
    for name, value in options.items():
        monkeypatch.setattr(am, name, value)
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, "float32", causal, window=window)
    assert "attention_backward" in took


def test_attention_float32_backward_plan(rng, float32_precision):
    """The float32 backward's replayed plan (kernels/path_plans.py) on (B, H, L, D) arrays takes the
    path backward() chose (materialised or flash; both deterministic): the same gradients each call."""
    float32_precision("tf32x3")
    q, k, v, g = (cp.asarray(ac.data(rng, (2, 3, 200, 64), "float32")) for _ in range(4))
    out, lse = cudakit.attention_with_lse(q, k, v, causal=True)
    first = [cp.asnumpy(t) for t in cudakit.attention_backward(g, q, k, v, out, lse, causal=True)]
    for _ in range(3):
        again = cudakit.attention_backward(g, q, k, v, out, lse, causal=True)
        for a, b in zip(again, first):
            assert a.shape == b.shape
            np.testing.assert_array_equal(cp.asnumpy(a), b)


def test_attention_float32_materialized_plan(rng, monkeypatch, float32_precision):
    """With the materialised path chosen for a signature, plan_backward replays it on (B, H, L, D)
    arrays: the same gradients as backward() on [BH, L, D] views."""
    from cudakit.kernels import attention as at
    from cudakit.kernels import paths
    float32_precision("tf32x3")
    monkeypatch.setattr(paths, "chosen", lambda op, key: "materialized" if op == "attention_backward" else None)
    q, k, v, g = (cp.asarray(ac.data(rng, (2, 3, 150, 40), "float32")) for _ in range(4))
    out, lse = cudakit.attention_with_lse(q, k, v, causal=True)
    bwd = at.plan_backward(6, 150, 150, 40, "float32", 40 ** -0.5, True, q.data.device_id)
    assert bwd is not None
    got = bwd(g, q, k, v, out, lse)
    want = at._materialized_backward(*(x.reshape(6, 150, 40) for x in (g, q, k, v, out)), lse.reshape(6, 150),
                                     40 ** -0.5, at.Masks(True))
    for a, b in zip(got, want):
        assert a.shape == (2, 3, 150, 40)
        np.testing.assert_array_equal(cp.asnumpy(a), cp.asnumpy(b).reshape(2, 3, 150, 40))


def test_attention_float32_materialized_backward_plan_is_a_trace(rng, monkeypatch, only_path, float32_precision):
    """With the materialised float32 backward chosen for a signature, the public call's dispatch plan
    replays a trace of its allocations and launches (kernels/trace_plans.py, path_plans._triton_chosen):
    once the plan is made no call runs the materialised path's Python, and every call's gradients
    are bitwise the path's own on fresh data of the signature."""
    from cudakit.kernels import attention as at
    from cudakit.kernels import paths
    from cudakit.runtime import native
    mod = native.fast_paths()
    if mod is None or not hasattr(mod, "replay_new"):
        pytest.skip("no native replay")
    float32_precision("tf32x3")
    only_path("materialized")
    monkeypatch.setattr(paths, "chosen", lambda op, key: "materialized" if op == "attention_backward" else None)
    real, calls = at._materialized_backward, []
    monkeypatch.setattr(at, "_materialized_backward", lambda *a: calls.append(1) or real(*a))
    shape, seen = (2, 3, 150, 40), []
    for _ in range(4):   # checked, then the plan made, then replayed
        q, k, v, g = (cp.asarray(ac.data(rng, shape, "float32")) for _ in range(4))
        out, lse = cudakit.attention_with_lse(q, k, v, causal=True)
        seen.append(len(calls))
        got = cudakit.attention_backward(g, q, k, v, out, lse, causal=True)
        want = real(*(x.reshape(6, 150, 40) for x in (g, q, k, v, out)), lse.reshape(6, 150), 40 ** -0.5,
                    at.Masks(True))
        for a, b in zip(got, want):
            np.testing.assert_array_equal(cp.asnumpy(a), cp.asnumpy(b).reshape(shape))
    assert seen[0] < seen[1] and len(calls) == seen[-1], (seen, len(calls))


def test_attention_float32_materialized_declines(rng, monkeypatch, float32_precision, cache_dir):
    """Against the flash kernels; a head whose workspace exceeds the budget runs the flash kernels."""
    from cudakit.kernels import attention as at
    from cudakit.kernels import attention_materialized as am
    float32_precision("tf32x3")
    q, k, v, g = (cp.asarray(ac.data(rng, (2, 200, 64), "float32")) for _ in range(4))
    out, lse = at.forward(q, k, v, 0.125, False, "float32")
    want = at._triton_backward(g, q, k, v, out, lse, 0.125, at.Masks(False), "float32")
    got = at._materialized_backward(g, q, k, v, out, lse, 0.125, at.Masks(False))
    for a, b in zip(got, want):
        np.testing.assert_allclose(cp.asnumpy(a), cp.asnumpy(b), rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(am, "WORKSPACE_BYTES", 1024)
    assert at._materialized_backward(g, q, k, v, out, lse, 0.125, at.Masks(False)) is None
    got = at.backward(g, q, k, v, out, lse, 0.125, False, "float32")
    for a, b in zip(got, want):
        np.testing.assert_array_equal(cp.asnumpy(a), cp.asnumpy(b))


@pytest.mark.parametrize("block_size", [64, 128])
@pytest.mark.parametrize("d", [64, 128])
def test_flash_attention_float32_block_sizes(block_size, d, rng):
    ac.check_attention(_dev, _host, rng, (2,), 150, 300, d, "float32", False, block_size=block_size)


def test_attention_float32_precision_is_applied(float32_precision, rng):
    """tf32's error against float64 is far above tf32x3's (the setting reaches the kernels) and
    within TF32's bound; tf32x3 stays within 8x ieee's: its operands carry about 21 significant
    bits (a TF32 part and a TF32 remainder, the remainders' product dropped) against float32's 24,
    so its products' rounding is about 8x float32's (an H100 run measured 6.6x on the forward, with
    fresh random inputs: 3.46e-06 against 5.25e-07, 2026-11-27)."""
    q, k, v, g = (ac.data(rng, (2, 4, 300, 64), "float32") for _ in range(4))
    want = ac.reference(q, k, v, 0.125, False, g)
    err = {}
    for prec in ("ieee", "tf32x3", "tf32"):
        float32_precision(prec)
        out, lse = cudakit.attention_with_lse(*(cp.asarray(a) for a in (q, k, v)))
        dq = cudakit.attention_backward(cp.asarray(g), *(cp.asarray(a) for a in (q, k, v)), out, lse)[0]
        err[prec] = (np.abs(cp.asnumpy(out) - want[0]).max(), np.abs(cp.asnumpy(dq) - want[3]).max())
    for i in range(2):
        assert err["tf32"][i] > 30 * err["tf32x3"][i], err
        assert err["tf32x3"][i] < 8 * err["ieee"][i] + 1e-6, err
    assert err["tf32"][0] < 1e-2, err


@pytest.mark.parametrize("dtype", GPU_DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b,lq,lk,h,d", [(2, 17, 17, 3, 24), (1, 40, 75, 2, 64)])
def test_attention_blhd(b, lq, lk, h, d, dtype, causal, rng):
    """layout="blhd" on whichever path the signature takes (cuDNN in place, else transposed)."""
    ac.check_attention_blhd(_dev, _host, rng, b, lq, lk, h, d, dtype, causal)


@pytest.mark.parametrize("dtype", GPU_DTYPES + ["float64"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b,h,hkv,lq,lk,d", [(2, 4, 2, 33, 50, 64), (1, 6, 3, 17, 17, 24)])
def test_attention_grouped_query(b, h, hkv, lq, lk, d, dtype, causal, rng):
    """Grouped-query attention on whichever path the signature takes (cuDNN or the Triton kernels, and
    float64's matrix products, each reading k, v in place)."""
    ac.check_attention_gqa(_dev, _host, rng, b, h, hkv, lq, lk, d, dtype, causal)
    if dtype == "float64":   # (with a bias: its gradient summed over the grouped heads too)
        ac.check_attention_gqa(_dev, _host, rng, b, h, hkv, lq, lk, d, dtype, causal, bias=(1, h, lq, lk))


# -- masks: causal (bottom-right), window, key lengths; the Triton kernels on every path ------------

@pytest.mark.parametrize("dtype", GPU_DTYPES)
@pytest.mark.parametrize("case", ac.MASKS + [((2, 2), 1000, 1000, 64, True, (128, 0), [1000, 333]),
                                             ((1, 2), 1, 4096, 128, False, None, [4097 - 1]),
                                             ((2, 1), 257, 300, 96, False, (40, 40), [0, 300]),
                                             ((1, 1), 4097, 4097, 40, True, (1024, None), None)])
def test_attention_masks(case, dtype, rng):
    lead, lq, lk, d, causal, window, lens = case
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, dtype, causal, window=window, lens=lens)


def test_masks_with_grouped_heads_and_blhd_match_the_plain_layout(rng):
    """As the CPU test: masks on (B, L, H, D) views and grouped-query k, v (the paths that take
    cuDNN without masks take the Triton kernels with them) give the (B, H, L, D) results."""
    b, h, hkv, lq, lk, d = 2, 4, 2, 90, 130, 64
    q, g = (cp.asarray(ac.data(rng, (b, h, lq, d), "bfloat16")) for _ in range(2))
    k, v = (cp.asarray(ac.data(rng, (b, hkv, lk, d), "bfloat16")) for _ in range(2))
    kw = {"causal": True, "window": (30, None), "key_lengths": cp.asarray([130, 61])}
    kr, vr = cp.repeat(k, 2, axis=1), cp.repeat(v, 2, axis=1)
    out_r, lse_r = cudakit.attention_with_lse(q, kr, vr, **kw)
    out, lse = cudakit.attention_with_lse(q, k, v, **kw)
    np.testing.assert_array_equal(cp.asnumpy(out), cp.asnumpy(out_r))
    t = lambda x: cp.ascontiguousarray(x.swapaxes(1, 2))   # noqa: E731
    out_b, lse_b = cudakit.attention_with_lse(t(q), t(kr), t(vr), layout="blhd", **kw)
    np.testing.assert_array_equal(cp.asnumpy(out_b), cp.asnumpy(t(out_r)))
    dq_r, dk_r, dv_r = cudakit.attention_backward(g, q, kr, vr, out_r, lse_r, **kw)
    dq, dk, dv = cudakit.attention_backward(g, q, k, v, out, lse, **kw)
    np.testing.assert_array_equal(cp.asnumpy(dq), cp.asnumpy(dq_r))
    np.testing.assert_allclose(cp.asnumpy(dk).astype(np.float32),
                               cp.asnumpy(dk_r.astype(cp.float32).reshape(b, hkv, 2, lk, d).sum(2)), rtol=2e-2, atol=2e-2)


def test_device_key_lengths_out_of_range_raise_at_the_next_check(rng):
    """A GPU key_lengths is checked by the forward kernel (no wait in the call): the bad value
    surfaces as an ArgumentError naming it at cudakit.check(), and the flag is clear afterwards."""
    q = cp.asarray(ac.data(rng, (3, 2, 16, 32), "float16"))
    cudakit.attention(q, q, q, key_lengths=cp.asarray([16, 17, 3]))
    with pytest.raises(cudakit.ArgumentError, match=r"key_lengths\[1\] = 17 is outside \[0, Lk = 16\]"):
        cudakit.check()
    cudakit.attention(q, q, q, key_lengths=cp.asarray([16, 0, 3]))
    cudakit.check()


def test_key_lengths_tuple_and_narrow_types_plan_correctly(rng):
    """A tuple of lengths and an int16 GPU array (the checked call copies or casts them, which a
    trace cannot record: those signatures keep the checked path) and an int64 GPU array (traced)
    give the list's result on every call, and leave no error at the next check."""
    q = cp.asarray(ac.data(rng, (2, 2, 40, 32), "float16"))
    want = cp.asnumpy(cudakit.attention(q, q, q, key_lengths=[40, 7]))
    for lens in ((40, 7), cp.asarray([40, 7], cp.int16), cp.asarray([40, 7], cp.int64)):
        for _ in range(4):   # the first call, the planning call, replays
            np.testing.assert_array_equal(cp.asnumpy(cudakit.attention(q, q, q, key_lengths=lens)), want)
    cudakit.check()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_deterministic_backward_is_bitwise_repeatable(dtype, rng):
    """deterministic=True: the Triton backward (no atomics), bitwise equal over repeated runs, and
    close to the default path's gradients (cuDNN's where it is installed)."""
    q, k, v, g = (cp.asarray(ac.data(rng, (2, 4, 300, 64), dtype)) for _ in range(4))
    out, lse = cudakit.attention_with_lse(q, k, v, causal=True)
    runs = [[cp.asnumpy(t) for t in cudakit.attention_backward(g, q, k, v, out, lse, causal=True, deterministic=True)]
            for _ in range(3)]
    for run in runs[1:]:
        for a, b in zip(run, runs[0]):
            np.testing.assert_array_equal(a, b)
    tol = 3e-2 if dtype == "bfloat16" else 1e-3
    for a, b in zip(runs[0], cudakit.attention_backward(g, q, k, v, out, lse, causal=True)):
        np.testing.assert_allclose(a.astype(np.float32), cp.asnumpy(b).astype(np.float32), rtol=tol, atol=tol)


# -- attn_bias: the Triton kernels read it by its strides; its gradient stored or added atomically --

@pytest.mark.parametrize("dtype", GPU_DTYPES + ["float64"])
@pytest.mark.parametrize("case", ac.BIASES + [((2, 4), 300, 257, 64, True, (1, 4, 300, 257)),
                                              ((2, 2), 130, 1000, 128, False, (2, 1, 1, 1000)),
                                              ((1, 2), 129, 150, 80, False, (1, 2, 129, 150))])
def test_attention_bias(case, dtype, rng):
    lead, lq, lk, d, causal, bias = case
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, dtype, causal, bias=bias)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("case", [((2, 3), 100, 130, 64, True, (2, 3, 100, 130)),
                                  ((2, 2), 70, 200, 32, False, (2, 1, 1, 200)),
                                  ((1, 4), 129, 150, 80, False, (1, 4, 129, 150))])
def test_attention_bias_with_strided_keys(case, dtype, rng):
    """A bias whose keys are strided (a view of every other key): the kernels read it by its key
    stride, where a contiguous bias takes the stride as the constant 1 (BIAS_K1); forward, backward
    and the bias's gradient against float64."""
    lead, lq, lk, d, causal, bias = case
    ac.check_attention(_dev, _host, rng, lead, lq, lk, d, dtype, causal, bias=bias, bias_strided=True)


def test_attention_bias_with_masks_and_blhd(rng):
    ac.check_attention(_dev, _host, rng, (2, 3), 100, 130, 64, "bfloat16", True, window=(40, 2), lens=[130, 61],
                       bias=(1, 3, 100, 130))
    ac.check_attention(_dev, _host, rng, (2, 4), 90, 90, 64, "float16", True, bias=(2, 1, 90, 90), layout="blhd")


@pytest.mark.parametrize("dtype", GPU_DTYPES)
@pytest.mark.parametrize("path", ["in-place", "copy"])
@pytest.mark.parametrize("case", [{"window": (40, 2), "lens": [130, 61]}, {"bias": (1, 3, 100, 130)},
                                  {"bias": (2, 1, 1, 130), "lens": [130, 0], "window": (None, 5)}])
def test_blhd_masks_in_place_and_transposed_match_float64(case, path, dtype, rng, only_path):
    """layout "blhd" with masks: the Triton kernels reading the (B, L, H, D) arrays in place
    (kernels/attention.py triton_forward_blhd) and the path on transposed copies, each forced,
    against float64, forward and backward (the bias's gradient too)."""
    took = only_path(path)
    ac.check_attention(_dev, _host, rng, (2, 3), 100, 130, 64, dtype, True, layout="blhd", **case)
    assert "attention_layout" in took


@pytest.mark.parametrize("dtype", GPU_DTYPES)
@pytest.mark.parametrize("b,lq,h,hkv,d,kw", [
    (2, 150, 4, 2, 64, {"causal": True, "window": (50, 0)}),
    (3, 97, 6, 6, 80, {"key_lengths": [97, 20, 0], "dropout_p": 0.2, "seed": 5}),
    (1, 64, 2, 1, 128, {"attn_bias": (1, 2, 64, 64)}),
    (4200, 5, 16, 16, 16, {"window": (2, 2)})])   # 67200 batch*heads: launches in slices
def test_blhd_qkv_views_in_place_match_the_transposing_path(b, lq, h, hkv, d, kw, dtype, rng, only_path,
                                                            cudakit_dropout_stream):
    """q, k, v the views of one projection, (B, L, H + 2 Hkv, D) split along the heads (rows
    (H + 2 Hkv) D elements apart): read in place, forward and backward (grouped-query k, v and
    masks), they give the transposing path's results; both keep the inputs unchanged."""
    qkv = cp.asarray(ac.data(rng, (b, lq, h + 2 * hkv, d), dtype))
    q, k, v = qkv[:, :, :h], qkv[:, :, h:h + hkv], qkv[:, :, h + hkv:]
    g = cp.asarray(ac.data(rng, (b, lq, h, d), dtype))
    kw = dict(kw)
    if "attn_bias" in kw:
        kw["attn_bias"] = cp.asarray(ac.data(rng, kw["attn_bias"], dtype))
    if "key_lengths" in kw:
        kw["key_lengths"] = cp.asarray(kw["key_lengths"])
    before = cp.asnumpy(qkv)
    results = {}
    from cudakit import dispatch
    for path in ("in-place", "copy"):
        dispatch.clear()   # (a plan made by the first path's calls would replay it)
        took = only_path(path)
        out, lse = cudakit.attention_with_lse(q, k, v, layout="blhd", **kw)
        grads = cudakit.attention_backward(g, q, k, v, out, lse, layout="blhd", **kw)
        assert set(took) == {"attention_layout"}, took   # (the forward's and the backward's choices)
        results[path] = [cp.asnumpy(x.astype(cp.float32)) for x in (out, lse, *grads)]
    np.testing.assert_array_equal(cp.asnumpy(qkv), before)
    tol = 1e-4 if dtype == "float32" else 2e-3
    for name, got, want in zip(("out", "lse", "dq", "dk", "dv", "dbias"), results["in-place"], results["copy"]):
        assert got.shape == want.shape, name
        fin = np.isfinite(want)   # (lse -inf where a batch has no keys)
        np.testing.assert_array_equal(np.isfinite(got), fin, err_msg=name)
        np.testing.assert_allclose(got[fin], want[fin], rtol=tol, atol=tol * max(1.0, float(np.abs(want[fin]).max())),
                                   err_msg=name)


def test_blhd_dropout_on_cudnns_stream_is_never_read_in_place(rng, only_path, cudnn_dropout_stream):
    """A (B, L, H, D) call whose dropout the transposing path draws from cuDNN's fused dropout is not
    offered to the in-place kernels (which draw cudakit's stream), forward and backward alike, so no
    timed choice can pair a forward on one stream with a backward on the other: with the in-place
    path forced, the call runs the transposing path and gives the (B, H, L, D) call's results."""
    from cudakit.backends.attention_masks import Masks
    from cudakit.backends.dropout_api import threshold
    from cudakit.kernels import attention
    b, h, L, d = 2, 3, 128, 64
    masks = Masks(False, dropout=(threshold(0.2), 1.25, 9))
    if not attention.cudnn_dropout("bfloat16", b * h, L, L, d, d ** -0.5, masks, 1, 0):
        pytest.skip("cuDNN takes no dropout here")
    qkv = cp.asarray(ac.data(rng, (b, L, 3, h, d), "bfloat16"))
    q, k, v = (qkv[:, :, i] for i in range(3))
    g = cp.asarray(ac.data(rng, (b, L, h, d), "bfloat16"))
    kw = {"dropout_p": 0.2, "seed": 9}
    took = only_path("in-place")
    out, lse = cudakit.attention_with_lse(q, k, v, layout="blhd", **kw)
    grads = cudakit.attention_backward(g, q, k, v, out, lse, layout="blhd", **kw)
    assert "attention_layout" not in took, took
    t = lambda x: cp.ascontiguousarray(x.swapaxes(1, 2))   # noqa: E731
    out_r, lse_r = cudakit.attention_with_lse(t(q), t(k), t(v), **kw)
    grads_r = cudakit.attention_backward(t(g), t(q), t(k), t(v), out_r, lse_r, **kw)
    f32 = lambda x: _host(x).astype(np.float32)   # noqa: E731
    np.testing.assert_allclose(f32(out), f32(t(out_r)), rtol=2e-2, atol=2e-2)
    for x, w in zip(grads, grads_r):
        np.testing.assert_allclose(f32(x), f32(t(w)), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("bias_shape", [(2, 4, 200, 200), (1, 4, 200, 200), (2, 1, 1, 200)])
def test_deterministic_backward_with_a_bias(bias_shape, rng):
    """deterministic=True with a bias: every score's dS stored and summed over the broadcast dims
    after (no atomics): bitwise repeatable, and close to the atomic path's gradient."""
    q, k, v, g = (cp.asarray(ac.data(rng, (2, 4, 200, 64), "bfloat16")) for _ in range(4))
    bias = cp.asarray(ac.data(rng, bias_shape, "float32"))
    out, lse = cudakit.attention_with_lse(q, k, v, causal=True, attn_bias=bias)
    runs = [[cp.asnumpy(t).astype(np.float32) for t in cudakit.attention_backward(
        g, q, k, v, out, lse, causal=True, attn_bias=bias, deterministic=True)] for _ in range(3)]
    for run in runs[1:]:
        for a, b in zip(run, runs[0]):
            np.testing.assert_array_equal(a, b)
    fast = cudakit.attention_backward(g, q, k, v, out, lse, causal=True, attn_bias=bias)
    np.testing.assert_allclose(runs[0][3], cp.asnumpy(fast[3]), rtol=1e-3, atol=1e-3)


# -- packed variable-length sequences: the Triton kernels on (total, H, D) arrays in place ---------

@pytest.mark.parametrize("dtype", GPU_DTYPES + ["float64"])
@pytest.mark.parametrize("case", ac.VARLEN + [(2, 2, 64, [300, 1, 1000], [300, 70, 1000], True, None),
                                              (4, 1, 128, [257, 129], [513, 129], False, None),
                                              (2, 2, 80, [130, 200], [130, 200], True, (64, 0))])
def test_attention_varlen(case, dtype, rng):
    h, hkv, d, lq, lk, causal, window = case
    ac.check_varlen(_dev, _host, rng, h, hkv, d, lq, lk, causal, dtype, window, max_pad=3)


@pytest.mark.parametrize("dtype", GPU_DTYPES)
@pytest.mark.parametrize("case", ac.VARLEN_DROPOUT)
def test_attention_varlen_dropout_matches_padded_attention(case, dtype, rng):
    """Dropout on packed sequences (the Triton varlen kernels; cuDNN's ragged path not asked)
    against attention() on the sequences padded, with key_lengths and the same p and seed."""
    ac.check_varlen_dropout(_dev, _host, rng, *case, dtype)


def test_varlen_deterministic_backward_is_bitwise_repeatable(rng):
    """deterministic=True on packed sequences: the Triton kernels (no atomics; cuDNN's backward not
    asked), bitwise equal over repeated runs, close to the default path's gradients."""
    lens = [300, 1, 517]
    cu = cp.asarray(np.concatenate([[0], np.cumsum(lens)]), cp.int32)
    q, g = (cp.asarray(ac.data(rng, (sum(lens), 4, 64), "bfloat16")) for _ in range(2))
    k, v = (cp.asarray(ac.data(rng, (sum(lens), 2, 64), "bfloat16")) for _ in range(2))
    out, lse = cudakit.attention_varlen_with_lse(q, k, v, cu, cu, 517, 517, causal=True)
    runs = [[cp.asnumpy(t).astype(np.float32) for t in cudakit.attention_varlen_backward(
        g, q, k, v, out, lse, cu, cu, 517, 517, causal=True, deterministic=True)] for _ in range(3)]
    for run in runs[1:]:
        for a, b in zip(run, runs[0]):
            np.testing.assert_array_equal(a, b)
    fast = cudakit.attention_varlen_backward(g, q, k, v, out, lse, cu, cu, 517, 517, causal=True)
    for a, b in zip(runs[0], fast):
        np.testing.assert_allclose(a, cp.asnumpy(b).astype(np.float32), rtol=3e-2, atol=3e-2)


def test_last_paths_name_the_triton_kernels_where_no_choice_was_timed(rng):
    """A call only the Triton kernels take (a window; a deterministic backward; varlen dropout)
    reports "triton" in paths.last_paths, whatever an earlier call of the op took."""
    from cudakit.kernels import paths
    q, k, v, g = (cp.asarray(ac.data(rng, (1, 2, 64, 64), "float16")) for _ in range(4))
    cudakit.attention(q, k, v)
    paths.ran("attention", "cudnn")   # (as if the plain call had chosen cuDNN)
    out, lse = cudakit.attention_with_lse(q, k, v, window=(8, 8))
    assert paths.last_paths()["attention"] == "triton"
    paths.ran("attention_backward", "cudnn")
    cudakit.attention_backward(g, q, k, v, out, lse, window=(8, 8))
    assert paths.last_paths()["attention_backward"] == "triton"
    paths.ran("attention_backward", "cudnn")
    out, lse = cudakit.attention_with_lse(q, k, v)
    cudakit.attention_backward(g, q, k, v, out, lse, deterministic=True)
    assert paths.last_paths()["attention_backward"] == "triton"
    cu = cp.asarray([0, 30, 64], cp.int32)
    cudakit.attention_varlen(q[0].transpose(1, 0, 2).copy(), k[0].transpose(1, 0, 2).copy(),
                             v[0].transpose(1, 0, 2).copy(), cu, cu, 34, 34, dropout_p=0.1, seed=1)
    assert paths.last_paths()["attention_varlen"] == "triton"


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("extra", [{}, {"window": (2, 0)}, {"dropout_p": 0.25, "seed": 5}])
def test_attention_varlen_past_65535_sequence_heads_matches_the_cpu_backend(dtype, extra, rng):
    """4100 sequences x 16 heads (past the 65535 of a grid's y): the varlen kernels launch in slices,
    each told its first sequence*head, forward and backward equal to the CPU backend's (which has no
    grid) on the same float32 data, dropout's Philox stream included."""
    lens = rng.integers(1, 5, 4100)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    q, k, v, g = (ac.data(rng, (int(cu[-1]), 16, 16), dtype) for _ in range(4))
    kw = dict(causal=True, **extra)
    cpu = cudakit.get_backend("cpu")
    want_o, want_l = cpu.attention_varlen_with_lse(*(x.astype(np.float32) for x in (q, k, v)), cu, cu, 4, 4, **kw)
    want_g = cpu.attention_varlen_backward(*(x.astype(np.float32) for x in (g, q, k, v)), want_o, want_l, cu, cu,
                                           4, 4, **kw)
    out, lse = cudakit.attention_varlen_with_lse(_dev(q), _dev(k), _dev(v), _dev(cu), _dev(cu), 4, 4, **kw)
    grads = cudakit.attention_varlen_backward(_dev(g), _dev(q), _dev(k), _dev(v), out, lse, _dev(cu), _dev(cu),
                                              4, 4, **kw)
    tol = 1e-4 if dtype == "float32" else 2e-2
    for name, got, want in zip(("out", "lse", "dq", "dk", "dv"), (out, lse, *grads), (want_o, want_l, *want_g)):
        np.testing.assert_allclose(_host(got).astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol,
                                   err_msg=name)
    cudakit.check()


def test_attention_varlen_device_cu_seqlens_out_of_range_raise_at_the_next_check(rng):
    """GPU cu_seqlens are checked by the forward kernel: a sequence longer than max_seqlen_q is an
    ArgumentError at cudakit.check(), naming the sequence and its lengths."""
    q = cp.asarray(ac.data(rng, (50, 2, 32), "float16"))
    cu = cp.asarray([0, 10, 50], cp.int32)
    cudakit.attention_varlen(q, q, q, cu, cu, 32, 64)
    with pytest.raises(cudakit.ArgumentError, match=r"sequence 1: its Lq = 40 is past max_seqlen_q = 32 \(found"):
        cudakit.check()
    cudakit.attention_varlen(q, q, q, cu, cu, 40, 40)
    cudakit.check()


# -- dropout on the probabilities: the kernels' Philox mask, regenerated in the backward -----------

@pytest.mark.parametrize("dtype", GPU_DTYPES + ["float64"])
@pytest.mark.parametrize("case", ac.DROPOUTS + [((2, 4), 300, 257, 64, True, 0.2, 2**63 + 11),
                                                ((1, 2), 130, 1000, 128, False, 0.1, 7)])
def test_attention_dropout(case, dtype, rng, cudakit_dropout_stream):
    lead, lq, lk, d, causal, p, seed = case
    ac.check_dropout(_dev, _host, rng, lead, lq, lk, d, dtype, causal, p, seed)


def test_dropout_with_grouped_heads_and_blhd_matches_the_plain_layout(rng, cudakit_dropout_stream):
    b, h, hkv, lq, lk, d = 2, 4, 2, 90, 130, 64
    q, g = (cp.asarray(ac.data(rng, (b, h, lq, d), "bfloat16")) for _ in range(2))
    k, v = (cp.asarray(ac.data(rng, (b, hkv, lk, d), "bfloat16")) for _ in range(2))
    kw = {"causal": True, "dropout_p": 0.25, "seed": 99}
    kr, vr = cp.repeat(k, 2, axis=1), cp.repeat(v, 2, axis=1)
    out_r, lse_r = cudakit.attention_with_lse(q, kr, vr, **kw)
    out, lse = cudakit.attention_with_lse(q, k, v, **kw)
    np.testing.assert_array_equal(cp.asnumpy(out), cp.asnumpy(out_r))
    t = lambda x: cp.ascontiguousarray(x.swapaxes(1, 2))   # noqa: E731
    np.testing.assert_array_equal(cp.asnumpy(cudakit.attention(t(q), t(kr), t(vr), layout="blhd", **kw)),
                                  cp.asnumpy(t(out_r)))
    dq_r = cudakit.attention_backward(g, q, kr, vr, out_r, lse_r, **kw)[0]
    dq = cudakit.attention_backward(g, q, k, v, out, lse, **kw)[0]
    np.testing.assert_array_equal(cp.asnumpy(dq), cp.asnumpy(dq_r))


@pytest.mark.parametrize("lead,lq,lk,d,causal,window", [
    ((1, 2), 640, 640, 96, True, None), ((2,), 300, 1000, 128, False, None), ((1, 3), 200, 700, 80, True, (90, 0)),
    ((2,), 130, 520, 64, False, None), ((2, 11), 768, 768, 128, True, None), ((1, 8), 1024, 1024, 128, True, None)])
@pytest.mark.parametrize("which", [0, -1])
def test_attention_float32_forward_key_parts_path(lead, lq, lk, d, causal, window, which, rng, monkeypatch,
                                                  float32_precision):
    """The public float32 forward (and the backward from its out and lse) with kernels/paths.run
    taking a key-parts candidate (which: the first or the last offered), which the split forward
    offers where kernels/attention_key_parts.py's model puts parts faster (every launch here on an
    H100's 132 SMs: a few row blocks, on the small-grid tiles and on the usual 128-row ones with V
    in place, or 132 causal ones of 128 rows), against float64."""
    float32_precision("tf32x3")
    took = _forward_taking("triton-keys-in-", which, monkeypatch,
                           lambda: ac.check_attention(_dev, _host, rng, lead, lq, lk, d, "float32", causal,
                                                      window=window))
    assert took, "the model offered no key parts"


def _forward_taking(prefix: str, which: int, monkeypatch, check) -> list:
    """check() run with kernels/paths.run taking, for the forward ("attention"), the candidate
    `which` of those whose names start with `prefix` (elsewhere its usual choice), the dispatch
    plans cleared before and after; returns the names taken."""
    from cudakit import dispatch
    from cudakit.kernels import paths
    run, took = paths.run, []

    def taking(op, key, candidates, timer=None):
        named = [(n, fn) for n, fn in candidates if n.startswith(prefix)]
        if op == "attention" and named:
            took.append(named[which][0])
            return named[which][1]()
        return run(op, key, candidates, timer)
    dispatch.clear()
    monkeypatch.setattr(paths, "run", taking)
    try:
        check()
    finally:
        dispatch.clear()
    return took


@pytest.mark.parametrize("lead,lq,lk,d,causal", [
    ((8, 8), 256, 256, 128, False), ((4,), 256, 256, 128, True), ((2,), 200, 333, 64, True),
    ((1, 3), 130, 520, 80, False)])
@pytest.mark.parametrize("which", [0, -1])
def test_attention_float32_forward_other_tiling_path(lead, lq, lk, d, causal, which, rng, monkeypatch,
                                                     float32_precision):
    """The public float32 forward (and the backward from its out and lse) with kernels/paths.run
    taking a tiling offered in one part (`triton-on-...`, which: the first or the last offered): on
    grids of fewer 128-row blocks than an H100's SMs, the usual 128-row tiles (V copied or in place)
    where the small-grid ones come first (head dim 128) and the small-grid ones where the usual come
    first (head dims 64 and 80, two column blocks at 80; the last offered at 80: the usual tiles
    with V in place, in two column blocks), against float64."""
    float32_precision("tf32x3")
    took = _forward_taking("triton-on-", which, monkeypatch,
                           lambda: ac.check_attention(_dev, _host, rng, lead, lq, lk, d, "float32", causal))
    assert took, "no other tiling offered"


@pytest.mark.parametrize("lead,lq,lk,d,causal", [((1, 32), 256, 256, 64, False), ((2, 3), 200, 333, 48, True),
                                                  ((4, 8), 256, 256, 64, True)])
def test_attention_float32_forward_small_grid_tiles_with_v_in_place(lead, lq, lk, d, causal, rng, monkeypatch,
                                                                    float32_precision):
    """The public float32 forward (and the backward from its out and lse) with kernels/paths.run
    taking the small-grid 64 x 64 tiles with V read in place (O^T), which the split forward offers
    at head dims up to 64 on grids of fewer 128-row blocks than the SMs, against float64."""
    float32_precision("tf32x3")
    took = _forward_taking("triton-on-64x64-v-in-place", 0, monkeypatch,
                           lambda: ac.check_attention(_dev, _host, rng, lead, lq, lk, d, "float32", causal))
    assert took, "the small-grid tiles with V in place were not offered"


@pytest.mark.parametrize("bh,lq,lk,d,causal,window,splits", [
    (3, 200, 333, 128, False, None, 1), (2, 130, 520, 112, True, None, 1), (40, 300, 300, 128, True, None, 1),
    (48, 384, 384, 128, True, None, 1), (2, 150, 400, 48, True, (100, 0), 1), (2, 130, 520, 128, True, None, 2),
    (300, 64, 64, 64, False, None, 1), (2, 200, 333, 80, False, None, 1), (3, 130, 520, 90, True, None, 3),
    (60, 256, 256, 96, True, (100, 0), 1)])
def test_forward_v_in_place_matches_transposed_copy(bh, lq, lk, d, causal, window, splits, rng, monkeypatch,
                                                     float32_precision):
    """The split float32 forward's O^T form (kernels/attention.py V_IN_PLACE, attn_fwd's OT: V read
    as it comes) against the same forward on V's transposed copy: the small-grid tiles (a few
    128-row blocks), the 128 x 64 ones (48 x 3 row blocks, the shipped causal form; head dims 48
    and 64), a window, the keys in parts; head dims 80, 90 and 96 in two column blocks. The copy is
    made only without V in place."""
    from cudakit.backends.attention_masks import Masks
    from cudakit.kernels import attention as at
    float32_precision("tf32x3")
    q = cp.asarray(ac.data(rng, (bh, lq, d), "float32"))
    k, v = (cp.asarray(ac.data(rng, (bh, lk, d), "float32")) for _ in range(2))
    masks = Masks(causal, window=window)
    monkeypatch.setattr(at, "KEY_SPLITS", splits)
    copies, transpose = [], at._transpose_v
    monkeypatch.setattr(at, "_transpose_v", lambda *a: copies.append(1) or transpose(*a))
    got, want = [], []
    for flag, into in ((True, got), (False, want)):
        monkeypatch.setattr(at, "V_IN_PLACE", flag)
        copies.clear()
        into.extend(_host(x) for x in at._triton_forward(q, k, v, d ** -0.5, masks, "float32"))
        assert len(copies) == (0 if flag else 1), (flag, copies)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("splits", [2, 3])
@pytest.mark.parametrize("causal,window", [(False, None), (True, None), (True, (100, 0))])
def test_forward_over_key_parts_matches_one_part(dtype, splits, causal, window, rng, monkeypatch):
    """The Triton forward with the keys in parts (kernels/attention.py KEY_SPLITS: attn_fwd's KSPLIT,
    attn_fwd_combine, the host's _forward_in_parts) against one part: heads 80 and 128 (the split
    float32 forward's two column forms), ragged lengths."""
    from cudakit.backends.attention_masks import Masks
    from cudakit.kernels import attention as at
    for bh, lq, lk, d in ((3, 200, 333, 80), (2, 130, 520, 128)):
        q = cp.asarray(ac.data(rng, (bh, lq, d), dtype))
        k, v = (cp.asarray(ac.data(rng, (bh, lk, d), dtype)) for _ in range(2))
        masks = Masks(causal, window=window)
        monkeypatch.setattr(at, "KEY_SPLITS", 1)
        want = at._triton_forward(q, k, v, d ** -0.5, masks, dtype)
        monkeypatch.setattr(at, "KEY_SPLITS", splits)
        got = at._triton_forward(q, k, v, d ** -0.5, masks, dtype)
        monkeypatch.setattr(at, "KEY_SPLITS", None)
        tol = 1e-5 if dtype == "float32" else 1e-2
        np.testing.assert_allclose(_host(got[0]).astype(np.float64), _host(want[0]).astype(np.float64), rtol=tol,
                                   atol=tol)
        np.testing.assert_allclose(_host(got[1]), _host(want[1]), rtol=1e-5, atol=1e-5)
