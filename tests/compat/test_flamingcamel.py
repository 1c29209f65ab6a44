"""Seed 000 (FlamingCamel's frontend/backend.py) through cudakit.compat.flamingcamel.

Blocks of seeds/000_flamingcamel.md: 0 the module listing (its API), 1 the test file ("Verify it
works"), 2 the kernels' .cu listing, 3 the usage example.
"""
import shutil

import numpy as np
import pytest
import seed_doc

import cudakit
from cudakit.compat import flamingcamel as fc
from cudakit.errors import BackendUnavailableError, LaunchError, ShapeError

DOC = "000_flamingcamel"
IMPORTS = {
    "from frontend.backend import get_backend, cuda_add, is_cuda_available":
        "from cudakit.compat.flamingcamel import get_backend, cuda_add, is_cuda_available",
    "from frontend.backend import cuda_add, is_cuda_available":
        "from cudakit.compat.flamingcamel import cuda_add, is_cuda_available",
}
KERNELS = ("add_kernel", "mul_kernel", "relu_kernel", "relu_backward_kernel")


def test_seed_copy_is_verbatim():
    seed_doc.compare_with_shared(DOC)


def test_every_documented_function_has_the_documented_signature():
    documented = seed_doc.signatures(seed_doc.blocks(DOC)[0][1])
    assert len(documented) == 12
    for name, params in documented.items():
        obj = fc
        for part in name.split("."):
            obj = getattr(obj, part)
        fn = obj.fget if isinstance(obj, property) else obj
        seed_doc.assert_signature(fn, params, name)


def test_verify_example_without_a_gpu(no_gpu, capsys):
    """The test file as its __main__ runs it, on a machine without CuPy or a GPU: the
    initialisation and grid tests pass, test_cuda_add returns at its availability check. Its
    `import cupy as cp` line cannot run without CuPy and is dropped (cp is not reached)."""
    imports = dict(IMPORTS, **{"import cupy as cp": "pass  # CuPy absent: cp is not reached without a GPU"})
    seed_doc.run(DOC, 1, imports, {"__name__": "__main__"})
    out = capsys.readouterr().out
    assert "CUDA available: False" in out and "Grid/block calculation test passed" in out
    assert "Skipping CUDA test: no GPU available" in out


@pytest.mark.cuda
def test_verify_example(capsys):
    seed_doc.run(DOC, 1, IMPORTS, {"__name__": "__main__"})
    out = capsys.readouterr().out
    assert "CUDA available: True" in out and "CUDA add kernel test passed" in out


@pytest.mark.cuda
def test_usage_example(capsys):
    ns = seed_doc.run(DOC, 3, IMPORTS)
    np.testing.assert_array_equal(ns["out"].get(), [5, 7, 9])
    assert "[5. 7. 9.]" in capsys.readouterr().out


def _ptx(tmp_path, compiler, arch):
    path = tmp_path / "backend" / "ops_elementwise.ptx"
    ptx = cudakit.compile_ptx(seed_doc.blocks(DOC)[2][1], path=path, arch=arch, compiler=compiler,
                              source_name="ops_elementwise.cu")
    assert path.read_text() == ptx
    return ptx


def test_cu_listing_compiles_to_ptx_that_load_kernel_reads(tmp_path):
    """The seed's ./scripts/compile_kernels.sh step: nvcc through cudakit.compile_ptx, then
    load_kernel reads the PTX file (without a GPU the kernel stays unloaded)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on the PATH")
    ptx = _ptx(tmp_path, "nvcc", "sm_90")
    assert ".target sm_90" in ptx
    backend = fc.CUDABackend(root=tmp_path)
    for name in KERNELS:
        k = backend.load_kernel(name, "backend/ops_elementwise.ptx")
        assert k is backend.load_kernel(name, "backend/ops_elementwise.ptx")   # cached
    assert backend.load_kernel("add_kernel", "backend/ops_elementwise.ptx").params == ["u64", "u64", "u64", "u32"]
    assert backend.load_kernel("relu_kernel", "backend/ops_elementwise.ptx").params == ["u64", "u64", "u32"]
    with pytest.raises(LaunchError, match="no kernel named 'sub_kernel'.*add_kernel, mul_kernel"):
        backend.load_kernel("sub_kernel", "backend/ops_elementwise.ptx")
    with pytest.raises(FileNotFoundError, match="PTX file not found: .*missing.ptx"):
        backend.load_kernel("add_kernel", "backend/missing.ptx")
    with pytest.raises(TypeError, match="kernel_name"):
        backend.load_kernel(None, "backend/ops_elementwise.ptx")


def test_ptx_scalar_arguments_take_the_declared_types(tmp_path):
    """A Python int goes to an .u32 parameter as uint32 (one out of range raises naming it), and
    the argument count must match, before anything is launched."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on the PATH")
    _ptx(tmp_path, "nvcc", "sm_90")
    k = fc.CUDABackend(root=tmp_path).load_kernel("add_kernel", "backend/ops_elementwise.ptx")
    a = np.zeros(3, np.float32)
    conv = k._convert((a, a, a, 3))
    assert type(conv[3]) is np.uint32 and conv[3] == 3 and conv[0] is a
    with pytest.raises(LaunchError, match=r"args\[3\]: 4294967296 does not fit"):
        k._convert((a, a, a, 2**32))
    with pytest.raises(LaunchError, match="takes 4 arguments \\(got 3\\)"):
        k((1,), (32,), (a, a, a))


