"""Seed 004 (NeuralScript's CUDA backend) through cudakit.compat.neuralscript.

Python blocks of seeds/004_neuralscript.md: 1 basic usage, 2 ML operations, 6 memory pools,
7 kernel generation, 8 multi-GPU, 9 benchmark tester, 10 custom benchmarks, 11 profiling,
15 logging, 16 device check, 17 result validation, 18-20 the API reference. The others are
diagrams, tables and messages.
"""
import json
import shutil
import subprocess

import numpy as np
import pytest
import seed_doc

import cudakit
from cudakit.compat import neuralscript as ns_mod
from cudakit.compat.neuralscript import (ActivationType, ConvolutionConfig, CudaDataType, CudaTensor,
                                         get_cuda_backend, get_cuda_math, get_cuda_ml, get_kernel_generator)
from cudakit.errors import DeviceError, DTypeError, ShapeError

DOC = "004_neuralscript"
IMPORTS = {
    "from compiler.backend.cuda_backend import get_cuda_backend":
        "from cudakit.compat.neuralscript import get_cuda_backend",
    "from compiler.backend.cuda_math import get_cuda_math": "from cudakit.compat.neuralscript import get_cuda_math",
    "from compiler.backend.cuda_ml import get_cuda_ml, ConvolutionConfig, ActivationType":
        "from cudakit.compat.neuralscript import get_cuda_ml, ConvolutionConfig, ActivationType",
    # block 7 uses CudaDataType without importing it: its import line names it too
    "from compiler.backend.cuda_kernels import get_kernel_generator":
        "from cudakit.compat.neuralscript import get_kernel_generator, CudaDataType",
    "from compiler.backend.test_cuda_performance import CudaPerformanceTester, TestConfiguration":
        "from cudakit.compat.neuralscript import CudaPerformanceTester, TestConfiguration",
}


@pytest.fixture
def profiling_off():
    """Blocks 11 turns the process backend's profiling on: off again after the test."""
    yield
    get_cuda_backend().set_profiling(False)


def test_seed_copy_is_verbatim():
    seed_doc.compare_with_shared(DOC)


def test_api_reference_signatures():
    classes = {"CudaBackend": ns_mod.CudaBackend, "CudaMath": ns_mod.CudaMath, "CudaML": ns_mod.CudaML}
    names = []
    for i in (18, 19, 20):
        for name, params in seed_doc.signatures(seed_doc.blocks(DOC)[i][1]).items():
            cls, member = name.split(".")
            seed_doc.assert_signature(getattr(classes[cls], member), params, name)
            names.append(name)
    assert len(names) == 29


def test_basic_usage_example(rng):
    ns = seed_doc.run(DOC, 1, IMPORTS)
    assert ns["result_cpu"].shape == (1000, 1000) and ns["result_cpu"].dtype == np.float32
    assert len(ns["cuda_backend"].devices) == cudakit.device_count()
    for name in ("a", "b", "result"):
        with pytest.raises(ValueError, match="released by free_tensor"):
            ns["cuda_math"].to_numpy(ns[name])


def test_matrix_multiply_matches_float64(rng):
    m = get_cuda_math()
    a, b = rng.random((67, 45)).astype(np.float32), rng.random((45, 31)).astype(np.float32)
    got = m.to_numpy(m.matrix_multiply(m.from_numpy(a), m.from_numpy(b)))
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))
    t = m.from_numpy(a)
    np.testing.assert_array_equal(m.to_numpy(m.matrix_transpose(t)), a.T)
    np.testing.assert_array_equal(m.to_numpy(m.relu(t)), np.maximum(a, 0))
    np.testing.assert_allclose(m.to_numpy(m.reduce_sum(t, axis=0)), a.astype(np.float64).sum(0), rtol=1e-5)
    np.testing.assert_array_equal(m.to_numpy(m.vector_add(t, t)), a + a)
    z = m.create_tensor((3, 4), CudaDataType.FLOAT64)
    assert z.shape == (3, 4) and z.dtype is CudaDataType.FLOAT64 and not m.to_numpy(z).any()


