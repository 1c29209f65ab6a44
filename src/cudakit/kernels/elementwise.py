"""Elementwise kernels (float16, bfloat16, float32, float64): add, sub, mul, div (two arrays, or an
array and a Python scalar); relu, leaky_relu,
sigmoid, tanh, silu, gelu (tanh approximation and exact erf) and the backward of each activation,
computed from the activation's input: act_backward(grad_out, x) = grad_out * act'(x).

Contiguous inputs take `ck_ew*_contig`: 16-byte vector loads and stores when every pointer is
16-byte aligned (V = 16 / itemsize elements per access), a grid-stride loop, 64-bit indices.
Memory traffic: (inputs + 1) * n * itemsize bytes; no arithmetic worth counting.
Broadcast or strided inputs take `ck_ew*_strided`, which honours per-operand strides (in
elements) over up to 8 collapsed dimensions.
"""
from __future__ import annotations

import numpy as np

from .. import profiler
from ..errors import LaunchError  # noqa: F401  (raised from run)
from ..runtime import _cupy, launch as _launch
from ..runtime.compiler import _launch_function
from ..runtime.launch import launch_blocking
from ._common import PREAMBLE, FLOAT_DTYPE_NAMES, KernelFamily, collapse, ctype, strides_struct_dtype, vec_width
from . import ew_shapes

