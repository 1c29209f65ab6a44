"""Where the host time of attention on cuDNN's graphs goes, on a small bfloat16 shape (B2 H4 S128
D64, a (1, H, L, L) bias, the path held to cuDNN): the call, its plan's parts (the output
allocations by cupy.ndarray and by the native module's nd_empty, the executor's run, the raw
launch on a fixed handle and workspace, the handle lookup, a workspace's allocation from the pool)
and the plain forward on cuDNN, beside torch's SDPA with and without the bias, rounds interleaved in
one process.
    python3 benchmarks/sweeps/attention_bias_host_parts.py [--out f.json]
Prints a PROBE line (us a call) and writes it as a row to --out. (Its first version,
scripts/cudnn_host_parts_probe.py at 2026-11-28 22:56 UTC, also checked that cuDNN's dropout graphs
take the Seed and Offset by value, bit for bit as with device words: now kernels/cudnn.py
dropout_operands, tested in tests/gpu/test_cudnn_gpu.py.)"""
import math
import sys

import cupy as cp
import torch
from _results import dump_rows

import cudakit
from cudakit import dispatch
from cudakit.bench import timing
from cudakit.kernels import cudnn, path_plans, paths
from cudakit.runtime import native

sync = cp.cuda.Device().synchronize
sdpa = torch.nn.functional.scaled_dot_product_attention


def host(fns, calls=400, rounds=5):
    res, err = timing.host_time_interleaved(fns, calls=calls, rounds=rounds, sync=sync)
    for name, e in err.items():
        print(f"PROBE failed {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
    return {n: r["median_ms"] * 1e3 for n, r in res.items()}


# ---- bias: the plan's parts ----------------------------------------------------------------------
rng = cp.random.default_rng(0)
B, H, T, D = 2, 4, 128, 64
q, k, v = (rng.standard_normal((B, H, T, D), dtype=cp.float32).astype("bfloat16") for _ in range(3))
bias = rng.standard_normal((1, H, T, T), dtype=cp.float32).astype("bfloat16")
tq, tk, tv, tb = (torch.from_dlpack(a) for a in (q, k, v, bias))
real_run = paths.run
paths.run = lambda op, key, cands, timer=None: real_run(op, key, [c for c in cands if c[0] == "cudnn"] or cands, timer)
dispatch.clear()
out, lse = cudakit.attention_with_lse(q, k, v, attn_bias=bias)
cudakit.attention_with_lse(q, k, v)
print(f"PROBE bias paths {paths.last_paths()}", flush=True)
run, b4 = path_plans._bias_cudnn("fwd", (q, k, v), None, False, "bhld", None, None, bias)
sig = cudnn.bias_sig("fwd", (cudnn.contiguous_desc(q.shape),) * 4, cudnn.bias_desc(b4, T), "bfloat16",
                     1 / math.sqrt(D), False, 0)
gr = cudnn._graphs.get(sig)
cud = cudnn._load()[0]
h = cudnn._handle(cud, 0, cp.cuda.get_current_stream().ptr).backend_handle
ws = cp.empty((max(gr.workspace, 1),), cp.uint8) if isinstance(gr, cudnn._Graph) else None
ptrs = (q.data.ptr, k.data.ptr, v.data.ptr, bias.data.ptr, out.data.ptr, lse.data.ptr)
nd, empty = cp.ndarray, native.empty_fn()
parts = {"call": lambda: cudakit.attention_with_lse(q, k, v, attn_bias=bias),
         "plain_call": lambda: cudakit.attention_with_lse(q, k, v),
         "alloc_out_lse": lambda: (nd(q.shape, q.dtype), nd((B, H, T), cp.float32)),
         "alloc_out_lse_native": lambda: (empty(q.shape, q.dtype), empty((B, H, T), cp.float32)),
         "executor_run": lambda: run(*ptrs),
         "handle": lambda: cudnn._handle(cud, 0, cp.cuda.get_current_stream().ptr).backend_handle,
         "torch_fwd": lambda: sdpa(tq, tk, tv, attn_mask=tb),
         "torch_plain_fwd": lambda: sdpa(tq, tk, tv)}
if isinstance(gr, cudnn._Graph):
    parts["raw_launch"] = lambda: gr.launch(ptrs, ws.data.ptr, h)
    parts["workspace_alloc"] = lambda: cp.empty((gr.workspace,), cp.uint8)
    print(f"PROBE bias graph workspace {gr.workspace} bytes, plan {gr.plan}", flush=True)
t = host(parts)
print("PROBE bias host us: " + " ".join(f"{n} {x:.2f}" for n, x in t.items())
      + f"; plans {[(key[0], getattr(p, '__module__', type(p).__name__)) for key, p in dispatch._plans.items()]}",
      flush=True)
dump_rows(sys.argv[1:], __doc__, [{**{f"{n}_us": round(x, 3) for n, x in t.items()},
                                   "x_torch_fwd": round(t["torch_fwd"] / t["call"], 3),
                                   "workspace_bytes": getattr(gr, "workspace", None),
                                   "plan": getattr(gr, "plan", None)}])
