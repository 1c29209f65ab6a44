"""cudakit.kernels.normalization: per-dtype instantiations and ptxas resource checks (the nvcc and
NVRTC compile of every instantiation is in test_kernels_compile.py). No GPU needed."""
import functools
import operator


def test_each_dtype_compiles_only_its_own_instantiations():
    from cudakit.kernels import _common, normalization
    per_dtype = [normalization.name_expressions(d) for d in _common.FLOAT_DTYPE_NAMES]
    assert sorted(functools.reduce(operator.iadd, per_dtype, [])) == sorted(normalization.name_expressions())
    for d, names in zip(_common.FLOAT_DTYPE_NAMES, per_dtype):
        assert all(f"<{_common.ctype(d)}" in n for n in names)
