"""Pieces every CUDA C++ kernel module shares: the scalar-type preamble, dtype tables and the loader
of the CUDA C++ sources, which live in .cu / .cuh files beside the modules (package data).

The preamble needs no CUDA header: float16 and bfloat16 are 2-byte structs converted with PTX
(`cvt`) and bit arithmetic, so the same source compiles under NVRTC and nvcc on any toolkit.
Arithmetic on 16-bit types happens in float32 (`ck_traits<T>::acc`), float64 stays double.
"""
from __future__ import annotations

import threading
from functools import cache
from importlib import resources

import numpy as np


@cache
def cuda_file(name: str) -> str:
    """The text of the CUDA C++ file `name` in cudakit/kernels/ (package data), byte for byte (read
    once, no newline translation): the compile caches key on it, so it must not vary by platform."""
    return resources.files(__package__).joinpath(name).read_bytes().decode("utf-8")


def cuda_source(*names: str) -> str:
    """The CUDA C++ source made of the files `names` of cudakit/kernels/, concatenated in order
    (a family's source is the shared preamble, shared helpers, then its own .cu file)."""
    return "".join(cuda_file(n) for n in names)


# Scalar types (ck_half, ck_bf16, ck_traits<T>), conversions and load/store helpers.
PREAMBLE = cuda_source("_preamble.cuh")

_CTYPES = {"float16": "ck_half", "bfloat16": "ck_bf16", "float32": "float", "float64": "double"}
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
FLOAT_DTYPE_NAMES = tuple(_CTYPES)


_DTYPE_NAMES: dict = {}   # dtype -> name: NumPy computes dtype.name in Python on every access (~2 us)


def dtype_name(dtype) -> str:
    """The name of a dtype ("bfloat16", "float32", ...), looked up once per dtype; a name passes
    through. The kernels' host wrappers call it on every launch."""
    n = _DTYPE_NAMES.get(dtype)
    if n is None:
        n = _DTYPE_NAMES[dtype] = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    return n


def ctype(dtype) -> str:
    """The C type name for a dtype or dtype name (float16, bfloat16, float32, float64)."""
    return _CTYPES[dtype_name(dtype)]


def vec_width(dtype) -> int:
    """Elements per 16-byte vector access, for a dtype or a dtype name (cheap for dtype objects)."""
    return 16 // (_ITEMSIZE[dtype] if isinstance(dtype, str) else dtype.itemsize)


def strides_struct_dtype(n_operands: int):
    """NumPy dtype matching `struct { long long ndim; long long shape[8]; long long s<i>[8]...; }`,
    passed by value to strided kernels (strides in elements)."""
    fields = [("ndim", "<i8"), ("shape", "<i8", (8,))]
    fields += [(f"s{i}", "<i8", (8,)) for i in range(n_operands)]
    return np.dtype(fields)


def collapse(shape: tuple, strides: list[tuple]) -> tuple[tuple, list[tuple]]:
    """Merge adjacent dimensions that are contiguous for every operand and drop size-1 ones.

    `strides` are per operand, in elements. Returns the reduced shape and strides (>= 1 dim).
    """
    dims = [d for d in range(len(shape)) if shape[d] != 1]
    if not dims:
        return (1,), [(0,) for _ in strides]
    out_shape = [shape[dims[0]]]
    out_strides = [[s[dims[0]]] for s in strides]
    for d in dims[1:]:
        if all(os_[-1] == s[d] * shape[d] for os_, s in zip(out_strides, strides)):
            out_shape[-1] *= shape[d]
            for os_, s in zip(out_strides, strides):
                os_[-1] = s[d]
        else:
            out_shape.append(shape[d])
            for os_, s in zip(out_strides, strides):
                os_.append(s[d])
    return tuple(out_shape), [tuple(s) for s in out_strides]


