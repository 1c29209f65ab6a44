"""kernels/path_plans.py pieces that need no GPU: a float32 plan kept per float32_precision."""
import cudakit
from cudakit import dispatch, ops
from cudakit.kernels import path_plans


def test_a_float32_plan_is_kept_per_precision(monkeypatch):
    """The first call under another precision runs the checked path and makes that precision's plan
    with op's planner; later calls under either precision replay their own plan."""
    monkeypatch.setattr(dispatch, "may_plan", lambda: True)
    calls = []
    monkeypatch.setattr(ops, "_checked_call", lambda op, arrays: lambda *a: calls.append(("checked", *a)) or "c")
    made = []

    def make(*a):   # the op's planner: a plan (guarded itself, as the named planners return them)
        prec = cudakit.float32_precision()
        made.append(prec)
        return path_plans._f32_guard("float32", lambda *b: calls.append((prec, *b)) or prec, "conv2d", 3)
    monkeypatch.setattr(ops, "planner_of", lambda op, arrays: make if (op, arrays) == ("conv2d", 3) else None)
    old = cudakit.set_float32_precision("tf32")
    try:
        plan = make()
        assert plan(1) == "tf32"
        cudakit.set_float32_precision("ieee")
        assert plan(2) == "c" and made == ["tf32", "ieee"]   # checked once, then ieee's plan made
        assert plan(3) == "ieee" and plan(4) == "ieee"
        cudakit.set_float32_precision("tf32")
        assert plan(5) == "tf32"
        cudakit.set_float32_precision("ieee")
        assert plan(6) == "ieee" and made == ["tf32", "ieee"]
    finally:
        cudakit.set_float32_precision(old)
    assert calls == [("tf32", 1), ("checked", 2), ("ieee", 3), ("ieee", 4), ("tf32", 5), ("ieee", 6)]


def test_16_bit_plans_are_not_guarded():
    plan = object()
    assert path_plans._f32_guard("bfloat16", plan, "conv2d", 3) is plan


def test_a_planner_that_fails_leaves_the_checked_path(monkeypatch):
    monkeypatch.setattr(dispatch, "may_plan", lambda: True)
    monkeypatch.setattr(ops, "_checked_call", lambda op, arrays: lambda *a: "c")

    def broken(*a):
        raise RuntimeError("no plan")
    monkeypatch.setattr(ops, "planner_of", lambda op, arrays: broken)
    old = cudakit.set_float32_precision("tf32")
    try:
        plan = path_plans._f32_guard("float32", lambda *a: "p", "conv2d", 3)
        cudakit.set_float32_precision("ieee")
        assert plan() == "c" and plan() == "c"
        cudakit.set_float32_precision("tf32")
        assert plan() == "p"
    finally:
        cudakit.set_float32_precision(old)


def test_no_plan_is_made_while_planning_may_not_run_then_it_is(monkeypatch):
    """While a CUDA graph is being captured (or the planned paths are not ready) the new
    precision's call runs the checked path and makes no plan, as dispatch.call does; a later call
    makes it. A planner that has no plan (None) leaves that precision on the checked path."""
    may = [False]
    monkeypatch.setattr(dispatch, "may_plan", lambda: may[0])
    monkeypatch.setattr(ops, "_checked_call", lambda op, arrays: lambda *a: "c")
    made = []

    def make(*a):
        made.append(cudakit.float32_precision())
        return None if cudakit.float32_precision() == "tf32x3" else (lambda *b: "ieee plan")
    monkeypatch.setattr(ops, "planner_of", lambda op, arrays: make)
    old = cudakit.set_float32_precision("tf32")
    try:
        plan = path_plans._f32_guard("float32", lambda *a: "tf32 plan", "conv2d", 3)
        cudakit.set_float32_precision("ieee")
        assert plan() == "c" and made == []   # capturing: no plan made
        may[0] = True
        assert plan() == "c" and made == ["ieee"]
        assert plan() == "ieee plan"
        cudakit.set_float32_precision("tf32x3")
        assert plan() == "c" and plan() == "c" and made == ["ieee", "tf32x3"]   # no plan: checked path
    finally:
        cudakit.set_float32_precision(old)


