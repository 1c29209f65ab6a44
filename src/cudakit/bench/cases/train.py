"""Benchmark cases: one training step of the examples' GPT and CNN (examples/train_gpt.py and
examples/train_cnn.py, imported from the repository), cudakit against torch on the same model.

Rows, in ms per step (x torch = torch's step time / cudakit's; > 1: cudakit faster):
  train_gpt, train_cnn                        cudakit's eager step vs torch's eager step
  train_gpt_graph, train_cnn_graph            cudakit.graph step   vs torch's eager step
  train_gpt_graph_vs_torch_graph, train_cnn_graph_vs_torch_graph
                                              cudakit.graph step   vs torch's CUDA-graphed step
  train_gpt_vs_torch_compile, train_cnn_vs_torch_compile
                                              cudakit's eager step vs torch.compile'd eager step
                                              (run only when named in --ops: compiling takes minutes)
  train_cnn_nhwc, train_cnn_nhwc_graph_vs_torch_graph
                                              the CNN with channels-last images on both sides (the
                                              example's --channels-last; torch's channels_last), so
                                              every activation is channels-last; eager vs eager and
                                              graphed vs graphed
cudakit's step is the example's Trainer.step: forward, hand-written backward, and one optimizer
launch (AdamW with float32 master weights for 16-bit parameters; SGD with momentum). With
cudakit.graph the forward and backward replay as one graph and the optimizer runs after it (see
the examples' Trainer). torch's step: the same model written with torch.nn.functional
(cases/_torch_train.py), from a copy of cudakit's initial weights, on the same batch, in the same
dtype; fused AdamW / SGD updating the parameters directly (no master weights: less work than
cudakit's); its graphed step captures forward, backward and optimizer (capturable AdamW).
Sizes: the GPT of issue 25 (d_model 768, 12 heads, 4 layers, seq 1024, batch 8, vocab 8192) and
its host-bound size (256, 4, 2, 128, 4, vocab 8192), bfloat16, dropout off; the CNN with batch
256, 32x32 images, widths 64-128-256, in bfloat16 and in float32 (cudakit with
float32_precision "tf32", torch with its defaults: cuDNN's TF32 convolutions).

Every row's setup takes a first step on both sides from the same weights and records the losses
(row "info"): they must agree to 1e-3 relative (a warning is logged otherwise); the eager rows
also record the loss after two more steps on both sides. torch's step-0 loss for the check is
the cross-entropy of its logits in float32.

FLOPs (reported as TFLOP/s, %roof against the measured matmul rate), forward + backward = 3x the
forward's matrix products: GPT 3 * (2 B T (12 L d^2 + d V) + 2 L B T^2 d) (causal attention
counted as half the square), CNN 3 * sum over the 3x3 convolutions of 2 N H W K C 9.

On a CPU run (cudakit's CPU backend, no torch) the family times the examples' tiny presets alone.
The examples are found in CUDAKIT_EXAMPLES_DIR, else in <repository>/examples beside the package
source (an editable install); where neither holds them, the rows say so and are skipped.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import sys
from pathlib import Path

import cudakit

from ..case import Case, Env

log = logging.getLogger(__name__)

LOSS_RTOL = 1e-3   # step-0 losses of cudakit and torch must agree to this, relative
VARIANTS = {        # op suffix -> (cudakit graphed, torch step kind)
    "": (False, "eager"),
    "_graph": (True, "eager"),
    "_graph_vs_torch_graph": (True, "graph"),
    "_vs_torch_compile": (False, "compile"),
}
_WHAT = {(False, "eager"): "cudakit eager step vs torch eager step",
         (True, "eager"): "cudakit.graph step vs torch eager step",
         (True, "graph"): "cudakit.graph step vs torch's CUDA-graphed step (torch.cuda.graph)",
         (False, "compile"): "cudakit eager step vs torch.compile'd step"}


def examples_dir() -> Path | None:
    """The directory holding train_gpt.py and train_cnn.py: CUDAKIT_EXAMPLES_DIR, else the
    repository's examples/ (three levels above cudakit/__init__.py); None where it is not there."""
    env = os.environ.get("CUDAKIT_EXAMPLES_DIR")
    d = Path(env) if env else Path(cudakit.__file__).resolve().parents[2] / "examples"
    return d if (d / "train_gpt.py").is_file() and (d / "train_cnn.py").is_file() else None


_loaded: dict = {}


