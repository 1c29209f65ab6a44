"""matmul, linear and fused_linear_gelu on the CUDA backend (cuBLAS through CuPy) against the float64
references of tests/linalg_checks.py, and against the CPU backend."""
import linalg_checks as lc
import numpy as np
import pytest
from helpers import DTYPES

import cudakit

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")

from cupy_io import to_dev as _dev  # after the importorskip
from cupy_io import to_host as _host


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa,sb", lc.MATMUL_SHAPES + [((3, 4099), (4099, 5)), ((64, 2048, 96), (96, 512))])
def test_matmul(sa, sb, dtype, rng):
    lc.check_matmul(_dev, _host, rng, sa, sb, dtype)


@pytest.mark.parametrize("layout", ["transposed", "strided"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa,sb", [((5, 7), (7, 3)), ((2, 3, 5, 7), (3, 7, 4)), ((4, 5, 7), (7, 6)),
                                   ((129, 257), (257, 65))])
def test_matmul_views(sa, sb, dtype, layout, rng):
    lc.check_matmul(_dev, _host, rng, sa, sb, dtype, layout)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa,sb", [((5, 7), (7, 3)), ((7,), (7, 4)), ((5, 7), (7,)), ((7,), (7,)),
                                   ((2, 3, 5, 7), (3, 7, 4)), ((2, 1, 5, 7), (1, 3, 7, 4)), ((4, 5, 7), (7, 6)),
                                   ((5, 7), (4, 7, 6)), ((0, 5, 7), (7, 3)), ((5, 0), (0, 3)),
                                   ((8, 33, 130), (130, 70))])
