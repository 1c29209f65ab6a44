"""Every cuDNN execution plan of a few signatures, timed two ways: back-to-back batches behind a
spin kernel (paths.time_per_call, how _pick_plan chooses) and one call at a time behind an L2 flush
(how `cudakit bench --l2 cold` times a call), next to torch on the same inputs. Does the plan choice
depend on how it is timed? Prints lines starting with PLAN-PROBE.

    python3 scripts/cudnn_plan_probe.py [f32 | nhwc]

f32: the float32 convolutions only; nhwc: the bfloat16 3x3 ResNet-50 convolutions on channels-last
activations (torch's channels_last beside them) that ran below torch in the 05:39 UTC benchmark of
2026-11-27: the paths cudakit chose, and every plan of their fprop, dgrad and wgrad graphs.
"""
import statistics

import cupy as cp

import cudakit
from cudakit import dispatch
from cudakit.kernels import cudnn, paths


def isolated_ms(fn, reps=25):
    flush = paths.cold_start(cp)
    s = cp.cuda.get_current_stream()
    out = []
    fn()
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        flush()
        a.record(s)
        fn()
        b.record(s)
        b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b))
    return statistics.median(out)


def plans(sig_kind, ptrs, label, torch_fn, error=None, top=None):
    """error(): the largest error of the output the plan just wrote (printed per plan), or None;
    top: only the `top` fastest plans (isolated), fastest first; else every plan in index order."""
    keys = [k for k, g in cudnn._graphs.items() if isinstance(k, tuple) and k[0] == sig_kind and isinstance(g, cudnn._Graph)]
    if not keys:
        print(f"PLAN-PROBE {label}: no {sig_kind} graph built ({cudnn.declined()})")
        return
    g = cudnn._graphs[keys[-1]]
    graph = g.graph
    h = cudnn._handle(cudnn._load()[0], cp.cuda.runtime.getDevice(), cp.cuda.get_current_stream().ptr).backend_handle
    print(f"PLAN-PROBE {label}: chosen plan {g.index} {g.plan}; torch isolated {isolated_ms(torch_fn):.4f} ms, "
          f"batched {paths.time_per_call(torch_fn):.4f} ms")
    lines = []
    for i in range(graph.get_execution_plan_count()):
        try:
            graph.build_plan_at_index(i)
            ws = graph.get_workspace_size_plan_at_index(i)
            buf = cp.empty((max(ws, 1),), cp.uint8)
            pack = dict(zip(g.uids, ptrs))
            run = lambda: graph._execute_plan_at_index(pack, buf.data.ptr if ws else 0, i, h)  # noqa: E731
            run()
            err = "" if error is None else f", error {error():.2e}"
            name = graph.get_plan_name_at_index(i)
            iso = isolated_ms(run, reps=25 if top is None else 10)
            lines.append((iso, f"PLAN-PROBE {label}: plan {i} {name}: batched {paths.time_per_call(run):.4f} ms, "
                               f"isolated {iso:.4f} ms{err}"))
        except Exception as e:   # noqa: BLE001 -- a plan that does not build or run here
            if top is None:
                lines.append((0.0, f"PLAN-PROBE {label}: plan {i}: {type(e).__name__}: {str(e)[:100]}"))
    for _, line in (sorted(lines)[:top] if top else lines):
        print(line)


