"""Triton kernels on cudakit's runtime: Triton compiles, cudakit launches.

Triton (the `triton` extra) is used only as a compiler: a `@triton.jit` function is specialised
on its arguments (dtypes, 16-byte divisibility of pointers and integers, constexpr values), compiled
for the current device's compute capability to a cubin plus metadata, cached in memory per device
and on disk under CUDAKIT_CACHE_DIR/triton, and launched through CuPy's driver binding on the
current CuPy stream. Triton's own launcher is never used, so PyTorch is never imported and any
stream works.

    @cudakit.triton_kernel
    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr): ...

    add[(cudakit.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    add[lambda meta: (cudakit.cdiv(n, meta["BLOCK"]),)](x, y, out, n, BLOCK=1024)

Programmatic dependent launch: a kernel with a constexpr parameter named PDL, compiled with it
True, is launched with programmatic stream serialization where runtime.pdl.supported (its Module
registers it, as cudakit's CUDA C++ kernels), its launch overlapping the previous kernel's tail;
such a kernel must wait (gdc_wait) before it touches global memory. Left None, PDL is set at
compile time to pdl_supported(device) (CUDAKIT_PDL, compute capability 9.0+, a Triton with
gdc_wait, the native launcher with cuLaunchKernelEx).

Kernel ABI (Triton 3.6 to 3.9): the non-constexpr arguments in order, then two pointers to
global and profile scratch space (null unless the metadata asks for scratch); block = 32 * num_warps;
dynamic shared memory = metadata.shared.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import numbers
import threading
from dataclasses import dataclass, field

import numpy as np

from .. import __version__, profiler
from ..errors import ArgumentError, ArgumentTypeError, BackendUnavailableError, LaunchError
from . import _cupy, compiler, launch as _launch

from .tuned import TunedTable
log = logging.getLogger(__name__)
stats = {"compiles": 0, "disk_hits": 0, "tunes": 0}   # counted per process (tests, `cudakit info`)

_DTYPE_CODE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
               "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
               "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "i1"}

_MAX_X = 2**31 - 1
_I32, _I32_DIV, _F32 = ("i32", False), ("i32", True), ("fp32", False)
_ready = False
_codes: dict = {}
_ptr_codes: dict = {}   # dtype -> "*fp32" etc.


_get_device = None   # cupy.cuda.runtime.getDevice


_tk_bind = None      # the native module's tk_bind (kernel[grid] launches from plans in C)
_gate = None         # the native module's fast_gate


def _first_use():
    """Resolve CuPy once; later calls read module globals."""
    global _ready, _get_device, _tk_bind, _gate
    cp = _cupy.cupy()
    _get_device = cp.cuda.runtime.getDevice
    from . import native
    mod = native.fast_paths()
    if mod is not None:
        _tk_bind, _gate = mod.tk_bind, mod.fast_gate
    _ready = True
    return cp


def plan_key(dev: int, codes) -> bytes:
    """The key of a TritonKernel's native launch plans: the device, then per runtime argument the
    uint16 code that _native.c's tk_bind computes (array 1024 + 2 * dtype.num + 16-byte aligned,
    int32 1, int32 multiple of 16 2, float 3)."""
    return bytes([dev]) + b"".join(c.to_bytes(2, "little") for c in codes)


def _dtype_codes() -> dict:
    """{numpy dtype: Triton pointer element code}; dtype objects hash fast, dtype.name does not."""
    if not _codes:
        import ml_dtypes
        for name, code in _DTYPE_CODE.items():
            dt = np.dtype(ml_dtypes.bfloat16 if name == "bfloat16" else name)
            _codes[dt], _ptr_codes[dt] = code, "*" + code
    return _codes


def _triton():
    try:
        import triton
    except ImportError as e:
        raise BackendUnavailableError(
            f"Triton is not installed ({e}); install the extra: pip install 'cudakit[triton]'") from None
    return triton


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for grid sizes."""
    return -(-a // b)


@dataclass(frozen=True)
class Config:
    """One autotuning candidate: constexpr values plus launch options."""
    kwargs: dict = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self):
        if not isinstance(self.kwargs, dict):
            raise ArgumentTypeError(f"kwargs must be a dict of constexpr values (got {self.kwargs!r})")
        for name in ("num_warps", "num_stages"):   # (a bool or a float compared equal to an int: refused)
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise ArgumentTypeError(f"{name} must be an int (got {type(v).__name__} {v!r})")
        if self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ArgumentError(f"num_warps must be a power of two in [1, 32] (got {self.num_warps})")
        if self.num_stages < 1:
            raise ArgumentError(f"num_stages must be >= 1 (got {self.num_stages})")

    def key(self) -> str:
        return json.dumps([sorted(self.kwargs.items()), self.num_warps, self.num_stages], default=str)


