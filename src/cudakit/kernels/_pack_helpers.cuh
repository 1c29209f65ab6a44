
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

// Copies 16 bytes global -> shared without registers (cp.async, sm_80+).
__device__ __forceinline__ void ck_cp16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned int sa = (unsigned int)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(sa), "l"(gmem) : "memory");
#else
  *reinterpret_cast<uint4*>(smem) = *reinterpret_cast<const uint4*>(gmem);
#endif
}
// One 16-, 8- or 4-byte pack global -> shared (cp.async on sm_80+, so a thread's copies are all in
// flight at once); a 2-byte one through a register.
template <typename R>
__device__ __forceinline__ void ck_cp_async(R* smem, const R* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (sizeof(R) == 16) {
    ck_cp16(smem, gmem);
    return;
  } else if constexpr (sizeof(R) >= 4) {
    const unsigned int sa = (unsigned int)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" :: "r"(sa), "l"(gmem), "n"((int)sizeof(R)) : "memory");
    return;
  }
#endif
  *smem = *gmem;
}
__device__ __forceinline__ void ck_cp_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}