def load_example(name: str):
    """The example module `name` ("train_gpt" or "train_cnn") from examples_dir(), loaded once
    (as cudakit_examples_<name>, its examples directory put on sys.path for train_common)."""
    mod = _loaded.get(name)
    if mod is None:
        d = examples_dir()
        if d is None:
            raise FileNotFoundError("the examples directory (set CUDAKIT_EXAMPLES_DIR)")
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))
        spec = importlib.util.spec_from_file_location(f"cudakit_examples_{name}", d / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod   # dataclasses look their module up while it runs
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[spec.name]
            raise
        _loaded[name] = mod
    return mod


def gpt_flops(cfg) -> int:
    """Matrix-product FLOPs of one GPT training step (module docstring)."""
    b, t, d, n = cfg.batch, cfg.seq, cfg.d_model, cfg.n_layers
    return 3 * (2 * b * t * (12 * n * d * d + d * cfg.vocab) + 2 * n * b * t * t * d)


def cnn_flops(cfg, conv_names) -> int:
    """Convolution FLOPs of one CNN training step (module docstring)."""
    total, size, stage = 0, cfg.image, 0
    for name, cin, cout in conv_names:
        s = int(name.split(".")[0][1:])
        if s != stage:
            size, stage = size // 2, s
        total += 2 * cfg.batch * size * size * cout * cin * 9
    return 3 * total


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-30)


def _loss_check(case: Case, key: str, ours: float, theirs: float, strict: bool) -> None:
    rel = _rel(ours, theirs)
    ok = rel <= LOSS_RTOL
    case.info[key] = (f"cudakit {ours:.5f}, torch {theirs:.5f}, relative difference {rel:.1e}"
                      + (f" ({'within' if ok else 'OVER'} {LOSS_RTOL:g})" if strict else ""))
    if strict and not ok:
        log.warning("%s: %s", case.label, case.info[key])


# ---- one row ---------------------------------------------------------------------------------------

class _Model:
    """What differs between the GPT and the CNN rows: the example, its config and batch, the
    torch loss and optimizer."""

    def __init__(self, kind: str, cfg, channels_last: bool = False):
        self.kind, self.cfg, self.channels_last = kind, cfg, channels_last
        self.ex = load_example("train_gpt" if kind == "gpt" else "train_cnn")

    def batch(self):
        """(NumPy arrays of one batch) in float32 / int64."""
        import numpy as np
        if self.kind == "gpt":
            data = self.ex.StreamData(self.cfg.vocab, max(1 << 14, 2 * self.cfg.batch * (self.cfg.seq + 1)), 0)
            return data.batch(np.random.default_rng(0), self.cfg.batch, self.cfg.seq)
        return self.ex.generate_batch(np.random.default_rng(0), self.cfg)

    def trainer(self, device, dtype: str, graph: bool):
        if self.kind == "cnn":
            return self.ex.Trainer(self.cfg, device, dtype, 0, graph, channels_last=self.channels_last)
        return self.ex.Trainer(self.cfg, device, dtype, 0, graph)

    def device_batch(self, trainer, device, host: tuple, dtype: str) -> tuple:
        """A batch on the device in the trainer's dtype (and, for the CNN, its images' layout)."""
        np_dtype = self.ex.common.np_dtype(dtype)
        if self.kind == "cnn":
            return trainer.images(host[0].astype(np_dtype)), device.asarray(host[1])
        return tuple(device.asarray(a.astype(np_dtype) if a.dtype.kind == "f" else a) for a in host)

    def torch_side(self, t, trainer, capturable: bool):
        """(loss_fn(*batch, float_loss=False), optimizer) over torch copies of the trainer's
        current (initial) parameters and buffers."""
        from . import _torch_train as tt
        params = tt.tensors(t, trainer.params, True)
        plist = [params[n] for n in trainer.names]
        if self.kind == "gpt":
            return ((lambda tok, tgt, float_loss=False: tt.gpt_loss(t, self.cfg, params, tok, tgt, float_loss)),
                    tt.adamw(t, plist, self.cfg, capturable))
        bufs = tt.tensors(t, trainer.buffers, False)
        return ((lambda x, y, float_loss=True: tt.cnn_loss(t, self.cfg, params, bufs, x, y, float_loss)),
                tt.sgd(t, plist, self.cfg))