def test_ptx_scalars_pass_as_the_parameter_bits_numpy_scalars_too():
    """nvcc declares a C int .u32: -1 passes as its 32-bit pattern, NumPy scalars are converted as
    Python ones (an int64 to .u32 was passed as 8 bytes, a float32 to .f64 as 4), and a value
    outside the parameter's range raises naming it."""
    conv = fc._scalar_param
    assert conv(-1, "u32", 3, "k") == np.uint32(0xFFFFFFFF) and type(conv(-1, "u32", 3, "k")) is np.uint32
    assert conv(np.int64(7), "u32", 3, "k") == 7 and type(conv(np.int64(7), "u32", 3, "k")) is np.uint32
    assert conv(2**32 - 1, "s32", 0, "k") == -1 and type(conv(2**32 - 1, "s32", 0, "k")) is np.int32
    assert type(conv(np.float32(2.5), "f64", 1, "k")) is np.float64 and conv(np.float32(2.5), "f64", 1, "k") == 2.5
    assert type(conv(np.int32(3), "f32", 1, "k")) is np.float32
    assert conv(True, "u8", 0, "k") == 1
    assert type(conv(np.float32(2.5), "b32", 0, "k")) is np.float32 and type(conv(1.5, "b64", 0, "k")) is np.float64
    assert conv(3.40282347e38, "f32", 0, "k") == np.finfo(np.float32).max   # (rounds to FLT_MAX, no warning)
    for bad, t in ((np.int64(2**40), "u32"), (-(2**31) - 1, "u32"), (2**32, "s32"), (np.float32(2.0), "u32"),
                   (2.0, "s64"), (2**200, "f32"), (1e300, "f32"), (2**2000, "f64"), (1.5, "b8")):
        with pytest.raises(LaunchError, match=r"args\[2\]: .* does not fit the kernel's \." + t):
            conv(bad, t, 2, "k")
    assert np.isnan(conv(float("nan"), "f32", 0, "k")) and conv(float("inf"), "f32", 0, "k") == np.inf
    a = np.zeros(3, np.float32)
    assert conv(a, "u64", 0, "k") is a   # arrays pass as they come (pointers)


