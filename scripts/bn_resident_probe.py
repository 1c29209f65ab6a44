"""batch_norm's training forward on one case, the single-read kernel (ck_bn_resident) and then the
three launches, a few times each: a target for ncu, which times each kernel alone.
    ncu --kernel-name regex:ck_bn python3 scripts/bn_resident_probe.py 32x128x28x28 bfloat16 cl"""
import sys

import cupy as cp

import cudakit
from cudakit.kernels import normalization as nk

shape = tuple(map(int, sys.argv[1].split("x")))
dtype = sys.argv[2]
x = cp.random.standard_normal(shape, dtype=cp.float32).astype(dtype)
if len(sys.argv) > 3 and sys.argv[3] == "cl":   # channels-last memory, seen as (N, C, H, W)
    x = cp.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
be = cudakit.get_backend("cuda")
for resident in (True, False):
    nk.BN_RESIDENT = resident
    for _ in range(3):
        be.batch_norm_with_stats(x, None, None, None, None, True)
cp.cuda.Device().synchronize()
