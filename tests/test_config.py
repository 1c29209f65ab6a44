import numpy as np
import pytest

import cudakit
from cudakit import config


@pytest.mark.parametrize("text,expected", [
    ("8GiB", (8 * 2**30, None)), ("512MB", (512 * 10**6, None)), ("1024", (1024, None)),
    (4096, (4096, None)), ("80%", (None, 0.8)), ("1.5 gib", (int(1.5 * 2**30), None)),
])
def test_parse_size(text, expected):
    assert config.parse_size(text) == expected


@pytest.mark.parametrize("bad", ["eight gigs", "150%", "0%", "-5", "5 parsecs", float("inf"), float("nan")])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError, match="memory"):
        config.parse_size(bad)


@pytest.mark.parametrize("bad,hint", [("0.8", "written as '80%'"), (0.25, "written as '25%'"), ("0.5b", "byte$")])
def test_parse_size_refuses_sizes_under_a_byte(bad, hint):
    """A fraction written as a plain number (GENESIS_CUDA_MEMORY_FRACTION=0.8 style) would be 0 bytes,
    which the pool reads as no limit at all: refused, naming the percent form."""
    with pytest.raises(ValueError, match=hint):
        config.parse_size(bad)
    assert config.parse_size("0") == config.parse_size(0) == (0, None)


def test_settings_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDAKIT_BACKEND", "CPU")
    monkeypatch.setenv("CUDAKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUDAKIT_LAUNCH_BLOCKING", "1")
    s = config.reload()
    assert (s.backend, s.cache_dir, s.launch_blocking) == ("cpu", tmp_path, True)
    monkeypatch.undo()
    config.reload()


def test_float32_precision_env_and_setter(monkeypatch):
    monkeypatch.delenv("CUDAKIT_FLOAT32_PRECISION", raising=False)
    config.reload()
    assert config.float32_precision() == "tf32x3"
    monkeypatch.setenv("CUDAKIT_FLOAT32_PRECISION", " IEEE ")
    config.reload()
    assert config.float32_precision() == "ieee"
    try:
        assert config.set_float32_precision("TF32") is None   # nothing was set: the environment applied
        assert config.float32_precision() == "tf32"
        with pytest.raises(cudakit.ArgumentError, match=r"one of 'tf32x3', 'ieee', 'tf32' \(got 'fp32'\)"):
            config.set_float32_precision("fp32")
        with pytest.raises(cudakit.ArgumentError, match=r"value must be a string.*\(got 3\)"):
            config.set_float32_precision(3)
        assert config.float32_precision() == "tf32"   # a refused value changes nothing
        assert config.set_float32_precision("tf32x3") == "tf32"
        assert config.set_float32_precision(None) == "tf32x3"
        assert config.float32_precision() == "ieee"   # back to the environment's
        old = config.set_float32_precision("tf32")
        config.set_float32_precision(old)             # save and restore leaves nothing pinned
        monkeypatch.setenv("CUDAKIT_FLOAT32_PRECISION", "tf32")
        config.reload()
        assert config.float32_precision() == "tf32"
        # a bad value fails at the first use of the settings, naming the variable (issue 29)
        monkeypatch.setenv("CUDAKIT_FLOAT32_PRECISION", "half")
        with pytest.raises(ValueError, match="CUDAKIT_FLOAT32_PRECISION='half'"):
            config.reload()
        monkeypatch.setenv("CUDAKIT_FLOAT32_PRECISION", "ieee")
        config.reload()
        x = np.ones((1, 2, 4, 4), np.float32)
        assert cudakit.get_backend("cpu").conv2d(x, np.ones((3, 2, 3, 3), np.float32)).shape == (1, 3, 2, 2)
    finally:
        monkeypatch.undo()
        config.reload()
        config.set_float32_precision(None)


