"""Kernels from CUDA C++ (NVRTC), PTX/cubin/fatbin files and Numba, all behind one `Kernel`.

Compiled binaries are cached in memory (per process) and on disk under CUDAKIT_CACHE_DIR/nvrtc,
keyed by everything that changes the binary: source, options, name expressions, target
architecture, NVRTC version, cudakit version and the included headers found on disk. Files are
written to a temporary name and moved into place with os.replace, so a crash or a concurrent
process never leaves a torn entry; each carries its binary's length and digest, so one damaged
afterwards is compiled again.
cudakit uses NVRTC directly rather than CuPy's RawModule so that the cache location, key and
`cudakit cache clear` are its own; CuPy's cache (CUPY_CACHE_DIR) is not involved.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import struct
import tempfile
import threading
from pathlib import Path

from .. import __version__, profiler
from ..errors import ArgumentError, ArgumentTypeError, BackendUnavailableError, CacheError, CompileError, LaunchError
from . import _cupy, cache as _cache, launch as _launch

log = logging.getLogger(__name__)

DEFAULT_OPTIONS = ("-std=c++17",)
_memory_cache: dict[tuple, tuple[list, tuple[bytes, dict]]] = {}   # -> (headers, entry)
_lock = threading.Lock()

# CUfunction_attribute values
_ATTRS = {"max_threads_per_block": 0, "shared_memory": 1, "const_memory": 2, "local_memory": 3,
          "registers": 4, "ptx_version": 5, "binary_version": 6, "max_dynamic_shared_memory": 8}


def cache_dir() -> Path:
    from ..config import settings
    return settings().cache_dir


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError as e:
        from ..errors import BackendUnavailableError
        raise BackendUnavailableError(f"NVRTC is not available ({e}); {_cupy.INSTALL_HINT}") from None
    return nvrtc


def nvrtc_version() -> tuple[int, int]:
    return tuple(_nvrtc().getVersion())


def current_arch() -> str:
    from .device import get_device_info
    major, minor = get_device_info().compute_capability
    return f"sm_{major}{minor}"


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^">]+)[">]', re.MULTILINE)
_MAX_HEADERS = 1024   # headers followed for one source at most (a cycle or a huge tree: the rest unhashed)


def _include_dirs(options) -> list[str]:
    """The -I / --include-path directories of compiler options."""
    dirs, it = [], iter(options)
    for o in it:
        if o in ("-I", "--include-path"):
            dirs.append(next(it, ""))
        elif o.startswith("--include-path="):
            dirs.append(o.split("=", 1)[1])
        elif o.startswith("-I"):
            dirs.append(o[2:])
    return [d for d in dirs if d]


def _included(source: str, options) -> list:
    """[(path, sha256 of its contents, (mtime_ns, size))] of the headers `source` includes, found
    on disk as the compiler searches them: a quoted include in the including header's own folder
    first, then under the options' include directories, then the working directory; and of the
    headers those include. A header edited since an entry was cached changes its key. NVRTC's own
    and the toolkit's headers are not found there and not read; unreadable or missing headers are
    left out (the compiler reports them)."""
    if "include" not in source:
        return []
    dirs = _include_dirs(options)
    with contextlib.suppress(OSError):   # (a working directory since deleted: not searched)
        dirs.append(os.getcwd())
    seen: dict[str, tuple] = {}
    todo = [(source, None)]
    while todo and len(seen) < _MAX_HEADERS:
        text, here = todo.pop()
        for delim, name in _INCLUDE.findall(text):
            for d in ([here] if delim == '"' and here else []) + dirs:
                p = os.path.normpath(os.path.join(d, name))
                if p in seen:
                    break
                try:
                    st = os.stat(p)
                    data = Path(p).read_bytes()
                except OSError:
                    continue
                seen[p] = (hashlib.sha256(data).hexdigest(), (st.st_mtime_ns, st.st_size))
                todo.append((data.decode(errors="replace"), os.path.dirname(p)))
                break
    return [(p, h, stamp) for p, (h, stamp) in sorted(seen.items())]


def _headers_unchanged(included: list) -> bool:
    """Whether the headers _included() found still have their mtime and size (one stat each: the
    memory cache's check, so that a hit reads no header)."""
    for p, _h, stamp in included:
        try:
            st = os.stat(p)
        except OSError:
            return False
        if (st.st_mtime_ns, st.st_size) != stamp:
            return False
    return True


def _cache_key(source, options, name_expressions, arch, included=None) -> str:
    """The disk cache's key: the inputs and the included headers' contents (_included)."""
    included = _included(source, options) if included is None else included
    blob = json.dumps([source, list(options), list(name_expressions), arch, list(nvrtc_version()),
                       __version__, [(p, h) for p, h, _ in included]], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _read_entry(path: Path):
    """(binary, mapping) of a cache entry, or None when it is missing or damaged: its header (a
    JSON object) carries the binary's length and digest, so a truncated or overwritten file is
    compiled again, not loaded."""
    try:
        data = path.read_bytes()
        (hlen,) = struct.unpack("<I", data[:4])
        header = json.loads(data[4:4 + hlen])
        binary = data[4 + hlen:]
    except (OSError, ValueError, struct.error):
        return None
    if not isinstance(header, dict) or not isinstance(header.get("mapping"), dict) \
            or header.get("n") != len(binary) or header.get("digest") != _cache.digest(binary):
        log.warning("kernel cache entry %s is damaged (length or digest): compiling it again", path)
        return None
    return binary, header["mapping"]


def _write_entry(path: Path, binary: bytes, mapping: dict) -> None:
    header = json.dumps({"mapping": mapping, "n": len(binary), "digest": _cache.digest(binary)}).encode()
    try:
        _cache.prepare(path)
        _cache.write_atomic(path, struct.pack("<I", len(header)) + header + binary)
    except (OSError, CacheError) as e:  # an unwritable cache slows later runs but must not fail this one
        log.warning("could not write kernel cache entry %s: %s", path, e)


def _options(options) -> tuple:
    """Compiler options as a tuple of strings: one string is one option ("-lineinfo"), not its
    characters."""
    if isinstance(options, str):
        return (options,)
    try:
        opts = tuple(options)
    except TypeError:
        raise ArgumentTypeError(f"options must be a string or a sequence of strings (got {options!r})") from None
    bad = [o for o in opts if not isinstance(o, str)]
    if bad:
        raise ArgumentTypeError(f"options must be strings (got {bad[0]!r})")
    return opts


def _check_source(source) -> None:
    if not isinstance(source, str):
        raise ArgumentTypeError(f"source must be CUDA C++ text, a str (got {type(source).__name__})"
                                + ("; decode bytes first, e.g. source.decode()" if isinstance(source, bytes) else ""))


def _name_expressions(names) -> tuple:
    """Name expressions as a tuple of strings: one string is one expression, not its characters
    (as _options)."""
    if isinstance(names, str):
        return (names,)
    try:
        out = tuple(names)
    except TypeError:
        raise ArgumentTypeError(f"name_expressions must be a string or a sequence of strings (got {names!r})") \
            from None
    bad = [n for n in out if not isinstance(n, str)]
    if bad:
        raise ArgumentTypeError(f"name_expressions must be strings (got {bad[0]!r})")
    return out


def _real_arch(arch) -> str:
    """A cubin's target: "sm_90" ("a" or "f" suffix kept); compute_XX (PTX only) and anything else
    raise ArgumentError."""
    if isinstance(arch, str) and arch.startswith("sm_") and arch[3:].rstrip("af").isdigit():
        return arch
    hint = "; a virtual 'compute_XX' target makes PTX: compile_ptx()" if str(arch).startswith("compute_") else ""
    raise ArgumentError(f"arch must be a real architecture like 'sm_90' (got {arch!r}){hint}")


def compile_to_cubin(source: str, options=(), name_expressions=(), arch: str | None = None,
                     source_name: str = "cudakit_kernel.cu") -> tuple[bytes, dict]:
    """Compile CUDA C++ with NVRTC -> (cubin bytes, {name expression: lowered name}).

    `arch` ("sm_90") defaults to the current device's; giving it compiles without a GPU.
    Served from the memory and disk caches when the same inputs were compiled before.
    """
    _check_source(source)
    arch = _real_arch(arch) if arch is not None else current_arch()
    opts = tuple(DEFAULT_OPTIONS) + _options(options) + (f"-arch={arch}",)
    names = _name_expressions(name_expressions)
    mkey = (source, opts, names, arch)   # (the memory cache: the headers checked by their stat alone)
    hit = _memory_cache.get(mkey)
    if hit is not None and _headers_unchanged(hit[0]):
        return hit[1]
    included = _included(source, opts)
    key = _cache_key(source, opts, names, arch, included)
    path = cache_dir() / "nvrtc" / f"{key}.bin"
    entry = _read_entry(path)
    if entry is None:
        entry = _nvrtc_compile(source, opts, names, source_name)
        _write_entry(path, *entry)
        log.debug("compiled %s for %s (%d bytes), cached as %s", source_name, arch, len(entry[0]), path)
    with _lock:
        _memory_cache[mkey] = (included, entry)
    return entry


def _nvrtc_compile(source, opts, names, source_name):
    nvrtc = _nvrtc()
    prog = nvrtc.createProgram(source, source_name, [], [])
    try:
        for ne in names:
            nvrtc.addNameExpression(prog, ne)
        try:
            nvrtc.compileProgram(prog, list(opts))
        except nvrtc.NVRTCError:
            raise CompileError(source_name, opts, nvrtc.getProgramLog(prog)) from None
        return nvrtc.getCUBIN(prog), {ne: nvrtc.getLoweredName(prog, ne) for ne in names}
    finally:
        nvrtc.destroyProgram(prog)


class Module:
    """A compiled binary, loaded lazily on each device that launches from it. pdl: every kernel of
    it waits for the previous kernel first thing (CK_PDL_WAIT), so each is marked for programmatic
    dependent launch where runtime.pdl.supported."""

    def __init__(self, binary: bytes, mapping: dict | None = None, name: str = "module", pdl: bool = False):
        self.binary, self.mapping, self.name, self.pdl = binary, dict(mapping or {}), name, pdl
        self._loaded: dict[int, object] = {}

    def _on(self, dev: int):
        m = self._loaded.get(dev)
        if m is None:
            cp = _cupy.cupy()
            m = cp.cuda.function.Module()
            try:
                m.load(self.binary)
            except cp.cuda.driver.CUDADriverError as e:
                raise CompileError(self.name, (), f"the driver could not load the binary: {e}") from None
            self._loaded[dev] = m
        return m

    def get_kernel(self, name: str) -> "Kernel":
        """The kernel `name`: a name expression given at compile time, or a symbol name."""
        return Kernel(self, self.mapping.get(name, name), display_name=name)


class Kernel:
    """A launchable CUDA kernel.

    `k.launch(grid, block, args, shared_mem=0, stream=None)` or `k[grid, block](*args)`
    (also `k[grid, block, shared_mem]` and `k[grid, block, shared_mem, stream]`). Arrays are
    passed as pointers; give scalars as NumPy scalars of the kernel's parameter type (a Python
    int is passed as int64 and a float as double). Launches on the current CuPy stream and device.
    """

    def __init__(self, module: Module, symbol: str, display_name: str | None = None):
        self.module, self.symbol = module, symbol
        self.name = display_name or symbol
        self._funcs: dict[int, object] = {}
        self._limits: dict[int, tuple[int, int]] = {}

    def _function(self, dev: int):
        f = self._funcs.get(dev)
        if f is None:
            cp = _cupy.cupy()
            try:
                f = self.module._on(dev).get_function(self.symbol)
            except cp.cuda.driver.CUDADriverError as e:
                raise LaunchError(f"no kernel named {self.symbol!r} in {self.module.name}: {e}",
                                  self.name) from None
            self._funcs[dev] = f
            self._limits[dev] = (self._attr(f, "max_threads_per_block"),
                                 self._attr(f, "max_dynamic_shared_memory"))
            if self.module.pdl:
                from . import pdl
                if pdl.supported(dev):
                    pdl.register(f.ptr)
        return f

    @staticmethod
    def _attr(f, name):
        cp = _cupy.loaded_cupy()
        return int(cp.cuda.driver.funcGetAttribute(_ATTRS[name], f.ptr))

    @property
    def attributes(self) -> dict:
        """registers, shared_memory (static, bytes), local_memory (bytes per thread),
        max_threads_per_block, max_dynamic_shared_memory, ptx_version, binary_version,
        const_memory — on the current device."""
        f = self._function(_cupy.cupy().cuda.runtime.getDevice())
        return {k: self._attr(f, k) for k in _ATTRS}

    def set_max_dynamic_shared_memory(self, nbytes: int) -> None:
        """Allow launches with up to `nbytes` of dynamic shared memory (needed above 48 KiB)."""
        cp = _cupy.cupy()
        dev = cp.cuda.runtime.getDevice()
        f = self._function(dev)
        cp.cuda.driver.funcSetAttribute(f.ptr, _ATTRS["max_dynamic_shared_memory"], int(nbytes))
        self._limits[dev] = (self._limits[dev][0], int(nbytes))

    def allow_dynamic_shared_memory(self, nbytes: int, dev: int) -> None:
        """set_max_dynamic_shared_memory(nbytes) on dev (the current device) where nbytes passes the
        kernel's limit there: by default 48 KiB less its static shared memory, so a kernel with both
        may need it under 48 KiB of dynamic memory too (the occupancy query answers 0 blocks for what
        the limit refuses, and the launch fails)."""
        self._function(dev)
        if nbytes > self._limits[dev][1]:
            self.set_max_dynamic_shared_memory(nbytes)

    def occupancy_block_size(self, shared_mem: int = 0) -> int:
        """The block size that maximises occupancy for this kernel on the current device."""
        cp = _cupy.cupy()
        f = self._function(cp.cuda.runtime.getDevice())
        return int(cp.cuda.driver.occupancyMaxPotentialBlockSize(f.ptr, shared_mem, 0)[1])

    def launch(self, grid, block, args, shared_mem: int = 0, stream=None) -> None:
        """Launch on `stream` (default: the current CuPy stream) of the current device."""
        cp = _cupy.cupy()
        dev = cp.cuda.runtime.getDevice()
        f = self._funcs.get(dev) or self._function(dev)
        g, b = _launch.dims3(grid, block)
        max_threads, max_shared = self._limits[dev]
        shared_mem = _launch.validate(g, b, shared_mem, max_threads, max_shared, self.name)
        _launch_function(self.name, f, g, b, args, shared_mem, stream)

    def __getitem__(self, cfg):
        if isinstance(cfg, _launch.LaunchConfig):   # kernel[LaunchConfig(grid, block, shared_mem)]
            return lambda *args: self.launch(cfg.grid, cfg.block, args, cfg.shared_mem, None)
        if not isinstance(cfg, tuple) or not 2 <= len(cfg) <= 4:
            raise LaunchError("use kernel[grid, block], kernel[grid, block, shared_mem], "
                              "kernel[grid, block, shared_mem, stream] or kernel[LaunchConfig(...)]", self.name)
        grid, block, shared, stream = (tuple(cfg) + (0, None))[:4]
        return lambda *args: self.launch(grid, block, args, shared, stream)

    def __repr__(self):
        return f"<cudakit.Kernel {self.name}>"


def _launch_function(name, f, grid, block, args, shared_mem, stream) -> None:
    """The one launch path of NVRTC/cubin kernels: records the launch, attributes errors.

    With the profiler off, arguments of the common kinds (CuPy arrays, NumPy int32/int64/uint64/
    float32/float64 scalars) go through the native launcher (runtime/native.py): a few
    microseconds less host time per launch than CuPy's argument marshalling, which takes the rest."""
    cp = _cupy.loaded_cupy()
    if _recorder is not None:   # kernels/trace_plans.py is tracing this call
        _recorder.launch(name, f, grid, block, shared_mem, stream, args)
    _launch.recent_launches.append((name, grid, block))
    prof = profiler._active
    try:
        if prof is None:
            packed = _native_args(args) if _native_launch is not False else None
            if packed is None:
                f(grid, block, args, shared_mem, stream)
            else:
                g = grid if type(grid) is tuple and len(grid) == 3 else _launch._dim3(grid, "grid")
                b = block if type(block) is tuple and len(block) == 3 else _launch._dim3(block, "block")
                s = stream.ptr if stream is not None else cp.cuda.get_current_stream().ptr
                r = _native_launch(f.ptr, g[0], g[1], g[2], b[0], b[1], b[2], shared_mem, s, packed[0], *packed[1])
                if r:
                    raise cp.cuda.driver.CUDADriverError(r)
        else:
            prof._record_launch(name, grid, block, stream, lambda: f(grid, block, args, shared_mem, stream))
        if _launch._blocking or (_launch._blocking is None and _launch.launch_blocking()):
            (stream or cp.cuda.get_current_stream()).synchronize()
    except (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError) as e:
        raise LaunchError(str(e), name, grid, block) from None
    except TypeError as e:  # CuPy's argument marshalling: an unsupported argument type
        raise LaunchError(f"bad kernel argument: {e}", name, grid, block) from None


_native_launch = None   # the native launch function; False where it is unavailable
_recorder = None        # a kernels.trace_plans recorder while a call is traced
_ARG_CODES: dict = {}   # type -> parameter code for the native launcher ("A": a CuPy array)
_SIGNATURES: dict = {}  # tuple of argument types -> (codes, positions of the arrays), or None


def _native_args(args):
    """(codes, values) for the native launcher, or None when an argument is of another kind
    (or the native launcher is unavailable). NumPy scalars pass as they are (the launcher reads
    them through __index__ / __float__); arrays as their device pointers. The codes of each tuple
    of argument types are worked out once."""
    global _native_launch
    if _native_launch is None:
        from . import native
        import numpy as np
        _native_launch = native.launcher() or False
        if _native_launch is False:
            return None
        _ARG_CODES.update({_cupy.loaded_cupy().ndarray: "A", np.int64: "Q", np.uint64: "Q", np.int32: "i",
                           np.uint32: "i", np.float32: "f", np.float64: "d"})
    types = tuple(map(type, args))
    sig = _SIGNATURES.get(types, False)
    if sig is False:
        codes = [_ARG_CODES.get(t) for t in types]
        sig = None if None in codes else ("".join("Q" if c == "A" else c for c in codes).encode(),
                                          tuple(i for i, c in enumerate(codes) if c == "A"))
        if len(_SIGNATURES) < 4096:
            _SIGNATURES[types] = sig
    if sig is None:
        return None
    vals = list(args)
    for i in sig[1]:
        vals[i] = vals[i].data.ptr
    return sig[0], vals


def compile_module(source: str, options=(), name_expressions=(), source_name: str = "cudakit_kernel.cu",
                   arch: str | None = None, pdl: bool = False) -> Module:
    """Compile CUDA C++ source with NVRTC into a Module (see compile()); pdl: every kernel of the
    source calls CK_PDL_WAIT() first (Module)."""
    binary, mapping = compile_to_cubin(source, options, name_expressions, arch, source_name)
    return Module(binary, mapping, source_name, pdl)


def compile(source: str, name: str, options=(), name_expressions=(), source_name: str | None = None,
            arch: str | None = None) -> Kernel:
    """Compile CUDA C++ `source` with NVRTC for the current device (or for `arch`, e.g. "sm_90",
    which needs no GPU: a syntax error is reported on any machine with NVRTC) and return kernel
    `name`.

    `name` is an `extern "C"` symbol, or one of `name_expressions` for templates
    (e.g. name="scale<float>", name_expressions=["scale<float>", "scale<double>"]).
    `options` are NVRTC options ("-use_fast_math", "-DBLOCK=256"). Raises CompileError with the
    compiler log on failure.
    """
    _check_source(source)
    if not isinstance(name, str):
        raise ArgumentTypeError(f"name must be the kernel's symbol or name expression, a str (got {name!r})")
    names = _name_expressions(name_expressions)
    if "<" in name and name not in names:
        names += (name,)
    return compile_module(source, options, names, source_name or f"{name.split('<')[0]}.cu",
                          arch).get_kernel(name)


def _virtual_arch(arch: str) -> str:
    """"sm_90" / "compute_90" (an "a" suffix kept) -> "compute_90": PTX targets a virtual architecture."""
    for prefix in ("sm_", "compute_"):
        if isinstance(arch, str) and arch.startswith(prefix) and arch[len(prefix):].rstrip("af").isdigit():
            return "compute_" + arch[len(prefix):]
    raise ArgumentError(f"arch must be like 'sm_90' or 'compute_90' (got {arch!r})")


def _nvcc_path() -> str:
    import shutil
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    found = shutil.which("nvcc", path=os.path.join(home, "bin") if home else None) or shutil.which("nvcc")
    if not found:
        from ..errors import BackendUnavailableError
        raise BackendUnavailableError("nvcc was not found on the PATH (nor under CUDA_HOME/bin); install the "
                                      "CUDA toolkit, or compile with compiler='nvrtc'")
    return found


def _nvcc_ptx(source: str, opts: tuple, source_name: str) -> str:
    import subprocess
    nvcc = _nvcc_path()
    with tempfile.TemporaryDirectory(prefix="cudakit-ptx-") as tmp:
        src, out = Path(tmp) / Path(source_name).name, Path(tmp) / "out.ptx"
        src.write_text(source)
        r = subprocess.run([nvcc, "-ptx", "-x", "cu", *opts, "-o", str(out), str(src)],   # ("-x cu": CUDA
                           capture_output=True, text=True)                                # whatever the suffix)
        if r.returncode != 0:
            raise CompileError(source_name, opts, r.stderr or r.stdout)
        return out.read_text()


def _nvrtc_ptx(source: str, opts: tuple, source_name: str) -> str:
    nvrtc = _nvrtc()
    prog = nvrtc.createProgram(source, source_name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, list(opts))
        except nvrtc.NVRTCError:
            raise CompileError(source_name, opts, nvrtc.getProgramLog(prog)) from None
        return nvrtc.getPTX(prog).decode()
    finally:
        nvrtc.destroyProgram(prog)


def compile_ptx(source: str, path=None, options=(), arch: str | None = None,
                source_name: str = "cudakit_kernel.cu", compiler: str = "nvrtc") -> str:
    """Compile CUDA C++ `source` to PTX text, for `load_module(path)` or any loader of .ptx files.

    path: when given, the PTX is also written there (atomically: a temporary file moved into place).
    arch: "sm_90" or "compute_90" (the PTX targets the virtual architecture, which the driver
        compiles for the GPU it loads on, that one or newer); default: the current device's.
    compiler: "nvrtc" (the NVRTC library CuPy ships, as compile() uses) or "nvcc" (the CUDA
        toolkit's nvcc, found under CUDA_HOME/bin or on the PATH): either works without a GPU when
        `arch` is given. Load the PTX with a driver at least as new as the compiler.
    Kernels are found in the PTX by symbol name: declare them `extern "C"` (or pass their mangled
    names). Raises CompileError with the compiler's log, BackendUnavailableError when the compiler
    is missing, ValueError for another `compiler` or a malformed `arch`.
    """
    if compiler not in ("nvrtc", "nvcc"):
        raise ArgumentError(f"compiler must be 'nvrtc' or 'nvcc' (got {compiler!r})")
    if arch is None:
        try:
            arch = current_arch()
        except BackendUnavailableError as e:
            raise BackendUnavailableError(f"compile_ptx: no usable GPU to take the architecture from ({e}); pass "
                                          f"arch, e.g. arch='sm_90', to compile without one") from None
    opts = tuple(DEFAULT_OPTIONS) + _options(options) + (f"-arch={_virtual_arch(arch)}",)
    ptx = (_nvrtc_ptx if compiler == "nvrtc" else _nvcc_ptx)(source, opts, source_name)
    if path is not None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        _cache.write_atomic(p, ptx.encode(), suffix=".ptx")   # (path a folder, say: nothing left behind)
    return ptx


_file_modules: dict[tuple, Module] = {}


_FATBIN_MAGIC = b"\x50\xed\x55\xba"   # 0xBA55ED50, little-endian


def _check_binary(p: Path, data: bytes) -> None:
    """Raise CompileError naming the file when its contents are not what its suffix says: a
    .cubin is an ELF image, a .fatbin starts with the fatbin magic, a .ptx is text with .version
    and .target directives. (The driver's own check follows on the GPU, at the first load.)"""
    kind = p.suffix.lower()
    why = None
    if kind == ".cubin" and not data.startswith(b"\x7fELF"):
        why = "not a cubin (no ELF header)"
    elif kind == ".fatbin" and not data.startswith(_FATBIN_MAGIC):
        why = "not a fatbin (no fatbin magic 0xBA55ED50)"
    elif kind == ".ptx":
        head = data[:65536]
        if b"\0" in head.rstrip(b"\0") or b".version" not in head or b".target" not in head:
            why = "not PTX text (no .version and .target directives)"
    elif kind not in (".cubin", ".fatbin", ".ptx"):
        why = f"unknown kernel file type {p.suffix!r}; use .ptx, .cubin or .fatbin"
    if why:
        raise CompileError(str(p), (), f"{p}: {why}")


def load_module(path) -> Module:
    """Load a .ptx, .cubin or .fatbin file as a Module; `load_module(p).get_kernel("name")`.

    Raises ArgumentTypeError when path is not a path, FileNotFoundError naming it when it does not
    exist, and CompileError naming it when its contents are not a cubin / fatbin / PTX (checked
    here, without a GPU; the driver checks again when a GPU first loads it).
    """
    if not isinstance(path, (str, os.PathLike)):
        from ..errors import ArgumentTypeError
        raise ArgumentTypeError(f"load_module: path must be a str or os.PathLike naming a .ptx, .cubin or "
                                f".fatbin file (got {type(path).__name__} {path!r})")
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(2, f"kernel file not found: {p.resolve()}", str(p))
    st = p.stat()
    key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    mod = _file_modules.get(key)
    if mod is None:
        data = p.read_bytes()
        _check_binary(p, data)
        if p.suffix == ".ptx" and not data.endswith(b"\0"):
            data += b"\0"
        mod = Module(data, name=str(p))
        if _cupy.probe()[0]:   # on a GPU the driver checks it now, not at the first launch
            mod._on(_cupy.cupy().cuda.runtime.getDevice())
        _file_modules[key] = mod
    return mod


def cache_info() -> dict:
    """{'path', 'entries', 'bytes', 'marked'} of the on-disk kernel cache (compiled kernels and the
    native module; the tuned shapes under tune/ are not counted). See runtime/cache.py."""
    return _cache.info()


def cache_clear() -> int:
    """Delete the compiled kernels on disk (cudakit's own entries of a root carrying cudakit's
    marker; CacheError naming the root otherwise, nothing deleted) and in memory; returns the
    number of files removed."""
    _memory_cache.clear()
    return _cache.clear()