def nhwc():
    """The channels-last 3x3 convolutions, with the weight given to cuDNN C-contiguous and as
    (K, R, S, C) memory (the paths "cudnn" and "cudnn-krsc", forced): times against torch, the 3
    fastest plans of each graph."""
    import torch
    cl = torch.channels_last
    want = ["cudnn"]   # (the forced path's name)
    def forced(op, key, cands, timer=None):   # (recorded as paths.run records it: the dispatch plans replay it)
        name = want[0] if want[0] in dict(cands) else cands[0][0]
        paths._choice[(op, key)] = paths._last[op] = name
        return dict(cands)[name]()
    paths.run = forced
    for c, hw, kk, stride in ((512, 7, 512, 1), (512, 14, 512, 2), (128, 28, 128, 1)):
        ho = (hw + 2 - 3) // stride + 1
        x = torch.randn(32, c, hw, hw, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=cl)
        w = torch.randn(kk, c, 3, 3, device="cuda", dtype=torch.bfloat16) * (9 * c) ** -0.5
        g = torch.randn(32, kk, ho, ho, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=cl)
        cx, cw, cg = (cp.from_dlpack(t) for t in (x, w, g))
        rx, rw = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        ty = torch.nn.functional.conv2d(rx, rw, None, stride, 1)
        tfwd = lambda: torch.nn.functional.conv2d(x, w, None, stride, 1)  # noqa: E731
        tback = lambda: torch.autograd.grad(ty, (rx, rw), g, retain_graph=True)  # noqa: E731
        for flag in (False, True):
            want[0] = "cudnn-krsc" if flag else "cudnn"
            label = f"nhwc 3x3 {c}->{kk} {hw}x{hw} s{stride} bf16 weight {'KRSC' if flag else 'KCRS'}"
            cudnn._graphs.clear()
            dispatch.clear()
            y = cudakit.conv2d(cx, cw, None, stride, 1)
            gx, gw, _ = cudakit.conv2d_backward(cg, cx, cw, stride, 1, bias=False)
            fwd = lambda: cudakit.conv2d(cx, cw, None, stride, 1)  # noqa: E731
            back = lambda: cudakit.conv2d_backward(cg, cx, cw, stride, 1, bias=False)  # noqa: E731
            print(f"PLAN-PROBE {label}: {want[0]} (forced); forward isolated {isolated_ms(fwd):.4f} ms (torch "
                  f"{isolated_ms(tfwd):.4f}), backward {isolated_ms(back):.4f} ms (torch {isolated_ms(tback):.4f})")
            wk = cudnn.as_weight_layout(cw, flag)   # the weight, and dL/dw's buffer, as the graphs take them
            gwk = cudnn.new_nchw(cw.shape, cw.dtype, flag)
            plans("conv_fprop", [cx.data.ptr, wk.data.ptr, y.data.ptr], f"{label} fprop", tfwd, top=3)
            plans("conv_dgrad", [cg.data.ptr, wk.data.ptr, gx.data.ptr], f"{label} dgrad",
                  lambda: torch.autograd.grad(ty, (rx,), g, retain_graph=True), top=3)
            plans("conv_wgrad", [cx.data.ptr, cg.data.ptr, gwk.data.ptr], f"{label} wgrad",
                  lambda: torch.autograd.grad(ty, (rw,), g, retain_graph=True), top=3)
            del wk, gwk


