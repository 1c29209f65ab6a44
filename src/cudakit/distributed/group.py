"""Process groups: init_process_group, new_group, destroy_process_group, and how one collective runs.

A job has one World (this process's rank, the store, the watchdog) and groups of its ranks: the
default group of all ranks, and those of new_group(ranks). A group owns one transport (NCCL on
CuPy arrays, or the CPU transport on NumPy arrays) and runs each collective through run(): the
stream (the current CuPy stream, or the group's communication stream ordered by events for
async_op=True), the profiler record, the watchdog's entry, and the DistributedError of a failure.
"""
from __future__ import annotations

import atexit
import collections
import datetime
import json
import logging
import numbers
import threading
import time
import weakref

import numpy as np

from .. import profiler
from ..errors import ArgumentError, DistributedError
from . import env as envmod
from .store import StoreClient, StoreServer, exchange
from .work import CapturedWork, EventWork, FutureWork

log = logging.getLogger(__name__)
BACKENDS = ("nccl", "cpu")
DEFAULT_TIMEOUT_S = 600.0
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_world: "World | None" = None
_atexit_registered = False


class _Pending:
    """A collective the watchdog waits for: its CUDA event (NCCL) or future (CPU); t0: when its
    timeout's clock started (queued, or later when the collectives before it finished)."""
    __slots__ = ("op", "seq", "t0", "nbytes", "event", "future", "reusable")

    def __init__(self, op, seq, t0, nbytes, event=None, future=None, reusable=False):
        self.op, self.seq, self.t0, self.nbytes = op, seq, t0, nbytes
        self.event, self.future, self.reusable = event, future, reusable

    def done(self) -> bool:
        return self.event.done if self.event is not None else self.future.done()

    def describe(self) -> str:
        return f"call #{self.seq} ({self.nbytes} bytes)"


