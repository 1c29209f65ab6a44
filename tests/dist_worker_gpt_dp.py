"""A rank of the data-parallel GPT check (launched by `cudakit run`): the gradients each rank gets
from examples/train_gpt.py's data-parallel path (its backward's hook into GradSync's buckets)
equal the gradients of one process on the ranks' batches combined, within float32 rounding.

    cudakit run --nproc-per-node N tests/dist_worker_gpt_dp.py cpu|cuda
Prints `GPT-DP-OK <max relative error>` on each rank."""
import os
import sys
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import train_common as common  # noqa: E402
import train_gpt as gpt  # noqa: E402

device = common.Device(sys.argv[1])
base = replace(gpt.PRESETS["tiny"], dropout=0.0)
data = gpt.make_data(base, 0)
cfg = gpt.with_vocab(base, data)
dp = common.DataParallel(device)
params = gpt.init_params(cfg, 0, device, "float32")
batches = [data.batch(np.random.default_rng(100 + r), cfg.batch, cfg.seq) for r in range(dp.world)]
dp.attach(params)
names = sorted(params)
synced = {}
for step in range(2):   # the first step learns the gradients' order, the second fills buckets as they come
    _, cache = gpt.forward(params, tuple(device.asarray(a) for a in batches[dp.rank]), cfg, 0, device.xp)
    synced[step] = dict(zip(names, (g.copy() for g in dp.gradients(lambda hook: gpt.backward(cache, hook), names))))
combined = tuple(device.asarray(np.concatenate([b[i] for b in batches])) for i in range(2))
_, cache = gpt.forward(params, combined, replace(cfg, batch=cfg.batch * dp.world), 0, device.xp)
want = gpt.backward(cache)
worst = 0.0
for step in range(2):
    for n in names:
        a, b = device.to_numpy(synced[step][n]).astype(np.float64), device.to_numpy(want[n]).astype(np.float64)
        worst = max(worst, float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)))
if worst > 1e-5:
    raise SystemExit(f"rank {dp.rank}: synced gradients differ from the combined batch's by {worst:.3g}")
print(f"GPT-DP-OK {worst:.3g}", flush=True)
dp.close()