def test_cuda_math_bad_input(rng):
    m = get_cuda_math()
    with pytest.raises(TypeError, match="array must be a NumPy array"):
        m.from_numpy([1, 2])
    with pytest.raises(TypeError, match="a must be a CudaTensor"):
        m.vector_add(np.ones(2), m.from_numpy(np.ones(2, np.float32)))
    with pytest.raises(ShapeError, match="shape must be a tuple of ints >= 0"):
        m.create_tensor((2, -1))
    with pytest.raises(DTypeError, match="dtype must be a CudaDataType"):
        m.create_tensor((2,), "complex64")
    with pytest.raises(ShapeError):
        m.matrix_multiply(m.from_numpy(np.ones((2, 3), np.float32)), m.from_numpy(np.ones((2, 3), np.float32)))
    t = m.from_numpy(np.ones(3, np.float32))
    m.free_tensor(t)
    with pytest.raises(ValueError, match="tensor was released by free_tensor"):
        m.free_tensor(t)
    with pytest.raises(ShapeError, match=r"sizes\[1\] must be a pair of ints >= 1"):
        m.benchmark_operations([(2, 2), (0, 2)])


def test_fallback_mode_without_a_gpu(no_gpu, caplog):
    """Fallback mode has one device, 0, the host: its pool counts allocate_memory()'s buffers (the
    seed's Memory Management example, whose statistics read as a dict), set_device(0) is a no-op;
    no GPU is listed and any other device id is a DeviceError naming fallback mode."""
    be = ns_mod.CudaBackend(enable_profiling=False)
    assert be.fallback and be.devices == [] and list(be.memory_pools) == [0]
    ptr, other = be.allocate_memory(1000, device_id=0), be.allocate_memory(24)
    stats = be.memory_pools[0].get_stats()
    assert (stats["total_allocated"], stats["active_memory"], stats["peak_allocated"], stats["allocation_count"]) \
        == (1024, 1024, 1024, 2)
    assert "active_memory" in stats and stats.get("nope") is None and dict(stats)["frees"] == 0
    be.free_memory(ptr)
    stats = be.memory_pools[0].get_stats()
    assert (stats["active_memory"], stats["peak_allocated"], stats["frees"]) == (24, 1024, 1)
    be.free_memory(other)
    for err in (KeyError, DeviceError):   # (a Mapping's lookup error, and the backend's device error)
        with pytest.raises(err, match="fallback mode has only device 0"):
            be.memory_pools[1]
    assert be.memory_pools.get(1) is None and 1 not in be.memory_pools
    be.set_device(0)
    with pytest.raises(DeviceError, match="fallback mode has only device 0"):
        be.set_device(1)
    with pytest.raises(DeviceError, match=r"no GPU is usable \(fallback mode: device 0 is the host"):
        be.get_device_info(0)
    with pytest.raises(RuntimeError, match="compile_kernel needs a usable CUDA GPU"):
        be.compile_kernel("k", 'extern "C" __global__ void k() {}')
    with pytest.raises(DeviceError, match="only device 0"):
        get_cuda_math().from_numpy(np.ones(2, np.float32), device_id=1)


def test_integer_tensors_take_the_math_ops():
    """CudaDataType.INT32 / INT64 tensors through vector_add, matrix_multiply, relu and reduce_sum
    (the array module's integer arithmetic), in their dtype; mixed dtypes a DTypeError; sigmoid
    needs floats."""
    m = get_cuda_math()
    for dt in (np.int32, np.int64):
        a = m.from_numpy(np.array([[1, -2, 3], [4, 5, -6]], dt))
        one = m.from_numpy(np.ones((2, 3), dt))
        for got, want in ((m.vector_add(a, one), [[2, -1, 4], [5, 6, -5]]), (m.relu(a), [[1, 0, 3], [4, 5, 0]]),
                          (m.reduce_sum(a), 5), (m.reduce_sum(a, 1), [2, 3]),
                          (m.matrix_multiply(a, m.from_numpy(np.ones((3, 2), dt))), [[2, 2], [3, 3]])):
            out = m.to_numpy(got)
            assert out.dtype == dt
            np.testing.assert_array_equal(out, np.asarray(want, dt))
    a = m.from_numpy(np.ones(3, np.int64))
    with pytest.raises(DTypeError, match=r"vector_add: the tensors must have one dtype \(got a int64, b float32\)"):
        m.vector_add(a, m.from_numpy(np.ones(3, np.float32)))
    with pytest.raises(DTypeError, match=r"matrix_multiply: the tensors must have one dtype \(got a int64, b int32\)"):
        m.matrix_multiply(m.from_numpy(np.ones((2, 2), np.int64)), m.from_numpy(np.ones((2, 2), np.int32)))
    with pytest.raises(DTypeError, match="sigmoid"):
        m.sigmoid(a)


