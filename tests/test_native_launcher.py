"""The native launcher (runtime/_native.c) builds with the system compiler and packs each parameter
code into its slot exactly; cuLaunchKernel is replaced by a recording ctypes callback, so no GPU is
needed."""
import ctypes
import struct
import sys

import numpy as np
import pytest
from helpers import launch_type, native_module

from cudakit.runtime import native

LAUNCH = launch_type()


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return native_module(tmp_path_factory.mktemp("native") / "m.so")


def _recorder(mod, sizes, result=0):
    seen = {}

    def fake(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        seen.update(f=f, dims=(gx, gy, gz, bx, by, bz), smem=smem, stream=stream, extra=extra,
                    raw=[ctypes.string_at(params[i], n) for i, n in enumerate(sizes)])
        return result
    cb = LAUNCH(fake)
    mod.set_launch(ctypes.cast(cb, ctypes.c_void_p).value)
    return seen, cb


def test_packs_every_code(mod):
    seen, _cb = _recorder(mod, [8, 8, 4, 4, 8, 2, 8])
    r = mod.launch(0x1234, 5, 6, 7, 128, 2, 1, 4096, 0xABC, b"QQifdhQ",
                   0xDEADBEEF00, -3, -7, 1.5, 2.25, 0x3F80, 2**64 - 1)
    assert r == 0
    assert seen["f"] == 0x1234 and seen["dims"] == (5, 6, 7, 128, 2, 1)
    assert seen["smem"] == 4096 and seen["stream"] == 0xABC and seen["extra"] is None
    raw = seen["raw"]
    assert struct.unpack("<Q", raw[0])[0] == 0xDEADBEEF00
    assert struct.unpack("<q", raw[1])[0] == -3
    assert struct.unpack("<i", raw[2])[0] == -7
    assert struct.unpack("<f", raw[3])[0] == 1.5
    assert struct.unpack("<d", raw[4])[0] == 2.25
    assert struct.unpack("<H", raw[5])[0] == 0x3F80
    assert struct.unpack("<Q", raw[6])[0] == 2**64 - 1


def test_packs_numpy_scalars_as_they_are(mod):
    # compiler._native_args passes NumPy scalars unconverted: read through __index__ / __float__
    seen, _cb = _recorder(mod, [8, 8, 4, 4, 8])
    assert mod.launch(0x1234, 1, 1, 1, 32, 1, 1, 0, 0, b"QQifd", np.uint64(2**64 - 1), np.int64(-3),
                      np.int32(-7), np.float32(1.5), np.float64(2.25)) == 0
    raw = seen["raw"]
    assert struct.unpack("<Q", raw[0])[0] == 2**64 - 1 and struct.unpack("<q", raw[1])[0] == -3
    assert struct.unpack("<i", raw[2])[0] == -7 and struct.unpack("<f", raw[3])[0] == 1.5
    assert struct.unpack("<d", raw[4])[0] == 2.25


def test_returns_the_driver_code_and_an_int_is_a_float(mod):
    seen, _cb = _recorder(mod, [4], result=701)
    assert mod.launch(1, 1, 1, 1, 1, 1, 1, 0, 0, b"f", 3) == 701
    assert struct.unpack("<f", seen["raw"][0])[0] == 3.0


@pytest.mark.parametrize("args,err,msg", [
    ((1, 1, 1, 1, 1, 1, 1, 0, 0, b"Q"), TypeError, "1 parameter codes for 0 values"),
    ((1, 1, 1, 1, 1, 1, 1, 0, 0, b"x", 1), ValueError, "unknown parameter code x"),
    ((1, 1, 1, 1, 1, 1, 1, 0, 0, "Q", 1), TypeError, "codes must be bytes"),
    ((0, 1, 1, 1, 1, 1, 1, 0, 0, b""), ValueError, "null CUfunction"),
    ((1, -1, 1, 1, 1, 1, 1, 0, 0, b""), OverflowError, "negative|convert"),
    ((1, 1, 1, 1, 1, 1, 1, 0, 0, b"Q", "p"), TypeError, "integer"),
    ((1, 1, 1, 1, 1, 1, 1, 0, 0, b"Q" * 65, *range(65)), ValueError, "at most 64"),
    ((1, 1, 1), TypeError, "launch\\(func"),
])
def test_bad_arguments_raise_before_launch(mod, args, err, msg):
    seen, _cb = _recorder(mod, [])
    with pytest.raises(err, match=msg):
        mod.launch(*args)
    assert not seen


def test_disabled_by_environment(monkeypatch):
    from cudakit import config
    monkeypatch.setenv("CUDAKIT_NATIVE", "0")
    monkeypatch.setattr(native, "_state", None)
    config.reload()
    try:
        assert native.launcher() is None
        assert native.status() == "unavailable: disabled by CUDAKIT_NATIVE=0"
    finally:
        monkeypatch.delenv("CUDAKIT_NATIVE")
        config.reload()


def test_compile_error_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    with pytest.raises(native.NativeBuildError, match="failed to compile _native.c"):
        native.build(tmp_path / "x.so")


class _Attr(ctypes.Structure):   # cuda.h's CUlaunchAttribute
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class _Config(ctypes.Structure):   # cuda.h's CUlaunchConfig
    _fields_ = [(n, ctypes.c_uint) for n in ("gx", "gy", "gz", "bx", "by", "bz", "smem")] + [
        ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_Attr)), ("n_attrs", ctypes.c_uint)]


LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                             ctypes.c_void_p)


