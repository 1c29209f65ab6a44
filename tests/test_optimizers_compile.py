"""Every instantiation of the fused optimizer kernels compiles: nvcc for sm_90 (no register spills)
and NVRTC. No GPU needed. (The pattern of tests/test_kernels_compile.py.)"""
import re

import test_kernels_compile as kc

from cudakit.kernels import optimizers

EXPRS = optimizers.name_expressions()


def test_instantiations_cover_every_kind():
    assert len(EXPRS) == len(set(EXPRS)) == 24
    assert "ck_adam_mt<float, float, false, false>" in EXPRS
    assert "ck_sgd_mt<ck_bf16, float, true, true>" in EXPRS
    assert optimizers.expr("adam", "float64", False, True) == "ck_adam_mt<double, double, false, true>"


def test_nvcc_compiles_every_instantiation_without_spills(tmp_path):
    log = kc.nvcc_compile(optimizers, tmp_path, EXPRS, extra=("-Xptxas", "-v"))
    entries = re.findall(r"Compiling entry function '(\w+)'", log)
    assert len(entries) == len(EXPRS), log[-2000:]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert len(spills) == len(EXPRS) and all(s == ("0", "0") for s in spills), log[-4000:]
    stacks = re.findall(r"(\d+) bytes stack frame", log)
    assert all(s == "0" for s in stacks), log[-4000:]


def test_chunk_table():
    import numpy as np
    c = optimizers.CHUNK
    t = optimizers.chunk_table([0, 1, c, c + 1, 3 * c])
    tensor, chunk = t >> 32, t & 0xFFFFFFFF
    np.testing.assert_array_equal(tensor, [1, 2, 3, 3, 4, 4, 4])
    np.testing.assert_array_equal(chunk, [0, 0, 0, 1, 0, 1, 2])
    assert optimizers.chunk_table([]).size == 0
