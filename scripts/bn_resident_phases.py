"""Where ck_bn_resident's time goes: the kernel recompiled with a return after each of its phases
(1: statistics and the tile, 2: + first grid barrier, 3: + the channels' finalize, 4: + second
barrier, 5: whole), each launch timed alone behind an L2 flush with CUDA events (median of 20).
    python3 scripts/bn_resident_phases.py 32x128x28x28 bfloat16 [cl]"""
import sys

import cupy as cp
import numpy as np

import cudakit
from cudakit.kernels import normalization as nk

shape = tuple(map(int, sys.argv[1].split("x")))
dtype = sys.argv[2]
x = cp.random.standard_normal(shape, dtype=cp.float32).astype(dtype)
if len(sys.argv) > 3 and sys.argv[3] == "cl":
    x = cp.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
calls = []
real = nk._launch
nk._launch = lambda expr, dt, grid, block, args, smem=0: (calls.append((expr, grid, block, args, smem)),
                                                          real(expr, dt, grid, block, args, smem))
cudakit.get_backend("cuda").batch_norm_with_stats(x, None, None, None, None, True)
nk._launch = real
(zexpr, _, _, (count,), _), (expr, grid, block, args, smem) = calls
marks = ["  ck_grid_barrier(count, 1);\n", "  ck_grid_barrier(count, 2);\n"]
src = nk.SOURCE
assert all(src.count(m) == 1 for m in marks)
src = src.replace(marks[0], "  if (CKSTOP == 1) return;\n" + marks[0] + "  if (CKSTOP == 2) return;\n")
src = src.replace(marks[1], "  if (CKSTOP == 3) return;\n" + marks[1] + "  if (CKSTOP == 4) return;\n")
flush = cp.empty(256 << 20, cp.uint8)
print(f"{sys.argv[1:]} {expr} grid {grid} block {block} smem {smem}")
for stop in (1, 2, 3, 4, 5):
    mod = cp.RawModule(code=src, options=("-std=c++17", f"-DCKSTOP={stop}"), name_expressions=[expr, zexpr])
    k, z = mod.get_function(expr), mod.get_function(zexpr)
    if smem:   # (the default limit is 48 KiB less the kernel's static shared memory)
        k.max_dynamic_shared_size_bytes = smem
    ts = []
    for i in range(25):
        flush.fill(i)
        z((1,), (32,), (count,))
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        k(grid, block, args, shared_mem=smem)
        b.record()
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b) * 1000)
    print(f"  stop {stop}: {np.median(ts[5:]):7.2f} us")
