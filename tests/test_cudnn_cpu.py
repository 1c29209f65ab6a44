"""kernels/cudnn.py's host-side pieces, without a GPU: how tensors are described to cuDNN
(dims and strides in its (B, H, S, D) order), which calls it may take, and CUDAKIT_CUDNN."""
import numpy as np
import pytest

import cudakit
from cudakit import config
from cudakit.errors import BackendUnavailableError
from cudakit.kernels import cudnn


def test_bhld_desc_is_a_contiguous_batch_of_one_head():
    assert cudnn.bhld_desc(6, 7, 8) == ((6, 1, 7, 8), (56, 56, 8, 1))


def test_blhd_desc_reads_views_of_a_packed_qkv_in_place():
    qkv = np.empty((2, 5, 3, 4, 8), np.float16)          # (B, L, 3, H, D)
    q, k = qkv[:, :, 0], qkv[:, :, 1]
    dims, strides = cudnn.blhd_desc(q)
    assert dims == (2, 4, 5, 8)                           # (B, H, S, D)
    assert strides == (5 * 3 * 4 * 8, 8, 3 * 4 * 8, 1)
    assert cudnn.blhd_desc(k) == (dims, strides)          # the same layout, another offset
    c = np.empty((2, 5, 4, 8), np.float16)                # a contiguous (B, L, H, D)
    assert cudnn.blhd_desc(c) == ((2, 4, 5, 8), (160, 8, 32, 1))


def test_packed_grad_desc_is_a_third_of_a_packed_array():
    """qkv_packed: cuDNN writes dQ, dK, dV as the thirds of one (B, L, 3, H, D) array, each described
    as blhd_desc describes such a view; its rows must start 16-byte aligned."""
    buf = np.empty((2, 5, 3, 4, 8), np.float16)
    assert cudnn.packed_grad_desc((2, 5, 4, 8)) == cudnn.blhd_desc(buf[:, :, 1])
    assert cudnn.packed_grad_ok(buf[:, :, 0])                          # 4 * 8 * 2 bytes
    assert not cudnn.packed_grad_ok(np.empty((2, 5, 1, 4), np.float16)[:, :, :, :])   # 8 bytes a row


def test_bhsd_desc_and_extent():
    x = np.empty((2, 4, 5, 8), np.float16)
    d = cudnn.bhsd_desc(x)
    assert d == ((2, 4, 5, 8), (160, 40, 8, 1))
    assert cudnn._extent(d) == (x.size,)
    view = cudnn.blhd_desc(np.empty((2, 5, 3, 4, 8), np.float16)[:, :, 2])
    assert cudnn._extent(view) == (1 + 1 * 480 + 3 * 8 + 4 * 96 + 7,)   # the last element's offset + 1


def test_signatures_name_every_descriptor_and_flag():
    d = cudnn.bhld_desc(2, 3, 8)
    a = cudnn.sdpa_sig("sdpa_fwd", (d, d, d, d), "bfloat16", 0.125, True, 0)
    assert a == ("sdpa_fwd", (d, d, d, d), "bfloat16", 0.125, True, 0)
    assert a != cudnn.sdpa_sig("sdpa_fwd", (d, d, d, d), "bfloat16", 0.125, False, 0)
    assert a[-1] == 0   # the executor reads the device from the last place


@pytest.mark.parametrize("dtype,d,ok", [("bfloat16", 64, True), ("float16", 256, True), ("float16", 264, False),
                                        ("float16", 36, False), ("float32", 64, False), ("float64", 64, False)])
def test_attention_ok(dtype, d, ok):
    assert cudnn.attention_ok(dtype, d) is ok


