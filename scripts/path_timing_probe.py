"""Signatures whose chosen path lost to torch in a benchmark run: each candidate path (cuDNN,
Triton) forced in turn (its own dispatch plan, warmed up, then replayed) and timed as paths.run
times it (paths.time_per_call) and as the benchmark times a call (one call behind an L2 flush and a
spin: bench.timing cold), next to torch, in one process; the choice's own trials are logged
(CUDAKIT_AUTOTUNE_LOG). Prints PATH-PROBE lines.

    CUDAKIT_AUTOTUNE_LOG=1 python3 scripts/path_timing_probe.py
"""
import logging
import sys

import cupy as cp
import torch

import cudakit
from cudakit import dispatch
from cudakit.bench import timing
from cudakit.kernels import paths

logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="PATH-PROBE log %(message)s")


def bench_ms(fns: dict) -> dict:
    res, err = timing.time_gpu_interleaved(fns, warmup=3, reps=30, rounds=3, cold=True)
    for n, e in err.items():
        print(f"PATH-PROBE   {n} failed: {type(e).__name__}: {e}")
    return res


def probe(label: str, ops: tuple, ours, theirs, prec=None):
    """ours(), theirs(): the call of cudakit and torch; ops: the path ops whose choice is forced."""
    old = cudakit.set_float32_precision(prec) if prec else None
    try:
        ours()
        keys = [k for k in list(paths._choice) if k[0] in ops]
        chosen = {k: paths._choice[k] for k in keys}
        print(f"PATH-PROBE {label}: chosen {sorted(set(chosen.values()))} for {len(keys)} signatures")
        res = {"torch": bench_ms({"torch": theirs}).get("torch")}
        tpc = {"torch": paths.time_per_call(theirs)}
        for name in ("chosen", "cudnn", "triton"):   # each path forced in turn: its own plan, warmed up, replayed
            for k in keys:
                paths._choice[k] = chosen[k] if name == "chosen" else name
            dispatch.clear()
            try:
                ours()
                res[name] = bench_ms({name: ours}).get(name)
                tpc[name] = paths.time_per_call(ours)
            except Exception as e:  # noqa: BLE001 -- a path that declines the call
                print(f"PATH-PROBE {label}: {name} failed: {type(e).__name__}: {e}")
        paths._choice.update(chosen)
        dispatch.clear()
        for name, r in res.items():
            if r is not None and name in tpc:
                print(f"PATH-PROBE {label}: {name:<7} bench median {r['median_ms']:.4f} p10 {r['p10_ms']:.4f} "
                      f"exposed {r.get('host_exposed_runs', 0):2d}; time_per_call {tpc[name]:.4f} ms")
    finally:
        if prec:
            cudakit.set_float32_precision(old)


