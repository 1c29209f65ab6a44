"""The native launcher (_native.c): built on first use with the system C compiler, cached on disk.

Why: a launch through CuPy's typed driver binding costs about 3.7 us of host time per call on an
H100 host, and filling ctypes parameter cells from Python another 1.4 us; a tiny op is then
slower than PyTorch's. `_native.launch` packs the values in C and calls cuLaunchKernel directly.
The module also carries memory.py's counting allocator (mem_*), the tiny elementwise dispatch (ew,
used by ops.add/mul/relu) and Triton's launch (tk_bind): host time that Python objects and frames
cost on every call.

The module is compiled once per (source, Python ABI) into CUDAKIT_CACHE_DIR/native with `cc`
(CC overrides); it needs only Python's headers, not CUDA's. Where it cannot be built (no compiler,
no Python.h, not Linux) or CUDAKIT_NATIVE=0, `launcher()` returns None, the reason is logged once
at INFO and shown by `cudakit info`, and launches go through CuPy's binding: slower, same results.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("_native.c")
_lock = threading.Lock()
_state: tuple | None = None     # (launch function or None, reason, module or None)
_launch_ex = False              # whether _init gave the module cuLaunchKernelEx (pdl_capable)


class NativeBuildError(RuntimeError):
    """The native launcher could not be compiled or loaded (the message says why)."""


def module_path() -> Path:
    """Where the compiled module for this source and Python ABI lives."""
    from .compiler import cache_dir
    src = _SOURCE.read_bytes()
    abi = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    key = hashlib.sha256(src + abi.encode() + sys.version.encode()).hexdigest()[:16]
    return Path(cache_dir()) / "native" / f"_cudakit_native-{key}{abi}"


def build(path: Path | None = None) -> Path:
    """Compile _native.c into `path` (default module_path()); raises NativeBuildError with the
    compiler's output when that fails."""
    path = Path(path or module_path())
    if path.exists():
        if not _digest_path(path).exists():   # (built before digests were written: trusted as it was, and
            with contextlib.suppress(OSError):  # a host without a compiler keeps its launcher)
                _write_digest(path, path.read_bytes())
                return path
        if _intact(path):
            return path
        log.warning("the native launcher %s is damaged (its digest does not match): building it again", path)
    if not sys.platform.startswith("linux"):
        raise NativeBuildError(f"the native launcher is built on Linux only (this is {sys.platform})")
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise NativeBuildError("no C compiler found (cc, gcc or clang on the PATH, or CC)")
    inc = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(inc, "Python.h")):
        raise NativeBuildError(f"Python's headers are not installed (no Python.h in {inc}; install python3-dev)")
    from .cache import prepare
    prepare(path)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-std=c99", f"-I{inc}", str(_SOURCE), "-o", tmp],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise NativeBuildError(f"{cc} failed to compile {_SOURCE.name}:\n{(r.stderr or r.stdout)[-2000:]}")
        # the digest first: a reader that finds the new module beside an old digest builds again,
        # and never loads a torn module (os.replace: it sees the old state or the whole file)
        _write_digest(path, Path(tmp).read_bytes())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".digest")


def _write_digest(path: Path, data: bytes) -> None:
    from .cache import digest, write_atomic
    write_atomic(_digest_path(path), digest(data).encode(), suffix=".digest")


def _intact(path: Path) -> bool:
    """Whether the module file matches the digest written when it was built: a truncated or
    overwritten module loaded as it is crashed the process (SIGBUS) or disabled the launcher."""
    from .cache import digest
    try:
        return digest(path.read_bytes()) == _digest_path(path).read_text().strip()
    except OSError:
        return False


