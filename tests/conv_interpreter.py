"""Run by tests/test_conv_interpreter.py in a subprocess with TRITON_INTERPRET=1 (Triton picks the
interpreter when it is imported):
    TRITON_INTERPRET=1 python tests/conv_interpreter.py [implicit_gemm grouped depthwise direct_grouped relu]
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


# grouped: three groups of 2 -> 3 channels, depthwise (strided: the input gradient zero-interleaved),
# two groups dilated with ragged channel blocks
GROUPED = [(((2, 6, 9, 11), 9, (3, 3), 1, 1, 1), 3), (((2, 8, 10, 9), 8, (3, 3), 2, 1, 1), 8),
           (((1, 40, 12, 10), 34, (3, 3), 1, 2, 2), 2)]


# the direct depthwise kernels: same-size 3x3, strided (the input gradient zero-interleaved), dilated
# 5x5, rectangular with padding larger than the dilated window's half (negative padding in dx), rows
# wider than one column block (150 > 128), 7 x 7 (the weight gradient's smallest tile, across images)
DEPTHWISE = [((2, 4, 9, 11), (3, 3), 1, 1, 1), ((2, 3, 12, 11), (3, 3), 2, 1, 1), ((1, 2, 13, 12), (5, 5), 1, 4, 2),
             ((1, 3, 10, 9), (2, 3), (2, 1), (1, 2), 1), ((1, 2, 7, 8), (3, 3), 3, 0, 1),
             ((2, 3, 3, 150), (3, 3), 1, 1, 1), ((3, 2, 20, 17), (7, 7), 1, 3, 1)]

# the direct kernels with several channels a group: 2 -> 3 (strided: the input gradient
# zero-interleaved, the weight's channel axes swapped), 8 -> 8 (ResNeXt's), 4 -> 2 dilated and
# padded past the window (negative padding in dx), 3 -> 1
DIRECT_GROUPED = [(((2, 6, 9, 11), (3, 3), 2, 1, 1), 9, 3), (((2, 16, 7, 9), (3, 3), 1, 1, 1), 16, 2),
                  (((1, 8, 10, 9), (3, 3), 1, 3, 2), 4, 2), (((3, 6, 5, 6), (1, 3), (1, 2), (0, 1), 1), 2, 2)]


def _pair(v):
    return (v, v) if isinstance(v, int) else v


def run(x, w_grsck, bias, geo, upsample=(1, 1), groups=1, w_kcrs=False, relu=False):
    """conv._run: x (N, G C, H, W) read as N G images of C channels, y likewise; w_kcrs: the weight
    as the caller holds it, (G K, C, R, S); relu: activation="relu"'s fused store."""
    n, gc, h, wd = x.shape
    c, k = gc // groups, (w_grsck.shape[0] // groups if w_kcrs else w_grsck.shape[-1])
    xz = x.reshape(n * groups, c, h, wd)
    y = np.full((n * groups, k, geo[8], geo[9]), 7.0, x.dtype)   # a value the kernel never leaves
    gm, gn, consts = conv.plan(xz.shape, k, geo, bias is not None, x.dtype.name, upsample, w_kcrs=w_kcrs, relu=relu)
    b = bias if bias is not None else w_grsck
    src.conv2d_fwd[(gm, gn, n * groups)](*map(Tensor, (xz, w_grsck, b, y)), c, h, wd, k, geo[8], geo[9], groups,
                                         **consts)
    return y.reshape(n, groups * k, geo[8], geo[9])


