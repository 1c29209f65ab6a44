"""Elementwise kernels: add, mul, relu, relu_backward (float16, bfloat16, float32, float64).

Contiguous inputs take `ck_ew*_contig`: 16-byte vector loads and stores when every pointer is
16-byte aligned (V = 16 / itemsize elements per access), a grid-stride loop, 64-bit indices.
Memory traffic: (inputs + 1) * n * itemsize bytes; no arithmetic worth counting.
Broadcast or strided inputs take `ck_ew*_strided`, which honours per-operand strides (in
elements) over up to 8 collapsed dimensions.
"""
from __future__ import annotations

import numpy as np

from ..runtime import _cupy
from ..runtime.compiler import compile_module, _launch_function
from ._common import PREAMBLE, FLOAT_DTYPE_NAMES, collapse, ctype, strides_struct_dtype, vec_width

SOURCE = PREAMBLE + r"""
struct ck_add { template <typename C> __device__ __forceinline__ C operator()(C a, C b) const { return a + b; } };
struct ck_mul { template <typename C> __device__ __forceinline__ C operator()(C a, C b) const { return a * b; } };
// relu(NaN) = NaN, as numpy.maximum(x, 0) gives
struct ck_relu { template <typename C> __device__ __forceinline__ C operator()(C x) const {
  return x > C(0) ? x : (x != x ? x : C(0)); } };
// relu_backward(g, x) = g where x > 0, else 0
struct ck_relu_bwd { template <typename C> __device__ __forceinline__ C operator()(C g, C x) const {
  return x > C(0) ? g : C(0); } };

struct ck_strides2 { long long ndim; long long shape[CK_MAX_DIMS]; long long s0[CK_MAX_DIMS]; long long s1[CK_MAX_DIMS]; };
struct ck_strides3 { long long ndim; long long shape[CK_MAX_DIMS]; long long s0[CK_MAX_DIMS]; long long s1[CK_MAX_DIMS]; long long s2[CK_MAX_DIMS]; };

// a, b, out: [n] contiguous; V elements per access (pointers aligned to V * sizeof(T) bytes)
template <typename T, typename Op, int V>
__global__ void ck_ew2_contig(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                              long long n) {
  typedef ck_traits<T> tr;
  typedef ck_pack<T, V> P;
  const long long nv = n / V;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  Op op;
  for (long long i = tid; i < nv; i += stride) {
    P pa, pb, po;
    pa.raw = reinterpret_cast<const typename ck_raw<sizeof(T) * V>::type*>(a)[i];
    pb.raw = reinterpret_cast<const typename ck_raw<sizeof(T) * V>::type*>(b)[i];
#pragma unroll
    for (int k = 0; k < V; ++k) po.v[k] = tr::store(op(tr::load(pa.v[k]), tr::load(pb.v[k])));
    reinterpret_cast<typename ck_raw<sizeof(T) * V>::type*>(out)[i] = po.raw;
  }
  const long long t = nv * V + tid;  // the n % V tail
  if (t < n) out[t] = tr::store(op(tr::load(a[t]), tr::load(b[t])));
}

// x, out: [n] contiguous
template <typename T, typename Op, int V>
__global__ void ck_ew1_contig(const T* __restrict__ x, T* __restrict__ out, long long n) {
  typedef ck_traits<T> tr;
  typedef ck_pack<T, V> P;
  const long long nv = n / V;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  Op op;
  for (long long i = tid; i < nv; i += stride) {
    P px, po;
    px.raw = reinterpret_cast<const typename ck_raw<sizeof(T) * V>::type*>(x)[i];
#pragma unroll
    for (int k = 0; k < V; ++k) po.v[k] = tr::store(op(tr::load(px.v[k])));
    reinterpret_cast<typename ck_raw<sizeof(T) * V>::type*>(out)[i] = po.raw;
  }
  const long long t = nv * V + tid;
  if (t < n) out[t] = tr::store(op(tr::load(x[t])));
}

// a, b, out: strided views of the n-element output shape s.shape (strides s.s0, s.s1, s.s2)
template <typename T, typename Op>
__global__ void ck_ew2_strided(const T* a, const T* b, T* out, long long n, ck_strides3 s) {
  typedef ck_traits<T> tr;
  Op op;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    long long r = i, oa = 0, ob = 0, oo = 0;
    for (int d = (int)s.ndim - 1; d >= 0; --d) {
      const long long idx = r % s.shape[d];
      r /= s.shape[d];
      oa += idx * s.s0[d]; ob += idx * s.s1[d]; oo += idx * s.s2[d];
    }
    out[oo] = tr::store(op(tr::load(a[oa]), tr::load(b[ob])));
  }
}

// x, out: strided views of the output shape s.shape (strides s.s0, s.s1)
template <typename T, typename Op>
__global__ void ck_ew1_strided(const T* x, T* out, long long n, ck_strides2 s) {
  typedef ck_traits<T> tr;
  Op op;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    long long r = i, ox = 0, oo = 0;
    for (int d = (int)s.ndim - 1; d >= 0; --d) {
      const long long idx = r % s.shape[d];
      r /= s.shape[d];
      ox += idx * s.s0[d]; oo += idx * s.s1[d];
    }
    out[oo] = tr::store(op(tr::load(x[ox])));
  }
}
"""