class ProcessGroup:
    """Ranks that run collectives together. `ranks`: their global ranks, ascending; `rank`: this
    process's rank in the group (-1 when it is not a member); `size`: len(ranks)."""

    def __init__(self, world: "World", gid: int, ranks: tuple, transport, timeout: float):
        self.world, self.id, self.ranks, self.transport = world, gid, tuple(ranks), transport
        self.rank = self.ranks.index(world.rank) if world.rank in self.ranks else -1
        self.size, self.timeout, self.backend = len(self.ranks), timeout, world.backend
        self.error: DistributedError | None = None
        self.seq = 0
        self.destroyed = False
        self._pending: collections.deque = collections.deque()
        self._plock = threading.Lock()
        self._free_events: list = []
        self._dbg_p2p: dict = {}
        self._graphs = weakref.WeakSet()   # CUDAGraphs holding this group's captured collectives (_plock)
        self._graph_bytes = weakref.WeakKeyDictionary()   # ... and the bytes of those collectives

    def __repr__(self) -> str:
        return f"<ProcessGroup {self.id} {self.backend} ranks={list(self.ranks)} rank={self.rank}>"

    @property
    def device(self):
        """The CUDA device index the group's collectives run on (None for the cpu backend)."""
        return getattr(self.transport, "device", None)

    def group_rank(self, global_rank, what: str) -> int:
        """The group rank of global rank `global_rank` (argument `what`, an int; NumPy's too);
        ValueError when it is none."""
        if isinstance(global_rank, (bool, np.bool_)) or not isinstance(global_rank, numbers.Integral) \
                or int(global_rank) not in self.ranks:
            raise ArgumentError(f"{what}={global_rank!r} is not a rank of the group (its global ranks: "
                                f"{list(self.ranks)})")
        return self.ranks.index(int(global_rank))

    # -- failure state (shared with the watchdog) --
    def _prune(self) -> None:
        """Drop the completed collectives at the front of the pending queue (holding _plock)."""
        q = self._pending
        n = len(q)
        while q and q[0].done():
            p = q.popleft()
            if p.reusable:   # no Work handle holds its event
                self._free_events.append(p.event)
        if q and len(q) < n:   # the collectives run one after another: the new front's clock starts now,
            q[0].t0 = max(q[0].t0, time.monotonic())   # not when it was queued behind the others

    def pending_snapshot(self) -> list:
        """The collectives not known to be complete, oldest first (drops the completed ones)."""
        with self._plock:
            self._prune()
            return list(self._pending)

    def fail(self, message: str, op: str | None = None, lost_ranks: tuple = (), nccl_message: str | None = None):
        """Record the group's error (the first one wins) and abort its transport."""
        with self._plock:
            if self.error is not None:
                return self.error
            self.error = DistributedError(message, rank=self.world.rank, op=op, lost_ranks=lost_ranks,
                                          nccl_message=nccl_message)
        log.error("%s", self.error)
        self._release_graphs("failed", self.error, after_replays=True)
        try:
            self.transport.abort()
        except Exception as e:   # the error above is what the ranks need to see
            log.warning("aborting %r failed: %s", self, e)
        return self.error

    def _raise_if_failed(self, op: str) -> None:
        if self.error is not None:
            raise self.error

    def _fail_timeout(self, op: str, limit: float):
        raise self.fail(f"{op} did not complete within the timeout of {limit:g} s{self.world.lost_note(self)}", op=op)

    def lost_members(self) -> list[int]:
        return [r for r in self.ranks if r in self.world.lost and r != self.world.rank]

    def _check_usable(self, op: str) -> None:
        if self.destroyed:
            raise DistributedError(f"{self!r} was destroyed", rank=self.world.rank, op=op)
        self._raise_if_failed(op)
        if not self.world.lost and self.world.store_lost is None:
            return
        lost = self.lost_members()
        if lost or self.world.store_lost:
            raise self.fail(f"cannot start: {self.world.lost_text(lost)}", op=op, lost_ranks=tuple(lost))

    # -- running one collective --
    def run(self, op: str, nbytes: int, bus_factor: float, fn, async_op: bool, keep: tuple = (),
            check=None):
        """Run fn(where) as collective `op`: `where` is the CUDA stream (NCCL) or the store slot (CPU).
        check(): the dict of shapes and arguments the debug check compares across ranks.
        Returns a Work for async_op=True, else None."""
        if not isinstance(async_op, (bool, np.bool_)):   # ("no" would have run asynchronously)
            raise TypeError(f"{op}: async_op must be a bool (got {type(async_op).__name__} {async_op!r})")
        self._check_usable(op)
        self.seq += 1
        if check is not None and self.world.debug:
            self._debug_check(op, check())
        if self.backend == "nccl":
            return self._run_nccl(op, nbytes, bus_factor, fn, async_op, keep)
        return self._run_cpu(op, nbytes, bus_factor, fn, async_op, keep)

    def _event(self):
        """A CUDA event of the group's device, reused once the collective it marked completed."""
        with self._plock:
            if not self._free_events and len(self._pending) > 16:
                self._prune()
            if self._free_events:
                return self._free_events.pop()
        return self.transport.event()

    def _run_nccl(self, op, nbytes, bus_factor, fn, async_op, keep):
        t = self.transport
        stream = cur = t.current_stream()
        if t.capturing(cur):
            return self._capture_nccl(op, nbytes, fn, async_op, keep, cur)
        if async_op:
            start = self._event()
            start.record(cur)
            stream = t.comm_stream
            stream.wait_event(start)
        end = t.event() if async_op else self._event()   # a Work handle keeps its event
        try:
            with profiler._collective(f"nccl:{op}", nbytes, bus_factor, stream):
                with t.lock:
                    fn(stream)
        except DistributedError:
            raise
        except Exception as e:
            from .nccl import nccl_message
            msg = nccl_message(e)
            raise self.fail(f"NCCL call failed: {msg}{self.world.lost_note(self)}", op=op, nccl_message=msg) from e
        end.record(stream)
        with self._plock:
            self._pending.append(_Pending(op, self.seq, time.monotonic(), nbytes, event=end, reusable=not async_op))
        return EventWork(self, op, end, keep) if async_op else None

    def _capture_nccl(self, op, nbytes, fn, async_op, keep, cur):
        """Collective `op` recorded into the CUDA graph being captured on stream `cur` (NCCL
        records its kernels; async_op: on the communication stream, forked from and joined back
        to the capture by events). Nothing runs now, so nothing is pending: under cudakit.graph /
        CUDAGraph each replay checks the group first (a failed or lost group raises instead of
        launching) and is tracked by the watchdog as one pending "graph replay", whose timeout or
        lost rank aborts the communicator (the graph's NCCL kernels then return). The profiler
        does not record captured collectives (a replay is one launch)."""
        from .. import graphs
        if graphs.capturing() is None:   # a capture cudakit does not run: nothing would watch its replays,
            raise DistributedError(      # nor release it before the communicator goes (NCCL waits for it)
                f"{op} on a stream capturing a CUDA graph that cudakit.graph / cudakit.CUDAGraph did not start: "
                f"capture collectives through those", rank=self.world.rank, op=op)
        t = self.transport
        stream = cur
        if async_op:
            start = t.event()
            start.record(cur)
            stream = t.comm_stream
            stream.wait_event(start)
        try:
            with t.lock:
                fn(stream)
        except Exception as e:
            from .nccl import nccl_message
            msg = nccl_message(e)
            raise DistributedError(f"capturing {op} in a CUDA graph failed: {msg}", rank=self.world.rank, op=op,
                                   nccl_message=msg) from e
        cg = graphs.capturing()
        with self._plock:
            self._graphs.add(cg)
            self._graph_bytes[cg] = self._graph_bytes.get(cg, 0) + nbytes
        graphs.on_replay(lambda: self._check_usable("graph replay"), key=("distributed", id(self)), first=True)
        graphs.after_replay(lambda s, cg=weakref.ref(cg): self._watch_replay(s, self._graph_bytes.get(cg(), 0)),
                            key=("distributed", id(self)))
        if not async_op:
            return None
        end = t.event()
        end.record(stream)
        return CapturedWork(self, op, end, keep)

    def _release_graphs(self, why: str, error=None, after_replays: bool = False) -> None:
        """Free the CUDA graphs holding this group's captured collectives (they can no longer be
        replayed; a replay raises `error`, the group's failure, when given): NCCL's communicator
        destruction, and its abort, wait until every graph with its collectives is gone, so a
        live one would hang them. after_replays (a failure: replays may still run, their NCCL
        kernels waiting for a lost peer until the abort that follows makes them return): released
        on a thread of its own once the replays' events completed (at most 60 s), so that freeing
        a graph in flight cannot hold up the abort that ends it."""
        with self._plock:
            graphs = list(self._graphs)
            self._graphs.clear()
        if not graphs:
            return
        reason = f"it holds collectives of {self!r}, which {why}"
        if not after_replays:
            for cg in graphs:
                cg.release(reason, error)
            return
        with self._plock:
            running = [p.event for p in self._pending if p.op == "graph replay" and p.event is not None]

        device = self.device

        def release_when_done():
            if device is not None:   # this rank's GPU: a CUDA call here would otherwise make a context on GPU 0
                try:
                    from ..runtime import _cupy
                    _cupy.cupy().cuda.runtime.setDevice(device)
                except Exception:   # noqa: BLE001 -- the release works without it (one idle context more)
                    log.exception("cudakit distributed: setting the device of the graph release failed")
            deadline = time.monotonic() + 60.0
            while time.monotonic() < deadline:
                try:
                    if all(e.done for e in running):
                        break
                except Exception:   # noqa: BLE001 -- an event of an aborted context: nothing left to wait for
                    break
                time.sleep(0.01)
            for cg in graphs:
                cg.release(reason, error)
        threading.Thread(target=release_when_done, name="cudakit-graph-release", daemon=True).start()

    def _watch_replay(self, stream, nbytes) -> None:
        """The watchdog's entry for one replay of a graph holding this group's collectives (nbytes:
        theirs, summed)."""
        end = self._event()
        end.record(stream)
        with self._plock:
            self._pending.append(_Pending("graph replay", self.seq, time.monotonic(), nbytes, event=end,
                                          reusable=True))

    def _run_cpu(self, op, nbytes, bus_factor, fn, async_op, keep):
        from .cpu import Slot
        slot = Slot(self.transport.prefix, self.seq)

        begun = profiler._begin_host_collective(f"cpu:{op}", nbytes, bus_factor)   # (the profile active now)

        def job():
            self._raise_if_failed(op)
            t0 = time.perf_counter()
            try:
                fn(slot)
            except DistributedError as e:   # a store timeout or a lost store: the group is done
                with self._plock:
                    if self.error is None:
                        self.error = e
                raise
            profiler._end_host_collective(begun, t0, time.perf_counter())
        fut = self.transport.submit(job)
        if begun is not None:
            begun[1]._host = fut
        with self._plock:
            self._pending.append(_Pending(op, self.seq, time.monotonic(), nbytes, future=fut))
        work = FutureWork(self, op, fut, keep)
        if async_op:
            return work
        work.synchronize()
        return None

    # -- CUDAKIT_DISTRIBUTED_DEBUG=1 --
    def _debug_check(self, op: str, check: dict) -> None:
        """Exchange (op, shape, dtype, ...) with the other participants and raise DistributedError
        naming every rank's when they differ. Send and recv compare with their peer only, and only
        the receiver waits: a send publishes its description and goes on (the pattern of an
        asynchronous send to the next rank before a receive from the previous one deadlocked when
        each send waited for its receive's description), and its recv compares."""
        w = self.world
        peer = check.pop("peer", None)
        payload = json.dumps(check, sort_keys=True).encode()
        if peer is None:
            prefix, me, n, who = f"{w.ns}/dbg/{self.id}/{self.seq}", self.rank, self.size, list(self.ranks)
            got = [json.loads(b) for b in exchange(w.store, prefix, me, n, payload, self.timeout,
                                                   lambda: self._raise_if_failed(op))]
        else:
            src, dst = (self.rank, peer) if op == "send" else (peer, self.rank)
            k = self._dbg_p2p.get((src, dst), 0)
            self._dbg_p2p[(src, dst)] = k + 1
            key = f"{w.ns}/dbg/{self.id}/p2p/{src}-{dst}/{k}"
            who = [self.ranks[src], self.ranks[dst]]
            if op == "send":
                w.store.set(key, payload)
                return
            sent = w.store.get(key, self.timeout, lambda: self._raise_if_failed(op))
            w.store.delete(key)
            got = [json.loads(sent), json.loads(payload)]
        if peer is not None:   # send and recv: the same shape and dtype, whatever the op names
            for g in got:
                g.pop("op", None)
        if any(g != got[0] for g in got):
            def fmt(g):
                head = " ".join(x for x in (g.get("op"), g.get("dtype"),
                                            str(tuple(g["shape"])) if "shape" in g else None) if x)
                rest = ", ".join(f"{k}={v}" for k, v in sorted(g.items()) if k not in ("op", "dtype", "shape"))
                return head + (f" ({rest})" if rest else "")
            detail = "; ".join(f"rank {r} has {fmt(g)}" for r, g in zip(who, got))
            raise DistributedError(f"#{self.seq}: the ranks disagree (CUDAKIT_DISTRIBUTED_DEBUG=1): {detail}",
                                   rank=w.rank, op=op)

    # -- teardown --
    def _drain(self, limit: float) -> bool:
        deadline = time.monotonic() + limit
        while self.pending_snapshot():
            if time.monotonic() > deadline or self.error is not None:
                return False
            time.sleep(0.002)
        return True

    def _destroy(self) -> None:
        if self.destroyed or self.transport is None:
            self.destroyed = True
            return
        self.destroyed = True
        healthy = self.error is None and not self.lost_members() and self._drain(min(self.timeout, 60.0))
        self._release_graphs("was destroyed", self.error, after_replays=not healthy)
        try:
            if healthy:
                self.transport.destroy()
            else:
                self.transport.abort()
        except Exception as e:
            log.warning("tearing down %r: %s", self, e)


