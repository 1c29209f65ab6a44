"""Exception types. Each names what went wrong and what to do about it."""
from __future__ import annotations


class CudakitError(Exception):
    """Base class of every cudakit error."""


class BackendUnavailableError(CudakitError, RuntimeError):
    """The requested backend cannot run here; the message says why."""


class DeviceError(CudakitError, ValueError):
    """Arrays on different devices, or a device index that does not exist."""


class ShapeError(CudakitError, ValueError):
    """An argument has the wrong shape (names the argument, expected vs got)."""


class DTypeError(CudakitError, TypeError):
    """An argument has an unsupported or mismatched dtype (names the argument)."""


class ArgumentError(CudakitError, ValueError):
    """An argument has a bad value: out of range, non-finite, read-only where it is written, the
    wrong kind of object (None where an array is needed). The message names the argument, the
    value and the accepted range."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument has the wrong type (None where an array is needed, a string where a bool or an
    int is needed); also a TypeError."""


class ConfigError(CudakitError, ValueError):
    """A CUDAKIT_* setting has a value cudakit cannot use: names the variable, the value and the
    accepted forms."""


class CacheError(CudakitError, RuntimeError):
    """A cache directory cudakit refuses to touch (not a directory, or not marked as cudakit's)."""


class CompileError(CudakitError, RuntimeError):
    """A kernel failed to compile: carries the source name, the options and the compiler log."""

    def __init__(self, name: str, options: tuple, log: str):
        self.name, self.options, self.log = name, tuple(options), log
        super().__init__(
            f"compiling {name!r} failed (options: {' '.join(self.options) or 'none'}):\n{log.strip()}")


class LaunchError(CudakitError, RuntimeError):
    """A launch was refused or failed: carries the kernel name, grid and block."""

    def __init__(self, message: str, kernel: str = "?", grid: tuple = (), block: tuple = ()):
        self.kernel, self.grid, self.block = kernel, tuple(grid), tuple(block)
        where = (f"kernel {kernel!r}" if kernel != "?" else "") + (f" grid={self.grid}" if self.grid else "") + (
            f" block={self.block}" if self.block else "")   # a refusal before the launch names no grid
        # (no kernel, grid or block: a launch configuration checked on its own, launch_config)
        super().__init__(f"{where.strip()}: {message}" if where else message)


class TargetIndexError(CudakitError, IndexError):
    """A class-index target (cross_entropy) outside [0, C) that is not ignore_index."""


class DistributedError(CudakitError, RuntimeError):
    """A collective, the store or a peer failed: names this process's rank, the op and the cause
    (NCCL's message, the lost rank, the timeout that expired, the shapes that differ)."""

    def __init__(self, message: str, rank: int | None = None, op: str | None = None,
                 lost_ranks: tuple = (), nccl_message: str | None = None):
        self.rank, self.op, self.nccl_message = rank, op, nccl_message
        self.lost_ranks = tuple(lost_ranks)
        where = "distributed" if rank is None else f"rank {rank}"
        super().__init__(f"{where}: {op}: {message}" if op else f"{where}: {message}")


class OutOfMemoryError(CudakitError, MemoryError):
    """Device memory exhausted, raised only after freeing cached blocks and retrying once."""

    def __init__(self, requested: int, allocated: int, reserved: int, free: int, total: int,
                 limit: int | None, device: int = 0):
        self.requested, self.allocated, self.reserved = requested, allocated, reserved
        self.free, self.total, self.limit, self.device = free, total, limit, device
        lim = "none" if not limit else _fmt(limit)
        # MemoryError's __init__, not super()'s: in the CuPy-catchable subclass (runtime/memory.py)
        # CuPy's OutOfMemoryError, whose __init__ takes (size, total), comes next in the MRO
        MemoryError.__init__(self, 
            f"out of memory on cuda:{device}: requested {_fmt(requested)}; cudakit holds "
            f"{_fmt(allocated)} allocated, {_fmt(reserved)} reserved; device free {_fmt(free)} of "
            f"{_fmt(total)}; limit {lim}. Free arrays you no longer need, call "
            f"cudakit.memory.empty_cache(), or raise the limit (CUDAKIT_GPU_MEMORY_LIMIT).")


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


__all__ = ["CudakitError", "ArgumentError", "ArgumentTypeError", "ConfigError", "CacheError",
           "BackendUnavailableError", "DeviceError", "ShapeError", "DTypeError",
           "CompileError", "LaunchError", "DistributedError", "OutOfMemoryError", "TargetIndexError"]
