"""Benchmark case and environment types."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

CHECK_ELEMENTS = 1 << 22   # the most elements of a check's input (its float64 reference runs on the CPU)


def check_batch(shape, limit: int = CHECK_ELEMENTS) -> tuple:
    """`shape` with its leading dimension cut so that it holds at most `limit` elements (at least 1)."""
    rest = 1
    for d in shape[1:]:
        rest *= d
    return (max(1, min(shape[0], limit // max(rest, 1))), *shape[1:])


@dataclass
class Env:
    """What a case module needs to build its inputs: the array module, the device, size policy."""
    gpu: bool               # True: CuPy arrays on the current GPU; False: NumPy on the host
    quick: bool             # smaller sizes, fewer repetitions
    xp: object              # cupy or numpy
    torch: object = None    # the torch module when installed (and CUDA-capable on GPU runs)
    dtypes: tuple = ("float32", "bfloat16")
    ops: tuple = ()         # the op names asked for by name (--ops); empty: all


@dataclass
class Case:
    """One op at one shape and dtype.

    nbytes: the fewest bytes the op must move through device memory (each input read once,
            each output written once); GB/s = nbytes / time.
    flops:  floating-point operations, 0 when the op is memory-bound.
    setup:  () -> {provider: zero-argument callable running the op once}; called once, after
            which the callables are timed. Providers missing from the dict are skipped.
    mode:   "device": time with CUDA events (GPU) / wall clock (CPU) per call;
            "host":   host time per call of many back-to-back calls (launch overhead).
    check:  () -> (fn, args): a cudakit call on fresh inputs like the benchmark's (same dtype and
            layout, at most CHECK_ELEMENTS elements); `cudakit bench --check` runs fn on them and
            on float64 host copies (the CPU backend) and records the error. None: not checked.
    skip:   why the case cannot run here ("" when it can); set before the run or by setup (which
            then returns no cudakit provider): the row records the reason and is not timed.
    info:   values that setup measured besides the timings (e.g. the step-0 losses of a training
            step), recorded in the row as they are.
    """
    op: str
    family: str
    shape: tuple
    dtype: str
    nbytes: int
    setup: Callable[[], dict]
    flops: int = 0
    mode: str = "device"
    note: str = ""
    sweep: bool = False     # one point of a size sweep: plotted as throughput against size
    check: Callable[[], tuple] | None = None
    skip: str = ""
    info: dict = field(default_factory=dict)
    results: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.op} {'x'.join(map(str, self.shape))} {self.dtype}"
