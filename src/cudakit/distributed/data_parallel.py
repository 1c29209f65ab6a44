"""Data-parallel gradient synchronisation for hand-written training loops.

    sync = GradSync(params)                  # broadcasts the parameters from rank 0
    for step ...:
        ... forward ...
        for i in reversed(range(len(params))):   # the backward, last layer first
            sync.set_grad(i, grad_i)             # or write sync.grads[i] and call sync.mark_ready(i)
        grads = sync.wait()                      # averaged over the ranks
        optimizer.step(params, grads)

The gradients live in flat buckets of about `bucket_bytes` (25 MiB), filled in reverse parameter
order (the order a backward pass produces them), one dtype per bucket; the last buckets taper down
to `tail_bucket_bytes` (1 MiB) so that the all-reduce left after the backward is short. When every gradient of a
bucket is marked ready the bucket's all-reduce starts on the group's communication stream (after
an event on the current stream), so it overlaps the rest of the backward pass. Buckets start in
bucket order on every rank whatever the order of marking (NCCL needs the same order on every
rank): a bucket ready before its predecessors waits for them.
"""
from __future__ import annotations

import hashlib
import json
import numbers

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError, DeviceError, DistributedError, DTypeError, ShapeError
from . import collectives as coll
from .group import resolve

DEFAULT_BUCKET_BYTES = 25 * 2**20
DEFAULT_TAIL_BUCKET_BYTES = 2**20   # the last bucket's cap; the taper doubles it up to bucket_bytes
ALIGN_BYTES = 256   # each gradient's offset in its bucket: 16-byte vector loads and NCCL's alignment