def main(only_f32: bool = False):
    import torch
    for dt in (() if only_f32 else ("bfloat16", "float16")):
        tdt = getattr(torch, dt)
        q, k, v = (torch.randn(16, 16, 1024, 64, device="cuda", dtype=tdt) for _ in range(3))
        cq, ck, cv = (cp.from_dlpack(t) for t in (q, k, v))
        out = cudakit.attention(cq, ck, cv, causal=True)
        print(f"PLAN-PROBE attention causal 16x16x1024x64 {dt}: path {paths.last_paths().get('attention')}")
        plans("sdpa_fwd_inf", [cq.data.ptr, ck.data.ptr, cv.data.ptr, out.data.ptr], f"sdpa causal {dt}",
              lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
        cudnn._graphs.clear()
    for c, hw, kk in (() if only_f32 else ((64, 56, 64), (256, 56, 64), (512, 28, 128), (1024, 14, 256))):
        x = torch.randn(32, c, hw, hw, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(kk, c, 1, 1, device="cuda", dtype=torch.bfloat16) * c ** -0.5
        cx, cw = cp.from_dlpack(x), cp.from_dlpack(w)
        y = cudakit.conv2d(cx, cw)
        call = lambda: cudakit.conv2d(cx, cw)  # noqa: E731 -- the chosen path, as the benchmark calls it
        print(f"PLAN-PROBE conv 1x1 {c}->{kk} {hw}x{hw} bf16: path {paths.last_paths().get('conv2d')}, "
              f"batched {paths.time_per_call(call):.4f} ms, isolated {isolated_ms(call):.4f} ms")
        g = torch.randn(32, kk, hw, hw, device="cuda", dtype=torch.bfloat16)
        cg = cp.from_dlpack(g)
        back = lambda: cudakit.conv2d_backward(cg, cx, cw, bias=False)  # noqa: E731
        back()
        rx, rw = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        ty = torch.nn.functional.conv2d(rx, rw)
        tback = lambda: torch.autograd.grad(ty, (rx, rw), g, retain_graph=True)  # noqa: E731
        print(f"PLAN-PROBE conv 1x1 {c}->{kk} {hw}x{hw} bf16 backward: dgrad {paths.last_paths().get('conv2d_input_grad')}"
              f" wgrad {paths.last_paths().get('conv2d_weight_grad')}, batched {paths.time_per_call(back):.4f} ms, "
              f"isolated {isolated_ms(back):.4f} ms; torch batched {paths.time_per_call(tback):.4f} ms, "
              f"isolated {isolated_ms(tback):.4f} ms")
        plans("conv_fprop", [cx.data.ptr, cw.data.ptr, y.data.ptr], f"conv1x1 {c}->{kk}",
              lambda: torch.nn.functional.conv2d(x, w))
        cudnn._graphs.clear()
    # float32 under "ieee" (cuDNN's exact plans) against torch's strict FP32 (TF32 off), 1x1 and 3x3
    old = cudakit.set_float32_precision("ieee")
    torch.backends.cudnn.allow_tf32 = False
    try:
        # "ieee" (tensor-core notes left out, FFT and Winograd plans kept: cuDNN's FP32 math, what
        # torch's strict FP32 runs), then direct plans only (FFT and Winograd left out too). Each
        # plan's largest error against float64, over the sum of |x| |w| products (how far do
        # Winograd or FFT plans stray, against the direct ones and torch's)
        exact_notes = cudnn._INEXACT_NOTES
        for c, hw, kk, r in ((64, 56, 64, 1), (128, 28, 512, 1), (128, 28, 128, 3), (512, 7, 512, 3)):
            x = torch.randn(32, c, hw, hw, device="cuda")
            w = torch.randn(kk, c, r, r, device="cuda") * (c * r * r) ** -0.5
            cx, cw = cp.from_dlpack(x), cp.from_dlpack(w)
            ref = torch.nn.functional.conv2d(x.double(), w.double(), None, 1, r // 2)
            mag = torch.nn.functional.conv2d(x.double().abs(), w.double().abs(), None, 1, r // 2)
            t_err = float(((torch.nn.functional.conv2d(x, w, None, 1, r // 2).double() - ref).abs() / mag).max())
            print(f"PLAN-PROBE conv {r}x{r} {c}->{kk} {hw}x{hw}: torch strict FP32 error {t_err:.2e}")
            for tag, notes in (("ieee", exact_notes), ("direct", exact_notes + cudnn._TRANSFORM_NOTES)):
                cudnn._INEXACT_NOTES = notes
                dispatch.clear()   # else the call replays the previous graph's plan and builds none
                y = cudakit.conv2d(cx, cw, None, 1, r // 2)
                print(f"PLAN-PROBE conv {r}x{r} {c}->{kk} {hw}x{hw} float32 {tag}: path {paths.last_paths().get('conv2d')}")
                ty = torch.from_dlpack(y)
                plans("conv_fprop", [cx.data.ptr, cw.data.ptr, y.data.ptr], f"conv{r}x{r} f32 {tag} {c}->{kk} {hw}",
                      lambda: torch.nn.functional.conv2d(x, w, None, 1, r // 2),
                      error=lambda: float(((ty.double() - ref).abs() / mag).max()))
                cudnn._graphs.clear()
        cudnn._INEXACT_NOTES = exact_notes
    finally:
        cudakit.set_float32_precision(old)


if __name__ == "__main__":
    import sys
    if "nhwc" in sys.argv[1:]:
        nhwc()
    else:
        main(only_f32="f32" in sys.argv[1:])
