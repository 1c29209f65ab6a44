"""The transformer-block fusions, 16-bit and float32, against the unfused cudakit calls they replace
and torch's eager equivalent, interleaved in one run, device time behind an L2 flush:
- `ln_res`: layernorm_backward(..., residual_grad=r), dx + r in the pass that writes dx, against
  layernorm_backward then add (`unfused`) and torch's native_layer_norm_backward then + (`torch`);
  its dweight/dbias column sums are ck_norm_colsum's (one thread per column before this sweep's
  commit; `unfused` runs the same colsum, so x unfused isolates the residual fusion);
- `rms_res`: the same for rmsnorm (torch: autograd of x * rsqrt(mean(x^2) + eps) * w, then +);
- `dgelu`: linear_backward(g, gelu(pre), w, gelu_pre=pre), the first result the gradient of pre
  (cuBLASLt's DGELU epilogue for 16-bit), against linear_backward then gelu_backward and torch's
  (g @ w) * gelu'(pre) by autograd of gelu plus the two GEMMs and the bias's sum;
- `lin_res`: linear(h, w, b, residual=x) (the forward's residual add as cuBLASLt's C operand) against
  add(x, linear(h, w, b)) and torch's x + F.linear(h, w, b);
- `drop_res`: dropout(y, 0.1, seed, residual=x) (the residual add in dropout's pass) against
  add(x, dropout(y, 0.1, seed)) and torch's x + F.dropout(y, 0.1).
Shapes: the GPT example's (8192 rows, d_model 768, MLP 3072), a 4096-wide model's and a small one.
    python3 benchmarks/sweeps/gpt_backward_fusions.py [--out F] [--kinds ln_res,dgelu,...]
Prints VARIANT lines (median ms; x unfused = unfused / fused, x torch = torch / fused)."""
import sys

import cupy as cp
import torch
import torch.nn.functional as F
from _medians import medians
from _results import dump_rows

import cudakit

argv = sys.argv[1:]
KINDS = set(argv[argv.index("--kinds") + 1].split(",")) if "--kinds" in argv else None
rows_out = []


def _want(kind):
    return KINDS is None or kind in KINDS


def _report(kind, name, m, err):
    row = {"case": f"{kind} {name}", "fused_ms": round(m["fused"], 4), "unfused_ms": round(m["unfused"], 4),
           "torch_ms": round(m["torch"], 4), "x_unfused": round(m["unfused"] / m["fused"], 3),
           "x_torch": round(m["torch"] / m["fused"], 3), "max_abs_vs_unfused": err}
    rows_out.append(row)
    print(f"VARIANT {kind:<8} {name:<26} fused {m['fused']:8.4f} ms unfused {m['unfused']:8.4f} ms "
          f"torch {m['torch']:8.4f} ms x unfused {row['x_unfused']:6.3f} x torch {row['x_torch']:6.3f} "
          f"diff {err:.3g}", flush=True)


def _diff(a, b):
    return float(cp.abs(a.astype(cp.float32) - b.astype(cp.float32)).max())