def test_conv_dtype_ok_follows_float32_precision():
    old = cudakit.set_float32_precision("tf32")
    try:
        assert cudnn.conv_dtype_ok("float32") and cudnn.conv_dtype_ok("bfloat16")
        assert not cudnn._exact("float32") and cudnn.fprop_sig((1, 2, 3, 3), (2, 2, 1, 1), "float32", (), False, 0)[-1] == 0
        cudakit.set_float32_precision("ieee")   # exact plans only: a signature of its own
        assert cudnn.conv_dtype_ok("float32") and cudnn.conv_dtype_ok("float16") and cudnn._exact("float32")
        assert cudnn.fprop_sig((1, 2, 3, 3), (2, 2, 1, 1), "float32", (), False, 0)[-2:] == ("ieee", 0)
        assert cudnn.dgrad_sig((1, 2, 3, 3), (2, 2, 1, 1), (1, 2, 3, 3), "float32", (), 0, "nhwc")[-3:] == ("nhwc", "ieee", 0)
        assert not cudnn._exact("bfloat16")
        cudakit.set_float32_precision("tf32x3")
        assert not cudnn.conv_dtype_ok("float32")
        assert not cudnn.conv_dtype_ok("float64")
    finally:
        cudakit.set_float32_precision(old)


def test_channels_last_weight_path():
    """The channels-last weight path ("cudnn-krsc") is offered for channels-last activations with a
    window of more than one tap and a dtype cuDNN convolves; its graphs are signatures of their own."""
    assert cudnn.krsc_offered("nhwc", (8, 4, 3, 3), "bfloat16")
    assert cudnn.krsc_offered("nhwc", (8, 4, 1, 3), "float32")
    assert not cudnn.krsc_offered("nhwc", (8, 4, 1, 1), "bfloat16")   # (one memory either way)
    assert not cudnn.krsc_offered("nchw", (8, 4, 3, 3), "bfloat16")
    assert not cudnn.krsc_offered("nhwc", (8, 4, 3, 3), "float64")
    assert cudnn.krsc_offered("nhwc", (8, 4, 100, 100), "float32")   # (permute moves any window)
    assert cudnn.krsc_offered("nhwc", (8, 4, 3, 3), np.float32) and cudnn.krsc_offered("nhwc", (8, 4, 3, 3), np.dtype("float16"))
    geo = (1, 1, 1, 1, 1, 1, 3, 3, 5, 5)
    assert "krsc" in cudnn.fprop_sig((1, 4, 5, 5), (8, 4, 3, 3), "bfloat16", geo, False, 0, "nhwc", True)
    assert "krsc" in cudnn.wgrad_sig((1, 8, 5, 5), (1, 4, 5, 5), (8, 4, 3, 3), "bfloat16", geo, 0, "nhwc", True)
    plain = cudnn.dgrad_sig((1, 8, 5, 5), (8, 4, 3, 3), (1, 4, 5, 5), "bfloat16", geo, 0, "nhwc")
    assert "krsc" not in plain and plain[-1] == 0


@pytest.fixture
def cudnn_setting(monkeypatch):
    def set_(value):
        monkeypatch.setenv("CUDAKIT_CUDNN", value)
        monkeypatch.setattr(config, "_settings", None)
        cudnn._load.cache_clear()
    yield set_
    monkeypatch.setattr(config, "_settings", None)
    cudnn._load.cache_clear()


def test_cudnn_off_is_never_wanted(cudnn_setting):
    cudnn_setting("0")
    assert not cudnn.available() and not cudnn.wanted()
    assert cudnn.why_unavailable() == "CUDAKIT_CUDNN=0"


def test_required_but_unusable_raises_naming_why(cudnn_setting):
    cudnn_setting("1")
    if cudnn.available():
        pytest.skip("cuDNN is usable here")
    with pytest.raises(BackendUnavailableError, match="CUDAKIT_CUDNN=1 but"):
        cudnn.wanted()
    cudnn_setting("auto")
    assert cudnn.wanted() is False and cudnn.why_unavailable()


