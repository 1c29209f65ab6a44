"""Collectives recorded into a CUDA graph (group._capture_nccl), with a stand-in NCCL transport and
a stand-in capture: nothing is pending while capturing, the replay hooks are registered once per
group, a replay is one watchdog entry, a failed group refuses to replay. No GPU needed."""
import contextlib
import types

import pytest

from cudakit import graphs
from cudakit.distributed import group as groupmod
from cudakit.distributed.work import CapturedWork
from cudakit.errors import DistributedError


class Event:
    def __init__(self):
        self.recorded_on, self.done = None, False

    def record(self, stream):
        self.recorded_on = stream


class Stream:
    def __init__(self, name):
        self.name, self.waits = name, []

    def wait_event(self, e):
        self.waits.append(e)


class Transport:
    def __init__(self, capturing=True):
        self.cur, self.comm_stream = Stream("cur"), Stream("comm")
        self.calls, self.lock, self._capturing, self.aborted = [], contextlib.nullcontext(), capturing, False

    def current_stream(self):
        return self.cur

    def capturing(self, stream):
        return self._capturing

    def event(self):
        return Event()

    def abort(self):
        self.aborted = True

    def destroy(self):
        self.destroyed = True


def make_group(capturing=True):
    world = types.SimpleNamespace(rank=0, backend="nccl", debug=False, lost={}, store_lost=None,
                                  lost_note=lambda g: "", lost_text=lambda lost: "")
    return groupmod.ProcessGroup(world, 0, (0, 1), Transport(capturing), 30.0)


class FakeGraph:
    """A stand-in CUDAGraph capturing on this thread (what graphs.on_replay / after_replay fill)."""
    def __init__(self):
        self._hooks, self._after, self._keys, self.released = [], [], set(), None

    def release(self, reason, error=None):
        self.released, self.error = reason, error


@pytest.fixture
def capture(monkeypatch):
    g = FakeGraph()
    monkeypatch.setattr(graphs._local, "capture", g, raising=False)
    return g


def test_captured_collectives_are_recorded_not_pending(capture):
    g = make_group()
    t = g.transport
    works = [g.run("all_reduce", 64, 1.0, lambda s: t.calls.append(s.name), True) for _ in range(3)]
    g.run("broadcast", 64, 1.0, lambda s: t.calls.append(s.name), False)
    assert t.calls == ["comm", "comm", "comm", "cur"]   # async: the communication stream; sync: the current one
    assert g.pending_snapshot() == []                  # nothing runs while capturing: nothing to watch
    assert len(capture._hooks) == 1 and len(capture._after) == 1   # once per group, not per collective
    assert all(isinstance(w, CapturedWork) for w in works)
    works[0].wait()                                    # joins the captured op back into the capture
    assert t.cur.waits[-1] is works[0].event and works[0].event.recorded_on is t.comm_stream
    with pytest.raises(graphs.GraphCaptureError, match="captured in a CUDA graph"):
        works[1].is_completed()


def test_a_replay_is_one_watchdog_entry_and_a_failed_group_refuses_to_replay(capture):
    g = make_group()
    g.run("all_reduce", 64, 1.0, lambda s: None, True)
    before, after = capture._hooks[0], capture._after[0]
    before()                    # a healthy group: the replay may launch
    replay_stream = Stream("replay")
    after(replay_stream)
    (p,) = g.pending_snapshot()
    assert p.op == "graph replay" and p.event.recorded_on is replay_stream
    p.event.done = True
    assert g.pending_snapshot() == []
    g.fail("rank 1 was lost", op="all_reduce", lost_ranks=(1,))
    assert g.transport.aborted
    with pytest.raises(DistributedError, match="rank 1 was lost"):
        before()


def test_not_capturing_takes_the_eager_path():
    g = make_group(capturing=False)
    w = g.run("all_reduce", 64, 1.0, lambda s: None, True)
    assert not isinstance(w, CapturedWork) and len(g.pending_snapshot()) == 1


@pytest.mark.parametrize("end", ["destroy", "fail"])
def test_the_graphs_holding_a_groups_collectives_are_released_before_its_communicator_goes(capture, end):
    """NCCL's communicator destruction (and abort) waits until every graph with its collectives is
    gone: destroying or failing the group first releases the graphs that captured its collectives
    (their replay then raises), so neither hangs."""
    g = make_group()
    g.run("all_reduce", 64, 1.0, lambda s: None, True)
    assert capture.released is None
    if end == "destroy":
        g._destroy()
        assert g.transport.destroyed and "was destroyed" in capture.released and capture.error is None
    else:   # released on a thread once the replays in flight returned (none here), then the abort
        import time
        err = g.fail("rank 1 was lost", op="all_reduce", lost_ranks=(1,))
        deadline = time.monotonic() + 5
        while capture.released is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert g.transport.aborted and "failed" in capture.released and capture.error is err


def _bare_graph():
    cg = graphs.CUDAGraph.__new__(graphs.CUDAGraph)   # no GPU: only the bookkeeping release() touches
    cg._graph, cg._released, cg._release_error = object(), None, None
    return cg


def test_a_released_cuda_graph_refuses_to_replay():
    cg = _bare_graph()
    cg.release("it holds collectives of <ProcessGroup 0>, which was destroyed")
    assert not cg.captured
    with pytest.raises(graphs.GraphCaptureError, match="released: it holds collectives"):
        cg.replay()
    cg = _bare_graph()
    lost = DistributedError("rank 1 is gone", rank=0, op="all_reduce", lost_ranks=(1,))
    cg.release("it holds collectives of <ProcessGroup 0>, which failed", lost)
    cg.release("it holds collectives of <ProcessGroup 1>, which was destroyed")   # the first reason stays
    with pytest.raises(DistributedError, match="rank 1 is gone") as got:   # the group's failure, as its collectives raise
        cg.replay()
    assert got.value is not lost and got.value.lost_ranks == (1,)   # a copy: the group's error gathers no frames


def test_a_collective_in_a_capture_cudakit_does_not_run_is_refused(monkeypatch):
    """A stream capturing outside cudakit.graph / CUDAGraph: nothing could watch the replays or
    release the graph before the communicator goes (NCCL waits for it), so the collective raises."""
    monkeypatch.setattr(graphs._local, "capture", None, raising=False)
    g = make_group()
    with pytest.raises(DistributedError, match="did not start"):
        g.run("all_reduce", 64, 1.0, lambda s: None, True)


def test_captured_work_waited_for_after_the_capture_raises(capture, monkeypatch):
    g = make_group()
    w = g.run("all_reduce", 64, 1.0, lambda s: None, True)
    monkeypatch.setattr(graphs._local, "capture", None, raising=False)   # the capture is over
    with pytest.raises(graphs.GraphCaptureError, match="runs with each replay"):
        w.wait()


def test_the_group_check_runs_before_hooks_registered_earlier(capture):
    """The group's check may refuse a replay: it runs ahead of hooks (an optimizer's step count)
    registered before the group's first captured collective."""
    capture._hooks.append("optimizer hook")
    g = make_group()
    g.run("all_reduce", 64, 1.0, lambda s: None, True)
    assert capture._hooks[1] == "optimizer hook" and capture._hooks[0] != "optimizer hook"
