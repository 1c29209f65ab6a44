"""FlamingCamel's CUDA backend (seed 000, `frontend.backend`) on cudakit.

    from cudakit.compat.flamingcamel import get_backend, cuda_add, is_cuda_available

Differences from the seed (docs/compat.md): nothing is printed (INFO logs instead;
print_memory_info() returns its text); PTX paths are relative to the backend's `root` (default:
the working directory) rather than to the package; load_kernel() checks the kernel's name and
converts Python scalars to the PTX parameter types; cuda_add() runs cudakit.add (shapes and
dtypes checked, no PTX file needed, no synchronisation); the CUDA availability is cudakit's
(CuPy and a visible GPU) and creating the backend does not make GPU 0 current.

Produce the PTX that load_kernel() reads from the seed's .cu listing with
`cudakit.compile_ptx(source, path="backend/ops_elementwise.ptx")` (the seed's
./scripts/compile_kernels.sh).
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import numpy as np

from .. import ops
from ..errors import LaunchError
from ..runtime import compiler, device, launch, memory
from ._common import check_int, cuda_usable, report, require_cuda

log = logging.getLogger(__name__)

# PTX parameter type -> the NumPy type a Python scalar is passed as (arrays pass as pointers)
_PTX_SCALARS = {"u8": np.uint8, "s8": np.int8, "b8": np.uint8, "u16": np.uint16, "s16": np.int16,
                "b16": np.uint16, "u32": np.uint32, "s32": np.int32, "b32": np.uint32, "u64": np.uint64,
                "s64": np.int64, "b64": np.uint64, "f32": np.float32, "f64": np.float64}


def _scalar_param(a, t: str, i: int, name: str):
    """Scalar argument `a` (a Python or NumPy bool, int or float; anything else is passed as it
    comes) as the PTX parameter type `t` takes it. An integer parameter of n bits takes integers in
    [-2^(n-1), 2^n) as their n-bit pattern: nvcc declares a C `int` .u32, so -1 reaches an `int n`
    as -1 and 2^32 - 1 an `unsigned n` as itself; an untyped .bN one also takes a float as the float
    of its size (hand-written PTX may carry a float there). A float parameter takes ints and floats
    that do not overflow it (a NumPy float32 to an .f64 parameter is widened, never passed as 4 bytes
    read as 8; NaN and infinities pass)."""
    if not isinstance(a, (bool, int, float, np.bool_, np.integer, np.floating)):
        return a
    nt = _PTX_SCALARS[t]
    if t[0] == "b" and isinstance(a, (float, np.floating)):   # (the float of the parameter's size)
        nt = {2: np.float16, 4: np.float32, 8: np.float64}.get(np.dtype(nt).itemsize)
        if nt is None:
            raise LaunchError(f"args[{i}]: {a!r}: a float does not fit the kernel's .{t} parameter", name)
    if np.dtype(nt).kind in "iu":
        bits = np.dtype(nt).itemsize * 8
        if not isinstance(a, (int, np.integer, np.bool_)) or not -(1 << (bits - 1)) <= int(a) < 1 << bits:
            raise LaunchError(f"args[{i}]: {a!r} does not fit the kernel's .{t} parameter (an integer in "
                              f"[-2^{bits - 1}, 2^{bits}))", name)
        u = int(a) & ((1 << bits) - 1)
        return nt(u - (1 << bits) if np.dtype(nt).kind == "i" and u >= 1 << (bits - 1) else u)
    finite = isinstance(a, (bool, int, np.bool_, np.integer)) or bool(np.isfinite(a))
    try:
        with np.errstate(over="ignore"):
            f = nt(a)
    except OverflowError:   # (a Python int past float64's range)
        f = nt("inf")
    if np.isinf(f) and finite:
        shown = repr(a) if len(repr(a)) <= 40 else f"{repr(a)[:20]}...({len(repr(a))} digits)"
        raise LaunchError(f"args[{i}]: {shown} does not fit the kernel's .{t} parameter (|x| <= "
                          f"{float(np.finfo(nt).max):.6g})", name)
    return f


def _entry_params(ptx: str, name: str) -> list[str] | None:
    """The parameter types (.u32, .u64, ...) of entry `name` in PTX text, None when it has none by
    that name. A parameter of another kind (an aligned byte array: a struct) is "".
    """
    m = re.search(r"\.entry\s+" + re.escape(name) + r"\s*\(([^)]*)\)", ptx)
    if m is None:
        return None
    params = [p.strip() for p in m.group(1).split(",") if p.strip()]
    out = []
    for p in params:
        t = re.match(r"\.param\s+\.(\w+)\s+[\w$]+\s*$", p)
        out.append(t.group(1) if t else "")
    return out


class PtxKernel:
    """A kernel loaded from a PTX file, launched as CuPy's RawKernel is:
    `kernel((grid,), (block,), (a, b, out, n))`.

    Python and NumPy ints and floats are passed as the types the PTX declares (a Python float to a
    `float` parameter as float32, not float64; -1 to an `int`, which nvcc declares .u32, as -1),
    and one out of the parameter's range raises LaunchError naming it (_scalar_param); the argument
    count must match the kernel's.
    """

    def __init__(self, kernel, params: list[str]):
        self.kernel, self.params = kernel, params
        self.name = kernel.name

    def _convert(self, args: tuple) -> tuple:
        if len(args) != len(self.params):
            raise LaunchError(f"args: the kernel takes {len(self.params)} arguments (got {len(args)})", self.name)
        return tuple(_scalar_param(a, t, i, self.name) if t in _PTX_SCALARS else a
                     for i, (a, t) in enumerate(zip(args, self.params)))

    def __call__(self, grid, block, args, shared_mem: int = 0, stream=None) -> None:
        """Launch on `grid` x `block` (ints or tuples) with `args` (CuPy arrays and scalars) on
        `stream` (default: the current one). Asynchronous: check_cuda_error() or synchronize()
        surfaces a kernel's fault."""
        self.kernel.launch(grid, block, self._convert(tuple(args)), shared_mem, stream)

    def __repr__(self):
        return f"<cudakit.compat.flamingcamel.PtxKernel {self.name}>"


