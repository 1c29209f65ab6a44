
// Random123's philox4x32_10: the counter (c0, c1, c2, c3) under key (k0, k1) -> r[0..3].
// __host__ so the tests can check it against the published known-answer vectors on the CPU.
__host__ __device__ __forceinline__ void ck_philox4x32_10(unsigned int c0, unsigned int c1, unsigned int c2,
                                                          unsigned int c3, unsigned int k0, unsigned int k1,
                                                          unsigned int (&r)[4]) {
#pragma unroll
  for (int i = 0; i < 10; ++i) {
    if (i) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    const unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;   // one IMAD.WIDE each
    const unsigned int hi0 = (unsigned int)(p0 >> 32), lo0 = (unsigned int)p0;
    const unsigned int hi1 = (unsigned int)(p1 >> 32), lo1 = (unsigned int)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  r[0] = c0; r[1] = c1; r[2] = c2; r[3] = c3;
}

// The words of group g (elements 4g..4g+3) under the 64-bit seed (k0 = low word, k1 = high).
__host__ __device__ __forceinline__ void ck_dropout_words(long long g, unsigned int k0, unsigned int k1,
                                                          unsigned int (&r)[4]) {
  const unsigned long long u = (unsigned long long)g;
  ck_philox4x32_10((unsigned int)u, (unsigned int)(u >> 32), 0u, 0u, k0, k1, r);
}

template <int B> struct ck_dp_raw;
template <> struct ck_dp_raw<16> { typedef uint4 type; };
struct __align__(16) ck_dp_32b { uint4 a, b; };
template <> struct ck_dp_raw<32> { typedef ck_dp_32b type; };

// An item: G whole Philox groups (4 G elements) that move as one 16-byte access (two for float64).
template <typename T> struct ck_dp_item {
  static const int G = sizeof(T) == 2 ? 2 : 1;
  static const int E = 4 * G;
  typedef typename ck_dp_raw<E * sizeof(T)>::type R;
  union pack { R raw; T v[E]; };
};

// y[i] = x[i] * (word(i) >= thr ? scale : 0), in the accumulation type, rounded once; RES (the
// ck_dropout_res kernel): y[i] = r[i] + that product, each step rounded in the accumulation type
// (no fma: the CPU backend computes the same two roundings in NumPy), then to T once.
// x, y (and r): [n] contiguous. VEC: x and y (and r) are 16-byte aligned (whole items move as
// 16-byte vectors).
// Block 256, grid-stride over items; thread t takes items t and t + stride, then steps by
// 2 * stride (two loads in flight while the Philox rounds run). The 16-byte loads take the
// preamble's L2 policy, each line released after the item's store: dropout and its backward
// 1.3-1.6% faster on an H100 (GPU-005fbf9b, 2026-11-26, four alternating runs of the benchmark:
// float32 1.257 -> 1.274x torch, bfloat16 1.440 -> 1.462x).
// Traffic: (1 + RES) * n * sizeof(T) read + n * sizeof(T) written.
__device__ __forceinline__ float ck_dp_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double ck_dp_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float ck_dp_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double ck_dp_add(double a, double b) { return __dadd_rn(a, b); }

template <typename T, bool VEC, bool RES>
__device__ __forceinline__ void ck_dropout_body(const T* __restrict__ x, const T* __restrict__ res,
                                                T* __restrict__ y, long long n, unsigned int k0, unsigned int k1,
                                                unsigned int thr, typename ck_traits<T>::acc scale) {
  typedef ck_traits<T> tr;
  typedef typename ck_traits<T>::acc A;
  typedef ck_dp_item<T> I;
  const long long ni = (n + I::E - 1) / I::E, nfull = n / I::E;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i0 = (long long)blockIdx.x * blockDim.x + threadIdx.x; i0 < ni; i0 += 2 * stride) {
    typename I::pack in[2], rin[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const long long it = i0 + u * stride;
      if (VEC && it < nfull) {
        in[u].raw = ck_ld_keep(reinterpret_cast<const typename I::R*>(x) + it);
        if (RES) rin[u].raw = ck_ld_keep(reinterpret_cast<const typename I::R*>(res) + it);
      } else if (it < ni) {
#pragma unroll
        for (int e = 0; e < I::E; ++e)
          if (it * I::E + e < n) {
            in[u].v[e] = x[it * I::E + e];
            if (RES) rin[u].v[e] = res[it * I::E + e];
          }
      }
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const long long it = i0 + u * stride;
      if (it >= ni) break;
      typename I::pack out;
#pragma unroll
      for (int h = 0; h < I::G; ++h) {
        unsigned int r[4];
        ck_dropout_words(it * I::G + h, k0, k1, r);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (RES)
            out.v[4 * h + j] = tr::store(ck_dp_add(tr::load(rin[u].v[4 * h + j]),
                                                   ck_dp_mul(tr::load(in[u].v[4 * h + j]), r[j] >= thr ? scale : A(0))));
          else
            out.v[4 * h + j] = tr::store(tr::load(in[u].v[4 * h + j]) * (r[j] >= thr ? scale : A(0)));
        }
      }
      if (VEC && it < nfull) {
        reinterpret_cast<typename I::R*>(y)[it] = out.raw;
        ck_l2_release(reinterpret_cast<const typename I::R*>(x) + it);
        if (RES) ck_l2_release(reinterpret_cast<const typename I::R*>(res) + it);
      } else {
#pragma unroll
        for (int e = 0; e < I::E; ++e) if (it * I::E + e < n) y[it * I::E + e] = out.v[e];
      }
    }
  }
}

