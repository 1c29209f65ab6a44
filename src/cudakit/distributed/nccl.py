"""The NCCL transport: CuPy arrays, through CuPy's binding (cupy.cuda.nccl).

Every method enqueues on the CUDA stream it is given and returns without waiting. The group
(group.py) picks the stream, records the events the watchdog and Work handles wait on, and turns
failures into DistributedError.
"""
from __future__ import annotations

import threading

from ..errors import DistributedError
from .collectives import dtype_name
from ..runtime import _cupy

# NCCL's enums (nccl.h; stable since NCCL 2.10, which added ncclAvg and ncclBfloat16)
NCCL_DTYPES = {"int32": 2, "int64": 4, "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}
NCCL_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
_STATUS = {1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError", 4: "ncclInvalidArgument",
           5: "ncclInvalidUsage", 6: "ncclRemoteError (a peer failed or the network broke)", 7: "ncclInProgress"}


def _code(dt) -> int:
    """NCCL's enum of a (validated) dtype, by its cached name (collectives.dtype_name)."""
    return NCCL_DTYPES[dtype_name(dt)]


def nccl_message(exc: BaseException) -> str:
    """NCCL's message from an exception of CuPy's binding (CuPy's NcclError cannot name the
    statuses past 5 and raises KeyError(status) instead)."""
    status = getattr(exc, "status", None)
    if status is None and isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], int):
        status = exc.args[0]
        return f"{_STATUS.get(status, 'NCCL error')} (status {status})"
    text = str(exc)
    return f"{text} (status {status})" if status is not None else f"{type(exc).__name__}: {text}"


def nccl_module():
    """cupy.cuda.nccl, or DistributedError saying how to install it."""
    cp = _cupy.cupy()
    try:
        from cupy.cuda import nccl
    except ImportError as e:
        raise DistributedError(f"CuPy {cp.__version__} has no NCCL binding ({e}); install NCCL: pip install "
                               "'cudakit[cuda13]' (nvidia-nccl-cu13; [cuda12]: nvidia-nccl-cu12)",
                               op="init_process_group") from None
    if not getattr(nccl, "available", False):
        raise DistributedError("CuPy's NCCL binding is present but libnccl could not be loaded; install "
                               "nvidia-nccl-cu13 (or -cu12), the NCCL wheel of cudakit's cuda extras",
                               op="init_process_group")
    return nccl


def new_unique_id() -> bytes:
    """A fresh ncclUniqueId (128 bytes)."""
    uid = nccl_module().get_unique_id()
    return bytes((c + 256) % 256 for c in uid)