class CUDABackend:
    """Manages CUDA device and kernel operations (FlamingCamel's CUDABackend).

    root: the directory relative PTX paths are resolved against (default: the working directory
    at the time of each load_kernel call).
    """

    def __init__(self, root=None):
        self._kernels: dict[tuple, PtxKernel] = {}
        self._device_id = 0
        if root is not None and not isinstance(root, (str, os.PathLike)):
            raise TypeError(f"root must be a str or a path (got {type(root).__name__})")
        self._root = None if root is None else Path(root)
        self._device_available = cuda_usable()
        if self._device_available:
            log.info("CUDA initialized: %d device(s) found; using GPU: %s", device.device_count(),
                     device.get_device_info(device.current_device()).name)
        else:
            log.info("no usable CUDA device, using CPU only: %s", device.unavailable_reason())

    @property
    def is_available(self) -> bool:
        """Check if CUDA is available."""
        return self._device_available

    def load_kernel(self, kernel_name: str, ptx_file: str) -> PtxKernel:
        """Load kernel `kernel_name` (an `extern "C"` symbol) from PTX file `ptx_file` (relative to
        the backend's root, or absolute); cached per (file, name).

        Raises FileNotFoundError naming the resolved path when the file does not exist,
        LaunchError (a RuntimeError) when the PTX has no entry of that name, CompileError (a
        RuntimeError) when the driver cannot load it. Without a GPU the kernel is returned
        unloaded; launching it raises BackendUnavailableError.
        """
        if not isinstance(kernel_name, str) or not kernel_name:
            raise TypeError(f"kernel_name must be a non-empty str (got {kernel_name!r})")
        if not isinstance(ptx_file, (str, os.PathLike)):
            raise TypeError(f"ptx_file must be a str or a path (got {type(ptx_file).__name__})")
        # (with the working directory: a relative path after a chdir is another file; not resolved,
        # a cache hit stays about a microsecond: the seed's wrappers call this on every op)
        base = os.fspath(self._root) if self._root is not None else os.getcwd()
        cache_key = (base, os.fspath(ptx_file), kernel_name)
        if cache_key in self._kernels:
            return self._kernels[cache_key]
        ptx_path = Path(base) / Path(ptx_file)
        if not ptx_path.is_file():
            raise FileNotFoundError(
                f"PTX file not found: {ptx_path}\nCompile the kernels first, e.g. "
                f"cudakit.compile_ptx(open('kernels.cu').read(), path={str(ptx_file)!r})")
        module = compiler.load_module(ptx_path)
        params = _entry_params(module.binary.decode(errors="replace"), kernel_name)
        if params is None:
            entries = re.findall(r"\.entry\s+([\w$]+)", module.binary.decode(errors="replace"))
            raise LaunchError(f"no kernel named {kernel_name!r} in {ptx_path}; its kernels: "
                              f"{', '.join(entries) or 'none'}", kernel_name)
        kernel = PtxKernel(module.get_kernel(kernel_name), params)
        if self._device_available:
            kernel.kernel.attributes   # loads the module now: a bad PTX fails here, not at launch
        self._kernels[cache_key] = kernel
        log.info("Loaded kernel: %s from %s", kernel_name, ptx_path)
        return kernel

    def get_grid_block_size(self, n: int, threads_per_block: int = 256) -> tuple[int, int]:
        """(grid_size, block_size) for a 1-D launch over n elements: grid = ceil(n / threads), the
        seed's calculation, for launches that can run: LaunchError (a RuntimeError) naming the limit
        for threads_per_block past a block's 1024 threads or a grid past 2^31 - 1 blocks (which the
        launch would refuse)."""
        n, threads = check_int(n, "n"), check_int(threads_per_block, "threads_per_block", 1)
        if threads > launch.MAX_THREADS_PER_BLOCK:
            from ..errors import LaunchError
            raise LaunchError(f"get_grid_block_size: threads_per_block must be <= {launch.MAX_THREADS_PER_BLOCK} "
                              f"(got {threads})")
        return launch.launch_config(n, threads)

    def check_cuda_error(self) -> None:
        """Synchronise and raise LaunchError (a RuntimeError) if an earlier launch failed; returns
        at once without CUDA."""
        if self._device_available:
            launch.check()