def load(path: Path | None = None):
    """The compiled module (building it when needed)."""
    path = build(path)
    loader = importlib.machinery.ExtensionFileLoader("_cudakit_native", str(path))
    spec = importlib.util.spec_from_file_location("_cudakit_native", str(path), loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _cu_launch_kernel_address(name: str = "cuLaunchKernel") -> int | None:
    """The address of a driver entry point (None where this driver has no such symbol)."""
    lib = ctypes.CDLL("libcuda.so.1")  # the driver CuPy already loaded: dlopen returns that copy
    try:
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    except AttributeError:
        return None


def pdl_capable() -> bool:
    """Whether registered kernels launch with programmatic stream serialization: the native
    launcher is loaded and was given the driver's cuLaunchKernelEx."""
    return launcher() is not None and _launch_ex


def pdl_register(func_ptr: int) -> bool:
    """Launch the CUfunction func_ptr with programmatic stream serialization from now on (every
    native launch path: kernel[grid], plans, replays), so that its launch overlaps the tail of the
    kernel before it in the stream; the kernel must wait (griddepcontrol.wait) before it touches
    global memory. False where that cannot be done (not pdl_capable(), or the launcher's set is
    full): it then launches as any other kernel, its wait a no-op."""
    return pdl_capable() and bool(_state[2].pdl_register(func_ptr))


def launcher():
    """`launch(func, gx, gy, gz, bx, by, bz, smem, stream, codes, *values) -> CUresult`, or None
    when the native launcher is unavailable (see status())."""
    global _state
    s = _state
    if s is None:
        with _lock:
            if _state is None:
                _state = _init()
            s = _state
    return s[0]


def module():
    """The loaded native module (launch, the counting allocator mem_*, the tiny-op path ew), or
    None when it is unavailable (see status())."""
    launcher()
    return _state[2]


def fast_paths():
    """The native module with its fast paths (ew for tiny elementwise ops, tk_bind for Triton
    kernels) set up for CuPy, or None. They launch only while the gate is open: the Python paths
    open it (fast_gate(True)) when no profile records and launches are asynchronous."""
    mod = module()
    if mod is not None and not _fast_ready:
        with _fast_lock:  # two threads' first ops: one sets up, the other waits for it
            if not _fast_ready:
                _setup_fast_paths(mod)
    return mod


def empty_fn():
    """A function (shape tuple, dtype) -> a new C-contiguous CuPy array, for the outputs of plans
    written in Python (kernels/path_plans.py): the native module's nd_empty (CuPy's C constructor
    _ndarray_init, allocation and array in one C call) where it is built, else cupy.ndarray."""
    mod = fast_paths()
    if mod is None:
        from . import _cupy
        return _cupy.loaded_cupy().ndarray
    return mod.nd_empty


def _setup_fast_paths(mod) -> None:
    global _fast_ready
    from . import _cupy, launch
    cp = _cupy.loaded_cupy()
    rest = (launch.recent_launches.append, _launch_error)
    # CuPy's own C functions for the current device and stream where its Cython modules
    # export them (checked by signature in C); else the Python callables
    dev = _c_function(cp.cuda.runtime, "getDevice")
    stream = _c_function(cp.cuda.stream, "get_current_stream_ptr")
    try:
        mod.fast_setup(cp.ndarray, dev or cp.cuda.runtime.getDevice,
                       stream or cp.cuda.get_current_stream, *rest)
    except TypeError as e:  # this CuPy's C functions have other signatures
        log.info("CuPy's C device/stream functions not usable (%s); the fast paths call Python", e)
        mod.fast_setup(cp.ndarray, cp.cuda.runtime.getDevice, cp.cuda.get_current_stream, *rest)
    try:  # outputs straight from the counting allocator while it is CuPy's (see fast_alloc)
        mod.fast_alloc(_c_function(cp.cuda.memory, "get_allocator"))
    except TypeError as e:
        log.info("CuPy's get_allocator not usable from C (%s); CuPy allocates the outputs", e)
        mod.fast_alloc(None)
    _set_layout(mod, cp)
    if hasattr(mod, "replay_setup"):
        mod.replay_setup(cp.cuda.memory.alloc)
    _fast_ready = True


_fast_ready = False
_fast_lock = threading.Lock()


def _set_layout(mod, cp) -> None:
    """ew() reads CuPy's arrays from their fields and builds its outputs with CuPy's C constructor
    _ndarray_init where this CuPy's layout was found (_cupy_layout), else through attributes."""
    from . import _cupy_layout
    try:
        offsets = _cupy_layout.discover(cp)
        ndinit = _c_function(cp._core.core, "_ndarray_init") if offsets else None
        try:
            mod.fast_layout(offsets, cp.cuda.memory.MemoryPointer, ndinit)
        except TypeError as e:  # _ndarray_init has another signature in this CuPy
            log.info("CuPy's _ndarray_init not usable from C (%s); ew() builds outputs with cupy.ndarray", e)
            mod.fast_layout(offsets, cp.cuda.memory.MemoryPointer, None)
    except Exception as e:  # noqa: BLE001 -- any surprise from another CuPy: the attribute path
        log.info("probing CuPy's object layout failed (%s: %s)", type(e).__name__, e)
        offsets = None
        mod.fast_layout(None, None, None)
    if offsets is None:
        log.info("CuPy's ndarray layout not recognised; ew() reads arrays through attributes")


_SLOT_FORMATS = {"Q": "<Q", "i": "<I", "h": "<H", "f": "<f", "d": "<d"}
_SLOT_MASKS = {"Q": (1 << 64) - 1, "i": (1 << 32) - 1, "h": (1 << 16) - 1}


def pack_slot(code: str, value) -> bytes:
    """`value` as the 8 bytes of a kernel parameter slot, packed as the native launcher packs it
    (code as in FastLauncher: Q 8-byte integer, i 4-byte, h 16-bit pattern, f float32, d float64;
    the value in the low bytes, zeros above)."""
    fmt = _SLOT_FORMATS.get(code)
    if fmt is None:
        raise ValueError(f"unknown parameter code {code!r} (expected one of {''.join(_SLOT_FORMATS)})")
    v = int(value) & _SLOT_MASKS[code] if code in _SLOT_MASKS else float(value)
    return struct.pack(fmt, v).ljust(8, b"\0")


def replay(allocs: tuple, steps: tuple, outs: tuple, single: bool, on_status):
    """A plan replayed in C (_native.c replay_new: the allocations, launches and cuBLASLt calls of
    a dispatch plan with each call's addresses substituted), or None where the native module or
    its fast paths are unavailable (the caller keeps its Python replay). on_status(status, step)
    raises the error of a failed cuBLASLt step."""
    mod = fast_paths()
    if mod is None or not hasattr(mod, "replay_new"):
        return None
    return mod.replay_new(allocs, steps, outs, single, on_status)


def _c_function(module, name: str):
    """The capsule that Cython exports for cimport of `module`'s C function `name`, or None."""
    return getattr(module, "__pyx_capi__", {}).get(name)


def _launch_error(status: int, record: tuple):
    """A launch by a native fast path failed: raise it as the Python paths do."""
    from cupy_backends.cuda.api import driver
    from ..errors import LaunchError
    name, grid, block = record
    raise LaunchError(str(driver.CUDADriverError(status)), name, grid, block)


def _loaded():
    """The native module if it is already loaded (never builds or loads it), else None."""
    return _state[2] if _state is not None else None


def hold_fast_paths(delta: int) -> None:
    """+1: the native fast paths decline until the matching -1, whatever a Python path does in
    between (a profile holds them for its whole span, so it sees every launch)."""
    mod = _loaded()
    if mod is not None:
        mod.fast_hold(delta)


def close_fast_gate() -> None:
    """Make the native fast paths decline until a Python path reopens the gate: called when the
    settings change (CUDAKIT_LAUNCH_BLOCKING may now ask for synchronous launches)."""
    mod = _loaded()
    if mod is not None:
        mod.fast_gate(False)


def status() -> str:
    """'active', or why the native launcher is not used (without building it)."""
    if _state is None:
        return "not loaded yet (built on the first kernel launch)"
    return "active" if _state[0] is not None else f"unavailable: {_state[1]}"


def _init() -> tuple:
    global _launch_ex
    from ..config import settings
    _launch_ex = False
    if not settings().native:
        reason = "disabled by CUDAKIT_NATIVE=0"
    else:
        try:
            mod = load()
            mod.set_launch(_cu_launch_kernel_address())
            ex = _cu_launch_kernel_address("cuLaunchKernelEx")
            if ex:
                mod.set_launch_ex(ex)
                _launch_ex = True
            return mod.launch, "active", mod
        except (NativeBuildError, OSError, ImportError, subprocess.SubprocessError) as e:
            reason = str(e)
    log.info("native launcher unavailable (%s); kernels launch through CuPy's driver binding", reason)
    return None, reason, None