class NcclTransport:
    """One NCCL communicator of `size` ranks on CUDA device `device`, this process being `rank`."""

    name = "nccl"

    def __init__(self, unique_id: bytes, size: int, rank: int, device: int, timeout: float, label: str):
        self.cp = _cupy.cupy()
        self.nccl = nccl_module()
        self.size, self.rank, self.device = size, rank, device
        self.comm = self._init_comm(unique_id, timeout, label)
        with self.cp.cuda.Device(device):
            self.comm_stream = self.cp.cuda.Stream(non_blocking=True)
            self._one = self.cp.zeros(1, dtype=self.cp.int32)   # barrier's buffer
        self.lock = threading.Lock()   # held by every call into the communicator (group.py)
        self.abort_hooks: list = []    # called by abort() first (peer_allreduce.PeerAllReduce.release)
        self.close_hooks: list = []    # called by destroy() first (peer_allreduce.PeerAllReduce.close)
        self._abort_lock, self._aborting, self._aborted = threading.Lock(), False, threading.Event()

    def _init_comm(self, unique_id: bytes, timeout: float, label: str):
        """ncclCommInitRank blocks until every rank joined: run it on a thread so a missing rank
        becomes an error after `timeout` instead of a hang."""
        # CuPy 14 takes the id as bytes (seen on the H100 image, 2026-11-26); CuPy 13 as a tuple of
        # signed chars
        forms = (bytes(unique_id), tuple(b - 256 if b > 127 else b for b in unique_id))
        box: list = []

        def make():
            try:
                return self.nccl.NcclCommunicator(self.size, forms[0], self.rank)
            except TypeError:
                return self.nccl.NcclCommunicator(self.size, forms[1], self.rank)

        def init():
            try:
                # set, not `with Device(...)`: leaving that block would make this fresh thread's
                # previous device, GPU 0, current again, and CUDA 12+ creates a context there
                # (every rank but 0 held 518 MiB on GPU 0, nvidia-smi on an x2 H100, 2026-11-27)
                self.cp.cuda.runtime.setDevice(self.device)
                box.append(make())
            except BaseException as e:   # handed to the caller's thread
                box.append(e)
        t = threading.Thread(target=init, name="cudakit-nccl-init", daemon=True)
        t.start()
        t.join(timeout)
        if not box:
            raise DistributedError(f"ncclCommInitRank of {label} ({self.size} ranks) did not finish within "
                                   f"{timeout:g} s: a rank did not join", rank=self.rank,
                                   op="init_process_group")
        if isinstance(box[0], BaseException):
            raise DistributedError(f"ncclCommInitRank of {label} failed: {nccl_message(box[0])}", rank=self.rank,
                                   op="init_process_group", nccl_message=nccl_message(box[0])) from box[0]
        return box[0]

    # -- streams and events --
    def current_stream(self):
        """The current CuPy stream of the group's device (whichever device is current)."""
        return self.cp.cuda.get_current_stream(self.device)

    def capturing(self, stream) -> bool:
        """Whether `stream` is capturing a CUDA graph (then collectives are recorded, not run)."""
        is_capturing = getattr(stream, "is_capturing", None)   # CuPy's Stream.is_capturing()
        if is_capturing is not None:
            return bool(is_capturing())
        return bool(self.cp.cuda.runtime.streamIsCapturing(stream.ptr))

    def event(self):
        with self.cp.cuda.Device(self.device):
            return self.cp.cuda.Event(disable_timing=True)

    # -- the collectives (arrays validated, contiguous, on self.device) --
    def all_reduce(self, arrays, op: str, stream) -> None:
        s, o = stream.ptr, NCCL_OPS[op]
        if len(arrays) == 1:
            a = arrays[0]
            self.comm.allReduce(a.data.ptr, a.data.ptr, a.size, _code(a.dtype), o, s)
            return
        self.nccl.groupStart()
        try:
            for a in arrays:
                self.comm.allReduce(a.data.ptr, a.data.ptr, a.size, _code(a.dtype), o, s)
        finally:
            self.nccl.groupEnd()

    def broadcast(self, a, root: int, stream) -> None:
        self.comm.broadcast(a.data.ptr, a.data.ptr, a.size, _code(a.dtype), root, stream.ptr)

    def all_gather(self, out, inp, stream) -> None:
        self.comm.allGather(inp.data.ptr, out.data.ptr, inp.size, _code(inp.dtype), stream.ptr)

    def reduce_scatter(self, out, inp, op: str, stream) -> None:
        self.comm.reduceScatter(inp.data.ptr, out.data.ptr, out.size, _code(out.dtype),
                                NCCL_OPS[op], stream.ptr)

    def reduce(self, a, root: int, op: str, stream) -> None:
        self.comm.reduce(a.data.ptr, a.data.ptr, a.size, _code(a.dtype), NCCL_OPS[op], root, stream.ptr)

    def send(self, a, peer: int, stream) -> None:
        self.comm.send(a.data.ptr, a.size, _code(a.dtype), peer, stream.ptr)

    def recv(self, a, peer: int, stream) -> None:
        self.comm.recv(a.data.ptr, a.size, _code(a.dtype), peer, stream.ptr)

    def barrier(self, stream) -> None:
        self.comm.allReduce(self._one.data.ptr, self._one.data.ptr, 1, NCCL_DTYPES["int32"], NCCL_OPS["sum"],
                            stream.ptr)

    # -- failure handling --
    def async_error(self) -> str | None:
        """NCCL's asynchronous error of the communicator (a peer failed, a network error), or None."""
        with self.lock:
            if not self.comm.comm:
                return None
            try:
                self.comm.check_async_error()
            except Exception as e:
                return nccl_message(e)
        return None

    def abort(self) -> None:
        """ncclCommAbort: the kernels of pending collectives return, the communicator is unusable.
        Called from the watchdog: waits at most 5 s for a call that holds the communicator (an
        enqueue stuck connecting to a dead peer is what the abort must end)."""
        with self._abort_lock:   # once: a second ncclCommAbort (the watchdog's, then the exit's) would
            first = not self._aborting   # race the first; later callers wait for it, at most 10 s
            self._aborting = True
        if not first:
            self._aborted.wait(10.0)
            return
        try:
            for hook in self.abort_hooks:   # streams waiting on a peer's flag go on
                hook()
            got = self.lock.acquire(timeout=5.0)
            try:
                self.comm.abort()
            finally:
                if got:
                    self.lock.release()
        finally:
            self._aborted.set()

    def destroy(self) -> None:
        for hook in self.close_hooks:
            hook()
        with self.lock:
            self.comm.destroy()
