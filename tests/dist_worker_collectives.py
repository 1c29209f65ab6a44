"""One rank of the collective-semantics check, launched by `cudakit run` from the tests.

    cudakit run --nproc-per-node N tests/dist_worker_collectives.py BACKEND SEED

BACKEND: "cpu" (NumPy arrays through the store) or "nccl" (CuPy arrays). Every rank can make
every rank's input (seeded by SEED, rank and case), so each rank checks its results against a
NumPy float64 reference of its own. Prints "CHECKED <n>" and exits 0 when every case matched;
exits 1 with the first mismatch otherwise.
"""
import sys

import ml_dtypes
import numpy as np

import cudakit.distributed as dist

BACKEND, SEED = sys.argv[1], int(sys.argv[2])
DTYPES = ["float16", "bfloat16", "float32", "float64", "int32", "int64"]
SIZES = [0, 1, 7, 4097]
RTOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 2e-6, "float64": 1e-13}

if BACKEND == "nccl":
    import cupy as xp

    def to_dev(a):
        return xp.asarray(a)

    def host(a):
        return xp.asnumpy(a)
else:
    xp = np

    def to_dev(a):
        return a.copy()

    def host(a):
        return np.asarray(a)

dist.init_process_group(BACKEND, timeout=120)
R, N = dist.get_rank(), dist.get_world_size()
checked = 0
case = 0


def npdt(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def inp(rank, shape, dtype, kind="sum"):
    """Rank `rank`'s input of the current case: the same on every rank that makes it."""
    rng = np.random.default_rng([SEED, rank, case])
    if dtype.startswith("int"):
        lo, hi = (-3, 4) if kind == "prod" else (-50, 51)
        return rng.integers(lo, hi, size=shape).astype(dtype)
    if kind == "prod":
        return rng.uniform(0.5, 1.5, size=shape).astype(npdt(dtype))
    return rng.standard_normal(shape).astype(npdt(dtype))


def reference(op, parts, dtype):
    s = np.stack([p.astype(np.float64) for p in parts])
    r = {"sum": s.sum(0), "avg": s.sum(0) / len(parts), "prod": s.prod(0), "max": s.max(0), "min": s.min(0)}[op]
    return r.astype(npdt(dtype))


def same(what, got, want, dtype):
    global checked
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, got.dtype, want.shape, want.dtype)
    if dtype.startswith("int"):
        ok = np.array_equal(got, want)
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        ok = np.allclose(g, w, rtol=RTOL[dtype], atol=RTOL[dtype] * (np.abs(w).max() if w.size else 0) + 1e-30)
    if not ok:
        bad = np.argmax(np.abs(got.astype(np.float64) - want.astype(np.float64)))
        print(f"MISMATCH rank {R} {what}: at {bad} got {got.reshape(-1)[bad]} want {want.reshape(-1)[bad]}", flush=True)
        sys.exit(1)
    checked += 1


def poison(shape, dtype):
    """An output full of a value no result has, so an unwritten element fails."""
    return to_dev(np.full(shape, 77 if dtype.startswith("int") else np.nan, dtype=npdt(dtype)))