SOURCE = PREAMBLE + r"""
// Every functor carries one runtime parameter p (leaky_relu's negative slope; unused elsewhere).
// Math in the accumulation type C: float for 16-bit and float32 data, double for float64.
// F (ck_traits<T>::fast) is 0 for float32/float64 (exact math), 1 for float16 and 2 for bfloat16.
// F >= 1: the fast forms (ex2.approx, rcp.approx: a few float32 ulps) vanish in the final rounding
// to 8 or 11 mantissa bits, and without them bfloat16 gelu/silu/sigmoid are compute-bound.
// F == 2: also tanh.approx (relative error 2^-11, a quarter of bfloat16's half ulp, 2^-9; too
// close to float16's 2^-11 to keep its results correctly rounded): bfloat16 tanh was bound by
// tanhf's instructions below 4 loads in flight per thread (0.94-0.96x torch), now 1.002-1.007x at
// (1, 512) (scripts/ew_source_ab.py and probes on lent H100s, 2026-11-23).
// Every bfloat16 input gives a result within one ulp of the correctly rounded one
// (tests/gpu/test_activations_gpu.py), except that ex2.approx flushes results below 2^-126 to 0:
// results under about 2^-118 (silu(-88) = -5e-37) may come out 0.
// ex2 and rcp in their flush-to-zero forms: without .ftz, sm_90 wraps each MUFU in a subnormal
// fix-up (a compare and two multiplies). Flushed are only results under 2^-126, which the 16-bit
// results below tolerate as stated above.
__device__ __forceinline__ float ck_ex2_ftz(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ __forceinline__ float ck_rcp_ftz(float x) { float y; asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
template <int F> __device__ __forceinline__ float ck_exp(float x) { return F ? ck_ex2_ftz(x * 1.4426950408889634f) : expf(x); }
template <int F> __device__ __forceinline__ double ck_exp(double x) { return exp(x); }
template <int F> __device__ __forceinline__ float ck_fdiv(float a, float b) { return F ? a * ck_rcp_ftz(b) : a / b; }
template <int F> __device__ __forceinline__ double ck_fdiv(double a, double b) { return a / b; }
template <int F> __device__ __forceinline__ float ck_tanh(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750   // tanh.approx: sm_75 and newer
  if constexpr (F == 2) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  }
#endif
  return tanhf(x);
}
template <int F> __device__ __forceinline__ double ck_tanh(double x) { return tanh(x); }
// Phi(x) = 0.5 erfc(-x / sqrt2), the normal CDF, and phi(x) = exp(-x^2 / 2) / sqrt(2 pi), its
// density: erfc, not 1 + erf, so no cancellation for large negative x. 16-bit storage (F >= 1):
// erfc(z) = t exp(-z^2) Q(t), t = 1 / (1 + z/2), z = |x| / sqrt2, the form of
// Numerical Recipes' erfcc with Q a degree-5 polynomial fitted here (relative minimax by Lawson's
// reweighting on z in [0, 10] against mpmath). With w = |x| sqrt(log2(e) / 2), exp(-z^2) =
// exp(-x^2 / 2) = 2^(-w^2): one ex2.approx serves Phi and phi. Relative error of Phi < 3.7e-5 in
// float32 arithmetic (checked against math.erfc on 8e5 points in [-20, 20]), far below a 16-bit
// ulp (2^-8, 2^-11); about half the instructions of erfcf, which left bfloat16 gelu_erf at 0.6 of
// the copy bandwidth. The coefficients below are Q's halved (exact), so t Q(t) / 2 needs no
// multiply by 1/2. No clamp of w: rcp.approx of an infinite denominator is 0, so |x| = inf gives
// r = 0; a NaN x reaches gelu's result through the factor x.
// ck_tail_fast: t Q(t) / 2 for w (Phi(-|x|) = e times it) and e = exp(-x^2 / 2).
__device__ __forceinline__ float ck_tail_fast(float w, float& e) {
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(-w * w));      // exp(-x^2 / 2) = 2^(-w^2)
  const float t = ck_rcp_ftz(fmaf(0.41627730557884884f, w, 1.0f));
  float q = -0.028631171f;
  q = fmaf(q, t, -0.005835089f); q = fmaf(q, t, 0.15320511f); q = fmaf(q, t, 0.09372397f);
  q = fmaf(q, t, 0.14689232f); q = fmaf(q, t, 0.14063206f);
  return t * q;
}
__device__ __forceinline__ void ck_cdf_pdf_fast(float x, float& cdf, float& e) {
  const float tail = ck_tail_fast(fabsf(x) * 0.849321800288019f, e);
  const float r = tail * e;   // Phi(-|x|)
  cdf = x > 0.0f ? 1.0f - r : r;
}
template <int F> __device__ __forceinline__ float ck_cdf(float x) {
  if constexpr (F != 0) {
    float c, e;
    ck_cdf_pdf_fast(x, c, e);
    return c;
  } else {
    return 0.5f * erfcf(x * -0.7071067811865476f);
  }
}
template <int F> __device__ __forceinline__ double ck_cdf(double x) { return 0.5 * erfc(x * -0.7071067811865476); }
// Phi and phi together (gelu_erf's backward needs both): 16-bit storage shares one ex2.
template <int F, typename C> __device__ __forceinline__ void ck_cdf_pdf(C x, C& cdf, C& pdf) {
  if constexpr (F != 0 && sizeof(C) == 4) {
    float e;
    ck_cdf_pdf_fast(x, cdf, e);
    pdf = 0.3989422804014327f * e;
  } else {
    cdf = ck_cdf<F>(x);
    pdf = C(0.3989422804014327) * ck_exp<F>(C(-0.5) * x * x);
  }
}

// sigmoid without overflow: exp of a non-positive number only, so sigmoid(-100) is 3.8e-44, not 0.
// 16-bit storage: 1 / (1 + exp(-x)) straight, without the sign selects (an overflowing exp gives
// 1 / inf = 0, as the limit; below -87 both forms give 0, ex2.approx flushing to zero).
template <int F, typename C> __device__ __forceinline__ C ck_sigmoid(C x) {
  if constexpr (F != 0 && sizeof(C) == 4) {
    return ck_rcp_ftz(1.0f + ck_ex2_ftz(x * -1.4426950408889634f));
  } else {
    const C e = ck_exp<F>(x > C(0) ? -x : x);
    return ck_fdiv<F>(x > C(0) ? C(1) : e, C(1) + e);
  }
}
// gelu (tanh approximation)'s factor sigmoid(2u), u = k0 (x + k1 x^3), k0 = sqrt(2/pi),
// k1 = 0.044715. 16-bit storage folds the constants: exp(-2u) = 2^(x (a + b x^2)) with
// a = -2 k0 log2(e), b = a k1, one multiply-add and two multiplies before the ex2.
template <int F, typename C> __device__ __forceinline__ C ck_gelu_sig(C x) {
  if constexpr (F != 0 && sizeof(C) == 4) {
    const float a = -2.302208198144325f, b = -0.1029432395800235f;
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * fmaf(b, x * x, a)));
    return ck_rcp_ftz(1.0f + e);
  } else {
    const C k0 = C(0.7978845608028654), k1 = C(0.044715);
    return ck_sigmoid<F>(C(2) * k0 * (x + k1 * x * x * x));
  }
}

struct ck_op { double p; };
struct ck_add : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C a, C b) const { return a + b; } };
struct ck_sub : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C a, C b) const { return a - b; } };
struct ck_mul : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C a, C b) const { return a * b; } };
struct ck_div : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C a, C b) const { return a / b; } };
// A Python scalar operand travels as p, already rounded to the array's dtype on the host (as
// NumPy rounds a scalar to the array's dtype), so C(p) is exact; r* put the scalar on the left.
struct ck_add_s : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C x) const { return x + C(p); } };
struct ck_sub_s : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C x) const { return x - C(p); } };
struct ck_rsub_s : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C x) const { return C(p) - x; } };
struct ck_mul_s : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C x) const { return x * C(p); } };
// 16-bit storage divides by multiplying with the scalar's reciprocal (as torch does for every
// float dtype): the float32 product is within an ulp of the quotient, far below the 16-bit
// rounding, and the full-precision divide made bfloat16 x / 2.5 bound by instruction issue.
__device__ __forceinline__ float ck_recip(double p) { return __frcp_rn((float)p); }
struct ck_div_s : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C x) const {
  return F ? x * C(ck_recip(p)) : x / C(p); } };
struct ck_rdiv_s : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C x) const { return C(p) / x; } };
// relu(NaN) = NaN, as numpy.maximum(x, 0) gives
struct ck_relu : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C x) const {
  return x > C(0) ? x : (x != x ? x : C(0)); } };
// relu_backward(g, x) = g where x > 0, else 0
struct ck_relu_bwd : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C g, C x) const {
  return x > C(0) ? g : C(0); } };
struct ck_leaky : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C x) const {
  return x > C(0) ? x : x * C(p); } };
struct ck_leaky_bwd : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C g, C x) const {
  return x > C(0) ? g : g * C(p); } };
struct ck_sigm : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C x) const {
  return ck_sigmoid<F>(x); } };
// s (1 - s) = e / (1 + e)^2 with e = exp(-|x|): 1 - s would cancel for large positive x
struct ck_sigm_bwd : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C g, C x) const {
  const C e = ck_exp<F>(x > C(0) ? -x : x), d = C(1) + e;
  return g * ck_fdiv<F>(e, d * d); } };
struct ck_tanh_op : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C x) const {
  return ck_tanh<F>(x); } };
// 1 - tanh(x)^2 = sech(x)^2 = 4 e / (1 + e)^2, e = exp(-2|x|): no cancellation for large |x|
struct ck_tanh_bwd : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C g, C x) const {
  const C e = ck_exp<F>(C(-2) * (x > C(0) ? x : -x)), d = C(1) + e;
  return g * ck_fdiv<F>(C(4) * e, d * d); } };
struct ck_silu : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C x) const {
  return x * ck_sigmoid<F>(x); } };
struct ck_silu_bwd : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C g, C x) const {
  const C s = ck_sigmoid<F>(x); return g * s * (C(1) + x * (C(1) - s)); } };
// gelu, tanh approximation: 0.5 x (1 + tanh(u)), computed as x * sigmoid(2u) (the same
// function: 1 + tanh(u) = 2 sigmoid(2u)), which does not cancel to 0 for large negative x
struct ck_gelu_tanh : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C x) const {
  return x * ck_gelu_sig<F>(x); } };
struct ck_gelu_tanh_bwd : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C g, C x) const {
  const C k0 = C(0.7978845608028654), k1 = C(0.044715);
  const C s = ck_gelu_sig<F>(x), d = s * (C(1) - s);   // s = (1 + tanh(u)) / 2
  // d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx with 0.5 (1 + t) = s and 1 - t^2 = 4 s (1 - s);
  // where s (1 - s) is 0 the second term is (x^3 overflows for |x| > 7e12 in float32: 0 * inf).
  // 16-bit storage: 2 k0 x (1 + 3 k1 x^2) = x (2 k0 + 6 k0 k1 x^2), one multiply-add fewer
  if constexpr (F != 0 && sizeof(C) == 4)
    return g * (d == 0.0f ? s : fmaf(d, x * fmaf(0.21406445f, x * x, 1.5957692f), s));
  else
    return g * (s + (d == C(0) ? C(0) : C(2) * x * d * k0 * (C(1) + C(3) * k1 * x * x))); } };
// gelu, exact: x * Phi(x), Phi(x) = 0.5 erfc(-x / sqrt(2)) (erfc, not 1 + erf: no cancellation)
struct ck_gelu_erf : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C x) const {
  return x * ck_cdf<F>(x); } };
// Phi(x) + x phi(x); 16-bit storage: m = Phi(-|x|) - |x| phi(x) = e (t Q / 2 - k w), k w = |x| / sqrt(2 pi),
// is the derivative for x <= 0 and 1 minus it for x > 0 (e factored out: a third fewer instructions
// than Phi and phi apart, which left bfloat16 at 0.996x torch's)
struct ck_gelu_erf_bwd : ck_op { template <int F, typename C> __device__ __forceinline__ C f(C g, C x) const {
  if constexpr (F != 0 && sizeof(C) == 4) {
    const float w = fabsf(x) * 0.849321800288019f;
    float e;
    const float tail = ck_tail_fast(w, e);
    const float m = e * fmaf(-0.46971864f, w, tail);
    return g * (x > 0.0f ? 1.0f - m : m);
  } else {
    C cdf, pdf;
    ck_cdf_pdf<F>(x, cdf, pdf);
    return g * (cdf + x * pdf);
  }
} };

struct ck_strides2 { long long ndim; long long shape[CK_MAX_DIMS]; long long s0[CK_MAX_DIMS]; long long s1[CK_MAX_DIMS]; };
struct ck_strides3 { long long ndim; long long shape[CK_MAX_DIMS]; long long s0[CK_MAX_DIMS]; long long s1[CK_MAX_DIMS]; long long s2[CK_MAX_DIMS]; };

// Contiguous kernels. Each block step covers a tile of U * blockDim.x vectors of V elements; a
// thread issues its U independent 16-byte loads (per input) before it uses any of them, so enough
// bytes are in flight to saturate HBM. Grid-stride over tiles.

// Stores of 16-byte packs: streaming (evict-first, st.global.cs) when CK_STREAM_STORE is set.
template <typename R> __device__ __forceinline__ void ck_st(R* p, const R& v) { *p = v; }
#ifdef CK_STREAM_STORE
template <> __device__ __forceinline__ void ck_st<uint4>(uint4* p, const uint4& v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
#endif
// Loads of 16-byte packs: under the preamble's L2 policy (ck_ld_keep), each line released after the
// warp's store of its results (released as soon as the data had arrived, before the math, about
// half the gain was left: GPU-cf0e6ea0). Measured on lent H100s (2026-11-26,
// scripts/ew_l2_policy_ab.py, eight output placements shared with torch): 0.2-1% more bandwidth
// at the shapes retuned with it (TUNED_BY_MODEL); evict_last without the release was as fast but
// left a following kernel's 24 MB L2 working set 15% slower. The release costs registers (40
// instead of 32 in the 16-bit gelu_erf backward at U = 1): heavy ops moved to shapes that keep
// their occupancy. CK_LOAD_HINT (a PTX qualifier string) replaces the policy
// (scripts/ew_hint_variants.py).
template <typename R> __device__ __forceinline__ R ck_ld(const R* p) { return ck_ld_keep(p); }
template <typename R> __device__ __forceinline__ void ck_release(const R* p) { ck_l2_release(p); }
#if defined(CK_LOAD_HINT)
template <> __device__ __forceinline__ uint4 ck_ld<uint4>(const uint4* p) {
  uint4 v;
  asm("ld.global.nc" CK_LOAD_HINT ".v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
template <> __device__ __forceinline__ void ck_release<uint4>(const uint4* p) {}
#endif

// a, b, out: [n] contiguous, pointers aligned to V * sizeof(T) bytes
template <typename T, typename Op, int V, int U>
__global__ void ck_ew2_contig(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                              long long n, double p) {
  typedef ck_traits<T> tr;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  const R* __restrict__ ra = reinterpret_cast<const R*>(a);
  const R* __restrict__ rb = reinterpret_cast<const R*>(b);
  R* __restrict__ ro = reinterpret_cast<R*>(out);
  const long long nv = n / V;
  const long long tile = (long long)blockDim.x * U;
  Op op;
  op.p = p;
  for (long long base = (long long)blockIdx.x * tile + threadIdx.x; base < nv;
       base += (long long)gridDim.x * tile) {
    ck_pack<T, V> pa[U], pb[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long i = base + (long long)u * blockDim.x;
      if (i < nv) { pa[u].raw = ck_ld(ra + i); pb[u].raw = ck_ld(rb + i); }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long i = base + (long long)u * blockDim.x;
      if (i < nv) {
        typename tr::acc r[V];
#pragma unroll
        for (int k = 0; k < V; ++k) r[k] = op.template f<tr::fast>(tr::load(pa[u].v[k]), tr::load(pb[u].v[k]));
        ck_pack<T, V> po;
        ck_store_pack(po, r);
        ck_st(ro + i, po.raw);
        ck_release(ra + i);
        ck_release(rb + i);
      }
    }
  }
  const long long t = nv * V + (long long)blockIdx.x * blockDim.x + threadIdx.x;  // the n % V tail
  if (t < n) out[t] = tr::store(op.template f<tr::fast>(tr::load(a[t]), tr::load(b[t])));
}

// x, out: [n] contiguous, pointers aligned to V * sizeof(T) bytes
template <typename T, typename Op, int V, int U>
__global__ void ck_ew1_contig(const T* __restrict__ x, T* __restrict__ out, long long n, double p) {
  typedef ck_traits<T> tr;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  const R* __restrict__ rx = reinterpret_cast<const R*>(x);
  R* __restrict__ ro = reinterpret_cast<R*>(out);
  const long long nv = n / V;
  const long long tile = (long long)blockDim.x * U;
  Op op;
  op.p = p;
  for (long long base = (long long)blockIdx.x * tile + threadIdx.x; base < nv;
       base += (long long)gridDim.x * tile) {
    ck_pack<T, V> px[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long i = base + (long long)u * blockDim.x;
      if (i < nv) px[u].raw = ck_ld(rx + i);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long i = base + (long long)u * blockDim.x;
      if (i < nv) {
        typename tr::acc r[V];
#pragma unroll
        for (int k = 0; k < V; ++k) r[k] = op.template f<tr::fast>(tr::load(px[u].v[k]));
        ck_pack<T, V> po;
        ck_store_pack(po, r);
        ck_st(ro + i, po.raw);
        ck_release(rx + i);
      }
    }
  }
  const long long t = nv * V + (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) out[t] = tr::store(op.template f<tr::fast>(tr::load(x[t])));
}

// a, b, out: strided views of the n-element output shape s.shape (strides s.s0, s.s1, s.s2)
template <typename T, typename Op>
__global__ void ck_ew2_strided(const T* a, const T* b, T* out, long long n, ck_strides3 s, double p) {
  typedef ck_traits<T> tr;
  Op op;
  op.p = p;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    long long r = i, oa = 0, ob = 0, oo = 0;
    for (int d = (int)s.ndim - 1; d >= 0; --d) {
      const long long idx = r % s.shape[d];
      r /= s.shape[d];
      oa += idx * s.s0[d]; ob += idx * s.s1[d]; oo += idx * s.s2[d];
    }
    out[oo] = tr::store(op.template f<tr::fast>(tr::load(a[oa]), tr::load(b[ob])));
  }
}

// x, out: strided views of the output shape s.shape (strides s.s0, s.s1)
template <typename T, typename Op>
__global__ void ck_ew1_strided(const T* x, T* out, long long n, ck_strides2 s, double p) {
  typedef ck_traits<T> tr;
  Op op;
  op.p = p;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    long long r = i, ox = 0, oo = 0;
    for (int d = (int)s.ndim - 1; d >= 0; --d) {
      const long long idx = r % s.shape[d];
      r /= s.shape[d];
      ox += idx * s.s0[d]; oo += idx * s.s1[d];
    }
    out[oo] = tr::store(op.template f<tr::fast>(tr::load(x[ox])));
  }
}
"""

