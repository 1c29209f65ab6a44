"""Every cuDNN execution plan of the ragged (THD) attention backward on the sequences of
tests/gpu/test_cudnn_gpu.py test_attention_varlen_cudnn_ragged, checked against a float64 NumPy
reference per sequence: which plans write dQ, dK and dV right? (2026-11-27 19:48 UTC: the causal
cases with three and four sequences returned dQ of zeros for sequence 0 in one run and passed in
earlier runs, whose autotuned plan choice may have differed.) Prints lines starting with
VARLEN-PLAN.

    python3 scripts/cudnn_varlen_plan_probe.py
"""
import cupy as cp
import numpy as np

import cudakit
from cudakit.kernels import cudnn, cudnn_varlen
from cudakit.runtime import device_errors

CASES = [(2, 2, 64, [300, 1, 0, 517], True), (3, 1, 40, [33, 7, 64], True),
         (4, 2, 128, [129, 257], False), (2, 2, 256, [70, 131], True)]


def reference(q, k, v, do, lens, causal, scale):
    """float64 (dq, dk, dv) of packed (total, H, D) / (total, Hkv, D) arrays, sequence by sequence."""
    q, k, v, do = (np.asarray(x, np.float64) for x in (q, k, v, do))
    h, hkv = q.shape[1], k.shape[1]
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    start = 0
    for n in lens:
        rows = slice(start, start + n)
        start += n
        for hh in range(h):
            kh = hh // (h // hkv)
            qs, ks, vs, dos = q[rows, hh], k[rows, kh], v[rows, kh], do[rows, hh]
            s = qs @ ks.T * scale
            if causal:
                s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
            p = np.exp(s - s.max(axis=-1, keepdims=True)) if n else s
            p = p / p.sum(axis=-1, keepdims=True) if n else p
            o = p @ vs
            dp = dos @ vs.T
            ds = p * (dp - (dos * o).sum(-1, keepdims=True))
            dq[rows, hh] = ds @ ks * scale
            dk[rows, kh] += ds.T @ qs * scale
            dv[rows, kh] += p.T @ dos
    return dq, dk, dv


def worst(got, want, lens):
    """Per sequence, the largest error relative to the reference's largest magnitude."""
    got = cp.asnumpy(got).astype(np.float64)
    out, start = [], 0
    for n in lens:
        g, w = got[start:start + n], want[start:start + n]
        start += n
        out.append(float(np.abs(g - w).max() / (np.abs(w).max() + 1e-12)) if n else 0.0)
    return out


def main():
    rng = np.random.default_rng(0)
    for h, hkv, d, lens, causal in CASES:
        for dtype in ("float16", "bfloat16"):
            total = sum(lens)
            cu = cp.asarray(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
            mx = max(lens)
            q, do = (cp.asarray(rng.standard_normal((total, h, d)).astype(np.float32)).astype(dtype) for _ in range(2))
            k, v = (cp.asarray(rng.standard_normal((total, hkv, d)).astype(np.float32)).astype(dtype) for _ in range(2))
            scale = d ** -0.5
            out, lse = cudakit.attention_varlen_with_lse(q, k, v, cu, cu, mx, mx, causal=causal)
            err = device_errors.flag(q.data.device_id)
            want = reference(cp.asnumpy(q.astype(cp.float32)), cp.asnumpy(k.astype(cp.float32)),
                             cp.asnumpy(v.astype(cp.float32)), cp.asnumpy(do.astype(cp.float32)), lens, causal, scale)
            r = cudnn_varlen.backward(do, q, k, v, out, lse, cu, mx, mx, scale, causal, err)
            if r is None:
                print(f"VARLEN-PLAN {dtype} {lens} causal={causal}: cuDNN declined", flush=True)
                continue
            sig = cudnn_varlen._pass("sdpa_varlen_bwd", q, k, cu, mx, mx, scale, causal)[-1]
            g = cudnn._graphs[sig]
            chosen = g.index
            print(f"VARLEN-PLAN {dtype} h={h} hkv={hkv} d={d} {lens} causal={causal}: chosen plan {chosen} {g.plan}; "
                  f"public call dq/dk/dv worst per sequence "
                  f"{[round(max(e), 4) for e in zip(*(worst(x, w, lens) for x, w in zip(r, want)))]}", flush=True)
            graph = g.graph
            n = graph.get_execution_plan_count()
            h_ = cudnn._handle(cudnn._load()[0], q.data.device_id, cp.cuda.get_current_stream().ptr).backend_handle
            for i in range(n):
                try:
                    graph.build_plan_at_index(i)
                    name = graph.get_plan_name_at_index(i)
                except Exception as e:
                    print(f"VARLEN-PLAN   plan {i}: does not build ({type(e).__name__})", flush=True)
                    continue
                for trial in range(2):
                    dq, dk, dv = (cp.full(x.shape, 7, x.dtype) for x in (q, k, v))   # 7: an unwritten row shows
                    ws = graph.get_workspace_size_plan_at_index(i)
                    buf = cp.full((max(ws, 1),), 0xAB if trial else 0, cp.uint8)   # garbage or zeros in the workspace
                    index = cudnn_varlen._index_arrays(q, k, cu, mx, mx, err)
                    ptrs = [a.data.ptr for a in index] + [
                        q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, do.data.ptr, lse.data.ptr,
                        dq.data.ptr, dk.data.ptr, dv.data.ptr]
                    try:
                        graph._execute_plan_at_index(dict(zip(g.uids, ptrs)), buf.data.ptr, i, h_)
                        cp.cuda.get_current_stream().synchronize()
                    except Exception as e:
                        print(f"VARLEN-PLAN   plan {i} {name}: does not run ({type(e).__name__}: {e})", flush=True)
                        break
                    errs = [worst(x, w, lens) for x, w in zip((dq, dk, dv), want)]
                    print(f"VARLEN-PLAN   plan {i} {name} ws={ws} {'0xAB' if trial else 'zeroed'} workspace: "
                          f"dq {[round(e, 4) for e in errs[0]]} dk {[round(e, 4) for e in errs[1]]} "
                          f"dv {[round(e, 4) for e in errs[2]]}", flush=True)
    cudakit.check()


if __name__ == "__main__":
    main()
