"""Pieces every CUDA C++ kernel module shares: the scalar-type preamble and dtype tables.

The preamble needs no CUDA header: float16 and bfloat16 are 2-byte structs converted with PTX
(`cvt`) and bit arithmetic, so the same source compiles under NVRTC and nvcc on any toolkit.
Arithmetic on 16-bit types happens in float32 (`ck_traits<T>::acc`), float64 stays double.
"""
from __future__ import annotations

import numpy as np

PREAMBLE = r"""
struct __align__(2) ck_half { unsigned short bits; };
struct __align__(2) ck_bf16 { unsigned short bits; };

template <typename T> struct ck_traits;
template <> struct ck_traits<float> {
  typedef float acc;
  static const bool fast = false;  // fast math intrinsics allowed (see elementwise.py)
  static __device__ __forceinline__ float load(float v) { return v; }
  static __device__ __forceinline__ float store(float v) { return v; }
};
template <> struct ck_traits<double> {
  typedef double acc;
  static const bool fast = false;
  static __device__ __forceinline__ double load(double v) { return v; }
  static __device__ __forceinline__ double store(double v) { return v; }
};
template <> struct ck_traits<ck_half> {
  typedef float acc;
  static const bool fast = true;
  static __device__ __forceinline__ float load(ck_half v) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits)); return f;
  }
  static __device__ __forceinline__ ck_half store(float f) {
    ck_half h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f)); return h;
  }
};
template <> struct ck_traits<ck_bf16> {
  typedef float acc;
  static const bool fast = true;
  static __device__ __forceinline__ float load(ck_bf16 v) {
    return __uint_as_float(((unsigned int)v.bits) << 16);
  }
  static __device__ __forceinline__ ck_bf16 store(float f) {  // round to nearest even, NaN stays NaN
    unsigned int u = __float_as_uint(f);
    ck_bf16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) { h.bits = (unsigned short)((u >> 16) | 0x40u); return h; }
    u += 0x7fffu + ((u >> 16) & 1u);
    h.bits = (unsigned short)(u >> 16);
    return h;
  }
};

// Raw integer types of 2..16 bytes: a pack of V elements moves as one vector load/store.
template <int B> struct ck_raw;
template <> struct ck_raw<16> { typedef uint4 type; };
template <> struct ck_raw<8> { typedef uint2 type; };
template <> struct ck_raw<4> { typedef unsigned int type; };
template <> struct ck_raw<2> { typedef unsigned short type; };
template <typename T, int V> union ck_pack { typename ck_raw<sizeof(T) * V>::type raw; T v[V]; };

#define CK_MAX_DIMS 8
"""

_CTYPES = {"float16": "ck_half", "bfloat16": "ck_bf16", "float32": "float", "float64": "double"}
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
FLOAT_DTYPE_NAMES = tuple(_CTYPES)


def _name(dtype) -> str:
    return dtype if isinstance(dtype, str) else np.dtype(dtype).name


def ctype(dtype) -> str:
    """The C type name for a dtype or dtype name (float16, bfloat16, float32, float64)."""
    return _CTYPES[_name(dtype)]


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
    """The kernels of one CUDA C++ source: compiled together on first use (all name expressions in
    one NVRTC call, so one cache entry), then looked up per (device, name expression)."""

    def __init__(self, source: str, name_expressions, source_name: str):
        self.source, self.source_name = source, source_name
        self._names = name_expressions
        self._module = None
        self._kernels: dict = {}
        self._functions: dict = {}

    @property
    def module(self):
        if self._module is None:
            from ..runtime.compiler import compile_module
            names = self._names() if callable(self._names) else self._names
            self._module = compile_module(self.source, name_expressions=names, source_name=self.source_name)
        return self._module

    def kernel(self, expr: str):
        """The cudakit Kernel for a name expression (one object per expression, so per-kernel
        state such as a raised shared-memory limit persists)."""
        k = self._kernels.get(expr)
        if k is None:
            k = self._kernels[expr] = self.module.get_kernel(expr)
        return k

    def function(self, dev: int, expr: str):
        """The CuPy Function of `expr` loaded on device `dev` (cached)."""
        f = self._functions.get((dev, expr))
        if f is None:
            f = self._functions[(dev, expr)] = self.kernel(expr)._function(dev)
        return f
