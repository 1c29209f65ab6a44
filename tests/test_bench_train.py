"""The `train` benchmark family (cudakit/bench/cases/train.py) without a GPU: the CPU rows time the
examples' tiny presets, the GPU rows are laid out (sizes, FLOPs, skip reasons) without running,
and a missing examples directory skips the family with the reason."""
from __future__ import annotations

import numpy as np
import pytest

import cudakit
import cudakit.bench
from cudakit.bench.case import Env
from cudakit.bench.cases import train
from cudakit.bench.runner import format_table


def test_cpu_rows_time_the_tiny_examples(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    rec = cudakit.bench.run(ops=["train_gpt", "train_cnn"], dtypes=["float32"], quick=True, cpu=True, reps=1,
                            warmup=0, progress=False)
    rows = {r["op"]: r for r in rec["rows"]}
    assert set(rows) == {"train_gpt", "train_cnn"}
    for r in rows.values():
        assert r["family"] == "train" and r["providers"]["cudakit"]["median_ms"] > 0 and r["flops"] > 0
        assert "skipped" not in r
    gpt = train.load_example("train_gpt")
    assert rows["train_gpt"]["shape"] == [gpt.PRESETS["tiny"].batch, gpt.PRESETS["tiny"].seq,
                                          gpt.PRESETS["tiny"].d_model]


def test_gpu_rows_are_laid_out_without_running():
    env = Env(gpu=True, quick=False, xp=np, torch=None, dtypes=("float32", "bfloat16"))
    cases = train.cases(env)
    labels = [c.label for c in cases]
    assert len(labels) == len(set(labels))
    gpt = [c for c in cases if c.op.startswith("train_gpt")]
    cnn = [c for c in cases if c.op.startswith("train_cnn")]
    assert {c.shape for c in gpt} == {(8, 1024, 768), (4, 128, 256)} and {c.dtype for c in gpt} == {"bfloat16"}
    assert {c.shape for c in cnn} == {(256, 3, 32, 32)} and {c.dtype for c in cnn} == {"bfloat16", "float32"}
    nhwc = [c for c in cnn if c.op.startswith("train_cnn_nhwc")]   # channels-last: eager and graph vs graph
    assert sorted(c.op for c in nhwc) == ["train_cnn_nhwc", "train_cnn_nhwc", "train_cnn_nhwc_graph_vs_torch_graph",
                                          "train_cnn_nhwc_graph_vs_torch_graph"]
    assert len(gpt) == 2 * len(train.VARIANTS) and len(cnn) - len(nhwc) == 2 * len(train.VARIANTS)
    for c in cases:
        graph, torch_kind = train.VARIANTS[c.op[len("train_gpt"):] if c.op.startswith("train_gpt")
                                           else c.op[len("train_cnn_nhwc" if c in nhwc else "train_cnn"):]]
        if graph and not hasattr(cudakit, "graph"):
            assert "cudakit.graph" in c.skip
        elif torch_kind != "eager":
            assert "torch is not installed" in c.skip
        else:
            assert c.skip == ""


def test_torch_compile_rows_run_only_when_named():
    base = {"gpu": True, "quick": False, "xp": np, "torch": object(), "dtypes": ("bfloat16",)}
    rows = [c for c in train.cases(Env(**base)) if c.op.endswith("_vs_torch_compile")]
    assert rows and all("only when named (--ops train_" in c.skip for c in rows)
    named = train.cases(Env(**base, ops=("train_gpt_vs_torch_compile",)))
    assert {c.op: c.skip for c in named if c.op.endswith("_vs_torch_compile")} == {
        "train_gpt_vs_torch_compile": "", "train_cnn_vs_torch_compile": next(
            c.skip for c in rows if c.op == "train_cnn_vs_torch_compile")}


def test_flops_formulas():
    gpt, cnn = train.load_example("train_gpt"), train.load_example("train_cnn")
    cfg = gpt.GPTConfig(d_model=4, n_heads=2, n_layers=1, seq=3, batch=2, vocab=5)
    # per token: qkv 4*12, proj 4*4, fc 4*16, fc2 16*4 multiply-adds (12 d^2 = 192), head 4*5;
    # attention: 2 products of (B=2) x (T^2 / 2 = 4.5) x d=4 multiply-adds each
    assert train.gpt_flops(cfg) == 3 * (2 * 2 * 3 * (192 + 20) + 2 * 2 * 9 * 4)
    ccfg = cnn.CNNConfig(batch=2, image=4, widths=(2, 3), classes=2)
    # stage 0 at 4x4: convs 3->2, 2->2, 2->2; stage 1 at 2x2: 2->3, 3->3, 3->3
    want = 2 * 2 * 9 * (16 * (2 * 3 + 2 * 2 + 2 * 2) + 4 * (3 * 2 + 3 * 3 + 3 * 3))
    assert train.cnn_flops(ccfg, cnn.conv_names(ccfg)) == 3 * want


def test_missing_examples_skip_the_family_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDAKIT_EXAMPLES_DIR", str(tmp_path))
    assert train.examples_dir() is None
    rec = cudakit.bench.run(ops=["train_gpt", "train_cnn"], quick=True, cpu=True, reps=1, warmup=0, progress=False)
    assert all("CUDAKIT_EXAMPLES_DIR" in r["skipped"] and not r["providers"] for r in rec["rows"])
    table = format_table(rec)
    assert table.count("skipped: the examples") == 2


def test_examples_dir_from_the_environment(monkeypatch):
    real = train.examples_dir()
    assert real is not None and (real / "train_gpt.py").is_file()
    monkeypatch.setenv("CUDAKIT_EXAMPLES_DIR", str(real))
    assert train.examples_dir() == real


@pytest.mark.parametrize("strict, rel, marker", [(True, 5e-4, "within"), (True, 2e-3, "OVER"), (False, 2e-3, None)])
def test_loss_check_records_the_agreement(strict, rel, marker):
    case = cudakit.bench.Case("train_x", "train", (1,), "float32", 0, dict)
    train._loss_check(case, "step-0 loss", 1.0 + rel, 1.0, strict)
    text = case.info["step-0 loss"]
    assert "cudakit 1.0" in text and "torch 1.00000" in text
    assert (marker in text) if marker else ("within" not in text and "OVER" not in text)


# ---- the torch side of the rows (runs where torch is installed; CI has none) ------------------------

@pytest.mark.parametrize("kind", ["gpt", "cnn"])
def test_torch_models_equal_the_examples_in_float64(kind, rng):
    """The benchmark's torch.nn.functional models: the examples' loss, gradients (torch autograd
    against the hand-written backward) and running statistics, in float64 on the CPU."""
    torch = pytest.importorskip("torch")
    from cudakit.bench.cases import _torch_train as tt
    device = train.load_example("train_gpt").common.Device("cpu")
    if kind == "gpt":
        ex = train.load_example("train_gpt")
        cfg = ex.GPTConfig(d_model=16, n_heads=2, n_layers=2, seq=8, batch=2, vocab=11)
        batch = ex.StreamData(cfg.vocab, 256, 0).batch(rng, cfg.batch, cfg.seq)
        buffers, tbuffers = {}, {}
    else:
        ex = train.load_example("train_cnn")
        cfg = ex.CNNConfig(batch=4, image=8, widths=(3, 4), classes=3)
        images, labels = ex.generate_batch(rng, cfg)
        batch = (images.astype(np.float64), labels)
        buffers = ex.init_buffers(cfg, device, "float64")
        tbuffers = tt.tensors(torch, ex.init_buffers(cfg, device, "float64"), False)
    params = {n: p + rng.normal(0.0, 0.1, p.shape) for n, p in ex.init_params(cfg, 0, device, "float64").items()}
    loss, cache = ex.forward(params, batch, cfg, buffers) if kind == "cnn" else ex.forward(params, batch, cfg)
    grads = ex.backward(cache)
    tp = tt.tensors(torch, params, True)
    tb = tuple(torch.from_numpy(b) for b in batch)
    tloss = (tt.gpt_loss(torch, cfg, tp, *tb) if kind == "gpt"
             else tt.cnn_loss(torch, cfg, tp, tbuffers, *tb, float_loss=False))
    tloss.backward()
    assert abs(float(loss) - float(tloss.detach())) <= 1e-12 * abs(float(loss))
    for n in params:
        np.testing.assert_allclose(grads[n], tp[n].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=n)
    for n in buffers:
        np.testing.assert_allclose(buffers[n], tbuffers[n].numpy(), rtol=1e-12, err_msg=n)


def test_torch_rows_run_on_the_cpu(monkeypatch):
    """A row's setup with torch on the CPU (no GPU here): both sides step, the losses agree."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    import dataclasses
    from cudakit.bench import runner
    env = Env(gpu=False, quick=False, xp=np, torch=torch, dtypes=("float32",))
    gpt = train.load_example("train_gpt")
    cfg = dataclasses.replace(gpt.PRESETS["host-bound"], d_model=32, n_layers=1, seq=16, batch=2, vocab=64)
    case = train._case(env, "gpt", cfg, "float32", "")
    res = runner.run_case(case, env, {"torch"}, reps=2, warmup=1)
    assert set(res) == {"cudakit", "torch"}
    assert "(within 0.001)" in case.info["step-0 loss"] and "step-2 loss" in case.info


# ---- host-time rows ----------------------------------------------------------------------------------

def test_host_time_rows_call_cudakit_on_the_cpu_backend():
    from cudakit.bench.cases import host_time
    env = Env(gpu=False, quick=True, xp=np)
    assert host_time.cases(env) == []   # GPU runs only
    rows = host_time.host_cases(env)
    assert len({c.op for c in rows}) == len(rows) and all(c.mode == "host" for c in rows)
    for c in rows:
        prov = c.setup()
        assert set(prov) == {"cudakit"}
        prov["cudakit"]()


def test_host_time_torch_equivalents_run():
    torch = pytest.importorskip("torch")
    from cudakit.bench.cases import host_time
    a = host_time._arrays(Env(gpu=False, quick=True, xp=np, torch=torch))
    calls = host_time._torch_calls(torch, a)
    assert set(calls) == set(host_time._SPEC) == set(host_time._cudakit_calls(a))
    for name, fn in calls.items():
        if name.startswith("attention_varlen") and not torch.cuda.is_available():
            continue   # torch's varlen_attn runs on CUDA only
        fn()