for dtype in ("bfloat16", "float32"):
    tdt = getattr(torch, dtype)
    for rows, d in ((8192, 768), (4096, 4096), (512, 256)) if _want("ln_res") or _want("rms_res") else ():
        name = f"{rows}x{d} {dtype}"
        tx, tg, tr = (torch.randn(rows, d, device="cuda", dtype=tdt) for _ in range(3))
        tw, tb = torch.rand(d, device="cuda", dtype=tdt) + 0.5, torch.randn(d, device="cuda", dtype=tdt)
        x, g, r, w, b = (cp.from_dlpack(t) for t in (tx, tg, tr, tw, tb))
        _, mean, rstd = cudakit.layernorm_with_stats(x, w, b)
        _, tmean, trstd = torch.ops.aten.native_layer_norm(tx, (d,), tw, tb, 1e-5)
        fused = lambda: cudakit.layernorm_backward(g, x, w, mean, rstd, residual_grad=r)  # noqa: E731

        def unfused():
            dx, dw, db = cudakit.layernorm_backward(g, x, w, mean, rstd)
            return cudakit.add(dx, r), dw, db

        def torch_ln():
            dx, dw, db = torch.ops.aten.native_layer_norm_backward(tg, tx, (d,), tmean, trstd, tw, tb,
                                                                   [True, True, True])
            return dx + tr, dw, db
        if _want("ln_res"):
            _report("ln_res", name, medians({"fused": fused, "unfused": unfused, "torch": torch_ln}),
                    _diff(fused()[0], unfused()[0]))
        if not _want("rms_res"):
            continue
        _, rstd_r = cudakit.rmsnorm_with_stats(x, w)
        fused_r = lambda: cudakit.rmsnorm_backward(g, x, w, rstd_r, residual_grad=r)  # noqa: E731

        def unfused_r():
            dx, dw = cudakit.rmsnorm_backward(g, x, w, rstd_r)
            return cudakit.add(dx, r), dw
        txr, twr = tx.detach().requires_grad_(), tw.detach().requires_grad_()
        ty = F.rms_norm(txr, (d,), twr, 1e-6)

        def torch_rms():
            gx, gw = torch.autograd.grad(ty, (txr, twr), tg, retain_graph=True)
            return gx + tr, gw
        _report("rms_res", name, medians({"fused": fused_r, "unfused": unfused_r, "torch": torch_rms}),
                _diff(fused_r()[0], unfused_r()[0]))
    for rows, fin, fout in ((8192, 3072, 768), (4096, 16384, 4096), (512, 1024, 256)) if _want("dgelu") else ():
        name = f"{rows}x{fin}x{fout} {dtype}"
        tpre = torch.randn(rows, fin, device="cuda", dtype=tdt)
        tx = F.gelu(tpre, approximate="tanh")
        tg = torch.randn(rows, fout, device="cuda", dtype=tdt)
        tw = torch.randn(fout, fin, device="cuda", dtype=tdt) / fin ** 0.5
        pre, x, g, w = (cp.from_dlpack(t) for t in (tpre, tx, tg, tw))
        fused = lambda: cudakit.linear_backward(g, x, w, True, gelu_pre=pre)  # noqa: E731

        def unfused():
            gx, gw, gb = cudakit.linear_backward(g, x, w, True)
            return cudakit.gelu_backward(gx, pre, "tanh"), gw, gb
        tpr = tpre.detach().requires_grad_()
        tf = F.gelu(tpr, approximate="tanh")

        def torch_mlp():
            gx = tg @ tw
            return torch.autograd.grad(tf, tpr, gx, retain_graph=True)[0], tg.t() @ tx, tg.sum(0)
        _report("dgelu", name, medians({"fused": fused, "unfused": unfused, "torch": torch_mlp}),
                _diff(fused()[0], unfused()[0]))
    for rows, fin, fout in ((8192, 768, 768), (8192, 3072, 768), (4096, 4096, 4096), (512, 256, 256)) \
            if _want("lin_res") else ():
        name = f"{rows}x{fin}x{fout} {dtype}"
        th, tx = torch.randn(rows, fin, device="cuda", dtype=tdt), torch.randn(rows, fout, device="cuda", dtype=tdt)
        tw, tb = torch.randn(fout, fin, device="cuda", dtype=tdt) / fin ** 0.5, torch.randn(fout, device="cuda", dtype=tdt)
        h, x, w, b = (cp.from_dlpack(t) for t in (th, tx, tw, tb))
        fused = lambda: cudakit.linear(h, w, b, residual=x)  # noqa: E731
        unfused = lambda: cudakit.add(x, cudakit.linear(h, w, b))  # noqa: E731
        _report("lin_res", name, medians({"fused": fused, "unfused": unfused, "torch": lambda: tx + F.linear(th, tw, tb)}),
                _diff(fused(), unfused()))
    for rows, d in ((8192, 768), (4096, 4096), (512, 256)) if _want("drop_res") else ():
        name = f"{rows}x{d} {dtype}"
        tx, ty = (torch.randn(rows, d, device="cuda", dtype=tdt) for _ in range(2))
        x, y = cp.from_dlpack(tx), cp.from_dlpack(ty)
        fused = lambda: cudakit.dropout(y, 0.1, 7, residual=x)  # noqa: E731
        unfused = lambda: cudakit.add(x, cudakit.dropout(y, 0.1, 7))  # noqa: E731
        _report("drop_res", name, medians({"fused": fused, "unfused": unfused,
                                           "torch": lambda: tx + F.dropout(ty, 0.1)}), _diff(fused(), unfused()))
dump_rows(argv, __doc__, rows_out)
