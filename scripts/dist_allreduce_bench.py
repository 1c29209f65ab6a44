"""all_reduce bus bandwidth, nccl-tests style: float32, in place, 8 KB .. 1 GB, back-to-back calls.

    cudakit run --nproc-per-node 2 scripts/dist_allreduce_bench.py --impl cudakit,cupy --out bench.json
    python -m torch.distributed.run --nproc-per-node 2 scripts/dist_allreduce_bench.py --impl torch --out t.json

impl "cudakit": cudakit.distributed.all_reduce on the current stream; "cupy": CuPy's raw binding
(NcclCommunicator.allReduce) on the communicator cudakit set up, the floor of any Python layer;
"torch": torch.distributed.all_reduce (NCCL). For each size: `warm` calls, then `iters` calls
between two CUDA events; time = elapsed / iters (so small sizes measure the latency of
back-to-back calls, host cost included, as nccl-tests does). algbw = bytes / time, busbw = algbw
* 2(n-1)/n. Rank 0 writes {"impl": [{"bytes", "time_us", "algbw_gbs", "busbw_gbs"}...], "ranks",
"device"} to --out and prints a line per size.
"""
import argparse
import json
import os


def sizes(lo=8 << 10, hi=1 << 30):
    s = lo
    while s <= hi:
        yield s
        s *= 2


def iters_for(nbytes):
    return 500 if nbytes <= 1 << 20 else 100 if nbytes <= 64 << 20 else 20


def bench(call, make, event_pair, nbytes, n):
    x = make(nbytes // 4)
    warm, iters = 20 if nbytes <= 64 << 20 else 5, iters_for(nbytes)
    for _ in range(warm):
        call(x)
    start, end, sync = event_pair()
    sync()
    start()
    for _ in range(iters):
        call(x)
    ms = end()
    t = ms * 1e-3 / iters
    alg = nbytes / t / 1e9
    return {"bytes": nbytes, "time_us": t * 1e6, "algbw_gbs": alg, "busbw_gbs": alg * 2 * (n - 1) / n}


def run_cupy_side(impls, hi):
    import cupy as cp

    import cudakit.distributed as dist
    g = dist.init_process_group("nccl", timeout=300)
    n, out = dist.get_world_size(), {}

    def events():
        s, e = cp.cuda.Event(), cp.cuda.Event()

        def start():
            s.record()

        def end():
            e.record()
            e.synchronize()
            return cp.cuda.get_elapsed_time(s, e)
        return start, end, cp.cuda.get_current_stream().synchronize
    comm = g.transport.comm
    calls = {"cudakit": lambda x: dist.all_reduce(x),
             "cupy": lambda x: comm.allReduce(x.data.ptr, x.data.ptr, x.size, 7, 0,
                                              cp.cuda.get_current_stream().ptr)}
    for impl in impls:
        out[impl] = [bench(calls[impl], lambda k: cp.ones(k, cp.float32), events, b, n) for b in sizes(hi=hi)]
        dist.barrier()
    name = cp.cuda.runtime.getDeviceProperties(g.device)["name"].decode()
    dist.destroy_process_group()
    return out, n, name


def run_torch_side(hi):
    import torch
    import torch.distributed as tdist
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    try:   # eager NCCL initialisation (torch >= 2.3)
        tdist.init_process_group("nccl", device_id=torch.device("cuda", local))
    except TypeError:
        tdist.init_process_group("nccl")
    n = tdist.get_world_size()

    def events():
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def end():
            e.record()
            e.synchronize()
            return s.elapsed_time(e)
        return s.record, end, torch.cuda.synchronize
    res = [bench(lambda x: tdist.all_reduce(x), lambda k: torch.ones(k, device="cuda"), events, b, n)
           for b in sizes(hi=hi)]
    name = torch.cuda.get_device_name(local)
    tdist.barrier()
    tdist.destroy_process_group()
    return {"torch": res}, n, name


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--impl", default="cudakit,cupy", help="cudakit,cupy (under cudakit run) or torch (under torchrun)")
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    impls = a.impl.split(",")
    if impls == ["torch"]:
        res, n, name = run_torch_side(a.max_bytes)
    else:
        res, n, name = run_cupy_side(impls, a.max_bytes)
    if int(os.environ.get("RANK", "0")) != 0:
        return
    for impl, rows in res.items():
        for r in rows:
            print(f"BENCH {impl:<8} {r['bytes']:>11} B  {r['time_us']:10.2f} us  algbw {r['algbw_gbs']:8.2f}  "
                  f"busbw {r['busbw_gbs']:8.2f} GB/s", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"ranks": n, "device": name, **res}, f, indent=1)


if __name__ == "__main__":
    main()
