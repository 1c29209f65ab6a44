"""Seed 001 (pydotcompute's CUDABackend) through cudakit.compat.pydotcompute.

Blocks of seeds/001_pydotcompute.md: 0 overview, 1 pip (bash), 2-15 the class's API listing,
16 basic computation, 17 Numba kernel, 18 memory management, 19 multi-GPU, 20 kernel caching.
"""
import numpy as np
import pytest
import seed_doc

import cudakit
from cudakit.compat import pydotcompute as pdc
from cudakit.errors import DeviceError, DTypeError, ShapeError

DOC = "001_pydotcompute"
IMPORTS = {"from pydotcompute.backends.cuda import CUDABackend": "from cudakit.compat.pydotcompute import CUDABackend"}


def my_func(x):
    """The function block 20 compiles (the document does not define it): a kernel of one float32."""
    y = x * 2  # noqa: F841


def test_seed_copy_is_verbatim():
    seed_doc.compare_with_shared(DOC)


def test_every_documented_member_has_the_documented_signature():
    code = "\n".join(seed_doc.blocks(DOC)[i][1] for i in range(2, 16))
    documented = seed_doc.signatures(code)
    assert len(documented) == 14
    for name, params in documented.items():
        attr = getattr(pdc.CUDABackend, name.split(".")[-1])
        fn = attr.fget if isinstance(attr, property) else attr
        seed_doc.assert_signature(fn, params, name)


def test_overview_example():
    ns = seed_doc.run(DOC, 0, IMPORTS)
    assert ("backend" in ns) == cudakit.is_available()


def _numba_block():
    """Block 17 as written is not Python: `grid=...` and `block=...` are keywords followed by
    positional arguments. The only change besides the imports: those two passed positionally."""
    code = seed_doc.example(DOC, 17, IMPORTS)
    fixed = code.replace("    grid=(blocks,),\n    block=(threads_per_block,),\n",
                         "    (blocks,),\n    (threads_per_block,),\n")
    assert fixed.count("\n") == code.count("\n") and fixed != code
    return code, fixed


def test_numba_example_as_written_is_a_syntax_error():
    code, fixed = _numba_block()
    with pytest.raises(SyntaxError, match="positional argument follows keyword argument"):
        compile(code, "block 17", "exec")
    compile(fixed, "block 17 fixed", "exec")


def test_cuda_backend_without_cuda_raises_runtime_error(no_gpu):
    assert pdc.CUDABackend.check_available() is False
    assert pdc.CPUBackend.check_available() is True   # (either class may be asked, as the seed's classmethod)
    with pytest.raises(RuntimeError, match="CUDABackend needs a usable CUDA GPU"):
        pdc.CUDABackend(device_id=0)


def test_bad_arguments_name_themselves():
    with pytest.raises(TypeError, match="device_id must be an int"):
        pdc.CUDABackend(device_id="0")
    with pytest.raises(ValueError, match="device_id must be >= 0"):
        pdc.CUDABackend(device_id=-1)
    with pytest.raises(TypeError, match="enable_caching must be True or False"):
        pdc.CUDABackend(enable_caching=1)
    with pytest.raises(TypeError):
        pdc.CUDABackend(0)   # keyword-only, as documented


def test_cpu_backend_fallback(rng):
    be = pdc.CPUBackend()
    assert be.name == "cpu" and be.is_available and isinstance(be, pdc.Backend)
    a = rng.standard_normal(100).astype(np.float32)
    d = be.to_device(a)
    assert isinstance(d, np.ndarray) and d is not a
    np.testing.assert_array_equal(be.to_host(d), a)
    x = be.allocate((3, 4))
    assert x.shape == (3, 4) and x.dtype == np.float32
    assert be.allocate(5, np.float64).dtype == np.float64
    be.synchronize()
    with pytest.raises(ShapeError, match="shape must be a tuple of ints >= 0"):
        be.allocate((2, -1))
    with pytest.raises(DTypeError, match="dtype: 'nope' is not a NumPy dtype"):
        be.allocate((2,), "nope")
    # None is the documented float32 default (NumPy's would be float64); bfloat16 by name as cudakit's
    # backends take it; object, string and structured dtypes are not arrays of numbers
    assert be.allocate((2,), None).dtype == np.float32 and be.allocate((2,), "bfloat16").dtype.name == "bfloat16"
    for dt in (object, "<U3", [("a", "f4")]):
        with pytest.raises(DTypeError, match="is not a numeric dtype"):
            be.allocate((2,), dt)
    from cudakit.errors import ArgumentTypeError
    for call in (be.to_host, be.to_device):
        for bad in (None, "abc", object(), {"a": 1}):
            with pytest.raises(ArgumentTypeError, match="data must be an array"):
                call(bad)
    import array   # (what NumPy makes numbers of passes: a range, a memoryview, an array.array)
    for good in (range(4), memoryview(np.arange(4.0)), array.array("d", [0.0, 1.0, 2.0, 3.0])):
        np.testing.assert_array_equal(be.to_device(good), np.arange(4))


