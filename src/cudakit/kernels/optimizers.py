"""Fused multi-tensor optimizer kernels: SGD (momentum, dampening, Nesterov, weight decay) and
Adam / AdamW (bias correction, coupled or decoupled weight decay, AMSGrad), one launch per step
for a whole list of tensors of different sizes.

Layout. The host builds, once per list of parameters and states, two int64 device tables:

    tensors [n_tensors, 8]  n, param, state0, state1, state2, master, 0, 0   (sizes, pointers)
    blocks  [n_blocks]      tensor index << 32 | chunk index within that tensor

Block b updates elements [chunk * CHUNK, min(n, (chunk + 1) * CHUNK)) of tensor `blocks[b] >> 32`:
one table load finds its work (no search). Chunk starts are the prefix sums of
ceil(n_t / CHUNK) over the tensors; `blocks` is that prefix array expanded, one entry per block.
Gradients change address from step to step, so their pointers sit in a third table,
`grads [n_tensors]`, re-uploaded only when an address changed. Hyper-parameters (learning rate,
bias corrections) are kernel scalars, so a step is exactly one launch per (device, dtype) group.

Types. P is the parameter (and gradient) type, S the state and arithmetic type: (float, float),
(double, double), or a 16-bit P (ck_half, ck_bf16) with float states; with MASTER the float32
master copy is read and written and the 16-bit parameter is only written (rounded from it).
Memory traffic per element (float32 Adam): read param, grad, exp_avg, exp_avg_sq, write param,
exp_avg, exp_avg_sq = 28 bytes (+8 with AMSGrad); SGD with momentum 20 bytes, without 12.

Math follows torch.optim's single-tensor formulas (torch/optim/adam.py `_single_tensor_adam`,
sgd.py `_single_tensor_sgd`), in S arithmetic with host-computed double scalars rounded to S:
  Adam:  g = -g if maximize;  AdamW: p *= 1 - lr*wd;  Adam: g += wd*p
         m = lerp(m, g, 1 - beta1);  v = v*beta2 + (1 - beta2)*g*g;  vmax = max(vmax, v) (AMSGrad)
         p += -(lr / (1 - beta1^t)) * (m / (sqrt(v or vmax) / sqrt(1 - beta2^t) + eps))
  SGD:   g = -g if maximize;  g += wd*p;  buf = g on the first step, else buf*mu + (1 - dampening)*g
         g = g + mu*buf (Nesterov) or buf;  p += -lr*g
"""
from __future__ import annotations

import numpy as np

from ..runtime import _cupy
from ..runtime.compiler import _launch_function
from ._common import PREAMBLE, KernelFamily, by_template

# Measured on an H200 (scripts/optim_variants.py): chunks of 8192 with one pack per stream and
# thread in flight gave 0.96 of copy bandwidth on 100 x 1M float32 Adam and 0.87 on 10,000 x 1000;
# deeper unrolling idles threads on small tensors (0.56 at 4), larger chunks leave a ragged last wave.
THREADS = 256     # CK_OPT_THREADS
CHUNK = 8192      # CK_OPT_CHUNK: elements per block
UNROLL = 1        # CK_OPT_UNROLL: 16-byte packs per stream and thread loaded before first use
ROW = 8           # int64 words per tensor in the `tensors` table

SOURCE = PREAMBLE + r"""
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
  // dyn (null, or [2] = -lr, first step (1) or not (0)): per-step values from device memory (graphs)
  ck_sgd_op<S, MOMENTUM> op;
  op.neg_lr = dyn ? dyn[0] : neg_lr; op.wd = wd; op.momentum = momentum; op.omd = omd;
  op.flags = dyn ? ((flags & ~CK_FIRST_STEP) | (dyn[1] != S(0) ? CK_FIRST_STEP : 0)) : flags;
  ck_mt_apply<P, S, MASTER>(tensors, grads, blocks, op);
}
"""

# flags (the CK_* defines above)
MAXIMIZE, WD_COUPLED, WD_DECOUPLED, NESTEROV, FIRST_STEP = 1, 2, 4, 8, 16

# (param dtype name, master weights) -> (P, S) C types
_TYPES = {
    ("float32", False): ("float", "float"),
    ("float64", False): ("double", "double"),
    ("float16", False): ("ck_half", "float"),
    ("float16", True): ("ck_half", "float"),
    ("bfloat16", False): ("ck_bf16", "float"),
    ("bfloat16", True): ("ck_bf16", "float"),
}
PARAM_DTYPES = ("float32", "float64", "float16", "bfloat16")