def test_pdl_registered_functions_launch_through_launch_ex_with_the_attribute(tmp_path):
    """A CUfunction given to pdl_register launches through cuLaunchKernelEx with one attribute,
    programmatic stream serialization (id 6) allowed, and the same dims, stream and parameters;
    every other function still through cuLaunchKernel; nothing registers without cuLaunchKernelEx."""
    m = native_module(tmp_path / "pdl.so")
    seen, _cb = _recorder(m, [4])
    assert m.pdl_register(0x5000) is False   # no cuLaunchKernelEx given yet
    ex = {}

    def fake_ex(cfg, f, params, extra):
        c = cfg.contents
        value = ctypes.string_at(ctypes.addressof(c.attrs[0]) + 8, 4)   # (the value's first int)
        ex.update(f=f, dims=(c.gx, c.gy, c.gz, c.bx, c.by, c.bz), smem=c.smem, stream=c.stream, n=c.n_attrs,
                  id=c.attrs[0].id, allowed=struct.unpack("<i", value)[0], raw=ctypes.string_at(params[0], 4),
                  extra=extra)
        return 0
    cb_ex = LAUNCH_EX(fake_ex)
    m.set_launch_ex(ctypes.cast(cb_ex, ctypes.c_void_p).value)
    assert m.pdl_register(0x5000) is True and m.pdl_register(0x5000) is True   # (twice: one entry)
    assert m.pdl_has(0x5000) is True and m.pdl_has(0x6000) is False
    assert m.launch(0x5000, 3, 2, 1, 128, 1, 1, 1024, 0xABC, b"i", 7) == 0
    assert ex == {"f": 0x5000, "dims": (3, 2, 1, 128, 1, 1), "smem": 1024, "stream": 0xABC, "n": 1, "id": 6,
                  "allowed": 1, "raw": struct.pack("<i", 7), "extra": None}
    assert "f" not in seen
    assert m.launch(0x6000, 1, 1, 1, 32, 1, 1, 0, 0, b"i", 5) == 0   # not registered: cuLaunchKernel
    assert seen["f"] == 0x6000 and ex["f"] == 0x5000
    with pytest.raises(ValueError, match="CUfunction"):
        m.pdl_register(0)
    # the set holds at most half its slots (its probes always end): past that, plain launches
    results = [m.pdl_register(0x10000 + 16 * i) for i in range(2100)]
    assert all(results[:2047]) and not any(results[2047:])
    seen.clear()
    assert m.launch(0x10000 + 16 * 2099, 1, 1, 1, 32, 1, 1, 0, 0, b"i", 5) == 0 and seen["f"] == 0x10000 + 16 * 2099


def test_numpy_integers_are_accepted_for_dimensions(mod):
    np = pytest.importorskip("numpy")
    seen, _cb = _recorder(mod, [8])
    assert mod.launch(np.uint64(7), np.int64(3), 1, 1, np.int32(64), 1, 1, np.int64(0), np.int64(9), b"Q", np.int64(-1)) == 0
    assert seen["f"] == 7 and seen["dims"] == (3, 1, 1, 64, 1, 1) and seen["stream"] == 9
    assert struct.unpack("<q", seen["raw"][0])[0] == -1
    with pytest.raises(OverflowError, match="32 bits"):
        mod.launch(1, 2**32, 1, 1, 1, 1, 1, 0, 0, b"")


# -- the counting allocator (mem_*) with a fake pool -------------------------------------------

class _PoolOOM(Exception):
    pass


class _Block:
    """CuPy's PooledMemory: it has a __dict__, where the allocator keeps its counting block."""
    def __init__(self, size):
        self.size = size


class _SlotBlock:
    """A memory object that takes no attributes: the allocator wraps the pool's pointer instead."""
    __slots__ = ("size",)

    def __init__(self, size):
        self.size = size


class _PoolPtr:
    """What CuPy's pool.malloc returns: .ptr, .device_id, .mem.size; records when it is dropped."""
    def __init__(self, pool, size, dev):
        self.ptr, self.device_id, self._pool = pool.next_ptr, dev, pool
        self.mem = (_SlotBlock if pool.slots else _Block)(size)
        pool.next_ptr += size

    def __del__(self):
        self._pool.returned.append(self.mem.size)


class _Pool:
    def __init__(self):
        self.next_ptr, self.returned, self.dev, self.fail, self.slots = 0x10000, [], 0, 0, False

    def malloc(self, size):
        if self.fail:
            self.fail -= 1
            raise _PoolOOM(size)
        return _PoolPtr(self, -(-size // 512) * 512 if size else 0, self.dev)


class _Unowned:
    def __init__(self, ptr, size, owner, device_id):
        self.ptr, self.size, self._owner, self.device_id = ptr, size, owner, device_id


class _MemPtr:
    def __init__(self, mem, offset):
        self.mem, self.ptr = mem, mem.ptr + offset


@pytest.fixture(params=["pooled", "wrapped"])
def mem(tmp_path, request):
    """The module with a fake pool whose memory objects take the counting block in their __dict__
    (CuPy's PooledMemory) or do not (the block then owns the pointer inside an UnownedMemory)."""
    m = native_module(tmp_path / "mem.so")  # its own copy: the counters start at zero
    pool, retries = _Pool(), []
    pool.slots = request.param == "wrapped"

    def after_oom(size):
        retries.append(size)
        return pool.malloc(size)
    m.mem_setup(pool.malloc, _Unowned, _MemPtr, _PoolOOM, after_oom)
    return m, pool, retries


def test_allocator_counts_allocations_frees_and_peak(mem):
    m, pool, _ = mem
    a = m.mem_malloc(1000)          # 1024 bytes from the pool
    b = m.mem_malloc(1)             # 512
    if pool.slots:                  # wrapped: MemoryPointer(UnownedMemory(..., owner=block))
        assert isinstance(a, _MemPtr) and isinstance(a.mem, _Unowned)
        assert a.mem.size == 1024 and a.mem.device_id == 0
    else:                           # the pool's own pointer, the block in its memory's __dict__
        assert isinstance(a, _PoolPtr) and type(a.mem._cudakit_block).__name__ == "Block"
    assert a.ptr == 0x10000 and b.ptr == 0x10000 + 1024
    assert m.mem_counts(0) == (2, 0, 1536, 1536)
    del a
    assert pool.returned == [1024]  # the pool gets its block back when the array's memory dies
    assert m.mem_counts(0) == (2, 1, 512, 1536)
    m.mem_reset_peak(0)
    assert m.mem_counts(0) == (2, 1, 512, 512)
    z = m.mem_malloc(0)             # 0 bytes: the pool's pointer, not counted
    assert isinstance(z, _PoolPtr) and m.mem_counts(0) == (2, 1, 512, 512)
    pool.dev = 3
    c = m.mem_malloc(4096)
    assert m.mem_counts(3) == (1, 0, 4096, 4096) and m.mem_counts(0)[2] == 512
    del b, c
    assert m.mem_counts(0) == (2, 2, 0, 512) and m.mem_counts(3) == (1, 1, 0, 4096)
    assert m.mem_counts(99) == (0, 0, 0, 0)


def test_allocator_retries_through_after_oom_and_passes_other_errors(mem):
    m, pool, retries = mem
    pool.fail = 1
    a = m.mem_malloc(512)
    assert retries == [512] and m.mem_counts(0)[:3] == (1, 0, 512)
    pool.fail = 2                   # the retry fails too: its exception reaches the caller
    with pytest.raises(_PoolOOM):
        m.mem_malloc(512)
    assert m.mem_counts(0)[:3] == (1, 0, 512)
    with pytest.raises(TypeError):
        m.mem_malloc("x")           # pool.malloc's own error, not an OOM: no retry
    del a


def test_allocator_callback_sees_every_event_and_cannot_break_a_free(mem, monkeypatch):
    m, pool, _ = mem
    events = []
    m.mem_set_callback(lambda ev, dev, n: events.append((ev, dev, n)))
    a = m.mem_malloc(100)
    del a
    assert events == [("alloc", 0, 512), ("free", 0, 512)]
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(u.exc_type))
    m.mem_set_callback(lambda ev, dev, n: 1 / 0)
    a = m.mem_malloc(100)           # the callback's error is reported, the allocation stands
    del a
    m.mem_set_callback(None)
    assert m.mem_counts(0)[:3] == (2, 2, 0) and pool.returned == [512, 512]
    assert unraisable == [ZeroDivisionError, ZeroDivisionError]


def test_allocator_trims_the_cache_past_its_cap(mem):
    m, pool, _ = mem
    reserved = {"bytes": 0}
    trims = []
    m.mem_set_cache_cap(0, 4096, lambda: reserved["bytes"], trims.append)
    a = m.mem_malloc(512)
    reserved["bytes"] = 1024 + 4096       # after b: cached = reserved - allocated = the cap: kept
    b = m.mem_malloc(512)
    assert trims == []
    reserved["bytes"] = 1536 + 4097       # after c: one byte more than the cap cached: trimmed
    c = m.mem_malloc(512)
    assert trims == [0]
    pool.dev = 1                          # no cap on device 1
    d = m.mem_malloc(512)
    assert trims == [0]
    m.mem_set_cache_cap(0, None, lambda: 1 / 0, trims.append)  # removed: reserved_fn not called
    pool.dev = 0
    e = m.mem_malloc(512)
    assert trims == [0]
    with pytest.raises(ValueError, match="cache cap must be >= 0"):
        m.mem_set_cache_cap(0, -1, int, trims.append)
    with pytest.raises(ValueError, match="devices 0..63"):
        m.mem_set_cache_cap(64, 0, int, trims.append)
    del a, b, c, d, e


def test_allocator_reports_a_failing_cache_check_and_keeps_the_allocation(mem, monkeypatch):
    m, pool, _ = mem
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(u.exc_type))
    m.mem_set_cache_cap(0, 0, lambda: 1 / 0, lambda dev: None)
    a = m.mem_malloc(512)
    m.mem_set_cache_cap(0, 0, lambda: 1 << 20, lambda dev: [][dev])
    b = m.mem_malloc(512)
    m.mem_set_cache_cap(0, None, int, int)
    assert unraisable == [ZeroDivisionError, IndexError]
    assert m.mem_counts(0)[:3] == (2, 0, 1024)
    del a, b