class _Compiled:
    """One specialisation: the cubin as a cudakit Module, its metadata, and a launcher."""

    __slots__ = ("kernel", "meta", "name", "types", "block", "block3", "shared", "n_params", "needs_scratch",
                 "half_args", "codes", "launchers", "pdl")

    def __init__(self, binary: bytes, meta: dict, types: list[str], pdl: bool = False):
        self.meta, self.name, self.pdl = meta, meta["name"], pdl
        # (a PDL kernel's Module registers its function for PDL launches where runtime.pdl.supported)
        self.kernel = compiler.Module(binary, {}, f"triton:{meta['name']}", pdl).get_kernel(meta["name"])
        self.types = types                                  # Triton type of each runtime argument
        self.half_args = [i for i, t in enumerate(types) if t in ("fp16", "bf16")]
        self.block = 32 * meta["num_warps"]
        self.block3 = (self.block, 1, 1)
        self.shared = int(meta["shared"])
        self.needs_scratch = bool(meta.get("global_scratch_size") or meta.get("profile_scratch_size"))
        _launch.validate((1, 1, 1), self.block3, 0, kernel=meta["name"])
        self.n_params = len(types) + 2                      # + global and profile scratch pointers
        self.codes = "".join(_param_code(t) for t in types) + "QQ"
        self.launchers: dict = {}                           # device -> FastLauncher
        if meta.get("num_ctas", 1) != 1 or meta.get("launch_cooperative_grid") or meta.get("launch_pdl"):
            raise BackendUnavailableError(
                f"{meta['name']}: clusters (num_ctas > 1), cooperative grids and PDL launches are not supported")

    def function(self, dev: int):
        f = self.kernel._funcs.get(dev)
        if f is None:
            from .device import get_device_info
            limit = get_device_info(dev).max_shared_memory_per_block_optin
            if self.shared > limit:
                raise LaunchError(f"this configuration needs {self.shared} bytes of shared memory; the device "
                                  f"allows at most {limit} per block", self.meta["name"])
            f = self.kernel._function(dev)
            if self.shared > 48 * 1024:
                self.kernel.set_max_dynamic_shared_memory(self.shared)
        return f

    def launcher(self, dev: int, f):
        from .fastlaunch import FastLauncher
        fl = self.launchers[dev] = FastLauncher(f.ptr, self.codes)
        return fl


@functools.cache
def _has_gdc() -> bool:
    """Whether this Triton has grid dependency control (gdc_wait, gdc_launch_dependents)."""
    try:
        from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: F401
    except ImportError:
        return False
    return True


def pdl_supported(dev: int | None = None) -> bool:
    """Whether to compile kernels with their PDL constexpr set for device dev (default: the
    current one): runtime.pdl.supported (CUDAKIT_PDL, compute capability 9.0 or later, the native
    launcher with cuLaunchKernelEx) and a Triton with gdc_wait."""
    from . import pdl
    return _has_gdc() and pdl.supported(dev)


