"""Every CUDA C++ kernel instantiation compiles (nvcc for sm_90; NVRTC too when installed). No GPU needed."""
import importlib
import shutil
import subprocess

import pytest

KERNEL_MODULES = ["cudakit.kernels.elementwise"]


@pytest.mark.parametrize("modname", KERNEL_MODULES)
def test_nvcc_compiles_every_instantiation(modname, tmp_path):
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc is not on the PATH")
    mod = importlib.import_module(modname)
    # taking each template's address forces its instantiation
    refs = "\n".join(f"void* ck_ref_{i} = (void*)&{e};" for i, e in enumerate(mod.name_expressions()))
    src = tmp_path / "k.cu"
    src.write_text(mod.SOURCE + "\n" + refs + "\n")
    r = subprocess.run([nvcc, "-std=c++17", "-arch=sm_90", "-cubin", "-o", str(tmp_path / "k.cubin"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    assert (tmp_path / "k.cubin").stat().st_size > 1000


@pytest.mark.parametrize("modname", KERNEL_MODULES)
def test_nvrtc_compiles_every_instantiation(modname, cache_dir):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from cudakit.runtime import compiler
    try:
        compiler.nvrtc_version()
    except Exception as e:
        pytest.skip(f"NVRTC library not loadable: {e}")
    mod = importlib.import_module(modname)
    compiler._memory_cache.clear()
    binary, mapping = compiler.compile_to_cubin(mod.SOURCE, name_expressions=mod.name_expressions(), arch="sm_90")
    assert len(binary) > 1000 and set(mapping) == set(mod.name_expressions())
    # second call: served from cache, and the disk entry exists
    assert compiler.compile_to_cubin(mod.SOURCE, name_expressions=mod.name_expressions(), arch="sm_90")[0] == binary
    assert compiler.cache_info()["entries"] == 1


def test_compile_error_shows_log(cache_dir):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from cudakit.errors import CompileError
    from cudakit.runtime import compiler
    try:
        compiler.nvrtc_version()
    except Exception as e:
        pytest.skip(f"NVRTC library not loadable: {e}")
    with pytest.raises(CompileError) as ei:
        compiler.compile_to_cubin('extern "C" __global__ void k(float* x) { x[0] = 1.0f }', arch="sm_90",
                                  source_name="broken.cu")
    assert "broken.cu(1)" in str(ei.value) and "expected" in ei.value.log
