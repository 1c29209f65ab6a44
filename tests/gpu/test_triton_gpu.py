"""Triton kernels compiled by Triton, launched by cudakit on CuPy streams."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cudakit
from helpers import np_dtype

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")
pytest.importorskip("triton")
import triton_kernels as tk  # noqa: E402

TOL = {"float32": 1e-6, "float16": 2e-3, "bfloat16": 1.6e-2}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [1, 1000, 4097, (1 << 20) + 3])
def test_vector_add(dtype, n, rng):
    k = cudakit.triton_kernel(tk.vadd)
    x = rng.standard_normal(n).astype(np_dtype(dtype))
    y = rng.standard_normal(n).astype(np_dtype(dtype))
    out = cp.full(n, np.nan, np_dtype(dtype))
    k[lambda m: (cudakit.cdiv(n, m["BLOCK"]),)](cp.asarray(x), cp.asarray(y), out, n, BLOCK=1024)
    want = (x.astype(np.float32) + y.astype(np.float32)).astype(np_dtype(dtype))
    np.testing.assert_array_equal(out.get().astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(1, 1), (7, 1000), (33, 129), (300, 2049)])
def test_row_softmax_on_a_side_stream(dtype, shape, rng):
    k = cudakit.triton_kernel(tk.row_softmax, num_warps=8)
    x = (3 * rng.standard_normal(shape)).astype(np_dtype(dtype))
    dx = cp.asarray(x)
    out = cp.full(shape, np.nan, np_dtype(dtype))
    s = cp.cuda.Stream(non_blocking=True)
    ready = cp.cuda.get_current_stream().record()
    s.wait_event(ready)                       # dx is written on the current stream
    with s:
        k[(shape[0],)](dx, out, shape[1], shape[1], BLOCK=triton_next_pow2(shape[1]))
    done = s.record()
    cp.cuda.get_current_stream().wait_event(done)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    got = out.get().astype(np.float64)
    assert np.isfinite(got).all()
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < TOL[dtype] * 4


def test_native_plans_repeat_the_python_launch(rng):
    """kernel[grid](positional args) launches from a native plan (runtime/_native.c tk_bind) once
    run() has launched the same kinds of arguments: same results for each dtype, aligned or not,
    int32 sizes that are and are not multiples of 16, a float scalar; a profile sees every launch."""
    from cudakit.runtime import native
    if native.module() is None:
        pytest.skip(f"native module: {native.status()}")
    k = cudakit.triton_kernel(tk.axpy)
    runs = []
    run = k.run
    k.run = lambda *a: runs.append(1) or run(*a)   # counts the calls that take the Python path
    for dtype in ["float32", "float16", "bfloat16"]:
        for n, off in [(1000, 0), (1000, 1), (4096, 0)]:
            x = rng.standard_normal(n + off).astype(np_dtype(dtype))
            y = rng.standard_normal(n + off).astype(np_dtype(dtype))
            want = (0.5 * x[off:].astype(np.float32) + y[off:].astype(np.float32)).astype(np_dtype(dtype))
            for rep in range(2):
                before = len(runs)
                dy = cp.asarray(y)[off:]
                k[(cudakit.cdiv(n, 256),)](cp.asarray(x)[off:], dy, n, 0.5)
                np.testing.assert_array_equal(dy.get().astype(np.float64), want.astype(np.float64))
                assert len(runs) - before == (1 if rep == 0 else 0), (dtype, n, off, rep)
    assert len(k._plans) == 9
    x = cp.ones(64, cp.float32)
    with cudakit.profile() as prof:
        k[(1,)](x, x, 64, 1.0)
    assert len(prof.table()) == 1 and float(x[0]) == 2.0


def test_specialized_kernel_launches_from_native_plans(rng):
    """kernel.specialized(CONST=..., num_warps=...) binds the constexprs: calls with runtime arguments
    only give the keyword call's result and, from the second on, skip the Python path."""
    from cudakit.runtime import native
    if native.module() is None:
        pytest.skip(f"native module: {native.status()}")
    base = cudakit.triton_kernel(tk.vadd)
    k = base.specialized(BLOCK=256, num_warps=2)
    runs = []
    run = k.run
    k.run = lambda *a: runs.append(1) or run(*a)
    x, y = (cp.asarray(rng.standard_normal(1000).astype(np.float32)) for _ in range(2))
    want = cp.empty_like(x)
    base[(4,)](x, y, want, 1000, BLOCK=256, num_warps=2)
    for rep in range(3):
        out = cp.full_like(x, np.nan)
        k[(4,)](x, y, out, 1000)
        cp.testing.assert_array_equal(out, want)
    assert len(runs) == 1 and len(k._plans) == 1 and not base._plans
    with pytest.raises(TypeError, match="no constexpr parameter NOPE"):
        base.specialized(NOPE=1)