# -- the tiny elementwise path (ew) with fake arrays ----------------------------------------------

class _Data:
    def __init__(self, ptr, dev):
        self.ptr, self.device_id = ptr, dev


class _FakeArray:
    """The attributes ew reads from a CuPy array; constructing one allocates a fake buffer."""
    next_ptr = 0x100000
    device = 0

    def __init__(self, shape, dtype, ptr=None, contiguous=True, dev=None):
        import numpy as np
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        if isinstance(ptr, (_MemPtr, _PoolPtr)):   # ndarray(shape, dtype, memptr)
            self.memptr, ptr = ptr, ptr.ptr
        if ptr is None:
            ptr = _FakeArray.next_ptr
            _FakeArray.next_ptr += 1 << 20
        self.data = _Data(ptr, _FakeArray.device if dev is None else dev)
        self._c_contiguous = contiguous


class _Stream:
    ptr = 0x5555


@pytest.fixture
def ew(tmp_path):
    m = native_module(tmp_path / "ew.so")
    recent, errors = [], []

    def on_error(status, record):
        errors.append((status, record))
        raise RuntimeError(f"launch failed with {status}")
    _FakeArray.device = 0
    m.fast_setup(_FakeArray, lambda: _FakeArray.device, lambda: _Stream(), recent.append, on_error)
    m.fast_gate(True)
    return m, recent, errors


def _key(dtype, dev, vec):
    import numpy as np

    from cudakit.kernels.elementwise import ew_key
    return ew_key(np.dtype(dtype), dev, vec)


def test_ew_launches_with_the_table_entry_and_packs_the_parameters(ew):
    m, recent, _ = ew
    seen, _cb = _recorder(m, [8, 8, 8, 8, 8])
    table = {_key("float32", 0, 4): (0xF00, 4096, 256, "k<float>", (256, 1, 1), 37888)}
    a, b = _FakeArray((3, 5000), "float32"), _FakeArray((3, 5000), "float32")
    out = m.ew(table, a, b, 0.25)
    assert isinstance(out, _FakeArray) and out.shape == (3, 5000) and out.dtype == a.dtype
    assert seen["f"] == 0xF00 and seen["dims"] == (4, 1, 1, 256, 1, 1) and seen["stream"] == 0x5555
    assert seen["smem"] == 37888   # the entry's shared bytes: its blocks-per-SM cap
    ptrs = [struct.unpack("<Q", r)[0] for r in seen["raw"][:3]]
    assert ptrs == [a.data.ptr, b.data.ptr, out.data.ptr]
    assert struct.unpack("<q", seen["raw"][3])[0] == 15000
    assert struct.unpack("<d", seen["raw"][4])[0] == 0.25
    assert recent == [("k<float>", (4, 1, 1), (256, 1, 1))]


def test_ew_unary_and_unaligned_inputs_use_their_own_entries(ew):
    m, recent, _ = ew
    seen, _cb = _recorder(m, [8, 8, 8, 8])
    table = {_key("float16", 0, 1): (0xA, 1024, 128, "scalar", (128, 1, 1), 0)}
    x = _FakeArray((7,), "float16", ptr=0x100002)      # not 16-byte aligned: vector width 1
    out = m.ew(table, x, None, 0.0)
    assert out is not None and seen["f"] == 0xA and seen["dims"][:4] == (1, 1, 1, 128)
    assert struct.unpack("<Q", seen["raw"][0])[0] == 0x100002
    assert struct.unpack("<q", seen["raw"][2])[0] == 7
    assert m.ew(table, _FakeArray((7,), "float16"), None, 0.0) is None  # aligned: no vec-8 entry


def test_ew_declines_what_the_python_path_must_handle(ew):
    m, recent, _ = ew
    seen, _cb = _recorder(m, [])
    table = {_key("float32", 0, 4): (0xF00, 4096, 256, "k", (256, 1, 1), 0),
             _key("float32", 1, 4): (0xF01, 4096, 256, "k", (256, 1, 1), 0)}
    a = _FakeArray((8,), "float32")
    cases = [
        (_FakeArray((8,), "float32", contiguous=False), a),
        (a, _FakeArray((8,), "float64")),                 # dtypes differ
        (a, _FakeArray((2, 4), "float32")),               # shapes differ
        (a, _FakeArray((8,), "float32", dev=1)),          # devices differ
        (_FakeArray((8,), "int32"), _FakeArray((8,), "int32")),  # no kernel in the table
        (a, [1.0] * 8),                                   # not the array type
    ]
    for x0, x1 in cases:
        assert m.ew(table, x0, x1, 0.0) is None
    _FakeArray.device = 1                                 # inputs on device 0, device 1 current
    assert m.ew(table, a, a, 0.0) is None
    _FakeArray.device = 0
    m.fast_gate(False)
    assert m.ew(table, a, a, 0.0) is None
    assert not seen and not recent
    m.fast_gate(True)
    assert m.ew(table, a, a, 0.0) is not None


