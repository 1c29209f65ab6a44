"""What train_gpt.py and train_cnn.py share: the command line, the arrays of a backend, and the
training loop that prints one line per step.

Every step prints `step N loss X time T ms`: the loss is read (a device-to-host copy, which waits
for the step) after the step has been queued, never inside it, so the same step function can be
captured in a CUDA graph; T is the wall-clock time from queueing the step to having its loss.
"""
from __future__ import annotations

import argparse
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
                        "every step (needs --backend cuda)")
    return p


def _positive_int(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {n})")
    return n


def parse(p: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """Parsed arguments with --backend resolved to "cpu" or "cuda"; a usage error (exit status 2)
    for --graph without a GPU or without cudakit.graph."""
    args = p.parse_args(argv)
    if args.backend == "auto":
        args.backend = "cuda" if cudakit.is_available() else "cpu"
    elif args.backend == "cuda" and not cudakit.is_available():
        p.error(f"--backend cuda: no usable GPU: {cudakit.unavailable_reason()}")
    if args.graph and args.backend != "cuda":
        p.error("--graph captures the step in a CUDA graph, which needs --backend cuda (a usable GPU); "
                "the CPU backend runs every step eagerly")
    if args.graph and not hasattr(cudakit, "graph"):
        p.error(f"--graph needs cudakit.graph (CUDA graph capture), which cudakit {cudakit.__version__} "
                "does not have")
    return args


def graphed(step_fn, *sample_args):
    """step_fn captured in a CUDA graph: cudakit.graph runs it eagerly a few times, captures one call
    on sample_args into static input buffers and a private memory pool, and returns a callable that
    copies its (same-shaped) arguments into those buffers and replays the graph, returning the
    static outputs (overwritten by the next replay)."""
    return cudakit.graph(step_fn, *sample_args)


def run(step, next_batch, steps: int, device: Device, out=print) -> list[float]:
    """Call step(*next_batch(i)) for i in range(steps), printing `step i loss X time T ms` each time.

    step returns the loss as a 0-d array (or a number); it is converted to a float after the call,
    which waits for the step on a GPU. Returns the losses. After the loop, a summary line gives
    the median step time of the steps after the first two (which include compilation)."""
    losses, times = [], []
    for i in range(steps):
        batch = next_batch(i)
        device.synchronize()
        t0 = time.perf_counter()
        loss = float(step(*batch))
        ms = (time.perf_counter() - t0) * 1e3
        losses.append(loss)
        times.append(ms)
        out(f"step {i} loss {loss:.4f} time {ms:.2f} ms")
    later = times[2:] or times
    out(f"done: {steps} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
        f"median step time {statistics.median(later):.2f} ms (steps {steps - len(later)}..{steps - 1})")
    return losses
