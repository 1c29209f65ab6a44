"""Plans made by tracing: the planner of cudakit.dispatch for ops whose work is a fixed sequence
of kernel launches (NVRTC kernels through runtime.compiler._launch_function, Triton kernels,
the tiny elementwise kernels) and cuBLASLt calls into arrays the op allocates.

Why: layernorm_backward, cross_entropy, permute, dropout ... spend most of their host time in
argument checks, layout logic and per-launch marshalling, not in their one to three launches.
For one call signature those launches are always the same kernels with the same grids and
scalars; only the addresses change. So the planner runs the checked call once more while
recording (a) every allocation, in order, with its size, and (b) every launch's function,
grid, block, shared memory and packed parameters (a parameter struct as its bytes), and every
cuBLASLt call's addresses. Each 8-byte parameter that points into an input array becomes "input
i + offset", into an allocation "allocation j + offset"; a cuBLASLt call's stream becomes the
current stream; any other value stays as recorded (scalars, persistent buffers such as the
device error flag). The returned arrays become views of allocations. Replaying allocates the
same sizes and makes the same launches with the new addresses, in C where the native module is
built (runtime/_native.c Replay: no Python frame per launch), else in Python (kernel launches
of 8-byte parameters only).

Per-call integers: an op named in dispatch.DYNAMIC (dropout's seed) has that argument out of its
signature; the planner records the call twice with different values, and the parameters that
changed by exactly the argument (or its high word) take the argument's value on every replay.

Safety: a trace is refused (the checked path keeps running for that signature) when anything ran
that the hooks did not record (CuPy's own kernels leave the launch history short, cuDNN marks the
recorder, a launch on another stream), an array argument is empty, a parameter could not be
packed, or the plan's result on the traced arguments is not bitwise the checked result; the plan
is verified into memory filled with 0xFF, so an output the plan does not write cannot match by
chance. Ops that write nothing in place are traced (TRACEABLE, and FALLBACK where a named planner
has no plan), and ops whose in-place arguments are named in INPLACE (batch_norm's running
statistics): those are copied before the recording run and restored after it and after the
verification run (whose in-place results must equal the recording's bitwise), so the signature's
first call updates them exactly once; their plans check on every call that those arguments span
separate memory, as the checked call does (_separate).
"""
from __future__ import annotations

import itertools
import math

from ..runtime import _cupy, compiler, native
from ..runtime import launch as _launch_mod

# ops whose arguments are all read-only (nothing updated in place): a verification run is harmless
TRACEABLE = frozenset({
    "layernorm_backward", "rmsnorm_backward", "layernorm_backward_residual", "rmsnorm_backward_residual",
    "cross_entropy", "cross_entropy_with_grad", "cross_entropy_backward", "permute", "permute_backward", "transpose",
    "max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward", "batch_norm_backward",
    "batch_norm_backward_fused",
    "max_pool2d_nhwc", "max_pool2d_backward_nhwc", "avg_pool2d_nhwc", "avg_pool2d_backward_nhwc",
    "dropout", "dropout_residual", "dropout_backward",   # their seed is a per-call integer (dispatch.DYNAMIC)
    "softmax", "log_softmax", "softmax_backward", "log_softmax_backward",
    "layernorm", "layernorm_with_stats", "rmsnorm", "rmsnorm_with_stats",
    "sum", "mean", "max", "min", "sum_backward", "mean_backward", "sum_backward_like", "mean_backward_like",
    "linear_residual",   # its cuBLASLt call (the residual as C), or the GEMM and the adds
    "linear_backward_gelu",   # its cuBLASLt calls (DGELU), or the GEMM and gelu_backward, and the bias's sum
    "matmul_backward",   # its cuBLASLt calls, a broadcast operand's sum (16-bit: CuPy's cast refuses it)
})
# ops updating arguments in place -> (the indices of those arguments, the index of the flag that
# says whether the call writes them: batch_norm's training) (see the module docstring)
INPLACE = {op: ((3, 4), 5) for op in ("batch_norm", "batch_norm_with_stats", "batch_norm_fused",
                                     "batch_norm_with_stats_fused")}


