"""Genesis's CUDA backend interface (seed 002) on cudakit: `import cudakit.compat.genesis as genesis`.

genesis.device("cuda:0"), genesis.tensor(data, device=...), genesis.matmul(a, b) and the
genesis.cuda module (memory limits and statistics, kernel cache, profiling). Tensors are the
arrays of cudakit's backends: CuPy arrays on a GPU, NumPy arrays on the CPU; ops run through cudakit.
Differences from the seed (no torch, no printing, no silent fallback): docs/compat.md.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ... import ops
from ...errors import ArgumentError, ArgumentTypeError, DeviceError, ShapeError
from .._common import numeric_dtype
from . import cuda
from .backends import CUDAMemoryPool, CUDAStorage, get_memory_stats


@dataclass(frozen=True)
class Device:
    """A device: type "cpu" or "cuda", and for CUDA an index (None: the current GPU)."""
    type: str
    index: int | None = None

    def __post_init__(self):   # (a Device made directly is checked as device() checks its spec)
        if self.type not in ("cpu", "cuda"):
            raise DeviceError(f"Device type must be 'cpu' or 'cuda' (got {self.type!r})")
        if self.index is not None:
            if isinstance(self.index, bool) or not isinstance(self.index, (int, np.integer)) or self.index < 0:
                raise DeviceError(f"Device index must be an int >= 0 or None (got {self.index!r})")
            if self.type == "cpu":
                raise DeviceError(f"a cpu Device has no index (got {self.index!r})")
            object.__setattr__(self, "index", int(self.index))

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


def device(spec="cpu") -> Device:
    """A Device from "cpu", "cuda", "cuda:N", an int N (GPU N) or a Device. DeviceError naming
    `spec` otherwise. Needs no GPU (a CUDA tensor does)."""
    return _parse_device(spec)


def _parse_device(spec) -> Device:
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
        return Device("cuda", spec)
    if isinstance(spec, str):
        s = spec.strip().lower()
        if s in ("cpu", "cuda"):
            return Device(s)
        if s.startswith("cuda:") and s[5:].isdigit():
            return Device("cuda", int(s[5:]))
    raise DeviceError(f"device must be 'cpu', 'cuda', 'cuda:N' or an index >= 0 (got {spec!r})")


def tensor(data, device=None, dtype=None):
    """An array holding `data` (a nested list, a scalar or an array) on `device` (default "cpu"):
    a CuPy array on a GPU, a NumPy array on the CPU. dtype: default float32 (Genesis's default
    dtype; integer data becomes float32). Raises RuntimeError (BackendUnavailableError) for a
    CUDA device without one, DeviceError naming a bad device, DTypeError naming a dtype other
    than bool, integer or float (bfloat16 included), ArgumentTypeError for data that is not
    numbers (None, strings, objects) and ShapeError for ragged lists; ArgumentError where finite
    data overflows the dtype (1e300 as float32)."""
    dev = _parse_device(device if device is not None else "cpu")
    dt = numeric_dtype(dtype, "genesis.tensor: dtype", complex_ok=False)
    if data is None or isinstance(data, (str, bytes, dict, set)):
        raise ArgumentTypeError(f"genesis.tensor: data must be numbers, a nested list or an array "
                                f"(got {type(data).__name__})")
    try:
        raw = np.asarray(data)
    except ValueError as e:   # (a ragged nested list)
        raise ShapeError(f"genesis.tensor: data must be rectangular ({e})") from None
    if raw.dtype.kind == "O":   # ints past int64, Decimal, Fraction: numbers NumPy keeps as objects
        if not all(isinstance(v, numbers.Real) or (isinstance(v, numbers.Number) and not isinstance(v, numbers.Complex))
                   for v in raw.flat):   # (Decimal is a Number, not a Real)
            raise ArgumentTypeError("genesis.tensor: data must be numbers (got objects that are not)")
        raw = raw.astype(np.float64)
    elif raw.dtype.kind not in "biuf" and raw.dtype.name != "bfloat16":
        raise ArgumentTypeError(f"genesis.tensor: data must be numbers (got {raw.dtype} data)")
    _check_fits(raw, dt)
    with np.errstate(over="ignore"):
        host = raw.astype(dt, copy=True)
    if host.dtype.kind == "f" or host.dtype.name == "bfloat16":   # finite data the cast made inf
        inf = np.isinf(host)
        if inf.any() and np.isfinite(raw[inf]).any():
            raise ArgumentError(f"genesis.tensor: data overflows {host.dtype}")
    if dev.type == "cpu":
        return host
    cuda._cuda("genesis.tensor on a CUDA device")
    from ...backends import get_backend
    return get_backend("cuda", device=dev.index).to_device(host)


def _check_fits(raw: np.ndarray, dt: np.dtype) -> None:
    """ArgumentError where a value of raw (bool, integer, float or bfloat16) has no value of an
    integer dt (out of its range; NaN or inf), which NumPy's cast would wrap; nothing to check
    where every value of raw's dtype fits (NumPy's safe casts). (Float overflow: tensor() after
    the cast.)"""
    if raw.size == 0 or np.can_cast(raw.dtype, dt, "safe"):
        return
    if dt.kind in "iu" and raw.dtype.kind != "b":
        info = np.iinfo(dt)
        if raw.dtype.kind in "iu":
            lo, hi = int(raw.min()), int(raw.max())
        else:   # (floats are truncated toward 0: -128.5 and 127.5 become int8's -128 and 127)
            f = raw.astype(np.float64)
            if not np.isfinite(f).all():
                raise ArgumentError(f"genesis.tensor: NaN or inf has no {dt} value")
            lo, hi = float(np.trunc(f.min())), float(np.trunc(f.max()))
        if lo < info.min or hi > info.max:
            raise ArgumentError(f"genesis.tensor: data outside {dt}'s range [{info.min}, {info.max}]")


def matmul(a, b):
    """a @ b (cudakit.matmul: NumPy's rules, cuBLAS on the GPU)."""
    return ops.matmul(a, b)


__all__ = ["Device", "device", "tensor", "matmul", "cuda", "CUDAStorage", "CUDAMemoryPool", "get_memory_stats"]
