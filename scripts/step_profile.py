"""GPU time of one GPT training step (the `train` bench family's gpt-issue model, bf16) by kernel,
cudakit's (cudakit.profiler, eager step) next to torch's (torch.profiler, the same model in
torch.nn.functional), to see where a graphed step's time goes. Prints lines starting STEP-PROFILE.
    python scripts/step_profile.py [preset]"""
import collections
import dataclasses
import sys

import cupy as cp
import torch

import cudakit
from cudakit.bench.cases import train as tr
from cudakit.bench.case import Env


def main(preset="gpt-issue"):
    gpt = tr.load_example("train_gpt")
    cfg = dataclasses.replace(gpt.PRESETS[preset], dropout=0.0)
    model = tr._Model("gpt", cfg)
    ex = model.ex
    device = ex.common.Device("cuda")
    batch = tuple(device.asarray(a) for a in model.batch())
    trainer = model.trainer(device, "bfloat16", False)
    for _ in range(3):
        trainer.step(*batch)
    cp.cuda.Device().synchronize()
    with cudakit.profile() as prof:
        trainer.step(*batch)
    ours = collections.Counter()
    for r in prof.records:
        if r.kind == "kernel" and r.duration_ms:
            ours[r.name[:60]] += r.duration_ms
    total = sum(ours.values())
    print(f"STEP-PROFILE cudakit total {total:.3f} ms over {len(prof.records)} records")
    for name, ms in ours.most_common(25):
        print(f"STEP-PROFILE cudakit {ms:8.3f} ms {100 * ms / total:5.1f}%  {name}")
    loss_fn, opt = model.torch_side(torch, trainer, False)
    tb = tuple(torch.from_dlpack(b) for b in batch)
    from cudakit.bench.cases import _torch_train as tt
    step = tt.eager_step(loss_fn, opt)
    for _ in range(3):
        step(*tb)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        step(*tb)
        torch.cuda.synchronize()
    theirs = collections.Counter()
    for e in p.events():
        if e.device_type.name == "CUDA":
            theirs[e.name[:60]] += e.device_time_total / 1000 if hasattr(e, "device_time_total") else e.cuda_time_total / 1000
    total_t = sum(theirs.values())
    print(f"STEP-PROFILE torch total {total_t:.3f} ms")
    for name, ms in theirs.most_common(25):
        print(f"STEP-PROFILE torch {ms:8.3f} ms {100 * ms / total_t:5.1f}%  {name}")


if __name__ == "__main__":
    main(*sys.argv[1:])