def test_materialized_backward_offered_for_float32_tf32x3_only(monkeypatch):
    """kernels/attention.py offers the materialised float32 backward only under tf32x3, for head
    dims up to 128 (masks, key lengths, grouped k, v, a bias and dropout in the arrays' own score
    layout: yes; another layout's, as packed sequences index it: no), at any size but an empty one."""
    import numpy as np
    from cudakit import config
    from cudakit.kernels import attention as at
    cand = at._materialized_candidate
    old = config.set_float32_precision("tf32x3")
    try:
        assert cand("float32", 64, at.Masks(True), 2, 64, 64)
        assert cand("float32", 128, at.Masks(False, window=(8, 0)), 1, 1, 1)
        assert cand("float32", 1, at.Masks(False), 1, 1, 1)
        assert cand("float32", 64, at.Masks(False, lengths=object()), 4, 512, 512)
        assert not cand("float32", 64, at.Masks(False), 4, 0, 512)
        assert not cand("bfloat16", 64, at.Masks(False), 4, 512, 512)
        assert not cand("float32", 160, at.Masks(False), 4, 512, 512)
        assert cand("float32", 64, at.Masks(False, dropout=(1, 2.0, 3)), 4, 512, 512)
        assert not cand("float32", 64, at.Masks(False, dropout=(1, 2.0, 3), drop_index=(0, 512, 512)), 4, 512, 512)
        for bias in (np.zeros((2, 2, 64, 80), np.float32), np.zeros((2, 1, 1, 80), np.float32)):
            assert cand("float32", 64, at.Masks(False, bias=bias, bias_heads=bias.shape[1]), 4, 64, 80)
        config.set_float32_precision("ieee")
        assert not cand("float32", 64, at.Masks(False), 4, 512, 512)
    finally:
        config.set_float32_precision(old)


def test_materialized_run_launches_only_registered_kernels():
    """Every kernel attention_materialized.run launches, with every form of bias gradient, is in
    its KERNELS, which kernels/attention.py registers (a name missing there fails at the launch)."""
    import numpy as np
    from cudakit.kernels import attention_materialized as am
    names = set()
    q = np.zeros((4, 70, 32), np.float32)
    lse = np.zeros((4, 70), np.float32)
    for bshape, mode in (((2, 2, 70, 90), 1), ((1, 2, 70, 90), 3), ((2, 1, 1, 90), 2), ((2, 1, 1, 90), 3)):
        for fused in (True, False):
            old = am.FUSED_PREP
            am.FUSED_PREP = fused
            try:
                b = np.zeros(bshape, np.float32)
                k = np.zeros((4, 90, 32), np.float32)
                am.run(q, q, k, k, q, lse, 0.1, -90, 90, empty=lambda s: np.zeros(s, np.float32),
                       launch=lambda name, *a: names.add(name), bias=(b, 0, 0, 0, 0, 2),
                       bias_grad=(b, 0, 0, 0, 0, mode, bshape[2] > 1, bshape[3] > 1))
            finally:
                am.FUSED_PREP = old
    assert names == set(am.KERNELS)


def test_float32_backward_key_names_groups_lengths_and_bias():
    """The float32 backward's path is chosen per signature: grouped k, v, key lengths and a bias
    (which dims it broadcasts, its dtype, deterministic) change the work, so they are in the key;
    without them the key is the one chosen before they were."""
    import numpy as np
    from cudakit.kernels import attention as at
    key = lambda *a: at._f32_bwd_key(8, 64, 64, 64, True, *a)   # noqa: E731
    plain = key(None, 0)
    assert key(None, 0, 1, False, None, True) == plain
    full, row = np.zeros((2, 4, 64, 64), np.float32), np.zeros((2, 1, 1, 64), np.float32)
    keys = {plain, key(None, 0, 2), key(None, 0, 4), key(None, 0, 1, True), key((3, 0), 0), key(None, 0, 1, False, full),
            key(None, 0, 1, False, row), key(None, 0, 1, False, row, True), key(None, 0, 1, False, full.astype(np.float16)),
            key(None, 0, 1, False, None, False, True)}
    assert len(keys) == 10
    # a bias of strided keys runs the kernels' other form (not BIAS_K1): timed under its own key
    wide = np.zeros((2, 4, 64, 128), np.float32)
    assert key(None, 0, 1, False, wide[..., ::2]) != key(None, 0, 1, False, full)
    assert key(None, 0, 1, False, np.ascontiguousarray(wide[..., ::2])) == key(None, 0, 1, False, full)


