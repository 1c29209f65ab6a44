"""Fused scaled-dot-product attention on the GPU: Triton kernels (kernels/_attention_triton.py)
compiled and launched by cudakit's Triton runtime, on the current CuPy stream.

Inputs are contiguous [BH, L, D] CuPy arrays of float16, bfloat16 or float32 (float32 products as
cudakit.float32_precision() names: three TF32 tensor-core products by default, config.py), D <= 256. The
softmax statistics are float32. Requires the `triton` extra (BackendUnavailableError otherwise).
The float32 forward at head dims 33..128 under tf32x3 takes V transposed (_transpose_v; the
kernel's SPLIT) and splits K's and V's tiles into TF32 parts once each, not per product as
Triton's own tf32x3. The forward on float16 parts (kernels/_attention_f16p_triton.py: each row a
power-of-two scale times two float16 parts, three float16 products; _f16_candidates) is timed
against it per signature, and taken first where nothing is timed (CUDAKIT_ATTENTION_F16_PARTS=0
withdraws it).
The float32 backward under tf32x3 has a second path, timed against the flash kernels per signature
(kernels/paths.py): the materialised kernels of kernels/attention_materialized.py.
"""
from __future__ import annotations

import math

from .. import config
from ..runtime import _cupy
from ..runtime.native import empty_fn
from .attention_materialized import head_block

MAX_HEAD_DIM = 256   # the Triton kernels' head dims (129..256 on narrower tiles: _wide_config)
KEY_BLOCKS = (16, 32, 64, 128)   # the block sizes flash_attention's block_size may name
_MAX_GRID_Y = 65535
_kernels: dict = {}
ERR_KEY_LENGTHS = 10   # device error code of a key length outside [0, Lk] (_attention_triton.py writes it)
ERR_CU_SEQLENS = 11    # ... of a packed sequence's length outside [0, max_seqlen] (_attention_triton._seq)

from ..backends.attention_masks import _UNBOUNDED, Masks, key_bounds  # noqa: E402 -- key_bounds: part of this module's API
from . import attention_key_parts as kp  # noqa: E402
from . import reduction  # noqa: E402


def _key_lengths_error(op: str, f: list):
    from ..errors import ArgumentError
    return ArgumentError(f"{op}: key_lengths[{f[0]}] = {f[1]} is outside [0, Lk = {f[2]}] (found on the device "
                         f"by an earlier asynchronous call)")


_errors_registered = False


def _cu_seqlens_error(op: str, f: list):
    """The error of a bad GPU cu_seqlens: f = (sequence, its Lq, its Lk, max_seqlen_q, max_seqlen_k,
    what is wrong: bits 0-2 for cu_seqlens_q, 3-5 for cu_seqlens_k, as _attention_triton._seq and
    cudnn_varlen's ragged kernel record it)."""
    from ..errors import ArgumentError
    b, n = int(f[0]), {"q": int(f[1]), "k": int(f[2])}
    top, why = {"q": int(f[3]), "k": int(f[4])}, int(f[5])
    parts = []
    for side, shift in (("q", 0), ("k", 3)):
        r = (why >> shift) & 7
        if r & 1:
            parts.append(f"cu_seqlens_{side} decreases there (L{side} = {n[side]}) or is negative")
        if r & 2:
            parts.append(f"its L{side} = {n[side]} is past max_seqlen_{side} = {top[side]}")
        if r & 4:
            parts.append(f"cu_seqlens_{side} reaches past the packed {side}'s rows")
    if not parts:   # (a flag written without the reasons)
        parts.append(f"cu_seqlens_q / cu_seqlens_k give Lq = {n['q']}, Lk = {n['k']}")
    return ArgumentError(f"{op}: sequence {b}: " + "; ".join(parts) + " (found on the device by an earlier "
                         "asynchronous call)")


_varlen_errors_registered = False


def _varlen_flag(device_id: int):
    global _varlen_errors_registered
    from ..runtime import device_errors
    if not _varlen_errors_registered:
        device_errors.register(ERR_CU_SEQLENS, "attention_varlen", _cu_seqlens_error)
        _varlen_errors_registered = True
    return device_errors.flag(device_id)


def _mask_args(masks: Masks, lq: int, lk: int, dummy) -> tuple:
    """(LENS, ERR, DLO, DHI, H) of the kernels for masks (dummy: any array for the pointers not
    read); the device error flag and its code are set up with the first key lengths."""
    global _errors_registered
    dlo, dhi = key_bounds(lq, lk, masks.causal, masks.window)
    if masks.lengths is None:
        return dummy, dummy, dlo, dhi, 1
    from ..runtime import device_errors
    if not _errors_registered:
        device_errors.register(ERR_KEY_LENGTHS, "attention", _key_lengths_error)
        _errors_registered = True
    return masks.lengths, device_errors.flag(masks.lengths.data.device_id), dlo, dhi, masks.heads


def _uniform_args(dummy, groups: int, q, k, grads: int = 0) -> tuple:
    """(CU_Q, CU_K, G, TQ, TK, SQ, SK, SG) of a launch on (B, L, H, D) arrays read in place (VARLEN's
    UNIFORM form: cu_seqlens and totals not read); grads: the gradients' row stride (0: C-contiguous)."""
    return (dummy, dummy, groups, 0, 0, *_row_strides(q, k), grads)


def _NO_VARLEN(dummy, groups: int = 1) -> tuple:
    """(CU_Q, CU_K, G, TQ, TK, SQ, SK, SG) of a launch on [BH, L, D] arrays (CU_Q, CU_K, TQ, TK, SQ,
    SK, SG not read); groups: q heads a k, v head serves ([BH / groups, Lk, D] k, v read in place)."""
    return (dummy, dummy, groups, 0, 0, 0, 0, 0)


_SEED_WORDS = ("DSEED_LO", "DSEED_HI")


def _drop_args(masks: Masks) -> tuple:
    """(DSEED_LO, DSEED_HI, DTHRESH, DSCALE) of the kernels: dropout on the probabilities, or
    values not read. The seed's words travel as signed int32 (the kernels take their low 32 bits),
    so every seed launches the same compiled kernel with the same parameter layout."""
    if masks.dropout is None:
        return (0, 0, 0, 1.0)
    thr, scale, seed = masks.dropout
    return (_signed32(seed & 0xFFFFFFFF), _signed32(seed >> 32), thr, float(scale))


def _signed32(w: int) -> int:
    """The 32-bit word w (0 <= w < 2^32) as the int32 of the same bits."""
    return w - (1 << 32) if w >= 1 << 31 else w


def _bias_args(masks: Masks, dummy) -> tuple:
    """(BIAS, sb_b, sb_h, sb_q, sb_k, HB) of the kernels: the bias's 4-D view read in place by its
    element strides (0 on the dims it broadcasts); a dummy pointer and zeros without a bias."""
    b = masks.bias
    if b is None:
        return (dummy, 0, 0, 0, 0, 1)
    return (b, *_strides(b), masks.bias_heads)


def _unit_keys(b) -> bool:
    """Whether bias b's keys are contiguous (its last dim more than one element, of stride one): the
    kernels' BIAS_K1 (_bias_args' key stride 1), which they then take as a constant (the launcher
    compiles an int argument's divisibility by 16 in, not its value), so that the compiler knows
    each bias tile's keys contiguous and loads them as vectors. float32, a (B, H, L, L) bias, B4 H16
    S1024 D64: forward 0.519 -> 0.242 ms, backward 1.674 -> 0.871 (H200, 2026-11-29,
    benchmarks/sweeps/attention_f32_bias.py, history/attention/*-f32-bias-k1.json)."""
    return _strides(b)[3] == 1


