"""Every instantiation of cudakit.kernels.normalization compiles with nvcc (sm_90) and NVRTC.

Reuses the checks of test_kernels_compile.py, parametrized over this module only. No GPU needed.
"""
import functools
import operator

import pytest
import test_kernels_compile as kc

MODULES = ["cudakit.kernels.normalization"]


@pytest.mark.parametrize("modname", MODULES)
def test_nvcc_compiles_every_instantiation(modname, tmp_path):
    kc.test_nvcc_compiles_every_instantiation(modname, tmp_path)


@pytest.mark.parametrize("modname", MODULES)
def test_nvrtc_compiles_every_instantiation(modname, cache_dir):
    kc.test_nvrtc_compiles_every_instantiation(modname, cache_dir)


def test_each_dtype_compiles_only_its_own_instantiations():
    from cudakit.kernels import _common, normalization
    per_dtype = [normalization.name_expressions(d) for d in _common.FLOAT_DTYPE_NAMES]
    assert sorted(functools.reduce(operator.iadd, per_dtype, [])) == sorted(normalization.name_expressions())
    for d, names in zip(_common.FLOAT_DTYPE_NAMES, per_dtype):
        assert all(f"<{_common.ctype(d)}" in n for n in names)
