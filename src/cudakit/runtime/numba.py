"""Numba CUDA kernels behind cudakit's Kernel interface (the `numba` extra: numba-cuda)."""
from __future__ import annotations

from .. import profiler
from ..errors import BackendUnavailableError, LaunchError
from . import _cupy, launch as _launch


def _numba_cuda():
    import numpy as np
    if not hasattr(np, "row_stack"):
        # numba-cuda <= 0.30 refers to numpy.row_stack (an alias of vstack removed in NumPy 2.5)
        # when it compiles its first kernel; without the alias no Numba kernel compiles at all.
        np.row_stack = np.vstack
    try:
        from numba import cuda
    except ImportError as e:
        raise BackendUnavailableError(
            f"Numba CUDA is not installed ({e}); install the extra: pip install 'cudakit[numba]'") from None
    return cuda


class NumbaKernel:
    """A Numba-compiled kernel with the same launch interface as Kernel.

    Arguments may be CuPy arrays (passed zero-copy through __cuda_array_interface__) or scalars.
    Launches on the current CuPy stream.
    """

    def __init__(self, dispatcher, name: str):
        self._disp, self.name = dispatcher, name

    def launch(self, grid, block, args, shared_mem: int = 0, stream=None) -> None:
        cuda = _numba_cuda()
        cp = _cupy.cupy()
        g, b = _launch._dim3(grid, "grid"), _launch._dim3(block, "block")
        _launch.validate(g, b, shared_mem, kernel=self.name)
        s = stream or cp.cuda.get_current_stream()
        nb_stream = cuda.external_stream(s.ptr) if s.ptr else cuda.default_stream()
        _launch.recent_launches.append((self.name, g, b))
        try:
            profiler.record_call(self.name, lambda: self._disp[g, b, nb_stream, shared_mem](*args), s, g, b)
        except Exception as e:
            if type(e).__module__.startswith("numba"):
                raise LaunchError(f"{type(e).__name__}: {e}", self.name, g, b) from None
            raise
        if _launch.launch_blocking():
            s.synchronize()

    def __getitem__(self, cfg):
        grid, block, shared, stream = (tuple(cfg) + (0, None))[:4]
        return lambda *args: self.launch(grid, block, args, shared, stream)

    @property
    def attributes(self) -> dict:
        """registers and shared_memory (static bytes) of the compiled specialisations."""
        regs = self._disp.get_regs_per_thread()
        smem = self._disp.get_shared_mem_per_block()
        return {"registers": regs, "shared_memory": smem}

    def __repr__(self):
        return f"<cudakit.NumbaKernel {self.name}>"


def numba_kernel(fn, signature=None, cache: bool = True, **options) -> NumbaKernel:
    """Compile Python function `fn` as a CUDA kernel with Numba: `numba_kernel(fn, "void(float32[:])")`.

    With a signature it compiles now (eagerly); without one, on first launch for the argument
    types. `cache=True` keeps the compiled code on disk (Numba's cache, next to the function's
    source file or under NUMBA_CACHE_DIR) when the function comes from a file.
    """
    cuda = _numba_cuda()
    _cupy.cupy()  # the same CUDA context as CuPy's; fail early and clearly without a GPU
    import inspect
    try:
        has_file = bool(inspect.getsourcefile(fn))
    except TypeError:
        has_file = False
    jit = cuda.jit(signature, cache=cache and has_file, **options) if signature else \
        cuda.jit(cache=cache and has_file, **options)
    return NumbaKernel(jit(fn), getattr(fn, "__name__", "numba_kernel"))
