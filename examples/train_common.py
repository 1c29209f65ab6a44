"""What train_gpt.py and train_cnn.py share: the command line, the arrays of a backend, and the
training loop that prints one line per step.

Every step prints `step N loss X time T ms`: the loss is read (a device-to-host copy, which waits
for the step) after the step has been queued, never inside it, so the same step function can be
captured in a CUDA graph; T is the wall-clock time from queueing the step to having its loss.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import numpy as np

import cudakit

DTYPES = ("float32", "bfloat16", "float16")


def np_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a dtype name; bfloat16 is ml_dtypes.bfloat16, as cudakit uses it."""
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


class Device:
    """The arrays of one cudakit backend: NumPy for "cpu", CuPy for "cuda".

    xp: the array module (numpy or cupy), used only where cudakit has no op (indexing a table,
    making a one-hot matrix); every computation of the models goes through cudakit's ops.
    """

    def __init__(self, name: str):
        self.backend = cudakit.get_backend(name)   # BackendUnavailableError says why when there is no GPU
        self.name = self.backend.name
        if self.name == "cuda":
            import cupy
            self.xp = cupy
        else:
            self.xp = np

    def asarray(self, host_array):
        """A copy of a NumPy array on this backend (the array itself on the CPU)."""
        return self.backend.asarray(host_array)

    def to_numpy(self, x) -> np.ndarray:
        return self.backend.to_numpy(x)

    def synchronize(self) -> None:
        self.backend.synchronize()


