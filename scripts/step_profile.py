"""GPU time of one training step of the `train` bench family's models by kernel, cudakit's
(eager step) next to torch's (the same model in torch.nn.functional), both from
torch.profiler, to see where a step's time goes. Prints lines starting STEP-PROFILE.
    python scripts/step_profile.py [model] [dtype]
model: gpt-issue (default), host-bound (GPT presets), cnn or cnn-nhwc (the CNN's issue preset, NCHW or
channels-last images); dtype: bfloat16 (default) or float32 (the CNN: cudakit in tf32, torch's defaults)."""
import collections
import dataclasses
import sys

import cupy as cp
import torch

import cudakit
from cudakit.bench.cases import train as tr


def _model(name: str):
    if name.startswith("cnn"):
        cnn = tr.load_example("train_cnn")
        return tr._Model("cnn", cnn.PRESETS["issue"], channels_last=name == "cnn-nhwc")
    gpt = tr.load_example("train_gpt")
    return tr._Model("gpt", dataclasses.replace(gpt.PRESETS[name], dropout=0.0))


def _table(who: str, totals: collections.Counter, counts: collections.Counter) -> None:
    total = sum(totals.values())
    print(f"STEP-PROFILE {who} total {total:.3f} ms of kernels, {sum(counts.values())} launches")
    for name, ms in totals.most_common(30):
        print(f"STEP-PROFILE {who} {ms:8.3f} ms {100 * ms / total:5.1f}% x{counts[name]:<3d} {name}")


def _kernel_times(step):
    """({kernel name: ms}, {kernel name: launches}) of one step, from torch.profiler (CUPTI sees
    every kernel of the process, CuPy's and cuDNN's included, so both sides are timed alike)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        step()
        torch.cuda.synchronize()
    times, counts = collections.Counter(), collections.Counter()
    for e in p.events():
        if e.device_type.name == "CUDA":
            name = e.name[:70]
            times[name] += (e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total) / 1000
            counts[name] += 1
    return times, counts


def main(name="gpt-issue", dtype="bfloat16"):
    model = _model(name)
    device = model.ex.common.Device("cuda")
    trainer = model.trainer(device, dtype, False)
    batch = model.device_batch(trainer, device, model.batch(), dtype)
    if dtype == "float32":
        cudakit.set_float32_precision("tf32")
    for _ in range(3):
        trainer.step(*batch)
    cp.cuda.Device().synchronize()
    _table("cudakit", *_kernel_times(lambda: trainer.step(*batch)))
    loss_fn, opt = model.torch_side(torch, trainer, False)
    tb = tuple(torch.from_dlpack(b) for b in batch)
    from cudakit.bench.cases import _torch_train as tt
    step = tt.eager_step(loss_fn, opt)
    for _ in range(3):
        step(*tb)
    torch.cuda.synchronize()
    _table("torch", *_kernel_times(lambda: step(*tb)))


if __name__ == "__main__":
    main(*sys.argv[1:])
