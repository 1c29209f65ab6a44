"""Register spills of the attention kernels, without a GPU: compiles the Triton kernels for sm_90
as kernels/attention.py launches them (the integers a launch passes divisible by 16 marked so, as
the launcher specialises them) and counts local-memory loads and stores (spills), tensor-core
instructions and global loads in the SASS (Triton's bundled cuobjdump).

    python scripts/attention_sass.py [float32|bfloat16|float16] [head_dim]

Prints lines starting with SASS: kernel, registers, stack bytes, LDL, STL, HGMMA, LDG, shared
bytes. On 2026-11-27 (Triton 3.9 here, float32 tf32x3, head dim 128) the split forward's SASS held
506 local loads before its loops started at a compile-time key 0 (attn_fwd's LEFT) and 84 after."""
import collections
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from cudakit.kernels import _attention_triton as src  # noqa: E402
from cudakit.kernels import attention as host  # noqa: E402

# integer arguments a plain launch passes as multiples of 16 (lengths, unbounded mask sides, zero strides)
DIVISIBLE = {"Lq", "Lk", "DLO", "DHI", "TQ", "TK", "BH0", "sb_b", "sb_h", "sb_q", "sb_k", "sd_b", "sd_h", "sd_q",
             "sd_k", "DSEED_LO", "DSEED_HI", "DTHRESH"}
FLOATS = {"qk_scale", "sm_scale", "DSCALE"}
DATA = {"Q", "K", "V", "O", "DO", "DK", "DV", "DQ", "BIAS"}   # the data's own dtype
F16_PARTS = {"KH", "KL", "VH", "VL"}
CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def signature(fn, consts: dict, ptr: str) -> tuple[dict, dict]:
    names = [p.name for p in fn.params]
    sig, attrs = {}, {}
    for n in names:
        if n in consts:
            sig[n] = "constexpr"
        elif n in FLOATS:
            sig[n] = "fp32"
        elif n in F16_PARTS:   # attn_fwd_f16p's parts of K and V
            sig[n] = "*fp16"
        elif n in ("LSE", "DELTA", "DBIAS", "KS", "VS"):
            sig[n] = "*fp32"
        elif n in ("LENS", "ERR"):
            sig[n] = "*i64"
        elif n in ("CU_Q", "CU_K"):
            sig[n] = "*i32"
        elif n in DATA:
            sig[n] = ptr
        else:
            sig[n] = "i32"
        if sig[n].startswith("*") or n in DIVISIBLE:
            attrs[(names.index(n),)] = [["tt.divisibility", 16]]
    return sig, attrs


def _opcode(line: str) -> str:
    """A SASS line's opcode without its modifiers, past a predicate (@P0, @!PT) where it has one."""
    words = line.split()[1:]
    if words and words[0].startswith("@") and len(words) > 1:
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def spills(name: str, fn, cfg: dict, ptr: str, **consts) -> None:
    cfg = dict(cfg)
    opts = {"num_warps": cfg.pop("num_warps"), "num_stages": cfg.pop("num_stages")}
    consts = dict(cfg, **consts)
    names = [p.name for p in fn.params]
    if "PDL" in names:   # (as the runtime compiles it for sm_90: runtime.triton.pdl_supported)
        consts.setdefault("PDL", True)
    sig, attrs = signature(fn, consts, ptr)
    ck = triton.compile(ASTSource(fn, sig, {(names.index(n),): v for n, v in consts.items()}, attrs),
                        target=GPUTarget("cuda", 90, 32), options=opts)
    path = tempfile.mktemp(suffix=".cubin")
    with open(path, "wb") as f:
        f.write(ck.asm["cubin"])
    usage = subprocess.run([CUOBJDUMP, "--dump-resource-usage", path], capture_output=True, text=True).stdout
    sass = subprocess.run([CUOBJDUMP, "-sass", path], capture_output=True, text=True).stdout
    os.unlink(path)
    ops = collections.Counter(_opcode(line) for line in sass.splitlines()
                              if line.strip().startswith("/*") and len(line.split()) > 1)
    res = next((line.strip() for line in usage.splitlines() if "REG" in line), "")
    fields = dict(kv.split(":") for kv in res.split() if ":" in kv)
    print(f"SASS {name}: REG {fields.get('REG')} STACK {fields.get('STACK')} LDL {ops['LDL']} STL {ops['STL']} "
          f"HGMMA {ops['HGMMA']} LDG {ops['LDG']} SMEM {ck.metadata.shared}", flush=True)