@pytest.mark.parametrize("prec", config.FLOAT32_PRECISIONS)
def test_float32_precision_reaches_the_kernel_plans(prec):
    """conv2d's and attention's float32 kernels take the precision (and tiles made for it); 16-bit
    plans stay on the tensor cores whatever it says."""
    from cudakit.kernels import attention, conv
    geo = (1, 1, 1, 1, 1, 1, 3, 3, 16, 16)
    old = config.set_float32_precision(prec)
    try:
        assert conv.plan((2, 8, 16, 16), 64, geo, True, "float32")[2]["PREC"] == prec
        assert conv.plan((2, 8, 16, 16), 64, geo, True, "bfloat16")[2]["PREC"] == "tf32"
        assert conv.wgrad_plan((2, 8, 16, 16), 64, geo, dtype_name="float32")[2]["PREC"] == prec
        cfg = attention._config("float32", 64, None)
        kv, qc = attention._backward_configs("float32", cfg)
        assert cfg["PREC"] == kv["PREC"] == qc["PREC"] == prec
        assert attention._config("bfloat16", 64, None)["PREC"] == "tf32"
        # FMA products keep the small tiles (wider ones spill); tensor-core products take wider ones
        assert (cfg["BLOCK_M"], cfg["BLOCK_N"]) == ((64, 32) if prec == "ieee" else (128, 64))
    finally:
        config.set_float32_precision(old)


def test_attention_dropout_stream_setting(monkeypatch):
    """CUDAKIT_ATTENTION_DROPOUT: "cudnn" unless set, "cudakit" (any case), anything else a
    ConfigError naming the variable and the accepted values. Under "cudakit" no call asks cuDNN;
    under "cudnn", the calls cuDNN's
    dropout cannot take (a window, key lengths, a bias, grouped k, v, causal with Lq != Lk, no
    dropout at all) keep cudakit's stream before cuDNN is asked."""
    from cudakit import config
    from cudakit.backends.attention_masks import Masks
    from cudakit.kernels import attention
    monkeypatch.delenv("CUDAKIT_ATTENTION_DROPOUT", raising=False)
    assert config.reload().attention_dropout == "cudnn"
    drop = (429496730, 1 / 0.9, 5)
    asked = []
    monkeypatch.setattr(attention, "_cudnn_candidate", lambda *a: asked.append(a) or False)
    monkeypatch.setenv("CUDAKIT_ATTENTION_DROPOUT", " CUDAKIT ")
    assert config.reload().attention_dropout == "cudakit"
    assert not attention.cudnn_dropout("bfloat16", 4, 64, 64, 64, 0.125, Masks(True, dropout=drop), 1, 0)
    assert not asked
    monkeypatch.setenv("CUDAKIT_ATTENTION_DROPOUT", " CUDNN ")
    assert config.reload().attention_dropout == "cudnn"
    for masks, lq, lk, groups, dtype in ((Masks(False, window=(4, 0), dropout=drop), 64, 64, 1, "bfloat16"),
                                         (Masks(False, lengths=object(), dropout=drop), 64, 64, 1, "bfloat16"),
                                         (Masks(False, bias=object(), dropout=drop), 64, 64, 1, "bfloat16"),
                                         (Masks(False, dropout=drop), 64, 64, 2, "bfloat16"),
                                         (Masks(True, dropout=drop), 32, 64, 1, "bfloat16"),
                                         (Masks(False), 64, 64, 1, "bfloat16")):
        assert not attention.cudnn_dropout(dtype, 4, lq, lk, 64, 0.125, masks, groups, 0)
    assert not asked
    assert not attention.cudnn_dropout("bfloat16", 4, 64, 64, 64, 0.125, Masks(True, dropout=drop), 1, 0)
    assert asked   # (a call it may take asks whether cuDNN is there: here it is not)
    monkeypatch.setenv("CUDAKIT_ATTENTION_DROPOUT", "philox")
    with pytest.raises(cudakit.ConfigError, match="CUDAKIT_ATTENTION_DROPOUT='philox' must be one of 'cudakit', 'cudnn'"):
        config.reload()
    monkeypatch.delenv("CUDAKIT_ATTENTION_DROPOUT")
    config.reload()


def test_set_limit_checks_its_arguments_before_the_pool():
    """memory.set_limit: an infinite size was an OverflowError, a string fraction NumPy's TypeError,
    a bad size a plain ValueError (found by a probing helper); now cudakit's errors naming the call,
    raised before the pool is touched (so also without a GPU)."""
    from cudakit.runtime import memory
    for kw, err, what in (({"bytes": float("inf")}, cudakit.ArgumentError, "finite number of bytes"),
                          ({"bytes": "abc"}, cudakit.ArgumentError, "bad memory size 'abc'"),
                          ({"fraction": "x"}, cudakit.ArgumentTypeError, "fraction must be a number"),
                          ({"fraction": 1.5}, cudakit.ArgumentError, "fraction must be in")):
        with pytest.raises(err, match=what):
            memory.set_limit(**kw)