def test_raw_memory_is_bounds_checked(rng):
    be = get_cuda_backend()
    ptr = be.allocate_memory(64)
    h = rng.standard_normal(16).astype(np.float32)
    assert be.copy_to_device(h, ptr) >= 0
    back = np.zeros(16, np.float32)
    assert be.copy_from_device(ptr, back) >= 0
    np.testing.assert_array_equal(back, h)
    with pytest.raises(ValueError, match="host_data has 68 bytes but the allocation at device_ptr holds 64"):
        be.copy_to_device(np.zeros(17, np.float32), ptr)
    with pytest.raises(ValueError, match="C-contiguous"):
        be.copy_from_device(ptr, np.zeros((4, 8), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="size must be >= 1"):
        be.allocate_memory(0)
    be.free_memory(ptr)
    with pytest.raises(ValueError, match="is not a live allocation"):
        be.free_memory(ptr)
    with pytest.raises(ValueError, match="is not a live allocation"):
        be.copy_to_device(h, ptr)


def test_ml_operations_on_a_small_input(rng):
    """Block 2's calls on an input small enough for the CPU backend, against float64 references."""
    ml = get_cuda_ml()
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    xt, wt = ml.math.from_numpy(x), ml.math.from_numpy(w)
    y = ml.conv2d(xt, wt, ConvolutionConfig(kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)))
    xd = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((2, 4, 9, 8))
    for r in range(3):
        for s in range(3):
            want += np.einsum("nchw,kc->nkhw", xd[:, :, r:r + 9, s:s + 8], w[:, :, r, s].astype(np.float64))
    got = ml.math.to_numpy(y)
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))
    relu = ml.activation(y, ActivationType.RELU)
    np.testing.assert_array_equal(ml.math.to_numpy(relu), np.maximum(got, 0))
    pooled = ml.max_pool2d(relu, pool_size=(2, 2))
    assert pooled.shape == (2, 4, 4, 4)
    np.testing.assert_array_equal(ml.math.to_numpy(pooled), np.maximum(got, 0)[:, :, :8, :].reshape(
        2, 4, 4, 2, 4, 2).max(axis=(3, 5)))
    kept = ml.math.to_numpy(ml.dropout(relu, keep_prob=0.5))
    assert set(np.unique(kept[np.maximum(got, 0) > 0] / np.maximum(got, 0)[np.maximum(got, 0) > 0]).round(5)) <= {0, 2}
    with pytest.raises(ShapeError, match=r"config.kernel_size \(5, 5\) does not match kernel's window \(3, 3\)"):
        ml.conv2d(xt, wt, ConvolutionConfig(kernel_size=5))
    with pytest.raises(ValueError, match="stride must be an int or a pair of ints >= 1"):
        ConvolutionConfig(stride=(0, 1))
    with pytest.raises(ValueError, match=r"keep_prob must be in \(0, 1\]"):
        ml.dropout(relu, keep_prob=0)
    with pytest.raises(ValueError, match="activation_type must be an ActivationType"):
        ml.activation(relu, "relu")
    g, b = ml.math.from_numpy(np.ones(4, np.float32)), ml.math.from_numpy(np.zeros(4, np.float32))
    mean, var = ml.math.from_numpy(got.mean((0, 2, 3))), ml.math.from_numpy(got.var((0, 2, 3)))
    bn = ml.math.to_numpy(ml.batch_norm(y, g, b, mean, var))
    np.testing.assert_allclose(bn.mean((0, 2, 3)), 0, atol=1e-4)