# The process's backend, made on first use (get_backend()).
_backend: CUDABackend | None = None


def get_backend() -> CUDABackend:
    """The process's CUDABackend, created on first call."""
    global _backend
    if _backend is None:
        _backend = CUDABackend()
    return _backend


def is_cuda_available() -> bool:
    """Check if CUDA is available."""
    return get_backend().is_available


def cuda_add(a, b, out) -> None:
    """out = a + b elementwise on the GPU (cudakit.add into `out`).

    a, b, out: CuPy arrays of one float dtype (float16, bfloat16, float32, float64); b broadcasts
    against a and out has the result's shape. Raises BackendUnavailableError (a RuntimeError)
    without CUDA, ShapeError / DTypeError / DeviceError naming the argument. Does not synchronise.
    """
    if not get_backend().is_available:
        require_cuda("cuda_add")
    ops.add(a, b, out=out)


def synchronize() -> None:
    """Synchronize all CUDA operations (blocking); returns at once without CUDA."""
    device.synchronize()


def empty_cache() -> None:
    """Return the cached free GPU memory to the driver; nothing to do without CUDA."""
    memory.empty_cache()


def memory_info() -> tuple[int, int]:
    """(free_memory, total_memory) of the current GPU in bytes; (0, 0) without CUDA."""
    return memory.memory_info()


def print_memory_info() -> str:
    """The current GPU's memory use (used, free, total in GB) as text, logged at INFO and returned
    (library code does not print: `print(print_memory_info())`)."""
    if not is_cuda_available():
        return report(log, "CUDA not available")
    free, total = memory_info()
    used = total - free
    return report(log, f"GPU Memory:\n  Used:  {used / 1e9:.2f} GB\n  Free:  {free / 1e9:.2f} GB\n"
                       f"  Total: {total / 1e9:.2f} GB")


__all__ = ["CUDABackend", "PtxKernel", "get_backend", "is_cuda_available", "cuda_add", "synchronize",
           "empty_cache", "memory_info", "print_memory_info"]