def triton_next_pow2(n):
    import triton
    return triton.next_power_of_2(n)


def test_scalar_args_and_wrong_count():
    k = cudakit.triton_kernel(tk.scale_inplace)
    x = cp.arange(100, dtype=cp.float32)
    k[(1,)](x, 100, 0.5, BLOCK=128)
    np.testing.assert_array_equal(x.get(), np.arange(100, dtype=np.float32) * 0.5)
    with pytest.raises(TypeError, match="missing argument 'factor'"):
        k[(1,)](x, 100, BLOCK=128)
    with pytest.raises(TypeError, match="host"):
        k[(1,)](np.ones(4, np.float32), 4, 1.0, BLOCK=128)


def test_too_much_shared_memory_names_both_numbers():
    k = cudakit.triton_kernel(tk.matmul, num_warps=8)
    n = 512
    a = cp.ones((n, n), cp.float16)
    c = cp.zeros((n, n), cp.float16)
    limit = cudakit.get_device_info().max_shared_memory_per_block_optin
    with pytest.raises(cudakit.LaunchError) as ei:  # 4 stages of 256x128 + 128x256 fp16 tiles: 512 KiB
        k[(2, 2)](a, a, c, n, n, n, BM=256, BN=256, BK=128, num_stages=4)
    msg = str(ei.value)
    assert "524288" in msg and str(limit) in msg and "shared memory" in msg, msg
    # a configuration that fits runs (98304 bytes: above the 48 KiB default, so the opt-in is set)
    k[(4, 4)](a, a, c, n, n, n, BM=128, BN=128, BK=64, num_stages=3)
    assert float(c[0, 0]) == n and bool((c == n).all())


def test_autotune_restores_and_picks(cache_dir):
    k = cudakit.autotune([cudakit.TritonConfig({"BLOCK": 64}, num_warps=2), cudakit.TritonConfig({"BLOCK": 1024}, num_warps=4)],
                         key=["n"], restore=["x_ptr"])(cudakit.triton_kernel(tk.scale_inplace))
    x = cp.arange(1 << 16, dtype=cp.float32)
    n = x.size
    k[lambda m: (cudakit.cdiv(n, m["BLOCK"]),)](x, n, 2.0)
    np.testing.assert_array_equal(x.get(), 2 * np.arange(1 << 16, dtype=np.float32))  # trials restored x
    assert len(list((cache_dir / "autotune").glob("*.json"))) == 1


def test_no_torch_and_second_process_compiles_and_tunes_nothing(tmp_path):
    code = textwrap.dedent(r'''
        import sys, time, importlib.abc, json
        class NoTorch(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch is blocked")
        sys.meta_path.insert(0, NoTorch())
        sys.path.insert(0, "tests")
        t0 = time.perf_counter()
        import cupy as cp, cudakit
        from cudakit.runtime import triton as ckt
        import triton_kernels as tk
        k = cudakit.autotune([cudakit.TritonConfig({"BLOCK": 256}), cudakit.TritonConfig({"BLOCK": 1024})],
                             key=["n"], restore=["x_ptr"])(cudakit.triton_kernel(tk.scale_inplace))
        x = cp.ones(1 << 20, cp.float32)
        k[lambda m: (cudakit.cdiv(x.size, m["BLOCK"]),)](x, x.size, 3.0)
        cp.cuda.runtime.deviceSynchronize()
        ok = bool((x == 3).all())
        print(json.dumps({"first_call_s": time.perf_counter() - t0, "ok": ok, **ckt.stats,
                          "torch_loaded": "torch" in sys.modules}))
    ''')
    env = dict(os.environ, CUDAKIT_CACHE_DIR=str(tmp_path), TRITON_CACHE_DIR=str(tmp_path / "triton-own"))
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["ok"] and warm["ok"] and not cold["torch_loaded"] and not warm["torch_loaded"]
    assert cold["compiles"] >= 1 and cold["tunes"] == 1
    assert warm["compiles"] == 0 and warm["tunes"] == 0
    print(f"\nTRITON-CACHE cold first call {cold['first_call_s']:.3f} s, warm {warm['first_call_s']:.3f} s")
    os.makedirs(os.environ.get("CUDAKIT_RESULTS", "/tmp"), exist_ok=True)
    with open(os.path.join(os.environ.get("CUDAKIT_RESULTS", "/tmp"), "triton_cold_warm.json"), "w") as f:
        json.dump({"cold": cold, "warm": warm}, f)