def test_optimizer_updates(rng):
    ml = get_cuda_ml()
    p = rng.standard_normal(10).astype(np.float32)
    grad = rng.standard_normal(10).astype(np.float32)
    pt, gt = ml.math.from_numpy(p), ml.math.from_numpy(grad)
    ml.sgd_update(pt, gt, None, ns_mod.OptimizerState(lr=0.1))
    np.testing.assert_allclose(ml.math.to_numpy(pt), p - np.float32(0.1) * grad, rtol=1e-6, atol=1e-6)
    m, v = ml.math.create_tensor((10,)), ml.math.create_tensor((10,))
    state = ns_mod.OptimizerState(lr=0.01)
    ml.adam_update(pt, gt, m, v, state)
    assert state.step == 1 and np.allclose(ml.math.to_numpy(m), 0.1 * grad)


def test_one_optimizer_state_over_several_tensors_in_one_call(rng):
    """A list of tensors takes one step with one state: the same update for every tensor, as two
    states called once each give (a shared state called per tensor stepped it per tensor)."""
    ml = get_cuda_ml()
    g = rng.standard_normal(4).astype(np.float32)
    shared = ns_mod.OptimizerState(lr=0.01)
    ps = [ml.math.from_numpy(np.ones(4, np.float32)) for _ in range(2)]
    mv = [(ml.math.create_tensor((4,)), ml.math.create_tensor((4,))) for _ in range(2)]
    for _ in range(2):
        ml.adam_update(ps, [ml.math.from_numpy(g)] * 2, [m for m, _ in mv], [v for _, v in mv], shared)
    alone = ml.math.from_numpy(np.ones(4, np.float32))
    m, v, own = ml.math.create_tensor((4,)), ml.math.create_tensor((4,)), ns_mod.OptimizerState(lr=0.01)
    for _ in range(2):
        ml.adam_update(alone, ml.math.from_numpy(g), m, v, own)
    assert shared.step == 2
    for p in ps:
        np.testing.assert_array_equal(ml.math.to_numpy(p), ml.math.to_numpy(alone))
    sgd = [ml.math.from_numpy(np.ones(4, np.float32)) for _ in range(2)]
    ml.sgd_update(sgd, [ml.math.from_numpy(g)] * 2, None, ns_mod.OptimizerState(lr=0.1))
    np.testing.assert_allclose(ml.math.to_numpy(sgd[1]), 1 - np.float32(0.1) * g, rtol=1e-6)


