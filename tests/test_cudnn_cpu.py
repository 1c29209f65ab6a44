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


def test_dropout_seed_words_are_read_again_only_by_the_same_thread_stream_and_seed(monkeypatch):
    """kernels/cudnn.py dropout_operands: the last call's seed words are read again (no launch) by a
    call with the same seed on the same thread, device and stream object; another seed, stream,
    device or thread, a graph being captured, or a stream whose capture state cannot be read
    writes new words (on fakes of CuPy and of the words' launch)."""
    import threading
    import types

    from cudakit import graphs
    from cudakit.kernels import cudnn as cd
    from cudakit.kernels import dropout as dk

    class Err(Exception):
        pass

    class Stream:
        capturing = False

        def is_capturing(self):
            if self.capturing == "error":
                raise Err("cudaErrorStreamCaptureImplicit")
            return self.capturing

    state = types.SimpleNamespace(stream=Stream(), device=0)
    runtime = types.SimpleNamespace(getDevice=lambda: state.device, CUDARuntimeError=Err)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(get_current_stream=lambda: state.stream,
                                                            runtime=runtime))
    monkeypatch.setattr(cd._cupy, "loaded_cupy", lambda: fake)
    launches = []

    def words(seed):
        launches.append(seed)
        return types.SimpleNamespace(data=types.SimpleNamespace(ptr=1024 * len(launches)))
    monkeypatch.setattr(dk, "philox_words", words)
    monkeypatch.setattr(cd, "_last_words", threading.local())

    def call(seed):
        w, ptrs = cd.dropout_operands(seed)
        assert ptrs == [w.data.ptr, w.data.ptr + 8]
        return w

    first = call(5)
    assert call(5) is first and launches == [5]          # the backward after its forward
    call(6)
    assert call(5) is not first and launches == [5, 6, 5]
    state.stream = Stream()                              # another stream object
    call(5)
    assert launches == [5, 6, 5, 5]
    state.device = 1                                     # another device
    call(5)
    assert launches[-1] == 5 and len(launches) == 5
    out = []
    t = threading.Thread(target=lambda: out.append(call(5)))   # another thread (a per-thread default
    t.start()                                                  # stream is one object for all threads)
    t.join()
    assert len(launches) == 6
    state.stream.capturing = True                        # captured: new words, not kept
    call(7)
    call(7)
    assert launches[-2:] == [7, 7]
    state.stream.capturing = "error"
    call(8)
    call(8)
    assert launches[-2:] == [8, 8]
    state.stream.capturing = False
    monkeypatch.setattr(graphs._local, "capture", object(), raising=False)   # cudakit.graph capturing
    call(9)
    call(9)
    assert launches[-2:] == [9, 9]
