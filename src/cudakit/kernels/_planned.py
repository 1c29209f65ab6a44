"""The planned launches behind the host-time fast calls of softmax and layernorm/rmsnorm: a launch
worked out once per key (shape, dtype, device, alignment, ...) and replayed through the native
launcher, skipping the checks and CuPy's argument marshalling. Each caller declines (returns None,
so the checked path runs) where `ready()` is None: no native launcher, or the profiler or
CUDAKIT_LAUNCH_BLOCKING on, whose semantics live in the checked path."""
from __future__ import annotations

from .. import profiler
from ..errors import LaunchError
from ..runtime import _cupy, compiler, launch as _launch

MAX_PLANS = 1024
_env = None   # (native launcher, cupy.ndarray, getDevice, get_current_stream) once CUDA is up


def ready():
    """(launch, cupy.ndarray, getDevice, get_current_stream) when a planned launch may run now, else None."""
    global _env
    env = _env
    if env is None:
        from ..runtime import native
        cp = _cupy.loaded_cupy()
        env = _env = (native.launcher(), cp.ndarray, cp.cuda.runtime.getDevice, cp.cuda.get_current_stream)
    if env[0] is None or profiler._active is not None or _launch._blocking or (
            _launch._blocking is None and _launch.launch_blocking()):
        return None
    return env


def plan(cache: dict, key, make):
    """cache[key], made by make() on first use (None: this key takes the checked path)."""
    p = cache.get(key, False)
    if p is False:
        p = keep(cache, key, make())
    return p


def keep(cache: dict, key, value):
    """cache[key] = value, the cache emptied first when it holds MAX_PLANS; returns value."""
    if len(cache) >= MAX_PLANS:
        cache.clear()
    cache[key] = value
    return value


def output_and_plan(cache: dict, key: tuple, ndarray, shape: tuple, dtype, ptrs: int, make):
    """A new C-contiguous (shape, dtype) array and the plan cache[key + (aligned,)], made by
    make(aligned) on first use; aligned: the inputs' pointers OR-ed together (ptrs) and the new
    array's are all 16-byte aligned (the kernels then move 16-byte packs)."""
    out = ndarray(shape, dtype)
    aligned = not (ptrs | out.data.ptr) & 15
    return out, plan(cache, key + (aligned,), lambda: make(aligned))


def run(env, expr: str, fptr: int, grid: tuple, block: tuple, smem: int, codes: bytes, *values) -> None:
    """Launch the kernel at fptr on the current stream with `values` (one per code)."""
    _launch.recent_launches.append((expr, grid, block))
    rec = compiler._recorder
    if rec is not None:   # kernels/trace_plans.py is tracing this call
        rec.launch_packed(expr, fptr, grid, block, smem, codes, values)
    r = env[0](fptr, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, env[3]().ptr, codes, *values)
    if r:
        raise LaunchError(str(_cupy.loaded_cupy().cuda.driver.CUDADriverError(r)), expr, grid, block)
