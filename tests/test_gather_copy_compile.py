"""kernels.gather_copy's generated kernel compiles for sm_90 with nvcc (no spills, no stack) and
its parameters fit the native launcher's 64. No GPU needed; the copy itself is checked
against NumPy in tests/gpu/test_gather_copy_gpu.py."""
import re
import shutil
import subprocess

import pytest

from cudakit.kernels import gather_copy as gc


def test_parameters_fit_a_launch():
    assert 2 + 3 * gc.MAX_SOURCES <= 64   # runtime/_native.c CK_MAX_PARAMS
    assert len(re.findall(r"long long s\d+", gc.SOURCE)) == gc.MAX_SOURCES
    assert gc.CHUNK % (16 * gc.THREADS) == 0


def test_nvcc_compiles_without_spills(tmp_path):
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc is not on the PATH")
    src = tmp_path / "g.cu"
    src.write_text(gc.SOURCE)
    r = subprocess.run([nvcc, "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "g.cubin"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "ck_gather_copy" in r.stderr
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    assert spills == [("0", "0")], r.stderr
    assert re.findall(r"(\d+) bytes stack frame", r.stderr) == ["0"], r.stderr


def test_peer_allreduce_add_kernel_compiles_for_sm90(tmp_path):
    """distributed/peer_allreduce.py's sum of two halves, every float dtype (nvcc, sm_90)."""
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc is not on the PATH")
    from cudakit.distributed import peer_allreduce as pa
    from cudakit.kernels._common import cuda_source
    refs = "\n".join(f"void* r{i} = (void*)&ck_peer_add<{c}>;" for i, c in enumerate(pa._CTYPES.values()))
    src = tmp_path / "p.cu"
    src.write_text(cuda_source("_preamble.cuh") + pa._REDUCE + refs + "\n")
    r = subprocess.run([nvcc, "-std=c++17", "-arch=sm_90", "-cubin", "-o", str(tmp_path / "p.cubin"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
