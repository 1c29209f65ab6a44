"""The native tiny-op path reading CuPy's arrays from their fields (runtime/_cupy_layout.py and
fast_layout in _native.c), with real CuPy objects over fake device memory: CuPy imports and builds
arrays without a GPU, and cuLaunchKernel is a recording ctypes callback. Skipped where CuPy is not
installed (CI); the GPU suite runs the same path for real (tests/gpu/test_elementwise_gpu.py)."""
import ctypes
import struct

import numpy as np
import pytest
from helpers import launch_type, native_module

from cudakit.runtime import _cupy_layout, native

cp = pytest.importorskip("cupy")
mem = cp.cuda.memory

LAUNCH = launch_type()


def _fake(ptr, size=1 << 20, dev=0):
    return mem.MemoryPointer(mem.UnownedMemory(ptr, size, None, dev), 0)


def _field(o, off, fmt):
    return struct.unpack(fmt, ctypes.string_at(id(o) + off, struct.calcsize(fmt)))[0]


def test_discovered_offsets_read_arrays_it_never_probed():
    offs = dict(zip(_cupy_layout.FIELDS, _cupy_layout.discover(cp)))
    probes = [cp.ndarray((3, 1, 4, 2), np.bool_, _fake(0x7E0000001000)),
              cp.ndarray((9, 6), np.complex64, _fake(0x7E0000002000, dev=3))[:, ::2],
              cp.ndarray((), np.uint8, _fake(0x7E0000003000))]
    for a in probes:
        assert _field(a, offs["size"], "<q") == a.size
        assert _field(a, offs["c_contiguous"], "<i") == int(a._c_contiguous)
        assert _field(a, offs["dtype"], "<Q") == id(a.dtype)
        assert _field(a, offs["data"], "<Q") == id(a.data)
        begin, end = _field(a, offs["shape"], "<Q"), _field(a, offs["shape"] + 8, "<Q")
        assert (end - begin) // 8 == a.ndim
        if a.ndim:
            assert struct.unpack(f"<{a.ndim}q", ctypes.string_at(begin, 8 * a.ndim)) == a.shape
        assert _field(a.data, offs["ptr"], "<Q") == a.data.ptr
        assert _field(a.data, offs["device_id"], "<i") == a.data.device_id


def test_a_field_found_at_no_offset_or_at_two_is_refused():
    class Two:
        __slots__ = ("x", "y")
    objs = []
    for v in (7, 8, 9):
        o = Two()
        o.x = o.y = v
        objs.append(o)
    with pytest.raises(LookupError, match="2 offsets"):
        _cupy_layout._offset(objs, 8, lambda o: id(o.x))
    with pytest.raises(LookupError, match="0 offsets"):
        _cupy_layout._offset(objs, 8, lambda o: 123456789)

    class NotCupy:  # no cuda.memory: another library, no layout
        pass
    assert _cupy_layout.discover(NotCupy()) is None


# -- ew() through the fields and CuPy's _ndarray_init -------------------------------------------

