"""Where the host time of a tiny cudakit.add goes (run on a GPU machine)."""
import cProfile
import pstats
import time

import cupy as cp
import numpy as np

import cudakit
from cudakit.kernels import elementwise as ew


def per_call(fn, n=20000):
    for _ in range(2000):
        fn()
    cp.cuda.runtime.deviceSynchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t) / n * 1e6
    cp.cuda.runtime.deviceSynchronize()
    return dt


a = cp.random.standard_normal(1000, dtype=cp.float32)
b = cp.random.standard_normal(1000, dtype=cp.float32)
out = cp.empty_like(a)
cudakit.add(a, b)
f = ew._function(0, ew._expr("contig", "add", "float32", 4))
args = (a, b, out, np.int64(1000), np.float64(0.0))  # every parameter of the kernel
expr, fl = ew._contig_entry("add", a.dtype, 0, 4)[:2]
sp = cp.cuda.get_current_stream().ptr
from cudakit.runtime.fastlaunch import FastLauncher
from cudakit.runtime import native
fl_binding = FastLauncher(f.ptr, fl.codes)
fl_binding._native = None
pv = (a.data.ptr, b.data.ptr, out.data.ptr, 1000, 0.0)
print("OVERHEAD native launcher:", native.status())
from cudakit import ops
from cudakit.runtime import memory
rows = {
    "cudakit.add, Python path (ew.fast)": lambda: ew.fast("add", (a, b), cp.ndarray),
    "native ew alone (ops._ew)": lambda: ops._ew(ops._T_ADD, a, b, 0.0),
    "cudakit launcher alone": lambda: fl(1, 256, pv, sp),
    "cudakit launcher, CuPy binding": lambda: fl_binding(1, 256, pv, sp),
    "cp.ndarray(shape, dtype)": lambda: cp.ndarray((1000,), cp.float32),
    "cudakit.add": lambda: cudakit.add(a, b),
    "cudakit.add(out=)": lambda: cudakit.add(a, b, out=out),
    "raw cupy Function call": lambda: f((1, 1, 1), (256, 1, 1), args, 0, None),
    "cp.empty (cudakit allocator)": lambda: cp.empty(1000, cp.float32),
    "cupy.add": lambda: cp.add(a, b),
}
try:
    import torch
    ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
    rows["torch.add"] = lambda: torch.add(ta, tb)
except ImportError:
    pass
# cuLaunchKernel itself, three ways: CuPy's typed driver binding, and ctypes straight into libcuda
import ctypes
_cuda = ctypes.CDLL("libcuda.so.1")
_cl = _cuda.cuLaunchKernel
_cl.restype = ctypes.c_int
_cl.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
vals, _ptrs, params = fl_binding._buffers()
for i, v in enumerate(pv):
    vals[i].value = v
_dl = cp.cuda.driver.launchKernel
rows["driver.launchKernel (CuPy binding)"] = lambda: _dl(f.ptr, 1, 1, 1, 256, 1, 1, 0, sp, params, 0)
rows["cuLaunchKernel via ctypes"] = lambda: _cl(f.ptr, 1, 1, 1, 256, 1, 1, 0, sp, params, None)
res = {k: per_call(v) for k, v in rows.items()}
# Profiler: its whole cost when off is one module-global read and compare on the launch path.
from cudakit import profiler
import timeit
res["profiler check when off (ns!)"] = min(timeit.repeat("p._active is None", globals={"p": profiler},
                                                         number=200000, repeat=5)) / 200000 * 1e9
res["cudakit.relu, profiler off"] = per_call(lambda: cudakit.relu(a), 5000)
with cudakit.profile():
    res["cudakit.relu, profiler on"] = per_call(lambda: cudakit.relu(a), 5000)
installed = cp.cuda.get_allocator()
print("OVERHEAD allocator installed:", installed)
cp.cuda.set_allocator(cp.get_default_memory_pool().malloc)
res["cp.empty (CuPy pool directly)"] = per_call(lambda: cp.empty(1000, cp.float32))
res["cudakit.add (CuPy pool directly)"] = per_call(lambda: cudakit.add(a, b))
cp.cuda.set_allocator(memory._malloc)
res["cp.empty (Python counting allocator)"] = per_call(lambda: cp.empty(1000, cp.float32))
res["cudakit.add (Python counting allocator)"] = per_call(lambda: cudakit.add(a, b))
cp.cuda.set_allocator(installed)
res["cudakit.add (installed allocator, again)"] = per_call(lambda: cudakit.add(a, b))
if "torch.add" in rows:
    res["torch.add (again)"] = per_call(rows["torch.add"])
