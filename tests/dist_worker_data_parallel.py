"""One rank of the data-parallel check, launched by `cudakit run` from the tests.

    cudakit run --nproc-per-node N tests/dist_worker_data_parallel.py BACKEND SEED [nocopy]

Each rank starts from different parameters (GradSync must broadcast rank 0's), trains two SGD
steps of tests/dist_mlp.py on its slice of a batch, with small buckets so that several
all-reduces start during the backward, and compares the synchronised gradients and the
parameters with one process's on the whole batch (nocopy: GradSync(copy=False), the gradients
reduced in place). Prints "DP-OK <launched-during-backward>".
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import dist_mlp  # noqa: E402

import cudakit.distributed as dist  # noqa: E402

BACKEND, SEED = sys.argv[1], int(sys.argv[2])
COPY = not (len(sys.argv) > 3 and sys.argv[3] == "nocopy")
xp, host = dist_mlp.array_module(BACKEND)

dist.init_process_group(BACKEND, timeout=120)
R, N = dist.get_rank(), dist.get_world_size()
ROWS = 6   # per rank
params = [xp.asarray(p) for p in dist_mlp.init_params(SEED + R)]   # differ per rank until the broadcast
sync = dist.GradSync(params, bucket_bytes=1024, copy=COPY)
assert len(sync.buckets) >= 3, sync.buckets
ref = dist_mlp.init_params(SEED)   # rank 0's: the reference's start
for a, b in zip(params, ref):
    np.testing.assert_array_equal(host(a), b)

lr = 0.1
for step in range(2):
    x, y = dist_mlp.batch(SEED * 10 + step, ROWS * N)
    mine = slice(R * ROWS, (R + 1) * ROWS)
    launched = []
    _, local = dist_mlp.loss_and_grads(params, xp.asarray(x[mine]), xp.asarray(y[mine]),
                                       on_grad=lambda i, g: (sync.set_grad(i, g), launched.append(sync.launched)))
    grads = sync.wait()
    _, want = dist_mlp.loss_and_grads(ref, x, y)   # one process, the whole batch
    for i, (g, w) in enumerate(zip(grads, want)):
        np.testing.assert_allclose(host(g), w, rtol=2e-5, atol=2e-6, err_msg=f"step {step} grad {i}")
    for i in range(4):
        params[i] -= lr * grads[i]
        ref[i] = ref[i] - lr * want[i]
    for a, b in zip(params, ref):
        np.testing.assert_allclose(host(a), b, rtol=2e-5, atol=2e-6)
    # the first buckets started before the backward's last gradient was marked
    assert launched[-2] >= 1, launched
dist.destroy_process_group()
print("DP-OK", launched, flush=True)
