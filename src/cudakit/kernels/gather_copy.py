"""One launch that copies many device arrays into one flat buffer (a data-parallel gradient
bucket), in place of one copy kernel per array.

    ck_gather_copy(dst, count, src[0..19], off[0..19], nbytes[0..19])

Every argument is a kernel parameter (no device table to upload, so nothing to order against the
previous launch and nothing a CUDA graph would refuse), 62 of them, within the native launcher's
64 (runtime/_native.c): `src[i]` the address of source i (16-byte aligned), `off[i]` its byte
offset in `dst` (16-byte aligned), `nbytes[i]` its size. Source i owns blocks from the prefix sum
of ceil(nbytes / CHUNK) over the sources before it (each block adds up at most 20 counts). Block b
copies CHUNK bytes of its source in 16-byte vectors; the last chunk of a source also copies the
source's tail bytes (nbytes % 16).

Memory traffic: 2 x sum(nbytes) (each byte read once, written once), so a launch runs at copy
bandwidth once its buffer is a few MB; its point is the host: one launch (~3 us through the
native launcher) where per-array copies cost one CuPy elementwise launch each (~10 us of host
time and a kernel on the GPU per array).
"""
from __future__ import annotations

import numpy as np

from .. import profiler
from ..errors import LaunchError
from ..runtime import _cupy, launch as _launch
from ..runtime import compiler as _compiler
from ..runtime.fastlaunch import FastLauncher

MAX_SOURCES = 20          # sources per launch: 2 + 3 * 20 parameters (the native launcher takes 64)
CHUNK = 16384             # bytes per block: 256 threads x 4 vectors of 16 bytes
THREADS = 256
ALIGN = 16                # the vector width: every source address and offset must be a multiple


def _source() -> str:
    n = MAX_SOURCES
    params = ", ".join([f"long long s{i}" for i in range(n)] + [f"long long o{i}" for i in range(n)]
                       + [f"long long n{i}" for i in range(n)])
    # source i's first block: the running sum of the blocks before it; the last source whose first
    # block is <= b owns block b (empty sources own none: the next one starts where they do)
    pick = "\n".join(f"  if ({i} < count && b >= first) {{ s = s{i}; o = o{i}; nb = n{i}; mine = first; }}\n"
                     f"  first += (n{i} + {CHUNK - 1}) / {CHUNK};" for i in range(n))
    return f"""
extern "C" __global__ void __launch_bounds__({THREADS})
ck_gather_copy(char* __restrict__ dst, int count, {params})
{{
  const long long b = blockIdx.x;
  long long s = 0, o = 0, nb = 0, mine = 0, first = 0;
{pick}
  const long long start = (b - mine) * {CHUNK};
  const long long end = start + {CHUNK} < nb ? start + {CHUNK} : nb;
  const long long vend = end & ~15LL;                         // whole 16-byte vectors of this chunk
  const uint4* __restrict__ src = reinterpret_cast<const uint4*>(s);
  uint4* __restrict__ out = reinterpret_cast<uint4*>(dst + o);
#pragma unroll 4
  for (long long v = start / 16 + threadIdx.x; v < vend / 16; v += {THREADS}) out[v] = src[v];
  if (end == nb) {{                                            // the source's tail bytes
    const char* __restrict__ sb = reinterpret_cast<const char*>(s);
    for (long long i = vend + threadIdx.x; i < nb; i += {THREADS}) dst[o + i] = sb[i];
  }}
}}
"""


SOURCE = _source()
_kernel = None
_launchers: dict = {}   # device -> FastLauncher


def _function(dev: int):
    global _kernel
    if _kernel is None:
        _kernel = _compiler.compile_module(SOURCE, source_name="gather_copy.cu").get_kernel("ck_gather_copy")
    return _kernel._function(dev)


def eligible(src, dst_offset_bytes: int = 0) -> bool:
    """Whether gather_copy can take `src`: a C-contiguous CuPy array at a 16-byte aligned address
    (and a 16-byte aligned destination offset)."""
    return bool(src.flags.c_contiguous) and not (src.data.ptr | dst_offset_bytes) % ALIGN


def gather_copy(dst, offsets, sources) -> None:
    """Copy each of `sources` (CuPy arrays, each eligible(); any dtypes: their bytes are copied)
    into the C-contiguous CuPy array `dst` at its byte offset in `offsets` (multiples of 16), on
    the current stream: one launch per MAX_SOURCES sources. The caller checks that each source fits
    inside dst; empty sources are skipped."""
    cp = _cupy.loaded_cupy()
    dev = dst.data.device_id
    items = [(a.data.ptr, int(o), a.nbytes) for a, o in zip(sources, offsets) if a.nbytes]
    base = dst.data.ptr
    for k in range(0, len(items), MAX_SOURCES):
        part = items[k:k + MAX_SOURCES]
        blocks = sum(-(-nb // CHUNK) for _, _, nb in part)
        pad = MAX_SOURCES - len(part)
        values = ([p for p, _, _ in part] + [0] * pad + [o for _, o, _ in part] + [0] * pad
                  + [nb for _, _, nb in part] + [0] * pad)
        f = _function(dev)
        blocking = _launch._blocking
        if blocking is None:
            blocking = _launch.launch_blocking()
        if profiler._active is None and not blocking and _compiler._recorder is None:
            fl = _launchers.get(dev)
            if fl is None:
                fl = _launchers[dev] = FastLauncher(f.ptr, "Qi" + "Q" * (3 * MAX_SOURCES))
            _launch.recent_launches.append(("ck_gather_copy", (blocks, 1, 1), (THREADS, 1, 1)))
            try:
                fl(blocks, THREADS, (base, len(part), *values), cp.cuda.get_current_stream().ptr)
            except cp.cuda.driver.CUDADriverError as err:
                raise LaunchError(str(err), "ck_gather_copy", (blocks, 1, 1), (THREADS, 1, 1)) from None
        else:   # the profiled / blocking / traced path records the launch like every other kernel
            args = (dst, np.int32(len(part)), *(np.int64(v) for v in values))
            _compiler._launch_function("ck_gather_copy", f, (blocks, 1, 1), (THREADS, 1, 1), args, 0, None)
