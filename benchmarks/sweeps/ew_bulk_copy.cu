// bf16 relu through TMA bulk copies (cp.async.bulk): global -> smem (mbarrier), relu in smem,
// smem -> global (bulk_group). Scratch experiment for issue 4 (is a bulk-copy stream faster than
// vector loads/stores at the DRAM limit?).
template <int CH, int ST>
__device__ __forceinline__ void issue_load(unsigned bar, unsigned dst, const char* src) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(CH) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(dst), "l"(src), "r"(CH), "r"(bar) : "memory");
}

template <int CH, int ST, int THREADS>
__global__ void __launch_bounds__(THREADS) relu_bulk(const char* __restrict__ x, char* __restrict__ y, long long n_chunks) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) unsigned long long bar[ST];
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < ST; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"((unsigned)__cvta_generic_to_shared(&bar[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const long long first = blockIdx.x, stride = gridDim.x;
  if (tid == 0)
    for (int s = 0; s < ST; ++s) {
      long long c = first + s * stride;
      if (c < n_chunks)
        issue_load<CH, ST>((unsigned)__cvta_generic_to_shared(&bar[s]), (unsigned)__cvta_generic_to_shared(smem + s * CH), x + c * CH);
    }
  int it = 0;
  for (long long c = first; c < n_chunks; c += stride, ++it) {
    const int s = it % ST;
    const unsigned phase = (it / ST) & 1;
    const unsigned b = (unsigned)__cvta_generic_to_shared(&bar[s]);
    asm volatile("{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra WAIT_%=;\n}"
                 :: "r"(b), "r"(phase) : "memory");
    uint4* v = reinterpret_cast<uint4*>(smem + s * CH);
#pragma unroll
    for (int i = tid; i < CH / 16; i += THREADS) {
      uint4 w = v[i];
      unsigned* u = reinterpret_cast<unsigned*>(&w);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        unsigned neg = (u[j] >> 15) & 0x00010001u;
        u[j] &= ~(neg * 0xFFFFu);
      }
      v[i] = w;
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (tid == 0) {
      const unsigned src = (unsigned)__cvta_generic_to_shared(smem + s * CH);
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(y + c * CH), "r"(src), "r"(CH) : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      const long long nc = c + (long long)ST * stride;
      if (nc < n_chunks) {
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
        issue_load<CH, ST>(b, src, x + nc * CH);
      }
    }
  }
  if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

template __global__ void relu_bulk<16384, 4, 256>(const char*, char*, long long);
template __global__ void relu_bulk<8192, 6, 256>(const char*, char*, long long);
template __global__ void relu_bulk<32768, 3, 256>(const char*, char*, long long);
template __global__ void relu_bulk<16384, 6, 512>(const char*, char*, long long);