class World:
    """This process in the job: rank, the store, the groups, the ranks known to be gone."""

    def __init__(self, backend, rank, size, local_rank, local_size, timeout, debug):
        self.backend, self.rank, self.size = backend, rank, size
        self.local_rank, self.local_size, self.timeout, self.debug = local_rank, local_size, timeout, debug
        self.device = None
        self.server: StoreServer | None = None
        self.store: StoreClient | None = None
        self.watch_store: StoreClient | None = None
        self.store_host_rank: int | None = None
        self.ns = ""
        self.groups: dict[int, ProcessGroup] = {}
        self.next_gid = 0
        self.lost: dict[int, str] = {}
        self.left: set[int] = set()   # ranks of self.lost that left cleanly (destroy_process_group)
        self.store_lost: str | None = None
        self.watchdog = None
        self.default_group: ProcessGroup | None = None

    def note_lost(self, r: int, why: str, left: bool = False) -> None:
        """Rank r is gone; a later reason replaces an earlier one (the launcher's exit status comes
        after the store saw the connection close). left: it left cleanly (destroy_process_group),
        logged at INFO only: at the end of a job the ranks leave one after another, and a rank
        still tearing down would otherwise warn of each that left before it (a collective that
        waits on a rank that left still fails with the reason, _check_group)."""
        if r == self.rank or self.lost.get(r) == why:
            return
        if r not in self.lost or (r in self.left and not left):   # (a failure after a clean leave warns)
            (log.info if left else log.warning)("rank %d: rank %d is gone: %s", self.rank, r, why)
        if left:
            self.left.add(r)
        else:
            self.left.discard(r)
        self.lost[r] = why

    def note_store_lost(self, why: str) -> None:
        if self.store_lost is None:
            self.store_lost = why
            log.warning("rank %d: the store is gone: %s", self.rank, why)

    def lost_text(self, ranks) -> str:
        parts = [f"rank {r} is gone ({self.lost[r]})" for r in ranks]
        if self.store_lost:
            parts.append(f"the store is gone ({self.store_lost})")
        return "; ".join(parts) or "no rank is known to be gone"

    def lost_note(self, g: ProcessGroup) -> str:
        lost = g.lost_members()
        return f"; {self.lost_text(lost)}" if lost or self.store_lost else ""

    def close(self) -> None:
        if self.server is not None:   # (at once: a rank that already left may be joining the next job)
            self.server.closing()
        if self.watchdog is not None:
            self.watchdog.stop()
        for g in list(self.groups.values()):
            g._destroy()
        self.groups.clear()
        for c in (self.watch_store, self.store):
            if c is not None and not c.closed:
                try:
                    if c is self.store:
                        c.bye()
                except DistributedError:
                    pass
                c.close()
        if self.server is not None:   # the others may still need the store to finish: wait for them
            if not self.server.wait_for_clients_to_leave(min(self.timeout, 30.0)):
                log.warning("rank %d: closing the store while ranks %s are still connected", self.rank,
                            self.server.labelled_clients())
            self.server.close()