_SIG_DEV, _SIG_STREAM = b"int (int __pyx_skip_dispatch)", b"intptr_t (void)"  # kept alive: a
_GETDEV = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda skip: _FakeArray.device)  # capsule
_STREAM = ctypes.CFUNCTYPE(ctypes.c_ssize_t)(lambda: 0x7777)  # keeps the name's pointer


def _capsule(fn, name):
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.cast(fn, ctypes.c_void_p), name, None)


def test_ew_takes_device_and_stream_from_cupys_c_functions(ew):
    m, recent, errors = ew
    seen, _cb = _recorder(m, [8, 8, 8, 8])
    m.fast_setup(_FakeArray, _capsule(_GETDEV, _SIG_DEV), _capsule(_STREAM, _SIG_STREAM), recent.append,
                 lambda status, rec: None)
    table = {_key("float32", 1, 4): (0xF01, 4096, 256, "k", (256, 1, 1), 0)}
    x = _FakeArray((8,), "float32", dev=1)
    assert m.ew(table, x, None, 0.0) is None        # device 0 is current: declined
    _FakeArray.device = 1
    assert m.ew(table, x, None, 0.0) is not None
    assert seen["f"] == 0xF01 and seen["stream"] == 0x7777
    _FakeArray.device = 0


def test_fast_setup_refuses_a_capsule_with_another_signature(ew):
    m, recent, _ = ew
    with pytest.raises(TypeError, match=r"int \(int __pyx_skip_dispatch\)"):
        m.fast_setup(_FakeArray, _capsule(_GETDEV, b"long (void)"), lambda: _Stream(), recent.append, print)
    with pytest.raises(TypeError, match=r"intptr_t \(void\)"):
        m.fast_setup(_FakeArray, lambda: 0, _capsule(_GETDEV, _SIG_DEV), recent.append, print)
    with pytest.raises(TypeError):
        m.fast_setup(_FakeArray, lambda: 0)             # five objects are needed


def test_nd_empty_calls_the_array_type_without_cupys_constructor(ew, tmp_path):
    """nd_empty(shape, dtype): without fast_layout's _ndarray_init, the array type's own call
    (here the fake's); a shape that is not a tuple is a TypeError; before fast_setup, a RuntimeError."""
    import numpy as np
    m, _, _ = ew
    a = m.nd_empty((3, 4), np.float32)
    assert type(a) is _FakeArray and a.shape == (3, 4) and a.dtype == np.float32
    assert m.nd_empty((), "int64").shape == ()
    with pytest.raises(TypeError, match=r"nd_empty\(shape tuple, dtype\)"):
        m.nd_empty([3, 4], np.float32)
    with pytest.raises(TypeError):
        m.nd_empty((3, 4))
    fresh = native_module(tmp_path / "fresh.so")
    with pytest.raises(RuntimeError, match="fast_setup first"):
        fresh.nd_empty((1,), np.float32)


def test_ew_empty_arrays_launch_nothing_and_errors_go_to_on_error(ew):
    m, recent, errors = ew
    seen, _cb = _recorder(m, [], result=700)
    table = {_key("float32", 0, 4): (0xF00, 4096, 256, "k", (256, 1, 1), 0)}
    e = m.ew(table, _FakeArray((0, 3), "float32"), None, 0.0)
    assert e.shape == (0, 3) and not seen
    with pytest.raises(RuntimeError, match="launch failed with 700"):
        m.ew(table, _FakeArray((5,), "float32"), None, 0.0)
    assert errors == [(700, ("k", (1, 1, 1), (256, 1, 1)))] and recent == [errors[0][1]]
    with pytest.raises(TypeError, match="ew\\(table"):
        m.ew(table, None)


# -- Triton launches from plans (tk_bind) with fake arrays ----------------------------------------

def _tk_key(dev, *codes):
    from cudakit.runtime.triton import plan_key
    return plan_key(dev, codes)


def test_tk_launches_from_its_plan_and_packs_arguments_by_code(ew):
    m, recent, _ = ew
    seen, _cb = _recorder(m, [8, 4, 4, 8, 8])
    import numpy as np
    x = _FakeArray((100,), "float32")                  # 16-byte aligned
    plans = {_tk_key(0, 1024 + 2 * np.dtype("float32").num + 1, 1, 3):
             (0xBEEF, 128, 2048, b"QifQQ", "noop_kernel", (128, 1, 1))}
    calls = []
    k = m.tk_bind(plans, (3, 2), lambda *a: calls.append(a))
    assert k(x, 7, 0.5) is None and not calls
    assert seen["f"] == 0xBEEF and seen["dims"] == (3, 2, 1, 128, 1, 1) and seen["smem"] == 2048
    assert seen["stream"] == 0x5555
    raw = seen["raw"]
    assert struct.unpack("<Q", raw[0])[0] == x.data.ptr and struct.unpack("<i", raw[1])[0] == 7
    assert struct.unpack("<f", raw[2])[0] == 0.5 and raw[3] == raw[4] == b"\0" * 8  # scratch pointers
    assert recent == [("noop_kernel", (3, 2, 1), (128, 1, 1))]


def test_tk_hands_everything_else_to_the_fallback(ew):
    m, recent, _ = ew
    seen, _cb = _recorder(m, [])
    import numpy as np
    f32 = 1024 + 2 * np.dtype("float32").num
    x, xo = _FakeArray((100,), "float32"), _FakeArray((100,), "float32", ptr=0x100004)
    plans = {_tk_key(0, f32 + 1, 2): (0xBEEF, 128, 0, b"QiQQ", "k", (128, 1, 1))}
    calls = []

    def fallback(grid, args, kwargs):
        calls.append((grid, args, kwargs))
    grids_args = [
        ((1,), (x, 17), {}),                  # 17 is not a multiple of 16: another specialisation
        ((1,), (xo, 16), {}),                 # unaligned pointer: another specialisation
        ((1,), (x, 2**40), {}),               # not int32
        ((1,), (x, True), {}),                # bool is its own kind
        ((1,), (x, np.int32(16)), {}),        # NumPy scalars take the Python path
        ((1,), (x, 16), {"BLOCK": 64}),       # a keyword (constexpr) argument
        (lambda meta: (1,), (x, 16), {}),     # a grid function
        ((0,), (x, 16), {}),                  # an invalid grid: the Python path raises for it
        ((1, 70000), (x, 16), {}),
        ((1,), (x,), {}),                     # another argument count
    ]
    for grid, args, kw in grids_args:
        m.tk_bind(plans, grid, fallback)(*args, **kw)
        assert calls[-1] == (grid, args, kw)
    assert len(calls) == len(grids_args) and not seen
    _FakeArray.device = 1                     # plans are per device
    m.tk_bind(plans, (1,), fallback)(x, 16)
    _FakeArray.device = 0
    m.fast_gate(False)
    m.tk_bind(plans, (1,), fallback)(x, 16)
    assert len(calls) == len(grids_args) + 2 and not seen
    m.fast_gate(True)
    m.tk_bind(plans, (1,), fallback)(x, 16)
    assert len(calls) == len(grids_args) + 2 and seen["f"] == 0xBEEF