template <typename T, bool VEC>
__global__ void __launch_bounds__(256, 4) ck_dropout(const T* __restrict__ x, T* __restrict__ y, long long n,
                                                  unsigned int k0, unsigned int k1, unsigned int thr,
                                                  typename ck_traits<T>::acc scale) {
  CK_PDL_WAIT();
  ck_dropout_body<T, VEC, false>(x, (const T*)0, y, n, k0, k1, thr, scale);
}

// r + dropout(x): a residual stream's update x_out = r + dropout(branch) in one pass (3 blocks an SM:
// at 4 its second operand spilled, 16-bit items 40-48 bytes a thread).
template <typename T, bool VEC>
__global__ void __launch_bounds__(256, 3) ck_dropout_res(const T* __restrict__ x, const T* __restrict__ res,
                                                      T* __restrict__ y, long long n, unsigned int k0,
                                                      unsigned int k1, unsigned int thr,
                                                      typename ck_traits<T>::acc scale) {
  CK_PDL_WAIT();
  ck_dropout_body<T, VEC, true>(x, res, y, n, k0, k1, thr, scale);
}

// m[i] = word(i) >= thr (1 = kept), m: [n] bytes; VEC: m is 4-byte aligned. Block 256, grid-stride.
// Traffic: n bytes written.
template <bool VEC>
__global__ void __launch_bounds__(256) ck_dropout_mask(unsigned char* __restrict__ m, long long n, unsigned int k0,
                                                       unsigned int k1, unsigned int thr) {
  CK_PDL_WAIT();
  const long long ng = (n + 3) >> 2, nfull = n >> 2;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < ng; g += stride) {
    unsigned int r[4];
    ck_dropout_words(g, k0, k1, r);
    if (VEC && g < nfull) {
      reinterpret_cast<unsigned int*>(m)[g] = (unsigned int)(r[0] >= thr) | ((unsigned int)(r[1] >= thr) << 8) |
                                              ((unsigned int)(r[2] >= thr) << 16) | ((unsigned int)(r[3] >= thr) << 24);
    } else {
      for (int j = 0; j < 4; ++j) if (4 * g + j < n) m[4 * g + j] = (unsigned char)(r[j] >= thr);
    }
  }
}
