"""The examples' GPT and CNN (examples/train_gpt.py, examples/train_cnn.py) written with
torch.nn.functional, from cudakit's parameter dicts, and torch's training steps over them: eager,
CUDA-graphed (torch.cuda.graph, whole step captured) and torch.compile'd. Used by the `train`
benchmark family (cases/train.py); imports torch only through the module it is given."""
from __future__ import annotations


def tensors(t, arrays: dict, requires_grad: bool) -> dict:
    """{name: torch copy} of CuPy arrays (the copies share nothing with cudakit's arrays)."""
    return {n: t.from_dlpack(a).clone().requires_grad_(requires_grad) for n, a in arrays.items()}


def gpt_loss(t, cfg, params: dict, tokens, targets, float_loss: bool = False):
    """train_gpt.forward's loss with torch.nn.functional (no dropout: cfg.dropout must be 0).
    float_loss: cross-entropy of the logits cast to float32 (the check), else of the logits in
    their dtype (torch's own path for 16-bit logits)."""
    F = t.nn.functional
    b, n = tokens.shape
    d, nh, hd = cfg.d_model, cfg.n_heads, cfg.head_dim
    P = params
    x = F.embedding(tokens, P["wte"]) + P["wpe"][:n]
    for i in range(cfg.n_layers):
        h = F.layer_norm(x, (d,), P[f"h{i}.ln1.w"], P[f"h{i}.ln1.b"], 1e-5)
        qkv = F.linear(h, P[f"h{i}.qkv.w"], P[f"h{i}.qkv.b"]).view(b, n, 3, nh, hd).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        x = x + F.linear(a.transpose(1, 2).reshape(b, n, d), P[f"h{i}.proj.w"], P[f"h{i}.proj.b"])
        h = F.layer_norm(x, (d,), P[f"h{i}.ln2.w"], P[f"h{i}.ln2.b"], 1e-5)
        f = F.gelu(F.linear(h, P[f"h{i}.fc.w"], P[f"h{i}.fc.b"]), approximate="tanh")
        x = x + F.linear(f, P[f"h{i}.fc2.w"], P[f"h{i}.fc2.b"])
    logits = F.linear(F.layer_norm(x, (d,), P["lnf.w"], P["lnf.b"], 1e-5), P["head.w"]).view(b * n, -1)
    return F.cross_entropy(logits.float() if float_loss else logits, targets.view(b * n))


def cnn_loss(t, cfg, params: dict, buffers: dict, images, labels, float_loss: bool = True):
    """train_cnn.forward's loss with torch.nn.functional (batch norm in training mode, updating
    `buffers` in place). The logits are few: their cross-entropy is always taken in float32."""
    F = t.nn.functional
    P = params

    def conv_bn(name, x):
        z = F.conv2d(x, P[f"{name}.w"], None, 1, 1)
        return F.batch_norm(z, buffers[f"{name}.running_mean"], buffers[f"{name}.running_var"], P[f"{name}.gamma"],
                            P[f"{name}.beta"], True, cfg.bn_momentum, cfg.eps)
    x = images
    for i in range(len(cfg.widths)):
        x = F.relu(conv_bn(f"s{i}.conv0", x))
        x = F.relu(x + conv_bn(f"s{i}.res2", F.relu(conv_bn(f"s{i}.res1", x))))
        if i < len(cfg.widths) - 1:
            x = F.max_pool2d(x, 2)
    logits = F.linear(x.mean((2, 3)), P["fc.w"], P["fc.b"])
    return F.cross_entropy(logits.float() if float_loss else logits, labels)


def adamw(t, params: list, cfg, capturable: bool = False):
    """torch's AdamW over the parameters as they are (16-bit parameters updated directly: torch's
    cheapest path; cudakit's side keeps float32 master weights), fused."""
    return t.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True, capturable=capturable)


def sgd(t, params: list, cfg):
    """torch's SGD with momentum, fused where this torch has it (else its multi-tensor path)."""
    kw = {"lr": cfg.lr, "momentum": cfg.momentum, "weight_decay": cfg.weight_decay}
    try:
        return t.optim.SGD(params, fused=True, **kw)
    except (TypeError, RuntimeError, ValueError):
        return t.optim.SGD(params, foreach=True, **kw)


def eager_step(loss_fn, opt):
    """step(*batch) -> loss: forward, backward, optimizer step, gradients freed (set to None)."""
    def step(*batch):
        loss = loss_fn(*batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def graphed_step(t, loss_fn, opt, batch: tuple, warmup: int = 3):
    """The whole step (forward, backward, optimizer) captured in one torch.cuda.CUDAGraph after
    `warmup` eager steps on a side stream (torch's documented whole-network capture); step(*batch)
    copies the batch into the static inputs and replays. The optimizer must be capturable."""
    static = [b.clone() for b in batch]
    side = t.cuda.Stream()
    side.wait_stream(t.cuda.current_stream())
    with t.cuda.stream(side):
        for _ in range(warmup):
            opt.zero_grad(set_to_none=True)
            loss_fn(*static).backward()
            opt.step()
    t.cuda.current_stream().wait_stream(side)
    graph = t.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with t.cuda.graph(graph):
        static_loss = loss_fn(*static)
        static_loss.backward()
        opt.step()

    def step(*new_batch):
        for s, b in zip(static, new_batch):
            s.copy_(b)
        graph.replay()
        return static_loss
    return step
