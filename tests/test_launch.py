import re

import pytest

import cudakit
from cudakit.errors import LaunchError


@pytest.mark.parametrize("n,threads,grid", [(100, 256, 1), (256, 256, 1), (257, 256, 2), (1000, 256, 4),
                                            (10000, 256, 40), (0, 128, 0), (2**31 + 5, 1024, 2**21 + 1)])
def test_launch_config(n, threads, grid):
    assert cudakit.launch_config(n, threads) == (grid, threads)


def test_block_over_limit_names_value_and_limit():
    with pytest.raises(LaunchError, match=r"block must be <= 1024 threads \(got 2048\)"):
        cudakit.LaunchConfig(grid=1, block=2048)
    with pytest.raises(LaunchError, match=r"block dimension 2 must be in \[1, 64\] \(got 65\)"):
        cudakit.LaunchConfig(grid=1, block=(1, 1, 65))
    with pytest.raises(LaunchError, match=r"grid dimension 1 must be in \[1, 65535\]"):
        cudakit.LaunchConfig(grid=(1, 70000), block=32)
    with pytest.raises(LaunchError, match="threads must be in"):
        cudakit.launch_config(10, threads=0)


def test_launch_config_dataclass_normalises():
    c = cudakit.LaunchConfig(grid=(4, 2), block=128, shared_mem=1024)
    assert c.grid == (4, 2, 1) and c.block == (128, 1, 1)


def test_launch_error_names_only_what_it_knows():
    """A refusal before the launch (no grid or block yet) does not print empty tuples."""
    e = LaunchError("needs 262144 bytes of shared memory", "attn_fwd")
    assert str(e) == "kernel 'attn_fwd': needs 262144 bytes of shared memory"
    e = LaunchError("too many resources", "k", (4, 1, 1), (256, 1, 1))
    assert str(e) == "kernel 'k' grid=(4, 1, 1) block=(256, 1, 1): too many resources"
    assert (e.kernel, e.grid, e.block) == ("k", (4, 1, 1), (256, 1, 1))


def test_native_args_code_each_signature_once(monkeypatch):
    """_native_args: arrays become their device pointers, NumPy scalars pass as they are, the
    codes of a tuple of argument types are worked out once; any other kind declines (None)."""
    import numpy as np
    from cudakit.runtime import compiler

    class Arr:  # stands in for a CuPy array: only .data.ptr is read
        def __init__(self, ptr):
            self.data = type("Mem", (), {"ptr": ptr})()
    monkeypatch.setattr(compiler, "_native_launch", object())   # "available": no native set-up
    monkeypatch.setattr(compiler, "_ARG_CODES", {Arr: "A", np.int64: "Q", np.uint64: "Q", np.int32: "i",
                                                  np.float32: "f", np.float64: "d"})
    monkeypatch.setattr(compiler, "_SIGNATURES", {})
    args = (Arr(0x7000), np.int64(-1), np.int32(7), np.float32(1.5), np.float64(2.0), np.uint64(0), Arr(0x8000))
    codes, vals = compiler._native_args(args)
    assert codes == b"QQifdQQ" and vals[0] == 0x7000 and vals[6] == 0x8000 and vals[1:6] == list(args[1:6])
    assert compiler._native_args((Arr(1), np.int64(3)))[1] == [1, 3]
    assert len(compiler._SIGNATURES) == 2
    assert compiler._native_args((Arr(1), 3)) is None          # a Python int: CuPy's marshalling
    assert compiler._SIGNATURES[(Arr, int)] is None