def test_kernel_generator_source_compiles_with_nvcc(tmp_path):
    """Each generated matmul (tiled with every tile size, untiled; float and double) is CUDA C++
    that nvcc compiles for sm_90 (the launch test runs them on a GPU)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on the PATH")
    gen = get_kernel_generator()
    kernels = [gen.generate_matrix_multiply_kernel(dt, True, t) for dt in (CudaDataType.FLOAT32, CudaDataType.FLOAT64)
               for t in (8, 16, 32)]
    kernels += [gen.generate_matrix_multiply_kernel(dt, use_tiled=False)
                for dt in (CudaDataType.FLOAT32, CudaDataType.FLOAT64)]
    assert len({k.entry for k in kernels}) == 8 and all(k == kernels[0] for k in kernels)
    refs = "\n".join(f"void* ref_{i} = (void*)&{k.entry};" for i, k in enumerate(kernels))
    (tmp_path / "k.cu").write_text(kernels[0] + "\n" + refs + "\n")
    r = subprocess.run([nvcc, "-std=c++17", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"),
                        str(tmp_path / "k.cu")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ns_matmul_tiled" in r.stderr and "spill" in r.stderr and " 0 bytes spill" in r.stderr
    k = kernels[2]
    assert k.entry == "ns_matmul_tiled<float, float, 32>" and k.block_size == (32, 32, 1) and k.tile_size == 32


def test_kernel_generator_bad_input_and_geometry():
    gen = get_kernel_generator()
    with pytest.raises(ValueError, match=r"tile_size must be one of \(8, 16, 32\) \(got 64\)"):
        gen.generate_matrix_multiply_kernel(tile_size=64)
    with pytest.raises(DTypeError, match="dtype must be one of CudaDataType.FLOAT32"):
        gen.generate_matrix_multiply_kernel(dtype=CudaDataType.FLOAT16)
    assert gen.optimize_kernel_parameters("matrix_multiply", (1000, 1030, 7)) == ((32, 32, 1), (33, 32, 1))
    assert gen.optimize_kernel_parameters("vector_add", 1000) == ((256, 1, 1), (4, 1, 1))
    with pytest.raises(ValueError, match="kernel_type must be"):
        gen.optimize_kernel_parameters("softmax", (3,))
    with pytest.raises(ValueError, match=r"problem_size must be \(M, N, K\)"):
        gen.optimize_kernel_parameters("matrix_multiply", (3, 3))


def test_benchmark_tester_example(fresh_cwd):
    ns = seed_doc.run(DOC, 9, IMPORTS)
    summary = ns["summary"]
    assert summary["tests"] and summary["failed"] == 0 and summary["passed"] == len(summary["tests"])
    assert {t["operation"] for t in summary["tests"]} >= {"add", "relu", "matmul", "conv2d", "batch_norm"}
    saved = json.loads((fresh_cwd / "cuda_performance_results" / "results.json").read_text())
    assert saved["passed"] == summary["passed"]
    assert all((fresh_cwd / p).exists() for p in summary.get("plots", []))
    with pytest.raises(ValueError, match="max_error_threshold must be a number > 0"):
        ns["TestConfiguration"](max_error_threshold=0)
    from cudakit.bench import plots
    from cudakit.errors import BackendUnavailableError
    with pytest.MonkeyPatch.context() as m:   # plots asked for without matplotlib: an error, not no plots
        m.setattr(plots, "available", lambda: False)
        with pytest.raises(BackendUnavailableError, match=r"needs matplotlib: pip install 'cudakit\[bench\]'"):
            ns["TestConfiguration"](enable_plots=True)
        assert ns["TestConfiguration"](enable_plots=False).enable_plots is False
    with pytest.raises(ValueError, match="unknown op"):
        ns["CudaPerformanceTester"](ns["TestConfiguration"](operations=("nope",))).run_comprehensive_benchmark()


def test_custom_benchmark_example(capsys):
    ns = seed_doc.run(DOC, [1, 10], IMPORTS)
    res = ns["results"]
    assert set(res) == {"vector_add", "matrix_multiply", "matrix_transpose", "relu"}
    for op in res:
        assert set(res[op]) == {(128, 128), (512, 512), (1024, 1024)}
        assert all(m["average_time_ms"] > 0 for m in res[op].values())
    assert "MATRIX_MULTIPLY Results:" in capsys.readouterr().out


def test_profiling_logging_devices_and_validation_examples(fresh_cwd, profiling_off, capsys):
    ns = seed_doc.run(DOC, [1, 11, 15, 16], IMPORTS)
    stats = ns["stats"]
    assert stats["profiling_enabled"] and set(stats) >= {"kernel_execution_times", "memory_transfer_times"}
    report = json.loads((fresh_cwd / "cuda_analysis.json").read_text())
    assert report["fallback_mode"] == (not cudakit.is_available())
    # "Monitor memory usage with backend.get_performance_stats()": each GPU's pool statistics
    usage = stats["memory_usage"]   # (the current GPU and those cudakit allocated on; none in fallback mode)
    if report["fallback_mode"]:
        assert usage == {}
    else:
        assert cudakit.current_device() in usage and set(usage) <= {d["device_id"] for d in report["devices"]}
    for u in usage.values():
        assert {"allocated", "reserved", "peak_allocated", "free", "total"} <= set(u) and u["total"] > 0
    cpu_data = np.linspace(-3, 3, 1000, dtype=np.float32)
    ctx = {"gpu_tensor": ns["cuda_math"].relu(ns["cuda_math"].from_numpy(cpu_data)),
           "numpy_operation": lambda x: np.maximum(x, 0), "cpu_data": cpu_data}   # the block's free names
    ns.update(ctx)
    seed_doc.run(DOC, 17, IMPORTS, ns)
    assert ns["error"] == 0.0 and "Maximum error: 0.00e+00" in capsys.readouterr().out


@pytest.mark.cuda
def test_ml_operations_example(capsys):
    seed_doc.run(DOC, 2, IMPORTS)
    out = capsys.readouterr().out
    assert "Convolution output shape: (32, 128, 128, 128)" in out and "Final output shape: (32, 128, 64, 64)" in out


@pytest.mark.cuda
def test_memory_pool_and_kernel_generation_examples(capsys):
    ns = seed_doc.run(DOC, [6, 7], IMPORTS)
    assert ns["pool_stats"]["allocation_count"] >= 0 and ns["pool_stats"]["active_memory"] >= 0
    assert ns["block_size"] == (32, 32, 1) and ns["grid_size"] == (32, 32, 1)
    assert "optimized_matmul" in ns["backend"]._kernels
    assert "Optimal Configuration:" in capsys.readouterr().out


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [CudaDataType.FLOAT32, CudaDataType.FLOAT64])
@pytest.mark.parametrize("tiled,tile", [(True, 8), (True, 16), (True, 32), (False, 32)])
def test_generated_matmul_compiles_and_runs(dtype, tiled, tile, rng):
    """compile_kernel() compiles the generator's source with NVRTC; launch_kernel() runs it on
    optimize_kernel_parameters()'s geometry; the result against float64 and cudakit.matmul."""
    import cupy as cp
    be, gen = get_cuda_backend(), get_kernel_generator()
    src = gen.generate_matrix_multiply_kernel(dtype=dtype, use_tiled=tiled, tile_size=tile)
    name = f"mm_{dtype.name}_{tiled}_{tile}"
    be.compile_kernel(name, src)
    m, n, k = 129, 67, 301   # not multiples of any tile
    a = rng.standard_normal((m, k)).astype(dtype.numpy)
    b = rng.standard_normal((k, n)).astype(dtype.numpy)
    da, db, dc = cp.asarray(a), cp.asarray(b), cp.full((m, n), cp.nan, dtype.numpy)
    block, grid = (src.block_size, src.grid_size(m, n))
    if tiled:
        assert (block, grid) == gen.optimize_kernel_parameters("matrix_multiply", (m, n, k), tile_size=tile)
    ms = be.launch_kernel(name, grid, da, db, dc, m, n, k)
    assert ms > 0
    if be.enable_profiling:   # (recorded under the name compile_kernel was given, not the template's)
        assert be.get_performance_stats()["kernel_execution_times"][name]["total_executions"] >= 1
    want = a.astype(np.float64) @ b.astype(np.float64)
    tol = (1e-5 if dtype is CudaDataType.FLOAT32 else 1e-12) * np.max(np.abs(want))
    assert np.max(np.abs(dc.get() - want)) <= tol
    assert np.max(np.abs(dc.get() - cudakit.matmul(da, db).get())) <= tol
    with pytest.raises(ShapeError, match="A must be C-contiguous with at least"):
        be.launch_kernel(name, grid, da[:10], db, dc, m, n, k)
    with pytest.raises(ShapeError, match="does not cover"):
        be.launch_kernel(name, (1, 1, 1), da, db, dc, m, n, k)
    with pytest.raises(DTypeError, match="B must be"):
        be.launch_kernel(name, grid, da, db.astype(cp.float16), dc, m, n, k)