def main():
    # bf16 channels-last 1x1 64->64 56x56 forward (0.131x on 2026-11-27, Triton chosen)
    x = torch.randn(32, 64, 56, 56, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 64, 1, 1, device="cuda", dtype=torch.bfloat16) * 0.125
    cx, cw = cp.from_dlpack(x), cp.from_dlpack(w)
    probe("nhwc bf16 1x1 64->64 56 fwd", ("conv2d",), lambda: cudakit.conv2d(cx, cw),
          lambda: torch.nn.functional.conv2d(x, w))
    # float32 tf32 1x1 512->128 28x28 backward (0.553x)
    x = torch.randn(32, 512, 28, 28, device="cuda")
    w = torch.randn(128, 512, 1, 1, device="cuda") * 512 ** -0.5
    g = torch.randn(32, 128, 28, 28, device="cuda")
    cx, cw, cg = (cp.from_dlpack(t) for t in (x, w, g))
    rx, rw = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    with torch.backends.cudnn.flags(allow_tf32=True):
        ty = torch.nn.functional.conv2d(rx, rw)
    probe("tf32 1x1 512->128 28 bwd", ("conv2d_input_grad", "conv2d_weight_grad"),
          lambda: cudakit.conv2d_backward(cg, cx, cw, bias=False),
          lambda: torch.autograd.grad(ty, (rx, rw), g, retain_graph=True), prec="tf32")
    # bf16 causal attention 16x16x1024x64 forward (0.81x, Triton chosen)
    q, k, v = (torch.randn(16, 16, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cq, ck, cv = (cp.from_dlpack(t) for t in (q, k, v))
    probe("attention bf16 causal 16x16x1024x64 fwd", ("attention",),
          lambda: cudakit.attention(cq, ck, cv, causal=True),
          lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
    # bf16 NCHW 3x3 512->512 14x14 stride 2 forward (0.714x, 18 of 30 samples host-exposed)
    x = torch.randn(32, 512, 14, 14, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(512, 512, 3, 3, device="cuda", dtype=torch.bfloat16) * (9 * 512) ** -0.5
    cx, cw = cp.from_dlpack(x), cp.from_dlpack(w)
    probe("bf16 3x3 512->512 14 s2 fwd", ("conv2d",), lambda: cudakit.conv2d(cx, cw, None, 2, 1),
          lambda: torch.nn.functional.conv2d(x, w, None, 2, 1))
    host = timing.host_time_interleaved({"cudakit": lambda: cudakit.conv2d(cx, cw, None, 2, 1),
                                         "torch": lambda: torch.nn.functional.conv2d(x, w, None, 2, 1)},
                                        calls=200, rounds=3)[0]
    print("PATH-PROBE bf16 3x3 512->512 14 s2 fwd host us per call: "
          + ", ".join(f"{n} {r['median_ms'] * 1e3:.1f}" for n, r in host.items()))


def nhwc_backward_host():
    """The channels-last 1x1 512->256 28x28 bf16 backward (0.169x on 2026-11-27 05:31 UTC, its cuDNN
    wgrad candidate timed 0.854 ms against its plan's 0.0287 ms): each cuDNN pass called directly,
    its host time per call (no synchronisation) and where a profile puts it."""
    import cProfile
    import pstats
    import time

    from cudakit.kernels import cudnn
    x = torch.randn(32, 512, 28, 28, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    g = torch.randn(32, 256, 28, 28, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.randn(256, 512, 1, 1, device="cuda", dtype=torch.bfloat16) * 512 ** -0.5
    cx, cg, cw = (cp.from_dlpack(t) for t in (x, g, w))
    geo = (1, 1, 0, 0, 1, 1, 1, 1, 28, 28)
    calls = {"wgrad nhwc": lambda: cudnn.conv_wgrad(cg, cx, (256, 512, 1, 1), geo, False),
             "dgrad nhwc": lambda: cudnn.conv_dgrad(cg, cw, (32, 512, 28, 28), geo),
             "wgrad nchw": lambda: cudnn.conv_wgrad(cp.ascontiguousarray(cg), cp.ascontiguousarray(cx),
                                                    (256, 512, 1, 1), geo, False),
             "conv2d_backward nhwc": lambda: cudakit.conv2d_backward(cg, cx, cw, bias=False)}
    for name, fn in calls.items():
        fn()
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        for _ in range(50):
            fn()
        host = (time.perf_counter() - t) / 50 * 1e3
        cp.cuda.Device().synchronize()
        print(f"PATH-PROBE nhwc bwd {name}: host {host:.3f} ms a call, time_per_call {paths.time_per_call(fn):.4f} ms, "
              f"bench {bench_ms({name: fn})[name]['median_ms']:.4f} ms")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(20):
        calls["wgrad nhwc"]()
    prof.disable()
    cp.cuda.Device().synchronize()
    st = pstats.Stats(prof)
    st.sort_stats("cumulative")
    import io
    out = io.StringIO()
    st.stream = out
    st.print_stats(15)
    for line in out.getvalue().splitlines():
        if line.strip():
            print("PATH-PROBE prof", line[:160])


if __name__ == "__main__":
    if "--nhwc" in sys.argv[1:]:
        nhwc_backward_host()
    else:
        main()
