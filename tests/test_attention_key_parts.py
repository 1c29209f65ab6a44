"""The key-parts model of the Triton attention forward (kernels/attention_key_parts.py): which
launches it offers parts for, and its pieces on hand-counted cases."""
import pytest

from cudakit.backends.attention_masks import key_bounds
from cudakit.kernels import attention_key_parts as kp


def test_key_blocks_causal_plain_and_window():
    # causal, Lq = Lk = 300, 128-row blocks, 64-key blocks: rows 0..127 see keys < 128 (2 blocks),
    # 128..255 keys < 256 (4), 256..299 keys < 300 (5)
    assert kp._key_blocks(300, 300, *key_bounds(300, 300, True), 128, 64) == [2, 4, 5]
    assert kp._key_blocks(300, 300, *key_bounds(300, 300, False), 128, 64) == [5, 5, 5]
    # a window of 64 keys to the left, causal: rows 128..255 see keys 64..255 (blocks 1..3),
    # rows 256..299 keys 192..299 (blocks 3..4)
    assert kp._key_blocks(300, 300, *key_bounds(300, 300, True, (64, 0)), 128, 64) == [2, 3, 2]
    # causal with Lq < Lk (bottom-right): the one row block of 100 rows sees keys < 1000
    assert kp._key_blocks(100, 1000, *key_bounds(100, 1000, True), 128, 64) == [16]
    # a row block that sees no key (a window past every key)
    assert kp._key_blocks(10, 10, 20, 30, 128, 64) == [0]


def test_programs_split_each_row_block_evenly():
    # shares of ceil(n / parts) blocks, the last ones short or empty; batch*heads outer
    assert kp._programs([5, 2], 2, 2) == [3, 2, 1, 1] * 2
    assert kp._programs([1], 1, 3) == [1, 0, 0]


def test_makespan_hands_programs_to_the_first_free_sm(monkeypatch):
    monkeypatch.setattr(kp, "PROGRAM_COST", 0)
    assert kp._makespan([4, 4, 4], 2) == 8      # a second wave of one program
    assert kp._makespan([6, 1, 1, 1, 1], 2) == 6   # the short ones fill the other SM
    assert kp._makespan([1, 1, 1, 1, 1, 6], 2) == 8   # (in launch order: the long one last, 2 + 6)
    assert kp._makespan([], 132) == 0


@pytest.mark.parametrize("bh,l,causal,block_m,want", [
    (16, 1536, False, 128, 2),   # 192 row blocks on 132 SMs: the second wave half empty
    (16, 1536, True, 128, 1),    # longest first fills it already
    (8, 1024, True, 64, 2),      # 128 causal row blocks: the longest rows' SMs end last
    (8, 1024, False, 64, 1),     # 128 equal row blocks on 132 SMs: one wave either way
    (128, 512, False, 128, 1),   # 512 row blocks: parts only add traffic
    (128, 512, True, 128, 1),
    (64, 4096, True, 128, 1),    # 2048 row blocks: not modelled
])
def test_key_parts_on_an_h100s_132_sms(bh, l, causal, block_m, want):
    dlo, dhi = key_bounds(l, l, causal)
    assert kp.key_parts(bh, l, l, dlo, dhi, block_m, 64, 132, causal) == want


def test_key_parts_grow_with_fewer_row_blocks():
    # one batch*head of 4 row blocks on 132 SMs: each part's programs finish sooner, up to MAX_PARTS
    dlo, dhi = key_bounds(512, 8192, False)
    assert kp.key_parts(1, 512, 8192, dlo, dhi, 128, 64, 132, False) == kp.MAX_PARTS
    assert kp.key_parts(0, 512, 8192, dlo, dhi, 128, 64, 132, False) == 1