def test_a_bias_pass_is_chosen_apart_for_strided_keys():
    """attention.bias_path_key (cuDNN or the Triton kernels with a bias) tells a bias of contiguous
    keys, which the Triton kernels read as vectors (BIAS_K1), from a strided view of the same shape."""
    import numpy as np
    from cudakit.kernels import attention as at
    full = np.zeros((2, 4, 64, 64), np.float32)
    strided = np.zeros((2, 4, 64, 128), np.float32)[..., ::2]
    key = lambda b: at.bias_path_key("fwd", 8, 64, 64, 64, "bfloat16", False, 0, b)   # noqa: E731
    assert key(full) != key(strided) and key(full) == key(full.copy())
    assert key(full)[:-1] == key(strided)[:-1]


def test_materialized_choice_is_traced_up_to_a_workspace_size(monkeypatch):
    """path_plans._triton_chosen: a signature whose chosen float32 backward is the materialised one
    takes a traced plan (native replay) up to attention_materialized.TRACE_MAX_BYTES of workspace,
    and plan_backward's closure past it (whose want of memory falls back to the flash kernels)."""
    import types
    from cudakit.kernels import attention as at
    from cudakit.kernels import attention_materialized as am
    from cudakit.kernels import path_plans
    from cudakit.runtime import native
    monkeypatch.setattr(native, "fast_paths", lambda: types.SimpleNamespace(replay_new=None))
    monkeypatch.setattr(at, "_planned_path", lambda *a, **k: ("materialized", None))
    small, large = (32, 256, 256, 64), (64, 1024, 1024, 64)
    assert am.workspace_bytes(*small) <= am.TRACE_MAX_BYTES < am.workspace_bytes(*large)
    assert path_plans._triton_chosen("bwd", *small, "float32", 0.1, False, 0)
    assert not path_plans._triton_chosen("bwd", *large, "float32", 0.1, False, 0)
    monkeypatch.setattr(at, "_planned_path", lambda *a, **k: ("cudnn", None))
    assert not path_plans._triton_chosen("bwd", *small, "float32", 0.1, False, 0)


def test_materialized_group_sum_keeps_two_programs_an_sm():
    """attention_materialized.sum_groups: dK, dV's long products sum each group of q heads where
    the launch keeps two programs an SM (or the SMs are unknown), not for one k, v head's MQA grid
    on an H100's 132 SMs, never without groups."""
    from cudakit.kernels import attention_materialized as am
    assert am.sum_groups(4, 16 * 32, 132) and am.sum_groups(4, 264, 132) and am.sum_groups(8, 1, None)
    assert not am.sum_groups(16, 16, 132) and not am.sum_groups(4, 263, 132)
    assert not am.sum_groups(1, 10_000, 132) and not am.sum_groups(1, 1, None)


def test_grouped_conv_path_keys_are_tagged_for_cudnn(monkeypatch):
    """conv2d's path keys (the checked path's and the dispatch plans', both paths.conv_path_key) end
    with "grouped-cudnn" for groups > 1: a choice kept on disk from before cuDNN was a candidate for
    grouped convolutions, made among cudakit's own kernels alone, is not reused. groups 1 keys are
    as before (their choices on disk stay valid)."""
    import types

    from cudakit.kernels import paths
    from cudakit.runtime import _cupy
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 0)))
    monkeypatch.setattr(_cupy, "cupy", lambda: fake)
    geo = (1, 1, 1, 1, 1, 1, 3, 3, 8, 8)
    one = paths.conv_path_key("fwd", "bfloat16", (2, 8, 8, 8), (8, 8, 3, 3), geo, 1, False)
    assert one == ("fwd", (2, 8, 8, 8), (8, 8, 3, 3), geo, 1, False, "bfloat16", "", 0)
    for kind, layout, wcl in (("fwd", "nchw", False), ("dgrad", "nhwc", False), ("wgrad", "nhwc", True)):
        key = paths.conv_path_key(kind, "bfloat16", (2, 8, 8, 8), (8, 2, 3, 3), geo, 4, True, layout, wcl)
        assert key[-1] == "grouped-cudnn" and key[:9] == (kind, (2, 8, 8, 8), (8, 2, 3, 3), geo, 4, True,
                                                          "bfloat16", "", 0), key
