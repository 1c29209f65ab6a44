"""kernels/trace_plans.py pieces that need no GPU: merging a traced plan's scratch allocations, and
which recorded allocation a pointer lives in."""
import numpy as np

from cudakit.kernels.trace_plans import _MERGE_ALIGN, _holders, _inside, _latest, _merge_temporaries


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


def test_a_pointer_lives_in_the_latest_allocation_made_before_its_launch():
    # the pool freed a 32-byte block at 0x1000 and gave the address back, merged into 1024 bytes:
    # launches after the second allocation, and the outputs, mean the second
    allocs, before = [(0x1000, 32), (0x4000, 64), (0x1000, 1024)], [0, 1, 3]
    assert _latest(0x1000, allocs, before, 2) == (0, 0)      # launch 2 ran before the reuse
    assert _latest(0x1010, allocs, before, 3) == (2, 0x10)   # launch 3 after it
    assert _latest(0x1100, allocs, before, 2) is None        # past the first block, before the second
    assert _latest(0x1100, allocs, before) == (2, 0x100)     # an output: the latest of all
    assert _latest(0x4020, allocs, before, 1) == (1, 0x20) and _latest(0x9000, allocs, before) is None


def test_an_output_must_lie_inside_its_allocation():
    a = np.zeros((3, 7), np.float32)
    assert _inside(a, 0, 84) and not _inside(a, 0, 80) and not _inside(a, 8, 84)
    assert _inside(a[:, ::2], 0, 84) and not _inside(a[::-1], 0, 84)
    assert _inside(np.zeros((0, 4), np.float32), 16, 16)


def test_a_seed_word_in_an_int32_parameter_is_found_by_its_bits():
    """The attention kernels take a dropout seed's two words as int32 parameters, so a word at or
    above 2^31 is recorded negative: the two recordings still show which parameters carry the seed
    (the low word, then the high word) and that nothing else changed."""
    from cudakit.kernels.attention import _signed32
    from cudakit.kernels.trace_plans import _ALT, _per_call_params, _Recorder

    def recording(seed):
        rec = _Recorder()
        words = [_signed32(seed & 0xFFFFFFFF), _signed32(seed >> 32)]
        rec.launch_packed("attn_fwd", 1, (2, 1, 1), (128, 1, 1), 0, b"iiif", words + [429496730, 1.25])
        return rec
    for seed in (0x89ABCDEF_F0000010, 5, 2**64 - 1):
        alt = seed ^ _ALT
        assert _per_call_params(recording(seed), recording(alt), (seed,), (alt,), (0,), []) == {
            (0, 0): (0, 0), (0, 1): (0, 32)}, hex(seed)
    other = recording(5)
    other.launches[0][6][2] += 1   # a third parameter that changed too: not a seed's doing
    assert _per_call_params(recording(5), other, (5,), (5 ^ _ALT,), (0,), []) is None


def test_seed_words_travel_as_int32_of_the_same_bits():
    from cudakit.kernels.attention import _signed32
    assert [_signed32(w) for w in (0, 5, 2**31 - 1, 2**31, 2**32 - 1)] == [0, 5, 2**31 - 1, -2**31, -1]
    assert all(_signed32(w) & 0xFFFFFFFF == w for w in (0, 2**31, 0xDEADBEEF))
