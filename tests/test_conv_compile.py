"""The conv2d Triton kernels compile for sm_90 without a GPU with the tiles kernels/conv.py plans
(16-bit, and float32 under each cudakit.float32_precision(); forward, zero-interleaved input gradient, weight and bias gradients, finish,
weight layout) and fit an H100's shared memory: a plan change that would fail to launch fails here
first. Each dtype compiles in a subprocess (Triton's compiler state stays out of the test process)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

_H100_SHARED = 232448   # bytes of shared memory a block may opt in to on sm_90

_CODE = r'''
import json, sys
sys.path.insert(0, "src")
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from cudakit.kernels import _conv_triton as src
from cudakit.kernels import conv

dtype, k, c = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])   # k, c: channels per group
ty = {"bfloat16": "*bf16", "float32": "*fp32"}[dtype]
geo = (2, 2, 1, 1, 1, 1, 3, 3, 28, 28)          # strided, so the input gradient is zero-interleaved
x_shape = (8, c, 56, 56)
_, _, fwd = conv.plan(x_shape, k, geo, True, dtype, relu=True)   # (activation="relu": its epilogue compiles too)
_, _, dx = conv.plan((8, k, 28, 28), c, conv.flipped(geo, x_shape), False, dtype, upsample=(2, 2))
_, _, wg = conv.wgrad_plan(x_shape, k, geo, conv._TARGET_PROGRAMS, dtype)
f32 = "*fp32"
pointers = {"fwd": dict(X=ty, W=ty, B=ty, Y=ty), "dx": dict(X=ty, W=ty, B=ty, Y=ty), "wgrad": dict(X=ty, G=ty, GW=f32),
            "bias": dict(G=ty, GB=f32), "finish": dict(PART=f32, PART_B=f32, GW=ty, GB=ty), "layout": dict(W=ty, OUT=ty),
            "dw_fwd": dict(X=ty, W=ty, B=ty, Y=ty), "dw_wgrad": dict(X=ty, G=ty, PART=f32)}
out = {}
for name, fn, c in (("fwd", src.conv2d_fwd, fwd), ("dx", src.conv2d_fwd, dx), ("wgrad", src.conv2d_wgrad, wg),
                    ("bias", src.conv2d_bias_grad, {"BLOCK": conv._BIAS_BLOCK}),
                    ("finish", src.conv2d_wgrad_finish, {"HAS_BIAS": True, "BLOCK": conv._FINISH_BLOCK}),
                    ("layout", src.conv2d_weight_layout, {"INPUT_GRAD": True, "BLOCK": conv._LAYOUT_BLOCK}),
                    ("dw_fwd", src.conv2d_direct_fwd, conv._dw_consts(geo, (2, 2), True, True, min(c, 8), min(k, 8), relu=True)),
                    ("dw_wgrad", src.conv2d_direct_wgrad, conv.dw_wgrad_consts(geo, min(c, 8), min(k, 8)))):
    consts = {n: v for n, v in c.items() if n not in ("num_warps", "num_stages")}
    consts["PDL"] = True   # (as the runtime compiles them for sm_90: runtime.triton.pdl_supported)
    names = list(fn.arg_names)
    sig = {n: "constexpr" if n in consts else pointers[name].get(n, "i32") for n in names}   # the rest: int32 sizes
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names if sig[n][0] == "*"}
    ck = triton.compile(ASTSource(fn, sig, {(names.index(n),): v for n, v in consts.items()}, attrs),
                        target=GPUTarget("cuda", 90, 32),
                        options={"num_warps": c.get("num_warps", 4), "num_stages": c.get("num_stages", 3)})
    out[name] = ck.metadata.shared
print(json.dumps(out))
'''


@pytest.mark.parametrize("dtype,prec,k,c", [("bfloat16", "", 128, 64), ("float32", "ieee", 128, 64),
                                            ("float32", "tf32x3", 128, 64), ("float32", "tf32x3", 64, 64),
                                            ("float32", "tf32", 64, 64), ("bfloat16", "", 1, 1), ("float32", "tf32x3", 1, 1),
                                            ("float32", "ieee", 2, 1)])   # the last three: depthwise and 1 -> 2 direct tiles (the others: 8 -> 8)
def test_conv_kernels_compile_for_sm90(dtype, prec, k, c):
    env = {"TRITON_DEFAULT_FP_FUSION": "1", **os.environ}
    if prec:   # the wgrad tiles follow the precision (and K)
        env["CUDAKIT_FLOAT32_PRECISION"] = prec
    r = subprocess.run([sys.executable, "-c", _CODE, dtype, str(k), str(c)], capture_output=True, text=True, check=False,
                       timeout=600, cwd=os.path.join(os.path.dirname(__file__), ".."), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    shared = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(shared) == {"fwd", "dx", "wgrad", "bias", "finish", "layout", "dw_fwd", "dw_wgrad"}
    for kernel, nbytes in shared.items():
        assert nbytes <= _H100_SHARED, f"{kernel}: {nbytes} bytes of shared memory (the limit is {_H100_SHARED})"
    assert shared["fwd"] > 0 and shared["wgrad"] > 0