MAX_GRID_X = 2**31 - 1
BINARY_OPS = {"add": "ck_add", "sub": "ck_sub", "mul": "ck_mul", "div": "ck_div",
              "relu_backward": "ck_relu_bwd", "leaky_relu_backward": "ck_leaky_bwd",
              "sigmoid_backward": "ck_sigm_bwd", "tanh_backward": "ck_tanh_bwd", "silu_backward": "ck_silu_bwd",
              "gelu_tanh_backward": "ck_gelu_tanh_bwd", "gelu_erf_backward": "ck_gelu_erf_bwd"}
UNARY_OPS = {"relu": "ck_relu", "leaky_relu": "ck_leaky", "sigmoid": "ck_sigm", "tanh": "ck_tanh_op",
             "silu": "ck_silu", "gelu_tanh": "ck_gelu_tanh", "gelu_erf": "ck_gelu_erf",
             # a binary op with a Python scalar operand (p): one read stream, not a broadcast 0-d array
             "add_scalar": "ck_add_s", "sub_scalar": "ck_sub_s", "rsub_scalar": "ck_rsub_s",
             "mul_scalar": "ck_mul_s", "div_scalar": "ck_div_s", "rdiv_scalar": "ck_rdiv_s"}
THREADS = 256
# Compute-heavy ops on 16-bit data: their contiguous kernels held about 96 registers, so 256-thread
# blocks left 2 blocks (16 warps) per SM; 128-thread blocks fit 5 (20 warps), which hid more
# arithmetic latency (bfloat16, H100, 2^28 elements, an unroll x block-size sweep, 2026-11-22:
# gelu_tanh_backward 0.95x -> 1.00x torch; gelu_erf_backward 0.89x -> 0.97x before the shared-ex2
# form, 0.99x after it at either block size). Since the paired cvt stores (2026-11-26) they hold
# 32-40 registers at U <= 2; the 128-thread default stays for GPUs without a shipped table.
HEAVY_OPS = {"gelu_tanh_backward", "gelu_erf", "gelu_erf_backward"}
HEAVY_THREADS = 128
UNROLL = 4  # U, 16-byte loads in flight per thread and input, unless TUNED says otherwise
# (op, dtype name) -> (U, threads[, cap]) where scripts/ew_variants.py on the H100 (2^28 elements, through
# the public call, interleaved with torch; 2026-11-23 13:00 UTC, x torch: tuned vs default) found
# a shape faster than the default by more than its noise (~0.3%). Mostly one-input ops: their
# single read stream wants fewer loads in flight per thread and more threads.
TUNED: dict = {
    ("add", "float32"): (2, 512),          # 1.008 vs 1.001
    ("sub", "float32"): (2, 512),          # 1.009 vs 1.002
    ("mul", "float32"): (2, 512),          # 1.008 vs 1.001
    ("add_scalar", "float32"): (2, 512),   # 1.007 vs 0.999
    ("sub_scalar", "float32"): (2, 256),   # 1.003 vs 0.999
    ("mul_scalar", "float32"): (2, 512),   # 1.007 vs 0.999
    ("relu", "float32"): (1, 256),         # see RELU_SHAPES below
    ("tanh", "float32"): (2, 512),         # 1.005 vs 1.001
    ("add_scalar", "bfloat16"): (2, 256),  # 1.000 vs 0.996
    ("sub_scalar", "bfloat16"): (2, 256),  # 1.001 vs 0.998
    ("mul_scalar", "bfloat16"): (2, 256),  # 1.002 vs 0.999
    ("relu", "bfloat16"): (1, 256),        # see RELU_SHAPES below
    ("leaky_relu", "bfloat16"): (2, 512),  # 1.001 vs 0.997
    # 13:07 UTC sweep: the reciprocal form of x / p (below) and the heaviest op's occupancy
    ("div_scalar", "bfloat16"): (2, 256),  # 0.999 vs 0.996
    ("gelu_erf_backward", "bfloat16"): (1, 128),  # 1.000 vs 0.985 (U=2: 0.988)
    # 2026-11-23 16:24 UTC GPU-3b29df2e, scripts/ew_source_ab.py (kernels launched directly, 5 rounds interleaved
    # with torch) after tanh.approx and the folded gelu constants: x torch of the chosen shape vs
    # the previous entry (2, 256), or the default (4, 256) for tanh
    ("gelu_tanh", "bfloat16"): (1, 256),   # 1.001 vs 0.995
    ("gelu_tanh_backward", "bfloat16"): (1, 128),  # 1.013 vs 0.997
    ("silu", "bfloat16"): (1, 512),        # 1.002 vs 0.998
    ("sigmoid", "bfloat16"): (1, 512),     # 1.000 vs 0.997
    ("tanh", "bfloat16"): (1, 512),        # 1.007 vs 0.995
}
# RELU_SHAPES: the best shape for relu depends on the lent H100 instance (scripts/ew_hint_variants.py,
# 2026-11-23, x torch): (1, 512) led on one (f32 1.007/1.008, bf16 1.004) and trailed on another
# (f32 0.994, bf16 0.988), where the torch-like (1, 128) led (1.005, 1.000). (1, 256) was within
# 0.3% of the leader on both (f32 1.004 and 1.002, bf16 1.001 and 0.999): the robust choice.
# Per GPU model, ahead of TUNED (a `cudakit tune` of the GPU itself still wins): (U, threads, cap),
# the cap a bound on resident blocks per SM (ew_shapes.CANDIDATES says why). H100 SXM: with the L2
# policy of the loads (CK_L2_KEEP above), the shape with the best mean of (min, mean) x torch over
# two sweeps of scripts/ew_variants.py on GPU-1767ce2b and GPU-49a8fc8c, 2026-11-26 (in the first
# the release ran in a loop of its own after the stores); every chosen shape >= 1.005x torch in both. The caps are model-specific: on an
# H200 (2026-11-26, 7 cases, before the L2 policy) the best capped shape trailed the best uncapped
# one by 0.4-2.8% in 6 cases (float32 relu: 1.3% ahead).
TUNED_BY_MODEL: dict = {
    "NVIDIA H100 80GB HBM3": {
        ("add", "float32"): (1, 512, 3), ("add", "bfloat16"): (1, 512, 3),
        ("sub", "float32"): (1, 512, 3), ("sub", "bfloat16"): (1, 512, 3),
        ("mul", "float32"): (1, 512, 3), ("mul", "bfloat16"): (1, 512, 3),
        ("div", "float32"): (1, 512, 3), ("div", "bfloat16"): (1, 512, 3),
        ("relu_backward", "float32"): (1, 512, 3), ("relu_backward", "bfloat16"): (1, 512, 3),
        ("leaky_relu_backward", "float32"): (1, 512, 3), ("leaky_relu_backward", "bfloat16"): (1, 512, 3),
        ("silu_backward", "float32"): (1, 512, 3), ("silu_backward", "bfloat16"): (1, 512, 3),
        ("sigmoid_backward", "float32"): (1, 512, 3), ("sigmoid_backward", "bfloat16"): (1, 512, 3),
        ("tanh_backward", "float32"): (1, 512, 3), ("tanh_backward", "bfloat16"): (1, 512, 3),
        ("gelu_tanh_backward", "float32"): (1, 512, 3), ("gelu_tanh_backward", "bfloat16"): (2, 256, 4),
        ("gelu_erf_backward", "float32"): (1, 128, 0), ("gelu_erf_backward", "bfloat16"): (2, 256, 4),
        ("add_scalar", "float32"): (2, 256, 4), ("add_scalar", "bfloat16"): (2, 256, 4),
        ("sub_scalar", "float32"): (2, 256, 4), ("sub_scalar", "bfloat16"): (2, 256, 5),
        ("mul_scalar", "float32"): (2, 256, 5), ("mul_scalar", "bfloat16"): (2, 256, 4),
        ("div_scalar", "float32"): (1, 128, 0), ("div_scalar", "bfloat16"): (2, 256, 4),
        ("relu", "float32"): (2, 256, 4), ("relu", "bfloat16"): (2, 256, 5),
        ("leaky_relu", "float32"): (2, 256, 5), ("leaky_relu", "bfloat16"): (2, 256, 5),
        ("tanh", "float32"): (1, 512, 0), ("tanh", "bfloat16"): (2, 256, 4),
        ("silu", "float32"): (4, 128, 6), ("silu", "bfloat16"): (1, 512, 0),
        ("sigmoid", "float32"): (4, 256, 3), ("sigmoid", "bfloat16"): (1, 512, 0),
        ("gelu_tanh", "float32"): (4, 128, 6), ("gelu_tanh", "bfloat16"): (1, 512, 0),
        ("gelu_erf", "float32"): (4, 128, 8), ("gelu_erf", "bfloat16"): (4, 128, 6),
    },
}


