"""Host cost of launching a trivial Triton kernel: through cudakit, as a raw cupy.RawKernel, and
through Triton's own launcher (which needs torch tensors)."""
from __future__ import annotations

from ..case import Case, Env


def cases(env: Env) -> list[Case]:
    if not env.gpu:
        return []
    try:
        import triton
        import triton.language as tl  # noqa: F401
    except ImportError:
        return []

    def setup():
        import cupy as cp
        import cudakit
        from . import _triton_noop as m
        x = cp.zeros(16, cp.float32)
        k = cudakit.triton_kernel(m.noop, num_warps=1)
        raw = cp.RawKernel(r'extern "C" __global__ void noop(float* x) {}', "noop")
        prov = {"cudakit": lambda: k[(1,)](x), "cupy": lambda: raw((1,), (32,), (x,))}
        if env.torch is not None:
            tx = env.torch.from_dlpack(x)
            prov["triton"] = lambda: m.noop[(1,)](tx, num_warps=1)
        return prov
    return [Case("triton_launch_overhead", "overhead", (1,), "float32", 0, setup, mode="host",
                 note="host time per launch of an empty kernel; cupy = raw cupy.RawKernel, triton = Triton's launcher")]