def _param_code(t: str) -> str:
    """The native launcher's code for a Triton parameter type: pointers and 64-bit integers in 8
    bytes, 16-bit floats as their bit pattern; narrower integers go in a 4-byte slot, of which the
    driver reads the low bytes (little-endian)."""
    if t[0] == "*" or t in ("i64", "u64"):
        return "Q"
    return {"fp32": "f", "fp64": "d", "fp16": "h", "bf16": "h", "i16": "h", "u16": "h"}.get(t, "i")


def _scalar_bits(t: str, v) -> int | float:
    if t in ("fp16", "bf16"):  # 16-bit float scalars travel as their bit pattern
        if t == "bf16":
            import ml_dtypes
            return int(np.array(v, dtype=ml_dtypes.bfloat16).view(np.uint16))
        return int(np.array(v, dtype=np.float16).view(np.uint16))
    return v


class TritonKernel:
    """A @triton.jit function launched by cudakit: `kernel[grid](*args, CONST=..., num_warps=4)`."""

    def __init__(self, fn, num_warps: int = 4, num_stages: int = 3, do_not_specialize=()):
        triton = _triton()
        if not isinstance(fn, triton.runtime.JITFunction):
            fn = triton.jit(fn)
        self.fn, self.name = fn, fn.__name__
        self.params = list(fn.params)
        self.defaults = Config({}, num_warps, num_stages)
        self.do_not_specialize = set(do_not_specialize)
        self._rt_names = [p.name for p in self.params if not p.is_constexpr]
        # per runtime argument: an int whose 16-divisibility is not compiled in (a per-call seed:
        # one compiled kernel for every value, so a traced plan may substitute it)
        self._nospec = [n in self.do_not_specialize for n in self._rt_names]
        self._const_names = [p.name for p in self.params if p.is_constexpr]
        self._const_set = set(self._const_names)
        self._const_defaults = {p.name: p.default for p in self.params if p.is_constexpr and p.has_default}
        self._n_rt = len(self._rt_names)
        self._rt_first = all(not p.is_constexpr for p in self.params[:self._n_rt])
        self._defaults_complete = len(self._const_defaults) == len(self._const_names)
        self._cache: dict = {}
        self._plans: dict = {}   # plan_key -> native launch plan (see _plan)
        self._lock = threading.Lock()

    # -- binding and specialisation ---------------------------------------------------------
    def bind(self, args: tuple, kwargs: dict) -> tuple[list, dict, dict]:
        """Split a call into runtime arguments, constexpr values and options; raise
        ArgumentTypeError (a TypeError) on a wrong argument count or an unknown keyword, before
        anything is compiled or launched."""
        opts = {"num_warps": kwargs.pop("num_warps", self.defaults.num_warps),
                "num_stages": kwargs.pop("num_stages", self.defaults.num_stages)}
        if len(args) > len(self.params):
            raise ArgumentTypeError(f"{self.name}() takes {len(self.params)} arguments "
                                    f"({', '.join(p.name for p in self.params)}), got {len(args)}")
        values = {}
        for p, a in zip(self.params, args):
            values[p.name] = a
        for k, v in kwargs.items():
            if k in values:
                raise ArgumentTypeError(f"{self.name}() got multiple values for argument {k!r}")
            if k not in {p.name for p in self.params}:
                raise ArgumentTypeError(f"{self.name}() got an unexpected keyword argument {k!r}")
            values[k] = v
        runtime, consts = [], {}
        for p in self.params:
            if p.name not in values:
                if p.has_default:
                    values[p.name] = p.default
                else:
                    raise ArgumentTypeError(f"{self.name}() missing argument {p.name!r} "
                                            f"(parameters: {', '.join(q.name for q in self.params)})")
            if p.is_constexpr:
                consts[p.name] = values[p.name]
            else:
                runtime.append(values[p.name])
        return runtime, consts, opts

    def _arg_type(self, name: str, a) -> tuple[str, bool, object]:
        """(triton type, 16-byte aligned/divisible, value to pass) of one runtime argument."""
        cp = _cupy.loaded_cupy()
        if cp is not None and isinstance(a, cp.ndarray):
            code = _DTYPE_CODE.get(a.dtype.name)
            if code is None:
                raise ArgumentTypeError(f"{self.name}: argument {name!r} has unsupported dtype {a.dtype}")
            ptr = a.data.ptr
            return "*" + code, ptr % 16 == 0, ptr
        cai = getattr(a, "__cuda_array_interface__", None)
        if cai is not None:
            code = _DTYPE_CODE.get(np.dtype(cai["typestr"]).name)
            if code is None:
                raise ArgumentTypeError(f"{self.name}: argument {name!r} has unsupported dtype {cai['typestr']}")
            ptr = cai["data"][0]
            return "*" + code, ptr % 16 == 0, ptr
        if isinstance(a, (bool, np.bool_)):
            return "i1", False, int(a)
        if isinstance(a, (int, np.integer)):
            v = int(a)
            t = "i32" if -2**31 <= v < 2**31 else "i64" if -2**63 <= v < 2**63 else "u64"
            return t, v % 16 == 0 and name not in self.do_not_specialize, v
        if isinstance(a, (float, np.floating)):
            return ("fp64" if isinstance(a, np.float64) else "fp32"), False, float(a)
        if isinstance(a, np.ndarray):
            raise ArgumentTypeError(f"{self.name}: argument {name!r} is a host (NumPy) array; copy it to "
                                    f"the device with cudakit.to_device() first")
        raise ArgumentTypeError(f"{self.name}: argument {name!r} of type {type(a).__name__} is not supported")

    def _compile(self, sig: tuple, consts: dict, opts: dict, dev: int) -> _Compiled:
        triton = _triton()
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from .device import get_device_info
        major, minor = get_device_info(dev).compute_capability
        arch = major * 10 + minor
        if "PDL" in self._const_set and consts.get("PDL") is None:   # (None: as this device and setting allow)
            consts = dict(consts, PDL=pdl_supported(dev))
        pdl = bool(consts.get("PDL")) and "PDL" in self._const_set
        if pdl and major < 9:
            raise ArgumentError(f"{self.name}: PDL={consts['PDL']!r} needs compute capability 9.0 or later "
                                f"(got {major}.{minor}); leave it None to follow pdl_supported()")
        runtime_names = [p.name for p in self.params if not p.is_constexpr]
        signature, attrs, types = {}, {}, []
        rt = iter(zip(runtime_names, sig))
        for i, p in enumerate(self.params):
            if p.is_constexpr:
                signature[p.name] = "constexpr"
                continue
            _, (t, div) = next(rt)
            signature[p.name] = t
            types.append(t)
            if div:
                attrs[(i,)] = [["tt.divisibility", 16]]
        constexprs = {(i,): consts[p.name] for i, p in enumerate(self.params) if p.is_constexpr}
        key = hashlib.sha256(json.dumps(
            [triton.__version__, __version__, self.fn.cache_key, sorted(signature.items()),
             sorted((str(k), v) for k, v in attrs.items()), sorted((str(k), repr(v)) for k, v in constexprs.items()),
             sorted(opts.items()), arch]).encode()).hexdigest()
        path = compiler.cache_dir() / "triton" / f"{key}.bin"
        entry = compiler._read_entry(path)
        if entry is not None:
            stats["disk_hits"] += 1
            binary, meta = entry
        else:
            src = ASTSource(self.fn, signature, constexprs, attrs)
            ck = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=dict(opts))
            md = ck.metadata
            meta = {k: getattr(md, k) for k in ("name", "shared", "num_warps", "num_ctas", "global_scratch_size",
                                                "global_scratch_align", "profile_scratch_size", "profile_scratch_align",
                                                "launch_cooperative_grid", "launch_pdl") if hasattr(md, k)}
            binary = ck.asm["cubin"]
            compiler._write_entry(path, binary, meta)
            stats["compiles"] += 1
            log.debug("triton: compiled %s %s for sm_%d", self.name, signature, arch)
        return _Compiled(binary, meta, types, pdl)

    def specialized(self, num_warps: int | None = None, num_stages: int | None = None, **consts) -> "TritonKernel":
        """A kernel of the same function whose constexprs default to `consts` (and whose launch
        options default to these): called with runtime arguments only, it launches from the native
        plans (no per-call binding in Python). Shares this kernel's compile cache."""
        unknown = sorted(set(consts) - self._const_set)
        if unknown:
            raise ArgumentTypeError(f"{self.name}() has no constexpr parameter {', '.join(unknown)}")
        k = TritonKernel.__new__(TritonKernel)
        k.__dict__.update(self.__dict__)
        k.defaults = Config({}, self.defaults.num_warps if num_warps is None else num_warps,
                            self.defaults.num_stages if num_stages is None else num_stages)
        k._const_defaults = {**self._const_defaults, **consts}
        k._defaults_complete = len(k._const_defaults) == len(self._const_names)
        k._plans = {}   # a plan's key does not name the constexprs: one table per specialisation
        return k

    # -- launching --------------------------------------------------------------------------
    def __getitem__(self, grid):
        if _tk_bind is not None:  # a C callable: launches from self._plans, else calls run()
            return _tk_bind(self._plans, grid, self.run)
        return lambda *args, **kwargs: self.run(grid, args, kwargs)

    def _fast_bind(self, args, kwargs):
        """bind() for the common call: every runtime argument positional, constexprs by keyword.
        None when the call has another form (the general bind() handles it)."""
        if len(args) != self._n_rt or not self._rt_first:
            return None
        nw, ns = self.defaults.num_warps, self.defaults.num_stages
        if not kwargs:  # every constexpr at its default: nothing to copy or check per call
            return (args, self._const_defaults, nw, ns) if self._defaults_complete else None
        consts = dict(self._const_defaults)
        for k, v in kwargs.items():
            if k in self._const_set:
                consts[k] = v
            elif k == "num_warps":
                nw = v
            elif k == "num_stages":
                ns = v
            else:
                return None
        if len(consts) != len(self._const_names):
            return None
        return args, consts, nw, ns

    def run(self, grid, args: tuple, kwargs: dict, stream=None) -> None:
        """Launch on `stream` (default: the current CuPy stream) of the current device."""
        cp = _cupy.loaded_cupy() if _ready else _first_use()
        b = self._fast_bind(args, kwargs)
        if b is None:
            runtime, consts, opts = self.bind(args, dict(kwargs))
            nw, ns = opts["num_warps"], opts["num_stages"]
        else:
            runtime, consts, nw, ns = b
        nd = cp.ndarray
        codes = _ptr_codes or _dtype_codes() and _ptr_codes
        sig, vals, pcodes = [], [], []  # pcodes: the plan-key code of each argument (plan_key)
        for name, a, nospec in zip(self._rt_names, runtime, self._nospec):
            t = type(a)
            if t is nd and a.dtype in codes:
                ptr = a.data.ptr
                sig.append((codes[a.dtype], not ptr & 15))
                vals.append(ptr)
                num = a.dtype.num  # _native.c declines dtype numbers past 20000 (uint16 key codes)
                pcodes.append(1024 + 2 * num + (not ptr & 15) if num <= 20000 else None)
            elif t is int and -0x80000000 <= a <= 0x7FFFFFFF:
                # a do_not_specialize int compiles as not divisible whatever its value; its plan-key
                # code still follows the value (the C binder computes it so), both codes one function
                sig.append(_I32_DIV if not (a & 15 or nospec) else _I32)
                vals.append(a)
                pcodes.append(1 if a & 15 else 2)
            elif t is float:
                sig.append(_F32)
                vals.append(a)
                pcodes.append(3)
            else:
                t, div, v = self._arg_type(name, a)
                sig.append((t, div))
                vals.append(v)
                pcodes.append(None)  # a kind the native plans do not cover
        dev = _get_device()
        ckey = (dev, tuple(sig), tuple([consts[n] for n in self._const_names]) if consts else (), nw, ns)
        comp = self._cache.get(ckey)
        if comp is None:
            with self._lock:
                comp = self._cache.get(ckey) or self._compile(sig, consts, {"num_warps": nw, "num_stages": ns}, dev)
                self._cache[ckey] = comp
        f = comp.kernel._funcs.get(dev) or comp.function(dev)
        if callable(grid):
            grid = grid({**consts, "num_warps": nw, "num_stages": ns})
        if type(grid) is tuple and 0 < len(grid) <= 3:
            g = grid if len(grid) == 3 else (grid + (1, 1))[:3]
        else:
            g = _launch._dim3(grid, "grid")
        if not (0 < g[0] <= _MAX_X and 0 < g[1] <= 65535 and 0 < g[2] <= 65535):
            _launch.validate(g, (comp.block, 1, 1), comp.shared, kernel=comp.meta["name"])
        s_ptr = stream.ptr if stream is not None else cp.cuda.get_current_stream().ptr
        fl = comp.launchers.get(dev) or comp.launcher(dev, f)
        for i in comp.half_args:  # 16-bit float scalars travel as their bit pattern
            vals[i] = _scalar_bits(comp.types[i], vals[i])
        scratch = None
        if comp.needs_scratch:
            scratch = (self._scratch(comp, "global_scratch_size", g), self._scratch(comp, "profile_scratch_size", g))
            vals.append(scratch[0].data.ptr if scratch[0] is not None else 0)
            vals.append(scratch[1].data.ptr if scratch[1] is not None else 0)
        else:
            vals += (0, 0)
        _launch.recent_launches.append((comp.name, g, comp.block3))
        try:
            if profiler._active is None:
                nl = fl._native
                rec = compiler._recorder
                if rec is not None and stream is None:   # kernels/trace_plans.py is tracing this call
                    rec.launch_packed(comp.name, fl.func, g, comp.block3, comp.shared, fl._bcodes, vals)
                elif rec is not None:
                    rec.other = True
                if nl is not None:  # the native launcher, called directly: one Python frame less
                    r = nl(fl.func, g[0], g[1], g[2], comp.block, 1, 1, comp.shared, s_ptr, fl._bcodes, *vals)
                    if r:
                        raise cp.cuda.driver.CUDADriverError(r)
                    if _gate is not None and b is not None and not kwargs:
                        self._plan(dev, pcodes, comp, fl, stream)
                else:
                    fl(g[0], comp.block, vals, s_ptr, (g[1], g[2]), comp.shared)
            else:
                profiler._active._record_launch(
                    comp.meta["name"], g, comp.block3, stream,
                    lambda: fl(g[0], comp.block, vals, s_ptr, (g[1], g[2]), comp.shared))
            if _launch._blocking or (_launch._blocking is None and _launch.launch_blocking()):
                (stream or cp.cuda.get_current_stream()).synchronize()
        except cp.cuda.driver.CUDADriverError as e:
            raise LaunchError(str(e), comp.meta["name"], g, comp.block3) from None

    def _plan(self, dev, pcodes, comp, fl, stream):
        """Record how this call launched, for kernel[grid] to repeat in C (tk_bind), when the next
        call with arguments of the same kinds would launch the same way: constexprs at their
        defaults, every argument an array, int32 or float, no 16-bit scalar or scratch, the
        current stream; and open the gate when launches are asynchronous."""
        if (stream is None and not comp.half_args and not comp.needs_scratch
                and None not in pcodes and 0 <= dev <= 255):
            self._plans[plan_key(dev, pcodes)] = (fl.func, comp.block, comp.shared, fl._bcodes, comp.name,
                                                   comp.block3)
            if not (_launch._blocking or (_launch._blocking is None and _launch.launch_blocking())):
                _gate(True)

    @staticmethod
    def _scratch(comp, which: str, g):
        """Scratch space the kernel asked for (bytes per program x programs), else None. It is
        freed to the pool when the launch returns, which is safe: the pool reuses it only for
        work queued after this kernel on the same stream."""
        size = comp.meta.get(which, 0)
        if not size:
            return None
        cp = _cupy.loaded_cupy()
        return cp.empty(size * g[0] * g[1] * g[2], cp.uint8)

    def __repr__(self):
        return f"<cudakit.TritonKernel {self.name}>"