class DataParallel:
    """Data-parallel training when the script was started by a launcher (`cudakit run
    --nproc-per-node N`, torchrun, mpirun, srun: WORLD_SIZE > 1), else a single process.

    Each rank draws its own batches (seed + rank), computes its gradients, and `GradSync` averages
    them across the ranks in ~25 MiB buckets: a bucket's all-reduce starts on a communication
    stream as soon as the backward has produced its last gradient (`hook(name, grad)`), so it
    overlaps the rest of the backward. The parameters start equal (broadcast from rank 0), so every
    rank takes the same optimizer step. NCCL on the GPU, the store-based CPU backend otherwise.
    """

    def __init__(self, device: Device, bucket_mb: float = 25.0, tail_bucket_mb: float = 1.0, copy: bool = True,
                 peer: bool = True, zero: bool = False):
        self.world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        self.rank = 0
        self.sync = None
        self.bucket_bytes, self.tail_bytes = int(bucket_mb * 2**20), int(tail_bucket_mb * 2**20)
        self.copy, self.peer = copy, peer   # peer=False: NCCL only (a step captured in a CUDA graph)
        self.zero, self._zero = zero, None   # zero: the optimizer state sharded (ZeroRedundancyOptimizer)
        self._eager_done, self._graphed = False, None   # run_step's first eager step and captured graph
        if self.world > 1:
            import cudakit.distributed as dist
            self.dist = dist
            dist.init_process_group("nccl" if device.name == "cuda" else "cpu")
            self.rank = dist.get_rank()

    @property
    def active(self) -> bool:
        return self.world > 1

    def attach(self, params: dict, optimizer_over=None) -> dict:
        """Make every rank's parameters rank 0's and return the parameters the model uses: `params`
        (updated in place), or with zero=True views into the buckets of a ZeroRedundancyOptimizer
        built by optimizer_over(arrays) -> an optimizer over those arrays (its state sharded: each
        rank keeps and steps 1/N of it)."""
        self.params = params
        if self.active:
            if self.zero:
                self._zero = self.dist.ZeroRedundancyOptimizer(params, optimizer_over,   # broadcasts rank 0's
                                                               bucket_bytes=self.bucket_bytes)
                self.params = self._zero.params
                if self.rank == 0:
                    print(f"data parallel: optimizer state sharded over {self.world} ranks ({len(self._zero.buckets)} "
                          f"buckets; each rank steps {self._zero.shard_elements()} elements)", flush=True)
            else:
                self.dist.broadcast_parameters([params[n] for n in sorted(params)])
        return self.params

    def gradients(self, run_backward, names: list, wait: bool = True) -> list | None:
        """The gradients of `names`, averaged over the ranks. run_backward(hook) runs the backward,
        calling hook(name, grad) as each gradient is produced (None: no hook), and returns them as
        a dict in that order. The first step learns the order (its gradients are all-reduced after
        the backward); from then on each bucket's all-reduce starts as soon as it is complete.
        wait=False: leave the step open (self.sync.wait() ends it) and return None."""
        if self.sync is None:
            grads = run_backward(None)
            order = list(grads)[::-1]   # GradSync fills its buckets from the last index backwards
            self.sync = self.dist.GradSync({n: self.params[n] for n in order}, broadcast_from=None,
                                           bucket_bytes=self.bucket_bytes, tail_bucket_bytes=self.tail_bytes,
                                           copy=self.copy, peer=self.peer)
            if self.rank == 0:
                print(f"data parallel: {len(self.sync.buckets)} gradient buckets, all-reduced by "
                      f"{self.sync.transport_note}", flush=True)
            for n in reversed(order):
                self.sync.set_grad(n, grads[n])
        else:
            with cudakit.profiler.range("backward"):   # (in a --trace: what the all-reduces overlap)
                run_backward(self.sync.set_grad)
        if not wait:
            return None
        grads = self.sync.wait()   # {name: averaged gradient}
        return [grads[n] for n in names]

    def step(self, run_backward, names: list, make_optimizer) -> None:
        """One data-parallel backward and optimizer step: run_backward(hook) as for gradients();
        make_optimizer(names) -> an optimizer over those parameters (its step(grads) taking their
        gradients in that order), called on the first step. The optimizer steps in two parts: the
        parameters of the last bucket (the backward's last gradients: its all-reduce has no
        backward left to hide under) after that bucket, all the others before it, while it still
        reduces (the optimizer's state is per parameter: two parts step exactly as one would).
        zero=True: the sharded optimizer takes each gradient as the backward produces it (a
        bucket's reduce_scatter starts once it is full), then steps this rank's shard and
        all-gathers the parameters."""
        if self._zero is not None:   # each bucket's reduce_scatter starts as the backward fills it
            with cudakit.profiler.range("backward"):
                run_backward(self._zero.set_grad)
            with cudakit.profiler.range("optimizer"):
                self._zero.step()
            return
        if self.sync is None:
            self.gradients(run_backward, names, wait=False)
            late = set(self.sync.bucket_params(-1))
            parts = [[n for n in names if n not in late], [n for n in names if n in late]]
            self._parts = [(p, make_optimizer(p)) for p in parts if p]
        else:
            with cudakit.profiler.range("backward"):   # (in a --trace: what the all-reduces overlap)
                run_backward(self.sync.set_grad)
        with cudakit.profiler.range("optimizer"):
            for k, (part, opt) in enumerate(self._parts):
                last = k == len(self._parts) - 1
                grads = self.sync.wait() if last else self.sync.wait_for(part)
                opt.step([grads[n] for n in part])

    def run_step(self, step_fn, batch: tuple, graph: bool):
        """step_fn(*batch), one whole data-parallel step. graph=True: the first call runs eagerly
        (it makes the gradient buckets, the optimizer state and the kernels' plans), the second
        captures step_fn in a CUDA graph (cudakit.graph, warmup=0: the capture is not a step) and
        replays it, every later call replays it: one launch of host time a step."""
        if not graph or not self._eager_done:
            self._eager_done = True
            return step_fn(*batch)
        if self._graphed is None:
            self._graphed = cudakit.graph(step_fn, *batch, warmup=0)
        return self._graphed(*batch)

    def close(self) -> None:
        """Leave the process group (the other ranks then see a clean exit, not a lost rank)."""
        if self.active:
            self.dist.destroy_process_group()

    def start_mean_loss(self, loss):
        """Start averaging the loss over the ranks (what each rank prints) on the communication
        stream, right after the forward: it runs ahead of the gradient buckets instead of holding
        the next step's stream after the optimizer. Returns what finish_mean_loss takes."""
        if not self.active:
            return loss, None
        buf = loss.reshape(1).copy()
        return buf, self.dist.all_reduce(buf, "avg", async_op=True)

    def finish_mean_loss(self, started):
        """The averaged loss (0-d) of start_mean_loss: the current stream waits for it (by then
        long done: it ran before the backward's buckets)."""
        buf, work = started
        if work is None:
            return buf
        work.wait()
        return buf.reshape(())

    def mean_loss(self, loss):
        """The loss averaged over the ranks, at once (start_mean_loss and finish_mean_loss)."""
        return self.finish_mean_loss(self.start_mean_loss(loss))


