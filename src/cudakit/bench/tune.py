"""`cudakit tune`: measure the kernel shape of each contiguous elementwise op on this GPU.

For every elementwise and activation case of the benchmark (2^28 elements; float32 and bfloat16
unless asked otherwise) the public call (cudakit.relu, ...) is timed with each candidate (U, threads,
blocks-per-SM cap) of kernels/ew_shapes.py, the candidates interleaved round by round so that drift in the GPU's state
hits them alike; the fastest is stored for this GPU's UUID and used by every later process on it.
Why per GPU: see kernels/ew_shapes.py.
"""
from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from ..kernels import elementwise as ew, ew_shapes
from ..kernels._common import vec_width
from . import runner, timing
from .cases import elementwise as cases_mod

# bench case label -> kernel op name where they differ
_OP_OF_LABEL = {"gelu": "gelu_tanh", "gelu_backward": "gelu_tanh_backward"}


def kernel_op(label: str) -> str:
    """The kernel op of a bench case label (gelu -> gelu_tanh)."""
    return _OP_OF_LABEL.get(label, label)


def compile_candidates(cases, extra=()) -> None:
    """Every candidate instantiation of the cases' ops (and of the `extra` shapes) compiled up
    front, a few NVRTC calls in parallel (one by one on first launch would take minutes)."""
    exprs = {ew._expr("contig", kernel_op(c.op), c.dtype, vec_width(c.dtype), u)
             for c in cases for u, *_ in candidates(kernel_op(c.op), c.dtype) + tuple(extra)}
    chunks = [sorted(exprs)[i::8] for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(ew._family.add, [ch for ch in chunks if ch]))


def candidates(op: str, dtype: str, dev: int | None = None) -> tuple:
    """The shapes to try for op in dtype; on device dev without the capped ones where it does not
    report its shared memory per SM (a cap could not be expressed there)."""
    c = ew_shapes.HEAVY_CANDIDATES if ew.is_heavy(op, dtype) else ew_shapes.CANDIDATES
    if dev is not None:
        from ..runtime.device import get_device_info
        if not get_device_info(dev).max_shared_memory_per_multiprocessor:
            c = tuple(s for s in c if not s[2])
    return c


def use(dev: int, op: str, dtype: str, shape) -> None:
    """Make op's public call launch `shape` (None: the untuned one) on device dev from its next
    call on, in this process."""
    s = ew_shapes.shapes(dev)
    if shape is None:
        s.pop((op, dtype), None)
    else:
        s[(op, dtype)] = shape
    ew.forget_entries(op)


def tune_elementwise(ops=None, dtypes=("float32", "bfloat16"), rounds: int = 3, progress=None) -> tuple:
    """Tune the ops (bench case labels; None: all) for each dtype on the current GPU; returns
    ({(op, dtype): (U, threads, cap)}, the file written, {(op, dtype): {shape: median ms}})."""
    import cupy as cp
    from ..runtime.device import get_device_info
    env = runner.make_env(False, False, tuple(dtypes), set())
    if not env.gpu:
        raise RuntimeError("cudakit tune needs a usable CUDA GPU")
    dev = cp.cuda.runtime.getDevice()
    if not ew_shapes.has_uuid(dev):
        raise RuntimeError(f"device {dev} reports no UUID: tuned shapes cannot be kept for it")
    cases = [c for c in cases_mod.cases(env) if c.family in ("elementwise", "activations")
             and (not ops or c.op in ops)]
    if ops and not cases:
        raise ValueError(f"no elementwise or activation op named {sorted(ops)}")
    compile_candidates(cases)
    found, times = {}, {}
    for c in cases:
        op = kernel_op(c.op)
        fn = c.setup()["cudakit"]
        ms: dict = {}
        before = ew_shapes.shapes(dev).get((op, c.dtype))
        try:
            for _ in range(rounds):
                for shape in candidates(op, c.dtype, dev):
                    use(dev, op, c.dtype, shape)
                    ms.setdefault(shape, []).append(timing.time_gpu(fn, 3, 10)["median_ms"])
        finally:
            use(dev, op, c.dtype, before)
        del fn
        med = {s: statistics.median(v) for s, v in ms.items()}
        found[(op, c.dtype)] = min(med, key=med.get)
        times[(op, c.dtype)] = med
        if progress:
            progress(op, c.dtype, found[(op, c.dtype)], med)
        env.xp.get_default_memory_pool().free_all_blocks()
    info = get_device_info(dev)
    path = ew_shapes.store(dev, found, {"device": info.name, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                        "elements": cases[0].shape[0] if cases else 0, "rounds": rounds})
    for op, _ in found:
        ew.forget_entries(op)
    return found, path, times