def test_launch_dimensions_are_ints_never_truncated_or_split():
    """Found by a probing helper (2026-11-28): a float block was truncated (32.9 -> 32), a string
    split into digits ("32" -> (3, 2)), NumPy integers refused; shared_mem took floats and None
    failed with a bare TypeError; launch_config took floats and bools."""
    import numpy as np

    import cudakit
    for grid, block, what in ((1, (32.9,), "block must be an int (got float 32.9)"),
                              ((2.5,), 32, "grid must be an int (got float 2.5)"),
                              (1, "32", "block must be an int or a tuple of up to 3 ints (got '32')"),
                              (1, (True,), "block must be an int (got the bool True)")):
        with pytest.raises(LaunchError, match=re.escape(what)):
            cudakit.LaunchConfig(grid, block)
    cfg = cudakit.LaunchConfig((np.int32(4), 2), [32, np.int64(2)], np.int64(128))
    assert (cfg.grid, cfg.block, cfg.shared_mem) == ((4, 2, 1), (32, 2, 1), 128)
    assert all(type(v) is int for v in cfg.grid + cfg.block + (cfg.shared_mem,))
    for bad in (1.5, None, True):
        with pytest.raises(LaunchError, match="shared_mem must be an int"):
            cudakit.LaunchConfig(1, 32, bad)
    with pytest.raises(LaunchError, match=re.escape("n must be an int (got float 10.5)")):
        cudakit.launch_config(10.5)
    with pytest.raises(LaunchError, match="threads must be an int"):
        cudakit.launch_config(100, True)
    assert cudakit.launch_config(np.int64(1000), np.int32(128)) == (8, 128)
    assert cudakit.launch_config(0) == (0, 256)


def test_compiler_options_string_is_one_option():
    """compile_ptx(options="-lineinfo") passed its characters to the compiler as options, and
    autotune(key="n") took "n" as a list of one-letter names (found by a probing helper)."""
    from cudakit.runtime.compiler import _options
    assert _options("-lineinfo") == ("-lineinfo",) and _options(["-a", "-b"]) == ("-a", "-b")
    with pytest.raises(cudakit.ArgumentTypeError, match="options must be strings"):
        _options(["-a", 1])
    with pytest.raises(cudakit.ArgumentTypeError, match="options must be a string or a sequence"):
        _options(3)


def test_compile_ptx_without_arch_or_gpu_and_to_a_folder(tmp_path):
    """compile_ptx without a GPU and without arch says to pass arch (it said CuPy is missing), and a
    failed write leaves no temporary file beside the path (found by a probing helper)."""
    import shutil
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on the PATH")
    src = 'extern "C" __global__ void k(float* x) { x[0] = 1; }'
    if not cudakit.is_available():
        with pytest.raises(cudakit.BackendUnavailableError, match="pass arch"):
            cudakit.compile_ptx(src, compiler="nvcc")
    folder = tmp_path / "out.ptx"
    folder.mkdir()
    with pytest.raises(OSError):
        cudakit.compile_ptx(src, path=folder, arch="sm_90", compiler="nvcc")
    assert [f.name for f in tmp_path.iterdir()] == ["out.ptx"]
    assert "k" in cudakit.compile_ptx(src, path=tmp_path / "k.ptx", arch="sm_90", compiler="nvcc", options="-lineinfo")


def test_array_like_dimensions_and_validate_flags_still_work():
    """A review of the stricter checks: a 1-D NumPy array or a range is still a grid (an ndarray
    has __index__ too, but is not a scalar), a 0-d float array is refused; cross_entropy's validate
    takes NumPy bools and 0 / 1 as before."""
    import numpy as np

    from cudakit.runtime.launch import _dim3
    assert _dim3(np.array([4, 2]), "grid") == (4, 2, 1) and _dim3(range(1, 4), "block") == (1, 2, 3)
    assert _dim3(np.int64(5), "grid") == (5, 1, 1)
    with pytest.raises(LaunchError, match="grid must be an int"):
        _dim3(np.array(2.5), "grid")
    logits, t = np.random.default_rng(0).standard_normal((3, 4)), np.array([0, 1, 2])
    want = cudakit.cross_entropy(logits, t)
    for v in (np.True_, np.False_, 0, 1):
        assert cudakit.cross_entropy(logits, t, validate=v) == want
