"""cudakit.dispatch planners of the ops whose implementation kernels/paths.py chooses per
signature (attention, including its (B, L, H, D) views read in place by cuDNN, and conv2d): after a signature's first, checked call has made the choice, the
plan replays the chosen path -- cuDNN's built graph (kernels/cudnn.executor) or the Triton
kernels with their launches bound (kernels/attention.plan_forward/plan_backward) -- with no
argument checks, no path lookup and no per-call configuration. A planner returns None (the
checked path keeps the signature) for float64, non-contiguous arrays, a scale given as an array,
or a signature whose path has not been chosen."""
from __future__ import annotations

import math

from ..runtime import _cupy
from ..runtime.native import empty_fn
from . import attention
from .reduction import channel_sum

_DTYPES = ("float16", "bfloat16", "float32")


def _attn_sig(q, k, v, scale):
    """(bh, lq, lk, d, dtype name, scale as float, lead dims) for C-contiguous q, k, v of one float
    dtype cudakit's fused kernels take, else None."""
    name = str(q.dtype)
    if name not in _DTYPES or not (q.flags.c_contiguous and k.flags.c_contiguous and v.flags.c_contiguous):
        return None
    if k.shape[:-2] != q.shape[:-2]:   # grouped-query attention: the checked path
        return None
    lead = tuple(q.shape[:-2])
    lq, d = q.shape[-2:]
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    return math.prod(lead), lq, k.shape[-2], d, name, sc, lead


def _bhsd16(arrays: tuple):
    """(B, H, Hkv, Lq, Lk, D, dtype name) where arrays (q, k, v, then any others) are C-contiguous
    16-bit (B, H, Lq, D) q and (B, Hkv, Lk, D) k, v of q's dtype, Hkv dividing H (the (B, H, L, D)
    form cuDNN's graphs read, grouped-query k, v among them), else None."""
    q, k, v = arrays[:3]
    name = str(q.dtype)
    if name not in ("float16", "bfloat16") or q.ndim != 4 or k.ndim != 4 or tuple(v.shape) != tuple(k.shape) \
            or k.dtype != q.dtype or v.dtype != q.dtype or not all(a.flags.c_contiguous for a in arrays):
        return None
    b, h, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    if k.shape[0] != b or k.shape[3] != d or not 0 < hkv <= h or h % hkv:
        return None
    return b, h, hkv, lq, lk, d, name


def _gqa_cudnn(kind: str, graph: str, arrays: tuple, scale, causal):
    """(cuDNN's executor of graph kind `graph`, scale) for grouped-query attention on C-contiguous
    (B, H, L, D) q (arrays[0]) and (B, Hkv, L, D) k, v (arrays[1:3]; the rest q-shaped, lse last
    for the backward) where kernels/attention.py forward_gqa / backward_gqa ("fwd", "bwd") chose
    cuDNN for this signature and its graph is built; None otherwise (the checked path)."""
    from . import cudnn, paths
    q, k = arrays[:2]
    s = _bhsd16(arrays)
    if s is None or s[2] == s[1]:   # (k, v with q's heads: not grouped-query)
        return None
    d, name = s[5], s[6]
    dev = q.data.device_id
    op = "attention" if kind == "fwd" else "attention_backward"
    if paths.chosen(op, (f"{kind}_gqa", tuple(q.shape), tuple(k.shape), name, bool(causal), dev)) != "cudnn":
        return None
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    # what forward_gqa / backward_gqa asked before taking cuDNN (a misaligned call of the same shapes
    # ran the Triton kernels): the dispatch signature holds the addresses modulo 256, so this holds
    # for every call the plan serves
    if not (attention._cudnn_candidate(name, d, sc) and attention._blhd_ok(*arrays[:-1] if kind == "bwd" else arrays)
            and cudnn.aligned(*arrays)):
        return None
    qd, kd = cudnn.bhsd_desc(q), cudnn.bhsd_desc(k)
    descs = (qd, kd, kd, qd) if kind == "fwd" else (qd, kd, kd, qd, qd, qd, kd, kd)
    run = cudnn.executor(cudnn.sdpa_sig(graph, descs, name, sc, bool(causal), dev))
    return None if run is None else (run, sc)


def _plan_gqa_forward(q, k, v, scale, causal, with_lse: bool):
    """The grouped-query forward replayed on cuDNN (the inference graph without lse), or None."""
    got = _gqa_cudnn("fwd", "sdpa_fwd" if with_lse else "sdpa_fwd_inf", (q, k, v), scale, causal)
    if got is None:
        return None
    run, nd, f32 = got[0], empty_fn(), _cupy.cupy().float32
    shape, lse_shape = tuple(q.shape), tuple(q.shape[:3])
    if with_lse:
        def plan(q, k, v, scale=None, causal=False, layout="bhld", *_):
            out, lse = nd(shape, q.dtype), nd(lse_shape, f32)
            run(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, lse.data.ptr)
            return out, lse
    else:
        def plan(q, k, v, scale=None, causal=False, layout="bhld", *_):
            out = nd(shape, q.dtype)
            run(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr)
            return out
    return plan


def _plan_gqa_backward(grad_out, q, k, v, out, lse, scale, causal):
    """The grouped-query backward replayed on cuDNN (dk, dv with k's heads), or None."""
    cp = _cupy.cupy()
    if lse.dtype != cp.float32 or tuple(lse.shape) != tuple(q.shape[:3]) or grad_out.dtype != q.dtype \
            or out.dtype != q.dtype or tuple(grad_out.shape) != tuple(q.shape) or tuple(out.shape) != tuple(q.shape):
        return None
    got = _gqa_cudnn("bwd", "sdpa_bwd", (q, k, v, out, grad_out, lse), scale, causal)
    if got is None:
        return None
    run, nd = got[0], empty_fn()
    qs, ks = tuple(q.shape), tuple(k.shape)

    def plan(grad_out, q, k, v, out, lse, scale=None, causal=False, layout="bhld", *_):
        dq, dk, dv = nd(qs, q.dtype), nd(ks, q.dtype), nd(ks, q.dtype)
        run(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, grad_out.data.ptr, lse.data.ptr,
            dq.data.ptr, dk.data.ptr, dv.data.ptr)
        return dq, dk, dv
    return plan


