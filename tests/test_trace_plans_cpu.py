"""kernels/trace_plans.py pieces that need no GPU: merging a traced plan's scratch allocations."""
import numpy as np

from cudakit.kernels.trace_plans import _MERGE_ALIGN, _holders, _merge_temporaries


def _out(j):
    return (j, 0, (4,), np.dtype("float32"), (4,))


def test_scratch_allocations_merge_into_one_aligned_block_outputs_stay():
    sizes, where = _merge_temporaries([100, 24, 8, 1000, 4], [_out(0), None, _out(3)])
    assert sizes == [100, 1000, 3 * _MERGE_ALIGN]
    assert where == {0: (0, 0), 3: (1, 0), 1: (2, 0), 2: (2, _MERGE_ALIGN), 4: (2, 2 * _MERGE_ALIGN)}


def test_one_scratch_allocation_or_none_is_left_as_it_is():
    for sizes, outs in (([100, 24], [_out(0)]), ([100, 24], [_out(0), _out(1)])):
        new, where = _merge_temporaries(sizes, outs)
        assert new == sizes and where == {j: (j, 0) for j in range(len(sizes))}


def test_a_pointer_in_two_input_regions_is_ambiguous():
    # the same array passed twice, or overlapping views: a trace cannot tell which argument a later call means
    assert _holders(0x1000, [(0x1000, 64), (0x1000, 64)]) == 2
    assert _holders(0x1020, [(0x1000, 64), (0x1010, 64)]) == 2
    assert _holders(0x1000, [(0x1000, 64), (0x2000, 64)]) == 1 and _holders(0x3000, [(0x1000, 64)]) == 0