_LT = b"Q" * 20   # the 20 addresses of a cuBLASLt call (runtime/_native.c lt_matmul)


class _Recorder:
    """What the checked call did, from the hooks in the launch paths: runtime/compiler.py
    (launch), runtime/triton.py and kernels/elementwise.py (launch_packed), kernels/cublaslt.py
    (lt_call); allocations from the allocator the trace installs."""

    def __init__(self):
        self.launches = []      # (name, fptr, grid, block, smem, codes, values); fptr 0: a cuBLASLt call
        self.allocs = []        # (ptr, size)
        self.alloc_launch = []  # per allocation, the launches recorded before it (see _latest)
        self.other = False      # a launch that could not be recorded

    def launch_packed(self, name, fptr, grid, block, smem, codes: bytes, values):
        """A launch whose parameter codes and values the caller packed already."""
        self.launches.append((name, fptr, tuple(grid), tuple(block), smem, codes, list(values)))

    def lt_call(self, values):
        """A cuBLASLt call with lt_matmul's 20 addresses, on the current stream (else refused)."""
        if values[19] != _cupy.cupy().cuda.get_current_stream().ptr:
            self.other = True
            return
        self.launches.append(("cublaslt_matmul", 0, (1, 1, 1), (1, 1, 1), 0, _LT, list(values)))

    def launch(self, name, f, grid, block, smem, stream, args):
        packed = compiler._native_args(args) or _with_structs(args)
        if packed is None or stream is not None:
            self.other = True
            return
        g = grid if type(grid) is tuple and len(grid) == 3 else _launch_mod._dim3(grid, "grid")
        b = block if type(block) is tuple and len(block) == 3 else _launch_mod._dim3(block, "block")
        self.launches.append((name, f.ptr, g, b, smem, packed[0], list(packed[1])))


def _with_structs(args):
    """(codes, values) of a launch whose arguments include parameter structs (a one-element NumPy
    structured array, as kernels/transpose.py passes them): code S and the struct's bytes; None
    where another argument has no code."""
    import numpy as np
    codes, values = [], []
    for a in args:
        if isinstance(a, np.ndarray) and a.dtype.fields is not None and a.size == 1:
            codes.append(ord("S"))
            values.append(a.tobytes())
            continue
        one = compiler._native_args((a,))
        if one is None:
            return None
        codes.append(one[0][0])
        values.append(one[1][0])
    return bytes(codes), values


def _flatten(r):
    return list(r) if isinstance(r, tuple) else [r]


# ops with a named planner whose checked path writes nothing in place: traced where that planner
# has no plan for a signature (ops._planner); PRECISION: those whose float32 path follows
# cudakit.float32_precision(), so a float32 plan hands back to the checked path when it changes
_GEMMS = frozenset({"matmul", "linear", "linear_backward", "fused_linear_gelu", "fused_linear_gelu_with_preact"})
PRECISION = frozenset({"conv2d", "conv2d_backward", "conv1d", "conv1d_backward", "conv2d_nhwc", "conv2d_backward_nhwc",
                       "conv1d_nlc", "conv1d_backward_nlc", "attention", "attention_with_lse", "attention_backward",
                       "attention_bias", "attention_with_lse_bias", "attention_backward_bias", "attention_dropout",
                       "attention_with_lse_dropout", "attention_backward_dropout", "flash_attention",
                       "attention_varlen", "attention_varlen_with_lse", "attention_varlen_backward",
                       "attention_varlen_shared", "attention_varlen_with_lse_shared",
                       "attention_varlen_backward_shared"})
FALLBACK = _GEMMS | PRECISION


def trace_fallback(op: str, checked, args: tuple, arrays: int):
    """The traced plan of an op of FALLBACK whose named planner declined this signature, or None."""
    if op not in FALLBACK:
        return None
    plan = _trace_args(checked, args, (), _dynamic(op, args))
    if plan is None or op not in PRECISION or str(getattr(args[0], "dtype", "")) != "float32":
        return plan
    from .path_plans import _f32_guard
    return _f32_guard("float32", plan, op, arrays)


