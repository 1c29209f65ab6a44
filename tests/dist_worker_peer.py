"""One rank of the copy-engine all-reduce check (GPU, two ranks on one host), launched by
`cudakit run --nproc-per-node 2` from tests/gpu.

    cudakit run --nproc-per-node 2 tests/dist_worker_peer.py

GradSync over parameters of every float dtype and odd sizes (1 element, odd counts, buckets of
one gradient and of several), average and sum, three steps each: its buckets must take the
copy-engine path (transport_note) and give NCCL's all_reduce result of the same gradients.
Prints "PEER-OK <transport note>".
"""
import cupy as cp
import ml_dtypes
import numpy as np

import cudakit.distributed as dist
from cudakit.distributed.data_parallel import ALIGN_BYTES

dist.init_process_group("nccl", timeout=120)
R = dist.get_rank()
rng = np.random.default_rng(7 + R)
shapes = [(1,), (3, 5), (257,), (64, 33), (1000,), (2,)]
for dtype in ("float32", "bfloat16", "float16", "float64"):
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)   # (CuPy casts no bfloat16)
    params = [cp.asarray(np.zeros(s, dt)) for s in shapes]
    for average in (True, False):
        sync = dist.GradSync(params, bucket_bytes=4 * ALIGN_BYTES, average=average, broadcast_from=None)
        assert sync.transport_note.startswith("copy engines"), sync.transport_note
        assert len(sync.buckets) >= 3, sync.buckets
        for step in range(3):
            grads = [cp.asarray(rng.standard_normal(s).astype(dt)) for s in shapes]
            want = [g.copy() for g in grads]
            for w in want:   # NCCL's result of the same gradients
                dist.all_reduce(w, "avg" if average else "sum")
            for i in reversed(range(len(shapes))):
                sync.set_grad(i, grads[i])
            got = sync.wait()
            for i, (a, b) in enumerate(zip(got, want)):
                a32, b32 = (cp.asnumpy(x).astype(np.float64) for x in (a, b))
                tol = 1e-2 if dtype in ("bfloat16", "float16") else 1e-6
                np.testing.assert_allclose(a32, b32, rtol=tol, atol=tol, err_msg=f"{dtype} avg={average} step {step} "
                                                                                   f"grad {i}")
        sync.close()   # collective: the shared memory freed once both ranks' streams are done with it
cp.cuda.get_current_stream().synchronize()
print("PEER-OK", sync.transport_note, flush=True)
dist.destroy_process_group()
