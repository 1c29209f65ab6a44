"""Scratch A/B for issue 4: a bfloat16 relu over 2^28 elements through TMA bulk copies
(benchmarks/sweeps/ew_bulk_copy.cu: cp.async.bulk global -> shared with an mbarrier, relu in shared memory,
bulk store), in several chunk / stage / block / grid shapes, against torch.relu and cudakit.relu in
interleaved rounds. On an H100 (2026-11-25, GPU-682dca8b) every bulk shape ran 0.92-0.97x torch and
0.92-0.96x cudakit's vector kernel, so the elementwise kernels keep their 16-byte vector loads.
Run on the GPU from the repository root: python3 benchmarks/sweeps/ew_bulk_copy_ab.py (prints CHECK and VARIANT lines)."""
import statistics, numpy as np, cupy as cp, torch, cudakit
src = open("benchmarks/sweeps/ew_bulk_copy.cu").read()
cfgs = [(16384, 4, 256), (8192, 6, 256), (32768, 3, 256), (16384, 6, 512)]
names = [f"relu_bulk<{c}, {s}, {t}>" for c, s, t in cfgs]
mod = cp.RawModule(code=src, options=("-std=c++17",), name_expressions=names)
n = 1 << 28
tx = torch.randn(n, device="cuda").to(torch.bfloat16)
x = cp.from_dlpack(tx)
ref = torch.relu(tx)
dev = cp.cuda.Device()
sms = dev.attributes["MultiProcessorCount"]
fns = {"torch": lambda: torch.relu(tx), "cudakit": lambda: cudakit.relu(x)}
for (ch, st, th), nm in zip(cfgs, names):
    f = mod.get_function(nm)
    smem = ch * st
    f.max_dynamic_shared_size_bytes = smem
    per_sm = max(1, (227 * 1024) // (smem + 1024))
    for mult in sorted({1, per_sm}):
        grid = sms * mult
        y = torch.empty_like(tx)
        yc = cp.from_dlpack(y)
        chunks = n * 2 // ch
        def run(f=f, grid=grid, th=th, smem=smem, yc=yc, chunks=chunks):
            f((grid,), (th,), (x, yc, np.int64(chunks)), shared_mem=smem)
        run(); torch.cuda.synchronize()
        ok = torch.equal(y, ref)
        print(f"CHECK bulk CH={ch} ST={st} T={th} grid={grid}: {'ok' if ok else 'MISMATCH'}", flush=True)
        if ok:
            fns[f"bulk {ch}/{st}/{th} g{grid}"] = run
res = {k: [] for k in fns}
for f in fns.values():
    f(); f()
for _ in range(7):
    for k, f in fns.items():
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(10):
            f()
        b.record(); b.synchronize()
        res[k].append(a.elapsed_time(b) / 10)
t = {k: statistics.median(v) for k, v in res.items()}
for k, ms in t.items():
    print(f"VARIANT {k:<28} {ms * 1e3:8.1f} us {2 * n * 2 / ms / 1e6:7.0f} GB/s  x torch {t['torch'] / ms:.4f}  x cudakit {t['cudakit'] / ms:.4f}", flush=True)