class KernelFamily:
    """The kernels of one CUDA C++ source, compiled on first use and looked up per (device, name
    expression). `group(expr) -> key` splits them: the expressions of one key compile together (one
    NVRTC call, one cache entry) when the first of them is needed. Without it the whole family
    compiles at once. A group's cost is mostly its instantiations: the 288 elementwise kernels took
    14.8 s in one call and 3 of them 0.46 s (nvcc for sm_90 on a 2-core host), so a first
    `cudakit.add` waits for add's kernels of its dtype only."""

    def __init__(self, source: str, name_expressions, source_name: str, group=None):
        self.source, self.source_name = source, source_name
        # each kernel waits for the previous one first thing (CK_PDL_WAIT, _pdl.cuh): then they
        # are marked for programmatic dependent launch where the device takes it (a source with a
        # kernel more than waits is not; tests/test_kernel_sources.py checks that each kernel waits)
        self.pdl = 0 < source.count("__global__") == source.count("CK_PDL_WAIT();")
        self._names = name_expressions
        self._group = group or (lambda expr: None)
        self._lock = threading.Lock()
        self._done: set = set()          # keys of the groups compiled
        self._kernels: dict = {}
        self._functions: dict = {}

    def names(self) -> list:
        """The name expressions the host code launches."""
        return list(self._names() if callable(self._names) else self._names)

    def groups(self) -> dict:
        """{group key: its name expressions}, in names() order."""
        out: dict = {}
        for e in self.names():
            out.setdefault(self._group(e), []).append(e)
        return out

    def compile_group(self, key) -> None:
        """Compile the group `key` (once; a no-op after the first time). Thread-safe: the NVRTC
        calls of different groups may run in parallel."""
        if key in self._done:
            return
        from ..runtime.compiler import compile_module
        exprs = self.groups().get(key, [])
        m = compile_module(self.source, name_expressions=exprs, source_name=self.source_name, pdl=self.pdl)
        with self._lock:
            for e in exprs:
                self._kernels.setdefault(e, m.get_kernel(e))
            self._done.add(key)

    def add(self, exprs) -> None:
        """Compile instantiations that name_expressions() does not list (a tuning sweep's
        variants) in one more module, so kernel() finds them."""
        from ..runtime.compiler import compile_module
        exprs = [e for e in dict.fromkeys(exprs) if e not in self._kernels]
        if exprs:
            m = compile_module(self.source, name_expressions=exprs, source_name=self.source_name, pdl=self.pdl)
            with self._lock:
                for e in exprs:
                    self._kernels.setdefault(e, m.get_kernel(e))

    def kernel(self, expr: str):
        """The cudakit Kernel for a name expression (one object per expression, so per-kernel
        state such as a raised shared-memory limit persists)."""
        k = self._kernels.get(expr)
        if k is None:
            self.compile_group(self._group(expr))
            if expr not in self._kernels:   # not listed by name_expressions(): compiled on its own
                self.add([expr])
            k = self._kernels[expr]
        return k

    def function(self, dev: int, expr: str):
        """The CuPy Function of `expr` loaded on device `dev` (cached)."""
        f = self._functions.get((dev, expr))
        if f is None:
            f = self._functions[(dev, expr)] = self.kernel(expr)._function(dev)
        return f


def by_template(expr: str) -> str:
    """A KernelFamily group: the kernel template's name, its register and loop forms together
    ("ck_ln_fwd_reg<float, 4>" and "ck_ln_fwd_loop<float>" -> "ck_ln_fwd"; "ck_ln_bwd_reg_res" and
    "ck_ln_bwd_loop_res" -> "ck_ln_bwd_res"). Each NVRTC call
    costs about 0.4 s before its first kernel (nvcc, sm_90, 2-core host): families of a few
    kernels (cross_entropy, 10: 1.0 s) stay whole, those of 20-53 (normalization: 5.1 s a dtype)
    are split, so a first layernorm compiles its 10 forward kernels only."""
    name = expr.split("<", 1)[0].strip()
    return "_".join(w for w in name.split("_") if w not in ("reg", "loop"))   # ck_ln_bwd_reg_res -> ck_ln_bwd_res


# Helpers of the row kernels (normalization, softmax, cross-entropy): 16-byte packs <-> float
# values two 16-bit elements at a time, and a register barrier between passes over a row.
PACK_HELPERS = cuda_source("_pack_helpers.cuh")