@pytest.mark.parametrize("bh,l,d,causal,want", [
    # 64 row blocks of 128 (the small-grid 64 x 64 tiles first): the usual tiles in one part and in 2,
    # V copied or in place (64 x 64: no parts)
    (8, 1024, 128, False, [(128, 1, False), (128, 2, False), (128, 1, True), (128, 2, True)]),
    (8, 1024, 128, True, [(128, 1, True), (64, 2, False), (128, 3, True)]),   # causal: 128 rows take V in place
    (16, 512, 128, False, [(128, 1, False), (128, 2, False), (128, 1, True), (128, 2, True)]),
    # 24 blocks of 128 rows, two column blocks: each also with V in place, the first tiles in one part too,
    # and the small-grid tiles in the parts that put two programs on each SM (48 row blocks of 64: 4 parts)
    (2, 1536, 96, False, [(128, 1, False), (64, 2, False), (128, 4, False), (64, 4, False), (128, 1, True),
                          (64, 2, True), (128, 4, True), (64, 4, True), (64, 1, True)]),
    # head dim 80, 64 row blocks of 64: in 4 parts, causal too; at 96 causal the 64 x 64 tiles come first
    (16, 256, 80, False, [(64, 1, False), (128, 4, False), (64, 2, False), (64, 4, False), (64, 1, True),
                          (128, 4, True), (64, 2, True), (64, 4, True), (128, 1, True)]),
    (16, 256, 96, True, [(64, 2, False), (64, 4, False), (64, 2, True), (64, 4, True), (64, 1, True)]),
    (8, 1024, 80, True, [(64, 1, False), (128, 3, False), (64, 2, False), (64, 3, False), (64, 1, True),
                         (128, 3, True), (64, 2, True), (64, 3, True), (128, 1, True)]),
    (8, 1536, 128, False, [(128, 1, False), (64, 2, False), (128, 1, True)]),  # 96 blocks: the usual tiles in
                                                                                # parts would take two waves
    (64, 256, 128, False, [(128, 1, False), (128, 1, True)]),   # 128 blocks: the usual tiles in one part only
    (16, 1536, 128, False, [(128, 2, False), (128, 2, True)]),  # 192 blocks: the usual tiles first, in parts too
    (32, 256, 64, False, [(64, 1, False), (128, 2, False), (64, 1, True), (128, 2, True)]),   # head dim 64,
                                                            # 64 blocks: the usual tiles first, 64 x 64 too
    (128, 512, 128, False, []),                 # 512 blocks: nothing else
])
def test_split_forward_parts_candidates(bh, l, d, causal, want):
    """The split float32 forward's candidates beside its first tiles in one part (kernels/attention.py
    _parts_candidates) on an H100's 132 SMs: their tiles' rows, part counts and whether V is read in
    place (O^T)."""
    import math
    from cudakit.kernels import attention as at
    consts = dict(at._config("float32", d, None), PREC="tf32x3")
    dlo, dhi = key_bounds(l, l, causal)
    first = at._split_consts(consts, d, False, causal, bh * math.ceil(l / 128), 132)
    got = at._parts_candidates(first, consts, d, False, causal, bh, l, l, dlo, dhi, 132)
    assert [(c["BLOCK_M"], n, bool(c.get("OT"))) for c, n in got] == want


@pytest.mark.parametrize("bh,l,causal,want", [
    (16, 256, False, 4),    # 64 row blocks of 64: 4 parts fill two programs an SM (MAX_PARTS)
    (8, 1024, True, 3),     # 128 row blocks: 3 parts
    (16, 64, False, 1),     # 16 row blocks of one key block each: no parts to make
    (2, 128, False, 2),     # 4 row blocks of 2 key blocks: at most 2 parts
    (64, 512, False, 1),    # 512 row blocks: two an SM already
])
def test_filling_parts_put_two_programs_on_each_sm(bh, l, causal, want):
    """kernels/attention_key_parts.filling_parts on 64 x 64 tiles and 132 SMs: the part count
    nearest to PROGRAMS_PER_SM programs an SM, bounded by MAX_PARTS and the longest row block's
    key blocks."""
    dlo, dhi = key_bounds(l, l, causal)
    assert kp.filling_parts(bh, l, l, dlo, dhi, 64, 64, 132) == want


def test_long_columns_override_is_halved_to_blocks_of_16_columns_or_more(monkeypatch):
    """attention_materialized.LONG_COLUMNS: a count that would leave column blocks under 16 wide
    (the tensor-core products' least) or not divide the head-dim block is halved until it fits."""
    from cudakit.kernels import attention_materialized as am
    monkeypatch.setattr(am, "LONG_COLUMNS", 4)
    assert [am.long_columns(dp, 1, 132) for dp in (16, 32, 64, 128)] == [1, 2, 4, 4]
    monkeypatch.setattr(am, "LONG_COLUMNS", None)
    assert am.long_columns(128, 100, 132) == 2 and am.long_columns(128, 264, 132) == 1
    assert am.long_columns(64, 100, 132) == 1 and am.long_columns(128, 100, None) == 1


@pytest.mark.parametrize("bh,lq,lk,d", [(6, 150, 150, 40), (32, 256, 256, 64), (3, 1, 4096, 128), (2, 300, 129, 80)])
def test_materialized_workspace_bytes_are_what_run_allocates(bh, lq, lk, d):
    """attention_materialized.workspace_bytes (which decides whether the path's dispatch plan is a
    trace: TRACE_MAX_BYTES) counts the bytes run() allocates beside the three gradients."""
    import numpy as np
    from cudakit.kernels import attention_materialized as am
    sizes = []

    def empty(shape):
        sizes.append(4 * int(np.prod(shape)))
        return np.empty(shape, np.float32)
    q, do, out = (np.zeros((bh, lq, d), np.float32) for _ in range(3))
    k, v = (np.zeros((bh, lk, d), np.float32) for _ in range(2))
    dlo, dhi = key_bounds(lq, lk, False)
    am.run(do, q, k, v, out, np.zeros((bh, lq), np.float32), 0.1, dlo, dhi, empty=empty,
           launch=lambda *a: None)
    assert sum(sizes[3:]) == am.workspace_bytes(bh, lq, lk, d)