def _blhd_cudnn(kind: str, arrays: dict, scale, causal, packed: bool = False):
    """cuDNN's executor of the (B, L, H, D) pass `kind` ("fwd", "bwd") that kernels/attention.py
    forward_blhd/backward_blhd chose for these arrays (views of a packed qkv, read in place), and
    the (B, H, L, D) descriptors of the C-contiguous outputs it writes; None where that path was
    not chosen (or cuDNN declined) for this signature. packed (the backward of qkv_packed): the
    gradients written as the thirds of one (B, L, 3, H, D) array, as kernels/attention.py
    backward_blhd asked cuDNN for them (cudnn.packed_grads)."""
    from . import cudnn, paths
    q, k, v = arrays["q"], arrays["k"], arrays["v"]
    name = str(q.dtype)
    if name not in ("float16", "bfloat16") or q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        return None
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if not (attention._cudnn_candidate(name, q.shape[-1], sc) and attention._blhd_ok(*arrays.values())):
        return None
    dev = q.data.device_id
    key = (attention.blhd_key(q, k, v, name, causal) if kind == "fwd" else
           attention.blhd_key(q, k, v, name, causal, arrays["out"], arrays["do"], packed))
    if paths.chosen("attention" if kind == "fwd" else "attention_backward", key) != "cudnn":
        return None
    new = cudnn.blhd_out_desc   # the C-contiguous outputs cuDNN writes
    if kind == "fwd":
        descs = (cudnn.blhd_desc(q), cudnn.blhd_desc(k), cudnn.blhd_desc(v), new(q.shape))
    else:
        descs = tuple(cudnn.blhd_desc(arrays[a]) for a in ("q", "k", "v", "out", "do")) + (
            (cudnn.packed_grad_desc(q.shape),) * 3 if packed else tuple(new(x.shape) for x in (q, k, v)))
    run = cudnn.executor(cudnn.sdpa_sig(f"sdpa_{kind}", descs, name, sc, causal, dev))
    return run


def _plan_blhd_forward(q, k, v, scale, causal):
    run = _blhd_cudnn("fwd", {"q": q, "k": k, "v": v}, scale, causal)
    if run is None:
        return None
    nd, f32 = empty_fn(), _cupy.cupy().float32
    b, lq, h, _ = q.shape
    o_shape, lse_shape = tuple(q.shape), (b, h, lq)

    def plan(q, k, v, scale=None, causal=False, layout="blhd", *_):
        out, lse = nd(o_shape, q.dtype), nd(lse_shape, f32)
        run(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, lse.data.ptr)
        return out, lse
    return plan


def _masked_plan(op: str, arrays: int, key_lengths):
    """The plan of a call with a window or key lengths: None (traced from the checked call: the
    masked kernels' launches, the lengths read through their argument's pointer), or the checked
    path itself where the checked call would make a device array of key_lengths first (a copy
    from a host tuple, a cast to int64): a trace records launches, not those copies."""
    cp = _cupy.cupy()
    if key_lengths is None or (type(key_lengths) is cp.ndarray and key_lengths.dtype in (cp.int32, cp.int64)
                               and key_lengths.flags.c_contiguous):
        return None
    from ..ops import _checked_call
    return _checked_call(op, arrays)


def _bias_cudnn(kind: str, arrays: tuple, scale, causal, layout, window, key_lengths, attn_bias):
    """(cuDNN's executor of the bias graph of `kind` ("fwd", "fwd_inf", "bwd") that the checked call
    of this signature chose (kernels/attention.py cudnn_bias), the bias's 4-D view) for C-contiguous
    16-bit (B, H, L, D) q and (B, Hkv, L, D) k, v, Hkv dividing H (arrays[:3]; for "bwd" out and
    grad_out after them) and a CuPy attn_bias broadcastable to the scores; None otherwise (a traced
    plan or the checked path serves it)."""
    from ..backends.attention_masks import Masks
    from . import cudnn, paths
    cp = _cupy.cupy()
    if layout != "bhld" or window is not None or key_lengths is not None or type(attn_bias) is not cp.ndarray:
        return None
    q, k = arrays[:2]
    s = _bhsd16(arrays)
    if s is None or attn_bias.ndim > 4:
        return None
    b, h, hkv, lq, lk, d, name = s
    bh, groups = b * h, h // hkv   # (grouped-query k, v read in place, as the checked call's)
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    # (the 4-D view the checked call makes, backends/attention_api._bias: q's (B, H) and the bias's
    # dims, padded with leading 1s, each 1 or full)
    b4 = attn_bias.reshape((1,) * (4 - attn_bias.ndim) + tuple(attn_bias.shape))
    if any(n not in (1, f) for n, f in zip(b4.shape, (b, h, lq, lk))):
        return None
    masks = Masks(causal, bias=b4, bias_heads=h)
    dev = q.data.device_id
    if not attention.cudnn_bias(name, d, sc, masks, bh, lq, lk, groups, kind == "bwd") or not cudnn.aligned(*arrays):
        return None
    op = "attention" if kind != "bwd" else "attention_backward"
    if paths.chosen(op, attention.bias_path_key(kind[:3], bh, lq, lk, d, name, causal, dev, b4, groups)) != "cudnn":
        return None
    qd, kd = cudnn.contiguous_desc(q.shape), cudnn.contiguous_desc(k.shape)
    descs = (qd, kd, kd, qd) if kind != "bwd" else (qd, kd, kd, qd, qd, qd, kd, kd)
    run = cudnn.executor(cudnn.bias_sig(kind, descs, cudnn.bias_desc(b4, lq), name, sc, bool(causal), dev))
    return None if run is None else (run, b4)


def _cudnn_bias_forward_plan(op: str, q, k, v, scale, causal, layout, window, key_lengths, attn_bias,
                             with_lse: bool):
    """The plan of attention / attention_with_lse with a bias on cuDNN (_bias_cudnn): its graph
    executed with the bias read in place, no checks; else _masked_plan's."""
    got = _bias_cudnn("fwd" if with_lse else "fwd_inf", (q, k, v), scale, causal, layout, window, key_lengths,
                      attn_bias)
    if got is None:
        return _masked_plan(op, 3, key_lengths)
    run = got[0]
    nd, f32 = empty_fn(), _cupy.cupy().float32
    shape, lse_shape = tuple(q.shape), tuple(q.shape[:3])
    if with_lse:
        def plan(q, k, v, scale=None, causal=False, layout="bhld", window=None, key_lengths=None, attn_bias=None):
            out, lse = nd(shape, q.dtype), nd(lse_shape, f32)
            run(q.data.ptr, k.data.ptr, v.data.ptr, attn_bias.data.ptr, out.data.ptr, lse.data.ptr)
            return out, lse
    else:
        def plan(q, k, v, scale=None, causal=False, layout="bhld", window=None, key_lengths=None, attn_bias=None):
            out = nd(shape, q.dtype)
            run(q.data.ptr, k.data.ptr, v.data.ptr, attn_bias.data.ptr, out.data.ptr)
            return out
    return plan