def trace(op: str, checked, args: tuple):
    """The replay plan of checked(*args) (see the module docstring), or None."""
    if op not in TRACEABLE and op not in INPLACE:
        return None
    at, flag = INPLACE.get(op, ((), None))
    if flag is not None and not args[flag]:   # (the flag is in the signature: no call of it writes them)
        at = ()
    plan = _trace_args(checked, args, at, _dynamic(op, args))
    return plan if plan is None or not at else _separate(plan, checked, args, at)


def _separate(plan, checked, args: tuple, at: tuple):
    """plan behind the check that its in-place arguments (positions `at`) span separate memory on
    every call: the signature holds their shapes, strides and alignment, not whether one overlaps
    another, which the checked call refuses (checks.check_distinct: batch_norm's running_var
    update would read a running_mean just written). A call whose spans cross runs the checked path,
    which raises. Each span is kept relative to its array's address (the signature fixes shape and
    strides), so a pair costs two addresses and two comparisons: 0.65 us a call on an H100 host
    (2026-11-28 07:28 UTC, benchmarks/sweeps/batch_norm_plan_guard_host.py: 10.04 us against 9.39
    for the plan alone, torch's F.batch_norm 18.26;
    history/host-time/nvidia-h100-80gb-hbm3-host-batch-norm-plan-guard.json)."""
    from ..backends.checks import memory_span
    nd = _cupy.cupy().ndarray
    rel = []
    for i in at:
        if isinstance(args[i], nd):   # (None in this signature: None in every call)
            lo, hi = memory_span(args[i])
            rel.append((i, lo - args[i].data.ptr, hi - args[i].data.ptr))
    pairs = list(itertools.combinations(rel, 2))
    if not pairs:
        return plan

    def separate(*call):
        for (i, alo, ahi), (j, blo, bhi) in pairs:
            pa, pb = call[i].data.ptr, call[j].data.ptr
            if pa + alo < pb + bhi and pb + blo < pa + ahi:
                return checked(*call)
        return plan(*call)
    separate.plan = plan
    return separate


def _dynamic(op: str, args: tuple) -> tuple:
    """The positions, counted from the start, of op's per-call integer arguments (dispatch.DYNAMIC)
    that this call gives as ints the signature leaves out."""
    from .. import dispatch
    return tuple(i % len(args) for i in dispatch.DYNAMIC.get(op, ())
                 if type(args[i]) is int and 0 <= args[i] < 1 << 64)


def _trace_args(checked, args: tuple, inplace_at: tuple, dyn: tuple = ()):
    cp = _cupy.cupy()
    arrays = [(i, a) for i, a in enumerate(args) if isinstance(a, cp.ndarray)]
    if not arrays or any(a.size == 0 for _, a in arrays):
        return None
    inplace = [args[i] for i in inplace_at if isinstance(args[i], cp.ndarray)]
    before = [a.copy() for a in inplace]

    def restore():   # the in-place arguments as the signature's first call left them
        for a, b in zip(inplace, before):
            a[...] = b
    try:
        return _trace(checked, args, arrays, inplace, restore, dyn)
    finally:
        restore()


_ALT = 0x5851F42D4C957F2D   # XOR-ed into a per-call integer for the second recording (both halves change)


def _record(checked, args, base_alloc):
    """(recorder, result) of one run of checked(*args) with its launches and allocations recorded,
    or None where something ran that the recorder cannot replay."""
    cp = _cupy.cupy()
    rec = _Recorder()

    def malloc(size):
        mp = base_alloc(size)
        rec.allocs.append((mp.ptr, size))
        rec.alloc_launch.append(len(rec.launches))
        return mp

    recent = _launch_mod.recent_launches
    saved = list(recent)
    recent.clear()
    compiler._recorder = rec
    native.hold_fast_paths(+1)   # the C fast paths (tiny ops, Triton) bypass the hooks: the Python paths record
    try:
        with cp.cuda.using_allocator(malloc):
            result = checked(*args)
    finally:
        native.hold_fast_paths(-1)
        compiler._recorder = None
        seen = list(recent)
        recent.clear()
        recent.extend(saved)
    names = [n for n, fptr, *_ in rec.launches if fptr]   # kernel launches (recent_launches has those)
    if rec.other or not rec.launches or [n for n, _, _ in seen] != names[-len(seen):] or len(seen) > len(names):
        return None
    return rec, result


