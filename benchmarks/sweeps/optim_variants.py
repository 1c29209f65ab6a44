"""Tuning probe for the fused optimizer kernels (run on a GPU): device time of one Adam / SGD
launch for chunk sizes and unroll depths, beside torch's fused optimizers and the device copy
bandwidth; and the host time of a cudakit step. Prints lines starting with VARIANT / REF / HOST.

    python benchmarks/sweeps/optim_variants.py [--quick]
"""
import sys
import time

import cupy as cp
import numpy as np

from cudakit import optim
from cudakit.bench import timing
from cudakit.kernels import optimizers as K
from cudakit.runtime.compiler import compile_module, _launch_function

QUICK = "--quick" in sys.argv
SHAPES = [(100, 1 << 20), (10_000, 1000)] if not QUICK else [(20, 1 << 20), (1000, 1000)]


def arrays(n, size, seed):
    flat = cp.random.default_rng(seed).standard_normal(n * size, dtype=cp.float32)
    return [flat[i * size:(i + 1) * size].copy() for i in range(n)]


def variant_time(kind, chunk, unroll, params, grads, states):
    name = K.expr(kind, "float32", False, kind == "sgd")
    mod = compile_module(K.SOURCE, options=(f"-DCK_OPT_CHUNK={chunk}", f"-DCK_OPT_UNROLL={unroll}"),
                         name_expressions=[name], source_name=f"optvar_{chunk}_{unroll}.cu")
    old = K.CHUNK
    K.CHUNK = chunk
    try:
        table = K.TensorTable(params, states)
    finally:
        K.CHUNK = old
    table.set_grads([g.data.ptr for g in grads])
    f = mod.get_kernel(name)._function(cp.cuda.runtime.getDevice())
    if kind == "adam":
        scal = (np.float32(0.1), np.float32(0.999), np.float32(0.001), np.float32(-1e-3), np.float32(0.5),
                np.float32(1e-8), np.float32(0), np.float32(1), np.int32(0))
    else:
        scal = (np.float32(-1e-2), np.float32(0), np.float32(0.9), np.float32(1), np.int32(0))
    args = (table.tensors, table.grads, table.blocks, *scal)

    def run():
        _launch_function(name, f, (table.n_blocks, 1, 1), (256, 1, 1), args, 0, None)
    return timing.time_gpu(run, warmup=3, reps=20)["median_ms"]


def main():
    copy_bw = timing.copy_bandwidth(True, 1 << 30)
    print(f"REF copy bandwidth {copy_bw / 1e9:.0f} GB/s", flush=True)
    try:
        import torch
        torch = torch if torch.cuda.is_available() else None
    except ImportError:
        torch = None
    for n, size in SHAPES:
        params, grads = arrays(n, size, 1), arrays(n, size, 2)
        m, v = [cp.zeros_like(p) for p in params], [cp.zeros_like(p) for p in params]
        elems = n * size
        for kind, states, nbytes in (("adam", [m, v], 28), ("sgd", [m], 20)):
            if kind == "sgd" and n > 1000:
                continue
            for chunk in (8192, 16384, 65536):
                for unroll in (1, 2, 4):
                    ms = variant_time(kind, chunk, unroll, params, grads, states)
                    print(f"VARIANT {kind} {n}x{size} chunk={chunk} unroll={unroll}: {ms:.4f} ms "
                          f"{nbytes * elems / ms / 1e6:.0f} GB/s ({nbytes * elems / ms / 1e6 / (copy_bw / 1e9):.2f} of copy)",
                          flush=True)
            if torch is not None:
                tp = [torch.from_dlpack(p.copy()) for p in params]
                for x, g in zip(tp, grads):
                    x.grad = torch.from_dlpack(g)
                opt = torch.optim.Adam(tp, lr=1e-3, fused=True) if kind == "adam" else \
                    torch.optim.SGD(tp, lr=1e-2, momentum=0.9, fused=True)
                opt.step()
                ms = timing.time_gpu(opt.step, warmup=3, reps=20)["median_ms"]
                print(f"REF torch fused {kind} {n}x{size}: {ms:.4f} ms {nbytes * elems / ms / 1e6:.0f} GB/s", flush=True)
                del opt, tp
        ours = optim.Adam(params, lr=1e-3)
        ours.step(grads)
        cp.cuda.get_current_stream().synchronize()
        t = time.perf_counter()
        for _ in range(20):
            ours.step(grads)
        host = (time.perf_counter() - t) / 20 * 1e3
        cp.cuda.get_current_stream().synchronize()
        dev = timing.time_gpu(lambda: ours.step(grads), warmup=2, reps=20)["median_ms"]
        print(f"HOST cudakit Adam.step {n}x{size}: host {host:.3f} ms/step, event-timed {dev:.4f} ms", flush=True)
        params = grads = m = v = ours = None  # free before the next shape
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
