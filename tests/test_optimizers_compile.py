"""Every instantiation of the fused optimizer kernels compiles: nvcc for sm_90 (no register spills)
and NVRTC. No GPU needed. (The pattern of tests/test_kernels_compile.py.)"""
import re
import shutil
import subprocess

import pytest

from cudakit.kernels import optimizers

EXPRS = optimizers.name_expressions()


def test_instantiations_cover_every_kind():
    assert len(EXPRS) == len(set(EXPRS)) == 24
    assert "ck_adam_mt<float, float, false, false>" in EXPRS
    assert "ck_sgd_mt<ck_bf16, float, true, true>" in EXPRS
    assert optimizers.expr("adam", "float64", False, True) == "ck_adam_mt<double, double, false, true>"


def test_nvcc_compiles_every_instantiation_without_spills(tmp_path):
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc is not on the PATH")
    refs = "\n".join(f"void* ck_ref_{i} = (void*)&{e};" for i, e in enumerate(EXPRS))
    src = tmp_path / "k.cu"
    src.write_text(optimizers.SOURCE + "\n" + refs + "\n")
    r = subprocess.run([nvcc, "-std=c++17", "-arch=sm_90", "-cubin", "-Xptxas", "-v",
                        "-o", str(tmp_path / "k.cubin"), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    assert (tmp_path / "k.cubin").stat().st_size > 1000
    entries = re.findall(r"Compiling entry function '(\w+)'", r.stderr)
    assert len(entries) == len(EXPRS), r.stderr[-2000:]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    assert len(spills) == len(EXPRS) and all(s == ("0", "0") for s in spills), r.stderr[-4000:]
    stacks = re.findall(r"(\d+) bytes stack frame", r.stderr)
    assert all(s == "0" for s in stacks), r.stderr[-4000:]


def test_nvrtc_compiles_every_instantiation(cache_dir):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from cudakit.runtime import compiler
    try:
        compiler.nvrtc_version()
    except Exception as e:
        pytest.skip(f"NVRTC library not loadable: {e}")
    compiler._memory_cache.clear()
    binary, mapping = compiler.compile_to_cubin(optimizers.SOURCE, name_expressions=EXPRS, arch="sm_90")
    assert len(binary) > 1000 and set(mapping) == set(EXPRS)
    assert compiler.compile_to_cubin(optimizers.SOURCE, name_expressions=EXPRS, arch="sm_90")[0] == binary


def test_chunk_table():
    import numpy as np
    c = optimizers.CHUNK
    t = optimizers.chunk_table([0, 1, c, c + 1, 3 * c])
    tensor, chunk = t >> 32, t & 0xFFFFFFFF
    np.testing.assert_array_equal(tensor, [1, 2, 3, 3, 4, 4, 4])
    np.testing.assert_array_equal(chunk, [0, 0, 0, 1, 0, 1, 2])
    assert optimizers.chunk_table([]).size == 0