def is_heavy(op: str, dtype_name: str) -> bool:
    """Whether op's 16-bit kernel is one of the register-heavy ones (HEAVY_OPS)."""
    return op in HEAVY_OPS and dtype_name in ("float16", "bfloat16")


def contig_config(op: str, dtype_name: str, dev: int | None = None) -> tuple:
    """(U, threads per block, blocks per SM cap or 0) of op's contiguous kernel for this dtype:
    the shape `cudakit tune` stored for device `dev` (kernels/ew_shapes.py), else the one
    TUNED_BY_MODEL gives dev's model, else TUNED's, else the default."""
    c = None
    if dev is not None:
        c = ew_shapes.shapes(dev).get((op, dtype_name))
        if c is None:
            c = TUNED_BY_MODEL.get(ew_shapes.model(dev), {}).get((op, dtype_name))
    if c is None:
        c = TUNED.get((op, dtype_name))
    if c is not None:
        return ew_shapes.full(c)
    heavy = is_heavy(op, dtype_name)
    return UNROLL, HEAVY_THREADS if heavy else THREADS, 0


def cap_shared_memory(dev: int, cap: int) -> int:
    """Dynamic shared memory per block that lets at most `cap` blocks reside on one SM of device
    dev (0 for no cap). Why a cap: on the H100 a one- or two-input kernel at full occupancy keeps
    more loads in flight than HBM serves best; 3-6 resident blocks were up to 1.5% faster
    (see ew_shapes.CANDIDATES). Raises where the device cannot express the cap."""
    if not cap:
        return 0
    from ..runtime.device import get_device_info
    info = get_device_info(dev)
    if not info.max_shared_memory_per_multiprocessor:
        raise ValueError(f"device {dev} does not report its shared memory per SM: no blocks-per-SM cap")
    smem = info.max_shared_memory_per_multiprocessor // cap - info.reserved_shared_memory_per_block
    if smem > info.max_shared_memory_per_block_optin or smem < 0:
        raise ValueError(f"a cap of {cap} blocks per SM needs {smem} bytes of shared memory a block; "
                         f"device {dev} allows 0..{info.max_shared_memory_per_block_optin}")
    return smem


