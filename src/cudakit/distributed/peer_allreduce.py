"""All-reduce of fixed buffers between the two GPUs of a two-rank group on one host, moved by
the GPUs' copy engines over NVLink / PCIe peer access instead of NCCL's kernels.

Why: NCCL's all-reduce runs as kernels that hold SMs for as long as the transfer lasts. Under a
backward pass (data parallel: each bucket's all-reduce overlapping the rest of the backward) those
SMs are missing from the backward's GEMMs: with the GPT example on two H100s the backward ran
0.36-0.7 ms longer with its buckets reducing beside it than alone. Here the bytes travel by
cudaMemcpyAsync (copy engines, no SM) and only the sum of two halves is a kernel (memory-bound,
short), so the backward keeps its SMs.

Memory: one allocation per rank (cudaMalloc, shared with the peer by CUDA IPC) holds every
bucket, a receive area of half each bucket's size, and the flags (uint32, two per bucket). The
ranks exchange the IPC handles through the group's store once.

One bucket's all-reduce, rank r of {0, 1}, counter c (the bucket's launches so far, the same on
both ranks), on the communication stream, nothing on the host waits:
  1. copy my values of the peer's half into the peer's receive area        (copy engine)
  2. write c into the peer's flag 0 of the bucket                          (cuStreamWriteValue32)
  3. wait until my flag 0 >= c: the peer's values of my half are here      (cuStreamWaitValue32)
  4. my half = (my half + received) * scale (scale 1/2 for "avg")         (kernel)
  5. copy my reduced half into the peer's bucket                           (copy engine)
  6. write c into the peer's flag 1; 7. wait until my flag 1 >= c.
Stream order makes every write precede its flag (stream memory operations order after earlier
work with a memory barrier), and each buffer is written again only after the peer's wait that
proves the previous reader done (step 7 of a launch precedes step 1 of the next). The waits use no
CU_STREAM_WAIT_VALUE_FLUSH: they rely on the peer link delivering a copy's writes before the flag
written after it (NVLink and PCIe peer writes from one stream arrive in order; checked against NCCL's
results on two H100s over NVLink, tests/gpu/test_distributed_gpu.py).
Failure: the waits have no timeout of their own; the group's watchdog fails a collective pending
past the timeout (or with a lost peer) and the transport's abort calls release(), which writes a
value far ahead of every count into this rank's flags so that a stream stuck in a wait goes on (the
group is failed by then: its next call raises DistributedError).
"""
from __future__ import annotations

import ctypes
import logging
import os
import socket

import numpy as np

from ..runtime import _cupy

log = logging.getLogger(__name__)

ALIGN = 256
_IPC_LAZY_PEER = 1          # cudaIpcMemLazyEnablePeerAccess
_MEMCPY_DEFAULT = 4         # cudaMemcpyDefault (unified addressing)
_WAIT_GEQ = 0               # CU_STREAM_WAIT_VALUE_GEQ
_CTYPES = {"float16": "ck_half", "bfloat16": "ck_bf16", "float32": "float", "float64": "double"}

_REDUCE = r"""
template <typename T>
__global__ void ck_peer_add(T* __restrict__ mine, const T* __restrict__ got, long long n, float scale)
{
  // mine[i] = (mine[i] + got[i]) * scale in the accumulation type: the sum of two ranks' values
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    typedef typename ck_traits<T>::acc A;
    A s = (ck_traits<T>::load(mine[i]) + ck_traits<T>::load(got[i])) * (A)scale;
    mine[i] = ck_traits<T>::store(s);
  }
}
"""


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class _Driver:
    """cuStreamWriteValue32 / cuStreamWaitValue32 of libcuda (stream memory operations)."""

    def __init__(self):
        lib = ctypes.CDLL("libcuda.so.1")
        self.write = self.wait = None
        for suffix in ("_v2", ""):
            w, v = getattr(lib, "cuStreamWriteValue32" + suffix, None), getattr(lib, "cuStreamWaitValue32" + suffix, None)
            if w is not None and v is not None:
                for f in (w, v):
                    f.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
                    f.restype = ctypes.c_int
                self.write, self.wait = w, v
                break
        if self.write is None:
            raise OSError("libcuda has no cuStreamWriteValue32 / cuStreamWaitValue32")

    def call(self, f, stream_ptr: int, addr: int, value: int, flags: int = 0) -> None:
        r = f(ctypes.c_void_p(stream_ptr), ctypes.c_uint64(addr), ctypes.c_uint32(value), ctypes.c_uint(flags))
        if r:
            raise RuntimeError(f"CUDA driver error {r} in a stream memory operation")


