"""Every CUDA C++ kernel instantiation compiles (nvcc for sm_90; NVRTC too when installed). No GPU needed."""
import importlib
import shutil
import subprocess

import pytest
from helpers import kernel_source

# every module of CUDA C++ kernels (name_expressions() + SOURCE_FILES, its .cu files, read by
# helpers.kernel_source); the per-family compile tests add their own checks (spills, shared memory, plans) on top
KERNEL_MODULES = ["cudakit.kernels.elementwise", "cudakit.kernels.normalization", "cudakit.kernels.reduction",
                  "cudakit.kernels.softmax", "cudakit.kernels.cross_entropy", "cudakit.kernels.transpose",
                  "cudakit.kernels.dropout", "cudakit.kernels.pooling"]


def nvcc_compile_source(source: str, tmp_path, extra=()):
    """Compile CUDA C++ `source` with nvcc for sm_90 (skips without nvcc); returns the compiler's
    stderr (ptxas's report with extra=("-Xptxas", "-v"))."""
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc is not on the PATH")
    src = tmp_path / "k.cu"
    src.write_text(source)
    r = subprocess.run([nvcc, "-std=c++17", "-arch=sm_90", "-cubin", *extra, "-o", str(tmp_path / "k.cubin"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    assert (tmp_path / "k.cubin").stat().st_size > 1000
    return r.stderr


def nvcc_compile(mod, tmp_path, names=None, extra=()):
    """Compile every name expression of kernel module `mod` with nvcc for sm_90 (skips without
    nvcc); returns the compiler's stderr (ptxas's report with extra=("-Xptxas", "-v"))."""
    names = mod.name_expressions() if names is None else names
    # taking each template's address forces its instantiation
    refs = "\n".join(f"void* ck_ref_{i} = (void*)&{e};" for i, e in enumerate(names))
    return nvcc_compile_source(kernel_source(mod) + "\n" + refs + "\n", tmp_path, extra)


@pytest.mark.parametrize("modname", KERNEL_MODULES)
def test_nvcc_compiles_every_instantiation(modname, tmp_path):
    nvcc_compile(importlib.import_module(modname), tmp_path)


@pytest.mark.parametrize("modname", KERNEL_MODULES + ["cudakit.kernels.optimizers"])
def test_nvrtc_compiles_every_instantiation(modname, cache_dir):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from cudakit.runtime import compiler
    try:
        compiler.nvrtc_version()
    except Exception as e:
        pytest.skip(f"NVRTC library not loadable: {e}")
    mod = importlib.import_module(modname)
    compiler._memory_cache.clear()
    binary, mapping = compiler.compile_to_cubin(kernel_source(mod), name_expressions=mod.name_expressions(), arch="sm_90")
    assert len(binary) > 1000 and set(mapping) == set(mod.name_expressions())
    # second call: served from cache, and the disk entry exists
    assert compiler.compile_to_cubin(kernel_source(mod), name_expressions=mod.name_expressions(), arch="sm_90")[0] == binary
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


def test_fast_math_only_for_16_bit_storage(tmp_path):
    """float64 kernels stay in double precision and 16-bit storage takes the fast path (a lost
    double overload once sent float64 gelu_erf through float32 math)."""
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc is not on the PATH")
    from cudakit.kernels import elementwise as ew
    for dt, fast in (("float64", False), ("bfloat16", True), ("float16", True)):
        names = [ew._expr("contig", op, dt, 1) for op in ("gelu_erf", "gelu_erf_backward")]
        refs = "\n".join(f"void* ck_ref_{i} = (void*)&{e};" for i, e in enumerate(names))
        (tmp_path / "k.cu").write_text(kernel_source(ew) + "\n" + refs + "\n")
        r = subprocess.run([nvcc, "-std=c++17", "-arch=sm_90", "-ptx", "-o", str(tmp_path / "k.ptx"),
                            str(tmp_path / "k.cu")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        ptx = (tmp_path / "k.ptx").read_text()
        assert ("ex2.approx.ftz.f32" in ptx) == fast, dt
        if dt == "float64":
            assert "cvt.rn.f32.f64" not in ptx  # no detour through float32


def test_contiguous_kernel_shapes_follow_the_tuned_table():
    from cudakit.kernels import elementwise as ew, ew_shapes
    assert ("div", "float32") not in ew.TUNED and ew.contig_config("div", "float32") == (ew.UNROLL, ew.THREADS, 0)
    assert ("gelu_erf", "bfloat16") not in ew.TUNED and ew.contig_config("gelu_erf", "bfloat16") == (ew.UNROLL, ew.HEAVY_THREADS, 0)
    assert ew.contig_config("gelu_erf", "float32") == (ew.UNROLL, ew.THREADS, 0)
    for (op, dt), shape in ew.TUNED.items():
        u = shape[0]
        assert ew.contig_config(op, dt) == ew_shapes.full(shape) and ew_shapes.valid(shape)
        assert ew._expr("contig", op, dt, 1).endswith(f", 1, {u}>")
    for name in ew.name_expressions():  # every contiguous instantiation carries its op's U
        if "_contig<" in name:
            assert name.rsplit(", ", 1)[1][:-1].isdigit()


def _ptx(tmp_path, names, arch, *defines, module="cudakit.kernels.elementwise"):
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc is not on the PATH")
    refs = "\n".join(f"void* ck_ref_{i} = (void*)&{e};" for i, e in enumerate(names))
    (tmp_path / "k.cu").write_text(kernel_source(importlib.import_module(module)) + "\n" + refs + "\n")
    r = subprocess.run([nvcc, "-std=c++17", f"-arch={arch}", "-ptx", *defines, "-o", str(tmp_path / "k.ptx"),
                        str(tmp_path / "k.cu")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return (tmp_path / "k.ptx").read_text()


def test_contiguous_loads_take_the_l2_policy_and_release_it(tmp_path):
    """16-byte loads of the contiguous kernels carry an evict_last policy on sm_80+ and every line
    read is handed back to evict_normal (applypriority) after the stores; sm_75 and -DCK_L2_KEEP=0
    keep plain loads; -DCK_L2_RELEASE=0 keeps the policy without the hand-back."""
    from cudakit.kernels import elementwise as ew
    names = [ew._expr("contig", "silu", "bfloat16", 8, 2), ew._expr("contig", "add", "float32", 4, 1)]
    ptx = _ptx(tmp_path, names, "sm_90")
    assert ptx.count("createpolicy.fractional.L2::evict_last") >= 2
    assert "ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32" in ptx
    # one load per input and unroll step: silu U=2 (2), add U=1 with two inputs (2)
    assert ptx.count("applypriority.global.L2::evict_normal") == ptx.count("L2::cache_hint.v4.u32") == 4
    for arch, defines in (("sm_75", ()), ("sm_90", ("-DCK_L2_KEEP=0",))):
        plain = _ptx(tmp_path, names, arch, *defines)
        assert "createpolicy" not in plain and "applypriority" not in plain, (arch, defines)
    kept = _ptx(tmp_path, names, "sm_90", "-DCK_L2_RELEASE=0")
    assert "L2::cache_hint" in kept and "applypriority" not in kept
    # the scalar path (unaligned data, V = 1) has no 16-byte packs and no policy
    scalar = _ptx(tmp_path, [ew._expr("contig", "silu", "bfloat16", 1, 1)], "sm_90")
    assert "createpolicy" not in scalar and "applypriority" not in scalar


def test_dropout_loads_take_the_l2_policy(tmp_path):
    """dropout's 16-byte item loads (float32, 16-bit) carry the L2 policy, one release per load;
    float64's 32-byte items and the unaligned path stay plain."""
    names = ["ck_dropout<float, true>", "ck_dropout<ck_bf16, true>"]
    ptx = _ptx(tmp_path, names, "sm_90", module="cudakit.kernels.dropout")
    assert ptx.count("applypriority.global.L2::evict_normal") == ptx.count("L2::cache_hint.v4.u32") == 4
    plain = _ptx(tmp_path, ["ck_dropout<double, true>", "ck_dropout<float, false>"], "sm_90",
                 module="cudakit.kernels.dropout")
    assert "createpolicy" not in plain and "applypriority" not in plain