def plan_buckets(nbytes, dtypes, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                 tail_bucket_bytes: int = DEFAULT_TAIL_BUCKET_BYTES) -> list[list[int]]:
    """Group parameters into buckets: lists of parameter indices, in launch order (the backward's:
    the last parameters first), each of one dtype and at most `bucket_bytes` (bytes, counting each
    gradient's alignment padding) unless a single gradient is larger (it gets a bucket of its own).

    The gradients the backward produces last (the first parameters) go into a taper of smaller
    buckets: `tail_bucket_bytes` for the last one, twice that for the one before, and so on up to
    `bucket_bytes`. Only the last bucket's all-reduce has no backward left to hide under, so it is
    kept small; the ones before it start while the backward still runs. tail_bucket_bytes=0: no
    taper, every bucket up to bucket_bytes.

    nbytes: bytes of each gradient; dtypes: their dtype names (same length)."""
    nbytes, dtypes = list(nbytes), list(dtypes)
    if len(nbytes) != len(dtypes):
        raise ArgumentError(f"nbytes and dtypes differ in length ({len(nbytes)} vs {len(dtypes)})")
    for name, v, lo in (("bucket_bytes", bucket_bytes, 1), ("tail_bucket_bytes", tail_bucket_bytes, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ArgumentError(f"{name} must be an int >= {lo} (got {v!r})")
    # the taper, from the first parameter on (the last gradients of the backward)
    tail: list[list[int]] = []
    open_: dict[str, tuple[list[int], int, int]] = {}   # dtype -> (bucket, bytes so far, its cap)
    caps: dict[str, int] = {}                            # dtype -> the cap of its next bucket
    start = 0
    for i in range(len(nbytes)) if tail_bucket_bytes else ():
        size, dt = _padded(nbytes[i]), dtypes[i]
        cur = open_.get(dt)
        if cur is not None and cur[1] + size <= cur[2]:
            cur[0].append(i)
            open_[dt] = (cur[0], cur[1] + size, cur[2])
            start = i + 1
            continue
        cap = caps.get(dt, tail_bucket_bytes)
        if cap >= bucket_bytes:   # the taper has reached full-size buckets: the rest are planned below
            break
        b = [i]
        tail.append(b)
        open_[dt] = (b, size, cap)
        caps[dt] = cap * 2
        start = i + 1
    # the rest, from the last parameter down (the backward's first gradients)
    buckets: list[list[int]] = []
    full: dict[str, tuple[list[int], int]] = {}   # dtype -> (bucket, bytes so far)
    for i in reversed(range(start, len(nbytes))):
        size = _padded(nbytes[i])
        cur = full.get(dtypes[i])
        if cur is not None and cur[1] + size <= bucket_bytes:
            cur[0].append(i)
            full[dtypes[i]] = (cur[0], cur[1] + size)
            continue
        b = [i]
        buckets.append(b)
        full[dtypes[i]] = (b, size)
    return buckets + [b[::-1] for b in reversed(tail)]


def _padded(n: int) -> int:
    return -(-n // ALIGN_BYTES) * ALIGN_BYTES


def check_same_parameters(g, arrays: list, op: str) -> None:
    """Raise DistributedError on every rank of group `g` (resolved) unless every rank passed
    parameters of the same shapes and dtypes in the same order (one all-gather of a digest of
    them, and a host wait for it): a broadcast or an all-reduce over lists that differ would
    exchange mismatched bytes, or wait on a rank that has nothing more to send until the timeout."""
    desc = json.dumps([[list(map(int, a.shape)), a.dtype.name] for a in arrays]).encode()
    mine = np.concatenate([[len(arrays)], np.frombuffer(hashlib.sha256(desc).digest(), np.int64)])
    xp = coll._xp(g)
    everyone = xp.empty((g.size, mine.size), np.int64)
    coll.all_gather(everyone, xp.asarray(mine), g)
    everyone = everyone.get() if hasattr(everyone, "get") else everyone
    if not (everyone == everyone[0]).all():
        kinds = {}
        for i, row in enumerate(everyone):
            kinds.setdefault(row.tobytes(), []).append((g.ranks[i], int(row[0])))
        desc = "; ".join(f"global rank{'s' if len(v) > 1 else ''} {', '.join(str(r) for r, _ in v)}: {v[0][1]} "
                         f"parameters, layout {k[8:12].hex()}" for k, v in kinds.items())
        raise DistributedError(f"the ranks' parameter lists differ in count, shapes, dtypes or order ({desc}); "
                               f"every rank must pass the same parameters in the same order", rank=g.world.rank, op=op)


def broadcast_parameters(params, src: int = 0, group=None) -> None:
    """Copy every array of `params` from global rank `src` to every rank of the group (in place),
    after checking that every rank passed the same shapes and dtypes in the same order
    (check_same_parameters: DistributedError on every rank otherwise, not a broadcast of
    mismatched bytes or a wait until the timeout)."""
    params = list(params.values()) if isinstance(params, dict) else list(params)
    g = resolve(group, "broadcast_parameters")
    params = [coll._array(g, p, f"params[{i}]", dense=True) for i, p in enumerate(params)]
    check_same_parameters(g, params, "broadcast_parameters")
    for p in params:
        _broadcast_in_place(g, p, src, group)


def _broadcast_in_place(g, p, src: int, group) -> None:
    """coll.broadcast of parameter p; one in another dense layout than C (channels-last) goes
    through a C-contiguous copy, written back element by element (ranks may differ in layout)."""
    if p.flags.c_contiguous:
        coll.broadcast(p, src, group)
        return
    tmp = coll._xp(g).ascontiguousarray(p)
    coll.broadcast(tmp, src, group)
    p[...] = tmp


class GradSync:
    """Buckets of gradient buffers for `params` (a list of arrays, or a dict {name: array} in the
    order of the forward pass: CuPy for NCCL, NumPy for the cpu backend; float dtypes) and their
    all-reduce, overlapped with the backward pass.

    grads[i]: the gradient buffer of params[i] (a view into its bucket, params[i]'s shape and
    dtype, C-contiguous: a parameter in another dense layout, channels-last say, is taken and
    broadcast through a C copy, and an optimizer copies its gradient into its layout); with a
    dict, the methods take names as well as indices and wait() returns a dict.
    average: divide the sum by the group size (an "avg" all-reduce). broadcast_from: the global
    rank whose parameters every rank starts with (None: no broadcast). bucket_bytes and
    tail_bucket_bytes: see plan_buckets (the gradients of the first parameters, which the backward
    produces last, go into smaller buckets so that little is left to all-reduce after it).
    copy=True (NCCL): set_grad keeps the gradient, and when its bucket is complete one launch
    (kernels.gather_copy) copies all of the bucket's gradients into it, in place of a copy kernel
    per gradient (host time: one launch a bucket, not one a gradient); gradients it cannot take
    (not C-contiguous, not 16-byte aligned) are copied at once. copy=False: set_grad adopts a
    C-contiguous gradient instead of copying it into its bucket: the bucket's all-reduce then runs
    in place on the arrays it was given (one NCCL group call), and wait() returns them; no copy
    kernel, no second copy of the gradients' bytes. Either way a gradient given to set_grad is read
    up to its bucket's launch (at the latest in wait()), on the stream current then: do not write
    to it before then, and produce the gradients on that stream (or order yours before it).
    Two ranks on one host whose GPUs reach each other (copy=True, peer=True): the buckets live in
    memory both map and are all-reduced by the GPUs' copy engines (peer_allreduce.py), not NCCL's
    kernels, so the backward they overlap keeps its SMs (CUDAKIT_PEER_ALLREDUCE=0 or peer=False keep
    NCCL); transport_note says which ran and, for NCCL, why.
    CUDA graphs: a step whose set_grad / wait calls are captured (cudakit.graph, cudakit.CUDAGraph)
    records the bucket copies and NCCL all-reduces into the graph, and each replay runs them again,
    overlapping the replayed backward; the watchdog tracks each replay. Make the GradSync outside
    the capture (it allocates and talks to the other ranks); it needs peer=False on two ranks of one host (the copy-engine
    path counts steps in flags a graph would freeze; capturing it raises GraphCaptureError). Constructing a GradSync on a two-rank NCCL group is
    collective (both ranks, in the same order: they agree on the path through the store); its
    shared memory lives until close() (collective) or the group's destruction."""

    def __init__(self, params, group=None, bucket_bytes: int = DEFAULT_BUCKET_BYTES, average: bool = True,
                 broadcast_from: int | None = 0, tail_bucket_bytes: int = DEFAULT_TAIL_BUCKET_BYTES,
                 copy: bool = True, peer: bool = True):
        g = resolve(group, "GradSync")
        for name, v in (("copy", copy), ("peer", peer)):
            if not isinstance(v, bool):
                raise ArgumentError(f"{name} must be a bool (got {v!r})")
        self.group, self.average, self.copy = group, average, copy
        self._g = g
        self.names = list(params) if isinstance(params, dict) else None
        if self.names is not None:
            params = [params[n] for n in self.names]
        self._by_name = {n: i for i, n in enumerate(self.names or ())}
        self.params = [coll._array(g, p, f"params[{i}]", dense=True) for i, p in enumerate(params)]
        for i, p in enumerate(self.params):
            if not p.dtype.name.startswith(("float", "bfloat")):
                raise DTypeError(f"params[{i}] has dtype {p.dtype.name}; gradients need a float dtype")
        check_same_parameters(g, self.params, "GradSync")   # (buckets of other lists would mix gradients)
        self.buckets = plan_buckets([p.nbytes for p in self.params], [p.dtype.name for p in self.params],
                                    bucket_bytes, tail_bucket_bytes)
        xp = coll._xp(g)
        self._gather = xp.__name__ != "numpy"   # CuPy buckets: one gather_copy launch per bucket
        self.buffers, self.grads = [], [None] * len(self.params)
        self._bucket_of = [0] * len(self.params)
        self._offset = [0] * len(self.params)     # byte offset of each gradient in its bucket
        layout = []   # per bucket: (dtype, offsets of its gradients in elements, its length)
        for idx in self.buckets:
            dt = self.params[idx[0]].dtype
            offsets, off = [], 0
            for i in idx:
                offsets.append(off)
                off += _padded(self.params[i].nbytes) // dt.itemsize
            layout.append((dt, offsets, off))
        self._peer = None   # two ranks on one host: the buckets' all-reduce by copy engines (peer_allreduce.py)
        self.transport_note = "NCCL" if g.backend == "nccl" else "the TCP store (cpu backend)"
        if g.backend == "nccl" and g.size == 2 and layout:
            from . import peer_allreduce
            why = peer_allreduce.why_unavailable(g, wanted=copy and peer)
            if why is None:
                try:
                    self._peer = peer_allreduce.PeerAllReduce(g, [n for _, _, n in layout],
                                                              [d for d, _, _ in layout])
                    self.transport_note = "copy engines (peer memory)"
                except peer_allreduce.SetupFailed as e:   # raised on both ranks: both take NCCL
                    why = str(e)
            if why is not None:
                self.transport_note = f"NCCL ({why})"
        for b, (idx, (dt, offsets, off)) in enumerate(zip(self.buckets, layout)):
            item = dt.itemsize
            buf = self._peer.buffer(b) if self._peer is not None else xp.zeros(off, dtype=dt)
            self.buffers.append(buf)
            for i, o in zip(idx, offsets):
                p = self.params[i]
                self.grads[i] = buf[o:o + p.size].reshape(p.shape)
                self._bucket_of[i] = b
                self._offset[i] = o * item
        # what _gatherable compares each gradient with
        self._array_type = type(self.buffers[0]) if self.buffers else None
        self._device_id = self._align = None
        if self._gather and self.buffers:
            from ..kernels import gather_copy
            self._device_id, self._align = self.buffers[0].data.device_id, gather_copy.ALIGN
        self._order = BucketOrder(self.buckets, self._bucket_of, len(self.params))
        self._reset()
        if broadcast_from is not None:   # (the lists checked above)
            for p in self.params:
                _broadcast_in_place(g, p, broadcast_from, group)

    def _reset(self) -> None:
        self._order.reset()
        self._works: list = []   # in bucket order
        self._adopted: dict = {}  # i -> the caller's gradient array (copy=False)
        self._pending: dict = {}  # bucket -> [(i, gradient)] to gather into it at its launch (copy=True)

    def set_grad(self, i, grad) -> None:
        """Give `grad` (params[i]'s shape and dtype) as gradient i and mark it ready: it is copied
        into grads[i] on the current stream, with the rest of its bucket when the bucket is
        complete (copy=False: `grad` itself is taken where it is C-contiguous on the group's
        device; its all-reduce then runs in place on it). Do not write to `grad` before wait().
        i: an index, or a name when params was a dict."""
        i = self._index(i)
        want = self.grads[i]
        if not hasattr(grad, "shape") or not hasattr(grad, "dtype"):
            raise ArgumentTypeError(f"grad {i} must be an array (got {type(grad).__name__})")
        if tuple(grad.shape) != want.shape or grad.dtype != want.dtype:
            raise ShapeError(f"grad {i} is {grad.dtype} {tuple(grad.shape)}; params[{i}] is "
                             f"{want.dtype} {tuple(want.shape)}")
        self._check_markable(i)
        if not self.copy and self._adoptable(grad):
            self._adopted[i] = grad
        elif self._gather and self._gatherable(grad, i):
            self._pending.setdefault(self._bucket_of[i], []).append((i, grad))
        else:
            _copy_bits(want, grad)
        self._mark(i)

    def _gatherable(self, grad, i) -> bool:
        """gather_copy.eligible for a CuPy array on the buckets' device, with one look at its memory
        (this runs for every gradient of every step: 53 a step in the GPT example)."""
        if type(grad) is not self._array_type:
            return False
        mem = grad.data
        return (mem.device_id == self._device_id and grad.flags.c_contiguous
                and not (mem.ptr | self._offset[i]) % self._align)

    def _adoptable(self, grad) -> bool:
        try:
            coll._array(self._g, grad, "grad")
        except (DeviceError, DTypeError, ShapeError):
            return False
        return True

    def mark_ready(self, i) -> None:
        """Gradient i (an index, or a name) is written (on the current stream). Starts its bucket's
        all-reduce when the bucket is complete (and every earlier bucket has started)."""
        i = self._index(i)
        self._check_markable(i)
        self._mark(i)

    def _mark(self, i: int) -> None:
        """Gradient i is in (checked by _check_markable): start the buckets now complete."""
        if self._order.mark(i):
            self._launch_ready()

    def _check_markable(self, i: int) -> None:
        """Gradient i is not marked yet in this step, and its bucket has not started its all-reduce
        (wait_for() starts buckets with gradients still unmarked): a gradient given later would be
        left out of it."""
        if self._order.ready[i]:
            raise ArgumentError(f"gradient {i} was already marked ready in this step (call wait() to end the step)")
        b = self._bucket_of[i]
        if b < self._order.next:
            raise ArgumentError(f"gradient {i}'s bucket {b} already started its all-reduce in this step (wait_for() "
                                f"starts every bucket): give gradients before wait_for(), or call wait() to end the step")

    def _launch_ready(self, all_: bool = False) -> None:
        op = "avg" if self.average else "sum"
        for b in self._order.startable(all_):
            idx = self.buckets[b]
            pending = self._pending.pop(b, None)
            if pending:   # the bucket's kept gradients, in one launch on the current stream
                from ..kernels import gather_copy
                gather_copy.gather_copy(self.buffers[b], [self._offset[i] for i, _ in pending],
                                        [a for _, a in pending])
            if self._adopted and any(i in self._adopted for i in idx):   # in place on the arrays given
                arrays = [self._adopted.get(i, self.grads[i]) for i in idx]
                self._works.append(coll.all_reduce_coalesced(arrays, op, self.group, async_op=True))
            elif self._peer is not None:
                from ..graphs import GraphCaptureError, capturing
                if capturing() is not None:
                    raise GraphCaptureError("GradSync: the copy-engine all-reduce (two ranks on one host) cannot be "
                                            "captured in a CUDA graph (its flags count steps); make the GradSync "
                                            "with peer=False to capture NCCL's all-reduces")
                self._works.append(self._peer_all_reduce(b))
            else:
                self._works.append(coll.all_reduce(self.buffers[b], op, self.group, async_op=True))

    def _peer_all_reduce(self, b: int):
        """Bucket b's all-reduce by the copy engines, as a collective of the group (its events,
        watchdog, profiler record and debug check)."""
        buf, peer, avg = self.buffers[b], self._peer, self.average
        return self._g.run("peer_all_reduce", buf.nbytes, coll._bus("all_reduce", 2),
                           lambda s: peer.all_reduce(b, avg, s), True, (buf,),
                           lambda: {"op": "peer_all_reduce", "bucket": b, **coll._desc(buf)})

    @property
    def launched(self) -> int:
        """How many buckets' all-reduces have started in this step."""
        return self._order.next

    def wait(self):
        """End the step: start the buckets not started yet (gradients never marked count as written:
        whatever their buffers hold), make the current stream wait for every bucket (NCCL; the CPU
        backend blocks), and return grads, now reduced over the group."""
        self._launch_ready(all_=True)
        for w in self._works:
            w.wait()
        grads = [self._adopted.get(i, g) for i, g in enumerate(self.grads)] if self._adopted else self.grads
        self._reset()
        return dict(zip(self.names, grads)) if self.names is not None else grads

    def wait_for(self, params):
        """Make the current stream wait for the all-reduces of the buckets holding `params` (indices
        or names), starting every bucket not started yet (gradients never marked count as written),
        and return grads as wait() does, without ending the step: what an optimizer step over those
        parameters may read while the other buckets still reduce (wait() ends the step). NumPy
        backend: blocks until those buckets are reduced."""
        buckets = sorted({self._bucket_of[self._index(i)] for i in params})   # checked before anything starts
        self._launch_ready(all_=True)
        for b in buckets:
            self._works[b].wait()
        grads = [self._adopted.get(i, g) for i, g in enumerate(self.grads)] if self._adopted else self.grads
        return dict(zip(self.names, grads)) if self.names is not None else list(grads)

    def bucket_params(self, b: int) -> list:
        """The parameters of bucket b (names when params was a dict, else indices), in bucket order;
        b = -1: the last bucket, whose all-reduce starts after the backward's last gradient."""
        idx = self.buckets[b]
        return [self.names[i] for i in idx] if self.names is not None else list(idx)

    def close(self) -> None:
        """Release the memory the copy-engine path shares with the peer (two ranks on one host; a
        no-op otherwise). Collective: both ranks call it, after wait(); grads and buffers must not be
        used afterwards. Without it that memory lives until the group is destroyed."""
        if self._peer is not None:
            self._peer.close(barrier=True)
            self._peer = None
            self.buffers, self.grads = [], [None] * len(self.params)

    def grad(self, i):
        """The gradient buffer of parameter i (an index, or a name)."""
        return self.grads[self._index(i)]

    def _index(self, i) -> int:
        return param_index(i, len(self.params), self._by_name)


def param_index(i, n: int, by_name: dict) -> int:
    """Parameter `i` of n as an index: an int in [0, n), or a name of by_name ({name: index},
    empty when the parameters came as a list); ValueError naming what is accepted otherwise."""
    if isinstance(i, str) and i in by_name:
        return by_name[i]
    if isinstance(i, numbers.Integral) and not isinstance(i, bool):
        i = int(i)   # (NumPy's integers too)
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
        names = f" or one of the {len(by_name)} names" if by_name else ""
        raise ArgumentError(f"parameter must be an int in [0, {n}){names} (got {i!r})")
    return i


class BucketOrder:
    """One step's gradients against their buckets (GradSync's and ZeroRedundancyOptimizer's):
    which gradients are in (ready), how many each bucket still misses, and which buckets' collectives
    may start: a bucket once all of its gradients are in and every bucket before it has started
    (the backward fills them in that order). next: the first bucket not started."""

    def __init__(self, buckets, bucket_of, n: int):
        self.buckets, self.bucket_of, self.n = buckets, bucket_of, n
        self.reset()

    def reset(self) -> None:
        self.ready = [False] * self.n
        self.missing = [len(b) for b in self.buckets]
        self.next = 0

    def mark(self, i: int) -> bool:
        """Gradient i is in: whether the next bucket may start now."""
        self.ready[i] = True
        self.missing[self.bucket_of[i]] -= 1
        return self.next < len(self.buckets) and not self.missing[self.next]

    def startable(self, all_: bool = False):
        """The buckets that may start (all_: every one not started yet), in order; each counts as
        started once the caller's loop body for it has run (not if that raised)."""
        while self.next < len(self.buckets) and (all_ or self.missing[self.next] == 0):
            yield self.next
            self.next += 1


_UINT = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


def _copy_bits(dst, src) -> None:
    """dst[...] = src for arrays of one dtype, copied as unsigned integers of its size: a pure copy
    that needs no elementwise kernel of the float dtype (CuPy has none for bfloat16). A copy kernel,
    not cudaMemcpyAsync: with the GPT example's 53 device-to-device memcpys a step, its
    data-parallel backward ran 0.37 ms longer than with no copies at all (H100, 2026-11-26,
    scripts/gpu_check_distributed.sh DP_AB, one run, the no-copy run also without the bucket taper).
    GradSync takes this path only for the gradients gather_copy cannot take, and on NumPy."""
    u = _UINT[dst.dtype.itemsize]
    dst.view(u)[...] = src.view(u) if src.flags.c_contiguous else src.copy().view(u)
