"""Triton integration without a GPU: what Triton can do with no device (compile for sm_90)."""
import subprocess
import sys

import pytest

import cudakit


def test_missing_triton_names_the_extra(monkeypatch):
    import builtins
    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "triton" or name.startswith("triton."):
            raise ImportError("No module named 'triton'")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(cudakit.BackendUnavailableError, match=r"cudakit\[triton\]"):
        cudakit.triton_kernel(lambda x: None)


def test_config_validates():
    with pytest.raises(ValueError, match="num_warps"):
        cudakit.TritonConfig({"BLOCK": 64}, num_warps=3)


def test_specialized_binds_constexprs_and_options():
    """kernel.specialized(...) gives a kernel whose constexprs and launch options default to the bound
    values (so positional calls can take the native plans), with its own plan table and the same
    compile cache; an unknown constexpr is a TypeError naming it."""
    pytest.importorskip("triton")
    import triton_kernels as tk
    base = cudakit.triton_kernel(tk.vadd)
    k = base.specialized(BLOCK=256, num_warps=2)
    assert k._const_defaults == {"BLOCK": 256} and k._defaults_complete and not base._defaults_complete
    assert (k.defaults.num_warps, k.defaults.num_stages) == (2, base.defaults.num_stages)
    assert k._plans is not base._plans and k._cache is base._cache
    assert k._fast_bind((1, 2, 3, 4), {}) == ((1, 2, 3, 4), {"BLOCK": 256}, 2, base.defaults.num_stages)
    with pytest.raises(TypeError, match="no constexpr parameter NOPE"):
        base.specialized(NOPE=1)


def test_compile_for_sm90_without_gpu_and_without_torch(tmp_path):
    pytest.importorskip("triton")
    code = r'''
import sys, importlib.abc
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
sys.meta_path.insert(0, NoTorch())
sys.path.insert(0, "tests")
import triton_kernels as tk
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
import triton, cudakit
k = cudakit.triton_kernel(tk.vadd)
assert [p.name for p in k.params] == ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]
src = ASTSource(tk.vadd, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                {(4,): 1024}, {(0,): [["tt.divisibility", 16]]})
c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
assert len(c.asm["cubin"]) > 1000 and c.metadata.name == "vadd"
runtime, consts, opts = k.bind((1, 2, 3, 4), {"BLOCK": 128})
assert runtime == [1, 2, 3, 4] and consts == {"BLOCK": 128} and opts["num_warps"] == 4
for bad in [((1, 2, 3), {"BLOCK": 1}), ((1, 2, 3, 4, 5, 6), {}), ((1, 2, 3, 4), {"BLOK": 1})]:
    try:
        k.bind(*bad)
    except TypeError as e:
        print("TYPEERROR", e)
print("TORCH", "torch" in sys.modules)
'''
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if "No module named 'triton'" in r.stderr:
        pytest.skip("triton not installed")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("TYPEERROR") == 3 and "missing argument 'n'" in r.stdout
    assert "TORCH False" in r.stdout


def test_triton_config_types():
    """num_warps=True, num_stages=2.5 and kwargs=None were accepted (found by a probing helper)."""
    for kw, what in (({"num_warps": True}, "num_warps must be an int"), ({"num_stages": 2.5}, "num_stages must be an int"),
                     ({"kwargs": None}, "kwargs must be a dict"), ({"num_warps": "4"}, "num_warps must be an int")):
        with pytest.raises(cudakit.ArgumentTypeError, match=what):
            cudakit.TritonConfig(**kw)
    with pytest.raises(cudakit.ArgumentError, match="num_warps must be a power of two"):
        cudakit.TritonConfig(num_warps=3)
    assert cudakit.TritonConfig({"B": 1}, 8, 2).num_warps == 8


def test_pdl_constexpr_is_resolved_when_the_kernel_compiles(monkeypatch, tmp_path):
    """A kernel's PDL constexpr left None is compiled as runtime.triton.pdl_supported says for the
    device (and the compiled kernel marked for PDL launches only then); PDL asked on a device
    below compute capability 9.0 is an ArgumentError naming the capability. sm_90 compiles, no GPU."""
    pytest.importorskip("triton")
    import types

    from cudakit import config
    from cudakit.errors import ArgumentError
    from cudakit.kernels import _attention_triton as src
    from cudakit.runtime import device
    from cudakit.runtime import triton as rt
    monkeypatch.setenv("CUDAKIT_CACHE_DIR", str(tmp_path))
    config.reload()
    cc = {"v": (9, 0)}
    monkeypatch.setattr(device, "get_device_info", lambda dev: types.SimpleNamespace(compute_capability=cc["v"]))
    k = rt.TritonKernel(src.zero_fill)
    sig, opts = [("*fp32", True), ("i32", False)], {"num_warps": 4, "num_stages": 1}
    try:
        for supported in (True, False):
            monkeypatch.setattr(rt, "pdl_supported", lambda dev, s=supported: s)
            assert k._compile(sig, {"BLOCK": 128, "PDL": None}, opts, 0).pdl is supported
        assert k._compile(sig, {"BLOCK": 128, "PDL": 2}, opts, 0).pdl is True   # (asked: whatever pdl_supported says)
        assert k._compile(sig, {"BLOCK": 128, "PDL": False}, opts, 0).pdl is False
        cc["v"] = (8, 0)
        with pytest.raises(ArgumentError, match=r"PDL=True needs compute capability 9.0 or later \(got 8.0\)"):
            k._compile(sig, {"BLOCK": 128, "PDL": True}, opts, 0)
    finally:
        monkeypatch.delenv("CUDAKIT_CACHE_DIR")
        config.reload()


def test_a_triton_autotune_kernel_becomes_cudakits_autotune():
    """cudakit.triton_kernel over @triton.autotune (seed 002's form): cudakit's autotune of its
    configs, key and restore_value over the @triton.jit function; reset_to_zero and a user's hook,
    which cudakit's tuner lacks, raise a typed error naming them."""
    triton = pytest.importorskip("triton")
    tl = pytest.importorskip("triton.language")
    from cudakit.runtime.triton import Autotuned

    def body(x, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x + i, tl.load(x + i, mask=i < n) + 1, mask=i < n)
    configs = [triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 256}, num_warps=8, num_stages=2)]
    k = cudakit.triton_kernel(triton.autotune(configs=configs, key=["n"], restore_value=["x"])(triton.jit(body)))
    assert isinstance(k, Autotuned) and k.key == ["n"] and k.restore == ["x"]
    assert [(c.kwargs, c.num_warps, c.num_stages) for c in k.configs] == [({"BLOCK": 128}, 4, 3),
                                                                          ({"BLOCK": 256}, 8, 2)]
    assert k.kernel.name == "body"
    with pytest.raises(cudakit.ArgumentError, match="reset_to_zero"):
        cudakit.triton_kernel(triton.autotune(configs=configs, key=["n"], reset_to_zero=["x"])(triton.jit(body)))
    with pytest.raises(cudakit.ArgumentError, match="pre_hook"):
        cudakit.triton_kernel(triton.autotune(configs=configs, key=["n"], pre_hook=lambda kw: None)(triton.jit(body)))
