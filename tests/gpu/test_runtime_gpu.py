"""Runtime on a real GPU: devices, compile/load/launch, caches, memory statistics, limits, errors."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cudakit
from cudakit import CompileError, LaunchError, OutOfMemoryError

pytestmark = pytest.mark.cuda
cp = pytest.importorskip("cupy")

SCALE_SRC = r'''
extern "C" __global__ void scale(float* x, float a, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
template <typename T> __global__ void fill(T* x, T v, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}
'''


def test_device_info_matches_driver():
    smi = shutil.which("nvidia-smi")
    if not smi:
        pytest.skip("nvidia-smi not found")
    out = subprocess.run([smi, "--query-gpu=index,name,memory.total,pci.bus_id,uuid", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout.strip().splitlines()
    devs = cudakit.devices()
    assert len(devs) == len(out)
    for d, line in zip(devs, out):
        idx, name, mem_mib, bus, uuid = [s.strip() for s in line.split(",")]
        assert d.name == name
        # nvidia-smi counts memory the driver reserves for itself; the runtime does not
        assert 0.98 * int(mem_mib) <= d.total_memory / 2**20 <= int(mem_mib)
        assert d.total_memory == cudakit.memory_info()[1]
        assert d.pci_bus_id.lower().lstrip("0") in bus.lower()
        assert d.uuid == uuid
        assert d.compute_capability >= (7, 0) and d.multiprocessors > 0 and d.l2_cache_size > 0
        assert d.memory_bus_width and d.memory_clock_khz


def test_device_context_and_set_device():
    with cudakit.device(0) as info:
        assert cudakit.current_device() == 0 and info.index == 0
    cudakit.set_device(0)
    with pytest.raises(cudakit.DeviceError, match="device index must be in"):
        cudakit.set_device(99)
    with cudakit.device("cuda:0") as info:   # PyTorch-style names too
        assert info.index == 0 and cudakit.get_device_info("cuda").index == cudakit.current_device()
    assert cudakit.get_backend("cuda", device="cuda:0") is cudakit.get_backend("cuda", device=0)
    for bad in ("cuda:x", "cpu", "cuda:99"):
        with pytest.raises(cudakit.DeviceError, match="or 'cuda:N'"):
            cudakit.set_device(bad)


def test_compile_launch_and_attributes(cache_dir):
    k = cudakit.compile(SCALE_SRC, "scale")
    x = cp.arange(1000, dtype=cp.float32)
    k.launch(*cudakit.launch_config(x.size), (x, np.float32(2.0), np.int64(x.size)))
    k[4, 256](x, np.float32(0.5), np.int64(x.size))
    np.testing.assert_array_equal(x.get(), np.arange(1000, dtype=np.float32))
    a = k.attributes
    assert a["registers"] > 0 and a["max_threads_per_block"] >= 256 and a["local_memory"] == 0
    assert 32 <= k.occupancy_block_size() <= 1024
    f = cudakit.compile(SCALE_SRC, "fill<double>")
    y = cp.empty(77, cp.float64)
    f[1, 128](y, np.float64(3.25), np.int64(77))
    assert (y.get() == 3.25).all()


def test_block_of_2048_threads_raises_and_process_goes_on(cache_dir):
    k = cudakit.compile(SCALE_SRC, "scale")
    x = cp.ones(10, cp.float32)
    with pytest.raises(LaunchError, match=r"block must be <= 1024 threads \(got 2048\)"):
        k.launch(1, 2048, (x, np.float32(2), np.int64(10)))
    with pytest.raises(LaunchError, match="grid dimension 0"):
        k.launch(0, 32, (x, np.float32(2), np.int64(10)))
    k.launch(1, 32, (x, np.float32(2), np.int64(10)))
    assert (x.get() == 2).all()


def test_compile_error_has_log_with_line(cache_dir):
    with pytest.raises(CompileError) as ei:
        cudakit.compile('extern "C" __global__ void k(float* x) {\n  x[0] = 1.0f\n}', "k")
    assert "k.cu(3): error" in str(ei.value) and 'expected a ";"' in ei.value.log  # NVRTC flags the "}" line
    assert (cp.ones(3) + 1).sum() == 6  # the process goes on working


def test_ptx_and_cubin_files(tmp_path, cache_dir):
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc not on PATH")
    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void add_one(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f; }')
    cc = "".join(map(str, cudakit.get_device_info().compute_capability))
    for kind in ("ptx", "cubin"):
        out = tmp_path / f"k.{kind}"
        subprocess.run([nvcc, f"-arch=sm_{cc}", f"--{kind}", "-o", str(out), str(src)], check=True)
        k = cudakit.load_module(out).get_kernel("add_one")
        x = cp.zeros(100, cp.float32)
        k[1, 128](x, np.int32(100))
        assert (x.get() == 1).all(), kind
    with pytest.raises(FileNotFoundError, match="missing.ptx"):
        cudakit.load_module(tmp_path / "missing.ptx")
    with pytest.raises(LaunchError, match="no kernel named"):
        cudakit.load_module(tmp_path / "k.cubin").get_kernel("nope")._function(0)


def test_numba_kernel():
    pytest.importorskip("numba.cuda")
    from tests_numba_kernels import axpy
    k = cudakit.numba_kernel(axpy, "void(float32, float32[:], float32[:])")
    x = cp.arange(300, dtype=cp.float32)
    y = cp.ones(300, dtype=cp.float32)
    k[3, 128](np.float32(2.0), x, y)
    np.testing.assert_array_equal(y.get(), 2 * np.arange(300, dtype=np.float32) + 1)


def test_second_process_hits_disk_cache(tmp_path):
    """Cold vs warm first call: the warm process loads the cubin from CUDAKIT_CACHE_DIR."""
    code = textwrap.dedent('''
        import json, time, cupy as cp, numpy as np
        t = time.perf_counter()
        import cudakit
        x = cp.ones(1 << 20, cp.float32)
        cudakit.add(x, x); cp.cuda.runtime.deviceSynchronize()
        print(json.dumps({"first_call_s": time.perf_counter() - t}))
    ''')
    env = dict(os.environ, CUDAKIT_CACHE_DIR=str(tmp_path))
    runs = [json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                      check=True).stdout.strip().splitlines()[-1])["first_call_s"] for _ in range(2)]
    files = list((tmp_path / "nvrtc").glob("*.bin"))
    assert len(files) == 1
    print(f"\nDISK-CACHE cold first call {runs[0]:.3f} s, warm {runs[1]:.3f} s")
    assert runs[1] < runs[0]
    os.makedirs(os.environ.get("CUDAKIT_RESULTS", "/tmp"), exist_ok=True)
    with open(os.path.join(os.environ.get("CUDAKIT_RESULTS", "/tmp"), "cache_cold_warm.json"), "w") as f:
        json.dump({"cold_s": runs[0], "warm_s": runs[1]}, f)


def test_memory_stats_exact():
    import gc
    m = cudakit.memory
    gc.collect()  # arrays of earlier tests freed now, not in the middle of the sequence
    cudakit.empty_cache()
    cp.cuda.runtime.deviceSynchronize()
    s0 = m.stats()
    # blocks allocated before cudakit's allocator was installed stay in the pool uncounted
    untracked = s0.reserved - s0.allocated
    m.reset_peak()
    a = cp.empty(1000, cp.uint8)          # 1000 B -> one 1024-byte block (512-byte rounding)
    b = cp.empty(1 << 20, cp.float32)     # 4 MiB
    c = cp.empty(3, cp.float64)           # 24 B -> 512
    s1 = m.stats()
    from cudakit.runtime import native
    if native.module() is not None:  # the pool's own memory object, counted by the block it carries
        assert type(b.data.mem).__name__ == "PooledMemory" and b.data.mem.size == 4 << 20
        assert type(b.data.mem._cudakit_block).__name__ == "Block"
    assert s1.allocated - s0.allocated == 1024 + (4 << 20) + 512
    assert s1.allocations - s0.allocations == 3
    assert s1.peak_allocated == s1.allocated
    del b
    s2 = m.stats()
    assert s2.frees - s1.frees == 1
    assert s2.allocated == s1.allocated - (4 << 20)
    assert s2.peak_allocated == s1.peak_allocated
    assert s2.reserved >= s2.allocated and 0 < s2.fragmentation < 1
    gc.collect()
    cudakit.empty_cache()
    s3 = m.stats()
    # b's 4 MiB block went back to the driver; a and c may sit in free space of a chunk that an
    # earlier, still-live allocation holds, so the cached-but-free bytes can only have shrunk
    assert s1.reserved - s3.reserved >= 4 << 20, (s1, s3)
    assert s3.reserved - s3.allocated <= untracked, (s0, s3)
    del a, c
    assert m.stats().frees - s1.frees == 3


def test_memory_callback():
    events = []
    cudakit.memory.set_callback(lambda ev, dev, n: events.append((ev, n)))
    try:
        x = cp.empty(4096, cp.uint8)
        del x
    finally:
        cudakit.memory.set_callback(None)
    assert ("alloc", 4096) in events and ("free", 4096) in events


def test_profile_records_allocations_and_frees():
    seen = []
    cudakit.memory.set_callback(lambda ev, dev, n: seen.append((ev, n)))   # the user's callback too
    try:
        with cudakit.profile() as prof:
            x = cp.empty(1 << 20, cp.uint8)
            del x
    finally:
        cudakit.memory.set_callback(None)
    evs = [(e["event"], e["bytes"]) for e in prof.memory_events]
    assert ("alloc", 1 << 20) in evs and ("free", 1 << 20) in evs and ("alloc", 1 << 20) in seen
    assert prof.memory_events[0]["device"] == cp.cuda.runtime.getDevice()
    assert "allocations" in prof.summary()


def test_limit_and_oom():
    m = cudakit.memory
    cudakit.empty_cache()
    base = m.stats().allocated
    m.set_limit(base + (64 << 20))
    try:
        keep = cp.empty(32 << 20, cp.uint8)
        retries = m.stats().oom_retries
        with pytest.raises(OutOfMemoryError) as ei:
            cp.empty(48 << 20, cp.uint8)
        e = ei.value
        assert isinstance(e, cp.cuda.memory.OutOfMemoryError)   # code written against CuPy catches it too
        assert e.requested == 48 << 20 and e.limit == base + (64 << 20)
        assert e.allocated >= 32 << 20 and e.total > 0 and e.free > 0
        for word in ("requested", "allocated", "reserved", "free", "limit"):
            assert word in str(e)
        assert m.stats().oom_retries == retries + 1
        more = cp.empty(16 << 20, cp.uint8)  # the next allocation that fits succeeds
        assert more.size == 16 << 20
        del keep, more
    finally:
        m.set_limit(None)
    assert m.get_limit() is None
    m.set_limit("50%")
    assert abs(m.get_limit() - cudakit.get_device_info().total_memory // 2) < 2**20
    m.set_limit(None)


def test_cache_size_cap_frees_the_cache_at_the_next_allocation():
    m = cudakit.memory
    cudakit.empty_cache()
    m.set_cache_size("8MiB")
    try:
        assert m.get_cache_size() == 8 << 20 and m.stats().cache_limit == 8 << 20
        trims = m.stats().cache_trims
        x = cp.empty(4 << 20, cp.uint8)
        del x                                   # 4 MiB cached: under the cap
        y = cp.empty(1 << 20, cp.uint8)         # may be cut from the cached 4 MiB block
        assert m.stats().cache_trims == trims and m.stats().cached >= 3 << 20
        big = cp.empty(16 << 20, cp.uint8)
        del big                                 # 16 MiB more cached: over the cap from here
        assert m.stats().cached >= 16 << 20     # a free does not trim
        z = cp.empty(1 << 10, cp.uint8)         # the next allocation does
        s = m.stats()
        assert s.cache_trims == trims + 1 and s.cached <= 8 << 20, s
        del y, z
        m.set_cache_size("1%")
        assert abs(m.get_cache_size() - cudakit.get_device_info().total_memory // 100) < 2**20
    finally:
        m.set_cache_size(None)
    assert m.get_cache_size() is None and m.stats().cache_limit is None


def test_warm_up_kernels_loads_every_kernel_of_the_families(tmp_path):
    from cudakit.kernels import dropout, softmax, transpose
    times = cudakit.warm_up_kernels(["transpose", "dropout"])
    assert list(times) == ["transpose", "dropout"] and all(t >= 0 for t in times.values())
    dev = cp.cuda.runtime.getDevice()
    for fam in (transpose._family, dropout._family):
        assert {(dev, e) for e in fam.names()} <= set(fam._functions)
    x = cp.arange(12, dtype=cp.float32).reshape(3, 4)
    np.testing.assert_array_equal(cudakit.transpose(x).get(), x.get().T)
    r = subprocess.run([sys.executable, "-m", "cudakit", "cache", "warm", "--families", "dropout,softmax",
                        "--dtype", "bfloat16"], capture_output=True, text=True,
                       env=dict(os.environ, CUDAKIT_CACHE_DIR=str(tmp_path)))
    assert r.returncode == 0, r.stderr
    assert "dropout" in r.stdout and "softmax[bfloat16]" in r.stdout and "2 kernel families ready" in r.stdout
    groups = 1 + len(softmax._families["bfloat16"].groups())   # one cache entry a group
    assert len(list((tmp_path / "nvrtc").glob("*.bin"))) == groups


def test_real_device_oom_then_recovers():
    free, total = cudakit.memory_info()
    with pytest.raises(OutOfMemoryError, match="out of memory"):
        cp.empty(total * 2, cp.uint8)
    x = cp.ones(1000)
    assert float(x.sum()) == 1000


def test_transfers_and_pinned():
    h = cudakit.pinned_empty((1000,), "float32")
    h[:] = np.arange(1000)
    assert cudakit.memory.is_pinned(h)
    d = cudakit.to_device(h)
    s = cp.cuda.Stream(non_blocking=True)
    d2 = cudakit.to_device(h, stream=s, non_blocking=True)
    s.synchronize()
    out = cudakit.pinned_empty((1000,), "float32")
    cudakit.to_host(d2, out=out, stream=s, non_blocking=True)
    s.synchronize()
    np.testing.assert_array_equal(out, h)
    np.testing.assert_array_equal(cudakit.to_host(d), h)


def test_check_surfaces_async_error_in_subprocess(tmp_path):
    code = textwrap.dedent(r'''
        import cudakit, cupy as cp, numpy as np
        k = cudakit.compile('extern "C" __global__ void bad(float* p) { p[1ll << 40] = 1.0f; }', "bad")
        k[1, 1](cp.empty(1, cp.float32))
        try:
            cudakit.check()
        except cudakit.LaunchError as e:
            print("LAUNCHERROR", e)
    ''')
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, CUDAKIT_CACHE_DIR=str(tmp_path)))
    assert "LAUNCHERROR" in r.stdout and "bad" in r.stdout, r.stdout + r.stderr


def test_profiler_records_and_exports(tmp_path):
    x = cp.ones(1 << 20, cp.float32)
    with cudakit.profile() as prof:
        for _ in range(3):
            cudakit.relu(x)
        cudakit.to_host(x)
    rows = prof.table()
    kern = [r for r in rows if "relu" in r["name"]]
    assert kern and kern[0]["calls"] == 3 and kern[0]["mean_ms"] > 0
    assert any(r["name"] == "DtoH" for r in rows)
    prof.export_chrome_trace(tmp_path / "t.json")
    t = json.loads((tmp_path / "t.json").read_text())
    spans = [e for e in t["traceEvents"] if e["ph"] == "X"]   # launches and transfers
    assert len(spans) == len(prof.records) and all(e["dur"] > 0 for e in spans)
    counters = [e for e in t["traceEvents"] if e["ph"] == "C"]   # the allocator's events (relu's outputs)
    assert len(counters) == len(prof.memory_events) > 0 and all("bytes" in e["args"] for e in counters)


def test_profiler_records_library_calls():
    """Library products (matmul: cuBLASLt) are recorded too, by the routine."""
    a = cp.ones((64, 64), cp.float32)
    with cudakit.profile() as prof:
        cudakit.matmul(a, a)
    rows = {r["name"]: r for r in prof.table()}
    assert rows["cublaslt_matmul"]["calls"] == 1 and rows["cublaslt_matmul"]["mean_ms"] > 0


def test_profiler_nvtx_and_benchmark_kernel():
    x = cp.ones(1 << 20, cp.float32)
    with cudakit.profile(nvtx=True) as prof:
        cudakit.add(x, x)
    assert prof.table()[0]["calls"] == 1
    be = cudakit.get_backend("cuda")
    ms = be.benchmark_kernel("relu", x, num_runs=5)
    assert 0 < ms < 100


def test_native_launcher_is_active_and_launches_on_the_current_stream():
    from cudakit.runtime import native
    a = cp.arange(1000, dtype=cp.float32)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        b = cudakit.add(a, a)      # queued on s, the current stream
        s.synchronize()
    assert native.status() == "active", native.status()
    np.testing.assert_array_equal(cp.asnumpy(b), 2 * np.arange(1000, dtype=np.float32))


def test_launches_without_the_native_launcher(tmp_path):
    """CUDAKIT_NATIVE=0: every op goes through CuPy's binding and gives the same results."""
    code = textwrap.dedent('''
        import cupy as cp, numpy as np, cudakit
        from cudakit.runtime import native
        a = cp.linspace(-3, 3, 4099, dtype=cp.float32)
        np.testing.assert_array_equal(cp.asnumpy(cudakit.add(a, a)), 2 * cp.asnumpy(a))
        np.testing.assert_array_equal(cp.asnumpy(cudakit.leaky_relu(a, 0.25)), np.where(cp.asnumpy(a) > 0, cp.asnumpy(a), 0.25 * cp.asnumpy(a)))
        print(native.status())
    ''')
    env = dict(os.environ, CUDAKIT_NATIVE="0", CUDAKIT_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("unavailable: disabled by CUDAKIT_NATIVE=0")


def test_backend_bound_to_a_device():
    be0 = cudakit.get_backend("cuda", device=0)
    assert be0 is cudakit.get_backend("cuda", device=0) and be0 is not cudakit.get_backend("cuda")
    assert be0.device == "cuda:0" and len(be0.devices) == cudakit.device_count()
    x = be0.asarray(np.arange(6, dtype=np.float32))
    assert x.device.id == 0 and be0.empty((2, 3)).device.id == 0 and float(be0.zeros(4).sum()) == 0
    np.testing.assert_array_equal(be0.to_numpy(be0.relu(x - 2)), np.maximum(np.arange(6) - 2, 0))
    be0.synchronize()
    be0.set_device(0)
    assert cudakit.current_device() == 0
    with pytest.raises(cudakit.DeviceError, match=r"device index must be in \[0, "):
        cudakit.get_backend("cuda", device=cudakit.device_count())


@pytest.mark.multi_gpu
def test_backend_bound_to_device_1_creates_its_arrays_there():
    be1 = cudakit.get_backend("cuda", device=1)
    with cp.cuda.Device(0):
        x = be1.asarray(np.ones(8, np.float32))
        assert x.device.id == 1 and be1.empty(3).device.id == 1 and be1.device == "cuda:1"
        y = be1.add(x, x)
        assert y.device.id == 1 and cp.cuda.runtime.getDevice() == 0


def test_own_kernels_are_marked_for_pdl_where_the_device_takes_it(cache_dir):
    """The kernel families' functions (each waits for the previous kernel first, CK_PDL_WAIT) are
    marked for programmatic dependent launch exactly where runtime.pdl.supported says so; a kernel
    compiled by the user is not."""
    from cudakit.kernels import elementwise, softmax
    from cudakit.runtime import native, pdl
    x = cp.ones((64, 256), cp.float32)
    cudakit.softmax(cudakit.add(x, x))
    cp.cuda.get_current_stream().synchronize()
    dev = cp.cuda.runtime.getDevice()
    mod = native.module()
    fams = [elementwise._family, softmax._families["float32"]]
    funcs = [f for fam in fams for (d, _), f in fam._functions.items() if d == dev]
    funcs += [k._funcs[dev] for fam in fams for k in fam._kernels.values() if dev in k._funcs]
    assert funcs and all(mod.pdl_has(f.ptr) == pdl.supported(dev) for f in funcs)
    user = cudakit.compile(SCALE_SRC, "scale")
    user[(1,), (32,)](x, np.float32(1.0), np.int64(32))
    assert not mod.pdl_has(user._funcs[dev].ptr)
