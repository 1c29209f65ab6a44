"""The training examples (examples/train_gpt.py, examples/train_cnn.py) on the CPU backend: the
scripts at their tiny preset (output format, exit status, the loss falls by at least 30% in 30
steps), their hand-written backward passes against central finite differences in float64, and the
--graph plumbing (with a stand-in for cudakit.graph; the real capture is tested on a GPU in
tests/gpu/test_examples_gpu.py)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cudakit

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))

import train_cnn  # noqa: E402
import train_common  # noqa: E402
import train_gpt  # noqa: E402

STEP_LINE = re.compile(r"^step (\d+) loss (-?[0-9.]+(?:e[-+]?\d+)?|nan|inf) time ([0-9.]+) ms$")


def _run_example(script: str, *args: str) -> subprocess.CompletedProcess:
    # One BLAS thread: the tiny models' matrices are small, and on a shared 2-core CI machine
    # OpenBLAS's spinning threads can make each product ~50x slower.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")}
    return subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, check=False,
                          env=env, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train_gpt.py", "train_cnn.py"])
def test_example_trains_at_tiny_preset(script):
    r = _run_example(script, "--backend", "cpu", "--preset", "tiny", "--steps", "30")
    assert r.returncode == 0, r.stderr
    steps = [STEP_LINE.match(line) for line in r.stdout.splitlines() if line.startswith("step ")]
    assert all(steps), r.stdout
    assert [int(m.group(1)) for m in steps] == list(range(30))
    losses = [float(m.group(2)) for m in steps]
    assert all(np.isfinite(losses))
    assert all(float(m.group(3)) > 0 for m in steps)
    assert losses[-1] <= 0.7 * losses[0], f"loss {losses[0]} -> {losses[-1]}: fell by less than 30%"


@pytest.mark.parametrize("script", ["train_gpt.py", "train_cnn.py"])
def test_graph_on_cpu_is_a_usage_error(script):
    r = _run_example(script, "--backend", "cpu", "--graph", "--steps", "1")
    assert r.returncode == 2
    assert "--graph" in r.stderr and "CUDA" in r.stderr


def test_gpt_graph_with_dropout_is_refused():
    with pytest.raises(ValueError, match="dropout"):
        train_gpt.Trainer(train_gpt.GPTConfig(d_model=8, n_heads=2, n_layers=1, seq=4, batch=2, vocab=5, dropout=0.1),
                          train_common.Device("cpu"), graph=True)


# ---- gradients against finite differences -----------------------------------------------------------

def _perturbed(params: dict, rng, scale: float) -> dict:
    """The parameters plus N(0, scale^2) noise: no zero biases, no unit layernorm weights, attention
    that is not uniform, no exact zeros at a ReLU."""
    return {n: p + rng.normal(0.0, scale, p.shape) for n, p in params.items()}


def _derivative(loss_of, params: dict, name: str, v, eps: float, smooth: bool) -> float:
    """d/ds L(params with params[name] + s v) at s = 0 by central differences: the five-point
    formula (error O(eps^4)) for a smooth loss, else the two-point one (O(eps^2))."""
    weights = {-2: 1, -1: -8, 1: 8, 2: -1} if smooth else {-1: -6, 1: 6}
    p = params[name]
    return sum(w * loss_of({**params, name: p + k * eps * v}) for k, w in weights.items()) / (12 * eps)


def _check_directional(loss_of, params: dict, grads: dict, rng, smooth: bool, rtol: float = 1e-6):
    """For each parameter, a random direction v: the finite-difference derivative of the loss along
    v against sum(grad * v), the other parameters held fixed. smooth: s = +-1e-4, +-2e-4 (rounding
    O(1e-16 / s)). Else (ReLU, max pool) s = +-1e-6, and the difference is taken again with half
    the step: where the two disagree, a kink lies within the stencil, and another direction is
    drawn (at most 5); a wrong gradient gives two agreeing differences that disagree with it."""
    assert set(grads) == set(params)
    for name, p in params.items():
        assert grads[name].shape == p.shape and grads[name].dtype == p.dtype, name
        for _ in range(5):
            v = rng.standard_normal(p.shape)
            fd = _derivative(loss_of, params, name, v, 1e-4 if smooth else 1e-6, smooth)
            tol = rtol * max(abs(fd), 1e-3)
            if smooth or abs(_derivative(loss_of, params, name, v, 5e-7, False) - fd) <= tol:
                break
        else:
            raise AssertionError(f"{name}: a kink within the stencil in each of 5 random directions")
        an = float(np.sum(grads[name] * v))
        assert abs(an - fd) <= tol, f"{name}: backward {an!r}, finite differences {fd!r}"


def test_gpt_backward_matches_finite_differences(rng):
    cfg = train_gpt.GPTConfig(d_model=8, n_heads=2, n_layers=2, seq=6, batch=2, vocab=7, dropout=0.25)
    device = train_common.Device("cpu")
    params = _perturbed(train_gpt.init_params(cfg, 1, device, "float64"), rng, 0.3)
    # windows one shorter than seq: the last row of the position table gets a zero gradient
    tokens, targets = rng.integers(0, cfg.vocab, (2, cfg.seq - 1)), rng.integers(0, cfg.vocab, (2, cfg.seq - 1))
    tokens[0, :3] = 4   # a repeated token: its embedding row collects several gradients

    def loss_of(ps):
        loss, _ = train_gpt.forward(ps, (tokens, targets), cfg, step=3)
        assert loss.dtype == np.float64
        return float(loss)
    _, cache = train_gpt.forward(params, (tokens, targets), cfg, step=3)
    grads = train_gpt.backward(cache)
    assert np.all(grads["wpe"][-1] == 0)
    _check_directional(loss_of, params, grads, rng, smooth=True)


def _kink_margin(cache) -> float:
    """How far the forward's point lies from a kink: the smallest |ReLU input|, and the smallest gap
    between the two largest inputs of a 2x2 max-pool window whose largest is above 0 (a window of
    ReLU's zeros stays one under a small step; even sizes, as the test's)."""
    gaps = []
    for name, s in cache.items():   # each batch norm's pre-activation bn(z) (+ residual), recomputed
        if isinstance(s, dict) and "z" in s:
            p = cache["params"]
            pre = cudakit.batch_norm(s["z"], p[f"{name}.gamma"], p[f"{name}.beta"], training=True)
            gaps.append(float(np.abs(pre if s["residual"] is None else pre + s["residual"]).min()))
    for x in cache["pool_in"].values():
        n, ch, h, w = x.shape
        win = np.sort(x.reshape(n, ch, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(-1, 4), axis=1)
        live = win[:, -1] > 0
        gaps.append(float((win[live, -1] - win[live, -2]).min(initial=np.inf)))
    return min(gaps)


def test_cnn_backward_matches_finite_differences(rng):
    cfg = train_cnn.CNNConfig(batch=4, image=6, widths=(3, 4), classes=3)
    device = train_common.Device("cpu")
    # a point whose ReLU inputs and max-pool windows' leaders sit at least 1e-5 from a tie, ten times
    # what the stencil's 1e-6 steps move them (else a draw one in a thousand had a ReLU input 1e-7
    # from 0, within every direction's stencil): drawn again where not
    for _ in range(20):
        params = _perturbed(train_cnn.init_params(cfg, 1, device, "float64"), rng, 0.2)
        images = rng.standard_normal((cfg.batch, cfg.channels, cfg.image, cfg.image))
        labels = rng.integers(0, cfg.classes, cfg.batch)
        if _kink_margin(train_cnn.forward(params, (images, labels), cfg)[1]) >= 1e-5:
            break
    else:
        raise AssertionError("no point 1e-5 clear of a kink in 20 draws")

    def loss_of(ps):
        return float(train_cnn.forward(ps, (images, labels), cfg)[0])
    _, cache = train_cnn.forward(params, (images, labels), cfg)
    _check_directional(loss_of, params, train_cnn.backward(cache), rng, smooth=False)


def test_cnn_forward_updates_running_statistics():
    cfg = train_cnn.CNNConfig(batch=4, image=6, widths=(3,), classes=3)
    device = train_common.Device("cpu")
    trainer = train_cnn.Trainer(cfg, device)
    before = {n: b.copy() for n, b in trainer.buffers.items()}
    images, labels = train_cnn.generate_batch(np.random.default_rng(0), cfg)
    trainer.step(images, labels)
    assert all(not np.array_equal(before[n], trainer.buffers[n]) for n in before)


def test_cnn_channels_last_keeps_the_layout_and_trains_as_nchw():
    """--channels-last: every activation the forward keeps is a channels-last view (no layer copies
    to NCHW), and three SGD steps give the NCHW run's losses, parameters and running statistics."""
    cfg = train_cnn.CNNConfig(batch=5, image=8, widths=(3, 4), classes=3)
    device = train_common.Device("cpu")
    runs = []
    for cl in (False, True):
        trainer = train_cnn.Trainer(cfg, device, "float64", 0, channels_last=cl)
        losses = []
        for i in range(3):
            images, labels = train_cnn.generate_batch(np.random.default_rng(i), cfg)
            x = trainer.images(images.astype(np.float64))
            if cl:
                assert not x.flags.c_contiguous and x.transpose(0, 2, 3, 1).flags.c_contiguous
                _, cache = train_cnn.forward(trainer.params, (x, labels), cfg)
                acts = [a for d in cache.values() if isinstance(d, dict) for v in d.values()
                        for a in (v.values() if isinstance(v, dict) else (v,)) if getattr(a, "ndim", 0) == 4
                        and a.shape[0] == cfg.batch and a.shape[1] in cfg.widths]   # (not the weights: batch 5)
                assert acts and all(a.transpose(0, 2, 3, 1).flags.c_contiguous for a in acts)
            losses.append(float(trainer.step(x, labels)))
        runs.append((losses, trainer.params, trainer.buffers))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-12)
    for name in runs[0][1]:
        np.testing.assert_allclose(runs[1][1][name], runs[0][1][name], rtol=1e-9, atol=1e-12, err_msg=name)
    for name in runs[0][2]:
        np.testing.assert_allclose(runs[1][2][name], runs[0][2][name], rtol=1e-9, atol=1e-12, err_msg=name)


