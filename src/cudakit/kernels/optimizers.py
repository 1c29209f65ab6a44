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
from ._common import KernelFamily, by_template, cuda_source

# Measured on an H200 (benchmarks/sweeps/optim_variants.py): chunks of 8192 with one pack per stream and
# thread in flight gave 0.96 of copy bandwidth on 100 x 1M float32 Adam and 0.87 on 10,000 x 1000;
# deeper unrolling idles threads on small tensors (0.56 at 4), larger chunks leave a ragged last wave.
THREADS = 256     # CK_OPT_THREADS
CHUNK = 8192      # CK_OPT_CHUNK: elements per block
UNROLL = 1        # CK_OPT_UNROLL: 16-byte packs per stream and thread loaded before first use
ROW = 8           # int64 words per tensor in the `tensors` table

SOURCE_FILES = ("_pdl.cuh", "_preamble.cuh", "optimizers.cu")
SOURCE = cuda_source(*SOURCE_FILES)

# flags (the CK_* defines of optimizers.cu)
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

    params: CuPy arrays covering one gapless block of memory each (C-contiguous or permuted), one
    dtype, on the current device; states: a list (one entry per state kind, at most 3) of lists
    of state arrays matching params in shape and memory order;
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