def run(group=None):
    global case
    ranks = list(range(N)) if group is None else list(group.ranks)
    me = ranks.index(R)
    n = len(ranks)
    for dtype in DTYPES:
        for size in SIZES:
            shape = (size,) if size != 7 else (7, 1)
            ops = ["sum", "max", "min", "prod"] + ([] if dtype.startswith("int") else ["avg"])
            for op in ops:
                case += 1
                x = to_dev(inp(R, shape, dtype, op))
                dist.all_reduce(x, op=op, group=group)
                same(f"all_reduce {op} {dtype} {shape}", host(x),
                     reference(op, [inp(r, shape, dtype, op) for r in ranks], dtype), dtype)
            case += 1   # broadcast from the last rank of the group
            x = to_dev(inp(R, shape, dtype))
            dist.broadcast(x, ranks[-1], group=group)
            same(f"broadcast {dtype} {shape}", host(x), inp(ranks[-1], shape, dtype), dtype)
            case += 1   # reduce to the first rank
            x = to_dev(inp(R, shape, dtype))
            dist.reduce(x, ranks[0], op="sum", group=group)
            if me == 0:
                same(f"reduce {dtype} {shape}", host(x), reference("sum", [inp(r, shape, dtype) for r in ranks], dtype),
                     dtype)
            case += 1   # all_gather into one array and into a list
            x = to_dev(inp(R, shape, dtype))
            flat = poison((n * size,), dtype)
            dist.all_gather(flat, x, group=group)
            want = np.concatenate([inp(r, shape, dtype).reshape(-1) for r in ranks])
            same(f"all_gather flat {dtype} {shape}", host(flat), want, dtype)
            outs = [poison(shape, dtype) for _ in ranks]
            dist.all_gather(outs, x, group=group)
            for i, r in enumerate(ranks):
                same(f"all_gather list {dtype} {shape}", host(outs[i]), inp(r, shape, dtype), dtype)
            case += 1   # reduce_scatter from one array and from a list
            full = [inp(r, (n * size,), dtype) for r in ranks]
            out = poison((size,), dtype)
            dist.reduce_scatter(out, to_dev(full[me]), group=group)
            same(f"reduce_scatter flat {dtype} {size}", host(out),
                 reference("sum", full, dtype)[me * size:(me + 1) * size], dtype)
            out = poison((size,), dtype)
            dist.reduce_scatter(out, [to_dev(full[me][i * size:(i + 1) * size]) for i in range(n)], op="max",
                                group=group)
            same(f"reduce_scatter list max {dtype} {size}", host(out),
                 reference("max", full, dtype)[me * size:(me + 1) * size], dtype)
            if n > 1:   # send/recv around the ring
                case += 1
                nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]
                got = poison(shape, dtype)
                if me % 2 == 0:
                    dist.send(to_dev(inp(R, shape, dtype)), nxt, group=group)
                    dist.recv(got, prv, group=group)
                else:
                    dist.recv(got, prv, group=group)
                    dist.send(to_dev(inp(R, shape, dtype)), nxt, group=group)
                same(f"send/recv {dtype} {shape}", host(got), inp(prv, shape, dtype), dtype)
    # coalesced all_reduce of mixed shapes and dtypes, and async ops
    case += 1
    arrays = [inp(R, s, d) for s, d in (((3,), "float32"), ((2, 5), "float64"), ((0,), "float32"), ((1,), "int32"))]
    devs = [to_dev(a) for a in arrays]
    w = dist.all_reduce_coalesced(devs, group=group, async_op=True)
    w.wait()
    for i, (s, d) in enumerate((((3,), "float32"), ((2, 5), "float64"), ((0,), "float32"), ((1,), "int32"))):
        same(f"coalesced {d} {s}", host(devs[i]), reference("sum", [inp(r, s, d) for r in ranks], d), d)
    case += 1
    xs = [to_dev(inp(R, (257,), "float32")) for _ in range(3)]
    works = [dist.all_reduce(x, op="sum", group=group, async_op=True) for x in xs]
    for w in works:
        w.wait()
        assert w.is_completed() or BACKEND == "nccl"
    if BACKEND == "nccl":
        xp.cuda.get_current_stream().synchronize()
        assert all(w.is_completed() for w in works)
    for x in xs:
        same("async all_reduce", host(x), reference("sum", [inp(r, (257,), "float32") for r in ranks], "float32"),
             "float32")
    dist.barrier(group=group)


run()
sub = dist.new_group([r for r in range(N) if r % 2 == 0])   # a subgroup: the even ranks
if R % 2 == 0:
    run(sub)
else:
    assert dist.get_rank(sub) == -1
dist.barrier()
dist.destroy_process_group()
print(f"CHECKED {checked}", flush=True)