_driver = None


_exchanges: dict = {}   # group id -> store exchanges made (the same count on both ranks: unique keys)


def _exchange(group, what: str, payload: bytes) -> bytes:
    """The peer's payload for this rank's (through the group's store, once per call on each rank)."""
    from .store import exchange
    w = group.world
    n = _exchanges[group.id] = _exchanges.get(group.id, 0) + 1
    return exchange(w.store, f"{w.ns}/peer/{group.id}/{what}/{n}", group.rank, 2, payload,
                    group.timeout)[1 - group.rank]


def why_unavailable(group, wanted: bool = True) -> str | None:
    """Why this group cannot use the copy-engine all-reduce (None: it can): two ranks of the NCCL
    backend whose GPUs can access each other, stream memory operations, `wanted` on both ranks,
    and not turned off (CUDAKIT_PEER_ALLREDUCE=0, or NCCL_P2P_DISABLE=1 as the two-node simulation
    sets). Collective for a two-rank NCCL group: both ranks call it, in the same order (it exchanges
    their GPUs and answers, so both decide alike)."""
    global _driver
    reasons = [] if wanted else ["not wanted"]
    if group.backend != "nccl" or group.size != 2:
        return "needs the NCCL backend and a group of two ranks"
    if os.environ.get("CUDAKIT_PEER_ALLREDUCE", "1").strip() == "0":
        reasons.append("CUDAKIT_PEER_ALLREDUCE=0")
    if os.environ.get("NCCL_P2P_DISABLE", "0").strip() not in ("", "0"):
        reasons.append("NCCL_P2P_DISABLE is set")
    cp = _cupy.cupy()
    try:
        if _driver is None:
            _driver = _Driver()
    except OSError as e:
        reasons.append(str(e))
    dev = group.transport.device
    buses = {cp.cuda.Device(i).pci_bus_id.lower(): i for i in range(cp.cuda.runtime.getDeviceCount())}
    mine = next(b for b, i in buses.items() if i == dev)
    peer = _exchange(group, "gpu", f"{socket.gethostname()}|{mine}|{0 if reasons else 1}".encode())
    host, bus, ok = peer.decode().rsplit("|", 2)
    if not reasons and ok != "1":
        reasons.append("the peer cannot use it")
    if not reasons and host != socket.gethostname():
        reasons.append("the peer runs on another host")
    peer_dev = buses.get(bus.lower())
    if not reasons and peer_dev is None:
        reasons.append(f"the peer's GPU ({bus}) is not visible to this process")
    if not reasons and (peer_dev == dev or not cp.cuda.runtime.deviceCanAccessPeer(dev, peer_dev)):
        reasons.append(f"cuda:{dev} cannot access the peer's GPU cuda:{peer_dev}")
    # the verdicts, exchanged: a check only one rank fails (its GPUs visible differently) must turn
    # the path off on both, or one would wait in PeerAllReduce's exchange while the other runs NCCL
    theirs = _exchange(group, "verdict", ("; ".join(reasons) or "ok").encode()).decode()
    if reasons:
        return "; ".join(reasons)
    return None if theirs == "ok" else f"the peer: {theirs}"