class GradHook(dict):
    """A gradient dict that reports each entry as it is set (the data-parallel hook)."""

    def __init__(self, hook=None):
        super().__init__()
        self._hook = hook

    def __setitem__(self, name, grad):
        super().__setitem__(name, grad)
        if self._hook is not None:
            self._hook(name, grad)


def parser(description: str, presets: dict) -> argparse.ArgumentParser:
    """The command line both examples take; presets: {name: config} (the first is the default)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto",
                   help="cudakit backend: cpu (NumPy), cuda (CuPy on a GPU), auto (cuda when a GPU is usable)")
    p.add_argument("--preset", choices=tuple(presets), default=next(iter(presets)), help="model and batch size")
    p.add_argument("--steps", type=_positive_int, default=30, help="training steps (default 30)")
    p.add_argument("--dtype", choices=DTYPES, default="float32",
                   help="parameter and activation dtype; 16-bit ones keep float32 master weights")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights, the data and dropout")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the preset's)")
    p.add_argument("--graph", action="store_true",
                   help="capture the forward and backward pass in a CUDA graph (cudakit.graph) and replay it "
                        "every step (needs --backend cuda); data parallel: the whole step with its NCCL "
                        "all-reduces, from the second step on")
    p.add_argument("--bucket-mb", type=_mib(1), default=25.0,
                   help="data parallel: gradient bucket size in MiB (GradSync's bucket_bytes; default 25)")
    p.add_argument("--tail-bucket-mb", type=_mib(0), default=1.0,
                   help="data parallel: the last bucket's size in MiB, doubling up to --bucket-mb in the buckets "
                        "before it (GradSync's tail_bucket_bytes; 0: no taper; default 1)")
    p.add_argument("--grad-copy", action=argparse.BooleanOptionalAction, default=True,
                   help="data parallel: copy the gradients into their buckets (GradSync's copy=True, the default: "
                        "one copy launch and one all-reduce a bucket) or, with --no-grad-copy, all-reduce the "
                        "backward's gradient arrays in place (no copies, but one NCCL call a gradient, in a group "
                        "a bucket: more host time, which held the GPT example's step on 2 H100s)")
    p.add_argument("--zero", action="store_true",
                   help="data parallel: shard the optimizer state across the ranks "
                        "(cudakit.distributed.ZeroRedundancyOptimizer: each rank keeps and steps 1/N of it; the "
                        "gradients are reduce-scattered at the optimizer step, not all-reduced during the backward)")
    p.add_argument("--profile-host", action="store_true",
                   help="profile the host side of the steps after the first two (cProfile, every rank) and print "
                        "the functions that took the most host time, lines starting 'host-profile:' (cProfile "
                        "slows the Python parts, so step times of such a run are not comparable)")
    p.add_argument("--trace", metavar="PATH", default=None,
                   help="after the timed steps, profile one more step (its forward, backward and optimizer "
                        "ranges and its collectives) and write its Chrome trace to PATH (rank 0; open in "
                        "Perfetto or chrome://tracing)")
    return p


def _mib(least_bytes: int):
    """An argparse type: a size in MiB of at least `least_bytes` bytes."""
    def parse(text: str) -> float:
        mib = float(text)
        if not (math.isfinite(mib) and mib * 2**20 >= least_bytes):
            raise argparse.ArgumentTypeError(f"must be {'> 0' if least_bytes else '>= 0'} MiB (got {text})")
        return mib
    return parse


def _positive_int(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {n})")
    return n


def parse(p: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """Parsed arguments with --backend resolved to "cpu" or "cuda"; a usage error (exit status 2)
    for --graph without a GPU or with several ranks."""
    args = p.parse_args(argv)
    if args.backend == "auto":
        args.backend = "cuda" if cudakit.is_available() else "cpu"
    elif args.backend == "cuda" and not cudakit.is_available():
        p.error(f"--backend cuda: no usable GPU: {cudakit.unavailable_reason()}")
    if args.graph and args.backend != "cuda":
        p.error("--graph captures the step in a CUDA graph, which needs --backend cuda (a usable GPU); "
                "the CPU backend runs every step eagerly")
    return args


def run(step, next_batch, steps: int, device: Device, out=print, rank: int = 0, trace: str | None = None,
        profile_host: bool = False) -> list[float]:
    """Call step(*next_batch(i)) for i in range(steps), printing `step i loss X time T ms` each time.

    step returns the loss as a 0-d array (or a number). On a GPU step i's loss is read (a float,
    which waits for that step) after step i + 1 has been queued, as training loops do to keep
    the GPU fed: the host queues the next step while the GPU finishes this one. A step's time is
    the interval between two such reads (its time on the GPU where the host keeps ahead; its
    host time where the host is the bottleneck). Returns the losses. After the loop, a summary
    line gives the median step time of the steps after the first two (which include compilation)
    and the median host time until step() returned. trace: a
    path; one more step (not timed, not returned) runs under cudakit.profile(kernels=False) (the
    step's forward, backward and optimizer ranges and its collectives, no per-launch records, so
    the step runs at its own speed) and rank 0 writes its Chrome trace there, with a line saying how
    much of the collectives' time ran under another stream's work (data parallel: the all-reduces
    overlapping the backward). profile_host: cProfile the host side of steps 2.. and print the
    functions with the most host time of their own (a C call that blocks shows there)."""
    losses, times, queued = [], [], []
    prof_host = None
    gpu = device.name == "cuda"
    side = device.xp.cuda.Stream(non_blocking=True) if gpu else None   # reads losses beside the steps
    device.synchronize()
    last = [time.perf_counter()]

    def finish(i, r, done=None):
        if done is not None:   # wait for that step only, and read its loss on another stream: a read
            done.synchronize()   # on the step's stream would wait for the step queued after it too
            with side:
                loss = float(r)
        else:
            loss = float(r)
        now = time.perf_counter()
        ms = (now - last[0]) * 1e3
        last[0] = now
        losses.append(loss)
        times.append(ms)
        if rank == 0:   # data parallel: the averaged loss, printed once
            out(f"step {i} loss {loss:.4f} time {ms:.2f} ms")

    pending = None
    for i in range(steps):
        if profile_host and i == 2:
            import cProfile
            prof_host = cProfile.Profile()
            prof_host.enable()
        batch = next_batch(i)
        t0 = time.perf_counter()
        r = step(*batch)
        done = None
        if gpu and hasattr(r, "copy"):
            r = r.copy()   # a graphed step's loss lives in a buffer its next replay overwrites
            done = device.xp.cuda.Event(disable_timing=True)
            done.record()
        queued.append((time.perf_counter() - t0) * 1e3)   # the host's share: until the step is queued
        if pending is not None:
            finish(*pending)
        pending = (i, r, done)
        if not gpu:   # the CPU has run the step already: nothing to overlap
            finish(*pending)
            pending = None
    if pending is not None:
        finish(*pending)
    if prof_host is not None:
        prof_host.disable()
        _print_host_profile(prof_host, steps - 2, out)
    later = times[2:] or times
    # every rank (data parallel: the launcher prefixes each line; a step waits for the slowest rank)
    out(f"done: {steps} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
        f"median step time {statistics.median(later):.2f} ms (steps {steps - len(later)}..{steps - 1}; "
        f"host {statistics.median(queued[-len(later):]):.2f} ms of it to queue the step)")
    if trace is not None:
        batch = next_batch(steps)
        device.synchronize()
        with cudakit.profile(kernels=False) as prof:   # ranges and collectives: the step at its own speed
            float(step(*batch))
            device.synchronize()
        if rank == 0:
            prof.export_chrome_trace(trace)
            o = prof.collective_overlap()
            spans = ", ".join(f"{r.name} {r.duration_ms:.2f} ms" for r in prof.records if r.kind == "range")
            out(f"trace: {trace} ({len(prof.records)} records: {spans}); {o['overlapped']} of {o['collectives']} "
                f"collectives ran under the step's ranges on another stream, {o['overlap_us']:.0f} of "
                f"{o['collective_us']:.0f} us")
    return losses


def _print_host_profile(prof, steps: int, out, top: int = 18) -> None:
    """The functions with the most host time of their own (tottime) over `steps` steps, per step."""
    import pstats
    st = pstats.Stats(prof)
    rows = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    total = sum(v[2] for v in st.stats.values())
    out(f"host-profile: {total / steps * 1e3:.2f} ms of profiled host time a step, top {top} functions by own time:")
    for (file, line, name), (_, ncalls, tottime, cumtime, _) in rows:
        where = f"{'/'.join(file.rsplit('/', 2)[-2:])}:{line}" if line else file
        out(f"host-profile: {tottime / steps * 1e3:7.3f} ms/step own, {cumtime / steps * 1e3:7.3f} cum, "
            f"{ncalls / steps:6.1f} calls/step  {name}  {where}")