def plan_attention_bias(q, k, v, scale=None, causal=False, layout="bhld", window=None, key_lengths=None,
                        attn_bias=None):
    """attention with an attn_bias: where its checked call ran cuDNN's graph with the bias
    (_bias_cudnn), that graph; else None (a plan traced from the checked call, the bias read
    through its argument's pointer, guarded per float32 precision: trace_plans.PRECISION), or the
    checked path where key_lengths would be copied first (_masked_plan)."""
    return _cudnn_bias_forward_plan("attention_bias", q, k, v, scale, causal, layout, window, key_lengths, attn_bias,
                                    False)


def plan_attention_with_lse_bias(q, k, v, scale=None, causal=False, layout="bhld", window=None, key_lengths=None,
                                 attn_bias=None):
    """attention_with_lse with an attn_bias (as plan_attention_bias)."""
    return _cudnn_bias_forward_plan("attention_with_lse_bias", q, k, v, scale, causal, layout, window, key_lengths,
                                    attn_bias, True)


def plan_attention_backward_bias(grad_out, q, k, v, out, lse, scale=None, causal=False, layout="bhld", window=None,
                                 key_lengths=None, deterministic=False, attn_bias=None):
    """attention_backward with an attn_bias (as plan_attention_bias; deterministic calls are never
    cuDNN's: the Triton kernels' traced plan)."""
    cp = _cupy.cupy()
    got = None
    if deterministic is False and lse.dtype == cp.float32 and lse.flags.c_contiguous \
            and grad_out.dtype == q.dtype == out.dtype and tuple(grad_out.shape) == tuple(out.shape) == tuple(q.shape):
        got = _bias_cudnn("bwd", (q, k, v, out, grad_out), scale, causal, layout, window, key_lengths, attn_bias)
    if got is None:
        return _masked_plan("attention_backward_bias", 4, key_lengths)
    run, b4 = got
    nd = empty_fn()
    shapes, b_shape, g_shape = (tuple(q.shape), tuple(k.shape), tuple(v.shape)), tuple(b4.shape), tuple(attn_bias.shape)

    def plan(grad_out, q, k, v, out, lse, scale=None, causal=False, layout="bhld", window=None, key_lengths=None,
             deterministic=False, attn_bias=None):
        dq, dk, dv = nd(shapes[0], q.dtype), nd(shapes[1], q.dtype), nd(shapes[2], q.dtype)
        db = nd(b_shape, attn_bias.dtype)
        run(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, grad_out.data.ptr, lse.data.ptr, attn_bias.data.ptr,
            dq.data.ptr, dk.data.ptr, dv.data.ptr, db.data.ptr)
        return dq, dk, dv, db.reshape(g_shape)
    return plan


def _cudnn_dropout_run(kind: str, arrays: tuple, scale, causal, layout, window, key_lengths, attn_bias, dropout_p,
                       deterministic=False):
    """(cuDNN's executor of the dropout graph ("fwd" or "bwd") this signature's checked call ran
    under CUDAKIT_ATTENTION_DROPOUT=cudnn, attention._attn_sig's tuple) for C-contiguous (B, H, L, D)
    q, k, v (arrays[:3]; for "bwd" out, grad_out and lse after them), or None (cudakit's stream, or
    a form the checked path copies first: the plan is then traced or the checked path runs)."""
    from ..backends.attention_masks import Masks
    from ..config import settings
    from . import cudnn
    if settings().attention_dropout != "cudnn" or layout != "bhld" or window is not None \
            or key_lengths is not None or attn_bias is not None or type(dropout_p) is not float:
        return None
    q, k, v = arrays[:3]
    s = _attn_sig(q, k, v, scale)
    if s is None or not 0.0 < dropout_p < 1.0 or not all(a.flags.c_contiguous for a in arrays):
        return None
    bh, lq, lk, d, name, sc, lead = s
    masks = Masks(causal, dropout=(0, 1.0 / (1.0 - dropout_p), 0))   # (as backends/attention_api._dropout)
    if not attention.cudnn_dropout(name, bh, lq, lk, d, sc, masks, 1, q.data.device_id) or not cudnn.aligned(*arrays):
        return None   # (a misaligned view: the checked call copies it)
    qd, kd = cudnn.bhld_desc(bh, lq, d), cudnn.bhld_desc(bh, lk, d)
    descs = (qd, kd, kd, qd) if kind == "fwd" else (qd, kd, kd, qd, qd, qd, kd, kd)
    run = cudnn.executor(cudnn.dropout_sig(kind, descs, name, sc, bool(causal), q.data.device_id,
                                           attention._dropout_p(masks), deterministic))
    return None if run is None else (run, s)


def _cudnn_dropout_forward_plan(op: str, q, k, v, scale, causal, layout, window, key_lengths, attn_bias, dropout_p,
                                with_lse: bool):
    """The plan of attention / attention_with_lse with cuDNN's dropout (_cudnn_dropout_run): the
    graph executed with each call's seed passed by value (cudnn.dropout_operands), no checks; else as before."""
    got = _cudnn_dropout_run("fwd", (q, k, v), scale, causal, layout, window, key_lengths, attn_bias, dropout_p)
    if got is None:
        return _masked_plan(op, 3, key_lengths)
    from . import cudnn
    run, (bh, lq, lk, d, name, sc, lead) = got
    cp = _cupy.cupy()
    nd, f32, operands = empty_fn(), cp.float32, cudnn.dropout_operands
    shape, lse_shape = tuple(q.shape), lead + (lq,)

    def plan(q, k, v, scale=None, causal=False, layout="bhld", window=None, key_lengths=None, attn_bias=None,
             dropout_p=0.0, seed=0):
        out, lse = nd(shape, q.dtype), nd(lse_shape, f32)
        words, (s, o) = operands(seed)   # (words alive until the graph has run)
        run(q.data.ptr, k.data.ptr, v.data.ptr, s, o, out.data.ptr, lse.data.ptr)
        return (out, lse) if with_lse else out
    return plan


def plan_attention_dropout(q, k, v, scale=None, causal=False, layout="bhld", window=None, key_lengths=None,
                           attn_bias=None, dropout_p=0.0, seed=0):
    """attention with dropout on the probabilities: under CUDAKIT_ATTENTION_DROPOUT=cudnn, where the
    checked call ran cuDNN's dropout graph, that graph with each call's seed; else None (a plan
    traced from the checked call whose replays take each call's seed: trace_plans.trace_fallback
    with dispatch.DYNAMIC), or the checked path where key_lengths would be copied first
    (_masked_plan)."""
    return _cudnn_dropout_forward_plan("attention_dropout", q, k, v, scale, causal, layout, window, key_lengths,
                                       attn_bias, dropout_p, False)


def plan_attention_with_lse_dropout(q, k, v, scale=None, causal=False, layout="bhld", window=None,
                                    key_lengths=None, attn_bias=None, dropout_p=0.0, seed=0):
    """attention_with_lse with dropout (as plan_attention_dropout)."""
    return _cudnn_dropout_forward_plan("attention_with_lse_dropout", q, k, v, scale, causal, layout, window,
                                       key_lengths, attn_bias, dropout_p, True)


