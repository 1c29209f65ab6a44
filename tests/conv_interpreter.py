"""Run by tests/test_conv_interpreter.py in a subprocess with TRITON_INTERPRET=1 (Triton picks the
interpreter when it is imported):
    TRITON_INTERPRET=1 python tests/conv_interpreter.py
runs the implicit-GEMM conv2d Triton kernels (kernels/_conv_triton.py) on NumPy arrays, launched as
kernels/conv.py launches them (plan() and wgrad_plan(), the weight as [R, S, C, K], the flipped
convolution for the input gradient), against the CPU backend in float64, for each geometry in CASES. float16 stands in
for the 16-bit types (the interpreter cannot read bfloat16 from NumPy)."""
import os
import sys

sys.path[:0] = [os.path.dirname(__file__), os.path.join(os.path.dirname(__file__), "..", "src")]
import numpy as np
from triton_numpy import Tensor

import cudakit
from cudakit.kernels import _conv_triton as src
from cudakit.kernels import conv

# (x shape, K, kernel (R, S), stride, padding, dilation; the input gradient of the strided ones reads
# grad_out zero-interleaved, some input rows outside every window): same-size 3x3 (the affine loads), channels
# past one reduction step and ragged, 1x1, strided, dilated, rectangular windows, positions of an
# image past one block (130 > 128) and images that are not a block multiple (and, below, weight
# gradient splits of several blocks that cross images)
CASES = [((2, 5, 9, 11), 7, (3, 3), 1, 1, 1), ((1, 70, 6, 6), 20, (3, 3), 1, 1, 1),
         ((2, 3, 12, 10), 8, (1, 1), 1, 0, 1), ((1, 4, 11, 13), 5, (3, 3), 2, 1, 1),
         ((1, 3, 12, 12), 4, (3, 3), 1, 2, 2), ((1, 6, 8, 9), 3, (2, 4), (1, 2), (0, 1), 1),
         ((1, 2, 10, 13), 130, (3, 3), 1, 1, 1), ((3, 1, 5, 5), 2, (5, 5), 1, 2, 1),
         ((2, 3, 12, 12), 4, (3, 3), 2, 1, 1), ((1, 5, 11, 10), 6, (2, 2), 3, 0, 1), ((1, 3, 13, 9), 4, (3, 2), (2, 3), (1, 0), (2, 1))]


def _pair(v):
    return (v, v) if isinstance(v, int) else v


def run(x, w_rsck, bias, geo, upsample=(1, 1)):
    n, c, h, wd = x.shape
    k = w_rsck.shape[3]
    y = np.full((n, k, geo[8], geo[9]), 7.0, x.dtype)   # a value the kernel never leaves
    gm, gn, consts = conv.plan(x.shape, k, geo, bias is not None, x.dtype.name, upsample)
    b = bias if bias is not None else w_rsck
    src.conv2d_fwd[(gm, gn, n)](*map(Tensor, (x, w_rsck, b, y)), c, h, wd, k, geo[8], geo[9], **consts)
    return y


def weight(w, input_grad):
    k, c, r, s = w.shape
    out = np.full((r, s, k, c) if input_grad else (r, s, c, k), 7.0, w.dtype)
    src.conv2d_weight_layout[(-(-w.size // conv._LAYOUT_BLOCK),)](Tensor(w), Tensor(out), k, c, r * s,
                                                                 INPUT_GRAD=input_grad, BLOCK=conv._LAYOUT_BLOCK)
    return out


def weight_grad(g, x, w_shape, geo, programs):
    """conv.conv2d_weight_grad's three launches (weight partials, bias partials, finish)."""
    k, c, r, s = w_shape
    n = x.shape[0]
    grid, steps, consts = conv.wgrad_plan(x.shape, k, geo, programs, x.dtype.name)
    part = np.full((grid[2], k * c * r * s), 7.0, np.float32)
    src.conv2d_wgrad[grid](*map(Tensor, (x, g, part)), n, c, x.shape[2], x.shape[3], k, geo[8], geo[9], steps,
                           **consts)
    images = -(-n // min(n, conv._BIAS_SPLIT))
    part_b = np.full((-(-n // images), k), 7.0, np.float32)
    src.conv2d_bias_grad[(k, part_b.shape[0])](Tensor(g), Tensor(part_b), n, k, geo[8] * geo[9], images,
                                                BLOCK=conv._BIAS_BLOCK)
    gw, gb = np.full(w_shape, 7.0, x.dtype), np.full(k, 7.0, x.dtype)
    src.conv2d_wgrad_finish[(-(-gw.size // conv._FINISH_BLOCK),)](*map(Tensor, (part, part_b, gw, gb)), grid[2],
                                                                  part_b.shape[0], gw.size, k, HAS_BIAS=True, BLOCK=conv._FINISH_BLOCK)
    return gw, gb, grid[2], steps


def check(shape, k, rs, stride, pad, dil, rng, programs=conv._TARGET_PROGRAMS, dtype=np.float16):
    cpu = cudakit.get_backend("cpu")
    x = rng.standard_normal(shape).astype(dtype)
    w = (rng.standard_normal((k, shape[1]) + rs) * (shape[1] * rs[0] * rs[1]) ** -0.5).astype(dtype)
    b = rng.standard_normal(k).astype(dtype)
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(pad), _pair(dil)
    want = cpu.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), stride, pad, dil)
    geo = (sh, sw, ph, pw, dh, dw, rs[0], rs[1], want.shape[2], want.shape[3])
    y = run(x, weight(w, False), b, geo)
    case = (shape, k, rs, stride, pad, dil)
    np.testing.assert_allclose(y.astype(np.float64), want, atol=4e-3, rtol=4e-3, err_msg=f"y {case}")
    g = rng.standard_normal(want.shape).astype(dtype)
    gx_want, gw_want, gb_want = cpu.conv2d_backward(g.astype(np.float64), x.astype(np.float64),
                                                    w.astype(np.float64), stride, pad, dil)
    gw, gb, split, steps = weight_grad(g, x, w.shape, geo, programs)
    np.testing.assert_allclose(gw.astype(np.float64), gw_want, atol=4e-3 * max(1.0, np.abs(gw_want).max()),
                               rtol=4e-3, err_msg=f"dw {case} (split {split} x {steps} steps)")
    np.testing.assert_allclose(gb.astype(np.float64), gb_want, atol=4e-3 * max(1.0, np.abs(gb_want).max()),
                               rtol=4e-3, err_msg=f"db {case}")
    gx = run(g, weight(w, True), None, conv.flipped(geo, shape), upsample=(sh, sw))
    scale = max(1.0, np.abs(gx_want).max())
    np.testing.assert_allclose(gx.astype(np.float64), gx_want, atol=4e-3 * scale, rtol=4e-3, err_msg=f"dx {case}")


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("set TRITON_INTERPRET=1 (before Triton is imported)")
    rng = np.random.default_rng(0)
    for case in CASES:
        check(*case, rng)
    check((9, 2, 16, 17), 3, (3, 3), 1, 1, 1, rng, programs=40)   # 4 splits of 7 steps, across images
    for case in CASES[:2]:   # float32 tiles (32-channel steps)
        check(*case, rng, dtype=np.float32)
    print(f"{len(CASES) + 3} cases match the float64 reference (forward, input, weight and bias gradients)")
