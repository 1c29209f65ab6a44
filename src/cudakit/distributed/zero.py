"""Optimizer state sharded across the ranks of a group (ZeRO stage 1): each rank keeps and steps
1/N of every parameter's optimizer state (and float32 master weights), not all of it.

    zero = dist.ZeroRedundancyOptimizer(params, lambda shards: cudakit.AdamW(shards, lr=3e-4))
    params = zero.params                    # views into flat buckets: use these in the model
    for step ...:
        grads = backward(...)               # this rank's gradients, params' shapes
        zero.step(grads)                    # reduce_scatter, this rank's shard stepped, all_gather

or, overlapping the reduce-scatters with the backward, zero.set_grad(name, g) as each gradient
is produced (a bucket's reduce_scatter starts on the communication stream once all of its
gradients are in, in bucket order, the backward's), then zero.step().

How: the parameters are moved into flat buckets (plan_buckets of data_parallel.py, one dtype a
bucket, each parameter at a 256-byte boundary), each padded to a multiple of the group size, so
that rank r owns the r-th contiguous chunk of every bucket. step() reduce-scatters each bucket's
gradients (the average over the ranks of rank r's chunk lands on rank r), steps the inner
optimizer, which was built over this rank's chunks only (1-D views into the buckets), and
all-gathers every bucket's chunks back, in place, so that every rank holds the updated
parameters. The bytes moved equal one all-reduce of the gradients; the optimizer's state takes
1/N of its memory on each rank. An elementwise optimizer (SGD, Adam, AdamW, cudakit's) steps a
chunk exactly as it would step the whole arrays; the padding (zeros, zero gradients) stays zero.
"""
from __future__ import annotations

import contextlib

from ..errors import ArgumentError, DeviceError, DTypeError, ShapeError
from . import collectives as coll
from .data_parallel import (
    ALIGN_BYTES,
    DEFAULT_BUCKET_BYTES,
    BucketOrder,
    check_same_parameters,
    _copy_bits,
    _padded,
    param_index,
    plan_buckets,
)
from .group import resolve