def plan_attention_backward_dropout(grad_out, q, k, v, out, lse, scale=None, causal=False, layout="bhld",
                                    window=None, key_lengths=None, deterministic=False, attn_bias=None,
                                    dropout_p=0.0, seed=0):
    """attention_backward with dropout (as plan_attention_dropout)."""
    cp = _cupy.cupy()
    got = None
    if type(deterministic) is bool and lse.dtype == cp.float32 and grad_out.dtype == q.dtype == out.dtype \
            and tuple(grad_out.shape) == tuple(out.shape) == tuple(q.shape):
        got = _cudnn_dropout_run("bwd", (q, k, v, out, grad_out, lse), scale, causal, layout, window, key_lengths,
                                 attn_bias, dropout_p, deterministic)
    if got is None:
        return _masked_plan("attention_backward_dropout", 4, key_lengths)
    from . import cudnn
    run = got[0]
    nd, operands = empty_fn(), cudnn.dropout_operands
    shapes = tuple(q.shape), tuple(k.shape), tuple(v.shape)

    def plan(grad_out, q, k, v, out, lse, scale=None, causal=False, layout="bhld", window=None, key_lengths=None,
             deterministic=False, attn_bias=None, dropout_p=0.0, seed=0):
        dq, dk, dv = nd(shapes[0], q.dtype), nd(shapes[1], q.dtype), nd(shapes[2], q.dtype)
        words, (s, o) = operands(seed)   # (words alive until the graph has run)
        run(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, grad_out.data.ptr, lse.data.ptr, s, o,
            dq.data.ptr, dk.data.ptr, dv.data.ptr)
        return dq, dk, dv
    return plan


def plan_flash_attention(q, k, v, scale=None, block_size=64, causal=False, layout="bhld", window=None,
                         key_lengths=None, attn_bias=None, dropout_p=0.0, seed=0):
    """flash_attention (the Triton kernels at a named key block size): as plan_attention_dropout."""
    return _masked_plan("flash_attention", 3, key_lengths)


def plan_attention_with_lse(q, k, v, scale=None, causal=False, layout="bhld", window=None, key_lengths=None):
    if window is not None or key_lengths is not None:
        return _masked_plan("attention_with_lse", 3, key_lengths)
    if layout == "blhd":
        return _plan_blhd_forward(q, k, v, scale, causal)
    if layout == "bhld" and k.shape[:-2] != q.shape[:-2]:   # grouped-query attention
        return _plan_gqa_forward(q, k, v, scale, causal, with_lse=True)
    s = _attn_sig(q, k, v, scale)
    if s is None or layout != "bhld":
        return None
    bh, lq, lk, d, name, sc, lead = s
    if _triton_chosen("fwd", bh, lq, lk, d, name, sc, causal, q.data.device_id):
        return None   # a plan traced from the checked call (ops._planner): its launches replayed in C
    fwd = attention.plan_forward(bh, lq, lk, d, name, sc, bool(causal), q.data.device_id)
    if fwd is None:
        return None
    lse_shape = lead + (lq,)

    def plan(q, k, v, scale=None, causal=False, layout="bhld", *_):
        out, lse = fwd(q, k, v)
        return out, lse.reshape(lse_shape)
    return _f32_guard(name, plan, "attention_with_lse", 3)


def plan_attention(q, k, v, scale=None, causal=False, layout="bhld", window=None, key_lengths=None):
    if window is not None or key_lengths is not None:
        return _masked_plan("attention", 3, key_lengths)
    if layout == "bhld" and k.shape[:-2] != q.shape[:-2]:   # grouped-query attention: cuDNN's inference graph
        return _plan_gqa_forward(q, k, v, scale, causal, with_lse=False)
    s = _attn_sig(q, k, v, scale) if layout == "bhld" else None
    if s is not None:   # cuDNN's inference graph, where the checked call built it (no statistics written)
        bh, lq, lk, d, name, sc, _ = s
        fwd = attention.plan_forward_inference(bh, lq, lk, d, name, sc, bool(causal), q.data.device_id)
        if fwd is not None:
            def plan(q, k, v, scale=None, causal=False, layout="bhld", *_):
                return fwd(q, k, v)
            return _f32_guard(name, plan, "attention", 3)
    p = plan_attention_with_lse(q, k, v, scale, causal, layout, window, key_lengths)
    return None if p is None else (lambda *a: p(*a)[0])


def _plan_blhd_backward(grad_out, q, k, v, out, lse, scale, causal):
    cp = _cupy.cupy()
    if lse.dtype != cp.float32 or not lse.flags.c_contiguous or grad_out.dtype != q.dtype or out.dtype != q.dtype:
        return None
    run = _blhd_cudnn("bwd", {"q": q, "k": k, "v": v, "out": out, "do": grad_out}, scale, causal)
    if run is None:
        return None
    nd = empty_fn()
    shapes = tuple(q.shape), tuple(k.shape), tuple(v.shape)

    def plan(grad_out, q, k, v, out, lse, scale=None, causal=False, layout="blhd", *_):
        dq, dk, dv = nd(shapes[0], q.dtype), nd(shapes[1], q.dtype), nd(shapes[2], q.dtype)
        run(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, grad_out.data.ptr, lse.data.ptr,
            dq.data.ptr, dk.data.ptr, dv.data.ptr)
        return dq, dk, dv
    return plan


def plan_attention_backward_packed(grad_out, q, k, v, out, lse, scale=None, causal=False, layout="blhd", window=None,
                                   key_lengths=None, deterministic=False, qkv_packed=True):
    """attention_backward(..., qkv_packed=True) without masks: cuDNN's backward writing the thirds of
    one (B, L, 3, H, D) array, replayed; None otherwise (then a trace of the checked call, which
    trace_plans refuses where CuPy copies the gradients into the packed array: the checked path)."""
    from . import cudnn
    cp = _cupy.cupy()
    if layout != "blhd" or window is not None or key_lengths is not None or deterministic is not False \
            or qkv_packed is not True or lse.dtype != cp.float32 or not lse.flags.c_contiguous \
            or grad_out.dtype != q.dtype or out.dtype != q.dtype or tuple(k.shape) != tuple(q.shape) \
            or not cudnn.packed_grad_ok(q):
        return None
    run = _blhd_cudnn("bwd", {"q": q, "k": k, "v": v, "out": out, "do": grad_out}, scale, causal, packed=True)
    if run is None:
        return None
    nd = empty_fn()
    b, length, h, d = q.shape
    shape, step = (b, length, 3, h, d), h * d * q.itemsize

    def plan(grad_out, q, k, v, out, lse, *_):
        buf = nd(shape, q.dtype)
        p = buf.data.ptr
        run(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, grad_out.data.ptr, lse.data.ptr, p, p + step,
            p + 2 * step)
        return buf
    return plan