def test_tk_launch_errors_and_bad_plans_raise(ew):
    m, recent, errors = ew
    seen, _cb = _recorder(m, [], result=719)
    import numpy as np
    x = _FakeArray((4,), "float32")
    key = _tk_key(0, 1024 + 2 * np.dtype("float32").num + 1)
    with pytest.raises(RuntimeError, match="launch failed with 719"):
        m.tk_bind({key: (1, 32, 0, b"QQQ", "k", (32, 1, 1))}, (1,), None)(x)
    assert errors == [(719, ("k", (1, 1, 1), (32, 1, 1)))]
    with pytest.raises(ValueError, match="parameter code is i"):
        m.tk_bind({key: (1, 32, 0, b"i", "k", (32, 1, 1))}, (1,), None)(x)
    with pytest.raises(TypeError, match="a Triton plan is"):
        m.tk_bind({key: (1, 32)}, (1,), None)(x)
    with pytest.raises(TypeError, match="tk_bind"):
        m.tk_bind([], (1,), None)


def test_a_hold_keeps_the_fast_paths_closed_and_a_cycle_through_a_launch_is_collected(ew):
    import gc
    import weakref
    m, recent, _ = ew
    seen, _cb = _recorder(m, [8, 8, 8, 8])
    table = {_key("float32", 0, 4): (0xF00, 4096, 256, "k", (256, 1, 1), 0)}
    x = _FakeArray((8,), "float32")
    m.fast_hold(1)
    m.fast_gate(True)                        # a Python path cannot reopen what a profile holds
    assert m.ew(table, x, None, 0.0) is None and not seen
    m.fast_hold(-1)
    assert m.ew(table, x, None, 0.0) is not None and seen
    with pytest.raises(TypeError, match="table must be a dict"):
        m.ew([], x, None, 0.0)

    class Kernel:
        def run(self, grid, args, kwargs):
            pass
    k = Kernel()
    k.launch = m.tk_bind({}, (1,), k.run)   # kernel -> launch -> bound run -> kernel
    ref = weakref.ref(k)
    del k
    gc.collect()
    assert ref() is None


def test_ew_records_and_dtype_facts_follow_each_call(ew):
    """The record kept for the last (entry, grid) and the facts kept for the last dtype are
    never served to a call with another entry, grid or dtype."""
    m, recent, _ = ew
    seen, _cb = _recorder(m, [8, 8, 8, 8])
    table = {_key("float32", 0, 4): (0xF0, 1024, 256, "f32", (256, 1, 1), 0),
             _key("float16", 0, 8): (0xF1, 2048, 128, "f16", (128, 1, 1), 0)}
    calls = [((4096,), "float32", "f32", 4), ((4096,), "float16", "f16", 2), ((4096,), "float32", "f32", 4),
             ((5000,), "float32", "f32", 5), ((2, 2048), "float16", "f16", 2)]
    for shape, dt, name, gx in calls:
        out = m.ew(table, _FakeArray(shape, dt), None, 0.0)
        assert out.shape == shape and recent[-1] == (name, (gx, 1, 1), table[_key(dt, 0, 4 if dt == "float32" else 8)][4])
        assert struct.unpack("<q", seen["raw"][2])[0] == int(np.prod(shape))
    assert [r[0] for r in recent] == [c[2] for c in calls]


def test_allocator_takes_the_device_from_cupys_c_function(mem, tmp_path):
    m, pool, _ = mem
    m.fast_setup(_FakeArray, _capsule(_GETDEV, _SIG_DEV), _capsule(_STREAM, _SIG_STREAM), [].append, print)
    _FakeArray.device = 3
    try:
        a = m.mem_malloc(100)
        assert m.mem_counts(3)[:3] == (1, 0, 512) and m.mem_counts(0)[0] == 0
        assert a.mem.device_id == 3 if pool.slots else True
        del a
        assert m.mem_counts(3)[:3] == (1, 1, 0)
    finally:
        _FakeArray.device = 0


_SIG_GETALLOC = b"PyObject *(int __pyx_skip_dispatch)"


def test_ew_allocates_through_the_counting_allocator_only_while_it_is_cupys(mem):
    m, pool, _ = mem
    seen, _cb = _recorder(m, [8, 8, 8, 8])
    current = {"alloc": m.mem_malloc}
    getalloc = ctypes.CFUNCTYPE(ctypes.py_object, ctypes.c_int)(lambda skip: current["alloc"])
    m.fast_setup(_FakeArray, lambda: _FakeArray.device, lambda: _Stream(), [].append, print)
    m.fast_alloc(_capsule(getalloc, _SIG_GETALLOC))
    m.fast_gate(True)
    table = {_key("float32", 0, 4): (0xF0, 1024, 256, "k", (256, 1, 1), 0)}
    out = m.ew(table, _FakeArray((1000,), "float32"), None, 0.0)
    assert out.memptr.ptr == out.data.ptr == 0x10000 and m.mem_counts(0)[:3] == (1, 0, 4096)
    assert struct.unpack("<Q", seen["raw"][1])[0] == 0x10000   # the kernel writes there
    del out
    assert m.mem_counts(0)[:3] == (1, 1, 0) and pool.returned == [4096]
    current["alloc"] = lambda size: None                     # another allocator: CuPy allocates
    out = m.ew(table, _FakeArray((1000,), "float32"), None, 0.0)
    assert not hasattr(out, "memptr") and m.mem_counts(0)[0] == 1
    assert struct.unpack("<Q", seen["raw"][1])[0] == out.data.ptr
    empty = m.ew(table, _FakeArray((0,), "float32"), None, 0.0)  # 0 bytes: CuPy's own way
    assert not hasattr(empty, "memptr")
    with pytest.raises(TypeError, match="PyObject"):
        m.fast_alloc(_capsule(getalloc, b"int (void)"))
    m.fast_alloc(None)


