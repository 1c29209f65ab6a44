
// Every functor carries one runtime parameter p (leaky_relu's negative slope; unused elsewhere).
// Math in the accumulation type C: float for 16-bit and float32 data, double for float64.
// F (ck_traits<T>::fast) is 0 for float32/float64 (exact math), 1 for float16 and 2 for bfloat16.
// F >= 1: the fast forms (ex2.approx, rcp.approx: a few float32 ulps) vanish in the final rounding
// to 8 or 11 mantissa bits, and without them bfloat16 gelu/silu/sigmoid are compute-bound.
// F == 2: also tanh.approx (relative error 2^-11, a quarter of bfloat16's half ulp, 2^-9; too
// close to float16's 2^-11 to keep its results correctly rounded): bfloat16 tanh was bound by
// tanhf's instructions below 4 loads in flight per thread (0.94-0.96x torch), now 1.002-1.007x at
// (1, 512) (benchmarks/sweeps/ew_source_ab.py and probes on lent H100s, 2026-11-23).
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
    // float16 near the derivative's root (x = -0.7518): m is the difference of two terms up to 40x
    // larger (and unbounded at the root), so the fast tail's 3.7e-5 relative error grows past a
    // float16 half ulp there; erfcf and expf keep it (float32 ulps, then the same growth)
    if (F == 1 && x < -0.6f && x > -0.9f)
      return g * fmaf(x, 0.3989422804014327f * expf(-0.5f * x * x), 0.5f * erfcf(x * -0.7071067811865476f));
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
// benchmarks/sweeps/ew_l2_policy_ab.py, eight output placements shared with torch): 0.2-1% more bandwidth
// at the shapes retuned with it (TUNED_BY_MODEL); evict_last without the release was as fast but
// left a following kernel's 24 MB L2 working set 15% slower. The release costs registers (40
// instead of 32 in the 16-bit gelu_erf backward at U = 1): heavy ops moved to shapes that keep
// their occupancy. CK_LOAD_HINT (a PTX qualifier string) replaces the policy
// (benchmarks/sweeps/ew_hint_variants.py).
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
  CK_PDL_WAIT();
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
  CK_PDL_WAIT();
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

// A trailing-dims broadcast (a bias over rows, a position table over a batch): a, out: [n]
// contiguous; b: [m] contiguous, m dividing n, read as b[i % m]; BFIRST: b is the op's first
// operand. V elements per access (m a multiple of V, pointers aligned to V * sizeof(T) bytes).
// Traffic: 2 * n * sizeof(T) bytes (b's m elements stay in L2). The strided kernel took these at
// a fifth of the copy bandwidth: a 64-bit division per dimension per element, 2-byte accesses.
template <typename T, typename Op, int V, bool BFIRST>
__global__ void ck_ew2_rowbc(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                             long long n, long long m, double p) {
  CK_PDL_WAIT();
  typedef ck_traits<T> tr;
  typedef typename ck_raw<sizeof(T) * V>::type R;
  const R* __restrict__ ra = reinterpret_cast<const R*>(a);
  const R* __restrict__ rb = reinterpret_cast<const R*>(b);
  R* __restrict__ ro = reinterpret_cast<R*>(out);
  const long long nv = n / V, mv = m / V;
  Op op;
  op.p = p;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < nv;
       i += (long long)gridDim.x * blockDim.x) {
    ck_pack<T, V> pa, pb, po;
    pa.raw = ra[i];
    pb.raw = rb[i % mv];
    typename tr::acc r[V];
#pragma unroll
    for (int k = 0; k < V; ++k)
      r[k] = BFIRST ? op.template f<tr::fast>(tr::load(pb.v[k]), tr::load(pa.v[k]))
                    : op.template f<tr::fast>(tr::load(pa.v[k]), tr::load(pb.v[k]));
    ck_store_pack(po, r);
    ro[i] = po.raw;
  }
}

// a, b, out: strided views of the n-element output shape s.shape (strides s.s0, s.s1, s.s2)
template <typename T, typename Op>
__global__ void ck_ew2_strided(const T* a, const T* b, T* out, long long n, ck_strides3 s, double p) {
  CK_PDL_WAIT();
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
  CK_PDL_WAIT();
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