def test_cpu_backend_answers_the_cuda_backends_device_calls():
    """The seed's Memory Management example, and the device properties, on the fallback."""
    from cudakit.errors import BackendUnavailableError
    backend = pdc.CPUBackend()
    free, total = backend.get_memory_info()
    assert 0 < free <= total
    max_elements = free // 4
    arr = backend.allocate((min(max_elements, 1_000_000),), dtype=np.float32)
    assert arr.shape == (1_000_000,)
    assert (backend.device_id, backend.device_name, backend.compute_capability) == (-1, "cpu", (0, 0))
    for call in (lambda: backend.compile_kernel(lambda a: None, (np.float32,)),
                 lambda: backend.launch_kernel(None, (1,), (1,))):
        with pytest.raises(BackendUnavailableError, match="CPU fallback"):
            call()


@pytest.mark.cuda
def test_basic_gpu_computation():
    import cupy as cp
    ns = seed_doc.run(DOC, 16, IMPORTS)
    be = ns["backend"]
    assert isinstance(ns["a_gpu"], cp.ndarray) and ns["c_gpu"].dtype == cp.float32
    want = be.to_host(ns["a_gpu"]) + be.to_host(ns["b_gpu"])
    np.testing.assert_array_equal(ns["result"], want)
    assert isinstance(ns["result"], np.ndarray)


@pytest.mark.cuda
def test_numba_kernel_example(rng):
    pytest.importorskip("numba")
    _, fixed = _numba_block()
    a = rng.standard_normal(1000).astype(np.float32)
    b = rng.standard_normal(1000).astype(np.float32)
    ns = {"CUDABackend": pdc.CUDABackend, "a": a, "b": b}   # defined by the document's earlier blocks
    exec(seed_doc.compiled(fixed, "<001 block 17>"), ns)
    np.testing.assert_allclose(ns["result"], a + b, rtol=0, atol=0)


@pytest.mark.cuda
def test_memory_management_example():
    ns = seed_doc.run(DOC, [0, 18], IMPORTS, {"np": np})   # np: imported by the document's block 16
    free, total = ns["free"], ns["total"]
    assert 0 < free <= total
    assert ns["arr"].shape == (min(free // 4, 1_000_000),) and ns["arr"].dtype == np.float32


@pytest.mark.cuda
@pytest.mark.multi_gpu
def test_multi_gpu_example():
    ns = seed_doc.run(DOC, 19, IMPORTS, {"CUDABackend": pdc.CUDABackend})
    assert ns["data_gpu0"].device.id == 0 and ns["data_gpu1"].device.id == 1


@pytest.mark.cuda
def test_kernel_caching_example():
    pytest.importorskip("numba")
    ns = seed_doc.run(DOC, 20, IMPORTS, {"CUDABackend": pdc.CUDABackend, "my_func": my_func, "np": np})
    be = ns["backend"]
    assert be.compile_kernel(my_func, (np.float32,)) is ns["kernel"]
    uncached = pdc.CUDABackend(enable_caching=False)
    assert uncached.compile_kernel(my_func, (np.float32,)) is not uncached.compile_kernel(my_func, (np.float32,))
    with pytest.raises(DTypeError, match=r"signature\[0\]"):
        be.compile_kernel(my_func, (object,))


@pytest.mark.cuda
def test_properties_transfers_and_launch(rng):
    import cupy as cp
    be = pdc.CUDABackend()
    info = cudakit.get_device_info(0)
    assert be.name == "cuda" and be.is_available and be.device_id == 0
    assert be.device_name == info.name and be.compute_capability == info.compute_capability
    free, total = be.get_memory_info()
    assert 0 < free <= total == info.total_memory
    x = rng.standard_normal((7, 5)).astype(np.float64)
    d = be.to_device(x)
    assert isinstance(d, cp.ndarray) and d.dtype == np.float64
    np.testing.assert_array_equal(be.to_host(d), x)
    k = cudakit.compile(r'extern "C" __global__ void twice(double* x, int n) {'
                        r' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2; }', "twice")
    be.launch_kernel(k, (1,), (64,), d, np.int32(d.size))
    be.synchronize()
    np.testing.assert_array_equal(be.to_host(d), 2 * x)
    # "Wait for all GPU operations to complete": another stream's too (a kernel spinning ~50 ms there)
    spin = cudakit.compile(r'extern "C" __global__ void spin(long long cycles) {'
                           r' long long t0 = clock64(); while (clock64() - t0 < cycles) {} }', "spin")
    side = cp.cuda.Stream(non_blocking=True)
    with side:
        be.launch_kernel(spin, (1,), (1,), np.int64(100_000_000))
        done = cp.cuda.Event(disable_timing=True)
        done.record(side)
    be.synchronize()
    assert done.done
    with pytest.raises(TypeError, match="kernel must be a compiled kernel"):
        be.launch_kernel(object(), (1,), (1,))
    with pytest.raises(cudakit.LaunchError, match="block must be <= 1024 threads"):
        be.launch_kernel(k, (1,), (2048,), d, np.int32(d.size))
    with pytest.raises(DeviceError):
        pdc.CUDABackend(device_id=cudakit.device_count())


def test_compat_doc_names_every_documented_member():
    code = "\n".join(seed_doc.blocks(DOC)[i][1] for i in range(2, 16))
    names = {n.split(".")[-1] for n in seed_doc.signatures(code)} - {"__init__"}
    seed_doc.assert_in_compat_doc(DOC, names | {"CUDABackend", "Backend", "CPUBackend"})
