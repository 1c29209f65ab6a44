"""float32 attention with and without programmatic dependent launch, against torch's float32 SDPA:
the same path (chosen once, kept on disk) timed with its kernels launched with PDL (each letting
the next launch at its start, "early", or as its programs exit, "late") and without ("plain"),
interleaved with torch in one timing, forward and backward, plain and causal, on (B, H, L, D) CuPy
arrays, each call behind an L2 flush (bench.timing's cold samples).
    CUDAKIT_DISPATCH_PLANS=0 python3 benchmarks/sweeps/attention_pdl.py [--shapes 1x16x256x80,...]
        [--fwd-only] [--out F]
Dispatch plans must be off: each call then runs kernels/attention.py's Python, which reads
attention.PDL (forced 2, 1 or False per provider: kernels/_triton_pdl._pdl_start) when it
specialises a kernel. Prints VARIANT lines: x torch of each provider, and the path taken."""
import os
import sys

import cupy as cp
import torch

import cudakit
from cudakit.bench import timing
from cudakit.kernels import attention as ka
from cudakit.kernels import paths
from _cases import attention_case
from _results import dump_rows

argv = sys.argv[1:]
if os.environ.get("CUDAKIT_DISPATCH_PLANS", "1").strip().lower() not in ("0", "false", "no", "off"):
    sys.exit("set CUDAKIT_DISPATCH_PLANS=0: a replayed plan would not read attention.PDL")
shapes = [(1, 16, 256, 80), (2, 8, 256, 96), (8, 8, 256, 128), (1, 16, 512, 128)]
if "--shapes" in argv:
    shapes = [tuple(int(x) for x in s.split("x")) for s in argv[argv.index("--shapes") + 1].split(",")]
cudakit.set_float32_precision("tf32x3")
sdpa = torch.nn.functional.scaled_dot_product_attention
rows = []


def with_pdl(flag, fn):
    def call():
        ka.PDL = flag
        try:
            return fn()
        finally:
            ka.PDL = None
    return call


def measure(tag, kind, fn, ref, path):
    res, err = timing.time_gpu_interleaved({"early": with_pdl(2, fn), "late": with_pdl(1, fn),
                                            "plain": with_pdl(False, fn), "torch": ref},
                                           warmup=3, reps=15, rounds=3, cold=True)
    for name, e in err.items():
        print(f"VARIANT failed {tag} {kind} {name}: {type(e).__name__}: {str(e)[:150]}", flush=True)
    if len(res) < 4:
        return
    m = {n: r["median_ms"] for n, r in res.items()}
    row = {"case": tag, "pass": kind, "path": path, "torch_ms": round(m["torch"], 4)}
    for n in ("early", "late", "plain"):
        row[f"{n}_ms"], row[f"x_torch_{n}"] = round(m[n], 4), round(m["torch"] / m[n], 3)
    rows.append(row)
    print(f"VARIANT pdl {tag:<20} {kind:<8} torch {m['torch']:.4f} ms; x torch: early {row['x_torch_early']:.3f} "
          f"late {row['x_torch_late']:.3f} plain {row['x_torch_plain']:.3f} path {path}", flush=True)


def case(b, h, L, d, causal):
    _, _, _, (q, k, v, g) = attention_case(f"f32:{b}x{h}x{L}x{d}{'c' if causal else ''}")
    tq, tk, tv, tg = (torch.from_dlpack(a) for a in (q, k, v, g))
    tag = f"{b}x{h}x{L}x{d}{' causal' if causal else ''}"
    paths._last.pop("attention", None)
    out, lse = cudakit.attention_with_lse(q, k, v, causal=causal)   # (the first call chooses the path)
    fwd_path = paths.last_paths().get("attention", "triton")
    # the same output both ways, bit for bit (the launch attribute changes when kernels start, not what they do)
    ka.PDL = False
    plain = cudakit.attention(q, k, v, causal=causal)
    ka.PDL = True
    with_ = cudakit.attention(q, k, v, causal=causal)
    ka.PDL = None
    same = bool(cp.array_equal(plain, with_))
    print(f"VARIANT pdl {tag} forward outputs equal: {same}", flush=True)
    measure(tag, "forward", lambda: cudakit.attention(q, k, v, causal=causal),
            lambda: sdpa(tq, tk, tv, is_causal=causal), fwd_path)
    if "--fwd-only" in argv:
        return
    rq, rk, rv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
    y = sdpa(rq, rk, rv, is_causal=causal)
    cudakit.attention_backward(g, q, k, v, out, lse, causal=causal)
    measure(tag, "backward", lambda: cudakit.attention_backward(g, q, k, v, out, lse, causal=causal),
            lambda: torch.autograd.grad(y, (rq, rk, rv), tg, retain_graph=True),
            paths.last_paths().get("attention_backward", "?"))


for shape in shapes:
    for causal in (False, True):
        case(*shape, causal)
        dump_rows(argv, __doc__, rows)   # (after each case: a call cut off by its time limit keeps what ran)
