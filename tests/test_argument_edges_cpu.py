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


def test_adam_update_checks_its_state_before_reading_amsgrad():
    """A string amsgrad was read for its truth before validate(): the error blamed v_max."""
    p, g, m, v = (np.ones(3, np.float32), np.ones(3, np.float32), np.zeros(3, np.float32), np.zeros(3, np.float32))
    st = cudakit.OptimizerState(lr=0.1)
    st.amsgrad = "False"
    with pytest.raises(ArgumentTypeError, match="amsgrad must be a bool"):
        cudakit.adam_update(p, g, m, v, st)
    assert st.step == 0 and (p == 1).all()
