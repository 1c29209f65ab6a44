"""cudakit.dispatch planners of the ops whose implementation kernels/paths.py chooses per
signature (attention today): after a signature's first, checked call has made the choice, the
plan replays the chosen path -- cuDNN's built graph (kernels/cudnn.executor) or the Triton
kernels with their launches bound (kernels/attention.plan_forward/plan_backward) -- with no
argument checks, no path lookup and no per-call configuration. A planner returns None (the
checked path keeps the signature) for float64, non-contiguous arrays, a scale given as an array,
or a signature whose path has not been chosen."""
from __future__ import annotations

import math

from ..runtime import _cupy
from . import attention

_DTYPES = ("float16", "bfloat16", "float32")


def _attn_sig(q, k, v, scale):
    """(bh, lq, lk, d, dtype name, scale as float, lead dims) for C-contiguous q, k, v of one float
    dtype cudakit's fused kernels take, else None."""
    name = str(q.dtype)
    if name not in _DTYPES or not (q.flags.c_contiguous and k.flags.c_contiguous and v.flags.c_contiguous):
        return None
    lead = tuple(q.shape[:-2])
    lq, d = q.shape[-2:]
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    return math.prod(lead), lq, k.shape[-2], d, name, sc, lead


def plan_attention_with_lse(q, k, v, scale=None, causal=False):
    s = _attn_sig(q, k, v, scale)
    if s is None:
        return None
    bh, lq, lk, d, name, sc, lead = s
    fwd = attention.plan_forward(bh, lq, lk, d, name, sc, bool(causal), q.data.device_id)
    if fwd is None:
        return None
    lse_shape = lead + (lq,)

    def plan(q, k, v, scale=None, causal=False):
        out, lse = fwd(q, k, v)
        return out, lse.reshape(lse_shape)
    return plan


def plan_attention(q, k, v, scale=None, causal=False):
    p = plan_attention_with_lse(q, k, v, scale, causal)
    return None if p is None else (lambda q, k, v, scale=None, causal=False: p(q, k, v)[0])


def plan_attention_backward(grad_out, q, k, v, out, lse, scale=None, causal=False):
    s = _attn_sig(q, k, v, scale)
    if s is None or grad_out.dtype != q.dtype or out.dtype != q.dtype:
        return None
    if not (grad_out.flags.c_contiguous and out.flags.c_contiguous and lse.flags.c_contiguous):
        return None
    if lse.dtype != _cupy.cupy().float32:
        return None
    bh, lq, lk, d, name, sc, _ = s
    bwd = attention.plan_backward(bh, lq, lk, d, name, sc, bool(causal), q.data.device_id)
    if bwd is None:
        return None
    return lambda grad_out, q, k, v, out, lse, scale=None, causal=False: bwd(grad_out, q, k, v, out, lse)
