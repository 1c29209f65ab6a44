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
