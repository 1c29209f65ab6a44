
#ifndef CK_OPT_THREADS
#define CK_OPT_THREADS 256
#endif
#ifndef CK_OPT_CHUNK
#define CK_OPT_CHUNK 8192
#endif
#ifndef CK_OPT_UNROLL
#define CK_OPT_UNROLL 1
#endif

// flags, one int kernel argument
#define CK_MAXIMIZE 1        // descend on -grad
#define CK_WD_COUPLED 2      // Adam, SGD: grad += weight_decay * param
#define CK_WD_DECOUPLED 4    // AdamW: param *= 1 - lr * weight_decay
#define CK_NESTEROV 8        // SGD: grad + momentum * buf instead of buf
#define CK_FIRST_STEP 16     // SGD: the momentum buffer starts as the gradient (not read)

__device__ __forceinline__ float ck_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double ck_sqrt(double x) { return sqrt(x); }

// Global-memory accesses of one pack. The table holds plain integers, so the compiler cannot tell
// these pointers are global and would emit generic LD/ST: name the state space explicitly.
template <typename R> struct ck_gmem;
template <> struct ck_gmem<uint4> {
  static __device__ __forceinline__ uint4 ld(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
  }
  static __device__ __forceinline__ void st(uint4* p, const uint4& v) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
  }
};
template <> struct ck_gmem<uint2> {
  static __device__ __forceinline__ uint2 ld(const uint2* p) {
    uint2 v;
    asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
  }
  static __device__ __forceinline__ void st(uint2* p, const uint2& v) {
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" :: "l"(p), "r"(v.x), "r"(v.y) : "memory");
  }
};

// Rounding to the parameter type. bfloat16 without a branch (same bits as ck_traits<ck_bf16>::store:
// round to nearest even, NaN stays a quiet NaN), so packs of four assemble in registers.
template <typename P> struct ck_round { template <typename S> static __device__ __forceinline__ P to(S x) { return ck_traits<P>::store(x); } };
template <> struct ck_round<ck_bf16> {
  static __device__ __forceinline__ ck_bf16 to(float f) {
    const unsigned int u = __float_as_uint(f);
    const unsigned int r = ((u & 0x7fffffffu) > 0x7f800000u) ? (u | 0x400000u) : u + 0x7fffu + ((u >> 16) & 1u);
    ck_bf16 h;
    h.bits = (unsigned short)(r >> 16);
    return h;
  }
};

// torch.lerp: exact at both ends of the weight range
template <typename S> __device__ __forceinline__ S ck_lerp(S a, S b, S w) {
  return w < S(0.5) ? a + w * (b - a) : b - (b - a) * (S(1) - w);
}
// torch.maximum: NaN if either is NaN
template <typename S> __device__ __forceinline__ S ck_max_nan(S a, S b) {
  return (a != a || a > b) ? a : b;
}

// One element of Adam/AdamW. s[0] = exp_avg, s[1] = exp_avg_sq, s[2] = max_exp_avg_sq.
template <typename S, bool AMSGRAD> struct ck_adam_op {
  static const int NS = AMSGRAD ? 3 : 2;
  S omb1;      // 1 - beta1 (the lerp weight)
  S beta2;
  S omb2;      // 1 - beta2
  S neg_step;  // -lr / (1 - beta1^t)
  S bc2_sqrt;  // sqrt(1 - beta2^t)
  S eps;
  S wd;        // weight_decay (CK_WD_COUPLED)
  S decay;     // 1 - lr * weight_decay (CK_WD_DECOUPLED)
  int flags;
  __device__ __forceinline__ void operator()(S& p, S g, S* s) const {
    if (flags & CK_MAXIMIZE) g = -g;
    if (flags & CK_WD_DECOUPLED) p = p * decay;
    if (flags & CK_WD_COUPLED) g = g + wd * p;
    const S m = ck_lerp(s[0], g, omb1);
    const S v = s[1] * beta2 + (omb2 * g) * g;
    s[0] = m;
    s[1] = v;
    S vn = v;
    if (AMSGRAD) { vn = ck_max_nan(s[2], v); s[2] = vn; }
    const S denom = ck_sqrt(vn) / bc2_sqrt + eps;
    p = p + neg_step * (m / denom);
  }
};

