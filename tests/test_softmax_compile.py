"""cudakit.kernels.softmax and cudakit.kernels.cross_entropy: their launch plans pick instantiations
that exist (the nvcc and NVRTC compile is in test_kernels_compile.py). No GPU needed."""
import functools
import operator

import pytest
import test_kernels_compile as kc

MODULES = ["cudakit.kernels.softmax", "cudakit.kernels.cross_entropy"]


@pytest.mark.parametrize("modname", MODULES)
def test_each_dtype_compiles_only_its_own_instantiations(modname):
    import importlib

    from cudakit.kernels import _common
    mod = importlib.import_module(modname)
    per_dtype = [mod.name_expressions(d) for d in _common.FLOAT_DTYPE_NAMES]
    assert sorted(functools.reduce(operator.iadd, per_dtype, [])) == sorted(mod.name_expressions())
    for d, names in zip(_common.FLOAT_DTYPE_NAMES, per_dtype):
        ct = _common.ctype(d)
        assert all(f"<{ct}" in n or n.startswith("ck_ce_reduce") for n in names)


def test_register_kernels_do_not_spill(tmp_path):
    """The register-row kernels the plans use for the benchmark shapes keep their rows in
    registers: ptxas reports no spill for them."""
    import re

    from cudakit.kernels import cross_entropy, softmax
    names = ["ck_softmax_fwd_reg<float, 4, 8>", "ck_softmax_fwd_reg<ck_bf16, 8, 4>", "ck_softmax_fwd_reg<ck_bf16, 8, 8>",
             "ck_softmax_bwd_reg<float, 4, 4>", "ck_softmax_bwd_reg<ck_bf16, 8, 4>",
             "ck_softmax_bwd_smem<float, 4, 8>", "ck_softmax_bwd_smem<ck_bf16, 8, 8>"]
    log = kc.nvcc_compile(softmax, tmp_path, names, extra=("-Xptxas", "-v"))
    log += kc.nvcc_compile(cross_entropy, tmp_path, ["ck_ce_reg<ck_bf16, 8, 4>",
                                                     "ck_ce_reg<float, 4, 8>"], extra=("-Xptxas", "-v"))
    spills = re.findall(r"(\d+) bytes spill stores", log)
    assert spills and all(s == "0" for s in spills), log[-3000:]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("cols", [1, 7, 127, 128, 1823, 4096, 4097, 32000, 32768, 65536, 300007])
def test_plans_name_existing_instantiations(dtype, cols):
    """Every plan (forward, backward, cross entropy) names a compiled instantiation, fits its
    kernel's block bound and covers the row."""
    from cudakit.kernels import _common, cross_entropy, softmax
    names = set(softmax.name_expressions(dtype))
    t = _common.ctype(dtype)
    for v in (_common.vec_width(dtype), 1):
        if cols % v:
            continue
        nvec = cols // v
        fwd = softmax.reg_plan(nvec, softmax.fwd_target(nvec, v), lambda nv, v=v: softmax.fwd_bound(nv, v, dtype),
                              softmax.reg_nvs(v))
        if fwd:
            tpr, nv, rpb = fwd
            assert f"ck_softmax_fwd_reg<{t}, {v}, {nv}>" in names
            assert tpr * nv >= nvec and tpr * rpb <= softmax.fwd_bound(nv, v, dtype)
            if nvec <= softmax.SHORT_ROW_PACKS and v > 1:  # short rows: one pack per thread
                assert nv == 1 and tpr >= nvec
        ce = softmax.reg_plan(nvec, softmax.FWD_TARGET_NV, lambda nv, v=v: softmax.fwd_bound(nv, v, dtype),
                             softmax.reg_nvs(v))
        if ce:
            assert f"ck_ce_reg<{t}, {v}, {ce[1]}>" in cross_entropy.name_expressions(dtype)
        bwd = softmax.reg_plan(nvec, softmax.BWD_TARGET_NV, lambda nv, v=v: softmax.bwd_bound(nv, v, dtype),
                              softmax.reg_nvs(v))
        if bwd:
            tpr, nv, rpb = bwd
            assert f"ck_softmax_bwd_reg<{t}, {v}, {nv}>" in names
            assert tpr * nv >= nvec and tpr * rpb <= softmax.bwd_bound(nv, v, dtype)
        else:
            sp = softmax._smem_plan(nvec, v, dtype)
            if sp:
                tpr, nv, smem = sp
                assert f"ck_softmax_bwd_smem<{t}, {v}, {nv}>" in names and tpr * nv >= nvec and smem <= 128 * 1024
    if dtype in ("float32", "bfloat16"):  # the benchmark shapes hold their rows in registers
        v = _common.vec_width(dtype)
        if cols in (128, 4096, 32768):
            assert softmax.reg_plan(cols // v, softmax.FWD_TARGET_NV, lambda nv: softmax.fwd_bound(nv, v, dtype))
            assert (softmax.reg_plan(cols // v, softmax.BWD_TARGET_NV, lambda nv: softmax.bwd_bound(nv, v, dtype))
                    or softmax._smem_plan(cols // v, v, dtype))
        if cols == 32000 and dtype == "bfloat16":
            assert softmax.reg_plan(cols // v, softmax.FWD_TARGET_NV, lambda nv: softmax.fwd_bound(nv, v, dtype))