def _trace(checked, args, arrays, inplace, restore, dyn=()):
    cp = _cupy.cupy()
    base_alloc = cp.cuda.get_allocator()
    first = _record(checked, args, base_alloc)
    if first is None:
        return None
    rec, result = first
    recorded = [a.copy() for a in inplace]
    restore()   # the verification run starts where the recording run did
    seeds, alt = {}, None
    if dyn:   # a second recording with other per-call integers shows which parameters carry them
        alt = tuple(a ^ _ALT if i in dyn else a for i, a in enumerate(args))
        second = _record(checked, alt, base_alloc)
        restore()
        seeds = None if second is None else _per_call_params(rec, second[0], args, alt, dyn, arrays)
        if seeds is None:
            return None
        alt_result = second[1]
    plan = _build(rec, arrays, result, seeds)
    if plan is None:
        return None

    def poisoned(size):   # every new byte 0xFF: a result the plan does not write cannot match by chance
        mp = base_alloc(size)
        if size:
            mp.memset_async(0xFF, size)
        return mp
    with cp.cuda.using_allocator(poisoned):
        got = plan(*args)   # verification: bitwise the checked result on the traced arguments
        ok = _same(result, got) and _same(tuple(recorded), tuple(inplace))
        if ok and alt is not None:
            restore()
            ok = _same(alt_result, plan(*alt))
    return plan if ok else None


def _per_call_params(rec, rec2, args, alt, dyn, arrays):
    """{(launch, parameter): (argument, shift)} for the parameters that hold a per-call integer
    argument shifted right (a seed's low and high words), from two recordings whose per-call
    integers differ; None where the recordings differ in any other way."""
    if len(rec.launches) != len(rec2.launches) or [s for _, s in rec.allocs] != [s for _, s in rec2.allocs]:
        return None
    regions = [(a.data.ptr, a.nbytes) for _, a in arrays] + list(rec.allocs)
    found = {}
    for n, (l1, l2) in enumerate(zip(rec.launches, rec2.launches)):
        if l1[:6] != l2[:6]:   # another kernel, grid or parameter layout
            return None
        for k, (c, v1, v2) in enumerate(zip(l1[5], l1[6], l2[6])):
            if c == ord("S"):
                if v1 != v2:
                    return None
                continue
            if int(v1) == int(v2) or (c == ord("Q") and _locate(int(v1), regions) is not None):
                continue
            mask = {ord("Q"): (1 << 64) - 1, ord("i"): (1 << 32) - 1}.get(c)
            # (compared as bits: an int32 parameter may hold a word of the seed as a negative value)
            hit = None if mask is None else next(
                ((i, sh) for i in dyn for sh in range(0, 64, 32)
                 if int(v1) & mask == (args[i] >> sh) & mask and int(v2) & mask == (alt[i] >> sh) & mask), None)
            if hit is None:
                return None
            found[(n, k)] = hit
    return found


def _locate(ptr: int, regions):
    """(index, offset) of the region [start, start + size) holding ptr, or None."""
    for j, (start, size) in enumerate(regions):
        if start <= ptr < start + max(size, 1):
            return j, ptr - start
    return None


def _latest(ptr: int, allocs, alloc_launch, before: int | None = None):
    """(index, offset) of the latest allocation holding ptr among those made before launch
    `before` (all: None), or None. The pool reuses freed memory within a call (a freed block, merged
    with its neighbours, may come back larger), so several recorded allocations can hold one address:
    the live one is the latest, and a replay gives each allocation memory of its own. The first one
    instead had placed a later array in an earlier, smaller block, and its replays wrote past that
    block (2026-11-27: conv2d_backward's dL/dx wrong on 122 of 378 elements after other tests had
    fragmented the pool, and NaN in float64)."""
    for j in range(len(allocs) - 1, -1, -1):
        if before is not None and alloc_launch[j] > before:
            continue
        start, size = allocs[j]
        if start <= ptr < start + max(size, 1):
            return j, ptr - start
    return None