def main(dtype: str = "float32", d: int = 128) -> None:
    ptr = {"float32": "*fp32", "bfloat16": "*bf16", "float16": "*fp16"}[dtype]
    cfg = host._config(dtype, d, None)
    plain = dict(D=d, HAS_LENS=False, HAS_BIAS=False, VARLEN=False, DROPOUT=False)
    fwd = dict(cfg, SPLIT=False, BLOCK_D2=0, LPT=0, KSPLIT=1, OT=False)
    if host._split_forward(cfg, None, None):
        fwd.update(host._split_tiles(d))
    for left in (True, False):
        spills(f"attn_fwd {dtype} d={d} LEFT={left}", src.attn_fwd, fwd, ptr, POS_SCALE=True, LEFT=left, **plain)
    causal = dict(fwd, LPT=host.CAUSAL_GROUP)   # a causal forward: longest first, its own tiles (split)
    if fwd.get("SPLIT"):
        causal.update(host._split_tiles(d, causal=True))
    spills(f"attn_fwd {dtype} d={d} LEFT=False LPT={host.CAUSAL_GROUP}", src.attn_fwd, causal, ptr,
           POS_SCALE=True, LEFT=False, **plain)
    spills(f"attn_fwd {dtype} d={d} LEFT=False KSPLIT=2", src.attn_fwd, dict(fwd, KSPLIT=2), ptr,   # keys in parts
           POS_SCALE=True, LEFT=False, **plain)
    if fwd.get("SPLIT") and "BLOCK_D2" not in host._split_tiles(d):   # O^T = V^T P^T, V in place (V_IN_PLACE)
        spills(f"attn_fwd {dtype} d={d} LEFT=False OT", src.attn_fwd, dict(fwd, OT=True), ptr, POS_SCALE=True,
               LEFT=False, **plain)
        spills(f"attn_fwd {dtype} d={d} LEFT=False LPT={host.CAUSAL_GROUP} OT", src.attn_fwd, dict(causal, OT=True),
               ptr, POS_SCALE=True, LEFT=False, **plain)
        small = dict(fwd, **host._SPLIT_SMALL_GRID_TILES)
        for ot in (False, True):
            spills(f"attn_fwd {dtype} d={d} LEFT=False small-grid tiles{' OT' if ot else ''}", src.attn_fwd,
                   dict(small, OT=ot), ptr, POS_SCALE=True, LEFT=False, **plain)
    if dtype == "float32" and 32 < d <= 128:   # the forward on float16 parts, each tiling it is offered on
        from cudakit.kernels import _attention_f16p_triton as f16p
        dp = host.head_block(d)
        spills(f"f16_split_kv d={d}", f16p.f16_split_kv, {"num_warps": 4, "num_stages": 3}, ptr, D=d, DP=dp,
               BLOCK_L=host._F16_SPLIT_ROWS)
        for tiles in (host._F16_TILES, host._F16_SMALL_GRID_TILES, host._F16_FILL_TILES):
            for even in (False, True) if d == dp else (False,):
                for ksplit in (1, 2):
                    t = f"{tiles['BLOCK_M']}x{tiles['BLOCK_N']}w{tiles['num_warps']}s{tiles['num_stages']}"
                    spills(f"attn_fwd_f16p d={d} {t} EVEN={even} KSPLIT={ksplit}", f16p.attn_fwd_f16p, tiles, ptr,
                           DP=dp, POS_SCALE=True, LEFT=False, KSPLIT=ksplit, EVEN=even, LPT=0,
                           **{n: v for n, v in plain.items() if n != "VARLEN"})
    kv, qc = host._backward_configs(dtype, cfg)
    spills(f"attn_bwd_dkdv {dtype} d={d}", src.attn_bwd_dkdv, kv, ptr, EVEN_Q=True, **plain)
    spills(f"attn_bwd_dq {dtype} d={d}", src.attn_bwd_dq, qc, ptr, DB_MODE=0, DBQ=True, DBK=True, **plain)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "float32", int(sys.argv[2]) if len(sys.argv) > 2 else 128)