// One element of SGD. s[0] = momentum buffer (MOMENTUM only).
template <typename S, bool MOMENTUM> struct ck_sgd_op {
  static const int NS = MOMENTUM ? 1 : 0;
  S neg_lr;    // -lr
  S wd;        // weight_decay (CK_WD_COUPLED)
  S momentum;
  S omd;       // 1 - dampening
  int flags;
  __device__ __forceinline__ void operator()(S& p, S g, S* s) const {
    if (flags & CK_MAXIMIZE) g = -g;
    if (flags & CK_WD_COUPLED) g = g + wd * p;
    if (MOMENTUM) {
      const S buf = (flags & CK_FIRST_STEP) ? g : s[0] * momentum + omd * g;
      s[0] = buf;
      g = (flags & CK_NESTEROV) ? g + momentum * buf : buf;
    }
    p = p + neg_lr * g;
  }
};

// The multi-tensor driver shared by every optimizer: finds this block's tensor and chunk, then
// streams the chunk through `op` with 16-byte accesses (V elements of S per pack) when every
// pointer of the tensor allows it, element by element otherwise and for the n % V tail.
template <typename P, typename S, bool MASTER, typename Op>
__device__ __forceinline__ void ck_mt_apply(const long long* __restrict__ tensors,
                                            const long long* __restrict__ grads,
                                            const long long* __restrict__ blocks, const Op& op) {
  typedef ck_traits<P> tr;
  const int NS = Op::NS;
  const int NSA = NS > 0 ? NS : 1;  // array extent (NS may be 0)
  const int V = 16 / (int)sizeof(S);
  typedef typename ck_raw<sizeof(P) * V>::type RP;
  typedef typename ck_raw<sizeof(S) * V>::type RS;

  const long long bt = blocks[blockIdx.x];
  const long long t = bt >> 32;
  const long long* __restrict__ row = tensors + t * 8;
  const long long n = row[0];
  P* __restrict__ p = reinterpret_cast<P*>(row[1]);
  const P* __restrict__ g = reinterpret_cast<const P*>(grads[t]);
  S* st[NSA];
#pragma unroll
  for (int k = 0; k < NSA; ++k) st[k] = reinterpret_cast<S*>(k < NS ? row[2 + k] : 0);
  S* __restrict__ w = reinterpret_cast<S*>(MASTER ? row[5] : 0);
  const long long start = (bt & 0xffffffffLL) * CK_OPT_CHUNK;
  const long long end = n < start + CK_OPT_CHUNK ? n : start + CK_OPT_CHUNK;

  unsigned long long mis = ((unsigned long long)p | (unsigned long long)g) % (sizeof(P) * V);
#pragma unroll
  for (int k = 0; k < NS; ++k) mis |= (unsigned long long)st[k] % 16;
  if (MASTER) mis |= (unsigned long long)w % 16;
  const long long vend = mis ? start : start + (end - start) / V * V;  // vectors cover [start, vend)

  const RP* __restrict__ rg = reinterpret_cast<const RP*>(g);
  RP* __restrict__ rp = reinterpret_cast<RP*>(p);
  RS* __restrict__ rw = reinterpret_cast<RS*>(w);
  const long long v0 = start / V, v1 = vend / V;
  for (long long base = v0 + threadIdx.x; base < v1; base += (long long)CK_OPT_UNROLL * blockDim.x) {
    ck_pack<P, V> pp[CK_OPT_UNROLL], pg[CK_OPT_UNROLL];
    ck_pack<S, V> pw[CK_OPT_UNROLL], ps[CK_OPT_UNROLL][NSA];
    // every load of this thread's packs is issued before any is used
#pragma unroll
    for (int u = 0; u < CK_OPT_UNROLL; ++u) {
      const long long i = base + (long long)u * blockDim.x;
      if (i < v1) {
        pg[u].raw = ck_gmem<RP>::ld(rg + i);
        if (MASTER) pw[u].raw = ck_gmem<RS>::ld(rw + i); else pp[u].raw = ck_gmem<RP>::ld(rp + i);
#pragma unroll
        for (int k = 0; k < NS; ++k) ps[u][k].raw = ck_gmem<RS>::ld(reinterpret_cast<const RS*>(st[k]) + i);
      }
    }
#pragma unroll
    for (int u = 0; u < CK_OPT_UNROLL; ++u) {
      const long long i = base + (long long)u * blockDim.x;
      if (i < v1) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          S pv = MASTER ? pw[u].v[e] : (S)tr::load(pp[u].v[e]);
          S sv[NSA];
#pragma unroll
          for (int k = 0; k < NS; ++k) sv[k] = ps[u][k].v[e];
          op(pv, (S)tr::load(pg[u].v[e]), sv);
#pragma unroll
          for (int k = 0; k < NS; ++k) ps[u][k].v[e] = sv[k];
          if (MASTER) pw[u].v[e] = pv;
          pp[u].v[e] = ck_round<P>::to(pv);
        }
        ck_gmem<RP>::st(rp + i, pp[u].raw);
        if (MASTER) ck_gmem<RS>::st(rw + i, pw[u].raw);
#pragma unroll
        for (int k = 0; k < NS; ++k) ck_gmem<RS>::st(reinterpret_cast<RS*>(st[k]) + i, ps[u][k].raw);
      }
    }
  }
  for (long long i = vend + threadIdx.x; i < end; i += blockDim.x) {
    S pv = MASTER ? w[i] : (S)tr::load(p[i]);
    S sv[NSA];
#pragma unroll
    for (int k = 0; k < NS; ++k) sv[k] = st[k][i];
    op(pv, (S)tr::load(g[i]), sv);
#pragma unroll
    for (int k = 0; k < NS; ++k) st[k][i] = sv[k];
    if (MASTER) w[i] = pv;
    p[i] = ck_round<P>::to(pv);
  }
}

