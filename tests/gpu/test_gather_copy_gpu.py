"""kernels.gather_copy against NumPy: many sources of odd sizes (tails of 1..15 bytes), more than
one launch's worth of sources, empty sources, every dtype's bytes, and a non-default stream."""
import numpy as np
import pytest

cp = pytest.importorskip("cupy")

from cudakit.kernels import gather_copy as gc  # noqa: E402

pytestmark = pytest.mark.cuda


def _layout(sizes_bytes):
    offs, off = [], 0
    for n in sizes_bytes:
        offs.append(off)
        off += -(-n // 256) * 256 + 256   # a gap after each: bytes outside the sources stay put
    return offs, off


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "float64"])
@pytest.mark.parametrize("count", [1, 7, gc.MAX_SOURCES, 2 * gc.MAX_SOURCES + 3])
def test_gather_copy_matches_numpy(dtype, count):
    rng = np.random.default_rng(count)
    item = np.dtype(dtype).itemsize
    elems = [int(rng.integers(0, 3 * gc.CHUNK // item)) for _ in range(count)]
    elems[0] = gc.CHUNK // item * 2 + 15 // item + 1    # several chunks and a tail
    if count > 2:
        elems[1] = 0                                    # empty: skipped
    host = [rng.integers(0, 255, n * item, dtype=np.uint8).view(dtype) for n in elems]
    srcs = [cp.asarray(h) for h in host]
    offs, total = _layout([h.nbytes for h in host])
    dst = cp.full(total, 0xAB, dtype=cp.uint8)
    s = cp.cuda.Stream(non_blocking=True)
    # a non-blocking stream does not wait for the default stream, where dst's fill and the sources'
    # uploads were queued: without this wait the copy raced them (the fill landing after it)
    s.wait_event(cp.cuda.Stream.null.record())
    with s:
        gc.gather_copy(dst, offs, srcs)
    s.synchronize()
    want = np.full(total, 0xAB, dtype=np.uint8)
    for h, o in zip(host, offs):
        want[o:o + h.nbytes] = h.view(np.uint8)
    np.testing.assert_array_equal(dst.get(), want)


def test_eligible_needs_contiguous_and_16_byte_alignment():
    a = cp.zeros(64, cp.float32)
    assert gc.eligible(a) and gc.eligible(a, 32)
    assert not gc.eligible(a[1:])          # 4 bytes past an aligned address
    assert not gc.eligible(a, 8)           # a destination offset off the vector width
    assert not gc.eligible(a.reshape(8, 8).T)
