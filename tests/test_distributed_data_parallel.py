"""Data parallel: the bucketing plan, GradSync's launch order, and synchronised gradients equal to
one process's on the combined batch (CPU backend, two ranks)."""
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import cudakit
import cudakit.distributed as dist
from cudakit.distributed.data_parallel import ALIGN_BYTES, plan_buckets
from cudakit.errors import DTypeError, ShapeError

HERE = os.path.dirname(__file__)
MiB = 2**20


def test_buckets_fill_in_reverse_order_up_to_the_cap():
    sizes = [10 * MiB, 10 * MiB, 10 * MiB, 4 * MiB, 30 * MiB, 1 * MiB]
    assert plan_buckets(sizes, ["float32"] * 6, 25 * MiB, 0) == [[5], [4], [3, 2, 1], [0]]


def test_a_gradient_larger_than_the_cap_gets_its_own_bucket():
    assert plan_buckets([100, 10 * MiB, 100], ["float32"] * 3, 1 * MiB, 0) == [[2], [1], [0]]


def test_dtypes_go_to_separate_buckets_and_padding_counts():
    b = plan_buckets([4, 4, 4, 4], ["float32", "bfloat16", "float32", "bfloat16"], 2 * ALIGN_BYTES, 0)
    assert b == [[3, 1], [2, 0]]
    assert plan_buckets([1] * 5, ["float32"] * 5, 2 * ALIGN_BYTES, 0) == [[4, 3], [2, 1], [0]]


