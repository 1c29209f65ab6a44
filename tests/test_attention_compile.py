"""The attention Triton kernels compile for sm_90 without a GPU (Triton's own ptxas) with the tiles
kernels/attention.py ships (float32: under each cudakit.float32_precision()), and fit an H100's shared memory (227 KiB per block): a tile change that
would fail to launch fails here first. Each compile runs in a subprocess: Triton's compiler state
stays out of the test process."""
import json
import subprocess
import sys

import pytest

pytest.importorskip("triton")

_H100_SHARED = 232448   # bytes of shared memory a block may opt in to on sm_90

# the subprocesses' common part: shared_bytes(fn, sig, consts, num_warps, num_stages), a kernel's
# shared memory compiled for sm_90 with its pointers 16-byte aligned
_COMPILE = r'''
import json, sys
sys.path.insert(0, "src")
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


def shared_bytes(fn, sig, consts, num_warps, num_stages):
    names = list(fn.arg_names)
    if "PDL" in names:   # (compiled as the runtime compiles it for sm_90: runtime.triton.pdl_supported)
        consts, sig = dict(consts, PDL=True), dict(sig, PDL="constexpr")
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names if sig[n][0] == "*"}
    ck = triton.compile(ASTSource(fn, sig, {(names.index(n),): v for n, v in consts.items()}, attrs),
                        target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps, "num_stages": num_stages})
    return ck.metadata.shared
'''

_CODE = _COMPILE + r'''
from cudakit.kernels import _attention_triton as src
from cudakit.kernels import attention as host

dtype, d, causal, block_n = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4]) or None
bias = "bias" in sys.argv[5:]   # with a bias (its tiles take shared memory too)
small = "small" in sys.argv[5:]   # a grid of fewer 128-row blocks than SMs (the split forward's own tiles)
parts = 3 if "parts" in sys.argv[5:] else 1   # the keys in parts (KSPLIT), merged by attn_fwd_combine
# causal: the key-lengths variant (HAS_LENS), a causal forward's tiles and program order (LPT) here -- the
# mask itself is a runtime bound (DLO, DHI) of every variant
ty = {"bfloat16": "*bf16", "float16": "*fp16", "float32": "*fp32"}[dtype]
cfg = host._config(dtype, d, block_n)
assert dtype != "float32" or cfg["PREC"] == __import__("os").environ.get("CUDAKIT_FLOAT32_PRECISION", "tf32x3")
kv, qc = host._backward_configs(dtype, cfg)
split = host._split_forward(cfg, block_n, None)   # the float32 forward that takes K, V split (SPLIT)
fwd_cfg = dict(cfg, **host._split_tiles(d, bias, causal, small=small or None)) if split else dict(cfg, SPLIT=False)
fwd_cfg["LEFT"] = False   # no window: the loops start at key 0 (what the host passes then)
fwd_cfg.setdefault("BLOCK_D2", 0)
fwd_cfg["LPT"] = host.CAUSAL_GROUP if causal and parts == 1 else 0   # a causal forward's longest-first order
fwd_cfg["KSPLIT"] = parts
fwd_cfg["OT"] = False
if "ot" in sys.argv[5:]:   # the split forward's O^T form (V read in place: V_IN_PLACE), on its stages
    assert split
    fwd_cfg = host._with_v_in_place(fwd_cfg)
out = {}
if parts > 1:   # (compiled only: it holds nothing in shared memory)
    assert 0 <= shared_bytes(src.attn_fwd_combine, {"OW": "*fp32", "LW": "*fp32", "O": ty, "LSE": "*fp32",
                                                         "Lq": "i32", "NBH": "i32", "D": "constexpr",
                                                         "KSPLIT": "constexpr", "BLOCK_M": "constexpr",
                                                         "BLOCK_D": "constexpr"},
                                  {"D": d, "KSPLIT": parts, "BLOCK_M": 32, "BLOCK_D": host.head_block(d)}, 4, 1) <= 232448
for name, fn, c in (("fwd", src.attn_fwd, fwd_cfg), ("dkdv", src.attn_bwd_dkdv, kv), ("dq", src.attn_bwd_dq, qc)):
    consts = {k: v for k, v in c.items() if k not in ("num_warps", "num_stages")}
    # (BIAS_K1, a bias's keys contiguous, but for the partials' case: the strided form compiles there)
    consts.update(D=d, HAS_LENS=causal, HAS_BIAS=bias, BIAS_K1=bias and "partial" not in sys.argv[5:], VARLEN=False,
                  DROPOUT="dropout" in sys.argv[5:],
                  **({"EVEN_Q": True} if name == "dkdv" else {}),
                  **({"POS_SCALE": not bias} if name == "fwd" else {}),
                  **({"DB_K1": False} if name == "dq" else {}),
                  # ("partial": a padding bias's gradient as per-tile partials, DB_MODE 4)
                  **({"DB_MODE": 4 if "partial" in sys.argv[5:] else 0, "DBQ": "partial" not in sys.argv[5:],
                      "DBK": True} if name == "dq" else {}))
    names = list(fn.arg_names)
    ints = ("Lq", "Lk", "DLO", "DHI", "H", "BH0", "sb_b", "sb_h", "sb_q", "sb_k", "HB", "sd_b", "sd_h", "sd_q",
            "sd_k", "G", "TQ", "TK", "SQ", "SK", "SG", "DSEED_LO", "DSEED_HI", "DTHRESH")
    sig = {n: "constexpr" if n in consts else ("fp32" if "SCALE" in n.upper() else
           "i32" if n in ints else "*i64" if n in ("LENS", "ERR") else "*i32" if n in ("CU_Q", "CU_K")
           else "*fp32" if n in ("LSE", "DELTA", "DBIAS") or (n == "O" and parts > 1) else ty) for n in names}
    out[name] = shared_bytes(fn, sig, consts, c["num_warps"], c["num_stages"])
print(json.dumps(out))
'''


