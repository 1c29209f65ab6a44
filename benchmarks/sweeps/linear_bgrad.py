"""linear_backward with a bias, 16-bit: the bias's gradient out of the weight-gradient GEMM (cuBLASLt's
BGRADB epilogue, `fused`) against the same two GEMMs with a column-sum pass after them (`unfused`:
linear_backward(bias=False) then cudakit.sum over the rows, the computation before the epilogue) and
torch's (g @ w, g.t() @ x, g.sum(0)), interleaved in one run, device time behind an L2 flush. Shapes:
the GPT example's (8192 rows: qkv, proj, fc, fc2 at d_model 768), a small one and the linalg bench's.
    python3 benchmarks/sweeps/linear_bgrad.py [--out F]
Prints VARIANT lines (median ms; x = unfused / fused, x torch = torch / fused)."""
import sys

import cupy as cp
import torch
from _medians import medians
from _results import dump_rows

import cudakit

argv = sys.argv[1:]
CASES = [(8192, 768, 2304), (8192, 768, 768), (8192, 768, 3072), (8192, 3072, 768), (512, 256, 768),
         (16384, 4096, 16384)]
rows_out = []
for dtype in ("bfloat16", "float16"):
    tdt = getattr(torch, dtype)
    for rows, fin, fout in CASES:
        tg, tx = torch.randn(rows, fout, device="cuda", dtype=tdt), torch.randn(rows, fin, device="cuda", dtype=tdt)
        tw = torch.randn(fout, fin, device="cuda", dtype=tdt) / fin ** 0.5
        g, x, w = cp.from_dlpack(tg), cp.from_dlpack(tx), cp.from_dlpack(tw)

        def unfused():
            r = cudakit.linear_backward(g, x, w, False)
            return r[0], r[1], cudakit.sum(g, 0)
        fused_gb = cudakit.linear_backward(g, x, w, True)[2]
        err = float(cp.abs(fused_gb.astype(cp.float32) - unfused()[2].astype(cp.float32)).max())
        m = medians({"fused": lambda: cudakit.linear_backward(g, x, w, True), "unfused": unfused,
                     "torch": lambda: (tg @ tw, tg.t() @ tx, tg.sum(0))})
        name = f"{rows}x{fin}x{fout} {dtype}"
        rows_out.append({"case": name, "fused_ms": round(m["fused"], 4), "unfused_ms": round(m["unfused"], 4),
                         "torch_ms": round(m["torch"], 4), "x_unfused": round(m["unfused"] / m["fused"], 3),
                         "x_torch": round(m["torch"] / m["fused"], 3), "max_abs_gb_diff": err})
        print(f"VARIANT {name:<26} fused {m['fused']:8.4f} ms unfused {m['unfused']:8.4f} ms "
              f"torch {m['torch']:8.4f} ms x {m['unfused'] / m['fused']:6.3f} x torch {m['torch'] / m['fused']:6.3f} "
              f"gb diff {err:.3g}", flush=True)
dump_rows(argv, __doc__, rows_out)