def test_to_host_out_must_be_a_numpy_array():
    """to_host(x, out=[0, 0, 0]) was an AttributeError (found by a probing helper)."""
    import numpy as np
    with pytest.raises(cudakit.ArgumentTypeError, match="out must be a NumPy array"):
        cudakit.to_host(np.ones(3), out=[0, 0, 0])
    out = np.zeros(3)
    assert cudakit.to_host(np.ones(3), out=out) is out and out.sum() == 3


def test_pdl_setting(monkeypatch):
    """CUDAKIT_PDL: on unless set off, a yes/no value; off, runtime.triton.pdl_supported says no on
    any device (without asking the device), so kernels with a PDL constexpr compile without it."""
    from cudakit import config
    from cudakit.runtime import triton as rt
    try:
        monkeypatch.delenv("CUDAKIT_PDL", raising=False)
        assert config.reload().pdl is True
        monkeypatch.setenv("CUDAKIT_PDL", "0")
        assert config.reload().pdl is False
        assert rt.pdl_supported(0) is False
        monkeypatch.setenv("CUDAKIT_PDL", "sometimes")
        with pytest.raises(config.ConfigError, match="CUDAKIT_PDL='sometimes' is not a yes/no value"):
            config.reload()
    finally:
        monkeypatch.delenv("CUDAKIT_PDL", raising=False)
        config.reload()


def test_bn_single_read_setting(monkeypatch):
    """CUDAKIT_BN_SINGLE_READ: on unless set off, a yes/no value, anything else a ConfigError naming the
    variable; off, kernels/normalization.py's _bn_resident answers no single-read grid without
    asking a device (the GPU side is in tests/gpu/test_normalization_gpu.py)."""
    from cudakit import config
    from cudakit.kernels import normalization as nk
    monkeypatch.delenv("CUDAKIT_BN_SINGLE_READ", raising=False)
    assert config.reload().bn_single_read is True
    monkeypatch.setenv("CUDAKIT_BN_SINGLE_READ", "off")
    try:
        assert config.reload().bn_single_read is False
        assert nk._bn_resident("float32", "ck_bn_resident<float, 4, false, false>", 64, 4096, False, 16, 1 << 20) is None
        monkeypatch.setenv("CUDAKIT_BN_SINGLE_READ", "2")
        with pytest.raises(config.ConfigError, match="CUDAKIT_BN_SINGLE_READ='2' is not a yes/no value"):
            config.reload()
    finally:
        monkeypatch.undo()
        config.reload()


def test_attention_f16_parts_setting(monkeypatch):
    """CUDAKIT_ATTENTION_F16_PARTS: on unless set off, a yes/no value, anything else a ConfigError naming
    the variable; kernels/attention.py offers the float16-parts forward by it unless its F16_PARTS
    overrides the setting (tests, sweeps)."""
    from cudakit import config
    from cudakit.kernels import attention
    monkeypatch.setattr(attention, "F16_PARTS", None)
    try:
        monkeypatch.delenv("CUDAKIT_ATTENTION_F16_PARTS", raising=False)
        assert config.reload().attention_f16_parts is True
        assert attention._f16_parts_offered() is True
        monkeypatch.setenv("CUDAKIT_ATTENTION_F16_PARTS", " Off ")
        assert config.reload().attention_f16_parts is False
        assert attention._f16_parts_offered() is False
        monkeypatch.setattr(attention, "F16_PARTS", True)
        assert attention._f16_parts_offered() is True
        monkeypatch.setenv("CUDAKIT_ATTENTION_F16_PARTS", "maybe")
        with pytest.raises(config.ConfigError, match="CUDAKIT_ATTENTION_F16_PARTS='maybe' is not a yes/no value"):
            config.reload()
    finally:   # (the environment as it was, then the settings read from it)
        monkeypatch.undo()
        config.reload()