BINARY_OPS = {"add": "ck_add", "mul": "ck_mul", "relu_backward": "ck_relu_bwd"}
UNARY_OPS = {"relu": "ck_relu"}
THREADS = 256


def _expr(kind: str, op: str, dtype_name: str, vec: int | None) -> str:
    functor = BINARY_OPS.get(op) or UNARY_OPS[op]
    arity = 2 if op in BINARY_OPS else 1
    t = ctype(dtype_name)
    if kind == "contig":
        return f"ck_ew{arity}_contig<{t}, {functor}, {vec}>"
    return f"ck_ew{arity}_strided<{t}, {functor}>"


def name_expressions() -> list[str]:
    """Every template instantiation this module launches."""
    out = []
    for op in (*BINARY_OPS, *UNARY_OPS):
        for dt in FLOAT_DTYPE_NAMES:
            out += [_expr("contig", op, dt, vec_width(dt)), _expr("contig", op, dt, 1),
                    _expr("strided", op, dt, None)]
    return out


_module = None
_functions: dict[tuple, object] = {}   # (device, expr) -> cupy Function
_blocks_cap: dict[int, int] = {}       # device -> grid size that fills it (grid-stride loops)
_S2, _S3 = strides_struct_dtype(2), strides_struct_dtype(3)


def _function(dev: int, expr: str):
    global _module
    f = _functions.get((dev, expr))
    if f is None:
        if _module is None:
            _module = compile_module(SOURCE, name_expressions=name_expressions(),
                                     source_name="cudakit/elementwise.cu")
        f = _functions[(dev, expr)] = _module.get_kernel(expr)._function(dev)
        if dev not in _blocks_cap:
            from ..runtime.device import get_device_info
            _blocks_cap[dev] = get_device_info(dev).multiprocessors * (2048 // THREADS)
    return f


def _grid(dev: int, work: int) -> tuple:
    return (max(1, min((work + THREADS - 1) // THREADS, _blocks_cap[dev])), 1, 1)


def _aligned(*arrays) -> bool:
    return all(x.data.ptr % 16 == 0 for x in arrays)


def _elem_strides(x, shape):
    """x's strides in elements, broadcast to `shape` (0 along broadcast dimensions)."""
    pad = len(shape) - x.ndim
    st = [0] * pad + [s // x.itemsize for s in x.strides]
    xs = (1,) * pad + x.shape
    return tuple(0 if xs[d] == 1 and shape[d] != 1 else st[d] for d in range(len(shape)))


def _strided_args(struct_dtype, shape, operands):
    cshape, cstrides = collapse(shape, [_elem_strides(x, shape) for x in operands])
    if len(cshape) > 8:
        return None
    s = np.zeros(1, struct_dtype)
    s["ndim"] = len(cshape)
    s["shape"][0, :len(cshape)] = cshape
    for i, st in enumerate(cstrides):
        s[f"s{i}"][0, :len(cshape)] = st
    return s


def _contiguous(x) -> bool:
    return x.flags.c_contiguous


def run(op: str, inputs: tuple, out):
    """out[...] = op(*inputs), broadcasting inputs to out.shape. Inputs and out are CuPy arrays of
    one dtype on the current device; the caller (the CUDA backend) has validated them."""
    n = out.size
    if n == 0:
        return out
    cp = _cupy.loaded_cupy()
    dev = out.data.device_id
    dtype_name = out.dtype.name
    if all(x.shape == out.shape and _contiguous(x) for x in inputs) and _contiguous(out):
        vec = vec_width(dtype_name) if _aligned(out, *inputs) else 1
        expr = _expr("contig", op, dtype_name, vec)
        f = _function(dev, expr)
        _launch_function(expr, f, _grid(dev, n // vec or 1), (THREADS, 1, 1), (*inputs, out, np.int64(n)), 0, None)
        return out
    struct = _strided_args(_S3 if len(inputs) == 2 else _S2, out.shape, (*inputs, out))
    if struct is None:  # more than 8 non-mergeable dimensions: compute on contiguous copies
        tmp = run(op, tuple(cp.ascontiguousarray(cp.broadcast_to(x, out.shape)) for x in inputs),
                  cp.empty(out.shape, out.dtype))
        out[...] = tmp
        return out
    expr = _expr("strided", op, dtype_name, None)
    f = _function(dev, expr)
    _launch_function(expr, f, _grid(dev, n), (THREADS, 1, 1), (*inputs, out, np.int64(n), struct), 0, None)
    return out
