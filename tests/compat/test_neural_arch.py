"""Seed 003 (neural_arch's CUDA guide) through cudakit.compat.neural_arch.

Blocks of seeds/003_neural_arch.md: 0 pip (bash), 1 verification, 2 basic backend use, 3 GELU,
4 fused linear + GELU, 5 flash attention, 6 layer norm, 7 kernel manager, 8 benchmark, 9 memory
monitoring, 10 CuPy check, 11 backend check, 12 custom-kernel check, 13 GPU memory issues,
14 kernel correctness. Blocks 3-14 use `cuda_backend` and `cp` from block 2, as in the guide.
"""
import math

import numpy as np
import pytest
import seed_doc

import cudakit
from cudakit.compat import neural_arch
from cudakit.compat.neural_arch import CuPyNotInstalledError, UnavailableCudaBackend
from cudakit.compat.neural_arch.cuda_kernels import get_cuda_kernel_manager
from cudakit.errors import BackendUnavailableError

DOC = "003_neural_arch"
IMPORTS = {
    "from neural_arch.backends import get_backend": "from cudakit.compat.neural_arch import get_backend",
    "from neural_arch.backends.cuda_kernels import get_cuda_kernel_manager":
        "from cudakit.compat.neural_arch.cuda_kernels import get_cuda_kernel_manager",
}


def gelu_ref(x):
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def cupy_installed():
    import importlib.util
    return importlib.util.find_spec("cupy") is not None


def test_seed_copy_is_verbatim():
    seed_doc.compare_with_shared(DOC)


def test_verification_and_troubleshooting_examples_run(capsys):
    """Blocks 1, 10 and 11 handle a missing CuPy or GPU themselves: they run anywhere."""
    seed_doc.run(DOC, [1, 10, 11], IMPORTS)
    out = capsys.readouterr().out
    if cudakit.is_available():
        assert "✅ CuPy installed" in out and "✅ CUDA backend available" in out
    elif not cupy_installed():
        assert "❌ CuPy not installed" in out and "Error initializing CUDA backend: the CUDA backend needs CuPy" in out


def test_get_backend_without_cupy_is_an_import_error(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cupy" else real(name, *a))
    with pytest.raises(ImportError, match="needs CuPy") as ei:
        neural_arch.get_backend("cuda")
    assert isinstance(ei.value, BackendUnavailableError) and isinstance(ei.value, CuPyNotInstalledError)
    with pytest.raises(ImportError):   # block 12 (after 11's import): no try around get_backend("cuda")
        seed_doc.run(DOC, [11, 12], IMPORTS)


def test_cupy_without_a_gpu_gives_an_unavailable_backend(no_gpu, monkeypatch, capsys):
    """CuPy installed, no usable GPU: is_available and has_custom_kernels are False (the guide's
    check) and ops raise BackendUnavailableError naming the reason."""
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "cupy" else real(name, *a))
    be = neural_arch.get_backend("cuda")
    assert isinstance(be, UnavailableCudaBackend) and not be.is_available and not be.has_custom_kernels
    with pytest.raises(BackendUnavailableError, match="the CUDA backend is unavailable"):
        be.gelu(np.ones(3, np.float32))
    for op in ("relu", "matmul", "to_device", "synchronize"):   # every op of cudakit's backends, not AttributeError
        with pytest.raises(BackendUnavailableError, match="the CUDA backend is unavailable"):
            getattr(be, op)(np.ones(3, np.float32))
    with pytest.raises(AttributeError, match="nosuch"):
        be.nosuch
    seed_doc.run(DOC, [11, 12], IMPORTS)
    out = capsys.readouterr().out
    assert "❌ CUDA backend not available" in out and "⚠️  Custom kernels not available" in out


def test_get_backend_names():
    assert neural_arch.get_backend("numpy") is cudakit.get_backend("cpu")
    with pytest.raises(ValueError, match="name must be one of 'cuda', 'numpy', 'cpu' \\(got 'mps'\\)"):
        neural_arch.get_backend("mps")
    with pytest.raises(ValueError, match="name must be one of"):   # (an array was NumPy's truth-value error)
        neural_arch.get_backend(np.array(["cuda", "numpy"]))


def test_benchmark_kernel_checks_its_arguments():
    """benchmark_kernel takes op names only (it ran any attribute, '__init__' included) and int
    counts (2.5 was a TypeError from inside the timing, -1 warm-up runs and True were taken)."""
    from cudakit.errors import ArgumentError, ArgumentTypeError
    be = neural_arch.get_backend("numpy")
    x = np.ones(3, np.float32)
    for name in ("__init__", "benchmark_kernel", "nosuch"):
        with pytest.raises(ArgumentError, match=f"unknown op '{name}'; known: .*relu"):
            be.benchmark_kernel(name, x)
    for kw, err, match in ((dict(num_runs=2.5), ArgumentTypeError, "num_runs must be an int"),
                           (dict(num_runs=True), ArgumentTypeError, "num_runs must be an int"),
                           (dict(warmup=None), ArgumentTypeError, "warmup must be an int"),
                           (dict(num_runs=0), ArgumentError, "num_runs must be >= 1"),
                           (dict(warmup=-1), ArgumentError, "warmup must be >= 0")):
        with pytest.raises(err, match=match):
            be.benchmark_kernel("relu", x, **kw)
    assert be.benchmark_kernel("relu", x, num_runs=np.int64(2), warmup=0) > 0


