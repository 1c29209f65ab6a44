"""The native launcher (runtime/_native.c) builds with the system compiler and packs each parameter
code into its slot exactly; cuLaunchKernel is replaced by a recording ctypes callback, so no GPU is
needed."""
import ctypes
import struct

import pytest

from cudakit.runtime import native

LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                          ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    try:
        return native.load(tmp_path_factory.mktemp("native") / "m.so")
    except native.NativeBuildError as e:
        pytest.skip(f"native launcher cannot be built here: {e}")


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


def test_numpy_integers_are_accepted_for_dimensions(mod):
    np = pytest.importorskip("numpy")
    seen, _cb = _recorder(mod, [8])
    assert mod.launch(np.uint64(7), np.int64(3), 1, 1, np.int32(64), 1, 1, np.int64(0), np.int64(9), b"Q", np.int64(-1)) == 0
    assert seen["f"] == 7 and seen["dims"] == (3, 1, 1, 64, 1, 1) and seen["stream"] == 9
    assert struct.unpack("<q", seen["raw"][0])[0] == -1
    with pytest.raises(OverflowError, match="32 bits"):
        mod.launch(1, 2**32, 1, 1, 1, 1, 1, 0, 0, b"")
