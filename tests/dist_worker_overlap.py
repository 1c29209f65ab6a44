"""One rank of the overlap check (GPU, NCCL), launched by `cudakit run` from tests/gpu.

    cudakit run --nproc-per-node 2 tests/dist_worker_overlap.py [TRACE.json]

A stack of 4096 x 4096 float32 linear layers, a hand-written backward that hands each weight's
gradient to GradSync as soon as it exists; one profiled step. Prints
"OVERLAP <collectives that ran while a backward kernel ran> <overlapped us> <collectives>" and,
on rank 0, writes the Chrome trace when a path is given.
"""
import sys

import cupy as cp

import cudakit
import cudakit.distributed as dist

dist.init_process_group("nccl", timeout=300)
L, D, B = 6, 4096, 4096
rs = cp.random.RandomState(1234 + dist.get_rank())
params = [rs.standard_normal((D, D), dtype=cp.float32) * (1.0 / D**0.5) for _ in range(L)]
sync = dist.GradSync(params)
x = rs.standard_normal((B, D), dtype=cp.float32)


def step():
    hs, pres = [x], []
    for w in params:
        pres.append(cudakit.linear(hs[-1], w))
        hs.append(cudakit.relu(pres[-1]))
    g = cp.ones_like(hs[-1]) / B
    for i in reversed(range(L)):
        g = cudakit.relu_backward(g, pres[i])
        gx, gw, _ = cudakit.linear_backward(g, hs[i], params[i], bias=False)
        sync.set_grad(i, gw)
        g = gx
    return sync.wait()


for _ in range(2):
    step()
cp.cuda.get_current_stream().synchronize()
with cudakit.profile() as prof:
    step()
    cp.cuda.get_current_stream().synchronize()
o = prof.collective_overlap()
busbw = [round(r.as_dict()["bus_gb_per_s"], 1) for r in prof.records if r.kind == "collective"]
print(f"OVERLAP {o['overlapped']} {o['overlap_us']:.0f} {o['collectives']} busbw={busbw}", flush=True)
if dist.get_rank() == 0 and len(sys.argv) > 1:
    prof.export_chrome_trace(sys.argv[1])
dist.destroy_process_group()