def plan_attention_backward(grad_out, q, k, v, out, lse, scale=None, causal=False, layout="bhld", window=None,
                            key_lengths=None, deterministic=False):
    if window is not None or key_lengths is not None or deterministic is not False:
        # masks, or the deterministic backward (the Triton kernels alone): traced from the checked call
        return _masked_plan("attention_backward", 4, key_lengths)
    if layout == "blhd":
        return _plan_blhd_backward(grad_out, q, k, v, out, lse, scale, causal)
    if layout == "bhld" and k.shape[:-2] != q.shape[:-2]:   # grouped-query attention
        return _plan_gqa_backward(grad_out, q, k, v, out, lse, scale, causal)
    s = _attn_sig(q, k, v, scale)
    if s is None or layout != "bhld" or grad_out.dtype != q.dtype or out.dtype != q.dtype:
        return None
    if not (grad_out.flags.c_contiguous and out.flags.c_contiguous and lse.flags.c_contiguous):
        return None
    if lse.dtype != _cupy.cupy().float32:
        return None
    bh, lq, lk, d, name, sc, _ = s
    if _triton_chosen("bwd", bh, lq, lk, d, name, sc, causal, q.data.device_id):
        return None   # traced, as in plan_attention_with_lse
    bwd = attention.plan_backward(bh, lq, lk, d, name, sc, bool(causal), q.data.device_id)
    if bwd is None:
        return None
    return _f32_guard(name, lambda grad_out, q, k, v, out, lse, scale=None, causal=False, layout="bhld", *_:
                      bwd(grad_out, q, k, v, out, lse), "attention_backward", 4)


def _triton_chosen(kind, bh, lq, lk, d, name, sc, causal, dev) -> bool:
    """Whether the signature's chosen attention path is Triton kernels alone (the flash kernels, or
    the float32 backward's materialised ones up to attention_materialized.TRACE_MAX_BYTES of
    workspace), which a traced plan (kernels/trace_plans.trace_fallback) replays in C with less host
    time than their bound launches; only where the native replay exists.
    The materialised backward's own launches, bound in Python, cost about 0.15 ms of host time a call
    (H100, 2026-11-27 21:16 UTC, benchmarks/sweeps/attention_f32_bwd_small.py: a warm loop ran
    B1 H32 S256 D64 at 0.148 ms a call against its 0.055 ms of device time)."""
    from ..runtime import native
    mod = native.fast_paths()
    if mod is None or not hasattr(mod, "replay_new"):
        return False
    step = attention._planned_path(kind, bh, lq, lk, d, name, sc, bool(causal), dev)
    if step is not None and step[0] == "materialized":   # (past TRACE_MAX_BYTES: plan_backward's closure,
        from . import attention_materialized as am       # with its fallback for want of memory)
        return am.workspace_bytes(bh, lq, lk, d) <= am.TRACE_MAX_BYTES
    return step is not None and step[0] == "triton"


def _f32_guard(dtype_name: str, plan, op: str, arrays: int):
    """plan, or for float32 (whose kernels and path choice follow float32_precision()) a plan per
    precision: the first call under another precision than the plan's runs op's checked path
    (ops._checked_call; `arrays` as ops._planned has it), which chooses that precision's paths, and
    then op's planner (ops.planner_of) makes the plan later calls under it replay. Code that switches
    precision around each call (the benchmark's float32 rows) keeps a plan for each."""
    if dtype_name != "float32":
        return plan
    from .. import config, dispatch
    from ..ops import _checked_call, planner_of
    checked = _checked_call(op, arrays)
    plans = {config.float32_precision(): plan}

    def guarded(*a):
        prec = config.float32_precision()
        p = plans.get(prec, _MISSING)
        if p is not _MISSING:
            return checked(*a) if p is None else p(*a)
        r = checked(*a)
        if dispatch.may_plan():   # else planned on a later call, as dispatch.call does
            make = planner_of(op, arrays)
            plans[prec] = None if make is None else dispatch.make_plan(op, make, a, f"{prec} ")
        return r
    return guarded


_MISSING = object()


# ---- conv2d ------------------------------------------------------------------------------------
def _conv_geo(op, x, weight, bias, stride, padding, dilation, groups):
    """(geo, groups) as conv2d's checks computed them for this signature (the backend's cache)."""
    from ..ops import backend_for
    be = backend_for(x, weight)
    _, geo, groups = be._conv_plan(op, {"x": x, "weight": weight, "bias": bias}, stride, padding, dilation, groups)
    return geo, groups


def _conv_layout(activations, weight, others=()) -> tuple:
    """(layout, weight_cl): "nchw" (every array C-contiguous) or "nhwc" (the activations (N, C, H, W)
    views of channels-last memory, the bias C-contiguous, the weight C-contiguous or, weight_cl,
    channels-last: cudnn.is_krsc): the layouts the plans cover; layout None for anything else (the
    checked path)."""
    from . import cudnn
    if str(activations[0].dtype) not in _DTYPES or not all(a is None or a.flags.c_contiguous for a in others):
        return None, False
    layout = cudnn.layout_of(*activations)
    if weight.flags.c_contiguous:
        return layout, False
    return (layout, True) if layout == "nhwc" and cudnn.is_krsc(weight) else (None, False)


def _new_nchw(layout: str):
    """A function making an uninitialised (N, C, H, W) output in `layout` (channels-last memory for "nhwc")."""
    nd = empty_fn()
    if layout == "nchw":
        return nd
    return lambda shape, dtype: nd((shape[0], shape[2], shape[3], shape[1]), dtype).transpose(0, 3, 1, 2)


def _conv_step(op, kind, dtype, x_shape, w_shape, geo, groups, bias, cudnn_sig, layout="nchw", weight_cl=False,
               relu=False):
    """The chosen path of one conv2d pass (see _conv_paths of backends/cuda.py): ("cudnn", its
    executor, called with pointers, whether cuDNN takes the weight channels-last) or ("triton",
    None, False); None when no path was chosen for the signature (at the current float32
    precision). cudnn_sig(weight_cl, relu): the cuDNN graph's signature. relu (the forward with
    activation="relu"): ("cudnn-unfused", the plain graph's executor, False) where cuDNN's
    convolution runs and the relu after."""
    from . import cudnn, paths
    choice = paths.chosen(op, paths.conv_path_key(kind, dtype, x_shape, w_shape, geo, groups, bias, layout, weight_cl,
                                                  relu))
    if choice in ("cudnn", "cudnn-krsc", "cudnn-unfused"):
        cl = choice == "cudnn-krsc"
        run = cudnn.executor(cudnn_sig(cl, relu and choice != "cudnn-unfused"))
        return None if run is None else ("cudnn" if choice != "cudnn-unfused" else choice, run, cl)
    return ("triton", None, False) if choice == "triton" else None