def layout(counts, itemsizes) -> tuple:
    """(bucket byte offsets, split points in elements, receive-area byte offsets, flags' byte offset,
    total bytes) of one rank's shared memory: bucket b at [offset, offset + n * item), 256-byte
    aligned, its halves [0, split) (rank 0's) and [split, n) (rank 1's) split at a 16-byte boundary;
    then one receive area per bucket, each the size of the larger half; then two uint32 flags per
    bucket."""
    offsets, splits, recv = [], [], []
    off = rec = 0
    for n, item in zip(counts, itemsizes):
        per16 = max(1, 16 // item)
        splits.append((n // 2) // per16 * per16)
        offsets.append(off)
        off += _aligned(n * item)
    for n, h, item in zip(counts, splits, itemsizes):
        recv.append(off + rec)
        rec += _aligned(max(h, n - h) * item)
    flags = off + rec
    return offsets, splits, recv, flags, flags + _aligned(8 * max(1, len(counts)))


class SetupFailed(RuntimeError):
    """The copy-engine path could not be set up on one of the two ranks (both raise it: the caller
    falls back to NCCL on both)."""


class PeerAllReduce:
    """The buckets of one GradSync (`counts` elements of `dtypes`, one entry per bucket) in memory
    the peer maps, and their all-reduce by copy engines. Collective to make: both ranks of the
    two-rank `group` construct it with the same buckets, in the same order."""

    def __init__(self, group, counts, dtypes):
        cp = _cupy.cupy()
        rt = cp.cuda.runtime
        self.group, self.cp = group, cp
        self.dtypes = [np.dtype(d) if not hasattr(d, "itemsize") else d for d in dtypes]
        self.counts = [int(n) for n in counts]
        self.device = group.transport.device
        self.rank = group.rank
        self.offsets, self.splits, self.recv, self.flags_off, self.nbytes = layout(
            self.counts, [dt.itemsize for dt in self.dtypes])
        self.base = self.peer_base = None
        # each step's outcome is exchanged, so that a failure on one rank (out of memory, a handle
        # that does not open) turns the path off on both instead of leaving one waiting for the other
        try:
            with cp.cuda.Device(self.device):
                self.base = rt.malloc(self.nbytes)
                # zeroed and finished before the peer can write into it (cudaMemset is asynchronous
                # for device memory: a late one would wipe the peer's first values and flags)
                s = cp.cuda.Stream(non_blocking=True)
                rt.memsetAsync(self.base, 0, self.nbytes, s.ptr)
                s.synchronize()
                mine = b"OK" + bytes(rt.ipcGetMemHandle(self.base))
        except Exception as e:   # noqa: BLE001 -- reported to the peer, then raised as SetupFailed
            mine = b"ER" + f"{type(e).__name__}: {e}".encode()
        peer = _exchange(group, "mem", mine)
        self._settle(mine, peer, "allocating the shared buckets")
        try:
            with cp.cuda.Device(self.device):
                self.peer_base = rt.ipcOpenMemHandle(peer[2:], _IPC_LAZY_PEER)
            mine = b"OK"
        except Exception as e:   # noqa: BLE001
            mine = b"ER" + f"{type(e).__name__}: {e}".encode()
        self._settle(mine, _exchange(group, "opened", mine), "opening the peer's buckets")
        self.launches = [0] * len(self.counts)
        self._kernels: dict = {}
        self._closed = False
        group.transport.abort_hooks.append(self.release)
        group.transport.close_hooks.append(self.close)

    def _settle(self, mine: bytes, peer: bytes, what: str) -> None:
        """Go on when both ranks' step succeeded ("OK..."); else free what this rank holds and raise
        SetupFailed on both (each saw both outcomes)."""
        if mine[:2] == b"OK" and peer[:2] == b"OK":
            return
        why = "; ".join(f"{who}: {m[2:].decode(errors='replace')}" for who, m in (("this rank", mine), ("the peer", peer))
                        if m[:2] != b"OK")
        rt = self.cp.cuda.runtime
        with self.cp.cuda.Device(self.device):
            if self.peer_base is not None:
                rt.ipcCloseMemHandle(self.peer_base)
            if self.base is not None:
                rt.free(self.base)
        self.base = self.peer_base = None
        raise SetupFailed(f"{what} failed ({why})")

    def buffer(self, b: int):
        """Bucket b as a CuPy array (its dtype, its count), in the shared memory."""
        cp = self.cp
        mem = cp.cuda.UnownedMemory(self.base + self.offsets[b], self.counts[b] * self.dtypes[b].itemsize, self,
                                    self.device)
        return cp.ndarray((self.counts[b],), self.dtypes[b], cp.cuda.MemoryPointer(mem, 0))

    def _flag(self, base: int, b: int, phase: int) -> int:
        return base + self.flags_off + 8 * b + 4 * phase

    def all_reduce(self, b: int, average: bool, stream) -> None:
        """Enqueue bucket b's all-reduce (sum, or the mean with average=True) on `stream`."""
        rt = self.cp.cuda.runtime
        n, h, item = self.counts[b], self.splits[b], self.dtypes[b].itemsize
        mine = (0, h) if self.rank == 0 else (h, n)
        theirs = (h, n) if self.rank == 0 else (0, h)
        self.launches[b] += 1
        c = self.launches[b]
        s = stream.ptr
        bucket, peer_bucket = self.base + self.offsets[b], self.peer_base + self.offsets[b]
        if theirs[1] > theirs[0]:   # 1. my values of the peer's half, into its receive area
            rt.memcpyAsync(self.peer_base + self.recv[b], bucket + theirs[0] * item, (theirs[1] - theirs[0]) * item,
                           _MEMCPY_DEFAULT, s)
        _driver.call(_driver.write, s, self._flag(self.peer_base, b, 0), c)         # 2.
        _driver.call(_driver.wait, s, self._flag(self.base, b, 0), c, _WAIT_GEQ)    # 3.
        if mine[1] > mine[0]:       # 4. my half += the peer's values of it
            self._add(b, bucket + mine[0] * item, self.base + self.recv[b], mine[1] - mine[0], average, stream)
            # 5. my reduced half, into the peer's bucket
            rt.memcpyAsync(peer_bucket + mine[0] * item, bucket + mine[0] * item, (mine[1] - mine[0]) * item,
                           _MEMCPY_DEFAULT, s)
        _driver.call(_driver.write, s, self._flag(self.peer_base, b, 1), c)         # 6.
        _driver.call(_driver.wait, s, self._flag(self.base, b, 1), c, _WAIT_GEQ)    # 7.

    def _add(self, b: int, dst: int, src: int, n: int, average: bool, stream) -> None:
        from ..runtime.compiler import _launch_function
        name = self.dtypes[b].name
        f = self._kernels.get(name)
        if f is None:
            f = self._kernels[name] = _add_kernel(name)._function(self.device)
        threads = 256
        blocks = min(-(-n // threads), 132 * 8)
        _launch_function(f"ck_peer_add<{_CTYPES[name]}>", f, (blocks, 1, 1), (threads, 1, 1),
                         (np.uint64(dst), np.uint64(src), np.int64(n), np.float32(0.5 if average else 1.0)), 0,
                         stream)

    def release(self) -> None:
        """Write a value far ahead of every launch count into this rank's flags (on a stream of its
        own): a communication stream waiting for a lost or failed peer goes on. The waits compare
        cyclically ((int32)(flag - c) >= 0), so the value is 0x40404040 (bytes 0x40), not all ones
        (-1 in that comparison). Called by the transport's abort."""
        if self._closed:
            return
        cp = self.cp
        try:
            with cp.cuda.Device(self.device):
                s = cp.cuda.Stream(non_blocking=True)
                cp.cuda.runtime.memsetAsync(self.base + self.flags_off, 0x40, self.nbytes - self.flags_off, s.ptr)
                s.synchronize()
        except Exception as e:   # noqa: BLE001 -- best effort on a failing group
            log.warning("releasing the peer all-reduce flags failed: %s", e)

    def close(self, barrier: bool = False) -> None:
        """Unmap the peer's memory and free this rank's: at the group's destruction, or (barrier=True,
        GradSync.close: collective) once both ranks' streams are done with it, so that neither frees
        memory the other's copies may still write."""
        if self._closed:
            return
        self._closed = True
        rt = self.cp.cuda.runtime
        for hooks, hook in ((self.group.transport.abort_hooks, self.release),
                            (self.group.transport.close_hooks, self.close)):
            if hook in hooks:
                hooks.remove(hook)
        try:
            with self.cp.cuda.Device(self.device):
                rt.deviceSynchronize()
            if barrier:
                _exchange(self.group, "close", b"1")
            with self.cp.cuda.Device(self.device):
                rt.ipcCloseMemHandle(self.peer_base)
                rt.free(self.base)
        except Exception as e:   # noqa: BLE001
            log.warning("closing the peer all-reduce failed: %s", e)


_add_kernels: dict = {}


def _add_kernel(dtype_name: str):
    k = _add_kernels.get(dtype_name)
    if k is None:
        from ..kernels._common import cuda_source
        from ..runtime.compiler import compile_module
        names = [f"ck_peer_add<{c}>" for c in _CTYPES.values()]
        m = compile_module(cuda_source("_preamble.cuh") + _REDUCE, name_expressions=names,
                           source_name="peer_allreduce.cu")
        for d, c in _CTYPES.items():
            _add_kernels[d] = m.get_kernel(f"ck_peer_add<{c}>")
        k = _add_kernels[dtype_name]
    return k
