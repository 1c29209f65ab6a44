"""kernels.gather_copy's generated kernel compiles for sm_90 with nvcc (no spills, no stack) and
its parameters fit the native launcher's 64. No GPU needed; the copy itself is checked
against NumPy in tests/gpu/test_gather_copy_gpu.py."""
import re

from test_kernels_compile import nvcc_compile_source

from cudakit.kernels import gather_copy as gc


def test_parameters_fit_a_launch():
    assert 2 + 3 * gc.MAX_SOURCES <= 64   # runtime/_native.c CK_MAX_PARAMS
    assert len(re.findall(r"long long s\d+", gc.SOURCE)) == gc.MAX_SOURCES
    assert gc.CHUNK % (16 * gc.THREADS) == 0


def test_nvcc_compiles_without_spills(tmp_path):
    log = nvcc_compile_source(gc.SOURCE, tmp_path, ("-Xptxas", "-v"))
    assert "ck_gather_copy" in log
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills == [("0", "0")], log
    assert re.findall(r"(\d+) bytes stack frame", log) == ["0"], log


def test_peer_allreduce_add_kernel_compiles_for_sm90(tmp_path):
    """distributed/peer_allreduce.py's sum of two halves, every float dtype (nvcc, sm_90)."""
    from cudakit.distributed import peer_allreduce as pa
    from cudakit.kernels._common import cuda_source
    refs = "\n".join(f"void* r{i} = (void*)&ck_peer_add<{c}>;" for i, c in enumerate(pa._CTYPES.values()))
    nvcc_compile_source(cuda_source("_preamble.cuh") + pa._REDUCE + refs + "\n", tmp_path)