@pytest.mark.cuda
def test_performance_stats_record_kernels_and_transfers(profiling_off, fresh_cwd, rng):
    be = get_cuda_backend(enable_profiling=True)
    m = get_cuda_math()
    t = m.from_numpy(rng.standard_normal((64, 64)).astype(np.float32))
    m.to_numpy(m.relu(t))
    stats = be.get_performance_stats()
    assert stats["profiling_enabled"] and not stats["fallback_mode"]
    assert stats["memory_transfer_times"]["HtoD"]["total_transfers"] >= 1
    assert any(v["total_executions"] >= 1 for v in stats["kernel_execution_times"].values())
    assert json.loads(be.export_performance_report("r.json").read_text())["devices"]


@pytest.mark.cuda
@pytest.mark.multi_gpu
def test_multi_gpu_example():
    ns = seed_doc.run(DOC, [1, 6, 8], IMPORTS)
    assert ns["tensor_gpu0"].device_id == 0 and ns["tensor_gpu1"].device_id == 1
    cudakit.set_device(0)


def test_tensors_of_other_dtypes_are_refused_and_none_is_float32():
    """from_numpy took bfloat16, bool and complex arrays, whose CudaTensor then could not say its
    dtype (repr raised) and whose ops crashed after computing (bfloat16's memoryview);
    create_tensor(dtype=None) gave float64."""
    import ml_dtypes
    m = get_cuda_math()
    for dt in (ml_dtypes.bfloat16, bool, np.complex64, np.int8):
        with pytest.raises(DTypeError, match="array: dtype .* is not a CudaDataType"):
            m.from_numpy(np.ones(3, dt))
    assert m.create_tensor((2, 3), None).dtype == CudaDataType.FLOAT32
    t = m.from_numpy(np.array([-1.0, 2.0], np.float16))
    np.testing.assert_array_equal(m.to_numpy(m.relu(t)), [0.0, 2.0])


