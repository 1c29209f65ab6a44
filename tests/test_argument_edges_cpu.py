"""Argument edges a fuzzing helper found on the CPU backend (2026-11-28): each check is shared by
both backends and runs before any kernel."""
import numpy as np
import pytest

import cudakit
from cudakit.errors import ArgumentError, ArgumentTypeError, ShapeError


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_leaky_relu_slope_past_float32_is_refused(dtype):
    """A finite slope that float32 rounds to inf made x = 0 NaN (0 * inf) for 16- and 32-bit data."""
    x = np.array([0.0, -0.0, -1.0], dtype)
    for call in (lambda s: cudakit.leaky_relu(x, s), lambda s: cudakit.leaky_relu_backward(x, x, s)):
        with pytest.raises(ArgumentError, match="negative_slope must be at most 3.40282e\\+38"):
            call(1e39)
    np.testing.assert_array_equal(cudakit.leaky_relu(x, 2.0), np.array([0.0, 0.0, -2.0], dtype))
    # float64 data multiplies in float64: such a slope is a number there
    np.testing.assert_array_equal(cudakit.leaky_relu(np.array([-1.0, 0.0, 2.0]), 1e39), [-1e39, 0.0, 2.0])


def test_fused_linear_gelu_backward_checks_pre_and_grad_out_shapes():
    """gelu_backward broadcast grad_out and pre against each other: a pre of (1, out) gave every row
    pre[0]'s gradient; errors about pre named x."""
    x, w, g = np.ones((3, 4), np.float32), np.ones((5, 4), np.float32), np.ones((3, 5), np.float32)
    for pre in (np.ones((1, 5), np.float32), np.ones(5, np.float32)):
        with pytest.raises(ShapeError, match="pre must have shape \\(3, 5\\)"):
            cudakit.fused_linear_gelu_backward(g, x, w, pre)
    with pytest.raises(ShapeError, match="grad_out must have shape \\(3, 5\\)"):
        cudakit.fused_linear_gelu_backward(np.ones(5, np.float32), x, w, np.ones((3, 5), np.float32))
    with pytest.raises(ArgumentTypeError, match="pre is required"):
        cudakit.fused_linear_gelu_backward(g, x, w, None)


@pytest.mark.parametrize("op", ["max_backward", "min_backward"])
def test_extreme_backward_of_an_empty_reduction_is_refused_as_the_forward(op):
    x = np.zeros((3, 0), np.float32)
    with pytest.raises(ShapeError):
        cudakit.max(x, 1)
    with pytest.raises(ShapeError, match="empty reduction"):
        getattr(cudakit, op)(np.ones(3, np.float32), x, 1)
    assert getattr(cudakit, op)(np.ones(0, np.float32), x, 0).shape == (3, 0)   # (a reduction of 3: fine)


def test_cross_entropy_ignore_index_within_int64():
    logits, t = np.zeros((3, 4), np.float32), np.array([0, 1, 2])
    for ig in (2**63, -2**70):
        with pytest.raises(ArgumentError, match="ignore_index must be in \\[-2\\^63, 2\\^63\\)"):
            cudakit.cross_entropy(logits, t, ignore_index=ig)
    assert np.isclose(cudakit.cross_entropy(logits, t, ignore_index=2**63 - 1), np.log(4))


def test_cross_entropy_uint64_targets_past_int64_are_out_of_range_not_ignored():
    """uint64 targets past 2^63 - 1 (which an int64 cast would wrap) are out of range for every
    class count, also where ignore_index is 2^63 - 1; a target of exactly 2^63 - 1 is ignored there."""
    from cudakit.errors import TargetIndexError
    logits = np.zeros((3, 4), np.float32)
    for ig in (-100, 2**63 - 1):
        with pytest.raises(TargetIndexError, match="targets\\[1\\]"):
            cudakit.cross_entropy(logits, np.array([1, 2**64 - 1, 3], np.uint64), ignore_index=ig)
    t = np.array([1, 2**63 - 1, 3], np.uint64)
    assert np.isclose(cudakit.cross_entropy(logits, t, ignore_index=2**63 - 1), np.log(4))
    loss, grad = cudakit.cross_entropy_with_grad(logits, t, ignore_index=2**63 - 1)
    assert np.isclose(loss, np.log(4)) and not grad[1].any()


def test_adam_update_checks_its_state_before_reading_amsgrad():
    """A string amsgrad was read for its truth before validate(): the error blamed v_max."""
    p, g, m, v = (np.ones(3, np.float32), np.ones(3, np.float32), np.zeros(3, np.float32), np.zeros(3, np.float32))
    st = cudakit.OptimizerState(lr=0.1)
    st.amsgrad = "False"
    with pytest.raises(ArgumentTypeError, match="amsgrad must be a bool"):
        cudakit.adam_update(p, g, m, v, st)
    assert st.step == 0 and (p == 1).all()


def test_bench_run_checks_its_arguments_before_measuring():
    """reps=0 ran the default count, reps=-1 failed in statistics after the roofs were measured,
    l2='hot' ran warm, ops='add' was taken as the ops 'a', 'd', 'd'."""
    from cudakit import bench
    base = dict(ops=["add"], dtypes=["float32"], quick=True, progress=False)
    for kw, err, match in ((dict(reps=0), ArgumentError, "reps must be >= 1"),
                           (dict(reps=1.5), ArgumentTypeError, "reps must be an int"),
                           (dict(warmup=-1), ArgumentError, "warmup must be >= 0"),
                           (dict(l2="hot"), ArgumentError, "l2 must be 'cold' or 'warm'"),
                           (dict(ops="add"), ArgumentTypeError, "ops must be a sequence of names"),
                           (dict(ops=["nope"]), ArgumentError, "unknown op\\(s\\) nope")):
        with pytest.raises(err, match=match):
            bench.run(**dict(base, **kw))


def test_bench_cli_unknown_op_creates_no_out_folder(tmp_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "cudakit", "bench", "--ops", "nope", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown op(s) nope" in r.stderr and not (tmp_path / "o").exists()


def test_record_call_without_a_gpu_records_nothing():
    from cudakit import profiler
    if cudakit.is_available():
        pytest.skip("a GPU is usable here")
    with cudakit.profile() as prof:
        assert profiler.record_call("x", lambda: 3) == 3   # (it failed reaching for CUDA events)
    assert prof.records == []


def test_to_host_out_checks_are_typed():
    from cudakit.errors import DTypeError
    x = np.arange(3.0)
    with pytest.raises(DTypeError, match="out must have x's dtype float64"):
        cudakit.to_host(x, out=np.zeros(3, np.int8))
    ro = np.zeros(3)
    ro.setflags(write=False)
    with pytest.raises(ArgumentError, match="out is read-only"):
        cudakit.to_host(x, out=ro)
    with pytest.raises(ArgumentTypeError, match="x must be an array"):
        cudakit.to_host(None)


def test_set_cache_size_checks_its_size_before_the_gpu():
    """It asked for the GPU first (BackendUnavailableError for 'garbage' on a CPU machine) and let
    parse_size's plain ValueError through on a GPU."""
    for v, err in (("garbage", ArgumentError), (True, ArgumentTypeError), (-5, ArgumentError)):
        with pytest.raises(err, match="set_cache_size"):
            cudakit.memory.set_cache_size(v)
