"""The watchdog: a daemon thread that turns a hung or failed collective into a DistributedError.

Every `poll` seconds it looks at each group's pending collectives (their completion events, or
the CPU backend's futures), NCCL's asynchronous error, and the store's record of lost ranks
("__failed__/<rank>", written when a rank's store connection closes without
destroy_process_group, or by the launcher with the rank's exit status). On
- a collective pending longer than the group's timeout,
- an NCCL asynchronous error,
- a lost rank of the group while one of its collectives is pending (after a grace of LOST_GRACE_S,
  in which a collective the peer finished before it left still completes),
it records the error in the group and aborts the group's communicator, so the kernels of the
pending collectives return, and the next call of the group (a collective, Work.wait(),
is_completed(), barrier) raises the error in the caller's thread.
"""
from __future__ import annotations

import logging
import threading
import time

from ..errors import DistributedError
from .store import FAILED_PREFIX, LEFT_PREFIX

log = logging.getLogger(__name__)
LOST_GRACE_S = 2.0


class Watchdog:
    def __init__(self, world, poll: float = 0.2, store_poll: float = 1.0):
        self.world, self.poll, self.store_poll = world, poll, store_poll
        self._stop = threading.Event()
        self._lost_since: dict[int, float] = {}   # group id -> when a lost member was first seen while pending
        self._thread = threading.Thread(target=self._run, name="cudakit-distributed-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        if self.world.device is not None:   # this rank's GPU: a CUDA call here would otherwise make a context on GPU 0
            try:
                from ..runtime import _cupy
                _cupy.cupy().cuda.runtime.setDevice(self.world.device)
            except Exception:   # noqa: BLE001 -- the watchdog works without it (one idle context more)
                log.exception("cudakit distributed watchdog: setting the device failed")
        next_store = 0.0
        while not self._stop.wait(self.poll):
            try:
                now = time.monotonic()
                if now >= next_store:
                    next_store = now + self.store_poll
                    self._read_lost_ranks()
                for g in list(self.world.groups.values()):
                    self._check_group(g, time.monotonic())
            except Exception:   # the watchdog must outlive any one bad poll
                log.exception("cudakit distributed watchdog: poll failed")

    def _read_lost_ranks(self) -> None:
        w = self.world
        try:
            failed = w.watch_store.list(FAILED_PREFIX)
            left = w.watch_store.list(LEFT_PREFIX)
        except DistributedError as e:
            if w.store_host_rank is not None and w.store_host_rank != w.rank:
                w.note_lost(w.store_host_rank, f"the store it served is gone ({e})")
            else:
                w.note_store_lost(str(e))
            return
        for key, why in failed.items():
            w.note_lost(int(key[len(FAILED_PREFIX):]), why.decode(errors="replace"))
        for key in left:
            r = int(key[len(LEFT_PREFIX):])
            if r not in w.lost and FAILED_PREFIX + str(r) not in failed:
                w.note_lost(r, "it left the job (destroy_process_group)", left=True)

    def _check_group(self, g, now: float) -> None:
        if g.error is not None:
            return
        pending = g.pending_snapshot()
        if not pending:
            self._lost_since.pop(g.id, None)
            return
        oldest = pending[0]
        if now - oldest.t0 > g.timeout:
            g.fail(f"{oldest.describe()} did not complete within the timeout of {g.timeout:g} s "
                   f"(watchdog){g.world.lost_note(g)}", op=oldest.op)
            return
        err = g.transport.async_error()
        if err is not None:
            g.fail(f"{oldest.describe()} failed: NCCL reported {err}{g.world.lost_note(g)}", op=oldest.op,
                   nccl_message=err)
            return
        lost = g.lost_members()
        if lost or g.world.store_lost:
            first = self._lost_since.setdefault(g.id, now)
            if now - first >= LOST_GRACE_S:
                g.fail(f"{oldest.describe()} cannot complete: {g.world.lost_text(lost)}", op=oldest.op,
                       lost_ranks=tuple(lost))