# ---- the --graph path, with a stand-in for cudakit.graph ---------------------------------------------

def _fake_graph(log: list):
    """cudakit.graph's contract on NumPy: static copies of the sample arguments, a call copies its
    arguments into them and runs the function on them."""
    def graph(fn, *sample):
        static = [np.array(a, copy=True) for a in sample]
        log.append([a.shape for a in sample])

        def replay(*args):
            assert [a.shape for a in args] == [s.shape for s in static]
            for s, a in zip(static, args):
                s[...] = a
            return fn(*static)
        return replay
    return graph


@pytest.mark.parametrize("example", ["gpt", "cnn"])
def test_graphed_trainer_steps_equal_eager_steps(monkeypatch, example):
    log = []
    monkeypatch.setattr(cudakit, "graph", _fake_graph(log), raising=False)
    device = train_common.Device("cpu")
    if example == "gpt":
        cfg = train_gpt.GPTConfig(d_model=8, n_heads=2, n_layers=1, seq=6, batch=2, vocab=7, dropout=0.0, lr=1e-2)
        make = lambda graph: train_gpt.Trainer(cfg, device, "float32", 0, graph)  # noqa: E731
        data = train_gpt.StreamData(cfg.vocab, 256, 0)
        batches = [data.batch(np.random.default_rng(i), cfg.batch, cfg.seq) for i in range(3)]
    else:
        cfg = train_cnn.CNNConfig(batch=4, image=6, widths=(3,), classes=3)
        make = lambda graph: train_cnn.Trainer(cfg, device, "float32", 0, graph)  # noqa: E731
        batches = [train_cnn.generate_batch(np.random.default_rng(i), cfg) for i in range(3)]
    eager, graphed = make(False), make(True)
    for b in batches:
        assert float(eager.step(*b)) == float(graphed.step(*b))
    assert len(log) == 1   # captured once, replayed after
    for n in eager.params:
        np.testing.assert_array_equal(eager.params[n], graphed.params[n])