def weight(w, input_grad, groups=1):
    gk, c, r, s = w.shape
    k = gk // groups
    out = np.full((groups, r, s, k, c) if input_grad else (groups, r, s, c, k), 7.0, w.dtype)
    src.conv2d_weight_layout[(-(-w.size // conv._LAYOUT_BLOCK),)](Tensor(w), Tensor(out), k, c, r * s, groups,
                                                                 INPUT_GRAD=input_grad, BLOCK=conv._LAYOUT_BLOCK)
    return out


def weight_grad(g, x, w_shape, geo, programs, groups=1):
    """conv.conv2d_weight_grad's three launches (weight partials, bias partials, finish)."""
    k, c, r, s = w_shape
    n = x.shape[0]
    grid, steps, consts = conv.wgrad_plan((n, c) + x.shape[2:], k // groups, geo, programs, x.dtype.name,
                                          groups=groups)
    part = np.full((grid[2], k * c * r * s), 7.0, np.float32)
    src.conv2d_wgrad[grid](*map(Tensor, (x, g, part)), n, c, x.shape[2], x.shape[3], k // groups, geo[8], geo[9],
                           steps, groups, **consts)
    images = -(-n // min(n, conv._BIAS_SPLIT))
    part_b = np.full((-(-n // images), k), 7.0, np.float32)
    src.conv2d_bias_grad[(k, part_b.shape[0])](Tensor(g), Tensor(part_b), n, k, geo[8] * geo[9], images,
                                                BLOCK=conv._BIAS_BLOCK)
    gw, gb = np.full(w_shape, 7.0, x.dtype), np.full(k, 7.0, x.dtype)
    src.conv2d_wgrad_finish[(-(-gw.size // conv._FINISH_BLOCK),)](*map(Tensor, (part, part_b, gw, gb)), grid[2],
                                                                  part_b.shape[0], gw.size, k, HAS_BIAS=True, BLOCK=conv._FINISH_BLOCK)
    return gw, gb, grid[2], steps


def dw_run(x, w, bias, geo, groups, co, flip=False, upsample=(1, 1), relu=False):
    """conv._dw_run: the direct kernel (groups of few channels; depthwise: one)."""
    n, c, h, wd = x.shape
    y = np.full((n, groups * co, geo[8], geo[9]), 7.0, x.dtype)
    consts = conv._dw_consts(geo, upsample, flip, bias is not None, c // groups, co, relu)
    consts.pop("num_warps")
    grid = (-(-n * groups // consts["BLOCK_Z"]), -(-geo[8] // consts["BLOCK_P"]), -(-geo[9] // consts["BLOCK_Q"]))
    src.conv2d_direct_fwd[grid](*map(Tensor, (x, w, w if bias is None else bias, y)), n * groups, groups, h, wd,
                                geo[8], geo[9], **consts)
    return y


def dw_weight_grad(g, x, w_shape, geo):
    """conv.conv2d_weight_grad's direct launch: the per-split partial sums, summed here."""
    n, c, h, wd = x.shape
    k, ci = w_shape[:2]
    co = k * ci // c
    split, steps = conv.dw_wgrad_split(n, c, geo, co)
    part = np.full((split, k * ci * geo[6] * geo[7]), 7.0, np.float32)
    consts = conv.dw_wgrad_consts(geo, ci, co)
    consts.pop("num_warps")
    src.conv2d_direct_wgrad[(c * co // consts["KB"], split)](*map(Tensor, (x, g, part)), n, c, k, h, wd, geo[8], geo[9], steps,
                                             **consts)
    return part.sum(0).reshape(w_shape)


def check_direct(shape, rs, stride, pad, dil, rng, dtype=np.float16, programs=None, k=None, groups=None):
    """The direct kernels (forward, flipped input gradient, weight gradient) of a depthwise
    convolution, or with k filters in `groups` groups; programs: the weight gradient's programs to
    aim for (fewer: several tiles a split)."""
    if programs:
        saved, conv._DW_WG_PROGRAMS = conv._DW_WG_PROGRAMS, programs
        try:
            return check_direct(shape, rs, stride, pad, dil, rng, dtype, k=k, groups=groups)
        finally:
            conv._DW_WG_PROGRAMS = saved
    cpu = cudakit.get_backend("cpu")
    c = shape[1]
    groups = groups or c
    k = k or c
    x = rng.standard_normal(shape).astype(dtype)
    w = (rng.standard_normal((k, c // groups) + rs) * (c // groups * rs[0] * rs[1]) ** -0.5).astype(dtype)
    b = rng.standard_normal(k).astype(dtype)
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(pad), _pair(dil)
    want = cpu.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), stride, pad, dil, groups)
    geo = (sh, sw, ph, pw, dh, dw, rs[0], rs[1], want.shape[2], want.shape[3])
    assert conv.direct(shape, w.shape, groups, geo)
    case = ("direct", shape, k, groups, rs, stride, pad, dil)
    np.testing.assert_allclose(dw_run(x, w, b, geo, groups, k // groups).astype(np.float64), want, atol=4e-3,
                               rtol=4e-3, err_msg=f"y {case}")
    g = rng.standard_normal(want.shape).astype(dtype)
    gx_want, gw_want, _ = cpu.conv2d_backward(g.astype(np.float64), x.astype(np.float64), w.astype(np.float64),
                                              stride, pad, dil, groups=groups)
    gw = dw_weight_grad(g, x, w.shape, geo)
    np.testing.assert_allclose(gw, gw_want, atol=4e-3 * max(1.0, np.abs(gw_want).max()), rtol=4e-3,
                               err_msg=f"dw {case}")
    gx = dw_run(g, w, None, conv.flipped(geo, shape), groups, c // groups, True, (sh, sw))
    np.testing.assert_allclose(gx.astype(np.float64), gx_want, atol=4e-3 * max(1.0, np.abs(gx_want).max()),
                               rtol=4e-3, err_msg=f"dx {case}")


def check(shape, k, rs, stride, pad, dil, rng, programs=conv._TARGET_PROGRAMS, dtype=np.float16, groups=1):
    cpu = cudakit.get_backend("cpu")
    x = rng.standard_normal(shape).astype(dtype)
    cg = shape[1] // groups
    w = (rng.standard_normal((k, cg) + rs) * (cg * rs[0] * rs[1]) ** -0.5).astype(dtype)
    b = rng.standard_normal(k).astype(dtype)
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(pad), _pair(dil)
    want = cpu.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), stride, pad, dil, groups)
    geo = (sh, sw, ph, pw, dh, dw, rs[0], rs[1], want.shape[2], want.shape[3])
    y = run(x, weight(w, False, groups), b, geo, groups=groups)
    case = (shape, k, rs, stride, pad, dil, groups)
    np.testing.assert_allclose(y.astype(np.float64), want, atol=4e-3, rtol=4e-3, err_msg=f"y {case}")
    y = run(x, w, b, geo, groups=groups, w_kcrs=True)   # the weight in its own layout (conv.W_IN_PLACE)
    np.testing.assert_allclose(y.astype(np.float64), want, atol=4e-3, rtol=4e-3, err_msg=f"y, (K, C, R, S) weight {case}")
    g = rng.standard_normal(want.shape).astype(dtype)
    gx_want, gw_want, gb_want = cpu.conv2d_backward(g.astype(np.float64), x.astype(np.float64),
                                                    w.astype(np.float64), stride, pad, dil, groups=groups)
    gw, gb, split, steps = weight_grad(g, x, w.shape, geo, programs, groups)
    np.testing.assert_allclose(gw.astype(np.float64), gw_want, atol=4e-3 * max(1.0, np.abs(gw_want).max()),
                               rtol=4e-3, err_msg=f"dw {case} (split {split} x {steps} steps)")
    np.testing.assert_allclose(gb.astype(np.float64), gb_want, atol=4e-3 * max(1.0, np.abs(gb_want).max()),
                               rtol=4e-3, err_msg=f"db {case}")
    gx = run(g, weight(w, True, groups), None, conv.flipped(geo, shape), upsample=(sh, sw), groups=groups)
    scale = max(1.0, np.abs(gx_want).max())
    np.testing.assert_allclose(gx.astype(np.float64), gx_want, atol=4e-3 * scale, rtol=4e-3, err_msg=f"dx {case}")


def implicit_gemm(rng):
    """The implicit-GEMM kernels, ungrouped: CASES in float16, weight-gradient splits, float32 tiles."""
    for case in CASES:
        check(*case, rng)
    check((9, 2, 16, 17), 3, (3, 3), 1, 1, 1, rng, programs=40)   # 4 splits of 7 steps, across images
    for case in CASES[:2]:   # float32 tiles (32-channel steps)
        check(*case, rng, dtype=np.float32)
    return len(CASES) + 3


def grouped(rng):
    """The implicit-GEMM kernels with per-group tiles."""
    for case, groups in GROUPED:
        check(*case, rng, groups=groups)
    check((5, 6, 9, 8), 6, (3, 3), 1, 1, 1, rng, programs=30, groups=3)   # splits across images, per group
    return len(GROUPED) + 1


def depthwise(rng):
    """The direct depthwise kernels."""
    for case in DEPTHWISE:
        check_direct(*case, rng)
    check_direct((2, 3, 30, 29), (3, 3), 1, 1, 1, rng, dtype=np.float32)   # positions past one block
    check_direct((5, 2, 20, 40), (3, 3), 1, 1, 1, rng, programs=4)   # 2 splits of 3 tiles (2 image blocks x 3 row blocks)
    return len(DEPTHWISE) + 2


def direct_grouped(rng):
    """The direct kernels with several channels a group."""
    for case, k, groups in DIRECT_GROUPED:
        check_direct(*case, rng, k=k, groups=groups)
    check_direct((5, 4, 30, 20), (3, 3), 1, 1, 1, rng, programs=8, k=8, groups=2)   # 2 splits of 2 tiles, 4 filters a program
    saved, conv._DW_WG_FILTERS = conv._DW_WG_FILTERS, 3   # 2 filters a program of the 4 (KB: the largest divisor up to 3)
    try:
        check_direct((5, 4, 30, 20), (3, 3), 1, 1, 1, rng, programs=16, k=8, groups=2)   # 2 splits again
    finally:
        conv._DW_WG_FILTERS = saved
    return len(DIRECT_GROUPED) + 2


def relu(rng):
    """activation="relu" fused into the forward's store (implicit GEMM, its weight reordered and in
    place; the direct kernels, depthwise and grouped): max(conv + bias, 0) with a NaN of x kept in
    every output whose window reads it."""
    cpu = cudakit.get_backend("cpu")
    n = 0
    for shape, k, rs, groups in (((2, 5, 9, 11), 7, (3, 3), 1), ((2, 6, 8, 9), 6, (3, 3), 6), ((1, 8, 7, 9), 12, (3, 3), 4)):
        for dtype in (np.float16, np.float32):
            x = rng.standard_normal(shape).astype(dtype)
            x[-1, 0, 3, 4] = np.nan
            cg = shape[1] // groups
            w = (rng.standard_normal((k, cg) + rs) * (cg * rs[0] * rs[1]) ** -0.5).astype(dtype)
            b = rng.standard_normal(k).astype(dtype)
            want = cpu.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), 1, 1, 1, groups)
            geo = (1, 1, 1, 1, 1, 1, rs[0], rs[1], want.shape[2], want.shape[3])
            if conv.direct(shape, w.shape, groups, geo):
                ys = [dw_run(x, w, b, geo, groups, k // groups, relu=True)]
            else:
                ys = [run(x, weight(w, False, groups), b, geo, groups=groups, relu=True),
                      run(x, w, b, geo, groups=groups, w_kcrs=True, relu=True)]
            for y in ys:
                y = y.astype(np.float64)
                assert np.array_equal(np.isnan(y), np.isnan(want)) and np.isnan(want).any(), "a NaN lost by the relu"
                np.testing.assert_allclose(y, np.maximum(want, 0), atol=4e-3, rtol=4e-3,
                                           err_msg=f"relu {shape} {k} groups {groups} {dtype.__name__}")
                n += 1
    return n


# the parts, each runnable alone (`python tests/conv_interpreter.py depthwise`) so that the test runs
# them in parallel; no argument runs them all
PARTS = {"implicit_gemm": implicit_gemm, "grouped": grouped, "depthwise": depthwise, "direct_grouped": direct_grouped,
         "relu": relu}


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("set TRITON_INTERPRET=1 (before Triton is imported)")
    names = sys.argv[1:] or list(PARTS)
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        sys.exit(f"unknown part(s) {unknown}; the parts: {', '.join(PARTS)}")
    n = 0
    for i, name in enumerate(names):
        n += PARTS[name](np.random.default_rng(i))
    print(f"{n} cases match the float64 reference (forward, input, weight and bias gradients): {', '.join(names)}")