def state_dtype(param_dtype: str) -> str:
    """The dtype of the optimizer states (and master weights) for a parameter dtype name."""
    return "float64" if param_dtype == "float64" else "float32"


def expr(kind: str, param_dtype: str, master: bool, option: bool) -> str:
    """Name expression of one instantiation. kind: "adam" (option = AMSGrad) or "sgd"
    (option = momentum buffer)."""
    p, s = _TYPES[(param_dtype, master)]
    m, o = "true" if master else "false", "true" if option else "false"
    return f"ck_{kind}_mt<{p}, {s}, {m}, {o}>"


def name_expressions() -> list[str]:
    """Every template instantiation this module launches."""
    return [expr(kind, dt, master, opt) for kind in ("adam", "sgd") for (dt, master) in _TYPES
            for opt in (False, True)]


_family = KernelFamily(SOURCE, name_expressions, "cudakit/optimizers.cu", group=by_template)
_BLOCK = (THREADS, 1, 1)


def _function(dev: int, name: str):
    return _family.function(dev, name)


def chunk_table(sizes) -> np.ndarray:
    """int64 [n_blocks]: tensor index << 32 | chunk index, one entry per CHUNK-element chunk.

    Chunk c of tensor t is block prefix[t] + c, where prefix is the exclusive prefix sum of
    ceil(n_t / CHUNK); empty tensors get no block."""
    sizes = np.asarray(sizes, np.int64)
    counts = (sizes + CHUNK - 1) // CHUNK
    prefix = np.concatenate(([0], np.cumsum(counts)))
    tensor = np.repeat(np.arange(len(sizes), dtype=np.int64), counts)
    chunk = np.arange(prefix[-1], dtype=np.int64) - np.repeat(prefix[:-1], counts)
    return (tensor << 32) | chunk


def table_key(params, states, masters=None) -> tuple:
    """Everything a TensorTable holds, as a hashable key: sizes and addresses. Two lists of
    arrays with equal keys can share one table, whichever array objects they are."""
    key = (tuple(x.size for x in params), tuple(x.data.ptr for x in params))
    key += tuple(tuple(x.data.ptr for x in lst) for lst in states)
    return key + (tuple(x.data.ptr for x in masters) if masters is not None else None,)


class TensorTable:
    """The device tables of one multi-tensor launch over fixed parameters and states.

    params: CuPy arrays, C-contiguous, one dtype, on the current device; states: a list (one
    entry per state kind, at most 3) of lists of C-contiguous state arrays matching params;
    masters: float32 master copies or None. The table holds only sizes and addresses: the
    caller keeps the arrays alive, in place, for as long as it launches with the table.
    """

    def __init__(self, params, states, masters=None):
        cp = _cupy.cupy()
        n = len(params)
        host = np.zeros((n, ROW), np.int64)
        host[:, 0] = [x.size for x in params]
        host[:, 1] = [x.data.ptr for x in params]
        for k, lst in enumerate(states):
            host[:, 2 + k] = [x.data.ptr for x in lst]
        if masters is not None:
            host[:, 5] = [x.data.ptr for x in masters]
        self.device = cp.cuda.runtime.getDevice()
        blocks = chunk_table(host[:, 0])
        self.n_blocks = len(blocks)
        self.tensors = cp.asarray(host)
        self.blocks = cp.asarray(blocks) if len(blocks) else None
        self.grads = cp.zeros(max(n, 1), cp.int64)
        self._grad_ptrs: list | None = None

    def set_grads(self, ptrs: list) -> None:
        """Point the table at these gradient addresses (one per tensor); uploads only on change.
        The upload is stream-ordered after earlier launches that read the old addresses. It is a
        kernel taking the addresses as arguments (PUT_PTRS a launch), not a host-to-device copy,
        so that a step captured in a CUDA graph (where such copies are refused) carries it."""
        if ptrs != self._grad_ptrs:
            put = _put_ptrs_kernel()
            for i in range(0, len(ptrs), PUT_PTRS):
                chunk = [np.int64(p) for p in ptrs[i:i + PUT_PTRS]]
                chunk += [np.int64(0)] * (PUT_PTRS - len(chunk))
                put((1,), (PUT_PTRS,), (self.grads, np.int32(i), np.int32(min(PUT_PTRS, len(ptrs) - i)), *chunk))
            self._grad_ptrs = list(ptrs)


