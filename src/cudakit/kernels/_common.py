"""Pieces every CUDA C++ kernel module shares: the scalar-type preamble and dtype tables.

The preamble needs no CUDA header: float16 and bfloat16 are 2-byte structs converted with PTX
(`cvt`) and bit arithmetic, so the same source compiles under NVRTC and nvcc on any toolkit.
Arithmetic on 16-bit types happens in float32 (`ck_traits<T>::acc`), float64 stays double.
"""
from __future__ import annotations

import threading

import numpy as np

PREAMBLE = r"""
struct __align__(2) ck_half { unsigned short bits; };
struct __align__(2) ck_bf16 { unsigned short bits; };

template <typename T> struct ck_traits;
template <> struct ck_traits<float> {
  typedef float acc;
  static const int fast = 0;  // fast math level: 0 exact, 1 float16, 2 bfloat16 (see elementwise.py)
  static __device__ __forceinline__ float load(float v) { return v; }
  static __device__ __forceinline__ float store(float v) { return v; }
};
template <> struct ck_traits<double> {
  typedef double acc;
  static const int fast = 0;
  static __device__ __forceinline__ double load(double v) { return v; }
  static __device__ __forceinline__ double store(double v) { return v; }
};
template <> struct ck_traits<ck_half> {
  typedef float acc;
  static const int fast = 1;
  static __device__ __forceinline__ float load(ck_half v) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits)); return f;
  }
  static __device__ __forceinline__ ck_half store(float f) {
    ck_half h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f)); return h;
  }
  // two results rounded together (one cvt from sm_80 on): lo in the low half, the lower address
  static __device__ __forceinline__ unsigned int store2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned int r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
#else
    return (unsigned int)store(lo).bits | ((unsigned int)store(hi).bits << 16);
#endif
  }
};
template <> struct ck_traits<ck_bf16> {
  typedef float acc;
  static const int fast = 2;
  static __device__ __forceinline__ float load(ck_bf16 v) {
    return __uint_as_float(((unsigned int)v.bits) << 16);
  }
  // Round to nearest even, NaN stays NaN. sm_80 and newer: one cvt (F2FP; a NaN becomes the
  // canonical 0x7fff); older: the bit arithmetic, about nine integer instructions an element,
  // which left bfloat16 silu and sigmoid issue-bound at the copy bandwidth.
  static __device__ __forceinline__ ck_bf16 store(float f) {
    ck_bf16 h;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
#else
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) { h.bits = (unsigned short)((u >> 16) | 0x40u); return h; }
    u += 0x7fffu + ((u >> 16) & 1u);
    h.bits = (unsigned short)(u >> 16);
#endif
    return h;
  }
  static __device__ __forceinline__ unsigned int store2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned int r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
#else
    return (unsigned int)store(lo).bits | ((unsigned int)store(hi).bits << 16);
#endif
  }
};

// Raw integer types of 2..16 bytes: a pack of V elements moves as one vector load/store.
template <int B> struct ck_raw;
template <> struct ck_raw<16> { typedef uint4 type; };
template <> struct ck_raw<8> { typedef uint2 type; };
template <> struct ck_raw<4> { typedef unsigned int type; };
template <> struct ck_raw<2> { typedef unsigned short type; };
template <typename T, int V> union ck_pack { typename ck_raw<sizeof(T) * V>::type raw; T v[V]; };

// po = the V results r rounded to T; 16-bit types round them in pairs (one cvt for two).
template <typename T, int V, typename C>
__device__ __forceinline__ void ck_store_pack(ck_pack<T, V>& po, const C (&r)[V]) {
  typedef ck_traits<T> tr;
  if constexpr (sizeof(T) == 2 && V % 2 == 0) {
#pragma unroll
    for (int k = 0; k < V; k += 2) {
      const unsigned int w = tr::store2(r[k], r[k + 1]);
      po.v[k].bits = (unsigned short)w;
      po.v[k + 1].bits = (unsigned short)(w >> 16);
    }
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) po.v[k] = tr::store(r[k]);
  }
}

// Streaming 16-byte reads under an L2 evict_last policy (sm_80+), each 128-byte line handed back to
// evict_normal (ck_l2_release) once the thread is done with it, so no stale high-priority line
// outlives the kernel. On H100s the pair raised the bandwidth of the elementwise kernels by 0.2-1%
// (scripts/ew_l2_policy_ab.py, elementwise.py says more); evict_last without the release left a
// following kernel's L2 reuse 15% slower. -DCK_L2_KEEP=0: plain loads (for A/B runs);
// -DCK_L2_RELEASE=0: the policy without the release (only to measure what the release is for).
#ifndef CK_L2_KEEP
#define CK_L2_KEEP 1
#endif
#ifndef CK_L2_RELEASE
#define CK_L2_RELEASE 1
#endif
template <typename R> __device__ __forceinline__ R ck_ld_keep(const R* p) { return *p; }
template <typename R> __device__ __forceinline__ void ck_l2_release(const R* p) {}
#if CK_L2_KEEP && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
template <> __device__ __forceinline__ uint4 ck_ld_keep<uint4>(const uint4* p) {
  uint4 v;
  unsigned long long policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy));
  return v;
}
// Each line a warp read is released once: by the thread whose pack starts it, and the warp's first
// line by lane 0 (packs are only 16-byte aligned; consecutive lanes must read consecutive packs
// for every line to be covered). A hint: it changes speed, never a value.
template <> __device__ __forceinline__ void ck_l2_release<uint4>(const uint4* p) {
  if (!CK_L2_RELEASE) return;
  const unsigned long long a = reinterpret_cast<unsigned long long>(p);
  if ((a & 127) == 0 || (threadIdx.x & 31) == 0)
    asm volatile("applypriority.global.L2::evict_normal [%0], 128;" :: "l"(a & ~127ull) : "memory");
}
#endif

#define CK_MAX_DIMS 8
"""

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
        m = compile_module(self.source, name_expressions=exprs, source_name=self.source_name)
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
            m = compile_module(self.source, name_expressions=exprs, source_name=self.source_name)
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
    ("ck_ln_fwd_reg<float, 4>" and "ck_ln_fwd_loop<float>" -> "ck_ln_fwd"). Each NVRTC call
    costs about 0.4 s before its first kernel (nvcc, sm_90, 2-core host): families of a few
    kernels (cross_entropy, 10: 1.0 s) stay whole, those of 20-53 (normalization: 5.1 s a dtype)
    are split, so a first layernorm compiles its 10 forward kernels only."""
    name = expr.split("<", 1)[0].strip()
    for suffix in ("_reg", "_loop"):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


# Helpers of the row kernels (normalization, softmax, cross-entropy): 16-byte packs <-> float
# values two 16-bit elements at a time, and a register barrier between passes over a row.
PACK_HELPERS = r"""
// Makes a pack's registers opaque to the compiler. Called between the passes over a row held in
// registers, it stops the compiler from keeping the converted float values of pass 1 alive until
// pass 2 (twice the registers of the raw 16-byte packs, or more): pass 2 converts them again.
__device__ __forceinline__ void ck_opaque(uint4& r) { asm volatile("" : "+r"(r.x), "+r"(r.y), "+r"(r.z), "+r"(r.w)); }
__device__ __forceinline__ void ck_opaque(uint2& r) { asm volatile("" : "+r"(r.x), "+r"(r.y)); }
__device__ __forceinline__ void ck_opaque(unsigned int& r) { asm volatile("" : "+r"(r)); }
__device__ __forceinline__ void ck_opaque(unsigned short& r) { asm volatile("" : "+h"(r)); }

