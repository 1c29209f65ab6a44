"""The ragged-offset kernel of kernels/cudnn_varlen.py compiles for sm_90 with nvcc, and the
varlen dispatch takes cuDNN's ragged path only for the calls it is safe for. No GPU needed; the
path itself is checked against float64 in tests/gpu/test_attention_gpu.py (varlen cases)."""
from test_kernels_compile import nvcc_compile_source

from cudakit.kernels import cudnn_varlen


def test_ragged_kernel_compiles_for_sm90(tmp_path):
    nvcc_compile_source(cudnn_varlen.RAGGED_SOURCE, tmp_path)


def test_descriptors_address_the_packed_rows():
    # sequence b, head h, row s, column c of a (total, H, D) array sits at ragged[b] + s H D + h D + c
    dims, strides = cudnn_varlen._packed_desc(3, 4, 10, 8)
    assert dims == (3, 4, 10, 8) and strides[1:] == (8, 32, 1)
    dims, strides = cudnn_varlen._stats_desc(3, 4, 10)
    assert dims == (3, 4, 10, 1) and strides[1:3] == (1, 4)   # lse (total, H): row s, head h at s H + h