def _strides(x) -> tuple:
    """x's element strides, 0 on its size-1 dims (broadcast)."""
    return tuple(0 if n == 1 else st // x.itemsize for n, st in zip(x.shape, x.strides))


def cast(x, dtype):
    """A C-contiguous copy of CuPy array x converted to `dtype` (bfloat16 among them, which CuPy
    has no arithmetic for) by a Triton kernel: 2 bytes or more read and written per element."""
    cp = _cupy.cupy()
    src = cp.ascontiguousarray(x)
    out = cp.empty(x.shape, dtype)
    if src.size:
        _launch("cast_copy", src.size, 1024, (src.reshape(1, -1), out.reshape(1, -1)), (src.size,),
                {"BLOCK": 1024, "num_warps": 4})
    return out


def zeros(shape, dtype):
    """A zeroed C-contiguous CuPy array written by a Triton launch, not by CuPy's memset: a traced
    plan (kernels/trace_plans.py) records and replays launches and sees no memset, so a backward that
    zeroed a bias gradient's buffer (atomics add into it) had its trace refused and took the
    checked path on every call."""
    cp = _cupy.cupy()
    out = cp.empty(shape, dtype)
    if out.size:
        _launch("zero_fill", out.size, 1024, (out.reshape(1, -1),), (out.size,), {"BLOCK": 1024, "num_warps": 4})
    return out


def _k(name: str):
    """The TritonKernel `name` of the Triton source, made on first use."""
    k = _kernels.get(name)
    if k is None:
        from ..runtime.triton import TritonKernel, _triton
        _triton()  # BackendUnavailableError naming the extra when Triton is missing
        from . import _attention_f16p_triton as f16p
        from . import _attention_mat_triton as mat
        from . import _attention_triton as src
        from .attention_materialized import KERNELS
        for mod, names in ((src, ("attn_fwd", "attn_fwd_combine", "attn_bwd_delta", "attn_bwd_dkdv", "attn_bwd_dq",
                                  "cast_copy", "zero_fill", "tf32_split")), (mat, KERNELS),
                           (f16p, ("attn_fwd_f16p", "f16_split_kv"))):
            for n in names:
                # the dropout seed's words are not specialised: one kernel for every seed, so a traced
                # plan takes a new seed per call (kernels/trace_plans.py, dispatch.DYNAMIC)
                _kernels[n] = TritonKernel(getattr(mod, n), do_not_specialize=_SEED_WORDS)
        k = _kernels[name]
    return k


def _config(dtype_name: str, d: int, block_n: int | None) -> dict:
    """Forward tile sizes: 128 x 64 on 8 warps for 16-bit data (4 stages up to head_dim 64, 3 above,
    where the tiles are twice the shared memory); block_n overrides the key tile. float32 (twice the
    shared memory per tile) follows cudakit.float32_precision(): with tensor-core products (tf32x3,
    tf32) 128 x 64 on 8 warps up to head_dim 64, 64 x 64 on 4 warps above; with FMA products (ieee)
    64 x 32 on 4 warps, since wider tiles spill. Chosen on an H100 (benchmarks/sweeps/attention_variants.py,
    2026-11-23: at head_dim 64, 8 warps and 4 stages ran 4% faster than 4 warps and 3 stages; the
    float32 tiles 2026-11-25, GPU-f25e6ffe: 1.33x and 1.16x the 64 x 32 tiles' speed under tf32x3)."""
    block_d = head_block(d)
    if block_d > 128:   # head dims 129..256: smaller tiles fit the 256-wide q, k, v rows in shared memory
        return _wide_config(dtype_name, block_n, block_d)
    if dtype_name == "float32":
        prec = config.float32_precision()
        if prec == "ieee":
            cfg = {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
        elif block_d <= 64:   # tf32x3: 3 stages ran B16 H8 S512 D64 in 0.182 ms against 0.192 with 2 (H100,
            wide = block_n is not None and block_n > 64   # 2026-11-27, attention_f32_variants.py --fwd-tiles)
            cfg = {"BLOCK_M": 64 if wide else 128, "BLOCK_N": 64, "num_warps": 8,
                   "num_stages": 3 if prec == "tf32x3" and not wide else 2}
        else:
            cfg = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
        if block_n is not None and block_n > 64 and block_d > 64:   # 128 keys x 128 float32: one stage fits
            cfg["num_stages"] = 1
        cfg["PREC"] = prec
    else:
        cfg = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 4 if block_d <= 64 else 3,
               "PREC": "tf32"}
    if block_n is not None:
        cfg["BLOCK_N"] = block_n
    cfg["BLOCK_D"] = block_d
    return cfg


def _wide_config(dtype_name: str, block_n: int | None, block_d: int) -> dict:
    """Forward tiles for head dims 129..256 (BLOCK_D 256): 16-bit 64 x 64 on 8 warps, 2 stages
    (q 32 KiB, k and v 64 KiB a stage); float32 64 x 32 on 8 warps (tensor-core products) or 32 x 32
    on 4 (ieee), one stage, 32-row query tiles when flash_attention's block_size is 64 or 128. Chosen to
    fit an H100's shared memory for every block_size (tests/test_attention_compile.py compiles some),
    checked in Triton's interpreter against float64 (tests/attention_interpreter.py); not yet timed."""
    if dtype_name == "float32":
        prec = config.float32_precision()
        wide_keys = block_n is not None and block_n >= 64   # 64 x 64+ float32 tiles of 256 columns: too big
        cfg = ({"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4} if prec == "ieee" else
               {"BLOCK_M": 32 if wide_keys else 64, "BLOCK_N": 32, "num_warps": 8})
        cfg.update(num_stages=1, PREC=prec)
    else:
        cfg = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "PREC": "tf32"}
    if block_n is not None:
        cfg["BLOCK_N"] = block_n
        if block_n > 64:
            cfg["num_stages"] = 1
    cfg["BLOCK_D"] = block_d
    return cfg


def _backward_configs(dtype_name: str, cfg: dict) -> tuple[dict, dict]:
    """(dK/dV kernel, dQ kernel) tiles: key-major and query-major (FlashAttention-2's split). For
    16-bit data the dK/dV kernel takes 64-row query blocks against 64 keys on 4 warps up to head_dim
    64 and against 128 keys on 8 warps above; the dQ kernel 128 x 64 tiles on 8 warps. Timed on an
    H100 (2026-11-23, GPU-f5757068): at head_dim 128, 64 x 128 and 32 x 64 dK/dV tiles tied within
    the run's noise, 64 x 64 ran 5-15% slower; dQ 128 x 64 on 8 warps 3% faster than 128 x 32 on 4.
    float32: 32 x 64 and 64 x 32 on 4 warps, one stage; with tensor-core products up to head_dim 64,
    32 x 128 and 128 x 32 on 8 warps (9% faster under tf32x3, GPU-f25e6ffe)."""
    if cfg["BLOCK_D"] > 128:   # head dims 129..256: the dK, dV (and dQ) accumulators are 256 wide
        f32 = dtype_name == "float32"
        return (dict(cfg, BLOCK_M=16 if f32 else 32, BLOCK_N=32 if f32 else 64, num_warps=4 if f32 else 8,
                     num_stages=1),
                dict(cfg, BLOCK_M=32 if f32 else 64, BLOCK_N=16 if f32 else 32, num_warps=4 if f32 else 8,
                     num_stages=1))
    if dtype_name == "float32":
        if cfg["PREC"] != "ieee" and cfg["BLOCK_D"] <= 64:
            return (dict(cfg, BLOCK_M=32, BLOCK_N=128, num_warps=8, num_stages=1),
                    dict(cfg, BLOCK_M=128, BLOCK_N=32, num_warps=8, num_stages=1))
        return (dict(cfg, BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=1),
                dict(cfg, BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=1))
    if cfg["BLOCK_D"] >= 128:
        kv = dict(cfg, BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=2)
    else:
        kv = dict(cfg, BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3)
    return kv, dict(cfg, BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2)


def _launch(name: str, rows: int, block: int, arrays: tuple, args: tuple, consts: dict, bh0: bool = False,
            whole: int | None = None) -> None:
    """Kernel `name` over grid (row blocks, batch*heads): batch*heads is grid dim y (at most 65535),
    so larger batches go in slices of the [BH, ...] arrays; bh0: the kernel takes the slice's first
    batch*head as its last argument (to find the batch's key length). whole: the batch*heads of
    arrays that are not [BH, ...] (layout "blhd", UNIFORM), passed whole to each slice, which the
    kernel finds by its first batch*head (bh0 then implied)."""
    k = _specialized(name, consts)
    blocks = max(1, math.ceil(rows / block))
    if whole is not None:
        for b0, n in _grid_slices(whole):
            k[(blocks, n)](*arrays, *args, b0)
        return
    bh = arrays[0].shape[0]
    if bh <= _MAX_GRID_Y:
        k[(blocks, bh)](*arrays, *args, *((0,) if bh0 else ()))
        return
    for b0, n in _grid_slices(bh):
        k[(blocks, n)](*(a[b0:b0 + n] for a in arrays), *args, *((b0,) if bh0 else ()))


_special: dict = {}   # (kernel name, constexprs and launch options, PDL) -> its specialised TritonKernel
# Programmatic dependent launch of these kernels (each waits for the kernel before it in the stream
# first thing, _triton_pdl._pdl_start): None as runtime.triton.pdl_supported says at compile
# time (CUDAKIT_PDL, compute capability 9.0+); False, True (1) or 2 forces it off or that mode (an A/B
# timing in one process, benchmarks/sweeps/attention_pdl.py, with dispatch plans off so that each
# call reads it).
PDL: bool | int | None = None


def _specialized(name: str, consts: dict):
    """Kernel `name` with these constexprs (head_dim D among them) and options bound
    (TritonKernel.specialized): called with its runtime arguments only, it launches from the native
    plans instead of binding each call in Python, whose three launches cost the backward about
    75 us of host time (H100 host, 2026-11-26, scripts/host_profile.py, since folded into
    scripts/host_breakdown.py)."""
    key = (name, tuple(sorted(consts.items())), PDL)
    k = _special.get(key)
    if k is None:
        opts = dict(consts)
        if PDL is not None:
            opts["PDL"] = PDL
        nw, ns = opts.pop("num_warps", None), opts.pop("num_stages", None)
        k = _special[key] = _k(name).specialized(num_warps=nw, num_stages=ns, **opts)
    return k



def _cudnn_candidate(dtype_name: str, d: int, scale: float) -> bool:
    """cuDNN may run this attention: installed, 16-bit, head_dim it takes, and a positive scale (on an
    H100, 2026-11-26, a 2x130x150x64 backward with scale -0.3 returned NaN in dv in a run where cuDNN
    took that signature, and not in earlier runs that timed another plan; not investigated further:
    zero and negative scales stay on the Triton kernels)."""
    from . import cudnn
    return scale > 0 and cudnn.wanted() and cudnn.attention_ok(dtype_name, d)


def forward(q, k, v, scale: float, causal: bool, dtype_name: str, block_n: int | None = None, tiles=None,
            masks: Masks | None = None, groups: int = 1, q_heads: int = 1, need_lse: bool = True):
    """(out [BH, Lq, D], lse [BH, Lq] float32) of softmax(q k^T * scale) v: cuDNN's flash forward or
    the Triton kernel, whichever kernels/paths.py measured faster for the signature (Triton alone
    without the `cudnn` extra, for float32, when block_n or tiles name the Triton kernel's tiles
    (benchmarks/sweeps/attention_variants.py), with a window or key lengths, or grouped-query k, v
    read in place; with a bias, cudnn_bias; with dropout, cuDNN's fused dropout where
    cudnn_dropout takes the signature, else the Triton kernel).
    masks: causal (bottom-right aligned), window and key lengths (Masks; Masks(causal) when None).
    A row that sees no key gets out 0 and lse -inf. FLOPs: 4 BH Lq Lk D, about half of it causal.
    groups > 1 (grouped-query attention, the Triton kernels only): k, v are [BH / groups, Lk, D],
    each serving `groups` consecutive heads of the q_heads of a batch, read in place.
    need_lse=False (attention() without lse): cuDNN runs its inference graph, which writes no
    statistics, and lse may come back None."""
    bh, lq, d = q.shape
    masks = Masks(causal) if masks is None else masks
    if block_n is None and tiles is None and cudnn_dropout(dtype_name, bh, lq, k.shape[1], d, scale, masks, groups,
                                                           q.data.device_id):
        return _cudnn_dropout_forward(q, k, v, scale, masks, dtype_name)
    if block_n is None and tiles is None and cudnn_bias(dtype_name, d, scale, masks, bh, lq, k.shape[1], groups,
                                                        grad=False):
        from . import paths
        key = bias_path_key("fwd", bh, lq, k.shape[1], d, dtype_name, causal, q.data.device_id, masks.bias, groups)
        cands = [("cudnn", lambda: _cudnn_bias_forward(q, k, v, scale, masks, need_lse))]
        if d <= MAX_HEAD_DIM:
            cands.append(("triton", lambda: _triton_forward(q, k, v, scale, masks, dtype_name, None, None, groups,
                                                            q_heads)))
        return _only_cudnn_beyond(d, paths.run("attention", key, cands))
    if block_n is None and tiles is None and bh * lq * k.shape[1] and masks.plain and groups == 1 \
            and _cudnn_candidate(dtype_name, d, scale):
        from . import cudnn, paths
        key = _path_key("fwd", bh, lq, k.shape[1], d, dtype_name, causal, q.data.device_id)
        cands = [("cudnn", lambda: cudnn.sdpa_forward(q, k, v, scale, causal, inference=not need_lse))]
        if d <= MAX_HEAD_DIM:
            cands.append(("triton", lambda: _triton_forward(q, k, v, scale, masks, dtype_name)))
        return _only_cudnn_beyond(d, paths.run("attention", key, cands))
    _check_triton_head_dim(d)
    from . import paths
    paths.ran("attention", "triton")   # (a timed choice among its key-parts variants records its own)
    return _triton_forward(q, k, v, scale, masks, dtype_name, block_n, tiles, groups, q_heads)


MAX_CUDNN_HEAD_DIM = 256   # cuDNN's head dims (multiples of 8, 16-bit data)


# ---- an additive score bias on cuDNN -----------------------------------------------------------
def cudnn_bias(dtype_name: str, d: int, scale: float, masks: Masks, bh: int, lq: int, lk: int, groups: int,
               grad: bool = True) -> bool:
    """Whether cuDNN's graphs are a candidate for this attention pass with a bias and no other mask
    beyond causal: cuDNN takes the call (_cudnn_candidate) and reads the bias in place
    (cudnn.bias_ok: q's dtype, a bias over every query row and key, broadcast over batch or heads
    at most: ALiBi's or a relative-position bias (1, H, Lq, Lk), a full (B, H, Lq, Lk) one, the
    (B, 1, Lq, Lk) float mask of a grouped-query model), k, v with H / groups heads (cuDNN reads
    each for its group of q heads). grad=False (the forward): a bias broadcast over the query rows
    too (a padding bias (B, 1, 1, Lk)), whose gradient is the Triton kernels' (cuDNN writes a
    gradient over every row).
    Calls cuDNN is known to decline or to get wrong are left out (CUDAKIT_CUDNN=1 would otherwise
    raise where the Triton kernels ran them): a causal mask with Lq != Lk (its bottom-right mask
    takes no bias), and for the backward _cudnn_bias_grad_ok's."""
    b = masks.bias
    if b is None or masks.window is not None or masks.lengths is not None or masks.dropout is not None \
            or masks.drop_index is not None or not bh * lq * lk or bh % masks.bias_heads \
            or masks.bias_heads % groups or (masks.causal and lq != lk):
        return False
    from . import cudnn
    if not (_cudnn_candidate(dtype_name, d, scale) and cudnn.bias_ok(b, dtype_name, lq, lk, grad)):
        return False
    return not grad or _cudnn_bias_grad_ok(lq, lk, d)


# cuDNN's SDPA backward with an explicit bias or mask returned NaN in dQ where Lk % 128 == 64 and a
# row's log-sum-exp is below ln(FLT_MAX) ~ -88.7 (a finite mask such as finfo.min over a whole row,
# or very negative scores), on H100/H200, reported against torch 2.11's default cuDNN backend
# (pytorch/pytorch#196678) and fixed in the 9.26 backend (NVIDIA/cudnn-frontend#628): a row's lse
# cannot be known on the host, so those key lengths take the Triton kernels before 9.26
_BIAS_BWD_FIXED = 92600


def _cudnn_bias_grad_ok(lq: int, lk: int, d: int, version=None) -> bool:
    """Whether cuDNN's backward with a bias may be asked at these sizes: not at head dim 256
    (its graph writes no bias gradient there), nor for one query row (a case the frontend's own
    tests skip; cuDNN 9.25-9.26 returned NaN dK, dV for Sq = 1 with a very negative lse,
    NVIDIA/cudnn-frontend#1072), nor for Lk % 128 == 64 before backend 9.26 (_BIAS_BWD_FIXED).
    version: cuDNN's backend version number (cudnn.version(); None: asked)."""
    if d == 256 or lq == 1:
        return False
    if lk % 128 != 64:
        return True
    if version is None:
        from . import cudnn
        version = cudnn.version()
    try:
        return int(version) >= _BIAS_BWD_FIXED
    except (TypeError, ValueError):
        return False


def bias_path_key(kind: str, bh: int, lq: int, lk: int, d: int, dtype_name: str, causal: bool, device: int,
                  bias, groups: int = 1) -> tuple:
    """The signature kernels/paths.py chooses a pass with a bias under (cudnn_bias): _path_key's,
    the bias's 4-D shape (the dims it broadcasts), dtype and whether its keys are contiguous (the
    Triton kernels' BIAS_K1 form) added, and the q heads a k, v head serves where more than one."""
    key = _path_key(kind, bh, lq, lk, d, dtype_name, causal, device) + (
        ("bias", tuple(bias.shape), str(bias.dtype), "k1" if _unit_keys(bias) else "strided"),)
    return key if groups == 1 else key + (("groups", groups),)


def _bias_bhsd(masks: Masks, bh: int, *arrays):
    """[BH, L, D] arrays (k, v: [BH / groups, L, D]) as the (B, H, L, D) views cuDNN's graphs take
    with a bias (H: the bias's heads, H / groups for grouped k, v)."""
    h = masks.bias_heads
    return tuple(x.reshape(bh // h, h * x.shape[0] // bh, x.shape[1], x.shape[2]) for x in arrays)


def _or_declined_for_memory(call, key: str = "attention:cudnn-bias",
                            reason: str = "no memory for cuDNN's graph with the bias: the Triton kernels ran it"):
    """call()'s result, or None where it ran out of device memory (a path candidate's workspace:
    cuDNN's bias graphs take one that grows as B H Lq Lk, and their plan timing copies the bias;
    the float32 materialised backward's P and dS): noted in cudakit.fallbacks under `key` and,
    being a passing reason, keeping a choice timed without this path off the disk
    (paths.declined_for_now); the call's other candidate then runs it."""
    cp = _cupy.cupy()
    try:
        return call()
    except (MemoryError, cp.cuda.memory.OutOfMemoryError):
        from .. import fallbacks
        from . import paths
        fallbacks.note(key, reason)
        paths.declined_for_now()
        return None


def _cudnn_bias_forward(q, k, v, scale: float, masks: Masks, need_lse: bool):
    """(out [BH, Lq, D], lse [BH, Lq] or None without need_lse) from cuDNN's graph with the bias,
    or None (declined)."""
    from . import cudnn
    bh, lq, d = q.shape
    r = _or_declined_for_memory(lambda: cudnn.sdpa_forward(*_bias_bhsd(masks, bh, q, k, v), scale, masks.causal,
                                                           "bhsd", inference=not need_lse, bias=masks.bias))
    if r is None:
        return None
    return r[0].reshape(bh, lq, d), None if r[1] is None else r[1].reshape(bh, lq)


def _cudnn_bias_backward(do, q, k, v, out, lse, scale: float, masks: Masks):
    """(dq, dk, dv, the bias's gradient in its 4-D shape and dtype) from cuDNN's backward graph
    with the bias, or None (declined: e.g. a bias shape whose gradient cuDNN does not write)."""
    from . import cudnn
    bh, lq, d = q.shape
    lse4 = _f32_contiguous(lse).reshape(bh // masks.bias_heads, masks.bias_heads, lq)
    r = _or_declined_for_memory(lambda: cudnn.sdpa_backward(*_bias_bhsd(masks, bh, do, q, k, v, out), lse4, scale,
                                                            masks.causal, "bhsd", bias=masks.bias))
    if r is None:
        return None
    dq, dk, dv, db = r   # (grouped k, v: dk, dv summed over each group by cuDNN, like k, v)
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape), db


# ---- dropout by cuDNN (CUDAKIT_ATTENTION_DROPOUT=cudnn, the default) -----------------------------
_cudnn_dropout_ok: dict = {}   # signature -> whether cuDNN's dropout graphs take it


def _dropout_p(masks: Masks) -> float:
    """The dropout probability of masks.dropout (threshold, 1 / (1 - p), seed)."""
    return 1.0 - 1.0 / masks.dropout[1]


def cudnn_dropout(dtype_name: str, bh: int, lq: int, lk: int, d: int, scale: float, masks: Masks, groups: int,
                  device: int) -> bool:
    """Whether this attention pass with dropout runs cuDNN's fused dropout, whose mask is cuDNN's
    Philox stream, not cudakit.dropout's: CUDAKIT_ATTENTION_DROPOUT=cudnn (the default), a call
    cuDNN's attention takes (installed, 16-bit, head_dim a multiple of 8 up to 256, a positive
    scale), no window, key lengths or bias, causal only with Lq = Lk (cuDNN's bottom-right causal
    mask takes no dropout), one q head a k, v head, and the forward's graph and both backward
    graphs (the default and the deterministic algorithm) of the signature build. A function of the
    signature alone, so the forward and the backward of one call agree on the stream (a forward by
    one stream and its backward by the other would give wrong gradients), whether or not the
    backward is asked for deterministic=True. A graph cuDNN declines, even under CUDAKIT_CUDNN=1,
    or an out-of-memory while they are built makes the answer False for the process (the signature
    keeps cudakit's stream: no later call may answer otherwise). The callers ask it for calls
    without named tiles; a forward at a named key block size (flash_attention, which returns no
    lse for a backward) keeps cudakit's stream."""
    from ..config import settings
    if masks.dropout is None or settings().attention_dropout != "cudnn":
        return False
    if masks.window is not None or masks.lengths is not None or masks.bias is not None \
            or masks.drop_index is not None or groups != 1 or (masks.causal and lq != lk) or not bh * lq * lk:
        return False
    if not _cudnn_candidate(dtype_name, d, scale):
        return False
    p = _dropout_p(masks)
    key = (bh, lq, lk, d, dtype_name, float(scale), masks.causal, p, device)
    ok = _cudnn_dropout_ok.get(key)
    if ok is None:   # the graphs built once, on scratch arrays (a declined graph is remembered by kernels/cudnn.py)
        from . import cudnn
        from ..errors import BackendUnavailableError
        cp = _cupy.cupy()
        drop = (p, 0)
        try:
            q, g = (cp.zeros((bh, lq, d), dtype_name) for _ in range(2))
            kv = cp.zeros((bh, lk, d), dtype_name)
            fwd = cudnn.sdpa_forward(q, kv, kv, scale, masks.causal, dropout=drop)
            ok = fwd is not None and all(cudnn.sdpa_backward(g, q, kv, kv, fwd[0], fwd[1], scale, masks.causal,
                                                             dropout=drop, deterministic=det) is not None
                                         for det in (False, True))
        except BackendUnavailableError:   # (CUDAKIT_CUDNN=1 raises on a declined graph)
            ok = False
        except (MemoryError, cp.cuda.memory.OutOfMemoryError):
            from .. import fallbacks
            fallbacks.note("attention:cudnn-dropout", "no memory to build cuDNN's dropout graphs for a signature: "
                                                      "it keeps cudakit's dropout stream in this process")
            ok = False
        _cudnn_dropout_ok[key] = ok
    return ok


def _aligned_for_cudnn(*arrays):
    """The arrays, each copied where its address is not 16-byte aligned (a view's offset): cuDNN's
    graphs describe aligned tensors, and this call may not fall back to another dropout stream."""
    from . import cudnn
    return tuple(x if cudnn.aligned(x) else x.copy() for x in arrays)


def _cudnn_dropout_forward(q, k, v, scale: float, masks: Masks, dtype_name: str):
    """(out, lse) by cuDNN's fused dropout (cudnn_dropout said yes for this signature)."""
    from . import cudnn
    from ..errors import BackendUnavailableError
    q, k, v = _aligned_for_cudnn(q, k, v)
    r = cudnn.sdpa_forward(q, k, v, scale, masks.causal, dropout=(_dropout_p(masks), masks.dropout[2]))
    if r is None:
        raise BackendUnavailableError("attention: cuDNN declined the dropout forward of a signature it took before "
                                      "(CUDAKIT_ATTENTION_DROPOUT=cudnn)")
    return r


def _cudnn_dropout_backward(do, q, k, v, out, lse, scale: float, masks: Masks, dtype_name: str,
                            deterministic: bool):
    """(dq, dk, dv) by cuDNN's fused dropout backward, the forward's mask regenerated from (p,
    seed); deterministic: cuDNN's deterministic algorithm (a BackendUnavailableError where cuDNN
    has none for the signature: cudakit's kernels would drop other probabilities)."""
    from . import cudnn
    from ..errors import BackendUnavailableError
    do, q, k, v, out, lse = _aligned_for_cudnn(do, q, k, v, out, _f32_contiguous(lse))
    r = cudnn.sdpa_backward(do, q, k, v, out, lse, scale, masks.causal,
                            dropout=(_dropout_p(masks), masks.dropout[2]), deterministic=deterministic)
    if r is None:
        raise BackendUnavailableError(
            "attention_backward: cuDNN declined the dropout backward of this signature"
            + (" with deterministic=True" if deterministic else "")
            + " (CUDAKIT_ATTENTION_DROPOUT=cudnn: its forward ran cuDNN's dropout, whose mask cudakit's kernels "
              "cannot regenerate); set CUDAKIT_ATTENTION_DROPOUT=cudakit for cudakit.dropout's stream")
    return r


def _check_triton_head_dim(d: int) -> None:
    if d > MAX_HEAD_DIM:
        from ..errors import ShapeError
        raise ShapeError(f"attention: head_dim must be <= {MAX_HEAD_DIM} on the GPU (got {d})")


def _only_cudnn_beyond(d: int, result):
    """result, or a ShapeError when cuDNN, the only path past MAX_HEAD_DIM, declined the call."""
    if result is None:
        _check_triton_head_dim(d)
    return result


def _path_key(kind: str, bh: int, lq: int, lk: int, d: int, dtype_name: str, causal: bool, device: int) -> tuple:
    """The signature kernels/paths.py chooses a [BH, L, D] pass's path under ("fwd" or "bwd"), as
    forward()/backward() record it and plan_forward()/plan_backward() look it up."""
    return (kind, bh, lq, lk, d, dtype_name, bool(causal), device)


def _cudnn_in_place(op: str, key: tuple, dtype_name: str, scale: float, arrays, call):
    """call()'s result: cuDNN reading `arrays` in place (the blhd and grouped-query forms, which
    only cuDNN takes without copies), recorded under (op, key) by kernels/paths.py; None where
    cuDNN cannot take them (missing, declining, strides or alignment it cannot read): the caller
    then copies into the forms the other paths take."""
    if not (_cudnn_candidate(dtype_name, arrays[0].shape[-1], scale) and _blhd_ok(*arrays)):
        return None
    from . import paths
    return paths.run(op, key, [("cudnn", call)])


def _f32_contiguous(lse):
    cp = _cupy.cupy()
    return lse if lse.dtype == cp.float32 and lse.flags.c_contiguous else cp.ascontiguousarray(lse, cp.float32)


def blhd_key(q, k, v, dtype_name: str, causal: bool, out=None, do=None, packed: bool = False) -> tuple:
    """The path key (kernels/paths.py) of a (B, L, H, D) pass on cuDNN: the forward's (out, do None)
    or the backward's; forward_blhd/backward_blhd choose under it and kernels/path_plans.py reads
    the choice back."""
    if out is None:
        return ("fwd_blhd", q.shape, k.shape, q.strides, k.strides, v.strides, dtype_name, bool(causal),
                q.data.device_id)
    return ("bwd_blhd", q.shape, k.shape, q.strides, k.strides, v.strides, out.strides, do.strides, dtype_name,
            bool(causal), q.data.device_id) + (("packed",) if packed else ())


def forward_blhd(q, k, v, scale: float, causal: bool, dtype_name: str):
    """(out (B, Lq, H, D), lse (B, H, Lq)) for (B, L, H, D) views read in place by cuDNN's flash
    forward, or None: the caller then runs forward() on (B, H, L, D) copies."""
    from . import cudnn
    return _cudnn_in_place("attention", blhd_key(q, k, v, dtype_name, causal), dtype_name, scale, (q, k, v),
                           lambda: cudnn.sdpa_forward(q, k, v, scale, causal, "blhd"))


def backward_blhd(do, q, k, v, out, lse, scale: float, causal: bool, dtype_name: str, packed: bool = False):
    """(dq, dk, dv) as C-contiguous (B, L, H, D) arrays from cuDNN's flash backward on (B, L, H, D)
    views, or None (see forward_blhd). lse: (B, H, Lq). packed (q, k, v of one shape): the thirds
    of one new (B, L, 3, H, D) array where its rows align (cudnn.packed_grads)."""
    from . import cudnn
    packed = bool(packed) and cudnn.packed_grad_ok(q)
    key = blhd_key(q, k, v, dtype_name, causal, out, do, packed)
    return _cudnn_in_place("attention_backward", key, dtype_name, scale, (q, k, v, out, do),
                           lambda: cudnn.sdpa_backward(do, q, k, v, out, _f32_contiguous(lse), scale, causal, "blhd",
                                                       packed=packed))


def forward_gqa(q, k, v, scale: float, causal: bool, dtype_name: str, need_lse: bool = True):
    """(out (B, H, Lq, D), lse (B, H, Lq)) of grouped-query attention for C-contiguous q (B, H, Lq, D)
    and k, v (B, Hkv, Lk, D) from cuDNN, which reads each shared head in place; None without cuDNN
    (the caller repeats the heads for the Triton kernels). need_lse=False: the inference graph,
    lse None."""
    from . import cudnn
    key = ("fwd_gqa", q.shape, k.shape, dtype_name, bool(causal), q.data.device_id)
    return _cudnn_in_place("attention", key, dtype_name, scale, (q, k, v),
                           lambda: cudnn.sdpa_forward(q, k, v, scale, causal, "bhsd", inference=not need_lse))


def backward_gqa(do, q, k, v, out, lse, scale: float, causal: bool, dtype_name: str):
    """(dq, dk, dv) of forward_gqa (dk, dv with k's Hkv heads, summed over each group by cuDNN), or
    None. lse: (B, H, Lq) float32."""
    from . import cudnn
    key = ("bwd_gqa", q.shape, k.shape, dtype_name, bool(causal), q.data.device_id)
    return _cudnn_in_place("attention_backward", key, dtype_name, scale, (q, k, v, out, do),
                           lambda: cudnn.sdpa_backward(do, q, k, v, out, lse, scale, causal, "bhsd"))


def _blhd_ok(*arrays) -> bool:
    """Every array's last axis contiguous and its other strides and address 16-byte aligned (what
    cuDNN's kernels load by), no empty axis."""
    for x in arrays:
        st = x.strides
        if x.size == 0 or st[3] != x.itemsize or x.data.ptr % 16 or any(s % 16 for s in st[:3]):
            return False
    return True


# float32 forwards under tf32x3 at head dims 33..128 (the split forward, attn_fwd's SPLIT): q split
# into TF32 parts and remainders once in registers, K's and V's tiles in the kernel, V transposed
# ahead (_transpose_v: the tensor cores take 32-bit operands only contiguous along the reduced axis),
# then three TF32 products each. Triton's own tf32x3 splits both operands of every product; at
# B4 H8 S2048 D128 on an H100 it took 2.305 ms where the split forward (K and V split ahead then)
# took 0.966 and torch's float32 SDPA 1.494 (2026-11-27, benchmarks/sweeps/attention_f32_variants.py).
# Split ahead into parts, K and V ran slower than split in the kernel, since the tiles pass through
# registers anyway and the kernel reads one array, not two (the sweep's --integrated --causal
# [--columns], H100, 2026-11-27): K at 09:20 UTC, 4x16x1024x128 0.495 ms in the kernel against
# 0.557, 4x8x2048x128 0.902 against 0.988; V at 10:44 UTC, 4x32x512x96 0.220 ms against 0.289 (torch
# 0.375), 2x16x2048x96 0.729 against 0.962 (torch 1.402), causal 0.507 against 0.599 (torch 0.817),
# 4x16x1024x112 0.479 against 0.530 (torch 0.783), 4x8x2048x128 0.902 against 0.918, causal 0.622
# against 0.645 (torch 0.900), its transpose pass 0.027 ms against the split pass's 0.040. V split in
# the kernel from its untransposed [keys, D] tiles (transposed on chip) ran slower than either:
# 0.722 ms at 4x16x1024x128 (09:30 UTC).
# (largest head dim, tiles, columns in two blocks) of the split forward, the first entry covering
# the head dim. Two blocks: 64 columns and the rest's power of two (at least 16, the products'
# least) instead of one of 128 (attn_fwd's BLOCK_D2), which skips padded columns and leaves room for
# more stages at head dims up to 80. 10:44 UTC: 1x16x2048x80 0.332 ms on 3 stages, 0.352 on 2 (torch
# 0.721), causal 0.295, 0.300 (torch 0.474); at 96, one stage: 4x32x512x96 0.220 against 0.241 on 2;
# at 112 and 128 one block of 128 ran even with two (4x16x1024x128 0.475 against 0.481, causal 0.357
# against 0.353). Earlier, V split ahead, 2 stages ran 1x16x2048x80 in 0.354 ms against 0.507 in one
# block of 128 on one (10:23 UTC). Other tiles at one block of 128: 128 x 64 stayed the fastest of
# 128 x 32 on 8 warps, 64 x 32 on 4 (2 stages), 64 x 64 and 64 x 128 on 4 (09:03 UTC); with two
# blocks at 96, of 128 x 32 on 2 stages and 64 x 64 on 4 or 8 warps, 2 stages (10:33 UTC); with V
# split in the kernel, 128 x 32 on 2 or 3 stages (which then fit) ran slower at 96 and 128: 11:15 UTC,
# 4x32x512x96 0.264 ms (3 stages) against 0.222, causal 0.216 against 0.183; 4x16x1024x128 0.592
# (one block) against 0.481, causal 0.455 (two blocks) against 0.352.
_SPLIT_TILES = ((64, {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}, False),
                (80, {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}, True),
                (96, {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 1}, True),
                (128, {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 1}, False))
# causal forwards at head dims 81..96 (lo, hi, tiles): 64 x 64 tiles on 4 warps, whose row blocks
# cross the diagonal on one key block, not two of which one is three quarters masked, and twice as
# many programs share out the launch. Longest first (CAUSAL_GROUP), on an H100 (2026-11-27,
# attention_f32_variants.py --integrated --causal --all-tiles, 12:08 UTC; --only-causal, 12:15 UTC;
# torch's float32 SDPA in brackets): 4x32x512x96 0.153 ms against 0.169 on 128 x 64 (0.252), its
# plain forward 0.222 against 0.218; 2x16x2048x96 0.408 against 0.431 (0.818). Past 96 they spilled
# (64 local loads in the sm_90 SASS at 128 against 29, scripts/attention_sass.py) and ran slower
# than 128 x 64: 4x16x1024x128 0.379 against 0.316 (0.480), 4x16x1024x112 0.374 against 0.304
# (0.485), 4x8x2048x128 0.673 against 0.532 (0.900), 4x32x512x128 0.229 against 0.207 (0.275),
# 1x8x4096x128 0.631 against 0.482 (0.990); 64 x 32 on 4 warps ran 0.209-0.586, 128 x 32 on 8
# 0.237-0.632, 64 x 64 on 2 stages slower than on one.
_SPLIT_CAUSAL_TILES = ((81, 96, {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1}),)
# past head dim 80, forwards whose 128-row blocks number fewer than the GPU's SMs (less than one
# wave, at one program an SM): 64 x 64 tiles on 4 warps, twice the programs. On an H100 (132 SMs,
# 2026-11-27 12:25 UTC, attention_f32_variants.py --integrated --causal --tiles; torch in brackets):
# 1x8x1024x128 (64 blocks) 0.081 ms against 0.115 on 128 x 64 (0.099), causal 0.081 against 0.118
# (0.097); 2x4x2048x96 (128 blocks) 0.191 against 0.193 (0.352); at 192 blocks (2x8x1536x128) they
# ran 0.367 against 0.345 (0.447). Each call behind an L2 flush (15:00 UTC, --cold), one part:
# 1x8x1024x128 0.092 against 0.124 (0.106), 1x16x512x128 0.054 against 0.071 (0.058); the usual
# tiles in parts then ran faster still (_parts_candidates). On 2 stages (asynchronous copies; more
# registers spill) no small-grid candidate ran faster than on one, in parts or not, V in place or
# copied (H100, 2026-11-28 07:21 UTC, the first call's path timings at B1 H16 S256 D80, B1 H16 S512
# D128 and B8 H8 S256 D128, plain and causal:
# history/attention/nvidia-h100-80gb-hbm3-attention-f32-small-grid-2-stages.json)
_SPLIT_SMALL_GRID_TILES = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1}


def _split_tiles(d: int, bias: bool = False, causal: bool = False, blocks: int | None = None,
                 sms: int | None = None, small: bool | None = None) -> dict:
    """The split float32 forward's tiles and flags at head dim d (33..128); bias: with a bias,
    whose tiles take a stage's shared memory too, on one stage (2 stages of 128 x 64 at head dim
    80 needed 249856 bytes with one on sm_90, Triton 3.6, V split ahead); causal: keys bounded
    above only (_SPLIT_CAUSAL_TILES where they cover d); blocks, sms: the launch's 128-row blocks
    (batch*heads times row blocks) and the GPU's SMs (_SPLIT_SMALL_GRID_TILES past head dim 80 where
    blocks < sms); small: _SPLIT_SMALL_GRID_TILES (True) or not (False) whatever blocks says."""
    tiles, two = next((t, two) for top, t, two in _SPLIT_TILES if d <= top)
    if causal:
        tiles = next((t for lo, hi, t in _SPLIT_CAUSAL_TILES if lo <= d <= hi), tiles)
    if small if small is not None else (d > 80 and _small_grid(blocks, sms)):
        tiles = _SPLIT_SMALL_GRID_TILES
    t = dict(tiles, SPLIT=True, **(column_blocks(d) if two else {}))
    if bias:
        t["num_stages"] = 1
    return t


def _small_grid(blocks: int | None, sms: int | None) -> bool:
    """Whether a split forward of `blocks` 128-row blocks is less than one wave on `sms` SMs."""
    return blocks is not None and sms is not None and blocks < sms


def column_blocks(d: int) -> dict:
    """attn_fwd's two column blocks for head dim d (65..128): 64 and the rest's power of two."""
    return {"BLOCK_D": 64, "BLOCK_D2": head_block(d - 64)}


# The head dims' powers of two (BLOCK_D) the split forward takes. At 64 it ran faster than Triton's
# own tf32x3 there (the sweep's --integrated --causal --columns, H100, 2026-11-27 10:52 UTC; torch's
# float32 SDPA in brackets): 8x16x1024x64 0.530 ms against 0.669 (1.040), causal 0.362 against 0.427
# (0.625); 16x8x512x64 0.155 against 0.179 (0.276); 2x16x4096x64 1.874 against 2.482 (3.961),
# causal 1.138 against 1.462 (2.281); 128 x 64 tiles on 8 warps and 3 stages, of 2 stages and
# 64 x 64 on 4 warps
SPLIT_BLOCK_DS = (64, 128)


# The split forward's O^T form (attn_fwd's OT: O^T += V^T P^T), which reads V as it comes instead of
# a transposed copy made first (_transpose_v); here in one column block (head dims 33..64 and
# 97..128), and offered in two on small grids (_parts_candidates).
# V_IN_PLACE None: causal forwards at head dims 97..128 on 128-row tiles; True or False: wherever
# one column block runs, or nowhere. On an H100 (2026-11-27; out within 1.2e-07 of the copy's):
# - the 14:00 UTC call (attention_f32_variants.py --integrated --causal --v-in-place, warm), O^T
#   against the copy on 128 x 64 tiles (8 warps, 1 stage), torch's float32 SDPA in brackets:
#   B4 H32 S512 D128 causal 0.184 ms against 0.205 (0.274), plain even (0.270, 0.271); B4 H8 S2048
#   D128 causal 0.510 against 0.532 (0.901), plain 0.922 against 0.880;
# - the 14:06 UTC call (attention_f32_shapes.py, the public API behind an L2 flush), x torch, with
#   it on these and on the 64 x 64 small-grid tiles, against the 13:53 call without it: B4 H32 S512
#   D128 causal 1.476 against 1.313, B4 H16 S1024 D128 causal 1.630 against 1.524 (the 12:21 call);
#   on 64 x 64 slower: B1 H8 S1024 D128 1.053 against 1.156 (causal, in 2 key parts, 1.531 against
#   1.624), B1 H16 S512 D128 1.003 against 1.043 (causal 1.105 against 1.154);
# - at head dim 64 on its 128 x 64 tiles (3 stages) it spilled (44 local loads in the sm_90 SASS
#   against 0) and ran B16 H8 S512 0.225 ms against 0.155; on 64 x 64 tiles (4 warps, 1 stage) it
#   ran causal forwards faster than the shipped 128 x 64 at short lengths, B16 H8 S512 0.092
#   against 0.114, B8 H16 S1024 0.286 against 0.330, not at B2 H16 S4096 (1.028 against 1.005),
#   and plain ones 0.145 against 0.155 at S512, 2.008 against 1.899 at S4096 (14:00 and 14:06 UTC).
# Offered in one part beside the copy to kernels/paths.py's timing (non-causal 128-row tiles at head
# dims 97..128), it was never chosen (the 18:24 UTC call, attention_f32_shapes.py, public API behind
# an L2 flush: B4 H32 S512 D128 1.489x torch, B4 H16 S1024 D128 1.624x, and the benchmark's
# B4 H8 S2048 D128 1.705x all on the copy) and was removed.
V_IN_PLACE: bool | None = None


def _v_in_place(tiles: dict, causal: bool = False) -> bool:
    """Whether the split forward with these tiles takes V in place (V_IN_PLACE); causal: keys
    bounded above only (_bounded_above)."""
    if V_IN_PLACE is not None:
        return V_IN_PLACE
    if "BLOCK_D2" in tiles:
        return False
    return causal and tiles.get("BLOCK_D") == 128 and tiles["BLOCK_M"] == 128


def _split_forward(cfg: dict, block_n, tiles) -> bool:
    """Whether this float32 forward takes the split-operand kernel (SPLIT): tf32x3 products, head
    dims 33..128, tiles not named by the caller."""
    return cfg.get("PREC") == "tf32x3" and cfg["BLOCK_D"] in SPLIT_BLOCK_DS and block_n is None and not tiles


def _transpose_v(v, block_d: int):
    """v transposed, [BH, D, Lk] (tf32_split without parts); block_d: head_dim's power of two. It
    runs at copy bandwidth: on an H100 (2026-11-27, the 14:13 UTC call, attention_f32_variants.py
    --transpose-tiles, behind an L2 flush) B4 H32 S512 D128 took 27.3 us against 27.2 for a copy of
    v's bytes, B2 H16 S2048 D64 15.1 against 15.8; of 64 or 128 rows a program on 4 or 8 warps, or
    32 on 8, none ran more than 0.7 us faster (64 rows on 8 warps at S2048: 14.4 us)."""
    cp = _cupy.cupy()
    bhk, lk, d = v.shape
    vt = cp.empty((bhk, d, lk), cp.float32)
    if v.size:
        _specialized("tf32_split", {"C": d, "BLOCK_L": 32, "BLOCK_C": block_d, "TRANS": True, "PARTS": False,
                                    "num_warps": 4})[(bhk, math.ceil(lk / 32))](v, vt, vt, lk)
    return vt


# Batch*heads a group of the causal forwards' longest-first program order (attn_fwd's LPT,
# _row_block); 0: the grid's own order. In the grid's order the launch ended on long row blocks
# (those of the last batch*heads) while other SMs idled; longest first over groups of 32 ran
# causal forwards faster on an H100 (2026-11-27 11:58 UTC, benchmarks/sweeps/attention_f32_variants.py
# --integrated --causal --order; grid order, then groups of 32, torch's float32 SDPA in brackets):
# 4x16x1024x128 0.353 ms, 0.314 (0.481); 4x16x1024x112 0.354, 0.301 (0.484); 1x16x2048x80 0.295,
# 0.194 (0.471); 8x16x1024x64 0.363, 0.331 (0.633); 4x8x2048x128 0.616, 0.528 (0.892); 4x32x512x96
# 0.181, 0.169 (0.250). Groups of 16 ran within 1% of 32, all batch*heads in one group up to 5%
# slower (4x32x512x96 0.177), groups of 8 up to 11% slower. Each batch*head's row blocks longest
# first in the grid's order (batch*heads one after another, so the launch still ended on one
# batch*head's long blocks) had run no faster (08:56 UTC, attention_f32_shapes.py with the order as
# an option, since removed): 4x16x1024x128 0.445 ms against 0.444, 2x16x4096x64 1.437 against 1.474,
# 1x16x2048x80 0.455 against 0.445.
CAUSAL_GROUP = 32


def _bounded_above(dlo: int, dhi: int) -> bool:
    """Whether key bounds (dlo, dhi) bound the keys above only (a causal mask, without a window's
    left side): each row block then sees more keys than the one before."""
    return dlo <= -_UNBOUNDED < dhi < _UNBOUNDED


def _order(dlo: int, dhi: int) -> int:
    """attn_fwd's LPT for a forward under key bounds (dlo, dhi): CAUSAL_GROUP for a causal mask
    (_bounded_above), else 0. The 16-bit and non-split float32 Triton forwards gained from it too
    (attention_causal_order.py, H100, 2026-11-27 12:07 UTC, grid order against groups of 32): bfloat16
    16x16x1024x64 0.131 ms against 0.128, 4x16x4096x128 0.640 against 0.599, 8x16x2048x64 0.208
    against 0.195 (cuDNN's 0.108, 0.473 and 0.179 still the faster); float32 8x8x1024x32 0.137
    against 0.113 (torch 0.308)."""
    return CAUSAL_GROUP if _bounded_above(dlo, dhi) else 0


# The Triton forward's key parts (attn_fwd's KSPLIT, merged by attn_fwd_combine). None: the split
# float32 forward offers kernels/paths.py the part count of kernels/attention_key_parts.py's model
# beside one part, where the model puts it faster (small grids, a last wave mostly empty, causal
# launches that end on their longest rows), and the timing there decides; an int: that many parts
# on every Triton forward (1: one part; the sweep's --key-splits,
# benchmarks/sweeps/attention_f32_variants.py --integrated, sets 2, 3 and 4 to time them).
# plan_forward's own launch (16-bit and non-split float32 forwards replayed) does not take them,
# nor does a launch of more batch*heads than one grid covers (grid dim y).
KEY_SPLITS: int | None = None
# Query rows a program of attn_fwd_combine merges. The launches that take parts are small grids, so
# the merge, latency-bound, wants many programs: on an H200 (2026-11-28, attention_f32_shapes.py
# --fwd-only, one process a source tree, history/attention/nvidia-h200-attention-f32-remainders-combine.json)
# 16 rows against 32 ran B1 H16 S256 D80 at 1.461x torch against 1.397x (causal 1.501x against
# 1.471x), B1 H16 S512 D128 1.223x against 1.207x; 8 rows against 16 B1 H16 S256 D80 causal 1.545x
# against 1.509x, B2 H8 S256 D96 causal 1.352x against 1.327x, the plain forwards within 0.4%.
COMBINE_ROWS = 8


def _forward_in_parts(inputs: tuple, out, lse, args: tuple, consts: dict, splits: int, kernel: str = "attn_fwd") -> bool:
    """`kernel` (attn_fwd, or attn_fwd_f16p) over `splits` parts of the keys into float32
    workspaces, then attn_fwd_combine into out and lse (KEY_SPLITS); inputs: the kernel's arrays
    before O, q first. False (nothing launched) without memory for the workspaces: splits (D + 1)
    float32 a query row.
    The parts merged inside attn_fwd instead, by each row block's last part to finish (counts per
    stream, no combine launch; commit 3b5b196), ran no faster on an H200 (2026-11-28 09:34 UTC,
    attention_f32_shapes.py --combine-kernel at 3b5b196: B1 H16 S256 D80 0.0232 ms against 0.0233, B1 H16
    S512 D128 0.0474 against 0.0476; history/attention/nvidia-h200-attention-f32-merge-in-kernel.json):
    the combine launch is not what keeps small float32 grids from 1.5x torch."""
    cp = _cupy.cupy()
    bh, lq, d = inputs[0].shape
    ws = _or_declined_for_memory(lambda: (cp.empty((splits, bh, lq, d), cp.float32),
                                          cp.empty((splits, bh, lq), cp.float32)),
                                 "attention:key-parts",
                                 "no memory for the forward's workspaces over parts of the keys: one part ran it")
    if ws is None:
        return False
    ow, lw = ws
    block = consts["BLOCK_M"]
    _launch(kernel, math.ceil(lq / block) * block * splits, block, (*inputs, ow, lw), args,
            dict(consts, KSPLIT=splits), bh0=True)
    combine = _specialized("attn_fwd_combine", {"D": d, "KSPLIT": splits, "BLOCK_M": COMBINE_ROWS,
                                                "BLOCK_D": head_block(d), "num_warps": 4, "num_stages": 1})
    combine[(math.ceil(lq / COMBINE_ROWS), bh)](ow, lw, out, lse, lq, bh)
    return True


def _triton_forward(q, k, v, scale, masks, dtype_name, block_n=None, tiles=None, groups=1, q_heads=1):
    cp = _cupy.cupy()
    bh, lq = q.shape[:2]
    out = cp.empty_like(q)
    lse = cp.empty((bh, lq), cp.float32)
    if bh == 0 or lq == 0:
        return out, lse
    return _triton_forward_launch(q, k, v, out, lse, scale, masks, dtype_name, block_n, tiles, groups, q_heads)


def triton_forward_blhd(q, k, v, scale, masks, dtype_name, block_n=None, groups=1):
    """(out (B, Lq, H, D) C-contiguous, lse (B, H, Lq) float32) of attention on (B, L, H, D) q and
    (B, Lk, H / groups, D) k, v read in place by the Triton forward (VARLEN's UNIFORM form): q's rows
    may be any number of elements apart, and k's and v's too (views of one packed (B, L, 3, H, D)
    projection, qkv[:, :, i]), each with unit stride along D and its heads D apart
    (blhd_readable); masks as forward()'s, but the float32 forward's split-operand and key-part
    forms (which take [BH, L, D] arrays) are not among its forms. Memory traffic: q, k, v read and
    out written once each (no transposed copies)."""
    cp = _cupy.cupy()
    b, lq, h, d = q.shape
    out = cp.empty((b, lq, h, d), q.dtype)
    lse = cp.empty((b, h, lq), cp.float32)
    if b * h == 0 or lq == 0:
        return out, lse
    _check_triton_head_dim(d)
    return _triton_forward_launch(q, k, v, out, lse, scale, masks, dtype_name, block_n, None, groups, h, blhd=True)


def blhd_readable(*arrays) -> bool:
    """Whether the Triton kernels read these (B, L, H, D) arrays in place (triton_forward_blhd): unit
    stride along D, heads D elements apart, batches L rows apart (rows: _row_stride), strides not
    negative and of whole elements."""
    for x in arrays:
        b, n, h, d = x.shape
        if min(x.strides) < 0 or any(st % x.itemsize for st in x.strides):   # (whole elements apart)
            return False
        sb, _, sh, sd = (st // x.itemsize for st in x.strides)
        if (d > 1 and sd != 1) or (h > 1 and sh != d) or (b > 1 and sb != n * _row_stride(x)):
            return False
    return True


def forward_blhd_in_place(q, k, v, scale: float, masks: Masks, dtype_name: str, block_n, copy):
    """(out (B, Lq, H, D), lse (B, H, Lq)) of the layout "blhd" forwards cuDNN's in-place graphs
    (forward_blhd) do not take: the Triton forward reading q, k, v in place (triton_forward_blhd),
    or copy() (the (B, H, L, D) path on transposed copies, which has the float32 forward's
    split-operand and key-part forms and cuDNN's bias and dropout graphs, all on [BH, L, D] arrays),
    whichever kernels/paths.py timed faster for the signature (a named key block, flash_attention's:
    the Triton forward). None where the Triton kernels cannot read the arrays in place
    (blhd_readable, k and v of one layout) or take the head dim, or where copy() draws the call's
    dropout from cuDNN's stream (_cudnn_stream): the caller runs copy()."""
    if not _in_place_ok(q, k, v, scale, masks, dtype_name, block_n is None):
        return None
    groups = q.shape[2] // k.shape[2]

    def in_place():
        from . import paths
        paths.ran("attention", "triton")
        return triton_forward_blhd(q, k, v, scale, masks, dtype_name, block_n, groups)
    if block_n is not None:
        return in_place()
    return _layout_choice("fwd", q, k, masks, dtype_name, False, in_place, copy)


def backward_blhd_in_place(do, q, k, v, out, lse, scale: float, masks: Masks, dtype_name: str, deterministic: bool,
                           finish, copy, packed: bool = False):
    """finish(dq, dk, dv, the bias's gradient or None) of triton_backward_blhd (do, out: (B, Lq, H, D),
    copied C-contiguous where they are not; lse (B, H, Lq); packed: dq, dk, dv the thirds of one
    (B, L, 3, H, D) array), or copy()'s result, as forward_blhd_in_place chooses; None where it
    declines."""
    if not _in_place_ok(q, k, v, scale, masks, dtype_name, True):
        return None
    groups = q.shape[2] // k.shape[2]

    def in_place():
        from . import paths
        from .transpose import contiguous   # (cudakit's permute: faster than CuPy's strided copy, and traced)
        paths.ran("attention_backward", "triton")
        r = triton_backward_blhd(contiguous(do), q, k, v, contiguous(out),
                                 contiguous(lse.astype(_cupy.cupy().float32, copy=False)), scale, masks, dtype_name,
                                 deterministic, groups, packed and groups == 1 and q.dtype == k.dtype == v.dtype)
        return finish(*r[:3], r[3] if len(r) > 3 else None)
    return _layout_choice("bwd", q, k, masks, dtype_name, (deterministic, packed), in_place, copy)


def _cudnn_stream(q, k, scale: float, masks: Masks, dtype_name: str) -> bool:
    """Whether the transposing path draws this (B, L, H, D) call's dropout from cuDNN's fused dropout
    (cudnn_dropout, on the (B H, L, D) form it passes: grouped-query k, v in place up to 65535
    batch*heads, repeated past that): the in-place kernels draw cudakit's stream, so such a call
    keeps that path in the forward and the backward alike (mixing the two streams between a forward
    and its backward would give wrong gradients; a function of the signature, as cudnn_dropout)."""
    if masks.dropout is None:
        return False
    b, lq, h, d = q.shape
    groups = h // k.shape[2]
    return cudnn_dropout(dtype_name, b * h, lq, k.shape[1], d, scale, masks, groups if b * h <= _MAX_GRID_Y else 1,
                         q.data.device_id)


def _in_place_ok(q, k, v, scale: float, masks: Masks, dtype_name: str, dropout_stream: bool) -> bool:
    """Whether the in-place kernels take this (B, L, H, D) call: they read the arrays in place (head
    dim within the Triton kernels', k and v of one layout, one row stride for both, each
    blhd_readable) and, with dropout_stream (every call but a forward at a named key block), the
    transposing path would not draw its dropout from cuDNN's stream (_cudnn_stream)."""
    return (q.shape[3] <= MAX_HEAD_DIM and k.strides == v.strides and blhd_readable(q, k, v)
            and not (dropout_stream and _cudnn_stream(q, k, scale, masks, dtype_name)))


def _layout_choice(kind: str, q, k, masks: Masks, dtype_name: str, flags, in_place, copy):
    """kernels/paths.py's choice ("attention_layout") between reading (B, L, H, D) arrays in place and
    the transposing path, per signature: shapes, row strides, masks, precision, the backward's
    flags (deterministic, qkv_packed), device. Without timing the first candidate runs: in place,
    but for float32 (the transposing path has its faster forms)."""
    from . import paths
    b, lq, h, d = q.shape
    bias = None if masks.bias is None else (tuple(n == 1 for n in masks.bias.shape), str(masks.bias.dtype),
                                            _unit_keys(masks.bias))
    key = (kind, b, h, k.shape[2], lq, k.shape[1], d, dtype_name, *_row_strides(q, k), masks.causal,
           masks.window, masks.lengths is not None, bias, masks.dropout is not None, flags,
           config.float32_precision() if dtype_name == "float32" else None, q.data.device_id)
    cands = [("in-place", in_place), ("copy", copy)]
    if dtype_name == "float32":
        cands.reverse()
    return paths.run("attention_layout", key, cands)


def _triton_forward_launch(q, k, v, out, lse, scale, masks, dtype_name, block_n, tiles, groups, q_heads,
                           blhd: bool = False):
    """_triton_forward's launches into out, lse; blhd: triton_forward_blhd's (its one form)."""
    cp = _cupy.cupy()
    bh, lq, d = (q.shape[0] * q.shape[2], q.shape[1], q.shape[3]) if blhd else q.shape
    lk = k.shape[1]
    cfg = dict(_config(dtype_name, d, block_n), **(tiles or {}))
    lens, err, dlo, dhi, heads = _mask_args(masks, lq, lk, lse)
    above = _bounded_above(dlo, dhi)   # (keys bounded above only: a causal mask)
    if groups > 1 or blhd:   # (UNIFORM: the batch and head of a bh come from the heads)
        heads = q_heads
    has_bias = masks.bias is not None
    b_args = _bias_args(masks, lse)
    shared = (lens, err, float(scale * math.log2(math.e)), lq, lk, dlo, dhi, heads, *b_args)
    geo = _uniform_args(lse, groups, q, k) if blhd else _NO_VARLEN(lse, groups)
    args = (*shared, *geo, *_drop_args(masks))
    consts = dict(cfg, D=d, HAS_LENS=masks.lengths is not None, POS_SCALE=scale > 0 and not has_bias,
                  HAS_BIAS=has_bias, BIAS_K1=b_args[4] == 1, VARLEN=blhd, DROPOUT=masks.dropout is not None,
                  LEFT=dlo > -_UNBOUNDED, LPT=_order(dlo, dhi), **({"UNIFORM": True} if blhd else {}))
    def plain():   # Triton's own products on V as it comes
        _launch("attn_fwd", lq, cfg["BLOCK_M"], (q, k, v, out, lse), args, consts, bh0=True,
                whole=bh if blhd else None)
        return out, lse
    if blhd:
        return plain()
    if not (_split_forward(cfg, block_n, tiles) and math.ceil(lk / 32) <= _MAX_GRID_Y):   # (the split's grid:
        splits = max(1, KEY_SPLITS) if KEY_SPLITS is not None and bh <= _MAX_GRID_Y else 1   # keys past 2M take
        if splits > 1 and _forward_in_parts((q, k, v), out, lse, args, consts, splits):      # Triton's own)
            return out, lse
        return plain()
    from ..runtime.device import get_device_info
    sms = get_device_info(q.data.device_id).multiprocessors
    first = _split_consts(consts, d, has_bias, above, bh * math.ceil(lq / 128), sms)

    def v_for(c):   # V as the launch reads it: in place (OT), or a transposed copy of its own, made by
        if c.get("OT"):   # each call as a real call makes it (kernels/paths.py times every candidate with it)
            return v
        try:
            return _transpose_v(v, cfg["BLOCK_D"])
        except (MemoryError, cp.cuda.memory.OutOfMemoryError) as e:
            raise _NoMemoryForCopy from e

    def one_part():
        _launch("attn_fwd", lq, first["BLOCK_M"], (q, k, v_for(first), out, lse), args, first, bh0=True)
        return out, lse

    def in_parts(c, splits):   # (one part: these tiles in one launch)
        def run():
            try:
                vv = v_for(c)
            except _NoMemoryForCopy:
                from . import paths
                paths.declined_for_now()
                return None
            if splits == 1:
                _launch("attn_fwd", lq, c["BLOCK_M"], (q, k, vv, out, lse), args, c, bh0=True)
                return out, lse
            return (out, lse) if _forward_in_parts((q, k, vv), out, lse, args, c, splits) else None
        return run
    try:
        if bh > _MAX_GRID_Y or KEY_SPLITS == 1:
            return one_part()
        if KEY_SPLITS is not None:
            return in_parts(first, max(1, KEY_SPLITS))() or one_part()
        offers = [(_offer_name("triton-", c, n, "-v-in-place" if c.get("OT") else ""), c, n)
                  for c, n in _parts_candidates(first, consts, d, has_bias, above, bh, lq, lk, dlo, dhi, sms)]
        cands = [("triton", one_part)] + [(name, in_parts(c, n)) for name, c, n in offers]
        if _f16_parts_offered():   # first: the choice without timing (CUDAKIT_AUTOTUNE=0, graph capture)
            cands = _f16_candidates(q, k, v, out, lse, (*shared, groups, *_drop_args(masks)), consts, bh, lq, lk,
                                    dlo, dhi, above, sms) + cands
        if len(cands) == 1:
            return one_part()
        from . import paths
        key = ("fwd-key-parts", bh, lq, lk, d, tuple(name for name, _ in cands), dlo, dhi,
               masks.lengths is not None, has_bias, masks.dropout is not None, groups, q.data.device_id)
        if consts["BIAS_K1"]:   # (the kernels' form for a bias of contiguous keys: timed apart)
            key += ("bias-k1",)
        return paths.run("attention", key, cands)
    except _NoMemoryForCopy:   # (V's transposed copy is v's bytes; other out-of-memory errors propagate)
        from .. import fallbacks
        fallbacks.note("attention:float32-split", "no memory for the float32 forward's transposed copy of v: "
                                                  "Triton's own tf32x3 products ran it")
        return plain()


# The float32 forward on float16 parts (_attention_f16p_triton.py): each operand row as a power-of-two
# scale times two float16 parts, three float16 products (tf32x3's split on operands half the size,
# at twice TF32's rate). Offered by default (CUDAKIT_ATTENTION_F16_PARTS=0 withdraws it; F16_PARTS
# True or False overrides the setting, for tests and sweeps) to kernels/paths.py before the TF32
# split forward's candidates (its one part on _F16_TILES the choice without timing). Its
# first form (P's and V's remainders unshifted) missed the float32 bound on a few output elements
# (4 of 147 float32 attention GPU tests, H200, 2026-11-28 13:39 UTC: rows that see few keys,
# elements far below their keys' largest); the remainders now come shifted by 2^11 (the kernel's
# docstring): with it every float32 attention GPU test passes with the parts offered (201, H200,
# 2026-11-28 17:13 UTC, pytest -m cuda tests/gpu/test_attention_gpu.py -k float32 with
# CUDAKIT_ATTENTION_F16_PARTS=1). Offered by default, K and V split in one launch, timed by the
# public call against torch's float32 SDPA (H200, 2026-11-28 17:32 UTC, scripts/
# gpu_check_attention_f32.sh parts, history/attention/
# nvidia-h200-attention-f32-f16-parts-one-split-launch.json) the parts won B4 H16 S4096 D128 at
# 3.11x (causal 2.98x), B1 H16 S512 D128 at 1.66x (1.52x), B8 H8 S256 D128 at 1.60x (1.44x) and
# B4 H8 S512 D64 at 2.44x (2.49x); with two split launches (17:25 UTC) those small grids ran
# 1.52x (1.39x) and 1.48x (1.35x). At head dims 80 and 96 on 16 heads of 256 the TF32 split in
# four key parts stayed faster (1.30-1.54x). The first form's figures, on an H200
# (2026-11-28 13:08 UTC, benchmarks/sweeps/attention_f32_f16split.py, the kernels' first form
# without masks, K's and V's split pass inside the timed call, history/attention/
# nvidia-h200-attention-f32-f16-parts.json; x torch's float32 SDPA) 128 x 64 tiles on 8 warps and
# 2 stages ran B4 H16 S1024 D128 at 2.260x against the TF32 split forward's 1.674x, B16 H16 S1024
# D64 3.476x against 1.958x, B4 H16 S4096 D128 2.594x against 1.730x, its largest error against
# float64 (relative to the output's largest magnitude) 1.9e-5 against the TF32 split's 3.8e-5
# there; on 3 stages they need 263688 bytes of shared memory at head dim 128 (232448 the limit).
# On small grids 64 x 64 on 4 warps and 2 stages ran B1 H16 S512 D128 at 1.246x (one part)
# against 1.218x (two parts, TF32), and 128 x 64 B8 H8 S256 D128 at 1.416x against 1.317x.
F16_PARTS: bool | None = None
_F16_TILES = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}
_F16_SMALL_GRID_TILES = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
# The small-grid tiles without the loop's second stage: 64 KiB of shared memory against 161 KiB, so
# two programs share an SM (their registers, 255 a thread at 4 warps with a few spills, allow two;
# sm_90, Triton 3.9, scripts/attention_sass.py), where the two-stage tiles hold one. Offered on
# small grids in one part and in the part count that fills two programs an SM (kp.filling_parts):
# the two-stage tiles in 4 key parts on B1 H16 S256 D80 took two waves and ran 0.0286 ms against
# 0.0227 in one part (H200, 2026-11-28 18:12 UTC, scripts/gpu_check_attention_f32.sh parts), while
# the TF32 split forward, two programs an SM, gained from the same parts (0.0205 ms against 0.0294).
# With them (18:21 UTC, the same script,
# history/attention/nvidia-h200-attention-f32-f16-parts-one-stage.json) B2 H8 S256 D96 in 4 parts
# ran 0.0216 ms, the fastest candidate (1.365x torch's float32 SDPA, was 1.305x on the TF32 split;
# 1.307x on the same path at 18:25 UTC: calls this short vary by about 5% from run to run),
# B1 H16 S256 D80 0.0214 against the TF32 split's 0.0198, B8 H8 S256 D128 no faster than 128 x 64.
_F16_FILL_TILES = dict(_F16_SMALL_GRID_TILES, num_stages=1)
_F16_SPLIT_ROWS = 32   # rows a program of f16_split_kv


def _f16_parts_offered() -> bool:
    """F16_PARTS where set, else CUDAKIT_ATTENTION_F16_PARTS."""
    if F16_PARTS is not None:
        return F16_PARTS
    from ..config import settings
    return settings().attention_f16_parts


def _f16_split_kv(k, v, dp: int) -> tuple:
    """(kh, kl, ks, vh, vl, vs): the float16 parts of k and v [R, L, D] float32 (f16_split_kv, one
    launch; V's remainders times 2^11): [R, L, dp] float16 parts (zeros past D) and [R, L] float32
    row scales, in two allocations. Memory traffic: 4 + 4 dp / D bytes an element of each."""
    cp = _cupy.cupy()
    r, n, d = k.shape
    parts, sc = cp.empty((4, r, n, dp), cp.float16), cp.empty((2, r, n), cp.float32)
    if k.size:
        _specialized("f16_split_kv", {"D": d, "DP": dp, "BLOCK_L": _F16_SPLIT_ROWS, "num_warps": 4})[
            (math.ceil(n / _F16_SPLIT_ROWS), r, 2)](k, v, parts[0], parts[1], sc[0], parts[2], parts[3], sc[1], n)
    return parts[0], parts[1], sc[0], parts[2], parts[3], sc[1]


def f16_even(dlo: int, dhi: int, lengths: bool, lq: int, lk: int, d: int, tiles: dict) -> bool:
    """attn_fwd_f16p's EVEN on these tiles: no key block needs a mask (no bound on the keys, no key
    lengths, Lk a multiple of the key tile), Lq a multiple of the row tile and head_dim its own
    power of two."""
    return (dlo <= -_UNBOUNDED and dhi >= _UNBOUNDED and not lengths and lk % tiles["BLOCK_N"] == 0
            and lq % tiles["BLOCK_M"] == 0 and d == head_block(d))


def _f16_candidates(q, k, v, out, lse, args: tuple, consts: dict, bh: int, lq: int, lk: int, dlo: int, dhi: int,
                    above: bool, sms: int) -> list:
    """[(name, fn)] of the float16-parts forward for _triton_forward's candidates: one part on
    _F16_TILES, on grids of less than one wave of its row blocks also _F16_SMALL_GRID_TILES and
    _F16_FILL_TILES, each also in the key-parts model's part count where it is over 1 (the fill
    tiles: kp.filling_parts'). args: attn_fwd_f16p's runtime arguments but BH0; consts: attn_fwd's
    constexprs (masks, bias, dropout, order)."""
    d = q.shape[2]
    dp = head_block(d)
    base = {n: consts[n] for n in ("HAS_LENS", "POS_SCALE", "HAS_BIAS", "BIAS_K1", "DROPOUT", "LEFT", "LPT")}
    small = _small_grid(math.ceil(lq / _F16_TILES["BLOCK_M"]) * bh, sms)
    offers = []
    for t in (_F16_TILES, _F16_SMALL_GRID_TILES, _F16_FILL_TILES) if small else (_F16_TILES,):
        c = dict(base, **t, D=d, DP=dp, EVEN=f16_even(dlo, dhi, base["HAS_LENS"], lq, lk, d, t))
        offers.append((c, 1))
        if t is _F16_FILL_TILES:
            n = kp.filling_parts(bh, lq, lk, dlo, dhi, t["BLOCK_M"], t["BLOCK_N"], sms)
        else:
            n = kp.key_parts(bh, lq, lk, dlo, dhi, t["BLOCK_M"], t["BLOCK_N"], sms, above)
        if n > 1:
            offers.append((c, n))

    def run(c, splits):
        def go():
            parts = _or_declined_for_memory(lambda: _f16_split_kv(k, v, dp),
                                            "attention:float32-f16-parts", "no memory for the float32 "
                                            "forward's float16 parts of k and v: the TF32 split forward ran it")
            if parts is None:
                return None
            if splits == 1:
                _launch("attn_fwd_f16p", lq, c["BLOCK_M"], (q, *parts, out, lse), args, c, bh0=True)
                return out, lse
            return (out, lse) if _forward_in_parts((q, *parts), out, lse, args, c, splits, "attn_fwd_f16p") else None
        return go
    return [(_offer_name("f16-parts-", c, n, "-one-stage" if c["num_stages"] == 1 else ""), run(c, n))
            for c, n in offers]


def _offer_name(prefix: str, c: dict, splits: int, suffix: str = "") -> str:
    """A float32 forward candidate's name for kernels/paths.py (and its key on disk): prefix, the
    key parts where over 1, the tiles."""
    return f"{prefix}{f'keys-in-{splits}-parts-' if splits > 1 else ''}on-{c['BLOCK_M']}x{c['BLOCK_N']}{suffix}"


class _NoMemoryForCopy(Exception):
    """No memory for the split forward's transposed copy of V (_transpose_v): one part then runs
    Triton's own tf32x3 products on V as it comes; the key-parts candidates decline."""


def _split_consts(consts: dict, d: int, bias: bool, above: bool, blocks: int | None = None,
                  sms: int | None = None, small: bool | None = None) -> dict:
    """attn_fwd's constexprs for the split float32 forward on _split_tiles's tiles (blocks, sms,
    small: its small-grid tiles where they apply), with V in place (OT) where _v_in_place takes it."""
    c = dict(consts, **_split_tiles(d, bias, above, blocks, sms, small))
    return _with_v_in_place(c) if _v_in_place(c, above) else c


# stages of the O^T form in two column blocks: at head dim 80, 128 x 64 tiles needed 294912 bytes of
# shared memory on 3 stages and 253952 on 2 (sm_90, Triton 3.6; the limit is 232448)
_OT_TWO_BLOCK_STAGES = 1


def _with_v_in_place(c: dict) -> dict:
    """The split forward's constexprs c with V read in place (OT)."""
    t = dict(c, OT=True)
    if c.get("BLOCK_D2"):   # (0: one column block)
        t["num_stages"] = min(c["num_stages"], _OT_TWO_BLOCK_STAGES)
    return t


def _parts_candidates(first: dict, consts: dict, d: int, bias: bool, above: bool, bh: int, lq: int, lk: int,
                      dlo: int, dhi: int, sms: int) -> list[tuple[dict, int]]:
    """[(constexprs, part count)] the split forward offers kernels/paths.py beside `first` in one
    part: on a grid of less than one wave of 128-row blocks, the other of the usual and the
    small-grid tiles (_SPLIT_SMALL_GRID_TILES) in one part; and either tiling in the part count
    of the key-parts model where it is over 1.
    Small grids, in one part, on an H100 (2026-11-27 20:57 UTC, attention_f32_variants.py
    --integrated --causal --cold --tiles ..., torch's float32 SDPA in brackets): the usual 128 x 64
    ran B8 H8 S256 D128 in 0.050 ms against 0.062 on the small-grid 64 x 64 (0.061), B2 H16 S512
    D128 0.077 against 0.098 (0.109), causal the small-grid tiles the faster (0.050 against 0.055;
    0.068 against 0.082); at head dim 64 the small-grid tiles ran B1 H32 S256 in 0.025 ms against
    0.029 on 128 x 64 (0.036), causal 0.024 against 0.029. In parts, on an H100 (15:00 UTC,
    --key-splits --tiles ...): B1 H8 S1024 D128 on 128 x 64 tiles in 2 parts 0.079 ms against
    0.092 on the small-grid 64 x 64 in one and 0.100 in 2 (0.106), causal in 3 parts 0.064 against
    0.089 and 0.067 (0.107); B1 H16 S512 D128 in 2 parts 0.051 against 0.054 and 0.063 (0.058),
    causal in 3 parts 0.049 against 0.053 and 0.049 (0.057). Of 64 x 32 and 64 x 16 tiles (two
    programs an SM), in parts or not, none ran faster than both but B1 H16 S512 D128 causal in 3
    parts on 64 x 32, 0.046 ms; on 64 x 64 tiles 8 warps ran slower than 4 at every small grid
    timed at 20:57 UTC (B8 H8 S256 D128 0.084 ms against 0.062). On an H200 (2026-11-28 10:53-10:55
    UTC, history/attention/nvidia-h200-attention-f32-d128-small-grid-tiles.json) 64 x 32 again ran
    faster than none of these at B8 H8 S256 D128 and B1 H16 S512 D128, plain or causal, in parts
    or not, V copied or in place. A materialised forward (the scores and the softmax's per-tile
    partials to a workspace, then O as a long-K product; commit ac55303, reverted) ran slower than
    these on every small grid and its every tiling (H200, 2026-11-28 13:00 UTC: B1 H16 S512 D128
    0.0647 ms against 0.0475, B8 H8 S256 D128 0.0659 against 0.0459;
    history/attention/nvidia-h200-attention-f32-materialized-forward.json): its tf32x3 products
    ran no faster than the flash kernels', so more programs bought nothing."""
    def tiles(c):
        return c["BLOCK_M"], c["BLOCK_N"], c["num_warps"], c["num_stages"]
    out = []
    tilings = [first]
    small_grid = _small_grid(bh * math.ceil(lq / 128), sms)
    if small_grid:
        small = tiles(first) == tiles(_SPLIT_SMALL_GRID_TILES)
        other = _split_consts(consts, d, bias, above, small=not small)
        if tiles(other) != tiles(first):
            tilings.append(other)
            out.append((other, 1))
    for c in tilings:
        n = kp.key_parts(bh, lq, lk, dlo, dhi, c["BLOCK_M"], c["BLOCK_N"], sms, above)
        if n > 1:
            out.append((c, n))
    # head dims in two column blocks (65..96) on small grids: the small-grid tiles also in the part
    # count that puts two programs on each SM (kp.filling_parts), which the model above does not count
    c = next((t for t in tilings if tiles(t) == tiles(_SPLIT_SMALL_GRID_TILES)), None)
    if "BLOCK_D2" in first and c is not None and small_grid:
        n = kp.filling_parts(bh, lq, lk, dlo, dhi, c["BLOCK_M"], c["BLOCK_N"], sms)
        if n > 1 and (c, n) not in out:
            out.append((c, n))
    # 128-row tiles in one column block that take V's transposed copy are offered with V in place
    # too (the O^T form): no copy pass before the launch, against slower products; timed beside it.
    # On an H100 (2026-11-27 17:40 UTC, attention_f32_shapes.py, public API behind an L2 flush, x
    # torch's float32 SDPA) the timing took it for B1 H16 S512 D128, 1.165x (1.128x at 15:10 with the
    # copy), and for the causal B1 H8 S1024 D128 in 3 parts, 1.751x (1.609x); the copy stayed for
    # B1 H8 S1024 D128, 1.365x. The small-grid 64 x 64 tiles are offered with V in place too at head
    # dims up to 64 (BLOCK_D 64), where they ran faster than on the copy; at 128 they ran slower
    # (2026-11-28 03:13 UTC, attention_f32_variants.py --integrated --causal --cold --v-in-place,
    # torch's float32 SDPA in brackets): B1 H32 S256 D64 0.021 ms against 0.024 (0.036), causal
    # 0.021 against 0.024 (0.036); B1 H16 S512 D128 0.057 against 0.054 (0.057)
    # Head dims in two column blocks (65..96; BLOCK_D 64) are offered with V in place too, `first` in
    # one part among them: on a small grid V's copy is a launch of its own before the forward
    # (1.7 us of device time at B1 H16 S256 D80 beside the forward's 11.8, 2026-11-28 01:52 UTC,
    # history/attention/nvidia-h100-80gb-hbm3-attention-f32-kernels.json).
    two = [(first, 1)] if "BLOCK_D2" in first and small_grid else []
    out += [(_with_v_in_place(c), n) for c, n in list(out) + two
            if (c["BLOCK_M"] == 128 or c["BLOCK_D"] <= 64) and not c.get("OT")]
    return out


def backward(do, q, k, v, out, lse, scale: float, causal: bool, dtype_name: str, tiles=None,
             masks: Masks | None = None, deterministic: bool = False, groups: int = 1, q_heads: int = 1):
    """(dq, dk, dv), and the bias's gradient as a fourth with a bias (masks.bias; float32 or the
    bias's dtype, its 4-D shape), of attention for dL/dout = do; lse as forward returned it (either path's: both
    are the natural-log log-sum-exp of the scaled scores). cuDNN's flash backward or the Triton
    kernels, chosen as forward() is; masks as forward's; deterministic: bitwise the same on every
    run, the Triton kernels (no atomics) or, with cuDNN's dropout (cudnn_dropout), cuDNN's
    deterministic algorithm. tiles: a pair of dicts overriding the Triton dK/dV
    and dQ kernels' tile sizes and options. groups > 1: k, v as forward's; dk, dv come back either
    per q head, [BH, Lk, D], for the caller to sum over each group (the flash kernels), or like
    k, v, summed (the materialised kernels): the caller tells them apart by their size.
    FLOPs: 10 BH Lq Lk D (8 without recomputing the scores)."""
    bh, lq, d = q.shape
    masks = Masks(causal) if masks is None else masks
    if tiles is None and cudnn_dropout(dtype_name, bh, lq, k.shape[1], d, scale, masks, groups, q.data.device_id):
        return _cudnn_dropout_backward(do, q, k, v, out, lse, scale, masks, dtype_name, deterministic)
    if tiles is None and _materialized_candidate(dtype_name, d, masks, bh, lq, k.shape[1]):
        from . import paths
        key = _f32_bwd_key(bh, lq, k.shape[1], d, causal, masks.window, q.data.device_id, groups,
                           masks.lengths is not None, masks.bias, deterministic, masks.dropout is not None)
        return paths.run("attention_backward", key, [
            ("materialized", lambda: _materialized_backward(do, q, k, v, out, lse, scale, masks, groups,
                                                            deterministic)),
            ("triton", lambda: _triton_backward(do, q, k, v, out, lse, scale, masks, dtype_name, None,
                                                deterministic, groups, q_heads))])
    if tiles is None and not deterministic and cudnn_bias(dtype_name, d, scale, masks, bh, lq, k.shape[1], groups):
        from . import paths
        key = bias_path_key("bwd", bh, lq, k.shape[1], d, dtype_name, causal, q.data.device_id, masks.bias, groups)
        cands = [("cudnn", lambda: _cudnn_bias_backward(do, q, k, v, out, lse, scale, masks))]
        if d <= MAX_HEAD_DIM:
            cands.append(("triton", lambda: _triton_backward(do, q, k, v, out, lse, scale, masks, dtype_name, None,
                                                             False, groups, q_heads)))
        return _only_cudnn_beyond(d, paths.run("attention_backward", key, cands))
    if tiles is None and not deterministic and bh * lq * k.shape[1] and masks.plain and groups == 1 \
            and _cudnn_candidate(dtype_name, d, scale):
        from . import cudnn, paths
        key = _path_key("bwd", bh, lq, k.shape[1], d, dtype_name, causal, q.data.device_id)
        cands = [("cudnn", lambda: cudnn.sdpa_backward(do, q, k, v, out, lse, scale, causal))]
        if d <= MAX_HEAD_DIM:
            cands.append(("triton", lambda: _triton_backward(do, q, k, v, out, lse, scale, masks, dtype_name)))
        return _only_cudnn_beyond(d, paths.run("attention_backward", key, cands))
    _check_triton_head_dim(d)
    from . import paths
    paths.ran("attention_backward", "triton")
    return _triton_backward(do, q, k, v, out, lse, scale, masks, dtype_name, tiles, deterministic, groups, q_heads)


def _materialized_candidate(dtype_name: str, d: int, masks: Masks, bh: int, lq: int, lk: int) -> bool:
    """The float32 backward of [BH, Lq, D] q and Lk keys may take the materialised kernels
    (kernels/attention_materialized.py): not an empty one (it launches nothing)."""
    if dtype_name != "float32" or bh * lq * lk == 0:
        return False
    from . import attention_materialized as am
    return am.eligible(d, config.float32_precision(), masks)


def _f32_bwd_key(bh: int, lq: int, lk: int, d: int, causal: bool, window, device: int, groups: int = 1,
                 lengths: bool = False, bias=None, deterministic: bool = False, dropout: bool = False) -> tuple:
    """The signature the float32 backward's path (materialised or flash) is chosen under: the
    precision, the window (which decides how much of the workspace is computed), grouped k, v
    (("groups", G)), key lengths (("lengths",)), dropout (("dropout",)) and a bias (("bias", the
    dims it broadcasts, its dtype, deterministic): how its gradient is summed; "k1" or "strided":
    whether its keys are contiguous, the kernels' BIAS_K1 form) in it, the last four only where they
    are."""
    key = _path_key("bwd", bh, lq, lk, d, f"float32-{config.float32_precision()}", causal, device)
    key = key if window is None else key + (tuple(window),)
    key = key if groups == 1 else key + (("groups", groups),)
    key = key + (("lengths",),) if lengths else key
    key = key + (("dropout",),) if dropout else key
    if bias is None:
        return key
    return key + (("bias", tuple(n == 1 for n in bias.shape), str(bias.dtype), bool(deterministic),
                   "k1" if _unit_keys(bias) else "strided"),)


def _materialized_backward(do, q, k, v, out, lse, scale, masks: Masks, groups: int = 1, deterministic: bool = False):
    """(dq, dk, dv), and the bias's gradient as a fourth with a bias, by the materialised kernels
    (dk, dv as attention_materialized.run returns them), or None (declined: one group of heads'
    workspace past the budget; or no memory for it, noted in cudakit.fallbacks and, being a passing
    reason, keeping a choice timed without this path off the disk: paths.declined_for_now)."""
    cp = _cupy.cupy()
    from . import attention_materialized as am
    dlo, dhi = key_bounds(q.shape[1], k.shape[1], masks.causal, masks.window)
    arrays = [cp.ascontiguousarray(x) for x in (do, q, k, v, out)] + [_f32_contiguous(lse)]

    def run():   # (its buffers and the workspace: an out-of-memory declines, _or_declined_for_memory)
        bias, bias_grad, db, finish = masks.bias, None, None, None
        if bias is not None:   # (the buffer zeroed: tiles no row sees add nothing to it)
            dbq, dbk = bias.shape[2] > 1, bias.shape[3] > 1
            bh, lq, lk = q.shape[0], q.shape[1], k.shape[1]
            # stored, one writer an element; the score kernel's row or key sums as per-tile partials,
            # summed after, where the bias broadcasts its rows or keys; else summed from the workspace
            # (deterministic) where whole score tiles are summed, or where asked to be deterministic;
            # else (a bias broadcast over batch or heads alone) added atomically
            sc = am.score_tiles(am.head_block(q.shape[2]))
            blocks = (am.padded(lq) // sc["BLOCK_M"], am.padded(lk) // sc["BLOCK_N"])
            if _unbroadcast(bias, bh, lq, lk):
                mode = 1
            elif _partial_bias(masks, bh, lq, lk, *blocks, False):   # (deterministic past the bound: mode 3)
                mode = 4
            else:
                mode = 3 if deterministic or (dbq and dbk) else 2
            if mode == 4:
                db, st, finish = _bias_partials(masks, bh, lq, lk, *blocks)
            else:
                db, _ = _bias_grad_buffer(masks, bh, lq, lk, False)
                st, finish = _strides(db), None
            bias, bias_grad = (bias, *_strides(bias), masks.bias_heads), (db, *st, mode, dbq, dbk)
        from ..runtime.device import get_device_info
        r = am.run(*arrays, float(scale), dlo, dhi, empty=lambda shape: cp.empty(shape, cp.float32),
                   launch=lambda name, grid, args, consts: _specialized(name, consts)[grid](*args),
                   sms=get_device_info(q.data.device_id).multiprocessors, groups=groups,
                   lengths=masks.lengths, heads=masks.heads, bias=bias, bias_grad=bias_grad,
                   dropout=None if masks.dropout is None else _drop_args(masks))
        if r is None or db is None:
            return r
        return (*r, db if finish is None else finish(db))
    return _or_declined_for_memory(run, "attention:float32-materialized",
                                   "no memory for the float32 backward's workspace: the flash kernels ran it")


def _triton_backward(do, q, k, v, out, lse, scale, masks, dtype_name, tiles=None, deterministic=False, groups=1,
                     q_heads=1, blhd: bool = False, packed: bool = False):
    """(dq, dk, dv), and the bias's gradient (the bias's 4-D shape) as a fourth with a bias.
    blhd, packed: triton_backward_blhd's arrays and results."""
    cp = _cupy.cupy()
    grads = 0   # (blhd: the gradients' row stride, 0 for C-contiguous ones)
    if blhd:
        b, lq, q_heads, d = q.shape
        bh, lk = b * q_heads, k.shape[1]
        if packed:   # the thirds of one (B, L, 3, H, D) array, rows 3 H D elements apart
            dqkv = cp.empty((b, lq, 3, q_heads, d), q.dtype)
            dq, dk, dv = dqkv[:, :, 0], dqkv[:, :, 1], dqkv[:, :, 2]
            grads = 3 * q_heads * d
        else:
            dq = cp.empty((b, lq, q_heads, d), q.dtype)
            dk, dv = cp.empty((b, lk, q_heads, d), k.dtype), cp.empty((b, lk, q_heads, d), v.dtype)   # per q head
    else:
        bh, lq, d = q.shape
        lk = k.shape[1]
        dq = cp.empty_like(q)
        dk, dv = cp.empty((bh, lk, d), k.dtype), cp.empty((bh, lk, d), v.dtype)   # per q head
    bias = masks.bias
    cfg = _config(dtype_name, d, None)
    kv, qc = _backward_configs(dtype_name, cfg)
    if tiles is not None:
        kv, qc = dict(kv, **tiles[0]), dict(qc, **tiles[1])
    db, full, finish = None, None, None
    blocks = (math.ceil(lq / qc["BLOCK_M"]), math.ceil(lk / qc["BLOCK_N"]))   # the dQ kernel's tiles
    if bias is not None and not _unbroadcast(bias, bh, lq, lk) and bh * lq * lk \
            and _partial_bias(masks, bh, lq, lk, *blocks, deterministic):
        db, db_st, finish = _bias_partials(masks, bh, lq, lk, *blocks)
    else:
        db, full = _bias_grad_buffer(masks, bh, lq, lk, deterministic or _full_bias(masks, bh, lq, lk))
    if bh == 0 or lk == 0 or lq == 0:
        if lq == 0:  # no query attends: the key and value gradients are zero
            dk.fill(0)
            dv.fill(0)
        return (dq, dk, dv) if bias is None else (dq, dk, dv, zeros(bias.shape, cp.float32) if db is None else db)
    delta = cp.empty((bh, lq), cp.float32)
    whole = bh if blhd else None   # (UNIFORM: arrays passed whole, each slice told its first bh)
    uni = {"VARLEN": True, "UNIFORM": True} if blhd else {"VARLEN": False}
    _launch("attn_bwd_delta", lq, 64, (out, do, delta), (lq, q_heads) if blhd else (lq, 1, 0),
            {"D": d, "BLOCK_M": 64, "BLOCK_D": cfg["BLOCK_D"], "num_warps": 4, **({"UNIFORM": True} if blhd else {})},
            whole=whole)
    lens, _, dlo, dhi, heads = _mask_args(masks, lq, lk, delta)
    if groups > 1 or blhd:
        heads = q_heads
    b_args = _bias_args(masks, delta)
    scalars = (lens, float(scale * math.log2(math.e)), float(scale), lq, lk, dlo, dhi, heads, *b_args)
    novar = (_uniform_args(delta, groups, q, k, grads) if blhd else _NO_VARLEN(delta, groups)) + _drop_args(masks)
    drop = masks.dropout is not None
    has = masks.lengths is not None
    k1 = b_args[4] == 1   # BIAS_K1 (_unit_keys)
    _launch("attn_bwd_dkdv", lk, kv["BLOCK_N"], (q, k, v, do, lse, delta, dk, dv), scalars + novar,
            dict(kv, D=d, HAS_LENS=has, EVEN_Q=lq % kv["BLOCK_M"] == 0, HAS_BIAS=bias is not None,
                 BIAS_K1=k1, DROPOUT=drop, **uni), bh0=True, whole=whole)
    if bias is None:
        db_args, db_consts = (delta, 0, 0, 0, 0), {"HAS_BIAS": False, "DB_MODE": 0, "DBQ": True, "DBK": True}
    else:
        target = full if full is not None else db
        if finish is not None:   # per-tile partials, summed below
            mode, st = 4, db_st
        else:
            mode = 1 if full is not None or _unbroadcast(bias, bh, lq, lk) else 2
            st = _strides(target) if full is None else (masks.bias_heads * lq * lk, lq * lk, lk, 1)
        db_args = (target, *st)
        db_consts = {"HAS_BIAS": True, "DB_MODE": mode, "DBQ": bias.shape[2] > 1 or full is not None,
                     "DBK": bias.shape[3] > 1 or full is not None, "BIAS_K1": k1,
                     "DB_K1": mode in (1, 2) and st[3] == 1}
    _launch("attn_bwd_dq", lq, qc["BLOCK_M"], (q, k, v, do, lse, delta, dq), scalars + db_args + novar,
            dict(qc, D=d, HAS_LENS=has, DROPOUT=drop, **db_consts, **uni), bh0=True, whole=whole)
    if full is not None:   # deterministic: the per-entry gradients summed over the dims the bias broadcasts
        axes = tuple(i for i in range(4) if bias.shape[i] == 1 and full.shape[i] > 1)
        # (cudakit's reduction, no atomics: its launches are traced, where CuPy's sum refused the trace)
        db = reduction.reduce(full, "sum", axes).reshape(bias.shape) if axes else full
    if finish is not None:
        db = finish(db)
    return (dq, dk, dv) if bias is None else (dq, dk, dv, db)


def triton_backward_blhd(do, q, k, v, out, lse, scale, masks, dtype_name, deterministic=False, groups=1,
                         packed: bool = False):
    """(dq (B, Lq, H, D), dk, dv (B, Lk, H, D): each q head's share, which the caller sums over each
    group of groups > 1), and the bias's gradient as a fourth with a bias, of triton_forward_blhd
    for dL/dout = do: q, k, v read in place as it reads them (blhd_readable), do and out
    C-contiguous (B, Lq, H, D), lse (B, H, Lq) float32 C-contiguous; the Triton kernels (no atomics
    but for a bias's gradient, which deterministic sums as backward() does). packed (q, k, v of one
    shape and dtype, groups 1): dq, dk, dv written as the thirds of one new C-contiguous (B, L, 3,
    H, D) array (attention_backward's qkv_packed, no copy into it after). FLOPs 10 B H Lq Lk D."""
    _check_triton_head_dim(q.shape[3])
    return _triton_backward(do, q, k, v, out, lse, scale, masks, dtype_name, None, deterministic, groups,
                            blhd=True, packed=packed)


def _unbroadcast(bias, bh: int, lq: int, lk: int) -> bool:
    """Whether the bias has an element per score (no dim broadcast): its gradient then has one
    writer per element."""
    return bias.shape[0] * bias.shape[1] == bh and bias.shape[2] == lq and bias.shape[3] == lk


# the partials' workspace a bias gradient may take without being asked to be deterministic: past it
# the sums are added by atomics into a buffer of the bias's size (at 64 MiB the backward's device
# time is far past the host time a traced plan saves, the reason for partials there; the workspace
# grows as Lq Lk / block: 4.3 GB at B4 H32 S32768 in bfloat16, where the atomics' buffer is 0.5 MB)
PARTIALS_MAX_BYTES = 64 << 20


def _partial_bias(masks: Masks, bh: int, lq: int, lk: int, nr: int, nk: int, always: bool) -> bool:
    """Whether the bias's gradient is summed from per-tile partials (the kernels' DB_MODE 4, kernels
    of nr row blocks and nk key blocks): a bias broadcast over its rows or its keys (a padding bias
    (B, 1, 1, Lk), ...), whose sums atomics would otherwise add in no fixed order (a traced plan,
    which checks its replay bitwise, is then refused), where its workspace takes at most
    PARTIALS_MAX_BYTES or `always` (deterministic, where the alternative is larger)."""
    b = masks.bias
    if not (b.shape[2] == 1 or b.shape[3] == 1):
        return False
    shape = _partials_layout(b.shape, masks.bias_heads, bh, lq, lk, nr, nk)[0]
    return always or 4 * math.prod(shape) <= PARTIALS_MAX_BYTES


def _partials_layout(bias_shape, bias_heads: int, bh: int, lq: int, lk: int, nr: int, nk: int):
    """(the workspace's shape [BH, R, C], its strides for the kernels (a bh's, 0, a row block's, a
    key block's), its 4-D view [BH / bias_heads, bias_heads, R, C], the axes of that view summed
    into the gradient) of a bias of 4-D shape bias_shape summed from per-tile partials
    (_partial_bias) by kernels of nr row blocks and nk key blocks: [BH, nr, Lk] where the bias has a
    key dim, [BH, nk, Lq] where it has a row dim, [BH, nr, nk] where neither."""
    dbq, dbk = bias_shape[2] > 1, bias_shape[3] > 1
    r, c = (nr, lk) if dbk else (nk, lq) if dbq else (nr, nk)
    strides = (r * c, 0, c, 0) if dbk else (r * c, 0, 0, c) if dbq else (r * c, 0, c, 1)
    view = (bh // bias_heads, bias_heads, r, c)
    axes = tuple(i for i in (0, 1) if bias_shape[i] == 1 and view[i] > 1) + ((2,) if dbq or dbk else (2, 3))
    return (bh, r, c), strides, view, axes


def _full_bias(masks: Masks, bh: int, lq: int, lk: int) -> bool:
    """Whether a bias broadcast over batch or heads alone (ALiBi's (1, H, Lq, Lk), a shared
    (Lq, Lk) mask) has its gradient stored per score and summed over the broadcast dims by
    cudakit's reduction, as a deterministic backward does, rather than added by atomics: where that
    float32 buffer takes at most PARTIALS_MAX_BYTES (the reason and bound of _partial_bias: atomics
    in no fixed order refuse a traced plan, which checks its replay bitwise)."""
    b = masks.bias
    return b is not None and b.shape[2] > 1 and b.shape[3] > 1 and 4 * bh * lq * lk <= PARTIALS_MAX_BYTES


def _bias_partials(masks: Masks, bh: int, lq: int, lk: int, nr: int, nk: int):
    """(workspace, its strides, finish) of a bias gradient summed from per-tile partials
    (_partial_bias, _partials_layout), the workspace zeroed (tiles no row sees add nothing).
    finish(workspace) -> the gradient in the bias's 4-D shape, float32: the partials summed over
    the tiles and the batches and heads the bias broadcasts, by cudakit's reduction (no atomics:
    bitwise the same every run, and its launches are traced)."""
    cp = _cupy.cupy()
    b = masks.bias
    shape, strides, view, axes = _partials_layout(b.shape, masks.bias_heads, bh, lq, lk, nr, nk)
    return (zeros(shape, cp.float32), strides,
            lambda w: reduction.reduce(w.reshape(view), "sum", axes).reshape(b.shape))


def _bias_grad_buffer(masks: Masks, bh: int, lq: int, lk: int, per_score: bool):
    """(the bias gradient's buffer, zeroed: the bias's 4-D shape, in its dtype where each element
    has one writer and float32 where atomics sum into it; with per_score, the full per-score
    float32 buffer [bh / HB, HB, Lq, Lk] the backward stores into before summing over the broadcast
    dims (a deterministic backward, or _full_bias), else None). (None, None) without a bias."""
    cp = _cupy.cupy()
    b = masks.bias
    if b is None:
        return None, None
    if _unbroadcast(b, bh, lq, lk):
        return zeros(b.shape, b.dtype), None
    if per_score:
        return None, zeros((bh // masks.bias_heads, masks.bias_heads, lq, lk), cp.float32)
    return zeros(b.shape, cp.float32), None


# ---- packed variable-length sequences ------------------------------------------------------------
def _cudnn_varlen(q, k, cu_q, cu_k, window, scale: float, dtype_name: str) -> bool:
    """cuDNN's ragged graphs may take this varlen call: the same sequences for q and k (cu_k is
    cu_q: the caller resolved equal host arrays to one), no window, equal packed totals, and what
    cuDNN's dense attention takes (kernels/cudnn_varlen.py says why the first two)."""
    return (cu_k is cu_q and window is None and q.shape[0] == k.shape[0]
            and _cudnn_candidate(dtype_name, q.shape[2], scale))


def forward_varlen(q, k, v, cu_q, cu_k, max_q: int, max_k: int, scale: float, causal: bool, dtype_name: str,
                   window=None, dropout=None):
    """(out (total_q, H, D), lse (total_q, H) float32) of attention over packed sequences: sequence
    b is rows cu_q[b]..cu_q[b + 1] of q (total_q, H, D) against rows cu_k[b]..cu_k[b + 1] of k, v
    (total_k, Hkv, D), Hkv dividing H (read in place: q head h takes k, v head h // (H / Hkv)),
    causal and window aligned bottom-right per sequence. cu_q, cu_k: C-contiguous int32/int64
    (B + 1,) on q's device; a sequence longer than max_q / max_k, reaching outside the packed
    arrays, or of a decreasing cu_seqlens is cut to what lies inside and recorded in the device's
    error flag (ArgumentError at the next cudakit.check()). cuDNN's ragged flash attention where
    _cudnn_varlen allows and kernels/paths.py measured it faster, else the Triton kernel: one program
    per (query block of max_q, sequence * head). dropout: (threshold, scale, seed) on the
    probabilities (the Triton kernel only: cuDNN draws its own mask), score (b, h, i, j) at
    ((b H + h) max_q + i) max_k + j of the stream. FLOPs 4 H D sum_b Lq_b Lk_b (about half causal)."""
    total_q, h, d = q.shape
    b = cu_q.shape[0] - 1
    from . import paths
    if dropout is None and b > 0 and total_q and h and _cudnn_varlen(q, k, cu_q, cu_k, window, scale, dtype_name):
        from . import cudnn_varlen
        err = _varlen_flag(q.data.device_id)
        key = ("fwd_varlen", b, h, k.shape[1], max_q, max_k, d, dtype_name, bool(causal), q.data.device_id)
        cands = [("cudnn", lambda: cudnn_varlen.forward(q, k, v, cu_q, max_q, max_k, scale, causal, err))]
        if d <= MAX_HEAD_DIM:
            cands.append(("triton", lambda: _triton_forward_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal,
                                                                   dtype_name, window)))
        r = paths.run("attention_varlen", key, cands)
        if r is not None:
            return r
    paths.ran("attention_varlen", "triton")
    return _triton_forward_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, dtype_name, window, dropout)


def _triton_forward_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, dtype_name, window, dropout=None):
    cp = _cupy.cupy()
    total_q, h, d = q.shape
    b = cu_q.shape[0] - 1
    out = cp.empty_like(q)
    lse = cp.empty((total_q, h), cp.float32)
    if b <= 0 or total_q == 0 or h == 0:
        lse.fill(float("-inf"))
        out.fill(0)
        return out, lse
    _check_triton_head_dim(d)
    from ..backends.attention_masks import relative_bounds
    cfg = _config(dtype_name, d, None)
    dlo, dhi = relative_bounds(causal, window, max_q + max_k + 1)
    err = _varlen_flag(q.data.device_id)
    drop = Masks(causal, dropout=dropout)
    _launch("attn_fwd", max_q, cfg["BLOCK_M"], (q, k, v, out, lse),
            (lse, err, float(scale * math.log2(math.e)), max_q, max_k, dlo, dhi, h, lse, 0, 0, 0, 0, 1, cu_q, cu_k,
             h // k.shape[1], total_q, k.shape[0], *_row_strides(q, k), 0, *_drop_args(drop)),
            dict(cfg, D=d, HAS_LENS=False, POS_SCALE=scale > 0, HAS_BIAS=False, VARLEN=True,
                 DROPOUT=dropout is not None, LEFT=dlo > -_UNBOUNDED), whole=b * h)
    return out, lse


def backward_varlen(do, q, k, v, out, lse, cu_q, cu_k, max_q: int, max_k: int, scale: float, causal: bool,
                    dtype_name: str, window=None, deterministic: bool = False, dropout=None):
    """(dq (total_q, H, D), dk, dv) of forward_varlen, lse as it returned: dk, dv (total_k, Hkv, D)
    from cuDNN (summed over the q heads sharing a k, v head), (total_k, H, D) from the Triton
    kernels (each q head's share, which the caller sums when Hkv < H). deterministic: the Triton
    kernels only (each gradient block written by one program, no atomics); dropout (as
    forward_varlen's): the Triton kernels only. FLOPs 10 H D sum_b Lq_b Lk_b."""
    b = cu_q.shape[0] - 1
    if b > 0 and q.shape[0] and q.shape[1] and not deterministic and dropout is None \
            and _cudnn_varlen(q, k, cu_q, cu_k, window, scale, dtype_name):
        from . import cudnn_varlen, paths
        err = _varlen_flag(q.data.device_id)
        _, h, d = q.shape
        key = ("bwd_varlen", b, h, k.shape[1], max_q, max_k, d, dtype_name, bool(causal), q.data.device_id)
        cands = [("cudnn", lambda: cudnn_varlen.backward(do, q, k, v, out, lse, cu_q, max_q, max_k, scale, causal,
                                                         err))]
        if d <= MAX_HEAD_DIM:
            cands.append(("triton", lambda: _triton_backward_varlen(do, q, k, v, out, lse, cu_q, cu_k, max_q, max_k,
                                                                    scale, causal, dtype_name, window)))
        r = paths.run("attention_varlen_backward", key, cands)
        if r is not None:
            return r
    from . import paths
    paths.ran("attention_varlen_backward", "triton")
    return _triton_backward_varlen(do, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, causal, dtype_name, window,
                                   dropout)


def _triton_backward_varlen(do, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, causal, dtype_name, window,
                            dropout=None):
    cp = _cupy.cupy()
    total_q, h, d = q.shape
    total_k = k.shape[0]
    b = cu_q.shape[0] - 1
    dq = cp.empty_like(q)
    dk, dv = cp.empty((total_k, h, d), k.dtype), cp.empty((total_k, h, d), v.dtype)
    if b <= 0 or h == 0 or total_k == 0 or total_q == 0:
        for x in (dq, dk, dv):
            x.fill(0)
        return dq, dk, dv
    _check_triton_head_dim(d)
    from ..backends.attention_masks import relative_bounds
    cfg = _config(dtype_name, d, None)
    delta = cp.empty((total_q, h), cp.float32)
    rows = total_q * h
    _launch("attn_bwd_delta", rows, 64, (out.reshape(1, rows, d), do.reshape(1, rows, d), delta.reshape(1, rows)),
            (rows, 1, 0), {"D": d, "BLOCK_M": 64, "BLOCK_D": cfg["BLOCK_D"], "num_warps": 4})
    dlo, dhi = relative_bounds(causal, window, max_q + max_k + 1)
    kv, qc = _backward_configs(dtype_name, cfg)
    g = h // k.shape[1]
    common = (float(scale * math.log2(math.e)), float(scale), max_q, max_k, dlo, dhi, h, delta, 0, 0, 0, 0, 1)
    drop, on = _drop_args(Masks(causal, dropout=dropout)), dropout is not None
    geo = (cu_q, cu_k, g, total_q, total_k, *_row_strides(q, k), 0, *drop)
    _launch("attn_bwd_dkdv", max_k, kv["BLOCK_N"], (q, k, v, do, lse, delta, dk, dv), (delta, *common, *geo),
            dict(kv, D=d, HAS_LENS=False, EVEN_Q=False, HAS_BIAS=False, VARLEN=True, DROPOUT=on), whole=b * h)
    _launch("attn_bwd_dq", max_q, qc["BLOCK_M"], (q, k, v, do, lse, delta, dq), (delta, *common, delta, 0, 0, 0, 0, *geo),
            dict(qc, D=d, HAS_LENS=False, HAS_BIAS=False, DB_MODE=0, DBQ=True, DBK=True, VARLEN=True, DROPOUT=on),
            whole=b * h)
    return dq, dk, dv


def _row_stride(x) -> int:
    """The element stride of x's rows as the varlen kernels step them: dim 0 of a (total, H, D) packed
    array, dim 1 of a (B, L, H, D) one (where L is 1, the batches' stride, each batch's one row being
    the next row, and H D where both are 1)."""
    if x.ndim == 3:
        return x.strides[0] // x.itemsize
    b, n, h, d = x.shape
    st = x.strides[1] if n > 1 else x.strides[0] if b > 1 else h * d * x.itemsize
    return st // x.itemsize


def _row_strides(q, k) -> tuple:
    """(SQ, SK) of the varlen kernels: q's and k's (v's) row strides (_row_stride)."""
    return _row_stride(q), _row_stride(k)


def _grid_slices(bh: int):
    """(first batch*head, how many) of each launch over bh batch*heads: grid dim y is at most 65535,
    so more go in several launches, each told its first (BH0: the varlen and UNIFORM kernels find a
    program's sequence, head and dropout stream from bh + BH0, the arrays whole in each; _launch
    slices [BH, ...] arrays)."""
    for bh0 in range(0, bh, _MAX_GRID_Y):
        yield bh0, min(_MAX_GRID_Y, bh - bh0)


# ---- host-time plans (kernels/path_plans.py): forward()/backward() minus their per-call choices --
def _planned_path(kind: str, bh: int, lq: int, lk: int, d: int, dtype_name: str, scale: float, causal: bool,
                  device: int, graph: str | None = None):
    """The path forward() ("fwd") or backward() ("bwd") chose for this [BH, L, D] signature, for its
    plan: ("cudnn", the built graph's executor) or ("triton", None); None where no plan applies (not
    chosen yet, empty, more than 65535 batch-heads, or past the Triton kernels' head dim). graph:
    the cuDNN graph kind to execute (default "sdpa_<kind>"; "sdpa_fwd_inf": the inference graph)."""
    if bh == 0 or lq == 0 or lk == 0 or bh > _MAX_GRID_Y:
        return None
    if kind == "bwd" and _materialized_candidate(dtype_name, d, Masks(causal), bh, lq, lk):
        from . import paths
        choice = paths.chosen("attention_backward", _f32_bwd_key(bh, lq, lk, d, causal, None, device))
        return (choice, None) if choice in ("materialized", "triton") else None
    if _cudnn_candidate(dtype_name, d, scale):
        from . import cudnn, paths
        op = "attention" if kind == "fwd" else "attention_backward"
        choice = paths.chosen(op, _path_key(kind, bh, lq, lk, d, dtype_name, causal, device))
        if choice == "cudnn":
            qd, kd = cudnn.bhld_desc(bh, lq, d), cudnn.bhld_desc(bh, lk, d)
            descs = (qd, kd, kd, qd) if kind == "fwd" else (qd, kd, kd, qd, qd, qd, kd, kd)
            run = cudnn.executor(cudnn.sdpa_sig(graph or f"sdpa_{kind}", descs, dtype_name, scale, causal, device))
            return None if run is None else ("cudnn", run)
        if choice != "triton":
            return None
    return None if d > MAX_HEAD_DIM else ("triton", None)


def plan_forward_inference(bh: int, lq: int, lk: int, d: int, dtype_name: str, scale: float, causal: bool,
                           device: int):
    """A function (q, k, v) -> out like q replaying forward(need_lse=False)'s cuDNN inference graph
    for this signature, or None (another path chosen, or that graph not built yet)."""
    step = _planned_path("fwd", bh, lq, lk, d, dtype_name, scale, causal, device, graph="sdpa_fwd_inf")
    if step is None or step[0] != "cudnn":
        return None
    run, nd = step[1], empty_fn()

    def fwd(q, k, v):
        out = nd(q.shape, q.dtype)
        run(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr)
        return out
    return fwd


def plan_forward(bh: int, lq: int, lk: int, d: int, dtype_name: str, scale: float, causal: bool, device: int):
    """A function (q, k, v) -> (out like q, lse (bh, lq) float32) for C-contiguous arrays holding
    [bh, L, d], replaying forward()'s chosen path for this signature with everything but the
    output allocation and the launch bound; None where forward() has not chosen yet or the
    signature needs its general handling (empty, more than 65535 batch-heads)."""
    cp = _cupy.cupy()
    nd, f32 = empty_fn(), cp.float32
    step = _planned_path("fwd", bh, lq, lk, d, dtype_name, scale, causal, device)
    if step is None:
        return None
    if step[0] == "cudnn":
        run = step[1]

        def fwd(q, k, v):
            out, lse = nd(q.shape, q.dtype), nd((bh, lq), f32)
            run(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, lse.data.ptr)
            return out, lse
        return fwd
    cfg = _config(dtype_name, d, None)
    if _split_forward(cfg, None, None):   # the split passes and their buffers: the Triton forward itself
        masks = Masks(causal)
        return lambda q, k, v: _triton_forward(q, k, v, scale, masks, dtype_name)
    dlo, dhi = key_bounds(lq, lk, causal)
    launch = _specialized("attn_fwd", dict(cfg, D=d, HAS_LENS=False, POS_SCALE=scale > 0, HAS_BIAS=False,
                                           BIAS_K1=False, VARLEN=False, DROPOUT=False, LEFT=dlo > -_UNBOUNDED,
                                           LPT=_order(dlo, dhi)))[
        (max(1, math.ceil(lq / cfg["BLOCK_M"])), bh)]
    qk_scale = float(scale * math.log2(math.e))

    def fwd(q, k, v):
        out, lse = nd(q.shape, q.dtype), nd((bh, lq), f32)
        launch(q, k, v, out, lse, lse, lse, qk_scale, lq, lk, dlo, dhi, 1, lse, 0, 0, 0, 0, 1, lse, lse, 1, 0, 0,
               0, 0, 0, 0, 0, 0, 1.0, 0)   # LENS, ERR, BIAS, CU, the strides, the dropout's: not read
        return out, lse
    return fwd


def plan_backward(bh: int, lq: int, lk: int, d: int, dtype_name: str, scale: float, causal: bool, device: int):
    """A function (do, q, k, v, out, lse) -> (dq, dk, dv) like q, k, v, replaying backward()'s chosen
    path (see plan_forward); None where it does not apply."""
    cp = _cupy.cupy()
    nd, f32 = empty_fn(), cp.float32
    step = _planned_path("bwd", bh, lq, lk, d, dtype_name, scale, causal, device)
    if step is None:
        return None
    if step[0] == "cudnn":
        run = step[1]

        def bwd(do, q, k, v, out, lse):
            dq, dk, dv = nd(q.shape, q.dtype), nd(k.shape, k.dtype), nd(v.shape, v.dtype)
            run(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, do.data.ptr, lse.data.ptr,
                dq.data.ptr, dk.data.ptr, dv.data.ptr)
            return dq, dk, dv
        return bwd
    if step[0] == "materialized":
        masks = Masks(causal)

        def bwd(do, q, k, v, out, lse):   # (its launches are few against its milliseconds: no replay plan)
            a = [x.reshape(bh, -1, d) for x in (do, q, k, v, out)] + [lse.reshape(bh, lq)]
            r = _materialized_backward(*a, scale, masks)
            if r is None:
                r = _triton_backward(*a, scale, masks, dtype_name)
            return tuple(g.reshape(x.shape) for g, x in zip(r, (q, k, v)))
        return bwd
    cfg = _config(dtype_name, d, None)
    kv, qc = _backward_configs(dtype_name, cfg)
    delta_launch = _specialized("attn_bwd_delta", {"D": d, "BLOCK_M": 64, "BLOCK_D": cfg["BLOCK_D"], "num_warps": 4})[
        (max(1, math.ceil(lq / 64)), bh)]
    dkdv = _specialized("attn_bwd_dkdv", dict(kv, D=d, HAS_LENS=False, EVEN_Q=lq % kv["BLOCK_M"] == 0,
                                              HAS_BIAS=False, BIAS_K1=False, VARLEN=False, DROPOUT=False))[
        (max(1, math.ceil(lk / kv["BLOCK_N"])), bh)]
    dq_launch = _specialized("attn_bwd_dq", dict(qc, D=d, HAS_LENS=False, HAS_BIAS=False, DB_MODE=0, DBQ=True,
                                                 DBK=True, VARLEN=False, DROPOUT=False))[
        (max(1, math.ceil(lq / qc["BLOCK_M"])), bh)]
    dlo, dhi = key_bounds(lq, lk, causal)
    scalars = (float(scale * math.log2(math.e)), float(scale), lq, lk, dlo, dhi, 1)
    nodrop = (0, 0, 0, 1.0)

    def bwd(do, q, k, v, out, lse):
        dq, dk, dv = nd(q.shape, q.dtype), nd(k.shape, k.dtype), nd(v.shape, v.dtype)
        delta = nd((bh, lq), f32)
        delta_launch(out, do, delta, lq, 1, 0)
        novar = _NO_VARLEN(lse)   # (pointers and values not read)
        dkdv(q, k, v, do, lse, delta, dk, dv, lse, *scalars, lse, 0, 0, 0, 0, 1, *novar, *nodrop, 0)
        dq_launch(q, k, v, do, lse, delta, dq, lse, *scalars, lse, 0, 0, 0, 0, 1, lse, 0, 0, 0, 0, *novar, *nodrop, 0)
        return dq, dk, dv
    return bwd
