"""batch_norm's training forward and backward, cudakit's (the kernels its rules pick) and torch's
(F.batch_norm, torch.autograd.grad), on the given cases, each phase between two launches of a
marker kernel: a target for ncu, so each phase's kernels can be read off by name and time.
    ncu --metrics gpu__time_duration.sum --csv --cache-control none --clock-control none \\
        python3 scripts/bn_kernel_probe.py 32x2048x7x7:float32:cl 32x128x28x28:float32:nchw
scripts/bn_kernel_table.py turns ncu's CSV into a table of each phase's kernels."""
import sys

import cupy as cp
import torch

import cudakit

_mark = cp.RawKernel(r'extern "C" __global__ void probe_marker(int* p, int v) { if (p) *p = v; }', "probe_marker")
be = cudakit.get_backend("cuda")
REPS = 3


def mark(i: int) -> None:
    """A marker launch (its grid x says which phase follows: ncu lists the launch's grid)."""
    _mark((i + 1, 1, 1), (1, 1, 1), (cp.uint64(0), cp.int32(i)))


def case(spec: str, first: int) -> int:
    shape, dtype, layout = spec.split(":")
    shape = tuple(map(int, shape.split("x")))
    tdt = getattr(torch, dtype)
    mf = torch.channels_last if layout == "cl" else torch.contiguous_format
    x = torch.randn(shape, device="cuda", dtype=tdt).contiguous(memory_format=mf)
    g = torch.randn(shape, device="cuda", dtype=tdt).contiguous(memory_format=mf)
    c = shape[1]
    w = torch.rand(c, device="cuda", dtype=tdt) + 0.5
    b = torch.randn(c, device="cuda", dtype=tdt)
    rm, rv = torch.zeros(c, device="cuda", dtype=tdt), torch.ones(c, device="cuda", dtype=tdt)
    cx, cg, cw, cb = (cp.from_dlpack(t) for t in (x, g, w, b))
    crm, crv = cp.from_dlpack(rm.clone()), cp.from_dlpack(rv.clone())
    rx, rw, rb = (t.detach().requires_grad_(True) for t in (x, w, b))
    phases = (
        ("cudakit fwd", lambda: be.batch_norm_with_stats(cx, cw, cb, crm, crv, True)),
        ("cudakit bwd", lambda: be.batch_norm_backward(cg, cx, cw, sm, si)),
        ("torch fwd", lambda: torch.nn.functional.batch_norm(x, rm, rv, w, b, True)),
        ("torch bwd", lambda: torch.autograd.grad(ty, (rx, rw, rb), g, retain_graph=True)),
    )
    _, sm, si = be.batch_norm_with_stats(cx, cw, cb, crm, crv, True)
    ty = torch.nn.functional.batch_norm(rx, rm.clone(), rv.clone(), rw, rb, True)
    for f in (p[1] for p in phases):   # (compile and warm outside the marked phases)
        f()
    torch.cuda.synchronize()
    i = first
    for name, f in phases:
        print(f"PROBE-PHASE {i} {spec} {name}", flush=True)
        for _ in range(REPS):
            mark(i)
            f()
        i += 1
    mark(i)
    torch.cuda.synchronize()
    return i + 1


if __name__ == "__main__":
    nxt = 0
    for spec in sys.argv[1:]:
        nxt = case(spec, nxt)
