"""warm_up_kernels(): compile the CUDA C++ kernel families before their first call.

A family (one CUDA C++ source, every template instantiation its host code launches) compiles on
first use, a group at a time (KernelFamily: the whole family, one kernel template, or for
elementwise one op in one dtype):
seconds per family the first time, a fraction of a second from the disk cache after that. Warming
up pays that at a time of the caller's choosing (a split family's calls run in parallel threads)
and loads each module and its kernels on the devices asked for, so that the first op of a
training step or a timed region does not. The Triton kernels (attention,
conv2d) are compiled per head size or tile at their first call and are not covered.
"""
from __future__ import annotations

import importlib
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor

from ..errors import ArgumentError
from ._common import FLOAT_DTYPE_NAMES

log = logging.getLogger("cudakit")

_SINGLE = ("elementwise", "transpose", "dropout", "pooling", "optimizers")   # one family each
_PER_DTYPE = ("reduction", "softmax", "cross_entropy", "normalization")      # one family a dtype
FAMILIES = _SINGLE + _PER_DTYPE


def _families(names, dtypes) -> dict:
    """{label: KernelFamily} of the modules `names`; per-dtype families only for `dtypes`."""
    out = {}
    for name in names:
        mod = importlib.import_module(f".{name}", __package__)
        if name in _SINGLE:
            out[name] = mod._family
        else:
            out.update({f"{name}[{dt}]": mod._families[dt] for dt in dtypes})
    return out


def warm_up_kernels(families=None, dtypes=None, devices=None) -> dict[str, float]:
    """Compile (or load from the disk cache) the kernel families and load their kernels on each
    of `devices`. Returns {family label: seconds}, e.g. {"elementwise": 15.9, "softmax[bfloat16]": 2.1}.

    families: names from FAMILIES (default: all); dtypes: the dtypes of the per-dtype families
    (reduction, softmax, cross_entropy, normalization; default: all four floating dtypes);
    devices: device indices, or "all" (default: the current device only: loading on a device
    creates its CUDA context).
    Without a usable GPU there is nothing to compile: returns {} (the reason is logged).
    Unknown names raise ArgumentError (a ValueError) listing the known ones.
    """
    names = tuple(FAMILIES if families is None else ([families] if isinstance(families, str) else families))
    dts = tuple(FLOAT_DTYPE_NAMES if dtypes is None else ([dtypes] if isinstance(dtypes, str) else dtypes))
    for what, got, known in (("kernel family", names, FAMILIES), ("dtype", dts, FLOAT_DTYPE_NAMES)):
        bad = [g for g in got if g not in known]
        if bad:
            raise ArgumentError(f"unknown {what} {', '.join(map(repr, bad))}; known: {', '.join(known)}")
    from ..runtime import device as _device
    if not _device.is_available():
        log.info("warm_up_kernels: no usable GPU (%s): nothing to compile", _device.unavailable_reason())
        return {}
    if devices is None:
        devs = [_device.current_device()]
    elif devices == "all":
        devs = list(range(_device.device_count()))
    else:
        devs = [devices] if isinstance(devices, int) else list(devices)
        n = _device.device_count()
        bad = [d for d in devs if not isinstance(d, int) or not 0 <= d < n]
        if bad:
            raise ArgumentError(f"devices must be in [0, {n}) (got {bad})")
    from ..runtime import _cupy
    cp = _cupy.cupy()
    times = {}
    for label, fam in _families(names, dts).items():
        t = time.perf_counter()
        groups = list(fam.groups())
        if len(groups) > 1:   # a family split in groups (elementwise: one per op and dtype): NVRTC calls in parallel
            with ThreadPoolExecutor(min(len(groups), os.cpu_count() or 1, 16)) as pool:
                list(pool.map(fam.compile_group, groups))
        exprs = fam.names()
        for d in devs:
            with cp.cuda.Device(d):
                for expr in exprs:
                    fam.function(d, expr)
        times[label] = time.perf_counter() - t
        log.info("warm_up_kernels: %s (%d kernels) ready on device(s) %s in %.2f s", label, len(exprs), devs,
                 times[label])
    return times