def test_dropout_seed_and_offset_are_host_words_passed_by_value():
    """kernels/cudnn.py dropout_operands: the Seed and Offset pointers point at host memory holding
    the seed's 64 bits as an int64 (seeds at and above 2^63 wrap to negative) and offset 0, which
    cuDNN's graphs read by value (no launch, no device memory); the plan timing's scratch passes a
    host int64 for them too."""
    import ctypes

    from cudakit.kernels import cudnn as cd
    for seed, word in ((0, 0), (7, 7), (2**63 - 1, 2**63 - 1), (2**63, -2**63), (2**64 - 1, -1)):
        words, (s, o) = cd.dropout_operands(seed)
        assert o == s + 8 and s == ctypes.addressof(words)
        assert ctypes.c_int64.from_address(s).value == word and ctypes.c_int64.from_address(o).value == 0
    ptrs, keep = cd._scratch(cd._BY_VALUE, cd._BY_VALUE)()
    assert [ctypes.c_int64.from_address(p).value for p in ptrs] == [0, 0] and len(keep) == 2


def test_small_workspaces_are_kept_per_thread_device_and_stream(monkeypatch):
    """kernels/cudnn.py _workspace: a workspace of up to _WS_KEPT bytes is one buffer per (thread,
    device, stream), reused by the next execution there and replaced by a larger one when asked;
    another stream, device or thread gets its own; a stream being captured (or whose capture state
    cannot be read), an allocator other than cudakit's pool's (a CUDA graph's warm-up) and a larger
    workspace get a fresh buffer each call (on a fake of CuPy)."""
    import threading
    import types

    from cudakit.kernels import cudnn as cd

    class Err(Exception):
        pass

    class Buf:
        def __init__(self, n):
            self.nbytes = n
            self.data = types.SimpleNamespace(ptr=id(self))

    made = []

    def empty(shape, dtype):
        made.append(Buf(shape[0]))
        return made[-1]

    class Stream:
        capturing = False

        def __init__(self, ptr):
            self.ptr = ptr

        def is_capturing(self):
            if self.capturing == "error":
                raise Err("cudaErrorStreamCaptureImplicit")
            return self.capturing

    fake = types.SimpleNamespace(empty=empty, uint8="uint8",
                                 cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(CUDARuntimeError=Err)))
    monkeypatch.setattr(cd._cupy, "cupy", lambda: fake)
    monkeypatch.setattr(cd, "_kept", threading.local())
    pool_malloc, current = object(), {}   # CuPy's allocator: cudakit's pool's, or a scope's on top
    monkeypatch.setattr(cd.memory, "_allocator", pool_malloc)
    allocators = types.SimpleNamespace(get_allocator=lambda: current.get("a", pool_malloc))
    monkeypatch.setattr(cd.memory, "_mem_mod", allocators)
    s1, s2 = Stream(1), Stream(2)
    p, buf = cd._workspace(256, 0, s1)
    assert p == buf.data.ptr and buf.nbytes >= 256 and len(made) == 1
    assert cd._workspace(1000, 0, s1)[1] is buf and len(made) == 1      # fits: the same buffer
    big = cd._workspace(buf.nbytes + 1, 0, s1)[1]                        # larger: replaced, then kept
    assert big is not buf and cd._workspace(256, 0, s1)[1] is big
    other = cd._workspace(256, 0, s2)[1]
    assert other is not big and cd._workspace(256, 0, s2)[1] is other   # another stream: its own
    assert cd._workspace(256, 1, s1)[1] is not big                      # another device
    seen = []
    t = threading.Thread(target=lambda: seen.append(cd._workspace(256, 0, s1)[1]))
    t.start()
    t.join()
    assert seen[0] is not big                                           # another thread
    n = len(made)
    for state in (True, "error"):
        s1.capturing = state                                            # captured: fresh each call
        a, b = cd._workspace(256, 0, s1)[1], cd._workspace(256, 0, s1)[1]
        assert a is not b and big not in (a, b)
    s1.capturing = False
    current["a"] = object()   # a graph's warm-up (its private pool) or a user's allocator: fresh each call
    a, b = cd._workspace(256, 0, s1)[1], cd._workspace(256, 0, s1)[1]
    assert a is not b and big not in (a, b)
    del current["a"]
    assert len(made) == n + 6 and cd._workspace(256, 0, s1)[1] is big
    huge = cd._WS_KEPT + 1                                              # over the cap: fresh each call
    assert cd._workspace(huge, 0, s1)[1] is not cd._workspace(huge, 0, s1)[1]
    assert cd._workspace(256, 0, s1)[1] is big