def test_ew_writes_into_out_when_it_matches_and_declines_a_shifted_view(ew):
    m, recent, _ = ew
    seen, _cb = _recorder(m, [8, 8, 8, 8, 8])
    table = {_key("float32", 0, 4): (0xF00, 4096, 256, "k", (256, 1, 1), 0),
             _key("float32", 0, 1): (0xF01, 1024, 256, "k1", (256, 1, 1), 0)}
    a, b, o = (_FakeArray((64,), "float32") for _ in range(3))
    assert m.ew(table, a, b, 0.0, o) is o
    assert [struct.unpack("<Q", r)[0] for r in seen["raw"][:3]] == [a.data.ptr, b.data.ptr, o.data.ptr]
    assert m.ew(table, a, b, 0.0, a) is a                   # in place: element by element
    assert m.ew(table, a, b, 0.0, None) not in (None, a, b, o)
    odd = _FakeArray((64,), "float32", ptr=o.data.ptr + 4)  # unaligned out: the width-1 kernel
    assert m.ew(table, a, b, 0.0, odd) is odd and seen["f"] == 0xF01
    n = len(recent)
    for bad in (_FakeArray((64,), "float32", ptr=a.data.ptr + 8),   # a shifted view of a
                _FakeArray((64,), "float32", ptr=b.data.ptr - 4),   # ... of b
                _FakeArray((64,), "float64"), _FakeArray((8, 8), "float32"),
                _FakeArray((64,), "float32", contiguous=False), _FakeArray((64,), "float32", dev=1),
                np.zeros(64, np.float32)):
        assert m.ew(table, a, b, 0.0, bad) is None
    assert len(recent) == n
    with pytest.raises(TypeError, match="out"):
        m.ew(table, a, b, 0.0, o, None)


# -- replayed plans (replay_new) and the native call signature, with fake arrays -------------------

class _ReplayMem:
    """What cupy.cuda.memory.alloc returns: a pointer that `+ offset` moves."""
    def __init__(self, ptr):
        self.ptr = ptr

    def __add__(self, off):
        return _ReplayMem(self.ptr + off)


class _ReplayArray(_FakeArray):
    """cupy.ndarray(shape, dtype, memptr, strides) as the replay builds its outputs."""
    def __init__(self, shape, dtype, memptr=None, strides=None):
        super().__init__(shape, dtype, None if memptr is None else memptr.ptr)
        self.strides = strides
        self.ndim = len(self.shape)


@pytest.fixture
def rp(tmp_path):
    m = native_module(tmp_path / "rp.so")
    recent, allocs = [], []

    def on_error(status, record):
        raise RuntimeError(f"launch {record[0]} failed with {status}")

    def alloc(size):
        allocs.append(size)
        return _ReplayMem(0x7000000 + 0x100000 * len(allocs))
    _FakeArray.device = 0
    m.fast_setup(_ReplayArray, lambda: _FakeArray.device, lambda: _Stream(), recent.append, on_error)
    m.replay_setup(alloc)
    return m, recent, allocs


def _b8(v):
    return int(v).to_bytes(8, "little")