def test_the_last_buckets_taper_down_to_the_tail_size():
    # 40 gradients of 1/4 MiB: the last bucket (the first parameters, which the backward finishes
    # last) holds 1 MiB, the one before 2 MiB, then 4 MiB (the cap): the rest from the top
    b = plan_buckets([MiB // 4] * 40, ["float32"] * 40, 4 * MiB, 1 * MiB)
    assert b == [list(range(39, 23, -1)), list(range(23, 11, -1)), list(range(11, 3, -1)), [3, 2, 1, 0]]
    # one dtype's taper does not count the other's buckets; a large gradient takes a step alone
    b = plan_buckets([MiB, 3 * MiB, MiB, MiB, MiB], ["float32", "float32", "float16", "float16", "float32"],
                     8 * MiB, MiB)
    assert b == [[4], [3], [2], [1], [0]]   # float32 caps 1, 2, 4 MiB; float16 caps 1, 2 MiB
    assert plan_buckets([MiB] * 3, ["float32"] * 3, MiB, MiB) == [[2], [1], [0]]   # cap == tail: no taper


def test_every_parameter_in_exactly_one_bucket(rng):
    n = 50
    sizes = rng.integers(0, 5 * MiB, n).tolist()
    dts = rng.choice(["float32", "float16"], n).tolist()
    buckets = plan_buckets(sizes, dts, 8 * MiB)
    assert sorted(i for b in buckets for i in b) == list(range(n))
    for b in buckets:
        assert len({dts[i] for i in b}) == 1
        assert len(b) == 1 or sum(-(-sizes[i] // ALIGN_BYTES) * ALIGN_BYTES for i in b) <= 8 * MiB
        assert b == sorted(b, reverse=True)


def test_plan_arguments():
    with pytest.raises(ValueError, match="differ in length"):
        plan_buckets([1, 2], ["float32"])
    with pytest.raises(ValueError, match="bucket_bytes"):
        plan_buckets([1], ["float32"], 0)
    with pytest.raises(ValueError, match="tail_bucket_bytes must be an int >= 0"):
        plan_buckets([1], ["float32"], 8, -1)
    assert plan_buckets([], []) == []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def one_rank():
    g = dist.init_process_group("cpu", f"tcp://127.0.0.1:{free_port()}", world_size=1, rank=0, timeout=10)
    yield g
    dist.destroy_process_group()


def test_buckets_launch_in_order_whatever_the_marking_order(one_rank):
    params = [np.zeros(64, np.float32) for _ in range(4)]   # 256 bytes each: one per bucket at this cap
    sync = dist.GradSync(params, bucket_bytes=ALIGN_BYTES)
    assert sync.buckets == [[3], [2], [1], [0]]
    sync.mark_ready(1)       # bucket 2: waits for buckets 0 and 1
    assert sync.launched == 0
    sync.mark_ready(3)       # bucket 0 starts
    assert sync.launched == 1
    sync.mark_ready(2)       # bucket 1, then the waiting bucket 2
    assert sync.launched == 3
    with pytest.raises(ValueError, match="already marked"):
        sync.mark_ready(2)
    grads = sync.wait()      # bucket 3 (never marked) starts here
    assert len(grads) == 4 and sync.launched == 0
    sync.mark_ready(2)       # a new step
    sync.wait()


def test_grads_are_views_of_the_buckets_and_set_grad_checks(one_rank):
    params = [np.ones((3, 5), np.float32), np.ones(7, np.float32)]
    sync = dist.GradSync(params)
    assert [g.shape for g in sync.grads] == [(3, 5), (7,)] and len(sync.buffers) == 1
    sync.set_grad(0, np.full((3, 5), 2.0, np.float32))
    # reverse order: params[1] first, params[0] at the next 256-byte boundary
    assert np.all(sync.buffers[0][ALIGN_BYTES // 4:ALIGN_BYTES // 4 + 15] == 2.0)
    assert np.shares_memory(sync.grads[0], sync.buffers[0]) and np.all(sync.buffers[0][:7] == 0)
    with pytest.raises(ShapeError, match="grad 1"):
        sync.set_grad(1, np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="parameter must be"):
        sync.mark_ready(2)
    with pytest.raises(DTypeError, match="float dtype"):
        dist.GradSync([np.zeros(3, np.int32)])


@pytest.mark.parametrize("copy", ["copy", "nocopy"])
def test_synchronised_gradients_equal_one_process_on_the_combined_batch(copy):
    seed = int.from_bytes(os.urandom(3), "little")
    r = subprocess.run([sys.executable, "-m", "cudakit", "run", "--nproc-per-node", "2", "--master-port", "0",
                        os.path.join(HERE, "dist_worker_data_parallel.py"), "cpu", str(seed), copy],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"seed {seed}\n{r.stdout}\n{r.stderr}"
    assert r.stdout.count("DP-OK") == 2


def test_named_parameters(one_rank):
    params = {"w": np.ones((2, 3), np.float32), "b": np.ones(3, np.float32)}
    sync = dist.GradSync(params, bucket_bytes=ALIGN_BYTES)
    assert sync.buckets == [[1], [0]]   # "b" (index 1) first: the backward's order
    sync.set_grad("b", np.full(3, 4.0, np.float32))
    assert sync.launched == 1
    sync.mark_ready("w")
    grads = sync.wait()
    assert list(grads) == ["w", "b"] and grads["b"].tolist() == [4.0] * 3 and grads["w"] is sync.grad("w")
    with pytest.raises(ValueError, match="one of the 2 names"):
        sync.mark_ready("nope")


def test_copy_false_adopts_contiguous_gradients(one_rank):
    params = [np.ones((3, 5), np.float32), np.ones(7, np.float32)]
    sync = dist.GradSync(params, copy=False)
    g0 = np.full((3, 5), 2.0, np.float32)
    g1 = np.full((7, 2), 3.0, np.float32)[:, 0]   # not contiguous: copied into its bucket
    sync.set_grad(1, g1)
    sync.set_grad(0, g0)
    grads = sync.wait()
    assert grads[0] is g0 and grads[1] is sync.grads[1] and grads[1].tolist() == [3.0] * 7
    with pytest.raises(ValueError, match="copy must be a bool"):
        dist.GradSync(params, copy=1)


def test_wait_for_starts_the_rest_and_leaves_the_step_open(one_rank):
    params = {"w": np.ones((2, 3), np.float32), "b": np.ones(3, np.float32), "e": np.ones(4, np.float32)}
    sync = dist.GradSync(params, bucket_bytes=ALIGN_BYTES)
    assert sync.buckets == [[2], [1], [0]] and sync.bucket_params(-1) == ["w"] and sync.bucket_params(0) == ["e"]
    sync.set_grad("e", np.full(4, 2.0, np.float32))
    sync.set_grad("b", np.full(3, 5.0, np.float32))
    assert sync.launched == 2
    early = sync.wait_for(["e", "b"])   # "w" never marked: started here, the step stays open
    assert sync.launched == 3 and early["e"].tolist() == [2.0] * 4 and early["b"].tolist() == [5.0] * 3
    with pytest.raises(ValueError, match="already marked"):
        sync.mark_ready("b")
    grads = sync.wait()
    assert grads["w"] is sync.grad("w") and sync.launched == 0
    with pytest.raises(ValueError, match="one of the 3 names"):
        sync.wait_for(["e", "nope"])
    assert sync.launched == 0   # nothing started by the refused call


def test_copy_engine_layout_keeps_buckets_halves_and_flags_apart():
    """distributed/peer_allreduce.layout: buckets, receive areas and flags never overlap, halves
    split at 16 bytes, each receive area holds the larger half."""
    from cudakit.distributed.peer_allreduce import layout
    counts, items = [1, 7, 1000, 2**20 + 3, 0], [2, 4, 2, 2, 8]
    offs, splits, recv, flags, total = layout(counts, items)
    spans = [(o, o + n * i) for o, n, i in zip(offs, counts, items)]
    spans += [(r, r + max(h, n - h) * i) for r, h, n, i in zip(recv, splits, counts, items)]
    spans.append((flags, flags + 8 * len(counts)))
    spans = sorted(s for s in spans if s[1] > s[0])
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])) and spans[-1][1] <= total
    assert all(o % 256 == 0 for o in offs + recv + [flags])
    for h, n, i in zip(splits, counts, items):
        assert 0 <= h <= n and (h * i) % 16 == 0 and n - h >= h   # rank 1's half is the larger or equal


def test_close_is_a_no_op_without_the_copy_engine_path(one_rank):
    params = [np.ones(4, np.float32)]
    sync = dist.GradSync(params)
    sync.close()
    sync.close()
    sync.set_grad(0, np.full(4, 2.0, np.float32))   # the NCCL/CPU path keeps its buckets
    assert sync.wait()[0].tolist() == [2.0] * 4


def test_gatherable_looks_at_type_device_contiguity_and_alignment(one_rank):
    """GradSync._gatherable (CuPy buckets take a gradient into gather_copy's one launch): a gradient
    of the buckets' array type, on their device, C-contiguous, at an address and bucket offset that
    are multiples of gather_copy's 16 bytes; anything else is copied on its own. A stand-in array
    type here (the CuPy path runs in tests/gpu)."""
    from types import SimpleNamespace

    class Arr:
        def __init__(self, ptr, dev=0, contiguous=True):
            self.data = SimpleNamespace(ptr=ptr, device_id=dev)
            self.flags = SimpleNamespace(c_contiguous=contiguous)
    sync = dist.GradSync([np.zeros(8, np.float32), np.zeros(8, np.float32)])
    sync._array_type, sync._device_id, sync._align = Arr, 0, 16
    sync._offset = [0, 32]
    assert sync._gatherable(Arr(4096), 0) and sync._gatherable(Arr(4096), 1)
    assert not sync._gatherable(Arr(4104), 0)                 # address off the 16-byte grid
    sync._offset = [8, 32]
    assert not sync._gatherable(Arr(4096), 0)                 # bucket offset off the grid
    assert not sync._gatherable(Arr(4096, dev=1), 1)          # another device
    assert not sync._gatherable(Arr(4096, contiguous=False), 1)
    assert not sync._gatherable(np.zeros(8, np.float32), 1)   # not the buckets' array type


def test_a_gradient_given_after_its_bucket_started_is_refused(one_rank):
    """wait_for() starts every bucket (unmarked gradients count as written): a gradient given after
    that would be left out of its bucket's all-reduce, so set_grad and mark_ready refuse it."""
    params = [np.zeros(64, np.float32) for _ in range(2)]
    sync = dist.GradSync(params, bucket_bytes=ALIGN_BYTES)
    sync.set_grad(1, np.ones(64, np.float32))
    sync.wait_for([1])
    with pytest.raises(ValueError, match="already started its all-reduce"):
        sync.set_grad(0, np.ones(64, np.float32))
    with pytest.raises(ValueError, match="already started its all-reduce"):
        sync.mark_ready(0)
    sync.wait()
    sync.set_grad(0, np.ones(64, np.float32))   # the next step takes it
    sync.wait()


def test_ranks_with_other_parameter_lists_fail_at_construction_on_every_rank(tmp_path):
    """GradSync, ZeroRedundancyOptimizer and broadcast_parameters check the ranks' lists (count,
    shapes, dtypes, order) first: ZeRO's padded buckets hid a swapped pair and stepped one
    parameter's tail with another's gradient; GradSync with broadcast_from=None mixed gradients;
    an extra parameter on one rank hung until the timeout."""
    p = tmp_path / "job.py"
    p.write_text(
        "import numpy as np, cudakit, cudakit.distributed as dist\n"
        "dist.init_process_group('cpu', timeout=20)\n"
        "f, R = np.float32, dist.get_rank()\n"
        "ps = [np.full(7, R + 1, f), np.full(5, R + 1, f)] if R == 0 else [np.full(5, R + 1, f), np.full(7, R + 1, f)]\n"
        "for name, make in (('zero', lambda: dist.ZeroRedundancyOptimizer(ps, lambda sh: cudakit.SGD(sh, lr=1.0))),\n"
        "                   ('sync', lambda: dist.GradSync(ps, broadcast_from=None)),\n"
        "                   ('bcast', lambda: dist.broadcast_parameters(ps + [np.ones(3, f)] * (R == 0)))):\n"
        "    try:\n"
        "        make()\n"
        "        print(name, 'ACCEPTED', flush=True)\n"
        "    except cudakit.DistributedError as e:\n"
        "        print(name, 'REFUSED', 'differ' in str(e), flush=True)\n"
        "ok = [np.ones(3, f), np.ones((2, 2), np.float64)]\n"
        "s = dist.GradSync(ok)\n"
        "print('SAME', s.transport_note, flush=True)\n"
        "dist.ZeroRedundancyOptimizer(ok, lambda sh: cudakit.SGD(sh, lr=1.0))\n"
        "s.set_grad(np.int64(0), np.ones(3, f))\n"
        "dist.destroy_process_group()\n")
    r = subprocess.run([sys.executable, "-m", "cudakit", "run", "--nproc-per-node", "2", "--master-port", "0", str(p)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("zero", "sync", "bcast"):
        assert r.stdout.count(f"{name} REFUSED True") == 2, r.stdout + r.stderr
    assert r.stdout.count("SAME the TCP store (cpu backend)") == 2, r.stdout


def test_channels_last_parameters(one_rank, rng, monkeypatch):
    """A channels-last parameter (as a channels_last CNN keeps its conv weights) is taken by
    GradSync, broadcast_parameters and ZeroRedundancyOptimizer (broadcast through a C copy written
    back in its layout; ZeRO's views are C-contiguous), its gradient view C-contiguous with its
    values; a strided slice is still refused."""
    from cudakit.distributed import collectives as coll
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    cl = np.ascontiguousarray(w.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    real = coll.broadcast

    def from_rank0(a, src, group=None):   # as if rank 0 held 2 * w: what the write-back must bring
        real(a, src, group)
        if a.shape == w.shape:
            assert a.flags.c_contiguous   # the C copy, not the channels-last parameter itself
            a[...] = 2 * w
    monkeypatch.setattr(coll, "broadcast", from_rank0)
    sync = dist.GradSync([cl, np.ones(5, np.float32)])
    assert not cl.flags.c_contiguous
    np.testing.assert_array_equal(cl, 2 * w)
    monkeypatch.setattr(coll, "broadcast", real)
    cl[...] = w
    g = rng.standard_normal(w.shape).astype(np.float32)
    sync.set_grad(0, np.ascontiguousarray(g.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2))
    sync.set_grad(1, np.zeros(5, np.float32))
    grads = sync.wait()
    assert grads[0].flags.c_contiguous
    np.testing.assert_array_equal(grads[0], g)
    dist.broadcast_parameters([cl])
    np.testing.assert_array_equal(cl, w)
    zero = dist.ZeroRedundancyOptimizer([cl], lambda shards: cudakit.SGD(shards, lr=0.1))
    assert zero.params[0].flags.c_contiguous
    np.testing.assert_array_equal(zero.params[0], w)
    with pytest.raises(ShapeError, match="C-contiguous"):
        dist.GradSync([np.zeros((4, 8), np.float32)[:, ::2]])