def _setup(env: Env, case: Case, model: _Model, dtype: str, graph: bool, torch_kind: str, precision):
    """The providers of one row (see the module docstring); sets case.skip where it cannot run."""
    ex = model.ex
    device = ex.common.Device("cuda" if env.gpu else "cpu")
    trainer = model.trainer(device, dtype, graph)
    batch = model.device_batch(trainer, device, model.batch(), dtype)   # (torch's copies share its layout)
    t = env.torch
    torch_loss = opt = None
    if t is not None:   # (a CPU run has no torch: the runner loads it for GPU runs only)
        torch_loss, opt = model.torch_side(t, trainer, capturable=torch_kind == "graph")
        tbatch = tuple(t.from_dlpack(b) for b in batch)
        with t.no_grad():
            torch0 = float(torch_loss(*tbatch, float_loss=True))

    def ours():
        if precision is None:
            return trainer.step(*batch)
        old = cudakit.set_float32_precision(precision)
        try:
            return trainer.step(*batch)
        finally:
            cudakit.set_float32_precision(old)
    try:
        first = float(ours())   # the first graphed call captures
    except Exception as e:  # noqa: BLE001 -- a capture that fails is a result to report, not a crash
        if not graph:
            raise
        case.skip = f"cudakit.graph failed: {type(e).__name__}: {str(e)[:200]}"
        return {}
    prov = {"cudakit": ours}
    if torch_loss is None:
        return prov
    _loss_check(case, "step-0 loss", first, torch0, strict=True)
    from . import _torch_train as tt
    if torch_kind == "graph":
        step = tt.graphed_step(t, torch_loss, opt, tbatch)
    elif torch_kind == "compile":
        try:
            step = tt.eager_step(t.compile(torch_loss), opt)
            float(step(*tbatch).detach())   # compiles, runs and waits
        except Exception as e:  # noqa: BLE001 -- torch.compile not working on this image is a finding
            case.skip = f"torch.compile does not work here: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            return {}
    else:
        step = tt.eager_step(torch_loss, opt)
        if not graph:   # two more steps on each side from the same state: the losses after them
            theirs = [float(step(*tbatch).detach()) for _ in range(3)]
            mine = [float(ours()) for _ in range(2)]
            _loss_check(case, "step-2 loss", mine[-1], theirs[-1], strict=False)
    prov["torch"] = lambda: step(*tbatch)
    return prov


def _case(env: Env, kind: str, cfg, dtype: str, suffix: str, precision=None, note: str = "",
          channels_last: bool = False) -> Case:
    graph, torch_kind = VARIANTS[suffix]
    op = f"train_{kind}{'_nhwc' if channels_last else ''}{suffix}"
    shape = (cfg.batch, cfg.seq, cfg.d_model) if kind == "gpt" else (cfg.batch, cfg.channels, cfg.image, cfg.image)
    model = _Model(kind, cfg, channels_last)
    flops = gpt_flops(cfg) if kind == "gpt" else cnn_flops(cfg, model.ex.conv_names(cfg))
    case = Case(op, "train", shape, dtype, 0, lambda: _setup(env, case, model, dtype, graph, torch_kind, precision),
                flops=flops, note="; ".join(x for x in (_WHAT[(graph, torch_kind)], note) if x))
    if torch_kind != "eager" and env.torch is None:
        case.skip = "torch is not installed (or cannot use the GPU)"
    elif torch_kind == "compile" and op not in env.ops:
        case.skip = f"only when named (--ops {op}): torch.compile takes minutes to compile the step"
    return case


def _missing(reason: str) -> list:
    """The family's rows, each skipped for `reason`."""
    return [Case(f"train_{kind}", "train", (), "float32", 0, dict, skip=reason) for kind in ("gpt", "cnn")]


def cases(env: Env) -> list[Case]:
    if examples_dir() is None:
        return _missing("the examples (train_gpt.py, train_cnn.py) are not beside this cudakit's source; "
                             "set CUDAKIT_EXAMPLES_DIR to the repository's examples/")
    gpt, cnn = load_example("train_gpt"), load_example("train_cnn")
    if not env.gpu:   # the CPU backend: the tiny presets, cudakit alone
        tiny = gpt.with_vocab(gpt.PRESETS["tiny"], gpt.make_data(gpt.PRESETS["tiny"], 0))
        tiny = dataclasses.replace(tiny, dropout=0.0)
        return [_case(env, "gpt", tiny, "float32", ""), _case(env, "cnn", cnn.PRESETS["tiny"], "float32", "")]
    out = []
    if "bfloat16" in env.dtypes:
        for name in ("gpt-issue", "host-bound"):
            cfg = dataclasses.replace(gpt.PRESETS[name], dropout=0.0)
            note = f"GPT {name}: {cfg.n_layers} layers, {cfg.n_heads} heads, vocab {cfg.vocab}"
            out += [_case(env, "gpt", cfg, "bfloat16", s, note=note) for s in VARIANTS]
    cfg = cnn.PRESETS["issue"]
    note = f"CNN widths {'-'.join(map(str, cfg.widths))}, {cfg.classes} classes"
    for dtype in env.dtypes:
        if dtype in ("bfloat16", "float32"):
            precision = "tf32" if dtype == "float32" else None
            extra = "; cudakit float32_precision tf32, torch defaults (cuDNN TF32)" if precision else ""
            out += [_case(env, "cnn", cfg, dtype, s, precision, note + extra) for s in VARIANTS]
            out += [_case(env, "cnn", cfg, dtype, s, precision, note + extra + "; channels-last images",
                          channels_last=True) for s in ("", "_graph_vs_torch_graph")]
    return out
