"""NeuralScript's CudaML (seed 004, `compiler.backend.cuda_ml`) on cudakit's ops.

conv2d, activations, pooling, batch normalisation, dropout and the SGD / Adam updates on
CudaTensors, each the cudakit op of that name. OptimizerState is cudakit's (lr, betas, eps,
weight_decay, momentum, step, ...).
"""
from __future__ import annotations

import enum
import numbers
import os
import threading
from dataclasses import dataclass

from ... import ops, optim
from ...errors import ShapeError
from ...optim import OptimizerState
from .._common import process_instance
from .cuda_math import CudaMath, CudaTensor, _array, get_cuda_math


class ActivationType(enum.Enum):
    """The activations activation() applies (cudakit.activation's kinds)."""
    RELU = "relu"
    LEAKY_RELU = "leaky_relu"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    GELU = "gelu"
    SWISH = "swish"


def _pair(value, name: str, minimum: int) -> tuple[int, int]:
    v = (value, value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value
    if not (isinstance(v, (tuple, list)) and len(v) == 2 and all(
            isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= minimum for d in v)):
        raise ValueError(f"{name} must be an int or a pair of ints >= {minimum} (got {value!r})")
    return int(v[0]), int(v[1])


@dataclass
class ConvolutionConfig:
    """A 2-D convolution's window (kernel_size, the filters' (R, S)), stride and zero padding,
    each an int or an (h, w) pair. ValueError naming the field when out of range."""
    kernel_size: tuple = (3, 3)
    stride: tuple = (1, 1)
    padding: tuple = (0, 0)

    def __post_init__(self):
        self.kernel_size = _pair(self.kernel_size, "kernel_size", 1)
        self.stride = _pair(self.stride, "stride", 1)
        self.padding = _pair(self.padding, "padding", 0)


class CudaML:
    """Neural-network primitives on CudaTensors. `math` is the CudaMath that makes and frees them.

    seed: the first dropout seed (default: random); each dropout() call takes the next, so calls
    draw different masks and a run with a given seed repeats its masks.
    """

    def __init__(self, math: CudaMath | None = None, seed: int | None = None):
        self.math = math or get_cuda_math()
        self._seed = int.from_bytes(os.urandom(4), "little") if seed is None else int(seed)
        self._seed_lock = threading.Lock()

    def _wrap(self, arr) -> CudaTensor:
        return self.math._wrap(arr)

    def conv2d(self, input: CudaTensor, kernel: CudaTensor, config: ConvolutionConfig) -> CudaTensor:
        """Cross-correlation of input (N, C, H, W) with kernel (K, C, R, S), config's stride and
        padding (cudakit.conv2d). ShapeError when kernel's window is not config.kernel_size."""
        if not isinstance(config, ConvolutionConfig):
            raise TypeError(f"config must be a ConvolutionConfig (got {type(config).__name__})")
        x, w = _array(input, "input"), _array(kernel, "kernel")
        if w.ndim == 4 and tuple(w.shape[2:]) != config.kernel_size:
            raise ShapeError(f"config.kernel_size {config.kernel_size} does not match kernel's window "
                             f"{tuple(w.shape[2:])} (kernel shape {tuple(w.shape)})")
        return self._wrap(ops.conv2d(x, w, None, config.stride, config.padding))

    def activation(self, tensor: CudaTensor, activation_type: ActivationType) -> CudaTensor:
        """The activation named by `activation_type` elementwise (cudakit.activation)."""
        if not isinstance(activation_type, ActivationType):
            raise ValueError(f"activation_type must be an ActivationType "
                             f"({', '.join(a.name for a in ActivationType)}); got {activation_type!r}")
        return self._wrap(ops.activation(_array(tensor, "tensor"), activation_type))

    def max_pool2d(self, tensor: CudaTensor, pool_size: tuple) -> CudaTensor:
        """Max over pool_size windows of (N, C, H, W), stride pool_size (cudakit.max_pool2d)."""
        return self._wrap(ops.max_pool2d(_array(tensor, "tensor"), pool_size))

    def avg_pool2d(self, tensor: CudaTensor, pool_size: tuple) -> CudaTensor:
        """Mean over pool_size windows of (N, C, H, W), stride pool_size (cudakit.avg_pool2d)."""
        return self._wrap(ops.avg_pool2d(_array(tensor, "tensor"), pool_size))

    def batch_norm(self, input: CudaTensor, gamma: CudaTensor, beta: CudaTensor, mean: CudaTensor,
                   var: CudaTensor) -> CudaTensor:
        """Inference batch normalisation of (N, C) or (N, C, H, W) with per-channel gamma, beta and
        running mean and var, eps 1e-5 (cudakit.batch_norm, training=False)."""
        return self._wrap(ops.batch_norm(_array(input, "input"), _array(gamma, "gamma"), _array(beta, "beta"),
                                         _array(mean, "mean"), _array(var, "var"), training=False))

    def dropout(self, tensor: CudaTensor, keep_prob: float = 0.5) -> CudaTensor:
        """Inverted dropout keeping each element with probability keep_prob (0 < keep_prob <= 1)
        and scaling kept ones by 1 / keep_prob (cudakit.dropout with p = 1 - keep_prob)."""
        if isinstance(keep_prob, bool) or not isinstance(keep_prob, numbers.Real) or not 0 < keep_prob <= 1:
            raise ValueError(f"keep_prob must be in (0, 1] (got {keep_prob!r})")
        x = _array(tensor, "tensor")
        with self._seed_lock:
            seed, self._seed = self._seed, (self._seed + 1) % (1 << 63)
        return self._wrap(ops.dropout(x, 1.0 - float(keep_prob), seed))

    def sgd_update(self, params: CudaTensor, gradients: CudaTensor, momentum: CudaTensor | None,
                   optimizer_state: OptimizerState) -> None:
        """One SGD step on params in place (cudakit.sgd_update); momentum: the buffer (None when
        optimizer_state.momentum is 0). Each argument may be a list of tensors (one step over all
        of them: see adam_update)."""
        optim.sgd_update(_arrays(params, "params"), _arrays(gradients, "gradients"),
                         None if momentum is None else _arrays(momentum, "momentum"), optimizer_state)

    def adam_update(self, params: CudaTensor, gradients: CudaTensor, m_buffer: CudaTensor, v_buffer: CudaTensor,
                    optimizer_state: OptimizerState) -> None:
        """One Adam step on params in place (cudakit.adam_update); m_buffer, v_buffer float32 zeros
        before the first step. optimizer_state.step counts calls (its bias correction is the
        step's), so a model's tensors share one state only when they go in one call: each argument
        may be a list of tensors, index by index; else keep one OptimizerState per tensor (a
        shared one called per tensor steps it once per tensor, and the later tensors of an
        iteration get a later step's bias correction)."""
        optim.adam_update(_arrays(params, "params"), _arrays(gradients, "gradients"),
                          _arrays(m_buffer, "m_buffer"), _arrays(v_buffer, "v_buffer"), optimizer_state)


def _arrays(t, name: str):
    """A tensor's array, or a list's arrays (the optimizers' multi-tensor form)."""
    if isinstance(t, (list, tuple)):
        return [_array(x, f"{name}[{i}]") for i, x in enumerate(t)]
    return _array(t, name)


get_cuda_ml = process_instance(CudaML, "The process's CudaML, on get_cuda_math().")


__all__ = ["ActivationType", "ConvolutionConfig", "OptimizerState", "CudaML", "get_cuda_ml"]