def _seconds(timeout) -> float:
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ArgumentError(f"timeout must be a positive number of seconds or a timedelta (got {timeout!r})")
    return float(timeout)


def _select_device(local_rank: int, local_size: int) -> int:
    from ..runtime import _cupy
    cp = _cupy.cupy()
    n = cp.cuda.runtime.getDeviceCount()
    if n >= local_size:
        dev = local_rank
    elif n == 1:
        dev = 0   # each rank sees its own GPU (srun --gpus-per-task=1, CUDA_VISIBLE_DEVICES per rank)
    else:
        raise DistributedError(f"{local_size} ranks on this node but {n} GPUs visible: each rank needs its own GPU "
                               "(lower --nproc-per-node, or check CUDA_VISIBLE_DEVICES)", op="init_process_group")
    cp.cuda.Device(dev).use()
    return dev


def init_process_group(backend: str = "nccl", init_method: str = "env://", world_size: int | None = None,
                       rank: int | None = None, timeout=DEFAULT_TIMEOUT_S) -> ProcessGroup:
    """Join the job; returns the default group (every rank).

    backend: "nccl" (CuPy arrays; needs a GPU per rank and CuPy's NCCL binding) or "cpu" (NumPy
    arrays through the store). init_method: "env://" (MASTER_ADDR/MASTER_PORT and the launcher's
    variables, see cudakit.distributed.env) or "tcp://host:port". world_size and rank override
    the environment's. timeout: seconds (or a timedelta) for reaching the store, for each value
    waited on in it, for NCCL's initialisation and for every collective (the watchdog's limit).

    Rank 0 serves the store on the port unless a launcher serves it (`cudakit run`). With NCCL
    the rank takes GPU local_rank (GPU 0 when it sees one GPU). Raises ArgumentError (a
    ValueError) for bad arguments or environment, DistributedError when the store cannot be
    reached in time, or a rank: with NCCL here (its initialisation waits for every rank), with
    the cpu backend at the first collective that needs it (this returns without waiting for them).
    """
    global _world, _atexit_registered
    if _world is not None:
        raise DistributedError("the process group is already initialised; call destroy_process_group() first",
                               rank=_world.rank, op="init_process_group")
    if backend not in BACKENDS:
        raise ArgumentError(f"backend must be one of {BACKENDS} (got {backend!r})")
    limit = _seconds(timeout)
    kind, host, port = envmod.parse_init_method(init_method)
    env = envmod.read_env()
    for name, v in (("rank", rank), ("world_size", world_size)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise ArgumentError(f"{name} must be an int (got {v!r})")
    rank = env.rank if rank is None and env else rank
    world_size = env.world_size if world_size is None and env else world_size
    if rank is None or world_size is None:
        raise ArgumentError("rank and world_size are unknown: launch with `cudakit run`, torchrun, mpirun or srun, "
                            "or pass rank= and world_size=")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ArgumentError(f"rank must be in [0, world_size) and world_size >= 1 (got rank={rank}, "
                            f"world_size={world_size})")
    same = env is not None and env.rank == rank and env.world_size == world_size
    local_rank, local_size = (env.local_rank, env.local_world_size) if same else (rank, world_size)
    if kind == "env":
        host = env.master_addr if same else None
        port = env.master_port if same else None
        import os
        host = host or os.environ.get("MASTER_ADDR", "").strip() or (None if world_size > 1 else "127.0.0.1")
        if port is None and os.environ.get("MASTER_PORT", "").strip():
            port = envmod._int(os.environ, "MASTER_PORT", "environment")
        if host is None or port is None:
            raise ArgumentError("init_method='env://' needs MASTER_ADDR and MASTER_PORT (the store's host and port): "
                                "set them, launch with `cudakit run`, or use init_method='tcp://host:port'")
    from .. import config
    w = World(backend, rank, world_size, local_rank, local_size, limit, config.settings().distributed_debug)
    try:
        if backend == "nccl":
            w.device = _select_device(local_rank, local_size)
        if rank == 0 and not (kind == "env" and same and env.store_hosted):
            bind = host if host in _LOOPBACK else ("::" if ":" in host else "")   # (IPv6 init_method: [addr])
            w.server = StoreServer(bind, port, one_job=True)
            w.store_host_rank = 0
        w.store = StoreClient(host, port, limit, rank)
        w.store.hello(str(rank))
        w.watch_store = StoreClient(host, port, limit, rank)
        w.ns = f"job{w.store.add(f'__init__/{rank}', 1)}"
        w.default_group = _new_group(w, tuple(range(world_size)), limit)
    except BaseException:
        w.close()
        raise
    from .watchdog import Watchdog
    w.watchdog = Watchdog(w)
    _world = w
    if not _atexit_registered:
        atexit.register(_at_exit)
        _atexit_registered = True
    log.info("rank %d of %d joined (%s, local rank %d, store %s:%s, device %s)", rank, world_size, backend,
             local_rank, host, port, w.device)
    return w.default_group


def _new_group(w: World, ranks: tuple, timeout: float) -> ProcessGroup:
    gid = w.next_gid
    w.next_gid += 1
    transport = None
    if w.rank in ranks:
        me, n = ranks.index(w.rank), len(ranks)
        label = f"group {gid} (ranks {list(ranks)})"
        if w.backend == "nccl":
            from . import nccl
            key = f"{w.ns}/g{gid}/nccl_id"
            if me == 0:
                w.store.set(key, nccl.new_unique_id())
            uid = w.store.get(key, timeout)
            transport = nccl.NcclTransport(uid, n, me, w.device, timeout, label)
            if me == 0:   # every member joined ncclCommInitRank, so every member read the id
                w.store.delete(key)
        else:
            from .cpu import CpuTransport
            holder: list = []
            transport = CpuTransport(w.store, n, me, f"{w.ns}/g{gid}", timeout,
                                     lambda: holder[0]._raise_if_failed("collective"))
        g = ProcessGroup(w, gid, ranks, transport, timeout)
        if w.backend == "cpu":
            holder.append(g)
        w.groups[gid] = g
        return g
    return ProcessGroup(w, gid, ranks, None, timeout)


def _require() -> World:
    if _world is None:
        raise DistributedError("the process group is not initialised: call "
                               "cudakit.distributed.init_process_group() first")
    return _world


def new_group(ranks=None, timeout=None) -> ProcessGroup:
    """A group of the given global ranks (default: all). Every rank of the job must call it, in
    the same order as the others, members or not; non-members get a group with rank -1 that
    refuses collectives. timeout: seconds, default the job's."""
    w = _require()
    if ranks is None:
        ranks = range(w.size)
    try:
        given = list(ranks)
    except TypeError:
        raise ArgumentError(f"ranks must be an iterable of ints (got {ranks!r})") from None
    if not all(isinstance(r, numbers.Integral) and not isinstance(r, (bool, np.bool_)) for r in given):
        raise ArgumentError(f"ranks must be an iterable of ints (got {ranks!r})")   # (0.5 was taken as 0)
    rs = sorted({int(r) for r in given})
    if not rs or rs[0] < 0 or rs[-1] >= w.size:
        raise ArgumentError(f"ranks must be non-empty and in [0, {w.size}) (got {list(ranks)})")
    return _new_group(w, tuple(rs), w.timeout if timeout is None else _seconds(timeout))


def resolve(group, op: str) -> ProcessGroup:
    """The group to run `op` on: `group`, or the default group for None."""
    w = _require()
    g = w.default_group if group is None else group
    if not isinstance(g, ProcessGroup):
        raise TypeError(f"group must be a ProcessGroup from new_group() or None (got {group!r})")
    if g.world is not w:
        raise DistributedError(f"{g!r} belongs to a destroyed process group", rank=w.rank, op=op)
    if g.rank < 0:
        raise DistributedError(f"rank {w.rank} is not a member of {g!r}", rank=w.rank, op=op)
    return g


def destroy_process_group(group=None) -> None:
    """Tear down `group`, or (None) every group, the watchdog and the store connection. Pending
    collectives of a healthy group finish first (at most the timeout); a failed group is aborted.
    Rank 0, when it serves the store, waits (at most 30 s) for the others to leave."""
    global _world
    w = _require()
    if group is not None and group is not w.default_group:
        g = group if isinstance(group, ProcessGroup) and group.rank < 0 else resolve(group, "destroy_process_group")
        g._destroy()
        w.groups.pop(g.id, None)
        return
    _world = None
    w.close()


def _at_exit() -> None:
    """A process that never called destroy_process_group: stop the watchdog and, if it serves the
    store, keep it up while the others still use it. Its connection closes without bye, so the
    other ranks see it as gone if they wait on it."""
    global _world
    w, _world = _world, None
    if w is None:
        return
    if w.watchdog is not None:
        w.watchdog.stop()
    if w.server is not None:
        w.server.closing()
        w.server.wait_for_clients_to_leave(min(w.timeout, 30.0), ignore=str(w.rank))
        w.server.close()


def is_initialized() -> bool:
    """Whether init_process_group ran (and destroy_process_group did not)."""
    return _world is not None


def _group_or_default(group) -> ProcessGroup:
    w = _require()
    if group is not None and not isinstance(group, ProcessGroup):
        raise TypeError(f"group must be a ProcessGroup from new_group() or None (got {group!r})")
    return w.default_group if group is None else group


def get_rank(group=None) -> int:
    """This process's rank in `group` (default: the job), -1 when not a member."""
    return _group_or_default(group).rank


def get_world_size(group=None) -> int:
    """The number of ranks of `group` (default: the job)."""
    return _group_or_default(group).size


def get_local_rank() -> int:
    """This process's rank on its node (the GPU it uses with NCCL)."""
    return _require().local_rank


def get_backend(group=None) -> str:
    """"nccl" or "cpu"."""
    return _require().backend


def default_group() -> ProcessGroup:
    """The group of every rank (what group=None means)."""
    return _require().default_group
