"""Host time per call of cudakit.distributed's layer, on one GPU (a one-rank NCCL group).

    python3 scripts/dist_host_probe.py

The 8 KB all_reduce of a 2-GPU job is host-bound for any Python layer: its time per back-to-back
call is the host's cost per call once that exceeds NCCL's ~10 us on the GPU. One rank measures
the same host path without a second GPU: CuPy's raw NcclCommunicator.allReduce against
cudakit.distributed.all_reduce (sync and async_op), the CuPy attribute reads and CUDA calls the
layer makes, GradSync.set_grad, and a cProfile of the layer (top functions by own time).
Prints "DIST-HOST <name> <us per call>" lines and the profile.
"""
import cProfile
import io
import os
import pstats
import time

os.environ.setdefault("RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29711")

import cupy as cp  # noqa: E402

import cudakit.distributed as dist  # noqa: E402

N = 20000


def per_call(fn, n=N):
    for _ in range(200):
        fn()
    cp.cuda.get_current_stream().synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t) / n * 1e6
    cp.cuda.get_current_stream().synchronize()
    return host


def main():
    g = dist.init_process_group("nccl", timeout=120)
    x = cp.ones(2048, cp.float32)   # 8 KB
    comm, s = g.transport.comm, cp.cuda.get_current_stream()
    ev = cp.cuda.Event(disable_timing=True)
    rows = {
        "raw comm.allReduce": lambda: comm.allReduce(x.data.ptr, x.data.ptr, x.size, 7, 0,
                                                     cp.cuda.get_current_stream().ptr),
        "cudakit all_reduce": lambda: dist.all_reduce(x),
        "cudakit all_reduce async+wait": lambda: dist.all_reduce(x, async_op=True).wait(),
        "get_current_stream()": lambda: cp.cuda.get_current_stream(),
        "runtime.getDevice()": lambda: cp.cuda.runtime.getDevice(),
        "x.device.id": lambda: x.device.id,
        "x.data.device_id": lambda: x.data.device_id,
        "x.dtype.name": lambda: x.dtype.name,
        "x.flags.c_contiguous": lambda: x.flags.c_contiguous,
        "Event.record(stream)": lambda: ev.record(s),
        "Event()": lambda: cp.cuda.Event(disable_timing=True),
        "event.done": lambda: ev.done,
    }
    for name, fn in rows.items():
        print(f"DIST-HOST {name:<32} {per_call(fn):8.2f} us", flush=True)
    params = [cp.ones((768, 768), cp.float16) for _ in range(48)]
    sync = dist.GradSync(params, broadcast_from=None)

    def step():
        for i in reversed(range(len(params))):
            sync.set_grad(i, params[i])
        sync.wait()
    print(f"DIST-HOST {'GradSync step (48 set_grad + wait)':<32} {per_call(step, 500):8.2f} us", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(N):
        dist.all_reduce(x)
    prof.disable()
    cp.cuda.get_current_stream().synchronize()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(22)
    print("\n".join("DIST-PROF " + ln for ln in buf.getvalue().splitlines() if ln.strip()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