def test_backends_share_one_profile(fresh_cwd):
    """CudaBackend(enable_profiling=True) held cudakit's one profile until the process ended, so a
    second backend (the seed's get_cuda_backend(enable_profiling=True) after any CudaBackend())
    raised; now the recording backends share it, and it stops after the last one stops or is
    collected. A report written to a folder leaves no temporary file."""
    import gc
    from cudakit import profiler
    from cudakit.compat.neuralscript import CudaBackend
    a = CudaBackend()
    b = CudaBackend(enable_profiling=True)
    assert a.enable_profiling and b.enable_profiling and profiler._active is not None
    del a
    gc.collect()
    assert profiler._active is not None   # b still records
    b.set_profiling(False)
    assert profiler._active is None
    c = CudaBackend()
    profiler.stop()            # stopped from outside: c no longer records; the next holder starts a new one
    assert not c.enable_profiling
    d = CudaBackend()
    assert profiler._active is not None and d.enable_profiling and c.enable_profiling   # (c shares it)
    profiler.stop()
    c.set_profiling(True)      # a holder asking again after an outside stop starts one too
    assert c.enable_profiling and d.enable_profiling
    c.set_profiling(False)
    assert profiler._active is not None
    d.set_profiling(False)
    assert profiler._active is None and not c.enable_profiling and not d.enable_profiling
    (fresh_cwd / "folder").mkdir()
    with pytest.raises(IsADirectoryError):
        d.export_performance_report(fresh_cwd / "folder")
    assert [p.name for p in fresh_cwd.iterdir()] == ["folder"]
    with pytest.raises(TypeError, match="filename must be a str or a path"):
        d.export_performance_report(None)


def test_test_configuration_names_are_sequences():
    from cudakit.compat.neuralscript import TestConfiguration
    with pytest.raises(TypeError, match="dtypes must be a tuple or list of names \\(got 'float32'\\)"):
        TestConfiguration(dtypes="float32")   # (was split into its characters)
    with pytest.raises(TypeError, match="operations must be a tuple or list of names"):
        TestConfiguration(operations=None)
    assert TestConfiguration(dtypes=["float16"]).dtypes == ("float16",)


def test_tensor_repr_and_types():
    t = CudaTensor(np.zeros((2, 3), np.float32))
    assert t.shape == (2, 3) and t.dtype is CudaDataType.FLOAT32 and t.nbytes == 24
    assert "shape=(2, 3)" in repr(t)


def test_compat_doc_names_every_documented_name():
    names = {n.split(".")[-1] for i in (18, 19, 20) for n in seed_doc.signatures(seed_doc.blocks(DOC)[i][1])}
    names |= {n for pat in (r"\b(get_\w+)\(", r"backend\.(\w+)", r"cuda_math\.(\w+)", r"cuda_ml\.(\w+)",
                            r"generator\.(\w+)", r"tester\.(\w+)", r"\b([A-Z]\w+)\(")
              for n in seed_doc.called_names(DOC, pat)}
    names |= {"CudaBackend", "CudaMath", "CudaML", "CudaTensor", "CudaDataType", "OptimizerState", "ActivationType"}
    seed_doc.assert_in_compat_doc(DOC, names - {"__init__"})