def _inside(r, offset: int, size: int) -> bool:
    """Whether array r, at byte offset `offset` of an allocation of `size` bytes, lies inside it
    (a replay allocates that size and views r there)."""
    if r.size == 0:
        return 0 <= offset <= size
    if any(st < 0 for st in r.strides):
        return False
    return offset + sum((d - 1) * st for d, st in zip(r.shape, r.strides)) + r.itemsize <= size


def _holders(ptr: int, regions) -> int:
    """How many of the regions [start, start + size) hold ptr."""
    return sum(1 for start, size in regions if start <= ptr < start + max(size, 1))


def _build(rec: _Recorder, arrays, result, seeds=None):
    cp = _cupy.cupy()
    inputs = [(a.data.ptr, a.nbytes) for _, a in arrays]
    in_index = [i for i, _ in arrays]
    seeds = seeds or {}
    steps = []
    for n, (name, fptr, g, b, smem, codes, vals) in enumerate(rec.launches):
        subs = []
        for k, (c, v) in enumerate(zip(codes, vals)):
            if (n, k) in seeds:   # a per-call integer argument (native replay source 3)
                subs.append((k, 3) + seeds[(n, k)])
                continue
            if not fptr and k == 19:   # a cuBLASLt call's stream (0 for the default one): the current one
                subs.append((k, 2, 0, 0))
                continue
            if c != ord("Q") or not v:
                continue
            bases = [i for i, (start, _) in enumerate(inputs) if start == int(v)]
            if len(bases) == 1:   # an input's own pointer (views of one buffer may also contain it)
                subs.append((k, 0, in_index[bases[0]], 0))
                continue
            if bases or _holders(int(v), inputs) > 1:   # one array passed twice, or inside overlapping
                return None                              # views: which one a later call means is unknowable
            loc = _locate(int(v), inputs)
            if loc is not None:
                subs.append((k, 0, in_index[loc[0]], loc[1]))
                continue
            loc = _latest(int(v), rec.allocs, rec.alloc_launch, n)
            if loc is not None:
                subs.append((k, 1, loc[0], loc[1]))
        steps.append((name, fptr, g, b, smem, codes, tuple(vals), tuple(subs)))
    outs = []
    for r in _flatten(result):
        if r is None:
            outs.append(None)
            continue
        if not isinstance(r, cp.ndarray):
            return None
        loc = _latest(r.data.ptr, rec.allocs, rec.alloc_launch)
        if loc is None or not _inside(r, loc[1], rec.allocs[loc[0]][1]):
            return None
        outs.append((loc[0], loc[1], r.shape, r.dtype, r.strides))
    sizes = [s for _, s in rec.allocs]
    single = not isinstance(result, tuple)
    from . import _planned
    env = _planned.ready()
    if env is None:
        return None
    native = _native_replay(steps, sizes, outs, single)
    if native is not None:
        return native
    if any(ord("S") in st[5] or not st[1] for st in steps) or seeds:
        return None   # a parameter struct, a cuBLASLt call or a per-call integer: the native replay only
    ndarray, alloc = env[1], cp.cuda.alloc

    def planned(*args):
        mem = [alloc(s) for s in sizes]
        for name, fptr, g, b, smem, codes, vals, subs in steps:
            if subs:
                vals = list(vals)
                for k, kind, j, off in subs:
                    vals[k] = (args[j].data.ptr if kind == 0 else mem[j].ptr) + off
            _planned.run(env, name, fptr, g, b, smem, codes, *vals)
        res = [None if o is None else ndarray(o[2], o[3], mem[o[0]] + o[1], o[4]) for o in outs]
        return res[0] if single else tuple(res)
    return planned


# runtime/_native.c's CK_MAX_STEPS, CK_MAX_ALLOCS, CK_MAX_SUBS (tests/test_native_launcher.py checks
# they agree): past them a plan replays in Python, and not at all with a per-call seed
_MAX_STEPS, _MAX_ALLOCS, _MAX_SUBS = 32, 16, 32


