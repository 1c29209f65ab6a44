"""The CUDA backend: CuPy arrays in and out, cudakit's kernels underneath.

Accepts CuPy arrays and, zero-copy, any object with __cuda_array_interface__ or a CUDA __dlpack__
(PyTorch, JAX, Numba). Host arrays are refused with DeviceError rather than copied silently.
Each op runs on the device holding its inputs, whatever the current device.
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..errors import ArgumentTypeError, DeviceError
from ..kernels import conv, cudnn   # import neither CuPy, Triton nor cuDNN until a kernel runs
from ..kernels.paths import conv_path_key
from ..kernels.transpose import contiguous, to_channels_last
from ..runtime import _cupy, memory
from ..runtime import device as _device_mod
from .base import Backend
from .cpu import _dlpack_on_cuda
from .attention_api import CudaAttentionHooks
from .dropout_api import CudaDropoutHooks
from .layout_api import CudaLayoutHooks
from .linalg_api import CudaLinalgHooks
from .normalization_api import CudaNormalizationHooks
from .reduction_api import CudaReductionHooks
from .softmax_api import CudaSoftmaxHooks


class CudaBackend(CudaNormalizationHooks, CudaReductionHooks, CudaSoftmaxHooks, CudaLayoutHooks, CudaDropoutHooks,
                  CudaLinalgHooks, CudaAttentionHooks, Backend):
    name = "cuda"
    has_custom_kernels = True

    def __init__(self, device: int | None = None):
        """device: None follows the thread's current device (CuPy's rule); an index binds the
        backend's array helpers (asarray, empty, zeros), synchronize() and `device` to that GPU.
        Ops run on their inputs' device either way."""
        self._cp = _cupy.cupy()
        self._bound = None if device is None else _device_mod._check_index(device)
        self._array_type = self._cp.ndarray
        self._get_device = self._cp.cuda.runtime.getDevice
        self._ndarray = self._cp.ndarray
        from ..kernels import elementwise
        self._run, self._fast = elementwise.run, elementwise.fast
        self._conv_plans = {}
        memory.ensure_installed()

    @property
    def device(self) -> str:
        return f"cuda:{self._cp.cuda.runtime.getDevice() if self._bound is None else self._bound}"

    @property
    def devices(self) -> list:
        """DeviceInfo of every visible GPU."""
        return _device_mod.devices()

    def set_device(self, i: int) -> None:
        """Make GPU `i` current for this thread (cudakit.set_device); a backend bound to a device
        by get_backend("cuda", device=...) keeps its own."""
        _device_mod.set_device(i)

    def _here(self):
        """The device context of a bound backend's array helpers (a no-op when unbound)."""
        return contextlib.nullcontext() if self._bound is None else self._cp.cuda.Device(self._bound)

    def _xp(self):
        return self._cp

    def _pool_kernel(self, kind, x, geo):
        from ..kernels import pooling
        return pooling.pool2d(x if pooling.channels_last(x) else self._ascontiguous(x), kind, geo)

    def _pool_backward_kernel(self, kind, grad_out, x, geo):
        """Channels-last x: pool2d_backward matches grad_out's layout to it."""
        from ..kernels import pooling
        if pooling.channels_last(x):
            return pooling.pool2d_backward(grad_out, x, kind, geo)
        return pooling.pool2d_backward(self._ascontiguous(grad_out), self._ascontiguous(x), kind, geo)

    def _plan_key(self, named):
        nd = self._ndarray
        key = []
        for v in named.values():
            if v is None:
                key.append(None)
            elif type(v) is nd:
                key.append((v.shape, v.dtype, v.data.device_id))
            else:
                return None
        return tuple(key)

    # The conv2d hooks take activations C-contiguous or as (N, C, H, W) views of channels-last
    # memory (conv_api's channels-last calls): cuDNN reads and writes either layout in place; the
    # own kernels compute in NCHW, so a channels-last call copies in and out of it (inside the
    # candidate, so that the path choice weighs the copies).
    def _activations(self, *arrays):
        """(the arrays as cuDNN takes them, their layout "nchw" / "nhwc")."""
        layout = cudnn.layout_of(*arrays)
        if layout is None:   # mixed or other strides: C-contiguous copies
            return tuple(self._ascontiguous(a) for a in arrays), "nchw"
        return arrays, layout

    def _own(self, fn, layout, *arrays):
        """fn(*C-contiguous arrays), its result back in channels-last memory for layout "nhwc"."""
        if layout == "nchw":
            return fn(*arrays)
        y = fn(*(contiguous(a) for a in arrays))
        return None if y is None else to_channels_last(y)

    def _weight(self, w, layout):
        """(a function giving w C-contiguous, whether w is a channels-last weight cuDNN's channels-last
        path reads in place): such a weight (channels-last activations too) is copied only by the
        candidates that read it C-contiguous, each call, so the path choice weighs the copy."""
        if layout == "nhwc" and cudnn.is_krsc(w):
            return (lambda: cudnn.as_weight_layout(w, False)), True
        w = self._ascontiguous(w)
        return (lambda: w), False

    def _conv2d_kernel(self, x, w, b, geo, groups, relu=False):
        (x,), layout = self._activations(x)
        wc, w_cl = self._weight(w, layout)
        b = None if b is None else self._ascontiguous(b)
        key = conv_path_key("fwd", x.dtype, x.shape, w.shape, geo, groups, b is not None, layout, w_cl, relu)
        unfused = None
        if relu:   # cuDNN's convolution, then max(y, 0) in place: where its fused graph has no engine
            def unfused():
                y = cudnn.conv_fprop(x, wc(), b, geo)
                return None if y is None else self.relu(y, out=y)
        return self._conv_paths("conv2d", x.dtype, x.shape, w.shape, geo, groups, key, layout,
                                lambda cl: cudnn.conv_fprop(x, w if cl and w_cl else wc(), b, geo, cl, relu),
                                lambda: self._own(lambda x: conv.conv2d(x, wc(), b, geo, groups, relu), layout, x),
                                unfused)

    def _conv2d_input_grad_kernel(self, grad_out, w, x_shape, geo, groups):
        (g,), layout = self._activations(grad_out)
        wc, w_cl = self._weight(w, layout)
        key = conv_path_key("dgrad", w.dtype, x_shape, w.shape, geo, groups, False, layout, w_cl)
        return self._conv_paths("conv2d_input_grad", w.dtype, x_shape, w.shape, geo, groups, key, layout,
                                lambda cl: cudnn.conv_dgrad(g, w if cl and w_cl else wc(), x_shape, geo, cl),
                                lambda: self._own(lambda g: conv.conv2d_input_grad(g, wc(), x_shape, geo, groups),
                                                  layout, g))

    def _conv2d_weight_grad_kernel(self, grad_out, x, w_shape, geo, bias, groups, out_cl=False):
        (g, x), layout = self._activations(grad_out, x)
        out_cl = out_cl and layout == "nhwc"   # (else conv2d_backward copies dL/dw into the weight's layout)
        key = conv_path_key("wgrad", x.dtype, x.shape, w_shape, geo, groups, bias, layout, out_cl)

        def own():
            r = conv.conv2d_weight_grad(contiguous(g), contiguous(x), w_shape, geo, bias, groups)
            return r if r is None or not out_cl else (cudnn.as_weight_layout(r[0], True), r[1])
        return self._conv_paths("conv2d_weight_grad", x.dtype, x.shape, w_shape, geo, groups, key, layout,
                                lambda cl: cudnn.conv_wgrad(g, x, w_shape, geo, bias, cl, out_cl), own)

    def _conv_paths(self, op, dtype, x_shape, w_shape, geo, groups, key, layout, with_cudnn, with_own, unfused=None):
        """The result of conv2d's faster path for this signature (kernels/paths.py, which records
        the choice for the dispatch plans of kernels/path_plans.py): cuDNN (any groups, 16-bit or
        float32 under precision "tf32" or "ieee", the `cudnn` extra installed; with_cudnn(weight_cl), and for
        channels-last activations with a window the weight given channels-last too,
        cudnn.krsc_offered) and cudakit's implicit-GEMM or direct kernels; None for the im2col path
        when neither takes the call. unfused: the forward with activation="relu" as cuDNN's plain
        convolution and a relu pass ("cudnn-unfused": where cuDNN has no engine for the fused graph,
        its convolution against the own kernels' fused one)."""
        from ..kernels import paths
        name = conv.dtype_name(dtype)
        k = w_shape[0]
        candidates = []
        if cudnn.wanted() and cudnn.conv_dtype_ok(name):   # (groups: cuDNN reads them off the weight's C / groups)
            candidates.append(("cudnn", lambda: with_cudnn(False)))
            if cudnn.krsc_offered(layout, w_shape, dtype):
                candidates.append(("cudnn-krsc", lambda: with_cudnn(True)))
            if unfused is not None:
                candidates.append(("cudnn-unfused", unfused))
        if conv.why_not(name, x_shape, k, geo, groups) is None:
            candidates.append(("triton", with_own))
        if not candidates:
            conv.usable(name, x_shape, k, geo, groups)   # notes why the im2col path runs (cudakit info)
            paths.ran(op, "im2col")
            return None
        r = paths.run(op, key, candidates)   # None: cuDNN, the only candidate, declined it
        if r is None:
            paths.ran(op, "im2col")
        elif paths.last_paths().get(op) == "triton" and conv.direct(x_shape, w_shape, groups, geo):
            paths.ran(op, "direct")   # (the own candidate's direct kernels: few channels a group)
        return r

    def _coerce(self, x, arg):
        cp = self._cp
        if isinstance(x, cp.ndarray):
            return x
        if x is None:
            raise ArgumentTypeError(f"{arg} is required: an array (got None)")
        if hasattr(x, "__cuda_array_interface__"):
            return cp.asarray(x)
        if _dlpack_on_cuda(x):
            return cp.from_dlpack(x)
        if isinstance(x, np.ndarray) or hasattr(x, "__array__") or isinstance(x, (list, tuple)):
            raise DeviceError(f"{arg} is a host array but this is the CUDA backend; "
                              f"copy it with cudakit.to_device() first")
        raise DeviceError(f"{arg}: expected a CuPy array or a CUDA array (got {type(x).__name__})")

    def _check_devices(self, arrays):
        devs = {a: x.data.device_id for a, x in arrays.items()}
        if len(set(devs.values())) > 1:  # lists each array's device
            desc = ", ".join(f"{a} on cuda:{d}" for a, d in devs.items())
            raise DeviceError(f"arrays are on different devices ({desc}); move them with cupy.asarray "
                              f"under `with cudakit.device(i):`")

    def _scalar_array(self, value, dtype):
        return self._cp.full((), value, dtype=dtype)

    def _on_device_of(self, x):
        dev = x.data.device_id
        cp = self._cp
        return None if dev == cp.cuda.runtime.getDevice() else cp.cuda.Device(dev)

    def _prepare(self, op, named, out):
        first = next((x for x in named.values() if isinstance(x, self._cp.ndarray)), None)
        ctx = self._on_device_of(first) if first is not None else None
        if ctx is None:
            return super()._prepare(op, named, out)
        with ctx:  # allocate the output on the inputs' device
            return super()._prepare(op, named, out)

    def fast_elementwise(self, op, vals, p: float = 0.0):
        """op(*vals) for C-contiguous CuPy arrays of one supported dtype and one shape on the
        current device, with no further checks; None when the arrays do not qualify (take the
        general path)."""
        return self._fast(op, vals, self._ndarray, p)

    def _elementwise_op(self, op, named, out, p: float = 0.0):
        if out is None:
            vals = tuple(named.values())
            nd = self._array_type
            if all(type(v) is nd for v in vals):
                r = self.fast_elementwise(op, vals, p)
                if r is not None:
                    return r
        return super()._elementwise_op(op, named, out, p)

    def _elementwise(self, op, inputs, out, p: float = 0.0):
        ctx = self._on_device_of(out)
        if ctx is None:
            return self._run_unaliased(op, inputs, out, p)
        with ctx:
            return self._run_unaliased(op, inputs, out, p)

    def _run_unaliased(self, op, inputs, out, p):
        """A kernel thread reads its elements of the inputs and then writes out's: an out= sharing
        memory with an input other than element for element (a shifted view of it) could read
        values another thread already overwrote. That op computes into a temporary first, as
        NumPy does; in place (out is the input, or the same view of it) needs none."""
        if any(overlaps_shifted(x, out) for x in inputs):
            tmp = self._run(op, inputs, self._cp.empty(out.shape, out.dtype), p)
            out[...] = tmp
            return out
        return self._run(op, inputs, out, p)

    def asarray(self, x, dtype=None):
        with self._here():
            return self._cp.asarray(x, dtype=dtype)

    def to_numpy(self, x):
        from ..runtime.memory import _refuse_in_capture
        _refuse_in_capture("copying to the host")
        return self._cp.asnumpy(x)

    def to_device(self, x):
        """A CuPy copy of host array `x` on this backend's GPU (cudakit.to_device)."""
        return memory.to_device(x, device=self._bound)

    def to_host(self, x):
        """A NumPy copy of CuPy array `x` (cudakit.to_host); a NumPy array is copied."""
        return memory.to_host(x)

    def empty(self, shape, dtype="float32"):
        with self._here():
            return self._cp.empty(shape, dtype)

    def zeros(self, shape, dtype="float32"):
        with self._here():
            return self._cp.zeros(shape, dtype)

    def synchronize(self):
        with self._here():
            self._cp.cuda.get_current_stream().synchronize()


def overlaps_shifted(x, out) -> bool:
    """x and out share memory without being the same view (data pointer, shape and strides)."""
    if x is out:
        return False
    same = x.data.ptr == out.data.ptr and x.shape == out.shape and x.strides == out.strides
    return not same and bool(_cupy.loaded_cupy().may_share_memory(x, out))
