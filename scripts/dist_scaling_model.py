"""A MODEL (not a measurement) of the data-parallel step time of the GPT example against GPU count.

    python scripts/dist_scaling_model.py [--busbw-node 255] [--busbw-net 25,50] [--latency-us 35]
                                         [--step-ms T] [--grad-bytes 4]

Weak scaling: every GPU runs the one-GPU step (the GPT example's gpt-issue preset: d_model 768, 4
layers, seq 1024, batch 8, vocab 8192: 41,722,368 parameters) and the gradients are all-reduced in
25 MiB buckets (cudakit.distributed.GradSync). Per step, with G gradient bytes, k buckets, N GPUs
and the all-reduce bus bandwidth B(N) (nccl-tests' busbw, measured):

    T_allreduce(N) = k * L + 2 (N - 1) / N * G / B(N)
    T_exposed(N)   = max(T_allreduce(N) - T_backward, 0) + 2 (N - 1) / N * G_last / B(N)
    T_step(N)      = T_step(1) + T_exposed(N),  efficiency = T_step(1) / T_step(N)

The buckets overlap the backward pass (T_backward ~ 2/3 of the step) except the last bucket
(G_last: the token embedding, the first gradient the backward finishes last), which can only
start when the backward has ended. B(N): inside one node (N <= 8) the NVLink figure, from more
nodes on the network's (every GPU with its own NIC). L: the latency of one all-reduce call.
Defaults: B = 255 GB/s inside a node and L = 35 us are the reference figures of issue 26
(torch.distributed on 2x H100 NVLink, 64 MB and 8 KB, 2026-11-26); the network figures (25 and 50
GB/s busbw, i.e. 200 and 400 Gb/s per GPU) are EXAMPLE VALUES, to be replaced by a measurement on
the cluster (scripts/dist_allreduce_bench.py under srun). --step-ms: the measured one-GPU step.
"""
import argparse
import math

PARAMS = 41_722_368          # the gpt-issue preset's parameter count (examples/train_gpt.py param_shapes)
LAST_BUCKET = 8192 * 768     # wte's elements: the bucket of the token embedding
BUCKET_BYTES = 25 * 2**20


def model(n, busbw_gbs, grad_bytes, latency_us, step_ms):
    g = PARAMS * grad_bytes
    k = math.ceil(g / BUCKET_BYTES)
    f = 2 * (n - 1) / n
    t_ar = (k * latency_us * 1e-3 + f * g / (busbw_gbs * 1e9) * 1e3) if n > 1 else 0.0
    t_last = f * LAST_BUCKET * grad_bytes / (busbw_gbs * 1e9) * 1e3 if n > 1 else 0.0
    out = {"n": n, "busbw": busbw_gbs, "allreduce_ms": t_ar, "last_ms": t_last}
    if step_ms:
        exposed = max(t_ar - step_ms * 2 / 3, 0.0) + t_last
        out.update(step_ms=step_ms + exposed, efficiency=step_ms / (step_ms + exposed))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--busbw-node", type=float, default=255.0, help="GB/s busbw inside a node (issue 26: 255)")
    p.add_argument("--busbw-net", default="25,50", help="GB/s busbw across nodes (EXAMPLE values)")
    p.add_argument("--latency-us", type=float, default=35.0, help="us per all-reduce call (issue 26: 35)")
    p.add_argument("--step-ms", type=float, default=None, help="the measured one-GPU step time (ms)")
    p.add_argument("--grad-bytes", type=int, default=4, help="bytes per gradient element (4: float32)")
    a = p.parse_args()
    print(f"MODEL, not a measurement: GPT gpt-issue preset, {PARAMS:,} parameters, "
          f"{PARAMS * a.grad_bytes / 1e6:.1f} MB of gradients, 25 MiB buckets")
    head = f"{'GPUs':>5} {'busbw GB/s':>10} {'all-reduce ms':>13} {'last bucket ms':>14}"
    print(head + (f" {'step ms':>8} {'efficiency':>10}" if a.step_ms else ""))
    for n in (8, 64, 512):
        bws = [a.busbw_node] if n <= 8 else [float(b) for b in a.busbw_net.split(",")]
        for bw in bws:
            r = model(n, bw, a.grad_bytes, a.latency_us, a.step_ms)
            line = f"{n:>5} {bw:>10.0f} {r['allreduce_ms']:>13.2f} {r['last_ms']:>14.2f}"
            if a.step_ms:
                line += f" {r['step_ms']:>8.2f} {r['efficiency']:>10.1%}"
            print(line)


if __name__ == "__main__":
    main()