def test_kernel_manager_on_numpy_arrays(rng):
    """The manager's kernels are cudakit's ops: NumPy arrays run on the CPU backend."""
    km = get_cuda_kernel_manager()
    assert km is get_cuda_kernel_manager() and km.is_available() == cudakit.is_available()
    x = rng.standard_normal((64, 33)).astype(np.float32)
    np.testing.assert_allclose(km.gelu_forward(x), gelu_ref(x), rtol=1e-5, atol=1e-6)
    g = rng.standard_normal(x.shape).astype(np.float32)
    np.testing.assert_array_equal(km.gelu_backward(g, x), cudakit.gelu_backward(g, x))
    w, b = rng.standard_normal((16, 33)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(km.fused_linear_gelu(x, w, b),
                               gelu_ref(x.astype(np.float64) @ w.T.astype(np.float64) + b), rtol=1e-5, atol=1e-5)
    y = km.layernorm(x, np.ones(33, np.float32), np.zeros(33, np.float32), eps=1e-5)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(y, (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5),
                               rtol=1e-5, atol=1e-5)
    assert {"gelu_forward", "gelu_backward", "fused_linear_gelu", "layernorm"} <= set(km.compiled_kernels)
    with pytest.raises(cudakit.ShapeError):
        km.fused_linear_gelu(x, w.T, b)


def _attention_ref(q, k, v, scale):
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.cuda
def test_backend_usage_examples(capsys):
    ns = seed_doc.run(DOC, [2, 3, 4, 5, 6], IMPORTS)
    assert ns["cuda_backend"] is cudakit.get_backend("cuda") and ns["cuda_backend"].has_custom_kernels
    np.testing.assert_allclose(ns["result"].get(), gelu_ref(ns["x_gpu"].get()), rtol=1e-5, atol=1e-6)
    x = ns["input_gpu"].get().astype(np.float64)   # block 6's (weight ones, bias zeros)
    np.testing.assert_allclose(ns["output"].get(), (x - x.mean(-1, keepdims=True)) /
                               np.sqrt(x.var(-1, keepdims=True) + 1e-5), rtol=1e-5, atol=1e-5)
    q, k, v = (ns[n].get() for n in "qkv")
    want = _attention_ref(q, k, v, 1 / math.sqrt(64))
    assert np.max(np.abs(ns["attention_output"].get() - want)) <= 1e-4 * np.max(np.abs(want))
    out = capsys.readouterr().out
    assert "Fused linear+GELU output: (128, 768)" in out and "Flash Attention output: (4, 8, 512, 64)" in out


@pytest.mark.cuda
def test_fused_linear_gelu_example_matches_float64():
    ns = seed_doc.run(DOC, [2, 4], IMPORTS)
    x, w, b = (ns[n].get().astype(np.float64) for n in ("input_gpu", "weight_gpu", "bias_gpu"))
    want = gelu_ref(x @ w.T + b)
    assert np.max(np.abs(ns["output"].get() - want)) <= 1e-5 * np.max(np.abs(want))


@pytest.mark.cuda
def test_kernel_manager_benchmark_and_memory_examples(capsys):
    ns = seed_doc.run(DOC, [2, 7, 8, 9], IMPORTS)
    km = ns["kernel_manager"]
    assert km.is_available() and "gelu_forward" in km.compiled_kernels
    assert "result" not in ns and "tensor" not in ns   # block 9 deletes what it made
    assert isinstance(ns["gelu_time"], float) and ns["gelu_time"] > 0
    out = capsys.readouterr().out
    assert "Direct kernel result: (1000, 1000)" in out and "GPU Memory - Used:" in out


@pytest.mark.cuda
def test_troubleshooting_and_correctness_examples(capsys):
    ns = seed_doc.run(DOC, [2, 10, 11, 12, 13, 14], IMPORTS)
    out = capsys.readouterr().out
    assert "✅ Custom kernels available" in out and "✅ Kernel correctness validated" in out
    np.testing.assert_allclose(ns["result"].get()[:2], gelu_ref(ns["large_tensor"].get()[:2]), rtol=1e-5, atol=1e-6)


def test_compat_doc_names_every_documented_name():
    names = seed_doc.called_names(DOC, r"cuda_backend\.(\w+)") | seed_doc.called_names(DOC, r"kernel_manager\.(\w+)")
    assert {"gelu", "fused_linear_gelu", "flash_attention", "layernorm", "benchmark_kernel", "is_available",
            "has_custom_kernels", "compiled_kernels", "gelu_forward"} <= names
    seed_doc.assert_in_compat_doc(DOC, names | {"get_backend", "get_cuda_kernel_manager"})