def triton_kernel(fn=None, *, num_warps: int = 4, num_stages: int = 3, do_not_specialize=()):
    """Wrap a @triton.jit function (or a plain function, jitted here) so cudakit launches it.

    Usable bare (`@cudakit.triton_kernel`) or with defaults (`@cudakit.triton_kernel(num_warps=8)`).
    A `@triton.autotune(configs, key=...)` kernel comes back as cudakit's autotune of the same configs
    and key (its restore_value too; reset_to_zero and hooks raise ArgumentError, as cudakit's tuner
    has neither). Raises BackendUnavailableError naming the extra when Triton is not installed.
    """
    def wrap(f):
        tuned = _from_triton_autotuner(f, num_warps, num_stages, do_not_specialize)
        return tuned if tuned is not None else TritonKernel(f, num_warps, num_stages, do_not_specialize)
    return wrap(fn) if fn is not None else wrap


def _from_triton_autotuner(f, num_warps: int, num_stages: int, do_not_specialize):
    """cudakit's Autotuned for a triton.runtime.Autotuner `f` (its configs, key and restore_value over
    its JIT function); None for anything else."""
    triton = _triton()
    autotuner = getattr(triton.runtime, "Autotuner", None)
    if autotuner is None or not isinstance(f, autotuner):
        return None
    name = getattr(getattr(f, "fn", None), "__name__", "the kernel")
    unsupported = [what for what, v in (("reset_to_zero", getattr(f, "reset_to_zero", None)),
                                        ("pre_hook", getattr(f, "user_defined_pre_hook", False)),
                                        ("post_hook", getattr(f, "user_defined_post_hook", False))) if v]
    if unsupported:
        raise ArgumentError(f"{name}: @triton.autotune's {', '.join(unsupported)} has no counterpart in cudakit's "
                            f"autotune; zero or restore those arguments in the kernel's caller, or use "
                            f"cudakit.autotune(configs, key, restore=[...]) on the @triton.jit function")
    if not isinstance(f.fn, triton.runtime.JITFunction):
        raise ArgumentTypeError(f"{name}: @triton.autotune over {type(f.fn).__name__} (a @triton.heuristics?); "
                                f"cudakit launches @triton.autotune over a @triton.jit function")
    kernel = TritonKernel(f.fn, num_warps, num_stages, do_not_specialize)
    return Autotuned(kernel, list(f.configs), list(f.keys), list(getattr(f, "restore_value", None) or ()))