def _shared_memory(code: str, args, env_extra=None, unshared=()) -> dict:
    """{kernel: bytes of shared memory} printed by `code` run in a subprocess with args; each must
    fit an H100's opt-in shared memory (and use some, but the kernels named in unshared: those
    may need none)."""
    env = {"TRITON_DEFAULT_FP_FUSION": "1", **__import__("os").environ, **(env_extra or {})}
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, check=False,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    shared = json.loads(r.stdout.strip().splitlines()[-1])
    for kernel, nbytes in shared.items():
        assert (kernel in unshared or 0 < nbytes) and nbytes <= _H100_SHARED, \
            f"{kernel}: {nbytes} bytes of shared memory (the limit is {_H100_SHARED})"
    return shared


@pytest.mark.parametrize("dtype,d,causal,block_n,prec", [
    ("bfloat16", 64, False, 0, ""), ("bfloat16", 128, True, 0, ""), ("float32", 128, False, 0, "ieee"),
    ("float32", 64, True, 0, "tf32x3"), ("float32", 128, False, 0, "tf32x3"), ("float32", 80, True, 0, "tf32x3"),
    ("float32", 96, False, 0, "tf32x3"), ("float32", 96, True, 0, "tf32x3"), ("float32", 64, False, 128, "tf32x3"),
    ("float32", 128, False, 128, "tf32"), ("float16", 128, False, 128, ""), ("float16", 40, True, 16, ""),
    ("bfloat16", 256, True, 0, ""), ("float32", 256, False, 128, "tf32x3"), ("float32", 160, True, 0, "ieee")])
def test_attention_kernels_compile_for_sm90(dtype, d, causal, block_n, prec):
    _shared_memory(_CODE, (dtype, d, "1" if causal else "0", block_n),
                   {"CUDAKIT_FLOAT32_PRECISION": prec} if prec else None)


@pytest.mark.parametrize("dtype,d,causal", [("bfloat16", 64, False), ("bfloat16", 128, True), ("float32", 128, True),
                                             ("float16", 40, False)])
