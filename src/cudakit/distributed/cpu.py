"""The CPU transport: NumPy arrays, exchanged through the TCP store.

Every rank publishes its array under a key of the collective's sequence number and reads the
others' (store.exchange); reductions run in float64 (int64 for integers) in rank order and are
rounded once to the array's dtype. Each published array carries its dtype, shape and reduce op, which
every reader compares with its own: ranks that disagree get a DistributedError naming both, not
another rank's bytes read as their dtype. It is for tests of the collective semantics without a GPU and
for small CPU-only jobs: each collective moves every array through the store process, so it is
slow for large arrays. Ops run in order on one worker thread per group (async_op=True returns at
once; a synchronous op waits for its turn).
"""
from __future__ import annotations

import concurrent.futures as cf

import numpy as np

from ..errors import ArgumentError, DistributedError
from .store import exchange

_FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")


def reduce_arrays(chunks: list, op: str, dtype) -> np.ndarray:
    """Reduce equal-shaped arrays elementwise with op (sum, prod, max, min, avg) in float64 (int64
    for integer dtypes), in list order, rounded once to `dtype`."""
    acc = np.float64 if np.dtype(dtype).name in _FLOAT_NAMES else np.int64
    stack = np.stack([np.asarray(c).astype(acc) for c in chunks])
    with np.errstate(over="ignore", invalid="ignore"):
        if op == "sum":
            r = stack.sum(axis=0)
        elif op == "avg":
            r = stack.sum(axis=0) / len(chunks)
        elif op == "prod":
            r = stack.prod(axis=0)
        elif op == "max":
            r = stack.max(axis=0)
        elif op == "min":
            r = stack.min(axis=0)
        else:
            raise ArgumentError(f"unknown reduce op {op!r}")
        return r.astype(dtype)


class Slot:
    """Where one op's values live in the store: the group's key prefix and the op's number."""

    def __init__(self, prefix: str, seq: int):
        self.prefix, self.seq = prefix, seq

    def key(self, *parts) -> str:
        return "/".join([self.prefix, str(self.seq), *map(str, parts)])


def _pack(a: np.ndarray, op: str = "") -> bytes:
    """a's bytes behind a line describing them: dtype, shape and the reduce op (if any)."""
    return f"{a.dtype.name} {tuple(a.shape)} {op}".encode() + b"\n" + np.ascontiguousarray(a).tobytes()


def _unpack(payload: bytes, a: np.ndarray, op: str, peer: int, rank: int, what: str) -> np.ndarray:
    """The array a peer published with _pack, refused unless it describes what `a` and `op` would."""
    head, _, data = payload.partition(b"\n")
    mine = f"{a.dtype.name} {tuple(a.shape)} {op}"
    if head.decode() != mine:
        theirs = head.decode().split(" ", 1) + [""]
        raise DistributedError(f"rank {peer} passed {theirs[0]} {theirs[1].strip() or '?'}, this rank "
                               f"{a.dtype.name} {tuple(a.shape)} {op}".rstrip() + "; every rank must pass the same "
                               "dtype, shape and op (CUDAKIT_DISTRIBUTED_DEBUG=1 compares every collective's "
                               "arguments before it runs)", rank=rank, op=what)
    return np.frombuffer(data, dtype=a.dtype).reshape(a.shape)


class CpuTransport:
    """Collectives of `size` ranks over `store`; this process is `rank`; keys under `prefix`."""

    name = "cpu"

    def __init__(self, store, size: int, rank: int, prefix: str, timeout: float, abort):
        self.store, self.size, self.rank, self.prefix = store, size, rank, prefix
        self.timeout, self.abort_check = timeout, abort
        self._pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="cudakit-cpu-collectives")
        self._p2p: dict[tuple[int, int], int] = {}   # (src, dst) -> messages so far (worker thread only)
        self.aborted = False

    def submit(self, fn) -> cf.Future:
        return self._pool.submit(fn)

    def _abort(self):
        self.abort_check()

    def _exchange(self, slot: Slot, a: np.ndarray, what: str, op: str = "") -> list[np.ndarray]:
        got = exchange(self.store, slot.key("x"), self.rank, self.size, _pack(a, op), self.timeout, self._abort)
        return [_unpack(b, a, op, r, self.rank, what) for r, b in enumerate(got)]

    # -- the collectives (arrays validated and contiguous) --
    def all_reduce(self, arrays, op: str, slot: Slot) -> None:
        flat = [np.ascontiguousarray(a).reshape(-1) for a in arrays]
        by_dtype: dict = {}
        for i, a in enumerate(flat):
            by_dtype.setdefault(a.dtype, []).append(i)
        for n, (dt, idx) in enumerate(by_dtype.items()):
            joined = np.concatenate([flat[i] for i in idx]) if idx else np.empty(0, dt)
            total = reduce_arrays(self._exchange(Slot(slot.key(n), 0), joined, "all_reduce", op), op, dt)
            off = 0
            for i in idx:
                k = flat[i].size
                arrays[i].reshape(-1)[...] = total[off:off + k]
                off += k

    def broadcast(self, a, root: int, slot: Slot) -> None:
        key = slot.key("b")
        if self.rank == root:
            self.store.set(key, _pack(a))
        else:
            a[...] = _unpack(self.store.get(key, self.timeout, self._abort), a, "", root, self.rank, "broadcast")
        if self.store.add(key + "/n", 1) == self.size:
            self.store.delete(key, key + "/n")

    def all_gather(self, out, inp, slot: Slot) -> None:
        parts = self._exchange(slot, inp, "all_gather")
        out.reshape(-1)[...] = np.concatenate([p.reshape(-1) for p in parts]) if parts else out.reshape(-1)

    def reduce_scatter(self, out, inp, op: str, slot: Slot) -> None:
        flat = inp.reshape(-1)   # (ranks may pass the input in other shapes of the same size)
        total = reduce_arrays(self._exchange(slot, flat, "reduce_scatter", op), op, inp.dtype)
        n = out.size
        out.reshape(-1)[...] = total[self.rank * n:(self.rank + 1) * n]

    def reduce(self, a, root: int, op: str, slot: Slot) -> None:
        parts = self._exchange(slot, a, "reduce", op)
        if self.rank == root:
            a[...] = reduce_arrays(parts, op, a.dtype)

    def _p2p_key(self, src: int, dst: int) -> str:
        n = self._p2p.get((src, dst), 0)
        self._p2p[(src, dst)] = n + 1
        return f"{self.prefix}/p2p/{src}-{dst}/{n}"

    def send(self, a, peer: int, slot: Slot) -> None:
        self.store.set(self._p2p_key(self.rank, peer), _pack(a))

    def recv(self, a, peer: int, slot: Slot) -> None:
        key = self._p2p_key(peer, self.rank)
        a[...] = _unpack(self.store.get(key, self.timeout, self._abort), a, "", peer, self.rank, "recv")
        self.store.delete(key)

    def barrier(self, slot: Slot) -> None:
        exchange(self.store, slot.key("barrier"), self.rank, self.size, b"", self.timeout, self._abort)

    # -- failure handling --
    def async_error(self) -> str | None:
        return None

    def abort(self) -> None:
        """Pending and queued ops end at their next look at the group's error (half a second)."""
        self.aborted = True

    def destroy(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
