
struct __align__(2) ck_half { unsigned short bits; };
struct __align__(2) ck_bf16 { unsigned short bits; };

// -inf of an accumulation type (the start of a max): ck_ninf(C(0)).
__device__ __forceinline__ float ck_ninf(float) { return __int_as_float(0xff800000); }
__device__ __forceinline__ double ck_ninf(double) { return __longlong_as_double(0xfff0000000000000ULL); }

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

// Raw integer types of 1..16 bytes: a pack of V elements moves as one vector load/store.
template <int B> struct ck_raw;
template <> struct ck_raw<16> { typedef uint4 type; };
template <> struct ck_raw<8> { typedef uint2 type; };
template <> struct ck_raw<4> { typedef unsigned int type; };
template <> struct ck_raw<2> { typedef unsigned short type; };
template <> struct ck_raw<1> { typedef unsigned char type; };
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
// (benchmarks/sweeps/ew_l2_policy_ab.py, elementwise.py says more); evict_last without the release left a
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