def _expr(kind: str, op: str, dtype_name: str, vec: int | None, unroll: int | None = None) -> str:
    functor = BINARY_OPS.get(op) or UNARY_OPS[op]
    arity = 2 if op in BINARY_OPS else 1
    t = ctype(dtype_name)
    if kind == "contig":
        return f"ck_ew{arity}_contig<{t}, {functor}, {vec}, {unroll or contig_config(op, dtype_name)[0]}>"
    return f"ck_ew{arity}_strided<{t}, {functor}>"


def name_expressions() -> list[str]:
    """Every template instantiation this module launches (the contiguous kernels with the U of
    the default shape and of each model's, so that one compile per op and dtype serves them)."""
    out = []
    for op in (*BINARY_OPS, *UNARY_OPS):
        for dt in FLOAT_DTYPE_NAMES:
            us = {contig_config(op, dt)[0]} | {m[(op, dt)][0] for m in TUNED_BY_MODEL.values() if (op, dt) in m}
            for u in sorted(us):
                out += [_expr("contig", op, dt, vec_width(dt), u), _expr("contig", op, dt, 1, u)]
            out.append(_expr("strided", op, dt, None))
    return out


def _op_and_type(expr: str) -> tuple:
    """The (element type, functor) of a name expression: the kernels of one op and dtype (its
    vector, scalar and strided forms) compile together, on the op's first call in that dtype."""
    args = expr[expr.index("<") + 1:].rstrip(">").split(",")
    return args[0].strip(), args[1].strip()