def _native_replay(steps, sizes, outs, single):
    """The plan as a native Replay (runtime/_native.c: the same allocations and launches without
    a Python frame per launch), or None where the native module cannot replay it."""
    from ..runtime import native
    sizes, where = _merge_temporaries(sizes, outs)
    if len(steps) > _MAX_STEPS or len(sizes) > _MAX_ALLOCS or any(len(st[5]) > 64 or len(st[7]) > _MAX_SUBS
                                                                  for st in steps):
        from .. import fallbacks
        fallbacks.note(f"replay:{steps[0][0]}", f"a traced plan starting with {steps[0][0]} has more steps, "
                                                f"allocations or parameters than the native replay takes")
        return None
    outs = [None if o is None else (where[o[0]][0], where[o[0]][1] + o[1]) + tuple(o[2:]) for o in outs]
    nsteps = []
    for name, fptr, g, b, smem, codes, vals, subs in steps:
        params = tuple(v if c == ord("S") else native.pack_slot(chr(c), v) for c, v in zip(codes, vals))
        subs = tuple((k, 1, where[j][0], where[j][1] + off) if kind == 1 else (k, kind, j, off)
                     for k, kind, j, off in subs)
        nsteps.append((0 if fptr else 1, fptr, tuple(g) + tuple(b) + (smem,), params, subs, (name, g, b)))
    shared = [sum(1 for o in outs if o is not None and o[0] == j) for j in range(len(sizes))]
    nouts = []
    for o in outs:
        if o is None:
            nouts.append(None)
            continue
        j, off, shape, dtype, strides = o
        nbytes = dtype.itemsize * math.prod(shape)
        whole = (off == 0 and nbytes == sizes[j] and nbytes > 0 and shared[j] == 1   # the only output there
                 and strides == _c_strides(shape, dtype.itemsize))
        nouts.append((j, off, tuple(shape), dtype, () if whole else tuple(strides)))
    if len(nouts) > 16:
        return None
    try:
        return native.replay(tuple(sizes), tuple(nsteps), tuple(nouts), single, _lt_status)
    except (TypeError, ValueError, OverflowError) as e:   # a plan outside the native replay's limits
        from .. import fallbacks
        fallbacks.note(f"replay:{steps[0][0]}", f"a traced plan starting with {steps[0][0]} replays in Python: {e}")
        return None


def _lt_status(status: int, step: int):
    """A replayed cuBLASLt call failed: the checked call's error (kernels/cublaslt.py)."""
    from . import cublaslt
    cublaslt._check(status, f"step {step} of a traced plan: cublasLtMatmul")


_MERGE_ALIGN = 512   # CuPy's pool hands out 512-byte aligned blocks: the merged regions keep that


def _merge_temporaries(sizes, outs):
    """(new sizes, {old allocation: (new allocation, byte offset)}): the allocations no output lives
    in (scratch: partial sums, statistics, workspaces) merged into one, freed together when the
    call returns as they were one by one; the outputs' allocations unchanged. One allocation
    instead of several is a microsecond of host time each."""
    used = {o[0] for o in outs if o is not None}
    temps = [j for j in range(len(sizes)) if j not in used]
    if len(temps) < 2:
        return list(sizes), {j: (j, 0) for j in range(len(sizes))}
    new, where = [], {}
    for j, size in enumerate(sizes):
        if j in used:
            where[j] = (len(new), 0)
            new.append(size)
    merged, off = len(new), 0
    for j in temps:
        where[j] = (merged, off)
        off += -(-sizes[j] // _MERGE_ALIGN) * _MERGE_ALIGN
    new.append(off)
    return new, where


def _c_strides(shape, itemsize: int) -> tuple:
    st, acc = [], itemsize
    for d in reversed(shape):
        st.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(st))


def _same(a, b) -> bool:
    cp = _cupy.cupy()
    for x, y in zip(_flatten(a), _flatten(b)):
        if (x is None) != (y is None):
            return False
        if x is None:
            continue
        if x.shape != y.shape or x.dtype != y.dtype or x.strides != y.strides:
            return False
        if x.size and not bool(cp.array_equal(_bits(x), _bits(y))):
            return False
    return len(_flatten(a)) == len(_flatten(b))


def _bits(x):
    """x's bytes (NaN payloads compared exactly), or x itself where it has no flat byte view."""
    cp = _cupy.cupy()
    return x.reshape(-1).view(cp.uint8) if x.flags.c_contiguous else x
