"""One rank of the sharded-optimizer check, launched by `cudakit run` from the tests.

    cudakit run --nproc-per-node N tests/dist_worker_zero.py BACKEND SEED

Each rank starts from different parameters (rank 0's are broadcast), and takes three AdamW steps
through ZeroRedundancyOptimizer with its own gradients (the second given by set_grad, bucket by
bucket, as a backward gives them), in float32 and in bfloat16 (float16 on
GPUs) with float32 master weights, in buckets small enough that several hold parameters of both. The result must
equal one process's unsharded AdamW on the gradients averaged over the ranks; each rank's
optimizer must hold about 1/N of the elements. Prints "ZERO-OK <elements stepped here> <total>".
"""
import os
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import dist_mlp  # noqa: E402

import cudakit  # noqa: E402
import cudakit.distributed as dist  # noqa: E402

BACKEND, SEED = sys.argv[1], int(sys.argv[2])
xp, host = dist_mlp.array_module(BACKEND)

dist.init_process_group(BACKEND, timeout=120)
R, N = dist.get_rank(), dist.get_world_size()
SHAPES = {"w1": (7, 33), "b1": (33,), "w2": (33, 5), "b2": (5,), "emb": (101, 3)}
BF16 = {"w2", "b2"}


LOW = np.float16 if BACKEND == "nccl" else ml_dtypes.bfloat16   # (CuPy has no bfloat16 dtype)


def dtype(name):
    return LOW if name in BF16 else np.float32


def init(seed):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32).astype(dtype(n)) for n, s in SHAPES.items()}


def grads_of(rank, step):
    rng = np.random.default_rng(1000 * SEED + 10 * step + rank)
    return {n: rng.standard_normal(s).astype(np.float32).astype(dtype(n)) for n, s in SHAPES.items()}


def adamw(names):   # one optimizer per dtype group keeps master weights for the 16-bit ones only
    return lambda arrays: cudakit.AdamW(arrays, lr=0.05, weight_decay=0.1,
                                        master_weights=any(a.dtype != np.float32 for a in arrays))


params = {n: xp.asarray(a) for n, a in init(SEED + R).items()}   # differ per rank until the broadcast
zero = dist.ZeroRedundancyOptimizer(params, adamw(SHAPES), bucket_bytes=700)
params = zero.params
assert len(zero.buckets) >= 3, zero.buckets
for n, a in init(SEED).items():   # rank 0's values on every rank
    np.testing.assert_array_equal(host(params[n]).astype(np.float32), a.astype(np.float32))
for step in range(3):
    given = {n: xp.asarray(g) for n, g in grads_of(R, step).items()}
    if step == 1:   # as a backward would: set_grad as each gradient comes, last parameter first
        for n in reversed(list(SHAPES)):
            zero.set_grad(n, given[n])
        zero.step()
    else:
        zero.step(given)

# the reference: one process, unsharded AdamW on the averaged gradients (per dtype, as above)
ref = {n: xp.asarray(a) for n, a in init(SEED).items()}
groups = [[n for n in SHAPES if n not in BF16], [n for n in SHAPES if n in BF16]]
opts = [adamw(g)([ref[n] for n in g]) for g in groups]
for step in range(3):
    per_rank = [grads_of(r, step) for r in range(N)]
    avg = {n: (sum(p[n].astype(np.float64) for p in per_rank) / N).astype(np.float32).astype(dtype(n))
           for n in SHAPES}
    for g, opt in zip(groups, opts):
        opt.step([xp.asarray(avg[n]) for n in g])
worst = 0.0
for n in SHAPES:
    a, b = host(params[n]).astype(np.float64), host(ref[n]).astype(np.float64)
    tol = 1e-6 if n not in BF16 else 1e-2
    err = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
    worst = max(worst, err) if n not in BF16 else worst   # float32 only: bfloat16 rounds its updates
    if err > tol:
        raise SystemExit(f"rank {R}: {n} differs from the unsharded AdamW by {err:.3g} (tolerance {tol})")
total = sum(int(f.size) for f in zero._flat)
mine = zero.shard_elements()
assert mine * N == total, (mine, total)
print(f"ZERO-OK {mine} {total} {worst:.3g}", flush=True)
dist.destroy_process_group()
