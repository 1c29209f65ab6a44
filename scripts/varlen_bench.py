"""attention_varlen against torch's ways of doing the same work, one run (issue 27's varlen line).

    python3 scripts/varlen_bench.py [--out varlen.json] [--dtype bfloat16,float16]

16 packed sequences of lengths 100..4000 (evenly spaced), 16 heads, head_dim 128, causal and not.
cudakit: attention_varlen (forward) and attention_varlen_backward (from the forward's out and
lse). torch (each where this torch has it, the fastest counted): a loop of
scaled_dot_product_attention over the sequences (its flash / cuDNN kernels), SDPA on a jagged
nested tensor, and torch.nn.attention.varlen.varlen_attn. Backward: torch.autograd.grad of the
forward's output (the forward not timed). Times: medians of CUDA-event samples; FLOPs 4 H D
sum(L^2) forward (halved causal), 2.5x that backward. Prints a table; writes JSON with x_* ratios
(torch's fastest time / cudakit's).
"""
import argparse
import json
import statistics
import time

import cupy as cp
import numpy as np
import torch
import torch.nn.functional as F

import cudakit

H, D = 16, 128
LENGTHS = [int(x) for x in np.linspace(100, 4000, 16)]


def timed(fn, iters=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    cp.cuda.get_current_stream().synchronize()
    ts = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    p.add_argument("--dtype", default="bfloat16,float16")
    a = p.parse_args()
    # cudakit and torch on one stream: CuPy's current stream is torch's
    ts = torch.cuda.current_stream()
    stream = cp.cuda.ExternalStream(ts.cuda_stream)
    stream.use()
    cu = torch.tensor([0] + list(np.cumsum(LENGTHS)), dtype=torch.int32, device="cuda")
    total, mx = int(cu[-1]), max(LENGTHS)
    rows = []
    for name in a.dtype.split(","):
        import ml_dtypes
        rng = np.random.default_rng(0)
        npdt = ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)
        # CuPy arrays of the dtype (CuPy reads ml_dtypes' bfloat16), shared with torch through DLPack
        qc, kc, vc, doc = (cp.asarray(rng.standard_normal((total, H, D), np.float32).astype(npdt)) for _ in range(4))
        q, k, v, do = (torch.from_dlpack(x) for x in (qc, kc, vc, doc))
        cuc = cp.asarray(cu.cpu().numpy())
        for causal in (False, True):
            flops = 4 * H * D * sum(L * L for L in LENGTHS) * (0.5 if causal else 1.0)
            r = {"dtype": name, "causal": causal, "lengths": "16 x 100..4000", "heads": H, "head_dim": D}
            out, lse = cudakit.attention_varlen_with_lse(qc, kc, vc, cuc, cuc, mx, mx, causal=causal)
            r["cudakit_fwd_ms"] = timed(lambda: cudakit.attention_varlen(qc, kc, vc, cuc, cuc, mx, mx, causal=causal))
            r["cudakit_bwd_ms"] = timed(lambda: cudakit.attention_varlen_backward(doc, qc, kc, vc, out, lse, cuc, cuc,
                                                                                  mx, mx, causal=causal))
            from cudakit.kernels import paths   # which path ran: cuDNN's ragged graphs or the Triton kernels
            r["cudakit_paths"] = {op: paths.last_paths().get(op, "triton")
                                  for op in ("attention_varlen", "attention_varlen_backward")}
            # torch: the ways it has
            cands = {}
            qs, ks, vs = (list(torch.split(x, LENGTHS)) for x in (q, k, v))
            dos = list(torch.split(do, LENGTHS))

            def loop_fwd(qs=qs, ks=ks, vs=vs):
                return [F.scaled_dot_product_attention(a.transpose(0, 1)[None], b.transpose(0, 1)[None],
                                                       c.transpose(0, 1)[None], is_causal=causal)
                        for a, b, c in zip(qs, ks, vs)]
            cands["sdpa loop"] = loop_fwd
            try:
                nq, nk, nv = (torch.nested.nested_tensor(list(torch.split(x, LENGTHS)), layout=torch.jagged)
                              .transpose(1, 2) for x in (q, k, v))
                F.scaled_dot_product_attention(nq, nk, nv, is_causal=causal)
                cands["sdpa nested jagged"] = lambda: F.scaled_dot_product_attention(nq, nk, nv, is_causal=causal)
            except Exception as e:   # noqa: BLE001 -- a way this torch lacks
                r["nested_error"] = f"{type(e).__name__}: {str(e)[:120]}"
            try:
                import inspect

                from torch.nn.attention.varlen import varlen_attn
                params = inspect.signature(varlen_attn).parameters
                ckw = ({"is_causal": causal} if "is_causal" in params else {"causal": causal} if "causal" in params
                       else {"window_size": (-1, 0) if causal else (-1, -1)})
                r["varlen_attn_signature"] = str(inspect.signature(varlen_attn))[:200]
                varlen_attn(q, k, v, cu, cu, mx, mx, **ckw)
                cands["varlen_attn"] = lambda: varlen_attn(q, k, v, cu, cu, mx, mx, **ckw)
            except Exception as e:   # noqa: BLE001
                r["varlen_attn_error"] = f"{type(e).__name__}: {str(e)[:120]}"
            fwd = {n: timed(f) for n, f in cands.items()}
            bwd = {}
            for n, f in cands.items():
                qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
                try:
                    if n == "sdpa loop":
                        outs = [F.scaled_dot_product_attention(a.transpose(0, 1)[None], b.transpose(0, 1)[None],
                                                               c.transpose(0, 1)[None], is_causal=causal)
                                for a, b, c in zip(*(torch.split(x, LENGTHS) for x in (qq, kk, vv)))]
                        gs = [d.transpose(0, 1)[None] for d in dos]
                        bwd[n] = timed(lambda: torch.autograd.grad(outs, (qq, kk, vv), gs, retain_graph=True))
                    elif n == "varlen_attn":
                        o = varlen_attn(qq, kk, vv, cu, cu, mx, mx, **ckw)
                        bwd[n] = timed(lambda: torch.autograd.grad(o, (qq, kk, vv), do, retain_graph=True))
                    else:
                        nq2, nk2, nv2 = (torch.nested.nested_tensor(list(torch.split(x.detach(), LENGTHS)),
                                                                    layout=torch.jagged, requires_grad=True)
                                         for x in (q, k, v))
                        o = F.scaled_dot_product_attention(nq2.transpose(1, 2), nk2.transpose(1, 2),
                                                           nv2.transpose(1, 2), is_causal=causal)
                        gn = torch.nested.nested_tensor(list(torch.split(do, LENGTHS)), layout=torch.jagged
                                                        ).transpose(1, 2)
                        bwd[n] = timed(lambda: torch.autograd.grad(o, (nq2, nk2, nv2), gn, retain_graph=True))
                except Exception as e:   # noqa: BLE001
                    r[f"{n} backward error"] = f"{type(e).__name__}: {str(e)[:120]}"
            r["torch_fwd_ms"], r["torch_bwd_ms"] = fwd, bwd
            bf, bb = min(fwd, key=fwd.get), (min(bwd, key=bwd.get) if bwd else None)
            r["torch_fastest_fwd"], r["torch_fastest_bwd"] = bf, bb
            r["x_fwd"] = fwd[bf] / r["cudakit_fwd_ms"]
            r["x_bwd"] = bwd[bb] / r["cudakit_bwd_ms"] if bb else None
            r["cudakit_fwd_tflops"] = flops / r["cudakit_fwd_ms"] / 1e9
            r["cudakit_bwd_tflops"] = 2.5 * flops / r["cudakit_bwd_ms"] / 1e9
            rows.append(r)
            print(f"VARLEN {name:9} causal={causal!s:5} paths {r['cudakit_paths']} fwd {r['cudakit_fwd_ms']:.3f} ms vs {bf} {fwd[bf]:.3f} "
                  f"(x{r['x_fwd']:.3f}, {r['cudakit_fwd_tflops']:.0f} TFLOP/s) | bwd {r['cudakit_bwd_ms']:.3f} ms vs "
                  f"{bb} {bwd.get(bb, float('nan')):.3f} (x{(r['x_bwd'] or float('nan')):.3f})  all fwd {fwd} bwd {bwd}",
                  flush=True)
    if a.out:
        json.dump({"what": "attention_varlen vs torch's fastest way (SDPA loop, nested jagged SDPA, varlen_attn) "
                           "on 16 packed sequences of 100..4000, H16, D128",
                   "device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "command": "python3 scripts/varlen_bench.py", "rows": rows}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