PUT_PTRS = 48   # addresses per launch of ck_put_ptrs (48 * 8 bytes of its 4 KiB of parameters)
_PUT_SOURCE = ("extern \"C\" __global__ void ck_put_ptrs(long long* dst, int offset, int count, "
               + ", ".join(f"long long p{i}" for i in range(PUT_PTRS)) + ") {\n"
               + "  const long long p[] = {" + ", ".join(f"p{i}" for i in range(PUT_PTRS)) + "};\n"
               + "  if ((int)threadIdx.x < count) dst[offset + threadIdx.x] = p[threadIdx.x];\n}\n")
_put = None


def _put_ptrs_kernel():
    """ck_put_ptrs (dst[offset + i] = p_i for i < count), compiled on first use."""
    global _put
    if _put is None:
        _put = _cupy.cupy().RawKernel(_PUT_SOURCE, "ck_put_ptrs")
    return _put


def _launch(name: str, table: TensorTable, scalars: tuple) -> None:
    if table.n_blocks == 0:
        return
    f = _function(table.device, name)
    _launch_function(name, f, (table.n_blocks, 1, 1), _BLOCK,
                     (table.tensors, table.grads, table.blocks, *scalars), 0, None)


def adam_dynamic(param_dtype: str, *, lr: float, beta1: float, beta2: float, weight_decay: float,
                 step: int) -> np.ndarray:
    """The per-step scalars of adam_step (neg_step, bc2_sqrt, decay) as the kernel's S type, for
    its `dyn` buffer: the same values, rounded the same way, as the kernel arguments."""
    s = np.float64 if param_dtype == "float64" else np.float32
    bc1 = 1.0 - beta1 ** step
    bc2_sqrt = (1.0 - beta2 ** step) ** 0.5
    return np.array([-(lr / bc1), bc2_sqrt, 1.0 - lr * weight_decay], s)


def sgd_dynamic(param_dtype: str, *, lr: float, first_step: bool) -> np.ndarray:
    """The per-step values of sgd_step (-lr, first step) for its `dyn` buffer."""
    s = np.float64 if param_dtype == "float64" else np.float32
    return np.array([-lr, 1.0 if first_step else 0.0], s)


def adam_step(table: TensorTable, param_dtype: str, master: bool, amsgrad: bool, *, lr: float,
              beta1: float, beta2: float, eps: float, weight_decay: float, decoupled: bool,
              maximize: bool, step: int, dyn=None) -> None:
    """One Adam/AdamW step over every tensor of `table` (gradients set with table.set_grads).

    `step` is the 1-based step count after this update (bias corrections 1 - beta^step).
    lr, eps, weight_decay are in the parameters' units; the caller has validated every value.
    dyn: None, or a device array (3,) of the state dtype the kernel reads adam_dynamic()'s
    values from instead of its arguments (what a CUDA graph of the step replays with).
    """
    s = np.float64 if param_dtype == "float64" else np.float32
    neg_step, bc2_sqrt, decay = adam_dynamic(param_dtype, lr=lr, beta1=beta1, beta2=beta2,
                                             weight_decay=weight_decay, step=step)
    flags = MAXIMIZE if maximize else 0
    if weight_decay != 0:
        flags |= WD_DECOUPLED if decoupled else WD_COUPLED
    scalars = (s(1.0 - beta1), s(beta2), s(1.0 - beta2), neg_step, bc2_sqrt, s(eps),
               s(weight_decay), decay, np.int32(flags), np.uint64(0) if dyn is None else dyn)
    _launch(expr("adam", param_dtype, master, amsgrad), table, scalars)


def sgd_step(table: TensorTable, param_dtype: str, master: bool, *, lr: float, momentum: float,
             dampening: float, nesterov: bool, weight_decay: float, maximize: bool,
             first_step: bool, dyn=None) -> None:
    """One SGD step over every tensor of `table` (gradients set with table.set_grads).

    With momentum != 0 the table's first state is the momentum buffer; on `first_step` it is
    set to the gradient (its old contents are not read), as torch.optim.SGD does. dyn: None, or
    a device array (2,) of the state dtype holding sgd_dynamic()'s values (see adam_step)."""
    s = np.float64 if param_dtype == "float64" else np.float32
    flags = (MAXIMIZE if maximize else 0) | (WD_COUPLED if weight_decay != 0 else 0)
    flags |= (NESTEROV if nesterov else 0) | (FIRST_STEP if first_step else 0)
    scalars = (s(-lr), s(weight_decay), s(momentum), s(1.0 - dampening), np.int32(flags),
               np.uint64(0) if dyn is None else dyn)
    _launch(expr("sgd", param_dtype, master, momentum != 0), table, scalars)