@pytest.fixture
def fields_ew(tmp_path):
    m = native_module(tmp_path / "layout.so")
    recent, seen, state = [], {}, {"next": 0x7D0000000000, "device": 0}

    def fake_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        seen.update(f=f, dims=(gx, gy, gz, bx, by, bz), smem=smem, raw=[ctypes.string_at(params[i], 8) for i in range(5)])
        return 0
    cb = LAUNCH(fake_launch)
    m.set_launch(ctypes.cast(cb, ctypes.c_void_p).value)

    def allocator(size):  # 512-byte aligned fake blocks, as CuPy's pool hands out
        p = state["next"]
        state["next"] += -(-size // 512) * 512 + 512
        return _fake(p, size)
    old = mem.get_allocator()
    mem.set_allocator(allocator)
    m.fast_setup(cp.ndarray, lambda: state["device"], lambda: type("S", (), {"ptr": 0x99})(), recent.append, print)
    m.fast_layout(_cupy_layout.discover(cp), mem.MemoryPointer, native._c_function(cp._core.core, "_ndarray_init"))
    m.fast_gate(True)
    yield m, seen, recent, state
    mem.set_allocator(old)
    del cb


def _table(dtype="float32", vec=4, dev=0):
    from cudakit.kernels.elementwise import ew_key
    return {ew_key(np.dtype(dtype), dev, vec): (0xF00, 1024, 256, "k<T>", (256, 1, 1), 56320)}


def _ptrs(seen, k):
    return [struct.unpack("<Q", r)[0] for r in seen["raw"][:k]]


@pytest.mark.parametrize("ctor", ["ndarray_init", "cupy.ndarray"])
def test_ew_reads_fields_and_builds_the_output_through_cupy(fields_ew, ctor):
    m, seen, recent, state = fields_ew
    if ctor == "cupy.ndarray":  # the layout without CuPy's C constructor: a shape tuple from the dims
        m.fast_layout(_cupy_layout.discover(cp), mem.MemoryPointer, None)
    a = cp.ndarray((3, 700), np.float32, _fake(0x7C0000000000))
    b = cp.ndarray((3, 700), np.float32, _fake(0x7C0000100000))
    out = m.ew(_table(), a, b, 0.5)
    assert type(out) is cp.ndarray and out.shape == (3, 700) and out.dtype == np.float32
    assert out._c_contiguous and out.strides == (2800, 4)
    assert _ptrs(seen, 3) == [a.data.ptr, b.data.ptr, out.data.ptr] and out.data.ptr >= 0x7D0000000000
    assert struct.unpack("<q", seen["raw"][3])[0] == 2100 and struct.unpack("<d", seen["raw"][4])[0] == 0.5
    assert seen["dims"] == (3, 1, 1, 256, 1, 1) and recent[-1] == ("k<T>", (3, 1, 1), (256, 1, 1))
    assert seen["smem"] == 56320  # the entry's shared bytes (a blocks-per-SM cap) reach the launch
    s = m.ew(_table(), cp.ndarray((), np.float32, _fake(0x7C0000200000)), None, 0.0)  # 0-d: one element
    assert s.shape == () and struct.unpack("<q", seen["raw"][2])[0] == 1
    z = m.ew(_table(), cp.ndarray((4, 0, 2), np.float32, _fake(0x7C0000300000)), None, 0.0)
    assert z.shape == (4, 0, 2) and len(recent) == 2  # nothing launched for no elements


def test_nd_empty_builds_arrays_through_cupys_constructor(fields_ew):
    """nd_empty(shape, dtype) through CuPy's _ndarray_init: C-contiguous arrays of the shape and
    dtype (given as a numpy dtype or a scalar type) from CuPy's current allocator; 0-d and empty
    shapes; dims CuPy's constructor must check (negative, numpy ints) go through cupy.ndarray."""
    m, seen, recent, state = fields_ew
    start = state["next"]
    a = m.nd_empty((3, 5, 7), np.dtype(np.float16))
    assert type(a) is cp.ndarray and a.shape == (3, 5, 7) and a.dtype == np.float16
    assert a._c_contiguous and a.strides == (70, 14, 2) and a.data.ptr >= start
    b = m.nd_empty((4,), cp.float32)
    assert b.dtype == np.float32 and b.data.ptr > a.data.ptr
    assert m.nd_empty((), np.int64).shape == () and m.nd_empty((2, 0), np.float32).size == 0
    assert m.nd_empty((np.int64(2), 3), np.float32).shape == (2, 3)
    with pytest.raises(ValueError):
        m.nd_empty((-1, 3), np.float32)
    assert not recent   # (nothing launched)


def test_ew_through_fields_declines_what_the_python_path_handles(fields_ew):
    m, seen, recent, state = fields_ew
    table = {**_table(), **_table(dev=1)}
    a = cp.ndarray((4, 6), np.float32, _fake(0x7C0000000000))
    cases = [
        (a.T, None),                                                    # not C-contiguous
        (a, cp.ndarray((6, 4), np.float32, _fake(0x7C0000100000))),     # same size, other shape
        (a, cp.ndarray((4, 6), np.float64, _fake(0x7C0000100000))),     # other dtype
        (a, cp.ndarray((4, 6), np.float32, _fake(0x7C0000100000, dev=1))),  # other device
        (cp.ndarray((4, 6), np.int8, _fake(0x7C0000100000)), None),     # no kernel for the dtype
    ]
    for x0, x1 in cases:
        assert m.ew(table, x0, x1, 0.0) is None
    state["device"] = 1                                                 # a is on device 0
    assert m.ew(table, a, None, 0.0) is None
    state["device"] = 0
    assert not recent
    odd = cp.ndarray((5,), np.float32, _fake(0x7C0000000004))          # 4-byte aligned: vector width 1
    assert m.ew(table, odd, None, 0.0) is None                          # no width-1 entry
    assert m.ew(_table(vec=1), odd, None, 0.0) is not None


def test_fast_layout_checks_its_offsets_and_capsule(fields_ew):
    m = fields_ew[0]
    offs = list(_cupy_layout.discover(cp))
    bad = offs.copy()
    bad[4] = cp.ndarray.__basicsize__          # the data pointer past the object's end
    with pytest.raises(ValueError, match="outside"):
        m.fast_layout(tuple(bad), mem.MemoryPointer, None)
    bad = offs.copy()
    bad[0] = 8                                 # inside the object header
    with pytest.raises(ValueError, match="outside"):
        m.fast_layout(tuple(bad), mem.MemoryPointer, None)
    with pytest.raises(TypeError, match="tuple"):
        m.fast_layout(list(offs), mem.MemoryPointer, None)
    getdev = native._c_function(cp.cuda.runtime, "getDevice")
    with pytest.raises(TypeError, match="_ndarray_base"):
        m.fast_layout(tuple(offs), mem.MemoryPointer, getdev)
    m.fast_layout(None, None, None)            # attributes again: still correct
    a = cp.ndarray((8,), np.float32, _fake(0x7C0000000000))
    out = m.ew(_table(), a, a, 0.0)
    assert out.shape == (8,) and _ptrs(fields_ew[1], 2) == [a.data.ptr, a.data.ptr]


def test_ew_through_fields_writes_into_out(fields_ew):
    m, seen, _, state = fields_ew
    a = cp.ndarray((6, 10), np.float32, _fake(0x7C0000000000))
    b = cp.ndarray((6, 10), np.float32, _fake(0x7C0000100000))
    o = cp.ndarray((6, 10), np.float32, _fake(0x7C0000200000))
    before = state["next"]
    assert m.ew(_table(), a, b, 0.0, o) is o and state["next"] == before   # nothing allocated
    assert _ptrs(seen, 3) == [a.data.ptr, b.data.ptr, o.data.ptr]
    assert m.ew(_table(), a, None, 0.0, a) is a
    shifted = cp.ndarray((6, 10), np.float32, _fake(0x7C0000000000 + 16))
    assert m.ew(_table(), a, b, 0.0, shifted) is None                     # overlaps a, not in place
    assert m.ew(_table(), a, b, 0.0, o.reshape(10, 6)) is None             # another shape
    assert m.ew(_table(), a, b, 0.0, cp.ndarray((6, 10), np.float32, _fake(0x7C0000300000, dev=2))) is None


def test_fast_setup_forgets_the_layout_of_the_previous_array_type(fields_ew):
    m, seen, recent, state = fields_ew
    a = cp.ndarray((8,), np.float32, _fake(0x7C0000000000))
    assert m.ew(_table(), a, None, 0.0) is not None

    class Other:  # another array type: its objects must not be read at cupy.ndarray's offsets
        _c_contiguous = True
        shape, size, dtype = (8,), 8, np.dtype(np.float32)
        data = type("D", (), {"ptr": 0x7C0000000000, "device_id": 0})()

        def __init__(self, *args):
            pass
    m.fast_setup(Other, lambda: 0, lambda: type("S", (), {"ptr": 0})(), recent.append, print)
    m.fast_gate(True)
    out = m.ew(_table(), Other(), None, 0.0)   # read through attributes: no crash, the right pointer
    assert isinstance(out, Other) and _ptrs(seen, 1) == [0x7C0000000000]


# -- plan_call's inline cache (arguments compared field by field) --------------------------------

def test_plan_call_cache_takes_a_plan_only_for_arguments_with_the_same_signature(fields_ew):
    m, seen, recent, state = fields_ew
    miss = object()
    m.dispatch_setup(miss)
    ran = []
    plan = lambda *a: ran.append(("plan", a[1])) or "planned"  # noqa: E731
    checked = lambda *a: ran.append(("checked", a[1])) or "checked"  # noqa: E731
    a = cp.ndarray((4, 6), np.float32, _fake(0x7C0000000000))
    plans = {("softmax", m.call_signature((a, -1))): plan}
    call = lambda *args: m.plan_call(plans, "softmax", args, args, checked)  # noqa: E731
    assert call(a, -1) == "planned"
    b = cp.ndarray((4, 6), np.float32, _fake(0x7C0000100000))          # another array, same fields
    assert call(b, -1) == "planned"
    plans.clear()   # emptied behind the cache's back: a cached signature still finds its plan ...
    assert call(b, -1) == "planned"
    m.plans_changed()   # ... until the table says it changed (dispatch.clear() does)
    assert call(b, -1) is miss
    plans[("softmax", m.call_signature((a, -1)))] = plan
    assert call(a, -1) == "planned"
    plans.clear()   # stale on purpose: only a call with a's exact signature could find the plan
    others = [
        (cp.ndarray((6, 4), np.float32, _fake(0x7C0000100000)).T, -1),       # same shape, other strides
        (cp.ndarray((4, 12), np.float32, _fake(0x7C0000100000))[:, ::2], -1),  # strided view
        (cp.ndarray((4, 6), np.float64, _fake(0x7C0000100000)), -1),       # other dtype
        (cp.ndarray((4, 6), np.float32, _fake(0x7C0000100004)), -1),       # other alignment
        (cp.ndarray((4, 6), np.float32, _fake(0x7C0000100000, dev=1)), -1),  # other device
        (a, 1), (a, -1.0), (a, True), (a, (-1,)), (a, None),                  # other scalars
        (cp.ndarray((), np.float32, _fake(0x7C0000100000)), -1),           # 0-d: no signature
    ]
    for args in others:
        assert call(*args) is miss, args
    assert call(a, -1) == "planned"   # a's entry is still cached: no miss replaced it, the table was not emptied
    state["device"] = 1                # but not on another current device
    assert call(a, -1) is miss
    state["device"] = 0
    m.fast_gate(False)
    assert call(a, -1) is miss
    m.fast_gate(True)
    wide = cp.ndarray((4, 2), np.float32, _fake(0x7C0000200000))[:, :1]   # (4, 1) strides (8, 4)
    plans[("softmax", m.call_signature((wide, -1)))] = plan
    assert call(wide, -1) == "planned"
    plans.clear()
    assert call(cp.ndarray((4, 1), np.float32, _fake(0x7C0000300000)), -1) is miss   # strides (4, 4)
    m.plans_changed()
    plans[("softmax", m.call_signature((a, -1)))] = None   # the signature's checked path, cached too
    assert call(a, -1) == "checked" and call(b, -1) == "checked"
    assert ran[-2:] == [("checked", -1), ("checked", -1)] and not recent
    m.plans_changed()
    plans.clear()
    plans[("softmax", m.call_signature((a, (1, 0))))] = plan
    assert call(a, (1, 0)) == "planned"
    plans.clear()   # stale: a tuple of other element types equal in value must not find it
    assert call(a, (1.0, 0)) is miss and call(a, (True, 0)) is miss and call(a, (1, 0)) == "planned"
