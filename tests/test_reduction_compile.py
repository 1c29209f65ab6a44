"""cudakit.kernels.reduction: ptxas resource checks and the host-side layout plans (the nvcc and
NVRTC compile of every instantiation is in test_kernels_compile.py). No GPU needed."""
import functools
import operator

import pytest
import test_kernels_compile as kc


def test_no_register_spills_in_the_streaming_kernels(tmp_path):
    """The forward kernels keep their loads in registers (ptxas -v reports no spills); calls into
    the 64-bit / double division routines may save registers (not in the inner loops)."""
    import re

    from cudakit.kernels import reduction
    names = [n for n in reduction.name_expressions("float32") + reduction.name_expressions("bfloat16")
             if n.startswith("ck_red_rows") and ", 0, " in n]
    log = kc.nvcc_compile(reduction, tmp_path, names, extra=("-Xptxas", "-v"))
    spills = re.findall(r"(\d+) bytes spill stores", log)
    assert spills and all(s == "0" for s in spills), log[-3000:]


def test_each_dtype_compiles_only_its_own_instantiations():
    from cudakit.kernels import _common, reduction
    per_dtype = [reduction.name_expressions(d) for d in _common.FLOAT_DTYPE_NAMES]
    assert sorted(functools.reduce(operator.iadd, per_dtype, [])) == sorted(reduction.name_expressions())
    for d, names in zip(_common.FLOAT_DTYPE_NAMES, per_dtype):
        assert all(f"<{_common.ctype(d)}" in n for n in names)
    assert len(set(reduction.name_expressions())) == len(reduction.name_expressions())


@pytest.mark.parametrize("shape,axes,want", [
    ((4, 5), (1,), (None, 4, 5, 1)),
    ((4, 5), (0,), (None, 1, 4, 5)),
    ((4, 5), (0, 1), (None, 1, 20, 1)),
    ((), (), (None, 1, 1, 1)),
    ((3, 4, 5), (0, 2), ((1, 0, 2), 4, 15, 1)),        # non-adjacent: kept first, then reduced
    ((3, 4, 5), (1, 2), (None, 3, 20, 1)),
    ((2, 3, 4, 5), (1, 2), (None, 2, 12, 5)),
    ((2, 1, 4, 1, 5), (0, 2), (None, 1, 8, 5)),         # size-1 axes do not separate reduced ones
    ((2, 1, 4, 1, 5), (1, 3), (None, 40, 1, 1)),        # only size-1 axes reduced: R = 1
    ((2, 3, 4), (), (None, 24, 1, 1)),
])
def test_plan(shape, axes, want):
    from cudakit.kernels import reduction
    assert reduction.plan(shape, axes) == want


def test_plan_matches_numpy_layout():
    """The (outer, R, inner) view of the plan reduces exactly the requested axes."""
    import itertools

    import numpy as np

    from cudakit.kernels import reduction
    rng = np.random.default_rng(0)
    for shape in [(2, 3, 4), (3, 1, 4, 2), (2, 3, 1, 5, 2)]:
        x = rng.standard_normal(shape)
        for k in range(len(shape) + 1):
            for axes in itertools.combinations(range(len(shape)), k):
                perm, outer, R, inner = reduction.plan(shape, axes)
                xc = x if perm is None else np.ascontiguousarray(x.transpose(perm))
                got = xc.reshape(outer, R, inner).sum(axis=1)
                want = x.sum(axis=axes)
                np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("blocks,target,cap,want", [
    (16, 264, 1000, 16),    # 256 of 264 slots in one wave; 17 would leave 8 blocks to a second wave
    (17, 264, 1000, 15),    # 255 blocks in one wave beats 272 (16 in a second)
    (32, 528, 1000, 16),    # exactly one wave
    (1, 1056, 10 ** 6, 1056),
    (600, 1056, 100, 1),    # 1200 blocks fill two waves no better than 600 fill one: the fewer
    (400, 1056, 100, 2),    # 800 blocks fill one wave to 76%; 1200 would fill two to 57%
    (5, 1056, 3, 3),        # capped by the rows there are
    (10, 1056, 0, 1),
])
def test_splits_fill_the_last_wave(blocks, target, cap, want):
    from cudakit.kernels.reduction import _splits
    assert _splits(blocks, target, cap) == want


def test_pass_plans_reduce_exactly_the_requested_axes(monkeypatch):
    """Where plan() would transpose (reduced axes in several runs), reduce() runs _pass_plans'
    passes instead: each reduces one run of adjacent reduced axes of the previous result, innermost
    first. Replayed here with NumPy on every such axes set of a few shapes (size-1 axes among them):
    the passes give x.sum / mean / max over the axes; sums carry float32 partials and round once,
    mean divides once by every reduced element, max keeps x's dtype throughout."""
    import itertools

    import numpy as np

    from cudakit.kernels import reduction
    monkeypatch.setattr(reduction, "_run_plan",
                        lambda code, dt, aligned, outer, R, inner, odt, div: (code, dt, outer, R, inner, np.dtype(odt),
                                                                              div))
    ops = {0: np.sum, 1: np.max}
    rng = np.random.default_rng(1)
    seen = 0
    for shape in [(2, 3, 4), (3, 1, 4, 2), (2, 3, 1, 5, 2), (4, 3, 2, 5)]:
        x = rng.standard_normal(shape)
        for k in range(2, len(shape) + 1):
            for axes in itertools.combinations(range(len(shape)), k):
                if reduction.plan(shape, axes)[0] is None:
                    continue
                seen += 1
                n = int(np.prod([shape[d] for d in axes]))
                for code, op, dt, odt, div in ((0, "sum", "bfloat16", np.float16, 1.0),
                                               (0, "mean", "float32", np.float32, n),
                                               (1, "max", "float64", np.float64, 1.0)):
                    steps = reduction._pass_plans(shape, axes, code, dt, True, odt, div)
                    cur, cur_dt = x.ravel(), dt
                    for i, (c, sdt, outer, R, inner, out, d) in enumerate(steps):
                        last = i == len(steps) - 1
                        assert (c, sdt) == (code, cur_dt) and outer * R * inner == cur.size
                        assert out == (np.dtype(odt) if last or code else np.dtype(np.float32)), (axes, op, i, out)
                        assert d == (div if last else 1.0)
                        cur = ops[code](cur.reshape(outer, R, inner), axis=1).ravel() / d
                        cur_dt = reduction.dtype_name(out)
                    want = ops[code](x, axis=axes) / (n if op == "mean" else 1)
                    np.testing.assert_allclose(cur.reshape(want.shape), want, rtol=1e-12, atol=1e-12)
    assert seen >= 10


def test_fast_axes_take_only_what_the_checked_path_would_accept_unchanged():
    """kernels/reduction.py _fast_axes: None, an int or a tuple of ints in range and not repeated
    (negative ones counted from the end) name sorted axes for the planned launches; anything else
    (out of range, repeated, empty, lists, numpy ints, bools) is None, so the checked path judges it
    and raises its own error."""
    import numpy as np

    from cudakit.kernels.reduction import _fast_axes
    assert _fast_axes(None, 3) == (0, 1, 2)
    assert _fast_axes(-1, 3) == (2,) and _fast_axes(0, 1) == (0,)
    assert _fast_axes((2, 0), 4) == (0, 2) and _fast_axes((-1, -4, 1), 4) == (0, 1, 3)
    for bad in (3, -4, (0, 3), (1, -2), (), [0, 1], np.int64(1), (np.int64(0),), True, (0, True), 1.0, "0"):
        assert _fast_axes(bad, 3) is None, bad