def test_attention_kernels_with_dropout_compile_for_sm90(dtype, d, causal):
    """The three kernels with dropout on the probabilities: the mask's Philox words four keys a
    call (_keep_tile: split, join and reshape of the tile; dK, dV's transposed)."""
    _shared_memory(_CODE, (dtype, d, "1" if causal else "0", 0, "dropout"), {"CUDAKIT_FLOAT32_PRECISION": "tf32x3"})


@pytest.mark.parametrize("dtype,d", [("bfloat16", 128), ("float32", 64), ("float16", 40)])
def test_attention_backward_with_bias_partials_compiles_for_sm90(dtype, d):
    """The dQ kernel storing a padding bias's gradient as per-tile partials (DB_MODE 4), causal."""
    _shared_memory(_CODE, (dtype, d, "1", 0, "bias", "partial"), {"CUDAKIT_FLOAT32_PRECISION": "tf32x3"})


def test_attention_split_forward_with_bias_compiles_for_sm90():
    """The split float32 forward with a bias (its tiles one more load a stage) at head dim 80, whose
    plain tiles run 2 stages."""
    _shared_memory(_CODE, ("float32", 80, "0", 0, "bias"), {"CUDAKIT_FLOAT32_PRECISION": "tf32x3"})


@pytest.mark.parametrize("d,extra", [(64, ()), (80, ()), (96, ()), (128, ()), (80, ("bias",)), (64, ("parts",))])
def test_attention_split_forward_small_grid_compiles_for_sm90(d, extra):
    """The split float32 forward's tiles for grids of fewer 128-row blocks than SMs (64 x 64, one
    column block of 64 or 128, or two of 64 and 16 or 32), causal; below head dim 81 a candidate
    beside the usual tiles (kernels/attention.py _parts_candidates), also with a bias or the keys
    in parts."""
    _shared_memory(_CODE, ("float32", d, "1", 0, "small", *extra), {"CUDAKIT_FLOAT32_PRECISION": "tf32x3"})


@pytest.mark.parametrize("dtype,d", [("float32", 128), ("float32", 80), ("bfloat16", 64)])
def test_attention_forward_in_key_parts_compiles_for_sm90(dtype, d):
    """The forward over parts of the keys (attn_fwd's KSPLIT, kernels/attention.py KEY_SPLITS) and
    the kernel merging them, causal."""
    _shared_memory(_CODE, (dtype, d, "1", 0, "parts"), {"CUDAKIT_FLOAT32_PRECISION": "tf32x3"})


@pytest.mark.parametrize("d,extra", [(128, ()), (64, ()), (128, ("small",)), (112, ("parts",)), (80, ("parts",)),
                                     (96, ("small",)), (96, ("parts",))])
def test_attention_split_forward_v_in_place_compiles_for_sm90(d, extra):
    """The split float32 forward's O^T form (attn_fwd's OT, kernels/attention.py V_IN_PLACE),
    causal, on the shipped tiles, the small-grid ones and with the keys in parts; at head dims 80
    and 96 in two column blocks."""
    _shared_memory(_CODE, ("float32", d, "1", 0, "ot", *extra), {"CUDAKIT_FLOAT32_PRECISION": "tf32x3"})


