"""Handles of collectives started with async_op=True."""
from __future__ import annotations

import math
import numbers
import time

_POLL_S = 0.002   # how often a host-blocking wait looks at the op and the group's error


def wait_limit(group, timeout) -> float:
    """The seconds a host-blocking wait may take: `timeout`, a number > 0 (inf: no limit); None: no
    limit of the wait's own, since the watchdog fails the group when a collective runs longer than
    the group's timeout from when the ones queued before it finished (a wait for the last of many
    queued collectives, each quick, may take longer than that). Checked before anything waits: a
    wait that times out fails the group (its op may still be in flight, as torch.distributed's
    NCCL watchdog aborts the communicator), so a bad value must not get that far."""
    from ..errors import ArgumentError, ArgumentTypeError
    if timeout is None:
        return math.inf
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise ArgumentTypeError(f"timeout must be a number of seconds or None (got {type(timeout).__name__} "
                                f"{timeout!r})")
    t = float(timeout)
    if not t > 0 or math.isnan(t):
        raise ArgumentError(f"timeout must be > 0 seconds (got {timeout!r})")
    return t


class Work:
    """An asynchronous collective. wait() orders the caller after it; is_completed() says
    whether it finished. Both raise the group's DistributedError once the op (or the group)
    failed, so a waiting rank learns of a lost peer instead of hanging."""

    def __init__(self, group, op: str, keep: tuple = ()):
        self.group, self.op = group, op
        self._keep = keep   # the arrays the op reads or writes stay alive until it completes

    def is_completed(self) -> bool:
        """True when the collective has finished (non-blocking)."""
        self.group._raise_if_failed(self.op)
        done = self._done()
        if done:
            self._keep = ()
        return done

    def wait(self, timeout: float | None = None) -> bool:
        """Order the caller after the collective; see the subclasses. Returns True."""
        raise NotImplementedError

    def synchronize(self, timeout: float | None = None) -> None:
        """Block the host until the collective finished, at most `timeout` s (default: until the
        watchdog's limit, wait_limit); raises DistributedError on failure or timeout, which fails
        the group."""
        limit = wait_limit(self.group, timeout)
        deadline = time.monotonic() + limit
        while not self.is_completed():
            if time.monotonic() > deadline:
                self.group._fail_timeout(self.op, limit)
            time.sleep(_POLL_S)

    def _done(self) -> bool:
        raise NotImplementedError


class EventWork(Work):
    """A collective on the communication stream (NCCL): wait() makes the current CuPy stream wait
    for it (no host blocking); synchronize() blocks the host."""

    def __init__(self, group, op: str, event, keep: tuple = ()):
        super().__init__(group, op, keep)
        self.event = event

    def _done(self) -> bool:
        return self.event.done

    def wait(self, timeout: float | None = None) -> bool:
        """Make the current stream wait for the collective (returns at once); `timeout` is not
        used (the watchdog bounds the op)."""
        self.group._raise_if_failed(self.op)
        self.group.transport.current_stream().wait_event(self.event)
        self._keep = ()   # later frees on the current stream are ordered after the op
        return True


class FutureWork(Work):
    """A collective running on the group's worker thread (CPU backend): wait() blocks the host."""

    def __init__(self, group, op: str, future, keep: tuple = ()):
        super().__init__(group, op, keep)
        self.future = future

    def _done(self) -> bool:
        if self.future.done():
            self.future.result()   # raises the op's error
            return True
        return False

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the collective finished, at most `timeout` s (default: wait_limit's)."""
        self.synchronize(timeout)
        return True

    def synchronize(self, timeout: float | None = None) -> None:
        """Block until the collective finished (waking at once when it does), at most `timeout` s
        (default: wait_limit's); raises DistributedError on failure or timeout, which fails the
        group."""
        import concurrent.futures as cf
        limit = wait_limit(self.group, timeout)
        deadline = time.monotonic() + limit
        while True:
            self.group._raise_if_failed(self.op)
            try:
                self.future.result(timeout=min(0.1, max(deadline - time.monotonic(), 0.0)))
                self._keep = ()
                return
            except cf.TimeoutError:
                if time.monotonic() > deadline:
                    self.group._fail_timeout(self.op, limit)


class CapturedWork(EventWork):
    """A collective recorded into a CUDA graph (async_op=True while capturing): wait(), inside the
    same capture, joins it back into the captured stream. It runs with each replay, so it has no
    completion of its own to ask about: is_completed() and synchronize(), and wait() once the
    capture is over, raise (time or wait for the replay instead)."""

    def _refuse(self):
        from ..graphs import GraphCaptureError
        return GraphCaptureError(f"{self.op} was captured in a CUDA graph: it runs with each replay; wait for "
                                 f"the replay (its stream or an event after it), not for the captured op")

    def _done(self) -> bool:
        raise self._refuse()

    def wait(self, timeout: float | None = None) -> bool:
        from ..graphs import capturing
        if capturing() is None:
            raise self._refuse()
        return super().wait(timeout)