def test_matmul_backward(sa, sb, dtype, rng):
    lc.check_matmul_backward(_dev, _host, rng, sa, sb, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead,fin,fout", [((), 7, 5), ((3,), 1, 1), ((4, 6), 31, 17), ((0,), 8, 3),
                                           ((2, 3), 64, 96), ((1823,), 781, 129)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear(lead, fin, fout, dtype, with_bias, rng):
    lc.check_linear(_dev, _host, rng, lead, fin, fout, dtype, with_bias)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_linear_transposed_weight(dtype, rng):
    lc.check_linear(_dev, _host, rng, (5,), 12, 9, dtype, True, weight_layout="transposed")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead,fin,fout", [((3,), 7, 5), ((4, 6), 31, 17), ((128,), 512, 768)])
def test_fused_linear_gelu(lead, fin, fout, dtype, rng):
    lc.check_fused_linear_gelu(_dev, _host, rng, lead, fin, fout, dtype)


def test_errors():
    lc.check_errors(_dev)


def test_host_input_is_refused():
    with pytest.raises(cudakit.DeviceError):
        cudakit.get_backend("cuda").matmul(np.ones((2, 2), np.float32), cp.ones((2, 2), cp.float32))


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_inf_propagate(dtype):
    lc.check_nan_inf(_dev, _host, dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_out_poisoned_and_same_as_cpu(dtype, rng):
    a, b = lc.data(rng, (37, 61), dtype), lc.data(rng, (61, 29), dtype)
    out = cp.full((37, 29), np.nan, a.dtype)
    assert cudakit.matmul(_dev(a), _dev(b), out=out) is out
    want = cudakit.matmul(a, b)
    np.testing.assert_allclose(lc.f64(cp.asnumpy(out)), lc.f64(want), rtol=lc._U[dtype] * 4, atol=1e-5)
    be = cudakit.get_backend("cuda")
    assert be.is_available and be.has_custom_kernels
    np.testing.assert_array_equal(lc.f64(cp.asnumpy(be.matrix_multiply(_dev(a), _dev(b)))), lc.f64(cp.asnumpy(out)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_and_gelu_without_cublaslt(dtype, rng, monkeypatch):
    """Where cuBLASLt cannot be loaded: the float32 GEMM, bias and GELU path, same results' bounds."""
    from cudakit.kernels import cublaslt
    monkeypatch.setattr(cublaslt, "_lib", False)
    lc.check_linear(_dev, _host, rng, (4, 6), 31, 16, dtype, True)
    lc.check_fused_linear_gelu(_dev, _host, rng, (4, 6), 31, 16, dtype)


def test_cublaslt_plan_is_used_for_gelu(rng):
    """The tanh GELU with a pre-activation output runs as one cuBLASLt call (a plan exists)."""
    from cudakit.kernels import cublaslt
    x, w, b = (cp.asarray(lc.data(rng, s, "bfloat16")) for s in ((64, 32), (48, 32), (48,)))
    cudakit.fused_linear_gelu_with_preact(x, w, b)
    keys = [k for (_, k), plan in cublaslt._plans.items() if plan is not None]
    assert any(k[0] == "bfloat16" and k[3:6] == (64, 48, 32) and k[12] == "gelu_aux_bias" for k in keys), keys


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_linear_strided_bias_and_offset_x(dtype, rng):
    """A strided bias and an x at a pointer offset, through the cuBLASLt epilogue (out_features 16)."""
    lc.check_linear(_dev, _host, rng, (4, 5), 32, 16, dtype, True, strided=True)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("rows,fin,fout,fused", [(512, 256, 768, True), (333, 64, 40, True), (8192, 768, 2304, False)])
def test_linear_backward_bias_gradient_from_the_weight_gemm(rows, fin, fout, fused, dtype, rng):
    """16-bit linear_backward with a bias takes the bias's gradient out of the weight-gradient GEMM
    (cuBLASLt's BGRADB epilogue) on products up to cublaslt._BGRAD_MAX_PRODUCT, a column sum past it:
    against float64 (lc.check_linear's bounds), the case's GEMM made with that epilogue or not, and
    the planned calls bitwise the first, checked one."""
    from cudakit.kernels import cublaslt
    lc.check_linear(_dev, _host, rng, (rows,), fin, fout, dtype, True)
    epilogue = {k[1][12] for k, p in cublaslt._plans.items() if p is not None and k[1][3:6] == (fout, fin, rows)}
    assert ("bgradb" in epilogue) == fused, epilogue
    g, x = _dev(lc.data(rng, (rows, fout), dtype)), _dev(lc.data(rng, (rows, fin), dtype))
    w = _dev(lc.data(rng, (fout, fin), dtype))
    runs = [cudakit.linear_backward(g, x, w, True) for _ in range(3)]
    for r in runs[1:]:
        for a, b in zip(r, runs[0]):
            cp.testing.assert_array_equal(a.view(cp.uint16), b.view(cp.uint16))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead,fin,fout", [((3,), 7, 5), ((4, 6), 32, 17), ((1025,), 3072, 768)])
def test_linear_backward_through_gelu(lead, fin, fout, dtype, rng):
    """linear_backward(..., gelu_pre=): 16-bit with in_features a multiple of 8 through cuBLASLt's
    DGELU epilogue (its plan made), the others through the GEMM and gelu_backward; the planned
    calls bitwise the first, checked one."""
    from cudakit import dispatch
    from cudakit.kernels import cublaslt
    dispatch.clear()   # (plans of earlier cases would satisfy the check below)
    lc.check_linear_backward_gelu(_dev, _host, rng, lead, fin, fout, dtype)
    rows = int(np.prod(lead))
    epilogue = {k[1][12] for k, p in cublaslt._plans.items()
                if p is not None and k[1][0] == dtype and k[1][3:6] == (rows, fin, fout)}
    assert ("dgelu" in epilogue) == (dtype in ("float16", "bfloat16") and fin % 8 == 0), epilogue
    pre, x = _dev(lc.data(rng, lead + (fin,), dtype)), _dev(lc.data(rng, lead + (fin,), dtype))
    g, w = _dev(lc.data(rng, lead + (fout,), dtype)), _dev(lc.data(rng, (fout, fin), dtype))
    runs = [[_host(t) for t in cudakit.linear_backward(g, x, w, gelu_pre=pre)] for _ in range(3)]
    for r in runs[1:]:
        for a, b in zip(r, runs[0]):
            np.testing.assert_array_equal(lc.f64(a), lc.f64(b))
    assert any(k[0] == "linear_backward_gelu" and p is not None for k, p in dispatch._plans.items())


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_linear_backward_through_gelu_without_cublaslt(dtype, rng, monkeypatch):
    """Where cuBLASLt cannot be loaded: the GEMM, then gelu_backward, within the same bounds."""
    from cudakit.kernels import cublaslt
    monkeypatch.setattr(cublaslt, "_lib", False)
    lc.check_linear_backward_gelu(_dev, _host, rng, (4, 6), 32, 16, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead,fin,fout", [((3,), 7, 5), ((4, 6), 32, 16), ((2, 1024), 768, 768)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_with_residual(lead, fin, fout, dtype, with_bias, rng):
    """linear(..., residual=): through cuBLASLt with the residual as C where out_features is a
    multiple of 8, else the float32 GEMM and adds; the planned calls bitwise the first, checked
    one; a residual at a pointer offset (not 16-byte aligned: the float32 path) and a non-contiguous
    one, within the bounds of one rounding."""
    from cudakit import dispatch
    dispatch.clear()   # (plans of earlier cases would satisfy the check below)
    lc.check_linear_residual(_dev, _host, rng, lead, fin, fout, dtype, with_bias)
    x, w = _dev(lc.data(rng, lead + (fin,), dtype)), _dev(lc.data(rng, (fout, fin), dtype))
    b = _dev(lc.data(rng, (fout,), dtype)) if with_bias else None
    r = _dev(lc.data(rng, lead + (fout,), dtype))
    runs = [_host(cudakit.linear(x, w, b, residual=r)) for _ in range(3)]
    for y in runs[1:]:
        np.testing.assert_array_equal(lc.f64(y), lc.f64(runs[0]))
    if fout % 8 == 0:   # the epilogue's single cuBLASLt call (the float32 fallback's copies are not traced)
        assert any(k[0] == "linear_residual" and p is not None for k, p in dispatch._plans.items())
    big = cp.zeros(r.size + 1, r.dtype)
    off = big[1:].reshape(r.shape)
    off[...] = r
    wide = cp.zeros(lead + (2 * fout,), r.dtype)
    wide[..., ::2] = r
    xh, wh, rh = lc.f64(_host(x)), lc.f64(_host(w)), lc.f64(_host(r))
    want = xh @ wh.T + (0 if b is None else lc.f64(_host(b))) + rh
    bound = lc._acc_bound(np.abs(xh), np.abs(wh).T, fin, dtype) + 2.0**-20 * (np.abs(rh) + np.abs(want))
    for other in (off, wide[..., ::2]):   # (another alignment may take another algorithm: not bitwise)
        lc.assert_close(_host(cudakit.linear(x, w, b, residual=other)), want, bound, dtype, "offset residual")