_MAT_CODE = _COMPILE + r'''
from cudakit.kernels import _attention_mat_triton as mat
from cudakit.kernels import attention_materialized as am

d, masked = int(sys.argv[1]), sys.argv[2] == "1"
ints = {"Lq", "Lk", "LQP", "LKP", "KP", "M", "DLO", "DHI", "G", "H", "BH0", "HB", "sb_b", "sb_h", "sb_q", "sb_k",
        "sd_b", "sd_h", "sd_q", "sd_k", "NB", "NH", "NBATCH", "T0", "CH", "DSEED_LO", "DSEED_HI", "DTHRESH"}
out = {}
for name, fn, c in (("prep", mat.mat_prep, {"BLOCK_L": am.PREP_ROWS, "num_warps": 4, "num_stages": 3}),
                    ("scores", mat.mat_scores, dict(am.score_tiles(am.head_block(d)), MASKED=masked)),
                    ("scores_fused", mat.mat_scores, dict(am.score_tiles(am.head_block(d)), MASKED=masked, OWN_DELTA=True, SPLIT_B=True)),
                    ("scores_lengths", mat.mat_scores, dict(am.score_tiles(am.head_block(d)), MASKED=masked, HAS_LENS=True,
                                                            OWN_DELTA=am.fused_prep(am.head_block(d)),
                                                            SPLIT_B=am.fused_prep(am.head_block(d)))),
                    ("scores_bias", mat.mat_scores, dict(am.score_tiles(am.head_block(d)), MASKED=masked, HAS_BIAS=True,
                                                         DB_MODE=2, DBQ=True, DBK=False)),
                    # a (B, H, L, L) bias whose keys and gradient's keys are contiguous (BIAS_K1, DB_K1)
                    ("scores_bias_k1", mat.mat_scores, dict(am.score_tiles(am.head_block(d)), MASKED=masked,
                                                            HAS_BIAS=True, DB_MODE=1, DBQ=True, DBK=True, BIAS_K1=True,
                                                            DB_K1=True)),
                    ("scores_partials", mat.mat_scores, dict(am.score_tiles(am.head_block(d)), MASKED=masked,
                                                             HAS_BIAS=True, DB_MODE=4, DBQ=not masked, DBK=False)),
                    ("scores_dropout", mat.mat_scores, dict(am.score_tiles(am.head_block(d)), MASKED=masked,
                                                            DROPOUT=True)),
                    ("bias_sum", mat.mat_bias_sum, dict(BLOCK_M=am.score_tiles(am.head_block(d))["BLOCK_M"],
                                                        BLOCK_N=am.score_tiles(am.head_block(d))["BLOCK_N"],
                                                        DBQ=True, DBK=not masked, MASKED=masked, num_warps=4,
                                                        num_stages=1)),
                    ("dq", mat.mat_long, dict(am.LONG_TILES, MASKED=masked, TRANS_A=False, REV=True)),
                    ("dkdv", mat.mat_long, dict(am.LONG_TILES, MASKED=masked, TRANS_A=True)),
                    ("dkdv_aligned", mat.mat_long, dict(am.LONG_TILES, MASKED=masked, TRANS_A=True, ALIGNED=True)),
                    ("dq_columns", mat.mat_long, dict(am.LONG_TILES, MASKED=masked, TRANS_A=False, COLS=2)),
                    ("dkdv_groups", mat.mat_long, dict(am.LONG_TILES, MASKED=masked, TRANS_A=True, GROUPS=4))):
    consts = {k: v for k, v in c.items() if k not in ("num_warps", "num_stages")}
    consts.update({n: x for n, x in (("D", d), ("DP", am.head_block(d))) if n in fn.arg_names})
    # (constexprs left out take their defaults: else the signature below would make them pointers)
    consts.update({p.name: p.default for p in fn.params if p.is_constexpr and p.has_default and p.name not in consts})
    sig = {n: "constexpr" if n in consts else "i32" if n in ints else "fp32" if n in ("qk_scale", "scale", "DSCALE")
           else "*i64" if n == "LENS" else "*fp32" for n in fn.arg_names}
    out[name] = shared_bytes(fn, sig, consts, c["num_warps"], c["num_stages"])
print(json.dumps(out))
'''


@pytest.mark.parametrize("d,masked", [(64, False), (128, True), (40, True), (128, False)])
def test_materialized_backward_kernels_compile_for_sm90(d, masked):
    """kernels/attention_materialized.py's tiles compile and fit an H100's shared memory."""
    shared = _shared_memory(_MAT_CODE, (d, "1" if masked else "0"), unshared=("bias_sum",))
    assert set(shared) == {"prep", "scores", "scores_fused", "scores_lengths", "scores_bias", "scores_bias_k1",
                           "scores_partials",
                           "scores_dropout",
                           "bias_sum", "dq", "dkdv", "dkdv_aligned", "dq_columns", "dkdv_groups"}