# The parts of the native path, one at a time (each row includes the lambda's own call)
mod = native.module()
pool = cp.get_default_memory_pool()
keep = pool.malloc(4096)
um = cp.cuda.memory.UnownedMemory(keep.ptr, 4096, keep, 0)
mp = cp.cuda.memory.MemoryPointer(um, 0)
gs = cp.cuda.get_current_stream
parts = {
    "empty lambda": lambda: None,
    "pool.malloc(4096) (CuPy pool)": lambda: pool.malloc(4096),
    "native mem_malloc(4096)": lambda: mod.mem_malloc(4096),
    "UnownedMemory(ptr, size, owner, dev)": lambda: cp.cuda.memory.UnownedMemory(keep.ptr, 4096, keep, 0),
    "MemoryPointer(mem, 0)": lambda: cp.cuda.memory.MemoryPointer(um, 0),
    "cp.ndarray(shape, dtype, memptr)": lambda: cp.ndarray((1000,), cp.float32, mp),
    "cp.ndarray(shape, dtype) (native alloc)": lambda: cp.ndarray((1000,), cp.float32),
    "get_current_stream().ptr": lambda: gs().ptr,
    "runtime.getDevice()": lambda: cp.cuda.runtime.getDevice(),
    "a._c_contiguous": lambda: a._c_contiguous,
    "a.data.ptr": lambda: a.data.ptr,
    "a.shape": lambda: a.shape,
    "a.dtype.num": lambda: a.dtype.num,
    "ops._ew (native, no Python frame)": lambda: ops._ew(ops._T_ADD, a, b, 0.0),
    "ops.add (Python frame + native)": lambda: ops.add(a, b),
}
if "torch.add" in rows:
    parts["torch.empty(1000, cuda)"] = lambda: torch.empty(1000, device="cuda")
    parts["torch.add (parts run)"] = rows["torch.add"]
for k, v in parts.items():
    try:
        res["part: " + k] = per_call(v)
    except Exception as e:  # one broken row must not hide the others
        print(f"OVERHEAD part {k} failed: {type(e).__name__}: {e}")
# The same parts again, their rounds interleaved (this host's speed drifts by 10-30% within a run)
from cudakit.bench.timing import host_time_interleaved
inter = {"torch.add": rows.get("torch.add"), "cudakit.add": lambda: cudakit.add(a, b),
         "ops._ew": parts["ops._ew (native, no Python frame)"], "cp.ndarray (native alloc)": parts["cp.ndarray(shape, dtype) (native alloc)"],
         "cp.ndarray(memptr)": parts["cp.ndarray(shape, dtype, memptr)"], "native mem_malloc": parts["native mem_malloc(4096)"],
         "pool.malloc": parts["pool.malloc(4096) (CuPy pool)"], "launcher alone": rows["cudakit launcher alone"],
         "torch.empty": parts.get("torch.empty(1000, cuda)"), "empty lambda": parts["empty lambda"]}
summ, errs = host_time_interleaved({k: v for k, v in inter.items() if v is not None}, calls=2000, rounds=15,
                                   sync=cp.cuda.runtime.deviceSynchronize)
for k, v in summ.items():
    res["interleaved: " + k] = v["median_ms"] * 1e3
for k, e in errs.items():
    print(f"OVERHEAD interleaved {k} failed: {e!r}")
for k, v in res.items():
    print(f"OVERHEAD {k:<36} {v:6.2f} us/call")
import shutil, sysconfig, os
inc = sysconfig.get_paths()["include"]
print("OVERHEAD toolchain: Python.h", os.path.exists(os.path.join(inc, "Python.h")), inc, "cc", shutil.which("cc"), shutil.which("gcc"))
pr = cProfile.Profile()
pr.enable()
for _ in range(20000):
    cudakit.add(a, b)
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(14)
