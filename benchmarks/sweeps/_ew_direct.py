"""Shared by the scripts that launch the contiguous elementwise kernels directly against torch
(ew_hint_variants, ew_source_ab, ew_placement_sweep): the torch counterpart of each op, the inputs
of one op:dtype case, and a launcher of one kernel shape."""
import cupy as cp
import numpy as np
import torch

from cudakit.kernels import elementwise as ew

N = 1 << 28
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
F = torch.nn.functional
TORCH = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "relu": torch.relu, "tanh": torch.tanh,
         "sigmoid": torch.sigmoid, "silu": F.silu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
         "gelu_erf": F.gelu,
         "relu_backward": lambda g, x: torch.ops.aten.threshold_backward(g, x, 0),
         "silu_backward": torch.ops.aten.silu_backward,
         "gelu_tanh_backward": lambda g, x: torch.ops.aten.gelu_backward(g, x, approximate="tanh"),
         "gelu_erf_backward": torch.ops.aten.gelu_backward}


class Case:
    """Random torch inputs of `op` (N elements of `dtype`) and the same memory as CuPy arrays
    (16-bit types as int16), with the vector width and the bytes one call moves."""

    def __init__(self, op: str, dtype: str):
        if dtype not in DTYPES:
            raise SystemExit(f"{op}:{dtype}: {' or '.join(DTYPES)} only")
        self.op, self.dtype = op, dtype
        arity = 2 if op in ew.BINARY_OPS else 1
        self.tins = [torch.randn(N, dtype=DTYPES[dtype], device="cuda") for _ in range(arity)]
        self.bits = (lambda t: t.view(torch.int16)) if dtype == "bfloat16" else (lambda t: t)
        self.ins = tuple(cp.asarray(self.bits(t)) for t in self.tins)
        self.vec = 16 // self.ins[0].itemsize
        self.nbytes = (arity + 1) * N * self.ins[0].itemsize

    def torch_fn(self):
        """torch's call on the same inputs (KeyError for an op without a counterpart here)."""
        return lambda tins=self.tins, f=TORCH[self.op]: f(*tins)

    def expr(self, unroll: int) -> str:
        return ew._expr("contig", self.op, self.dtype, self.vec, unroll)

    def launcher(self, kernel, unroll: int, threads: int, out):
        """A no-argument call launching `kernel` (U = unroll) over the case into `out`."""
        grid = -(-N // (unroll * threads * self.vec))
        return lambda: kernel.launch((grid, 1, 1), (threads, 1, 1), (*self.ins, out, np.int64(N), np.float64(0.0)))