class ZeroRedundancyOptimizer:
    """`params` (a list of arrays, or a dict {name: array}; CuPy for NCCL, NumPy for the cpu
    backend; float dtypes; the same shapes on every rank) re-homed into flat buckets whose
    optimizer state is sharded across the group's ranks, and `make_optimizer(shards)` -> an
    optimizer over a list of 1-D arrays (this rank's chunks), whose step(grads) takes their
    gradients in that order (cudakit.SGD / Adam / AdamW; 16-bit parameters: pass
    master_weights=True, and the float32 master copies are sharded too).

    params: views into the buckets with the given shapes and dtypes (a list, or a dict with the
    same names; C-contiguous, whatever dense layout a given parameter had), holding the given
    values (broadcast from global rank `broadcast_from` first, None: no broadcast): the model
    must use these arrays from now on. grads: gradient views like
    params. A step's gradients come as step(grads), or set_grad(i, g) / mark_ready(i) for each
    (all of them: step() refuses a partial set), or written into grads before a bare step().
    average: the gradients are averaged over the ranks (else summed). bucket_bytes: the buckets'
    size (bytes, before padding); each bucket is one reduce_scatter and one all_gather a step.
    """

    def __init__(self, params, make_optimizer, group=None, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                 average: bool = True, broadcast_from: int | None = 0):
        g = resolve(group, "ZeroRedundancyOptimizer")
        if not callable(make_optimizer):
            raise TypeError(f"make_optimizer must be callable (got {type(make_optimizer).__name__})")
        self.group, self.average, self._g = group, average, g
        self.names = list(params) if isinstance(params, dict) else None
        given = [params[n] for n in self.names] if self.names is not None else list(params)
        arrays = [coll._array(g, p, f"params[{i}]", write=False, dense=True) for i, p in enumerate(given)]
        for i, p in enumerate(arrays):
            if not p.dtype.name.startswith(("float", "bfloat")):
                raise DTypeError(f"params[{i}] has dtype {p.dtype.name}; an optimizer needs a float dtype")
        check_same_parameters(g, arrays, "ZeroRedundancyOptimizer")   # (same padded buckets hid a mismatch)
        self.buckets = plan_buckets([p.nbytes for p in arrays], [p.dtype.name for p in arrays], bucket_bytes, 0)
        xp, n, r = coll._xp(g), g.size, g.rank
        with (g.transport.cp.cuda.Device(g.device) if g.backend == "nccl" else contextlib.nullcontext()):
            self._make_buckets(xp, arrays, n, r)
        self._bucket_of = {i: b for b, idx in enumerate(self.buckets) for i in idx}
        self._by_name = {n: i for i, n in enumerate(self.names or ())}
        self._order = BucketOrder(self.buckets, self._bucket_of, len(self._views))
        self._reset()
        if broadcast_from is not None:   # one broadcast a bucket, not one a parameter
            for flat in self._flat:
                coll.broadcast(flat, broadcast_from, group)
        self.optimizer = make_optimizer(list(self._shards))

    def _make_buckets(self, xp, arrays, n: int, r: int) -> None:
        """The flat parameter and gradient buckets, this rank's chunks of them, and the views."""
        self._flat, self._grad_flat, self._shards, self._grad_shards = [], [], [], []
        views, grad_views = [None] * len(arrays), [None] * len(arrays)
        for idx in self.buckets:
            dt = arrays[idx[0]].dtype
            offsets, off = [], 0
            for i in idx:
                offsets.append(off)
                off += _padded(arrays[i].nbytes) // dt.itemsize
            unit = n * max(1, ALIGN_BYTES // dt.itemsize)   # every rank's chunk starts 256-byte aligned
            total = -(-max(off, 1) // unit) * unit
            flat, gflat = xp.zeros(total, dtype=dt), xp.zeros(total, dtype=dt)
            for i, o in zip(idx, offsets):
                p = arrays[i]
                views[i] = flat[o:o + p.size].reshape(p.shape)
                grad_views[i] = gflat[o:o + p.size].reshape(p.shape)
                _copy_bits(views[i], p)
            chunk = total // n
            self._flat.append(flat)
            self._grad_flat.append(gflat)
            self._shards.append(flat[r * chunk:(r + 1) * chunk])
            self._grad_shards.append(xp.zeros(chunk, dtype=dt))
        self._views, self._grad_views = views, grad_views

    @property
    def params(self):
        """The parameters, as views into the buckets (a dict when params was one)."""
        return dict(zip(self.names, self._views)) if self.names is not None else list(self._views)

    @property
    def grads(self):
        """The gradient buffers step() reduces, like params."""
        return dict(zip(self.names, self._grad_views)) if self.names is not None else list(self._grad_views)

    def _reset(self) -> None:
        self._order.reset()
        self._works: list = []   # the reduce_scatters started this step, in bucket order

    def _index(self, i) -> int:
        return param_index(i, len(self._views), self._by_name)

    def _check_grad(self, i: int, grad) -> None:
        dst = self._grad_views[i]
        if type(grad) is not type(dst):
            raise DeviceError(f"grads[{i}] is a {type(grad).__name__}; params[{i}] is a {type(dst).__name__}")
        if self._g.backend == "nccl" and grad.data.device_id != dst.data.device_id:
            raise DeviceError(f"grads[{i}] is on cuda:{grad.data.device_id}; this rank's buckets are on "
                              f"cuda:{dst.data.device_id}")
        if tuple(grad.shape) != tuple(dst.shape) or grad.dtype != dst.dtype:
            raise ShapeError(f"grads[{i}] is {grad.dtype} {tuple(grad.shape)}; params[{i}] is {dst.dtype} "
                             f"{tuple(dst.shape)}")
        if self._order.ready[i]:
            raise ArgumentError(f"gradient {i} was already given in this step (step() ends the step)")

    def set_grad(self, i, grad) -> None:
        """Give `grad` (params[i]'s shape and dtype; i an index or a name) as this step's gradient i:
        copied into its bucket on the current stream; once every gradient of the bucket (and of
        the buckets before it) is in, the bucket's reduce_scatter starts, asynchronously (the
        communication stream, ordered after the copies), overlapping what the caller does next."""
        i = self._index(i)
        self._check_grad(i, grad)
        _copy_bits(self._grad_views[i], grad)
        self._mark(i)

    def mark_ready(self, i) -> None:
        """Gradient i (an index, or a name) was written into grads[i] directly (on the current
        stream): as set_grad, without the copy."""
        i = self._index(i)
        if self._order.ready[i]:
            raise ArgumentError(f"gradient {i} was already given in this step (step() ends the step)")
        self._mark(i)

    def _mark(self, i: int) -> None:
        if self._order.mark(i):
            self._launch_ready()

    def _launch_ready(self, all_: bool = False) -> None:
        op = "avg" if self.average else "sum"
        for b in self._order.startable(all_):
            self._works.append(coll.reduce_scatter(self._grad_shards[b], self._grad_flat[b], op, self.group,
                                                   async_op=True))

    def shard_elements(self) -> int:
        """How many elements of parameters (padding included) this rank's optimizer steps."""
        return sum(int(s.size) for s in self._shards)

    def step(self, grads=None) -> None:
        """One optimizer step of every parameter and the end of the step: `grads` (params' shapes
        and dtypes, a list or a dict like params, all checked before any is copied; None: those
        given by set_grad, and the gradient buffers as written for the rest) copied into the
        buckets; every bucket not started yet is reduce-scattered (averaged); once they are done
        (the current stream waits), this rank's chunks are stepped by the inner optimizer and
        all-gathered back into the parameters on every rank. Collective: every rank calls it."""
        if grads is not None:
            if self.names is not None:
                if not isinstance(grads, dict) or set(grads) != set(self.names):
                    have = set(grads) if isinstance(grads, dict) else None
                    raise ArgumentError("step: grads must be a dict with the parameters' names" + (
                        f" (missing {sorted(set(self.names) - have)}, unknown {sorted(have - set(self.names))})"
                        if have is not None else f" (got a {type(grads).__name__})"))
                given = [grads[n] for n in self.names]
            else:
                if isinstance(grads, dict) or not isinstance(grads, (list, tuple)):
                    raise ArgumentError(f"step: grads must be a list of arrays, as params was (got {type(grads).__name__})")
                given = list(grads)
            if len(given) != len(self._grad_views):
                raise ArgumentError(f"step: {len(given)} gradients for {len(self._grad_views)} parameters")
            for i, gr in enumerate(given):   # every check before any copy
                self._check_grad(i, gr)
            for i in reversed(range(len(given))):   # the backward's order: buckets start as they fill
                _copy_bits(self._grad_views[i], given[i])
                self._mark(i)
        elif any(self._order.ready) and not all(self._order.ready):   # some given, some not: most likely a bug
            missing = [self.names[i] if self.names else i for i, r in enumerate(self._order.ready) if not r]
            for w in self._works:   # what started still completes; the step is abandoned
                w.wait()
            self._reset()
            raise ArgumentError(f"step: gradients {missing} were not given this step (set_grad, or write grads[i] "
                                f"and mark_ready(i)); nothing was stepped")
        self._launch_ready(all_=True)
        for w in self._works:
            w.wait()
        self._reset()
        self.optimizer.step(list(self._grad_shards))
        for flat, shard in zip(self._flat, self._shards):
            coll.all_gather(flat, shard, self.group)