def _all_launches(mod, nparams):
    seen = []

    def fake(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        seen.append((f, (gx, gy, gz, bx, by, bz), smem, stream,
                     [struct.unpack("<Q", ctypes.string_at(params[i], 8))[0] for i in range(nparams)]))
        return 0
    cb = LAUNCH(fake)
    mod.set_launch(ctypes.cast(cb, ctypes.c_void_p).value)
    return seen, cb


def test_replay_substitutes_arguments_allocations_and_the_stream(rp):
    m, recent, allocs = rp
    seen, _cb = _all_launches(m, 4)
    x, y = _ReplayArray((4, 8), "float32"), _ReplayArray((8,), "float32")
    slots = (native.pack_slot("Q", 0), native.pack_slot("i", -3), native.pack_slot("f", 0.5), native.pack_slot("Q", 0))
    assert all(len(b) == 8 for b in slots)
    steps = ((0, 0xA1, (2, 1, 1, 128, 1, 1, 64), slots, ((0, 0, 0, 16), (3, 1, 1, 32)), ("k1", (2, 1, 1), (128, 1, 1))),
             (0, 0xA2, (1, 1, 1, 32, 1, 1, 0), slots, ((0, 0, 1, 0), (3, 1, 0, 0)), ("k2", (1, 1, 1), (32, 1, 1))))
    outs = ((0, 0, (4, 8), np.dtype("float32"), ()), (1, 32, (2,), np.dtype("float32"), (4,)), None)
    plan = m.replay_new((128, 64), steps, outs, False, None)
    r = plan(x, y)
    assert allocs == [128, 64]
    a0, a1 = 0x7100000, 0x7200000
    assert [s[0] for s in seen] == [0xA1, 0xA2] and seen[0][1] == (2, 1, 1, 128, 1, 1) and seen[0][2] == 64
    assert seen[0][3] == _Stream.ptr
    assert seen[0][4] == [x.data.ptr + 16, 2**32 - 3, struct.unpack("<I", struct.pack("<f", 0.5))[0], a1 + 32]
    assert seen[1][4][0] == y.data.ptr and seen[1][4][3] == a0
    assert isinstance(r, tuple) and len(r) == 3 and r[2] is None
    assert r[0].shape == (4, 8) and r[0].data.ptr == a0 and r[0].strides is None   # whole: C-contiguous
    assert r[1].shape == (2,) and r[1].data.ptr == a1 + 32 and r[1].strides == (4,)
    assert recent == [("k1", (2, 1, 1), (128, 1, 1)), ("k2", (1, 1, 1), (32, 1, 1))]


def test_replay_takes_a_step_of_more_than_16_substitutions(rp):
    """A step with 24 substituted pointers (past the 16 the replay took until 2026-11-27: the
    materialised attention backward's score kernel has 18, with dropout's seed words 20) replays
    each from its source; one past CK_MAX_SUBS is refused."""
    from cudakit.kernels import trace_plans
    m, _, _ = rp
    n = 24
    seen, _cb = _all_launches(m, n)
    x = _ReplayArray((64,), "float32")
    slots = tuple(_b8(0) for _ in range(n))
    subs = tuple((i, 0, 0, 4 * i) if i % 2 else (i, 1, 0, 8 * i) for i in range(n))
    steps = ((0, 0xC1, (1, 1, 1, 32, 1, 1, 0), slots, subs, ("k", (1, 1, 1), (32, 1, 1))),)
    plan = m.replay_new((256,), steps, ((0, 0, (4,), np.dtype("float32"), ()),), True, None)
    plan(x)
    a0 = 0x7100000
    assert seen[0][4] == [x.data.ptr + 4 * i if i % 2 else a0 + 8 * i for i in range(n)]
    many = trace_plans._MAX_SUBS + 1
    steps = ((0, 0xC2, (1, 1, 1, 32, 1, 1, 0), tuple(_b8(0) for _ in range(many)),
              tuple((i, 0, 0, 0) for i in range(many)), ("k", (1, 1, 1), (32, 1, 1))),)
    with pytest.raises(ValueError, match="substitutions"):
        m.replay_new((16,), steps, ((0, 0, (4,), np.dtype("float32"), ()),), True, None)


def test_replay_single_output_and_a_none_argument_gives_a_null_pointer(rp):
    m, _, _ = rp
    seen, _cb = _all_launches(m, 2)
    steps = ((0, 0xB1, (1, 1, 1, 32, 1, 1, 0), (_b8(7), _b8(9)), ((1, 0, 1, 8),), ("k", (1, 1, 1), (32, 1, 1))),)
    plan = m.replay_new((16,), steps, ((0, 0, (4,), np.dtype("float32"), ()),), True, None)
    out = plan(_ReplayArray((4,), "float32"), None)
    assert isinstance(out, _ReplayArray) and out.shape == (4,)
    assert seen[0][4] == [7, 0]   # a slot without substitution as packed; None: a null pointer, whatever the offset


def test_replay_cublaslt_step_calls_the_functions_it_was_given_and_raises_on_a_status(rp):
    m, _, _ = rp
    calls, sets = [], []
    MM = ctypes.CFUNCTYPE(ctypes.c_int, *([ctypes.c_void_p] * 14 + [ctypes.c_size_t, ctypes.c_void_p]))
    SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
    status = [0]

    def mm(*a):
        calls.append(a)
        return status[0]

    def setattr_(desc, attr, buf, size):
        sets.append((desc, attr, ctypes.c_void_p.from_address(buf).value))
        return 0
    mm_cb, set_cb = MM(mm), SET(setattr_)
    addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    slots = [addr(mm_cb), addr(set_cb), 0x11, 0x22, 0, 0, 0x33, 0, 0x44, 0, 0x55, 0x66, 0, 0x77, 0, 0x88, 0x99, 0, 4096, 0]
    subs = ((19, 2, 0, 0), (4, 0, 2, 0), (7, 0, 1, 0), (9, 0, 0, 0), (12, 1, 0, 0), (14, 1, 0, 0), (17, 1, 1, 0))
    step = (1, 0, (1, 1, 1, 1, 1, 1, 0), tuple(map(_b8, slots)), subs, ("cublaslt_matmul", (1, 1, 1), (1, 1, 1)))
    failures = []

    def on_status(st, i):
        failures.append((st, i))
        raise ValueError(f"status {st}")
    plan = m.replay_new((256, 4096), (step,), ((0, 0, (8, 8), np.dtype("float32"), ()),), True, on_status)
    a, b, bias = _ReplayArray((8, 8), "float32"), _ReplayArray((8, 8), "float32"), _ReplayArray((8,), "float32")
    out = plan(a, b, bias)
    assert sets == [(0x22, 8, bias.data.ptr)]   # the bias pointer attribute, then the call
    c = calls[0]
    assert c[0] == 0x11 and c[1] == 0x22 and c[3] == b.data.ptr and c[5] == a.data.ptr
    assert c[8] == c[10] == out.data.ptr and c[13] == 0x7200000 and c[14] == 4096 and c[15] == _Stream.ptr
    status[0] = 15
    with pytest.raises(ValueError, match="status 15"):
        plan(a, b, bias)
    assert failures == [(15, 0)]


def test_replay_launch_failure_raises_through_on_error(rp):
    m, recent, _ = rp
    seen, _cb = _recorder(m, [], result=700)
    steps = ((0, 0xC1, (1, 1, 1, 32, 1, 1, 0), (), (), ("bad", (1, 1, 1), (32, 1, 1))),)
    plan = m.replay_new((16,), steps, ((0, 0, (4,), np.dtype("float32"), ()),), True, None)
    with pytest.raises(RuntimeError, match="launch bad failed with 700"):
        plan()
    assert recent == [("bad", (1, 1, 1), (32, 1, 1))]


@pytest.mark.parametrize("allocs,steps,outs,single,err", [
    ((16,), (), ((0, 0, (4,), "f", ()),), True, "1..32 steps"),
    ((0,), ((0, 1, (1,) * 7, (), (), None),), (), False, "0 bytes"),
    ((16,), ((2, 1, (1,) * 7, (), (), None),), (), False, "kind must be 0 or 1"),
    ((16,), ((0, 0, (1,) * 7, (), (), None),), (), False, "CUfunction"),
    ((16,), ((0, 1, (1, 1, 1, 2048, 1, 1, 0), (), (), None),), (), False, "1..1024 threads"),
    ((16,), ((0, 1, (1,) * 7, (b"\0" * 8,), ((1, 0, 0, 0),), None),), (), False, "parameter 1 outside"),
    ((16,), ((0, 1, (1,) * 7, (b"\0" * 8,), ((0, 1, 3, 0),), None),), (), False, "allocation 3 of 1"),
    ((16,), ((1, 1, (1,) * 7, (b"\0" * 8,) * 19, (), None),), (), False, "cuBLASLt step 20"),
    ((16,), ((0, 1, (1,) * 7, (7,), (), None),), (), False, "bytes object"),
    ((16,), ((0, 1, (1,) * 7, (b"\0" * 4,), ((0, 0, 0, 0),), None),), (), False, "has 4 bytes"),
    ((16,), ((0, 1, (1, 0, 1, 32, 1, 1, 0), (), (), None),), (), False, "every grid and block dimension"),
    ((16,), ((0, 1, (1, 1, 1, 65536, 65536, 2, 0), (), (), None),), (), False, "1..1024 threads"),
    ((16,), ((0, 1, (1,) * 7, (b"\0" * 5000,), (), None),), (), False, "at most 4096 bytes"),
    ((16,), ((0, 1, (1,) * 7, (), (), None),), ((2, 0, (4,), "f", ()),), False, "outside the plan"),
    ((16,), ((0, 1, (1,) * 7, (), (), None),), ((0, 0, (4,), "f", ()), (0, 0, (4,), "f", ())), False, "two outputs"),
])
def test_replay_new_refuses_a_malformed_plan(rp, allocs, steps, outs, single, err):
    m, _, _ = rp
    with pytest.raises((ValueError, TypeError), match=err):
        m.replay_new(allocs, steps, outs, single, None)


def test_pack_slot_matches_the_launchers_packing():
    u = lambda b: int.from_bytes(b, "little")  # noqa: E731
    assert u(native.pack_slot("Q", -1)) == 2**64 - 1 and u(native.pack_slot("i", -1)) == 2**32 - 1
    assert u(native.pack_slot("h", 0x13F80)) == 0x3F80
    assert u(native.pack_slot("f", 1.0)) == 0x3F800000 and len(native.pack_slot("f", 1.0)) == 8
    assert native.pack_slot("d", np.float64(2.0)) == struct.pack("<d", 2.0)
    with pytest.raises(ValueError, match="unknown parameter code"):
        native.pack_slot("x", 1)


def test_replay_passes_a_struct_parameter_whole_after_substituted_scalars(rp):
    m, _, _ = rp
    got = []

    def fake(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        got.append((struct.unpack("<Q", ctypes.string_at(params[0], 8))[0], ctypes.string_at(params[1], 20)))
        return 0
    cb = LAUNCH(fake)
    m.set_launch(ctypes.cast(cb, ctypes.c_void_p).value)
    blob = bytes(range(20))
    steps = ((0, 0xD1, (1, 1, 1, 32, 1, 1, 0), (_b8(0), blob), ((0, 0, 0, 4),), ("k", (1, 1, 1), (32, 1, 1))),)
    x = _ReplayArray((4,), "float32")
    m.replay_new((16,), steps, ((0, 0, (4,), np.dtype("float32"), ()),), True, None)(x)
    assert got == [(x.data.ptr + 4, blob)]


def test_native_signature_equals_the_python_signature(rp, monkeypatch):
    from cudakit import dispatch
    m, _, _ = rp
    monkeypatch.setattr(dispatch, "_nd", _ReplayArray)
    monkeypatch.setattr(dispatch, "_get_device", lambda: _FakeArray.device)
    a = _ReplayArray((4, 8), "float32")
    a.strides = (32, 4)
    b = _ReplayArray((3,), "float16")
    b.strides = (2,)
    other = _ReplayArray((2,), "float32")
    other.data.device_id, other.strides = 1, (4,)
    zero_d = _ReplayArray((), "float32")
    zero_d.strides = ()
    for args in [(a,), (a, b, None, True, 3, 0.5, "bhld", (0, 2, 1)), (a, 1.0), (b, (1, None))]:
        assert m.call_signature(args) == dispatch.signature(args) is not None
    # a tuple's element types are part of its key: (1, 0), (1.0, 0) and (True, 0) compare equal
    keys = [dispatch.signature((a, t)) for t in ((1, 0), (1.0, 0), (True, 0))]
    assert len(set(keys)) == 3 and [m.call_signature((a, t)) for t in ((1, 0), (1.0, 0), (True, 0))] == keys
    for args in [(), (1, 2), (a, other), (a, [1]), (a, (1, [2])), (zero_d,), (a, np.float32(1))]:
        assert m.call_signature(args) is None and dispatch.signature(args) is None
    monkeypatch.setattr(_FakeArray, "device", 1)   # another current device than the arrays'
    assert m.call_signature((a,)) is None and dispatch.signature((a,)) is None


def test_replay_takes_a_per_call_integer_and_its_high_word(rp):
    m, _, _ = rp
    seen, _cb = _all_launches(m, 3)
    steps = ((0, 0xE1, (1, 1, 1, 32, 1, 1, 0), (_b8(0), _b8(0), _b8(5)), ((0, 3, 1, 0), (1, 3, 1, 32)),
              ("k", (1, 1, 1), (32, 1, 1))),)
    plan = m.replay_new((16,), steps, ((0, 0, (4,), np.dtype("float32"), ()),), True, None)
    x = _ReplayArray((4,), "float32")
    for seed in (7, 0x123456789ABCDEF0, 2**64 - 1):
        plan(x, seed)
        p = seen[-1][4]
        assert p[0] & 0xFFFFFFFF == seed & 0xFFFFFFFF and p[1] & 0xFFFFFFFF == seed >> 32 and p[2] == 5
    with pytest.raises(ValueError, match="shifts by 0..63"):
        m.replay_new((16,), ((0, 1, (1,) * 7, (_b8(0),), ((0, 3, 0, 64),), None),), (), False, None)


def test_plan_call_runs_the_signatures_plan_or_checked_path_only_while_the_gate_is_open(rp):
    m, _, _ = rp
    miss = object()
    m.dispatch_setup(miss)
    a = _ReplayArray((4, 8), "float32")
    a.strides = (32, 4)
    args = (a, -1)
    key = ("softmax", m.call_signature(args))
    seen = []
    plans = {key: lambda *xs: seen.append(xs) or "planned"}
    ck = lambda *xs: pytest.fail("the checked path ran")  # noqa: E731 -- only a None entry runs it
    m.fast_gate(True)
    assert m.plan_call(plans, "softmax", args, args, ck) == "planned" and seen == [args]
    assert m.plan_call(plans, "log_softmax", args, args, ck) is miss            # no plan for this op
    assert m.plan_call(plans, "softmax", (a, [1]), (a, [1]), ck) is miss        # no signature
    masked = (a, "<per call>")                                              # key_args differ from args
    plans[("softmax", m.call_signature(masked))] = lambda *xs: xs
    assert m.plan_call(plans, "softmax", (a, 7), masked, ck) == (a, 7)
    plans[key] = None                                                       # the checked path's signature
    assert m.plan_call(plans, "softmax", args, args, lambda *xs: ("checked", xs)) == ("checked", args)
    plans[key] = lambda *xs: 1 / 0
    with pytest.raises(ZeroDivisionError):
        m.plan_call(plans, "softmax", args, args, ck)
    m.fast_gate(False)                                                      # a profile, synchronous launches
    plans[key] = lambda *xs: "planned"
    assert m.plan_call(plans, "softmax", args, args, ck) is miss
    m.fast_gate(True)
    m.fast_hold(1)
    assert m.plan_call(plans, "softmax", args, args, ck) is miss
    m.fast_hold(-1)
    with pytest.raises(TypeError, match="plan_call"):
        m.plan_call(plans, "softmax", args)


def test_replay_limits_agree_with_the_tracer():
    """kernels/trace_plans.py declines to make a native replay past _native.c's limits (steps,
    allocations, substitutions a step): the two must agree, else a plan the C side would take
    replays in Python (and one with a per-call seed not at all), or the C side fails to build one."""
    import re
    from pathlib import Path

    from cudakit.kernels import trace_plans
    src = Path(native.__file__).with_name("_native.c").read_text()
    limits = {n: int(re.search(rf"#define CK_MAX_{n} (\d+)", src).group(1)) for n in ("STEPS", "ALLOCS", "SUBS")}
    assert (trace_plans._MAX_STEPS, trace_plans._MAX_ALLOCS, trace_plans._MAX_SUBS) == \
        (limits["STEPS"], limits["ALLOCS"], limits["SUBS"])
    assert trace_plans._MAX_SUBS >= 20   # the materialised attention backward's score kernel with dropout
