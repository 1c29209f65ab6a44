"""Programmatic dependent launch (PDL): whether a device takes it, and marking kernels for it.

A kernel marked here (register) is launched by the native launcher with programmatic stream
serialization (runtime/_native.c, cuLaunchKernelEx), so that its launch overlaps the end of the
kernel before it in the stream instead of following that kernel's completion. Only a kernel that
waits (griddepcontrol.wait) before it touches global memory may be marked: cudakit's CUDA C++
kernels (CK_PDL_WAIT, kernels/_pdl.cuh) and Triton kernels compiled with a PDL constexpr set
(runtime/triton.py). CUDAKIT_PDL=0 marks none.
"""
from __future__ import annotations

_devices: dict = {}   # device -> whether it and the launcher take PDL launches


def supported(dev: int | None = None) -> bool:
    """Whether kernels launched on device dev (default: the current one) may be marked: CUDAKIT_PDL
    on, compute capability 9.0 or later (griddepcontrol), and the native launcher with the driver's
    cuLaunchKernelEx. The device's part is asked once."""
    from ..config import settings
    if not settings().pdl:
        return False
    if dev is None:
        from . import _cupy
        dev = _cupy.cupy().cuda.runtime.getDevice()
    ok = _devices.get(dev)
    if ok is None:
        from . import native
        from .device import get_device_info
        ok = _devices[dev] = get_device_info(dev).compute_capability[0] >= 9 and native.pdl_capable()
    return ok


def register(func_ptr: int) -> bool:
    """Mark the CUfunction func_ptr for PDL launches (native.pdl_register); False where that cannot
    be done (it then launches as any other kernel, its wait returning at once)."""
    from . import native
    return native.pdl_register(func_ptr)