def test_load_kernel_cache_follows_the_working_directory(tmp_path, monkeypatch):
    """A relative PTX path names another file after a chdir: load_kernel loads that one (its cache
    was keyed on the path as given and returned the first directory's kernel)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on the PATH")
    (tmp_path / "d1").mkdir()
    (tmp_path / "d2" / "backend").mkdir(parents=True)
    _ptx(tmp_path / "d1", "nvcc", "sm_90")
    cudakit.compile_ptx('extern "C" __global__ void add_kernel(float* x, int n) { if (n) x[0] = 1.0f; }',
                        path=tmp_path / "d2" / "backend" / "ops_elementwise.ptx", arch="sm_90", compiler="nvcc")
    backend = fc.CUDABackend()
    monkeypatch.chdir(tmp_path / "d1")
    k1 = backend.load_kernel("add_kernel", "backend/ops_elementwise.ptx")
    monkeypatch.chdir(tmp_path / "d2")
    k2 = backend.load_kernel("add_kernel", "backend/ops_elementwise.ptx")
    assert k1.params == ["u64", "u64", "u64", "u32"] and k2.params == ["u64", "u32"]
    assert backend.load_kernel("add_kernel", "backend/ops_elementwise.ptx") is k2   # (a hit: the same object)
    assert backend.load_kernel("add_kernel", tmp_path / "d2" / "backend" / "ops_elementwise.ptx").params == k2.params
    with pytest.raises(TypeError, match="ptx_file must be a str or a path"):
        backend.load_kernel("add_kernel", None)


def test_ptx_through_nvrtc(tmp_path):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    try:
        ptx = _ptx(tmp_path, "nvrtc", "sm_90")
    except BackendUnavailableError as e:
        pytest.skip(f"NVRTC not loadable: {e}")
    assert ".target sm_90" in ptx and all(f".entry {k}" in ptx for k in KERNELS)


def test_compile_ptx_bad_input(tmp_path):
    with pytest.raises(ValueError, match="compiler must be 'nvrtc' or 'nvcc'"):
        cudakit.compile_ptx("", arch="sm_90", compiler="clang")
    with pytest.raises(ValueError, match="arch must be like 'sm_90'"):
        cudakit.compile_ptx("", arch="90", compiler="nvcc")
    if shutil.which("nvcc") is None:
        return
    with pytest.raises(cudakit.CompileError, match="broken.cu"):
        cudakit.compile_ptx('extern "C" __global__ void k() { x }', arch="sm_90", compiler="nvcc",
                            source_name="broken.cu")


@pytest.mark.cuda
def test_ptx_workflow_runs_each_kernel(tmp_path, rng):
    """PTX from the seed's .cu listing (NVRTC, the current GPU), loaded by load_kernel and
    launched as the seed launches it; results against NumPy."""
    import cupy as cp
    _ptx(tmp_path, "nvrtc", None)
    backend = fc.CUDABackend(root=tmp_path)
    n = 1000
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    da, db, out = cp.asarray(a), cp.asarray(b), cp.full(n, cp.nan, cp.float32)
    grid, block = backend.get_grid_block_size(n)
    want = {"add_kernel": a + b, "mul_kernel": a * b}
    for name, ref in want.items():
        backend.load_kernel(name, "backend/ops_elementwise.ptx")((grid,), (block,), (da, db, out, n))
        backend.check_cuda_error()
        np.testing.assert_array_equal(out.get(), ref)
    backend.load_kernel("relu_kernel", "backend/ops_elementwise.ptx")((grid,), (block,), (da, out, n))
    np.testing.assert_array_equal(out.get(), np.maximum(a, 0))
    backend.load_kernel("relu_backward_kernel", "backend/ops_elementwise.ptx")((grid,), (block,), (db, da, out, n))
    np.testing.assert_array_equal(out.get(), np.where(a > 0, b, 0))


@pytest.mark.cuda
def test_cuda_add_is_cudakit_add_and_checks_shapes(rng):
    import cupy as cp
    a = cp.asarray(rng.standard_normal((4, 33)).astype(np.float32))
    b = cp.asarray(rng.standard_normal((4, 33)).astype(np.float32))
    out = cp.empty_like(a)
    assert fc.cuda_add(a, b, out) is None
    np.testing.assert_array_equal(out.get(), cudakit.add(a, b).get())
    with pytest.raises(ShapeError, match="out must have shape"):
        fc.cuda_add(a, b, cp.empty(3, cp.float32))
    fc.synchronize()
    free, total = fc.memory_info()
    assert 0 < free <= total
    assert "GPU Memory:" in fc.print_memory_info()


def test_helpers_without_a_gpu(no_gpu):
    """Seed 000 documents these as safe without CUDA."""
    assert fc.is_cuda_available() is False and fc.get_backend() is fc.get_backend()
    fc.synchronize()
    fc.empty_cache()
    fc.get_backend().check_cuda_error()
    assert fc.memory_info() == (0, 0)
    assert fc.print_memory_info() == "CUDA not available"
    with pytest.raises(RuntimeError, match="cuda_add needs a usable CUDA GPU"):
        fc.cuda_add(np.ones(3, np.float32), np.ones(3, np.float32), np.empty(3, np.float32))


def test_grid_block_size_bad_input():
    backend = fc.get_backend()
    assert backend.get_grid_block_size(0) == (0, 256)
    with pytest.raises(ValueError, match="n must be >= 0"):
        backend.get_grid_block_size(-1)
    with pytest.raises(TypeError, match="threads_per_block must be an int"):
        backend.get_grid_block_size(10, 2.5)
    with pytest.raises(LaunchError, match=r"^get_grid_block_size: threads_per_block must be <= 1024 \(got 2048\)$"):
        backend.get_grid_block_size(10, 2048)
    with pytest.raises(LaunchError, match=r"^grid must be <= 2147483647 blocks \(got 4294967296\)"):
        backend.get_grid_block_size(2**40)


def test_compat_doc_names_every_documented_function():
    names = {n.split(".")[-1] for n in seed_doc.signatures(seed_doc.blocks(DOC)[0][1])} - {"__init__"}
    seed_doc.assert_in_compat_doc(DOC, names | set(KERNELS) | {"CUDABackend", "_backend"})
