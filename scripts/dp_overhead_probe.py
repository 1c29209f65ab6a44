"""What data parallelism costs one GPU: examples/train_gpt.py's step plain, then with its data-parallel
path forced on over a one-rank NCCL group (GradSync's bucket copies, the bucket all-reduces, the
loss all-reduce: everything but a second GPU).

    python3 scripts/dp_overhead_probe.py [--preset gpt-issue] [--dtype bfloat16] [--steps 30] [--profile]
    cudakit run --nproc-per-node 2 scripts/dp_overhead_probe.py --profile   (the real data-parallel step)

Prints the example's summary line for each ("median step time ... host ... to queue the step"):
a step time that grows with the data-parallel path while its host time stays below it is a GPU
cost of the path; a host time near the step time says the step is host-bound.
"""
import argparse
import cProfile
import io
import os
import pstats
import sys

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29713")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import numpy as np  # noqa: E402
import train_common as common  # noqa: E402
import train_gpt as gpt  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="gpt-issue")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--profile", action="store_true", help="then 5 steps of each under cProfile")
    a = p.parse_args()
    device = common.Device("cuda")
    data = gpt.make_data(gpt.PRESETS[a.preset], 0)
    cfg = gpt.with_vocab(gpt.PRESETS[a.preset], data)

    def run(label):
        trainer = gpt.Trainer(cfg, device, a.dtype, 0)
        rng = np.random.default_rng(1)
        lines = []
        batch = lambda _i: tuple(device.asarray(x) for x in data.batch(rng, cfg.batch, cfg.seq))  # noqa: E731
        common.run(trainer.step, batch, a.steps, device, out=lines.append)
        print(f"DP-PROBE {label}: {lines[-1]}", flush=True)
        if a.profile:   # where the host time of a step goes: 5 steps under cProfile
            prof = cProfile.Profile()
            args = [batch(i) for i in range(5)]
            device.synchronize()
            prof.enable()
            for x in args:
                trainer.step(*x)
            prof.disable()
            device.synchronize()
            for key in ("tottime", "cumtime"):
                buf = io.StringIO()
                pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(28)
                print("\n".join(f"DP-PROF {label} " + ln for ln in buf.getvalue().splitlines()
                                if ln.strip() and "{" not in ln[:9]), flush=True)

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:   # under a launcher: the real data-parallel step
        run(f"data parallel, rank {os.environ.get('RANK')} of {os.environ['WORLD_SIZE']}")
        return
    run("plain")
    import cudakit.distributed as dist
    dist.init_process_group("nccl", world_size=1, rank=0, timeout=120)
    common.DataParallel.active = property(lambda self: True)   # the data-parallel path over one rank
    orig = common.DataParallel.__init__

    def init(self, *args, **kw):
        orig(self, *args, **kw)
        self.dist = dist
    common.DataParallel.__init__ = init
    run("data parallel, one rank")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