// Whole packs <-> accumulation-type values. 16-bit packs convert a 32-bit word (two elements) at
// a time: bfloat16 -> float is a shift or a mask, float -> bfloat16/half pairs one cvt.rn.*x2
// instruction on sm_80+ (round to nearest even, as ck_traits::store). The forward of a bfloat16
// layernorm is otherwise bound by instruction issue, not by memory.
__device__ __forceinline__ unsigned int ck_word(const uint4& r, int k) { return k == 0 ? r.x : k == 1 ? r.y : k == 2 ? r.z : r.w; }
__device__ __forceinline__ unsigned int ck_word(const uint2& r, int k) { return k == 0 ? r.x : r.y; }
__device__ __forceinline__ unsigned int ck_word(const unsigned int& r, int) { return r; }
__device__ __forceinline__ void ck_set_word(uint4& r, int k, unsigned int v) {
  if (k == 0) r.x = v; else if (k == 1) r.y = v; else if (k == 2) r.z = v; else r.w = v;
}
__device__ __forceinline__ void ck_set_word(uint2& r, int k, unsigned int v) { if (k == 0) r.x = v; else r.y = v; }
__device__ __forceinline__ void ck_set_word(unsigned int& r, int, unsigned int v) { r = v; }

__device__ __forceinline__ void ck_unpack2(ck_bf16, unsigned int w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void ck_unpack2(ck_half, unsigned int w, float& lo, float& hi) {
  ck_half a, b;
  a.bits = (unsigned short)(w & 0xffffu);
  b.bits = (unsigned short)(w >> 16);
  lo = ck_traits<ck_half>::load(a);
  hi = ck_traits<ck_half>::load(b);
}
__device__ __forceinline__ unsigned int ck_pack2(ck_bf16, float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned int w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
#else
  return (unsigned int)ck_traits<ck_bf16>::store(lo).bits | ((unsigned int)ck_traits<ck_bf16>::store(hi).bits << 16);
#endif
}
__device__ __forceinline__ unsigned int ck_pack2(ck_half, float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned int w;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
#else
  return (unsigned int)ck_traits<ck_half>::store(lo).bits | ((unsigned int)ck_traits<ck_half>::store(hi).bits << 16);
#endif
}

template <typename T, int V, bool WORDS = (sizeof(T) == 2 && V >= 2)> struct ck_cvt {
  typedef typename ck_traits<T>::acc C;
  static __device__ __forceinline__ void load(const ck_pack<T, V>& p, C (&f)[V]) {
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = ck_traits<T>::load(p.v[i]);
  }
  static __device__ __forceinline__ void store(ck_pack<T, V>& p, const C (&f)[V]) {
#pragma unroll
    for (int i = 0; i < V; ++i) p.v[i] = ck_traits<T>::store(f[i]);
  }
};
template <typename T, int V> struct ck_cvt<T, V, true> {
  static __device__ __forceinline__ void load(const ck_pack<T, V>& p, float (&f)[V]) {
#pragma unroll
    for (int k = 0; k < V / 2; ++k) ck_unpack2(T(), ck_word(p.raw, k), f[2 * k], f[2 * k + 1]);
  }
  static __device__ __forceinline__ void store(ck_pack<T, V>& p, const float (&f)[V]) {
#pragma unroll
    for (int k = 0; k < V / 2; ++k) ck_set_word(p.raw, k, ck_pack2(T(), f[2 * k], f[2 * k + 1]));
  }
};
"""
