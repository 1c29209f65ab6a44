"""Which conv2d / attention path each signature chose (the table `cudakit bench` left in the cache),
and the host time per call of the cuDNN and Triton paths against torch on small bf16 shapes.
Prints lines starting with CUDNN-PROBE. Run after a benchmark, with its CUDAKIT_CACHE_DIR."""
import time

import cupy as cp

import cudakit
from cudakit.kernels import cudnn, paths


def host_us(fn, n=400):
    fn()
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    el = time.perf_counter() - t
    cp.cuda.Device().synchronize()
    return el / n * 1e6


def forced(name, fn, keys):
    """fn with `name` chosen for the (op, key) pairs `keys` (so its dispatch plans apply)."""
    def call():
        for op_key in keys:
            paths._choice[op_key] = name
        return fn()
    return call


def main():
    print("CUDNN-PROBE cudnn", cudnn.version(), cudnn.why_unavailable())
    if not cudnn.available():
        return
    for k, v in sorted(paths._on_disk.table().items()):
        print("CUDNN-PROBE chose", v, k)
    for k, v in sorted(cudnn._plans_on_disk.table().items()):
        print("CUDNN-PROBE plan", v, k)
    rs = cp.random.RandomState(0)
    q, k, v = (rs.standard_normal((2, 2, 64, 32), dtype=cp.float32).astype(cp.dtype("bfloat16")) for _ in range(3))
    x = rs.standard_normal((4, 8, 16, 16), dtype=cp.float32).astype(cp.dtype("bfloat16"))
    w = rs.standard_normal((8, 8, 3, 3), dtype=cp.float32).astype(cp.dtype("bfloat16"))
    dev = cp.cuda.runtime.getDevice()
    akey = [("attention", ("fwd", 4, 64, 64, 32, "bfloat16", True, dev))]
    geo = (1, 1, 1, 1, 1, 1, 3, 3, 16, 16)
    ckey = [("conv2d", ("fwd", (4, 8, 16, 16), (8, 8, 3, 3), geo, 1, False, "bfloat16", "tf32x3", dev))]
    rows = {}
    for path in ("cudnn", "triton"):
        rows[f"attention {path}"] = forced(path, lambda: cudakit.attention(q, k, v, causal=True), akey)
        rows[f"conv2d {path}"] = forced(path, lambda: cudakit.conv2d(x, w, None, 1, 1), ckey)
    cudakit.attention(q, k, v, causal=True)
    cudakit.conv2d(x, w, None, 1, 1)
    import ctypes
    for sig, g in list(cudnn._graphs.items()):   # the probe's own graphs: the cost of their pieces
        if not isinstance(g, cudnn._Graph) or sig[0] not in ("sdpa_fwd", "conv_fprop"):
            continue
        if sig[0] == "sdpa_fwd" and sig[1][0][0] != (4, 1, 64, 32):
            continue
        if sig[0] == "conv_fprop" and sig[1] != (4, 8, 16, 16):
            continue
        bufs = [cp.empty((1 << 16,), cp.uint8) for _ in g.uids]
        ptrs = [b.data.ptr for b in bufs]
        wsb = cp.empty((max(g.workspace, 1),), cp.uint8)
        wp = wsb.data.ptr
        run = cudnn.executor(sig)
        h = cudnn._handle(cudnn._load()[0], dev, cp.cuda.get_current_stream().ptr)
        pack = dict(zip(g.uids, ptrs))
        rows[f"{sig[0]} executor"] = lambda run=run, ptrs=ptrs: run(*ptrs)
        rows[f"{sig[0]} execute(dict)"] = lambda g=g, pack=pack, h=h, wp=wp: g.graph._execute_plan_at_index(
            pack, wp, g.index, h.backend_handle)
        arr = (ctypes.c_int64 * len(ptrs))(*ptrs)
        try:
            g.graph._execute_with_raw_ptrs(ctypes.addressof(arr), len(ptrs), wp, h.backend_handle, g.index)
            rows[f"{sig[0]} execute(raw)"] = lambda g=g, arr=arr, h=h, n=len(ptrs), wp=wp: g.graph._execute_with_raw_ptrs(
                ctypes.addressof(arr), n, wp, h.backend_handle, g.index)
        except Exception as e:  # noqa: BLE001
            print("CUDNN-PROBE raw pointers:", type(e).__name__, e)
        rows[f"{sig[0]} set_stream"] = lambda: cudnn._handle(cudnn._load()[0], dev, cp.cuda.get_current_stream().ptr)
        rows[f"{sig[0]} empty x2"] = lambda: (cp.ndarray((4, 8, 16, 16), cp.float32), cp.ndarray((4, 64), cp.float32))
    try:
        import torch
        F = torch.nn.functional
        tq, tk, tv, tx, tw = (torch.from_dlpack(a) for a in (q, k, v, x, w))
        rows["attention torch"] = lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
        rows["conv2d torch"] = lambda: F.conv2d(tx, tw, None, 1, 1)
    except Exception as e:  # noqa: BLE001
        print("CUDNN-PROBE torch unavailable", e)
    for name, fn in rows.items():
        print(f"CUDNN-PROBE host {name:18s} {host_us(fn):7.1f} us/call")
    print("CUDNN-PROBE stats", cudnn.stats, "declined", cudnn.declined())


if __name__ == "__main__":
    main()