def plan_conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv2d_plan("conv2d", x, weight, bias, stride, padding, dilation, groups, False)


def plan_conv2d_act(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, activation=None):
    """conv2d with activation="relu" (ops' "conv2d_act"; its checked call has validated activation)."""
    return _conv2d_plan("conv2d_act", x, weight, bias, stride, padding, dilation, groups, True)


def _conv2d_plan(op, x, weight, bias, stride, padding, dilation, groups, relu: bool):
    layout, w_cl = _conv_layout((x,), weight, (bias,))
    if layout is None:
        return None
    geo, groups = _conv_geo("conv2d", x, weight, bias, stride, padding, dilation, groups)
    from . import cudnn
    name = str(x.dtype)
    step = _conv_step("conv2d", "fwd", x.dtype, x.shape, weight.shape, geo, groups, bias is not None,
                      lambda cl, act: cudnn.fprop_sig(x.shape, weight.shape, name, geo, bias is not None,
                                                      x.data.device_id, layout, cl, act), layout, w_cl, relu)
    if step is None or step[0] == "triton":
        return None   # the Triton kernels: a plan traced from the checked call (ops._planner)
    nd = _new_nchw(layout)   # the output in x's layout, as cudnn.conv_fprop makes it
    y_shape = (x.shape[0], weight.shape[0], geo[8], geo[9])
    run, wl, w_in = step[1], step[2], cudnn.as_weight_layout
    from ..ops import relu as relu_op
    unfused = step[0] == "cudnn-unfused"   # cuDNN's plain convolution, then max(y, 0) in place
    if bias is None:
        def plan(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *_):
            y, wc = nd(y_shape, x.dtype), w_in(weight, wl)   # (wc held until the launch: cudnn.as_weight_layout)
            run(x.data.ptr, wc.data.ptr, y.data.ptr)
            return relu_op(y, out=y) if unfused else y
    else:
        def plan(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *_):
            y, wc = nd(y_shape, x.dtype), w_in(weight, wl)
            run(x.data.ptr, wc.data.ptr, bias.data.ptr, y.data.ptr)
            return relu_op(y, out=y) if unfused else y
    return _f32_guard(name, plan, op, 3)


def plan_conv2d_backward(grad_out, x, weight, stride=1, padding=0, dilation=1, bias=True, groups=1):
    if type(bias) is not bool or grad_out.dtype != x.dtype:
        return None
    layout, w_cl = _conv_layout((grad_out, x), weight)
    if layout is None:
        return None
    geo, groups = _conv_geo("conv2d_backward", x, weight, None, stride, padding, dilation, groups)
    from . import conv, cudnn
    dev = x.data.device_id
    name = str(x.dtype)
    w_shape = tuple(weight.shape)
    wg = _conv_step("conv2d_weight_grad", "wgrad", x.dtype, x.shape, w_shape, geo, groups, bias,
                    lambda cl, _: cudnn.wgrad_sig(grad_out.shape, x.shape, w_shape, name, geo, dev, layout, cl), layout,
                    w_cl)
    dg = _conv_step("conv2d_input_grad", "dgrad", x.dtype, x.shape, w_shape, geo, groups, False,
                    lambda cl, _: cudnn.dgrad_sig(grad_out.shape, w_shape, x.shape, name, geo, dev, layout, cl), layout,
                    w_cl)
    if wg is None or dg is None or (wg[0] == dg[0] == "triton"):
        return None   # (the Triton kernels: a plan traced from the checked call, ops._planner)
    if layout == "nhwc" and "triton" in (wg[0], dg[0]):
        return None   # the own kernels copy channels-last data: the checked path does that
    new_gx = _new_nchw(layout)   # dL/dx in x's layout, as cudnn.conv_dgrad makes it
    x_shape, g_ = tuple(x.shape), groups
    if wg[0] == "cudnn":
        run_w, written_cl = wg[1], wg[2]   # (written_cl: cuDNN writes dL/dw channels-last)

        def weight_grad(grad_out, x):
            gw = cudnn.new_nchw(w_shape, x.dtype, written_cl)
            run_w(x.data.ptr, grad_out.data.ptr, gw.data.ptr)
            gb = channel_sum(grad_out) if bias else None
            return cudnn.as_weight_layout(gw, w_cl), gb   # (in the weight's layout, as the checked call returns it)
    else:
        def weight_grad(grad_out, x):
            return conv.conv2d_weight_grad(grad_out, x, w_shape, geo, bias, g_)
    if dg[0] == "cudnn":
        run_d, d_cl = dg[1], dg[2]   # (d_cl: cuDNN reads the weight channels-last)

        def input_grad(grad_out, weight):
            gx = new_gx(x_shape, weight.dtype)
            wc = cudnn.as_weight_layout(weight, d_cl)   # (held until the launch: cudnn.as_weight_layout)
            run_d(grad_out.data.ptr, wc.data.ptr, gx.data.ptr)
            return gx
    else:
        def input_grad(grad_out, weight):
            return conv.conv2d_input_grad(grad_out, weight, x_shape, geo, g_)

    def plan(grad_out, x, weight, stride=1, padding=0, dilation=1, bias=True, groups=1):
        gw, gb = weight_grad(grad_out, x)
        return input_grad(grad_out, weight), gw, gb
    return _f32_guard(name, plan, "conv2d_backward", 3)


# ---- conv1d and channels-last arrays (conv2d's memory_format="nhwc", conv1d's "nlc"): conv2d's
# plans on the (N, C, H, W) views the checked calls make, the results read back in the call's form.
# Each is guarded (_f32_guard) under its own op: after a float32 precision change its first call
# runs its own checked call and then its own planner, which builds the inner conv2d plan at that
# precision (the inner plan's guard, under "conv2d", would find no planner of conv2d where the
# program never called conv2d itself, and keep the checked conv2d for the views).
def _conv1d_pairs(stride, padding, dilation):
    """conv2d's (stride, padding, dilation) pairs of conv1d's ints (or 1-tuples), or None for
    anything else (the checked path reports it)."""
    pairs = []
    for v, other in ((stride, 1), (padding, 0), (dilation, 1)):
        if type(v) is tuple and len(v) == 1:
            v = v[0]
        if type(v) is not int:
            return None
        pairs.append((other, v))
    return pairs


def _cl_view(a):
    """The (N, C, H, W) view of a C-contiguous (N, H, W, C) array (channels-last memory)."""
    return a.transpose(0, 3, 1, 2)