// tensors: int64 [n_tensors, 8] rows {n, param (P*), exp_avg, exp_avg_sq, max_exp_avg_sq (S*, the
//          last only with AMSGRAD), master (S*, MASTER only), 0, 0}
// grads:   int64 [n_tensors], gradient pointers (P*, n elements each, contiguous)
// blocks:  int64 [gridDim.x], tensor index << 32 | chunk index
// scalars: see ck_adam_op; flags: CK_MAXIMIZE | CK_WD_COUPLED | CK_WD_DECOUPLED
template <typename P, typename S, bool MASTER, bool AMSGRAD>
__global__ void __launch_bounds__(CK_OPT_THREADS)
ck_adam_mt(const long long* __restrict__ tensors, const long long* __restrict__ grads,
           const long long* __restrict__ blocks, S omb1, S beta2, S omb2, S neg_step, S bc2_sqrt,
           S eps, S wd, S decay, int flags, const S* __restrict__ dyn) {
  CK_PDL_WAIT();
  // dyn (null, or [3] = neg_step, bc2_sqrt, decay): the per-step scalars read from device memory,
  // so a CUDA graph replaying this launch sees each step's values (written before each replay)
  ck_adam_op<S, AMSGRAD> op;
  op.omb1 = omb1; op.beta2 = beta2; op.omb2 = omb2; op.neg_step = dyn ? dyn[0] : neg_step;
  op.bc2_sqrt = dyn ? dyn[1] : bc2_sqrt; op.eps = eps; op.wd = wd; op.decay = dyn ? dyn[2] : decay; op.flags = flags;
  ck_mt_apply<P, S, MASTER>(tensors, grads, blocks, op);
}

// tensors: int64 [n_tensors, 8] rows {n, param (P*), momentum_buffer (S*, MOMENTUM only), 0, 0,
//          master (S*, MASTER only), 0, 0}
// grads:   int64 [n_tensors], gradient pointers (P*, n elements each, contiguous)
// blocks:  int64 [gridDim.x], tensor index << 32 | chunk index
// scalars: see ck_sgd_op; flags: CK_MAXIMIZE | CK_WD_COUPLED | CK_NESTEROV | CK_FIRST_STEP
template <typename P, typename S, bool MASTER, bool MOMENTUM>
__global__ void __launch_bounds__(CK_OPT_THREADS)
ck_sgd_mt(const long long* __restrict__ tensors, const long long* __restrict__ grads,
          const long long* __restrict__ blocks, S neg_lr, S wd, S momentum, S omd, int flags,
          const S* __restrict__ dyn) {
  CK_PDL_WAIT();
  // dyn (null, or [2] = -lr, first step (1) or not (0)): per-step values from device memory (graphs)
  ck_sgd_op<S, MOMENTUM> op;
  op.neg_lr = dyn ? dyn[0] : neg_lr; op.wd = wd; op.momentum = momentum; op.omd = omd;
  op.flags = dyn ? ((flags & ~CK_FIRST_STEP) | (dyn[1] != S(0) ? CK_FIRST_STEP : 0)) : flags;
  ck_mt_apply<P, S, MASTER>(tensors, grads, blocks, op);
}