_family = KernelFamily(SOURCE, name_expressions, "cudakit/elementwise.cu", group=_op_and_type)
_blocks_cap: dict[int, int] = {}       # device -> grid size that fills it (grid-stride loops)
_S2, _S3 = strides_struct_dtype(2), strides_struct_dtype(3)
_BLOCK = (THREADS, 1, 1)


def _function(dev: int, expr: str):
    if dev not in _blocks_cap:
        from ..runtime.device import get_device_info
        _blocks_cap[dev] = get_device_info(dev).multiprocessors * (2048 // THREADS)
    return _family.function(dev, expr)


def _grid(dev: int, work: int) -> tuple:
    """Grid for the strided kernels: one thread per element, at most one full wave (grid-stride)."""
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
    return x._c_contiguous  # CuPy attribute; x.flags builds an object per call


_fast: dict = {}  # (op, dtype, device, vec) -> (expr, FastLauncher, elements per block)
# op -> {ew_key: (CUfunction, elements per block, threads, name, block, shared bytes)}: the kernels the native
# tiny-op path (runtime/_native.c `ew`) may launch; filled here as the Python path first meets them.
EW_TABLES: dict = {op: {} for op in (*BINARY_OPS, *UNARY_OPS)}


def forget_entries(op: str) -> None:
    """Drop op's launch entries: its next call builds them with the shape contig_config gives then
    (`cudakit tune` changes it)."""
    for k in [k for k in _fast if k[0] == op]:
        del _fast[k]
    EW_TABLES[op].clear()  # cleared in place: ops.py and the native path hold this dict


def ew_key(dtype, dev: int, vec: int) -> int:
    """The key of EW_TABLES entries; _native.c computes the same from the arrays."""
    return dtype.num * 4096 + dev * 32 + vec


def _contig_entry(op, dtype, dev, vec):
    key = (op, dtype, dev, vec)
    e = _fast.get(key)
    if e is None:
        from ..backends.base import supported_dtypes
        from ..runtime.fastlaunch import FastLauncher
        name = supported_dtypes()[dtype]
        unroll, threads, cap = contig_config(op, name, dev)
        expr = _expr("contig", op, name, vec, unroll)
        f = _function(dev, expr)
        smem = cap_shared_memory(dev, cap)
        if smem > 48 * 1024:  # above 48 KiB a kernel must opt in (dev is the current device)
            _family.kernel(expr).set_max_dynamic_shared_memory(smem)
        # parameters: the input pointers, out, n (int64), p (double)
        fl = FastLauncher(f.ptr, ("QQ" if op in BINARY_OPS else "Q") + "QQd")
        e = _fast[key] = (expr, fl, threads * unroll * vec, threads, (threads, 1, 1), smem)
        EW_TABLES[op][ew_key(dtype, dev, vec)] = (f.ptr, e[2], threads, expr, e[4], smem)
    return e



def _launch_contig(op, inputs: tuple, ptrs: tuple, out, n: int, dev: int, p: float):
    """The contiguous kernel of op over n elements; ptrs: the inputs' device pointers."""
    optr = out.data.ptr
    al = optr
    for q in ptrs:
        al |= q
    dt = out.dtype
    vec = _VEC.get(dt) or vec_width(dt) if not al & 15 else 1
    e = _fast.get((op, dt, dev, vec)) or _contig_entry(op, dt, dev, vec)
    expr, fl, tile, threads, block, smem = e
    gx = min((n + tile - 1) // tile, MAX_GRID_X)
    blocking = _launch._blocking
    if blocking is None:
        blocking = launch_blocking()
    if profiler._active is None and not blocking:
        if _ew_gate is not None:
            _ew_gate(True)  # the native path may take the next call (native.close_fast_gate shuts it)
        _launch.recent_launches.append((expr, (gx, 1, 1), block))
        nl = fl._native
        try:
            if nl is not None:  # the native launcher, called directly: one Python frame less
                r = nl(fl.func, gx, 1, 1, threads, 1, 1, smem, _stream().ptr, fl._bcodes, *ptrs, optr, n, p)
                if r:
                    raise _cupy.loaded_cupy().cuda.driver.CUDADriverError(r)
            else:
                fl(gx, threads, (*ptrs, optr, n, p), _stream().ptr, smem=smem)
        except _cupy.loaded_cupy().cuda.driver.CUDADriverError as err:
            raise LaunchError(str(err), expr, (gx, 1, 1), block) from None
    else:
        _launch_function(expr, _function(dev, expr), (gx, 1, 1), block,
                         (*inputs, out, np.int64(n), np.float64(p)), smem, None)
    return out


_VEC: dict = {}      # dtype -> 16-byte vector width, filled on first use
_stream = None       # cupy.cuda.get_current_stream


def fast(op: str, vals: tuple, ndarray, p: float = 0.0):
    """op(*vals) into a new array when every input is a C-contiguous CuPy array of one dtype and
    shape on the current device; None when they do not qualify (the caller takes run()). The
    host-time-critical path of a tiny op: no policy objects, one native launch."""
    x0 = vals[0]
    if not x0._c_contiguous:
        return None
    dt, shape, dev = x0.dtype, x0.shape, x0.data.device_id
    ptrs = (x0.data.ptr,)
    if len(vals) == 2:
        x1 = vals[1]
        if x1.dtype != dt or x1.shape != shape or not x1._c_contiguous or x1.data.device_id != dev:
            return None
        ptrs = (ptrs[0], x1.data.ptr)
    if _stream is None:
        _first_use()
    if dt not in _VEC or dev != _get_device():
        return None
    out = ndarray(shape, dt)
    n = out.size
    return out if n == 0 else _launch_contig(op, vals, ptrs, out, n, dev, p)


def _first_use():
    global _stream, _get_device, _ew_gate
    from ..backends.base import supported_dtypes
    from ..runtime import native
    cp = _cupy.loaded_cupy()
    _stream, _get_device = cp.cuda.get_current_stream, cp.cuda.runtime.getDevice
    for dt, name in supported_dtypes().items():
        _VEC[dt] = vec_width(name)
    mod = native.fast_paths()
    if mod is not None:
        _ew_gate = mod.fast_gate


_ew_gate = None      # the native module's fast_gate once its fast paths are set up


def _no_ew(table, x0, x1, p, out=None):
    return None


def native_ew():
    """The native tiny-op function ew(table, x0, x1 or None, p[, out]) (see runtime/_native.c), or a
    function that always declines where the native module is unavailable."""
    from ..runtime import native
    mod = native.fast_paths()
    return mod.ew if mod is not None else _no_ew


_get_device = None   # cupy.cuda.runtime.getDevice


def run(op: str, inputs: tuple, out, p: float = 0.0):
    """out[...] = op(*inputs), broadcasting inputs to out.shape; `p` is the op's scalar parameter
    (leaky_relu's slope). Inputs and out are CuPy arrays of one dtype on the current device; the
    caller (the CUDA backend) has validated them."""
    n = out.size
    if n == 0:
        return out
    cp = _cupy.loaded_cupy()
    dev = out.data.device_id
    shape = out.shape
    if out._c_contiguous and all(x._c_contiguous and x.shape == shape for x in inputs):
        if _stream is None:
            _first_use()
        return _launch_contig(op, inputs, tuple(x.data.ptr for x in inputs), out, n, dev, float(p))
    dtype_name = out.dtype.name
    struct = _strided_args(_S3 if len(inputs) == 2 else _S2, out.shape, (*inputs, out))
    if struct is None:  # more than 8 non-mergeable dimensions: compute on contiguous copies
        tmp = run(op, tuple(cp.ascontiguousarray(cp.broadcast_to(x, out.shape)) for x in inputs),
                  cp.empty(out.shape, out.dtype), p)
        out[...] = tmp
        return out
    expr = _expr("strided", op, dtype_name, None)
    f = _function(dev, expr)
    _launch_function(expr, f, _grid(dev, n), _BLOCK, (*inputs, out, np.int64(n), struct, np.float64(p)), 0, None)
    return out


def _or(values) -> int:
    r = 0
    for v in values:
        r |= v
    return r


