"""Collectives on CuPy arrays (NCCL) or NumPy arrays (the CPU backend), in the style of torch.distributed.

Every function checks its arguments on the calling rank before anything runs (typed errors naming
the argument), then runs on the current CuPy stream, or, with async_op=True, on the group's
communication stream after an event recorded on the current stream, returning a Work handle.
Arrays: C-contiguous, on the group's GPU (NCCL) or NumPy (CPU); dtypes float16, bfloat16, float32,
float64, int32, int64. Ranks (src, dst) are global ranks, as in torch.distributed. The results
live in the arrays passed; with async_op=True they are ready after work.wait().
"""
from __future__ import annotations

from ..errors import ArgumentError, DeviceError, DistributedError, DTypeError, ShapeError
from .group import resolve
from .work import wait_limit

DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")
REDUCE_OPS = ("sum", "avg", "max", "min", "prod")


class ReduceOp:
    """The reductions, as the strings every collective also accepts."""
    SUM, AVG, MAX, MIN, PRODUCT = "sum", "avg", "max", "min", "prod"


def _bus(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor of `op` on n ranks (busbw = bytes / time * factor)."""
    if op in ("all_reduce", "all_reduce_coalesced"):
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0


_names: dict = {}   # dtype -> its name: NumPy builds dtype.name in Python on every read


def dtype_name(dt) -> str:
    """dt.name, cached per dtype (the collectives' per-call path reads it several times)."""
    try:
        return _names[dt]
    except KeyError:
        n = _names[dt] = dt.name
        return n


def _array(g, a, name: str, write: bool = True, dense: bool = False):
    """`a` as the group's array type, checked: type, device, dtype, contiguity (dense: any layout
    covering one gapless block of memory, a channels-last parameter say, for callers that copy it
    to a C-contiguous array where a collective needs one)."""
    if g.backend == "nccl":
        cp = g.transport.cp
        if type(a) is not cp.ndarray and not isinstance(a, cp.ndarray):
            if hasattr(a, "__cuda_array_interface__"):
                a = cp.asarray(a)   # zero-copy view of a torch / JAX / Numba array
            else:
                raise DeviceError(f"{name} must be a CUDA array (CuPy, or one with __cuda_array_interface__) for "
                                  f"the nccl backend (got {type(a).__name__}); the cpu backend takes NumPy arrays")
        if a.data.device_id != g.device:
            raise DeviceError(f"{name} is on cuda:{a.data.device_id} but this rank's group runs on cuda:{g.device}")
    else:
        import numpy as np
        if not isinstance(a, np.ndarray):
            raise DeviceError(f"{name} must be a NumPy array for the cpu backend (got {type(a).__name__}); "
                              "CuPy arrays need backend='nccl'")
        if write and not a.flags.writeable:
            raise ShapeError(f"{name} is read-only, but the collective writes its result into it")
        if not a.dtype.isnative:   # (ranks send their bytes as they are: a swapped array would be another
            # rank's bytes read in the other order, and dtype names do not tell '<f8' from '>f8')
            raise DTypeError(f"{name} has non-native byte order (dtype {a.dtype.str}); collectives take "
                             f"native-order arrays: pass {name}.astype({name}.dtype.newbyteorder('='))")
    if dtype_name(a.dtype) not in DTYPES:
        raise DTypeError(f"{name} has dtype {dtype_name(a.dtype)}; collectives take {', '.join(DTYPES)}")
    from ..backends.checks import array_dense_order
    if not a.flags.c_contiguous and not (dense and array_dense_order(a) is not None):
        raise ShapeError(f"{name} must be C-contiguous (got shape {tuple(a.shape)}, strides {tuple(a.strides)}); "
                         "pass a contiguous copy and copy the result back")
    return a


def _reduce_op(op, dt: str) -> str:
    o = op.lower() if isinstance(op, str) else op
    if o not in REDUCE_OPS:
        raise ArgumentError(f"op must be one of {REDUCE_OPS} (got {op!r})")
    if o == "avg" and dt.startswith("int"):
        raise DTypeError(f"op='avg' needs a float dtype (got {dt}); use 'sum' and divide")
    return o


def _desc(a) -> dict:
    return {"shape": list(a.shape), "dtype": dtype_name(a.dtype)}


def all_reduce(tensor, op: str = "sum", group=None, async_op: bool = False):
    """Reduce `tensor` (any shape) elementwise across the group's ranks, in place on every rank.
    op: "sum", "avg" (float dtypes), "max", "min", "prod". Returns a Work for async_op=True."""
    g = resolve(group, "all_reduce")
    a = _array(g, tensor, "tensor")
    o = _reduce_op(op, dtype_name(a.dtype))
    return g.run("all_reduce", a.nbytes, _bus("all_reduce", g.size),
                 lambda s: g.transport.all_reduce([a], o, s) if a.size else None, async_op, (a,),
                 lambda: {"op": "all_reduce", "reduce": o, **_desc(a)})


def all_reduce_coalesced(tensors, op: str = "sum", group=None, async_op: bool = False):
    """all_reduce of many arrays in one go (NCCL: one group call; any shapes and dtypes, each
    reduced in place). For many small arrays, where one launch per array would dominate."""
    g = resolve(group, "all_reduce_coalesced")
    if isinstance(tensors, (str, bytes)) or not hasattr(tensors, "__iter__"):
        raise ArgumentError(f"tensors must be a list of arrays (got {type(tensors).__name__})")
    arrays = [_array(g, t, f"tensors[{i}]") for i, t in enumerate(tensors)]
    ops = {_reduce_op(op, dtype_name(a.dtype)) for a in arrays} or {_reduce_op(op, "float32")}
    o = ops.pop()
    live = [a for a in arrays if a.size]
    return g.run("all_reduce_coalesced", sum(a.nbytes for a in arrays), _bus("all_reduce", g.size),
                 lambda s: g.transport.all_reduce(live, o, s) if live else None, async_op, tuple(arrays),
                 lambda: {"op": "all_reduce_coalesced", "reduce": o, "arrays": [_desc(a) for a in arrays]})


def broadcast(tensor, src: int, group=None, async_op: bool = False):
    """Copy `tensor` of global rank `src` into `tensor` of every rank of the group (in place)."""
    g = resolve(group, "broadcast")
    a = _array(g, tensor, "tensor")
    root = g.group_rank(src, "src")
    return g.run("broadcast", a.nbytes, 1.0, lambda s: g.transport.broadcast(a, root, s) if a.size else None,
                 async_op, (a,), lambda: {"op": "broadcast", "src": int(src), **_desc(a)})


def reduce(tensor, dst: int, op: str = "sum", group=None, async_op: bool = False):
    """Reduce `tensor` across the group into `tensor` of global rank `dst` (the others' are left
    as they were)."""
    g = resolve(group, "reduce")
    a = _array(g, tensor, "tensor")
    o = _reduce_op(op, dtype_name(a.dtype))
    root = g.group_rank(dst, "dst")
    return g.run("reduce", a.nbytes, 1.0, lambda s: g.transport.reduce(a, root, o, s) if a.size else None,
                 async_op, (a,), lambda: {"op": "reduce", "dst": int(dst), "reduce": o, **_desc(a)})


def _xp(g):
    if g.backend == "nccl":
        return g.transport.cp
    import numpy as np
    return np


def _on(g, s):
    """The context that makes CuPy work run on stream s (a no-op for the CPU backend)."""
    import contextlib
    return s if g.backend == "nccl" else contextlib.nullcontext()


def _chunk_list(g, arrays, name: str, like, like_name: str, write: bool) -> list:
    """`arrays` (a list of one array per group rank, each like `like`) checked and coerced."""
    n = g.size
    if len(arrays) != n:
        raise ShapeError(f"{name} is a list of {len(arrays)} arrays; the group has {n} ranks")
    out = [_array(g, x, f"{name}[{i}]", write=write) for i, x in enumerate(arrays)]
    for i, x in enumerate(out):
        if x.shape != like.shape or x.dtype != like.dtype:
            raise ShapeError(f"{name}[{i}] is {x.dtype.name} {tuple(x.shape)}; expected {like.dtype.name} "
                             f"{tuple(like.shape)} like {like_name}")
    return out


def _flat_chunks(g, array, name: str, like, write: bool):
    """`array` checked and coerced: one contiguous array of group-size chunks of like.size elements."""
    a, n = _array(g, array, name, write=write), g.size
    if a.dtype != like.dtype or a.size != n * like.size:
        raise ShapeError(f"{name} is {dtype_name(a.dtype)} {tuple(a.shape)} ({a.size} elements); expected "
                         f"{like.dtype.name} with {n} x {like.size} = {n * like.size} elements")
    return a


def all_gather(output, tensor, group=None, async_op: bool = False):
    """Gather `tensor` (the same shape and dtype on every rank) from every rank of the group.
    output: a list of group-size arrays shaped like `tensor` (output[i] <- rank i's), or one
    contiguous array of group-size * tensor.size elements (rank i's in the i-th chunk; e.g.
    shape (size, *tensor.shape) or (size * tensor.shape[0], ...))."""
    g = resolve(group, "all_gather")
    a = _array(g, tensor, "tensor", write=False)
    n = g.size
    if isinstance(output, (list, tuple)):
        outs = _chunk_list(g, output, "output", a, "tensor", write=True)
        xp = _xp(g)

        def fn(s):
            if not a.size:
                return
            with _on(g, s):
                flat = xp.empty(n * a.size, dtype=a.dtype)
            g.transport.all_gather(flat, a, s)
            with _on(g, s):
                for i, o in enumerate(outs):
                    o[...] = flat[i * a.size:(i + 1) * a.size].reshape(a.shape)
        keep = (a, *outs)
    else:
        out = _flat_chunks(g, output, "output", a, write=True)

        def fn(s):
            if a.size:
                g.transport.all_gather(out, a, s)
        keep = (a, out)
    return g.run("all_gather", n * a.nbytes, _bus("all_gather", n), fn, async_op, keep,
                 lambda: {"op": "all_gather", **_desc(a)})


def reduce_scatter(output, input, op: str = "sum", group=None, async_op: bool = False):
    """Reduce `input` across the group and leave chunk i of the result in `output` of group rank i.
    input: a list of group-size arrays shaped like `output`, or one contiguous array of
    group-size * output.size elements (chunk i = the i-th output.size elements)."""
    g = resolve(group, "reduce_scatter")
    out = _array(g, output, "output")
    n = g.size
    o = _reduce_op(op, dtype_name(out.dtype))
    if isinstance(input, (list, tuple)):
        ins = _chunk_list(g, input, "input", out, "output", write=False)
        xp = _xp(g)

        def fn(s):
            if not out.size:
                return
            with _on(g, s):
                flat = xp.concatenate([x.reshape(-1) for x in ins])
            g.transport.reduce_scatter(out, flat, o, s)
        keep = (out, *ins)
    else:
        inp = _flat_chunks(g, input, "input", out, write=False)

        def fn(s):
            if out.size:
                g.transport.reduce_scatter(out, inp, o, s)
        keep = (out, inp)
    return g.run("reduce_scatter", n * out.nbytes, _bus("reduce_scatter", n), fn, async_op, keep,
                 lambda: {"op": "reduce_scatter", "reduce": o, **_desc(out)})


def _peer(g, r, what: str) -> int:
    p = g.group_rank(r, what)
    if p == g.rank:
        raise ArgumentError(f"{what}={r} is this rank; send and recv need another rank")
    return p


def send(tensor, dst: int, group=None, async_op: bool = False):
    """Send `tensor` to global rank `dst`, which must call recv() with an array of the same shape
    and dtype. Messages between two ranks arrive in the order sent."""
    g = resolve(group, "send")
    a = _array(g, tensor, "tensor", write=False)
    peer = _peer(g, dst, "dst")
    return g.run("send", a.nbytes, 1.0, lambda s: g.transport.send(a, peer, s) if a.size else None, async_op,
                 (a,), lambda: {"op": "send", "peer": peer, **_desc(a)})


def recv(tensor, src: int, group=None, async_op: bool = False):
    """Receive into `tensor` what global rank `src` sent with send()."""
    g = resolve(group, "recv")
    a = _array(g, tensor, "tensor")
    peer = _peer(g, src, "src")
    return g.run("recv", a.nbytes, 1.0, lambda s: g.transport.recv(a, peer, s) if a.size else None, async_op,
                 (a,), lambda: {"op": "recv", "peer": peer, **_desc(a)})


def barrier(group=None, async_op: bool = False, timeout: float | None = None):
    """Wait until every rank of the group reached the barrier. Blocks the host (NCCL: until the
    barrier's all-reduce finished on the GPU), at most `timeout` s (default: the group's timeout,
    by the watchdog); with async_op=True returns a Work instead."""
    g = resolve(group, "barrier")
    wait_limit(g, timeout)   # (checked before the barrier starts)
    work = g.run("barrier", 4, 1.0, lambda s: g.transport.barrier(s), True, (), lambda: {"op": "barrier"})
    if async_op:
        return work
    work.synchronize(timeout)
    return None


__all__ = ["DTYPES", "REDUCE_OPS", "ReduceOp", "DistributedError", "all_reduce", "all_reduce_coalesced",
           "broadcast", "reduce", "all_gather", "reduce_scatter", "send", "recv", "barrier"]
