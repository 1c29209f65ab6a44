"""Shared test helpers: dtypes, float64 references for the elementwise ops, kernel sources."""
from importlib import resources

import ml_dtypes
import numpy as np

DTYPES = ["float16", "bfloat16", "float32", "float64"]


def np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def reference(op, *xs, dtype):
    """The op in float64 (float32 for 16-bit, which is what both backends promise: compute in
    float32, round once), rounded to `dtype`."""
    acc = np.float64 if np_dtype(dtype) == np.float64 else np.float32
    xs = [np.asarray(x).astype(acc) for x in xs]
    with np.errstate(all="ignore"):
        if op == "add":
            r = xs[0] + xs[1]
        elif op == "mul":
            r = xs[0] * xs[1]
        elif op == "relu":
            r = np.where(np.isnan(xs[0]), xs[0], np.where(xs[0] > 0, xs[0], 0))
        elif op == "relu_backward":
            g, x = np.broadcast_arrays(*xs)
            r = np.where(x > 0, g, 0)
        else:
            raise ValueError(op)
    return np.asarray(r).astype(np_dtype(dtype))


# unit roundoff of each dtype (a correctly rounded value is within u * |value|) and half the
# spacing of its subnormals (the absolute error left where values underflow)
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53}
SUBNORMAL_HALF_SPACING = {"float16": 2.0**-25, "bfloat16": 2.0**-134, "float32": 2.0**-150, "float64": 2.0**-1075}


def f64(x):
    return np.asarray(x).astype(np.float64)


def data(rng, shape, dtype, scale=1.0):
    """Standard normal values (times scale) in `dtype`."""
    return (scale * rng.standard_normal(shape)).astype(np_dtype(dtype))


def random(rng, shape, dtype):
    x = rng.standard_normal(shape).astype(np.float32)
    return x.astype(np_dtype(dtype))


def assert_same(got, want):
    """Bitwise-equal values, NaN where NaN (signed zeros compare equal)."""
    got, want = np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


def native_module(path):
    """runtime/_native.c built into `path` (a fresh copy: its own counters and settings), or the
    test is skipped where the module cannot be built."""
    import pytest

    from cudakit.runtime import native
    try:
        return native.load(path)
    except native.NativeBuildError as e:
        pytest.skip(f"native module cannot be built here: {e}")


def launch_type():
    """The ctypes type of cuLaunchKernel, for a recording stand-in (no GPU needed)."""
    import ctypes
    return ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                            ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


def run_in_triton_interpreter(script: str, *args: str) -> str:
    """Run tests/<script> in a subprocess with TRITON_INTERPRET=1 (Triton picks its interpreter when
    it is imported, so the flag must be set before that); its stdout, after asserting it exited 0."""
    import os
    import subprocess
    import sys
    path = os.path.join(os.path.dirname(__file__), script)
    run = subprocess.run([sys.executable, path, *args], check=False, env=dict(os.environ, TRITON_INTERPRET="1"),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


def kernel_source(mod) -> str:
    """The CUDA C++ source of kernel module `mod` (e.g. cudakit.kernels.softmax) read from its
    .cu / .cuh files in the installed package (mod.SOURCE_FILES, in order), as nvcc compiles it in
    the tests. Checked to be, byte for byte, the mod.SOURCE that the runtime compiles and caches."""
    root = resources.files("cudakit.kernels")
    text = "".join(root.joinpath(name).read_bytes().decode("utf-8") for name in mod.SOURCE_FILES)
    assert text == mod.SOURCE, f"{mod.__name__}.SOURCE differs from its files {mod.SOURCE_FILES}"
    return text