# ---- autotuning ------------------------------------------------------------------------------

class Autotuned:
    """A TritonKernel whose constexprs and launch options are chosen by timing `configs`."""

    def __init__(self, kernel: TritonKernel, configs: list, key: list, restore=(), warmup: int = 2, reps: int = 10):
        if not configs:
            raise ArgumentError("autotune needs at least one config")
        self.kernel = kernel if isinstance(kernel, TritonKernel) else TritonKernel(kernel)
        self.configs = [c if isinstance(c, Config) else Config(dict(c.kwargs), c.num_warps, c.num_stages)
                        for c in configs]
        names = {p.name for p in self.kernel.params}
        for k in list(key) + list(restore):
            if k not in names:
                raise ArgumentError(f"autotune: {k!r} is not a parameter of {self.kernel.name} ({', '.join(sorted(names))})")
        self.key, self.restore = list(key), list(restore)
        self.warmup, self.reps = warmup, reps
        n = len(self.configs)
        # the winners per key on disk, per (kernel source, configs, device name, Triton and cudakit versions)
        self.best = TunedTable(self.kernel.name, self._ident, valid=lambda v: isinstance(v, int) and 0 <= v < n,
                               what=f"{self.kernel.name}'s configs")

    def _key_values(self, args, kwargs) -> str:
        pos = {p.name: a for p, a in zip(self.kernel.params, args)}
        pos.update(kwargs)
        vals = []
        for k in self.key:
            v = pos.get(k)
            vals.append([list(v.shape), str(v.dtype)] if hasattr(v, "shape") else v)
        return json.dumps(vals, default=str)

    def _ident(self):
        from .device import get_device_info
        return [self.kernel.fn.cache_key, [c.key() for c in self.configs], get_device_info().name,
                _triton().__version__, __version__]

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(grid, args, kwargs)

    def run(self, grid, args, kwargs):
        from ..config import settings
        key = self._key_values(args, kwargs)
        idx = self.best.get(key)
        if idx is None:
            idx = self._tune(grid, args, kwargs) if settings().autotune else 0
            self.best.put(key, idx, save=settings().autotune)
        c = self.configs[idx]
        self.kernel.run(grid, args, {**kwargs, **c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages})

    def _tune(self, grid, args, kwargs) -> int:
        from ..config import settings
        cp = _cupy.cupy()
        stats["tunes"] += 1
        pos = {p.name: i for i, p in enumerate(self.kernel.params)}
        saved = {}
        for r in self.restore:
            v = args[pos[r]] if pos[r] < len(args) else kwargs[r]
            saved[r] = (v, v.copy())
        s = cp.cuda.get_current_stream()
        timings = []
        for i, c in enumerate(self.configs):
            call = {**kwargs, **c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}
            try:
                for _ in range(self.warmup):
                    self.kernel.run(grid, args, dict(call))
                samples = []
                for _ in range(self.reps):
                    a, b = cp.cuda.Event(), cp.cuda.Event()
                    a.record(s)
                    self.kernel.run(grid, args, dict(call))
                    b.record(s)
                    b.synchronize()
                    samples.append(cp.cuda.get_elapsed_time(a, b))
                t = float(np.median(samples))
            except LaunchError as e:  # e.g. more shared memory than the device has: not a candidate
                t = float("inf")
                log.info("autotune %s: config %s skipped: %s", self.kernel.name, c, e)
            for v, copy in saved.values():
                v[...] = copy
            timings.append(t)
            if settings().autotune_log:
                log.warning("autotune %s %s: config %s -> %.4f ms", self.kernel.name, self._key_values(args, kwargs), c, t)
        best = int(np.argmin(timings))
        if timings[best] == float("inf"):
            raise LaunchError(f"no autotuning config of {self.kernel.name} could launch", self.kernel.name)
        return best


def autotune(configs, key, restore=(), warmup: int = 2, reps: int = 10):
    """Decorator: choose among `configs` (Config or triton.Config) by timing them with CUDA events,
    once per distinct value of the `key` arguments (an array counts by shape and dtype).

    `restore` names in-place outputs that are copied back after every trial. The winner is stored
    on disk per (kernel source, configs, device name, Triton and cudakit versions), so a second
    process does not tune again. CUDAKIT_AUTOTUNE=0 uses the first config; CUDAKIT_AUTOTUNE_LOG=1
    logs every trial.
    """
    key = [key] if isinstance(key, str) else list(key)   # (one name, not its characters)
    restore = [restore] if isinstance(restore, str) else list(restore)

    def wrap(kernel):
        return Autotuned(kernel, list(configs), key, restore, warmup, reps)
    return wrap