def _same(a, _like=None):
    return a


def _channels_last_views(*views) -> bool:
    """Whether conv2d's plans take these views as channels-last (cudnn.layout_of), so that their
    results are channels-last memory as the checked calls return them (an (N, 1, H, W) view is
    C-contiguous too, and its result would not be)."""
    from . import cudnn
    return cudnn.layout_of(*views) == "nhwc"


def _forward_on_views(op, x, weight, bias, geo, groups, view, w_view, read_back):
    """op's plan: plan_conv2d's on view(x), w_view(weight) with conv2d's geo (stride, padding,
    dilation), its result y given back as read_back(y)."""
    inner = plan_conv2d(view(x), w_view(weight), bias, *geo, groups)
    if inner is None:
        return None

    def plan(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        return read_back(inner(view(x), w_view(weight), bias, *geo, groups))
    return _f32_guard(str(x.dtype), plan, op, 3)


def _backward_on_views(op, grad_out, x, weight, geo, bias, groups, view, w_view, read_back, w_back=_same):
    """op's plan: plan_conv2d_backward's on the views (as _forward_on_views), dL/dx given back as
    read_back(gx, x), dL/dw as w_back(gw, weight)."""
    inner = plan_conv2d_backward(view(grad_out), view(x), w_view(weight), *geo, bias, groups)
    if inner is None:
        return None

    def plan(grad_out, x, weight, stride=1, padding=0, dilation=1, bias=True, groups=1):
        gx, gw, gb = inner(view(grad_out), view(x), w_view(weight), *geo, bias, groups)
        return read_back(gx, x), w_back(gw, weight), gb
    return _f32_guard(str(x.dtype), plan, op, 3)


def _in_shape(a, like):
    return a.reshape(like.shape)


def _ncl(y):
    """conv2d's (N, K, 1, Lo) result as conv1d's (N, K, Lo)."""
    return y.reshape(y.shape[0], y.shape[1], y.shape[3])


def _nhwc(y, _like=None):
    """A channels-last (N, C, H, W) result as the (N, H, W, C) array it views."""
    return y.transpose(0, 2, 3, 1)


def _nlc(y, like=None):
    """A channels-last (N, C, 1, L) result as (N, L, C) (like's shape where given)."""
    t = y.transpose(0, 2, 3, 1)
    return t.reshape(like.shape if like is not None else (y.shape[0], y.shape[3], y.shape[1]))


def plan_conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """conv1d's plan: plan_conv2d's on (N, C, 1, L) views, its (N, K, 1, Lo) result read as
    (N, K, Lo); None where conv2d's planner has none (ops._planner then traces the checked call)."""
    from ..backends.conv_api import nc1l_view
    pairs = _conv1d_pairs(stride, padding, dilation)
    if pairs is None or x.ndim != 3 or weight.ndim != 3:
        return None
    return _forward_on_views("conv1d", x, weight, bias, pairs, groups, nc1l_view, nc1l_view, _ncl)


def plan_conv1d_backward(grad_out, x, weight, stride=1, padding=0, dilation=1, bias=True, groups=1):
    """conv1d_backward's plan: plan_conv2d_backward's on (N, C, 1, L) views, the gradients read in
    x's and weight's shapes."""
    from ..backends.conv_api import nc1l_view
    pairs = _conv1d_pairs(stride, padding, dilation)
    if pairs is None or grad_out.ndim != 3 or x.ndim != 3 or weight.ndim != 3:
        return None
    return _backward_on_views("conv1d_backward", grad_out, x, weight, pairs, bias, groups, nc1l_view, nc1l_view,
                              _in_shape, _in_shape)


def plan_conv2d_nhwc(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """conv2d(..., memory_format="nhwc")'s plan: plan_conv2d's on the (N, C, H, W) view of the
    (N, H, W, C) x, the result read back as (N, Ho, Wo, K)."""
    if x.ndim != 4 or not x.flags.c_contiguous or not _channels_last_views(_cl_view(x)):
        return None
    return _forward_on_views("conv2d_nhwc", x, weight, bias, (stride, padding, dilation), groups, _cl_view, _same,
                             _nhwc)


def plan_conv2d_backward_nhwc(grad_out, x, weight, stride=1, padding=0, dilation=1, bias=True, groups=1):
    """conv2d_backward(..., memory_format="nhwc")'s plan, as plan_conv2d_nhwc's."""
    if grad_out.ndim != 4 or x.ndim != 4 or not (grad_out.flags.c_contiguous and x.flags.c_contiguous) \
            or not _channels_last_views(_cl_view(grad_out), _cl_view(x)):
        return None
    return _backward_on_views("conv2d_backward_nhwc", grad_out, x, weight, (stride, padding, dilation), bias, groups,
                              _cl_view, _same, _nhwc)


def plan_conv1d_nlc(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """conv1d(..., memory_format="nlc")'s plan: plan_conv2d's on the (N, C, 1, L) channels-last
    view of the (N, L, C) x, the result read back as (N, Lo, K)."""
    from ..backends.conv_api import nc1l_view, nlc_view
    pairs = _conv1d_pairs(stride, padding, dilation)
    if pairs is None or x.ndim != 3 or weight.ndim != 3 or not x.flags.c_contiguous \
            or not _channels_last_views(nlc_view(x)):
        return None
    return _forward_on_views("conv1d_nlc", x, weight, bias, pairs, groups, nlc_view, nc1l_view, _nlc)


def plan_conv1d_backward_nlc(grad_out, x, weight, stride=1, padding=0, dilation=1, bias=True, groups=1):
    """conv1d_backward(..., memory_format="nlc")'s plan, as plan_conv1d_nlc's."""
    from ..backends.conv_api import nc1l_view, nlc_view
    pairs = _conv1d_pairs(stride, padding, dilation)
    if pairs is None or grad_out.ndim != 3 or x.ndim != 3 or weight.ndim != 3 \
            or not (grad_out.flags.c_contiguous and x.flags.c_contiguous) \
            or not _channels_last_views(nlc_view(grad_out), nlc_view(x)):
        return None
    return _backward_on_views("conv1d_backward_nlc", grad_out, x, weight, pairs, bias, groups, nlc_view, nc1l_view,
                              _nlc, _in_shape)


# ---- attention_varlen ---------------------------------------------------------------------------
# The Triton kernels' varlen calls are traced from the checked call (trace_plans.trace_fallback,
# dropout's seed taken per call). A call with one cu_seqlens array for q and k comes as its op's
# *_shared form (ops._VARLEN_SHARED: the array passed once); where its checked call chose cuDNN's
# ragged graphs, the plan replays them: the lengths and offsets kernel, then the built graph.
# float64 keeps the checked path: it reads the sequences to the host and launches per sequence,
# which a trace would freeze at the first call's sequences.

def _varlen_checked(op: str, arrays: int, q, *cus):
    """The checked path as the plan of a varlen call a trace cannot serve, else None (traced): float64
    (see above), or cu_seqlens that are not C-contiguous int32/int64 device arrays -- a tuple, which
    the signature takes by value, is copied to the device by the checked call, and a trace records
    launches, not copies (its verification would read the sequences from poisoned memory and set the
    device error flag, as plans with host key_lengths would: _masked_plan)."""
    cp = _cupy.cupy()
    if str(q.dtype) in _DTYPES and all(type(c) is cp.ndarray and c.ndim == 1 and c.dtype in (cp.int32, cp.int64)
                                       and c.flags.c_contiguous for c in cus):
        return None
    from ..ops import _checked_call
    return _checked_call(op, arrays)


def plan_attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale=None, causal=False, window=None, dropout_p=0.0,
                          seed=0):
    return _varlen_checked("attention_varlen", 3, q, cu_q, cu_k)


def plan_attention_varlen_with_lse(q, k, v, cu_q, cu_k, max_q, max_k, scale=None, causal=False, window=None,
                                   dropout_p=0.0, seed=0):
    return _varlen_checked("attention_varlen_with_lse", 3, q, cu_q, cu_k)


def plan_attention_varlen_backward(grad_out, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale=None, causal=False,
                                   window=None, deterministic=False, dropout_p=0.0, seed=0):
    return _varlen_checked("attention_varlen_backward", 4, q, cu_q, cu_k)


def _varlen_cudnn(kind: str, q, k, cu, max_q, max_k, scale, causal, window, dropout_p, extra=()):
    """cuDNN's executor of the ragged pass `kind` ("fwd", "bwd") where the checked call of this
    signature chose it (kernels/attention.forward_varlen / backward_varlen), else None; cu a device
    array _varlen_checked let through. extra: the other arrays the graph reads (v; and grad_out, out,
    lse for the backward)."""
    from . import cudnn, cudnn_varlen, paths
    name = str(q.dtype)
    arrays = (q, k) + tuple(extra)
    if (name not in ("float16", "bfloat16") or window is not None or dropout_p != 0 or q.ndim != 3 or k.ndim != 3
            or not all(a.flags.c_contiguous for a in arrays) or q.shape[0] != k.shape[0] or max_q != max_k):
        return None
    total, h, d = q.shape
    b = cu.shape[0] - 1
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    key = (f"{kind}_varlen", b, h, k.shape[1], max_q, max_k, d, name, bool(causal), q.data.device_id)
    op = "attention_varlen" if kind == "fwd" else "attention_varlen_backward"
    if b < 1 or not total or paths.chosen(op, key) != "cudnn" or not cudnn.aligned(*arrays):
        return None
    p = cudnn_varlen._pass(f"sdpa_varlen_{kind}", q, k, cu, max_q, max_k, sc, causal)
    return None if p is None else cudnn.executor(p[-1])


def plan_attention_varlen_with_lse_shared(q, k, v, cu, max_q, max_k, scale=None, causal=False, window=None,
                                          dropout_p=0.0, seed=0):
    """attention_varlen_with_lse with one cu_seqlens array: cuDNN's ragged forward replayed where
    the checked call chose it, else as plan_attention_varlen_with_lse."""
    checked = _varlen_checked("attention_varlen_with_lse_shared", 3, q, cu)
    if checked is not None:
        return checked
    return _varlen_cudnn_forward(q, k, v, cu, max_q, max_k, scale, causal, window, dropout_p)


def _varlen_cudnn_forward(q, k, v, cu, max_q, max_k, scale, causal, window, dropout_p):
    """(out, lse) by cuDNN's ragged forward replayed where the checked call chose it, else None
    (traced); cu as _varlen_cudnn takes it."""
    run = _varlen_cudnn("fwd", q, k, cu, max_q, max_k, scale, causal, window, dropout_p, (v,))
    if run is None:
        return None
    from . import cudnn_varlen
    cp = _cupy.cupy()
    nd, f32 = empty_fn(), cp.float32
    err = attention._varlen_flag(q.data.device_id)
    lse_shape = tuple(q.shape[:2])

    def plan(q, k, v, cu, *_):
        out, lse = nd(q.shape, q.dtype), nd(lse_shape, f32)
        index = cudnn_varlen._index_arrays(q, k, cu, max_q, max_k, err)   # (held until the launch is queued)
        run(*[a.data.ptr for a in index], q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, lse.data.ptr)
        return out, lse
    return plan


def plan_attention_varlen_shared(q, k, v, cu, max_q, max_k, scale=None, causal=False, window=None, dropout_p=0.0,
                                 seed=0):
    """attention_varlen with one cu_seqlens array: the forward's plan, its output alone."""
    checked = _varlen_checked("attention_varlen_shared", 3, q, cu)
    if checked is not None:
        return checked
    p = _varlen_cudnn_forward(q, k, v, cu, max_q, max_k, scale, causal, window, dropout_p)
    return None if p is None else (lambda *a: p(*a)[0])


def plan_attention_varlen_backward_shared(grad_out, q, k, v, out, lse, cu, max_q, max_k, scale=None, causal=False,
                                          window=None, deterministic=False, dropout_p=0.0, seed=0):
    """attention_varlen_backward with one cu_seqlens array: cuDNN's ragged backward replayed where
    the checked call chose it (dk, dv come summed over each k, v head's q heads), else as
    plan_attention_varlen_backward."""
    checked = _varlen_checked("attention_varlen_backward_shared", 4, q, cu)
    if checked is not None:
        return checked
    cp = _cupy.cupy()
    run = None
    if (deterministic is False and grad_out.dtype == q.dtype and out.dtype == q.dtype and lse.dtype == cp.float32
            and tuple(grad_out.shape) == tuple(q.shape) == tuple(out.shape) and tuple(lse.shape) == tuple(q.shape[:2])):
        run = _varlen_cudnn("bwd", q, k, cu, max_q, max_k, scale, causal, window, dropout_p, (v, grad_out, out, lse))
    if run is None:
        return None
    from . import cudnn_varlen
    nd = empty_fn()
    err = attention._varlen_flag(q.data.device_id)

    def plan(grad_out, q, k, v, out, lse, cu, *_):
        dq, dk, dv = nd(q.shape, q.dtype), nd(k.shape, k.dtype), nd(v.shape, v.dtype)
        index = cudnn_varlen._index_arrays(q, k, cu, max_q, max_k, err)   # (held until the launch is queued)
        run(*[a.data.ptr for a in index], q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, grad_out.data.ptr,
            lse.data.ptr, dq.data.ptr, dk.data.ptr, dv.data.ptr)
        return dq, dk, dv
    return plan
