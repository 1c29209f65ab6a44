"""Train a small character-level GPT with cudakit's functional ops and a hand-written backward.

    python examples/train_gpt.py --backend cpu --preset tiny --steps 30
    python examples/train_gpt.py --backend cuda --preset gpt-issue --dtype bfloat16 --graph

The model is a GPT-style decoder:
    x = dropout(token_embedding[tokens] + position_embedding)
    per block (pre-LN):
        h = layernorm(x);  q, k, v = split(linear(h, W_qkv));  a = causal_attention(q, k, v)
        x = x + dropout(linear(a, W_proj))
        h = layernorm(x);  x = x + dropout(linear(gelu(linear(h, W_fc)), W_fc2))
    logits = linear(layernorm(x), W_head);  loss = cross_entropy(logits, next tokens)
and it is trained with AdamW (float32 master weights when the parameters are 16-bit).

Every computation is a cudakit op: the same code runs on NumPy arrays (the CPU backend) and CuPy
arrays (the CUDA backend). The array module itself is used only where cudakit has no op: to look
up the embedding rows of the tokens and to build the one-hot matrix whose product with the
gradient gives the embedding's gradient (a deterministic scatter-add).

Reading the backward: each forward op has a `*_backward` op in cudakit that takes the gradient of
its output and what the forward saved (the inputs, layernorm's mean and rstd, attention's
log-sum-exp, the GELU pre-activation, the dropout seed) and returns the gradients of its inputs.
The backward below calls them in the reverse order of the forward, adding the gradients where
the forward used a value twice (the residual stream: layernorm_backward's residual_grad adds the
residual path's gradient in its own pass). fc2's linear_backward takes the GELU pre-activation
(gelu_pre) and returns the gradient through the GELU, computed in the GEMM's epilogue.

As a module: init_params(cfg, seed, device) -> {name: array}; forward(params, batch, cfg, step)
-> (loss, cache); backward(cache) -> {name: gradient}; Trainer(cfg, device, ...).step(tokens,
targets) -> loss, one AdamW step. benchmarks (cudakit bench --ops train_gpt...) import these.
"""
from __future__ import annotations

import itertools
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a script: train_common.py sits beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import cudakit  # noqa: E402
import train_common as common  # noqa: E402

TEXT = Path(__file__).resolve().parent / "data" / "tiny_text.txt"


@dataclass(frozen=True)
class GPTConfig:
    """Model and training sizes. vocab None: the characters of the text (a character-level model);
    a number: a generated token stream over that many tokens (see synthetic_stream)."""
    d_model: int
    n_heads: int
    n_layers: int
    seq: int
    batch: int
    vocab: int | None = None
    dropout: float = 0.0
    lr: float = 3e-4
    weight_decay: float = 0.01

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


PRESETS = {
    "tiny": GPTConfig(d_model=64, n_heads=4, n_layers=2, seq=64, batch=8, dropout=0.1, lr=3e-3),
    "small": GPTConfig(d_model=128, n_heads=4, n_layers=4, seq=128, batch=16, dropout=0.1, lr=3e-3),
    # the GPT of issue 25 (its benchmark size) and its host-bound variant
    "gpt-issue": GPTConfig(d_model=768, n_heads=12, n_layers=4, seq=1024, batch=8, vocab=8192, lr=3e-4),
    "host-bound": GPTConfig(d_model=256, n_heads=4, n_layers=2, seq=128, batch=4, vocab=8192, lr=1e-3),
}


# ---- data ----------------------------------------------------------------------------------------

class TextData:
    """Character-level data: the text as token ids, and batches of random windows of it."""

    def __init__(self, text: str):
        self.chars = sorted(set(text))
        index = {c: i for i, c in enumerate(self.chars)}
        self.ids = np.array([index[c] for c in text], dtype=np.int64)

    @property
    def vocab(self) -> int:
        return len(self.chars)

    def batch(self, rng: np.random.Generator, batch: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, targets), each (batch, seq) int64: windows of the text and the next characters."""
        if len(self.ids) <= seq + 1:
            raise ValueError(f"the text has {len(self.ids)} characters; a window of seq={seq} needs more")
        starts = rng.integers(0, len(self.ids) - seq - 1, size=batch)
        window = self.ids[starts[:, None] + np.arange(seq + 1)]
        return window[:, :-1].copy(), window[:, 1:].copy()


def synthetic_stream(vocab: int, length: int, seed: int, branching: int = 4) -> np.ndarray:
    """A learnable token stream over `vocab` tokens: a Markov chain in which each token is followed
    by one of `branching` successors drawn once per token (so the best loss is about log(branching))."""
    rng = np.random.default_rng(seed)
    successors = rng.integers(0, vocab, size=(vocab, branching))
    choice = rng.integers(0, branching, size=length)
    out = np.empty(length, dtype=np.int64)
    tok = int(rng.integers(0, vocab))
    for i in range(length):
        out[i] = tok
        tok = int(successors[tok, choice[i]])
    return out


class StreamData(TextData):
    """Batches of random windows of a generated token stream (synthetic_stream)."""

    def __init__(self, vocab: int, length: int, seed: int):
        self.chars = [None] * vocab
        self.ids = synthetic_stream(vocab, length, seed)


def make_data(cfg: GPTConfig, seed: int) -> TextData:
    if cfg.vocab is None:
        return TextData(TEXT.read_text(encoding="utf-8"))
    return StreamData(cfg.vocab, max(1 << 16, 4 * cfg.batch * (cfg.seq + 1)), seed)


# ---- parameters ----------------------------------------------------------------------------------

def param_shapes(cfg: GPTConfig) -> dict:
    """{name: shape} of every parameter; linear weights are (out_features, in_features)."""
    d, v = cfg.d_model, cfg.vocab
    shapes = {"wte": (v, d), "wpe": (cfg.seq, d)}
    for i in range(cfg.n_layers):
        shapes.update({f"h{i}.ln1.w": (d,), f"h{i}.ln1.b": (d,),
                       f"h{i}.qkv.w": (3 * d, d), f"h{i}.qkv.b": (3 * d,),
                       f"h{i}.proj.w": (d, d), f"h{i}.proj.b": (d,),
                       f"h{i}.ln2.w": (d,), f"h{i}.ln2.b": (d,),
                       f"h{i}.fc.w": (4 * d, d), f"h{i}.fc.b": (4 * d,),
                       f"h{i}.fc2.w": (d, 4 * d), f"h{i}.fc2.b": (d,)})
    shapes.update({"lnf.w": (d,), "lnf.b": (d,), "head.w": (v, d)})
    return shapes


def init_params(cfg: GPTConfig, seed: int, device: common.Device, dtype: str = "float32") -> dict:
    """GPT-2's initialisation, drawn in float32 on the host from `seed` (so every backend and dtype
    starts from the same weights) and copied to the device in `dtype`: weights N(0, 0.02), the
    projections into the residual stream N(0, 0.02 / sqrt(2 n_layers)), biases 0, layernorm
    weights 1. cfg.vocab must be set (see with_vocab)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if name.endswith((".ln1.w", ".ln2.w")) or name == "lnf.w":
            a = np.ones(shape, np.float32)
        elif name.endswith(".b"):
            a = np.zeros(shape, np.float32)
        else:
            std = 0.02 / math.sqrt(2 * cfg.n_layers) if name.endswith((".proj.w", ".fc2.w")) else 0.02
            a = rng.normal(0.0, std, size=shape).astype(np.float32)
        out[name] = device.asarray(a.astype(common.np_dtype(dtype)))
    return out


# ---- forward -------------------------------------------------------------------------------------

class Block:
    """The parameters of block i by their names within it: Block(params, i)["ln1.w"] is
    params["h{i}.ln1.w"]."""

    __slots__ = ("params", "prefix")

    def __init__(self, params: dict, i: int):
        self.params, self.prefix = params, f"h{i}."

    def __getitem__(self, name: str):
        return self.params[self.prefix + name]


def dropout_seed(step: int, site: int) -> int:
    """The dropout seed of one dropout site at one training step (cudakit.dropout's mask is a pure
    function of the seed, so the backward regenerates it from the same seed)."""
    return (step * 1_000_003 + site) % (1 << 63)


def _dropout(x, p: float, seed: int):
    return cudakit.dropout(x, p, seed) if p > 0 else x


def _plus_linear(x, h, w, b, p: float, seed: int):
    """x + dropout(linear(h, w, b)), the residual stream's update, with no add pass: dropout adds x
    in its own pass (its residual), or without dropout the GEMM does (linear's residual: its
    epilogue reads x)."""
    if p > 0:
        return cudakit.dropout(cudakit.linear(h, w, b), p, seed, residual=x)
    return cudakit.linear(h, w, b, residual=x)


def _dropout_backward(g, p: float, seed: int):
    return cudakit.dropout_backward(g, p, seed) if p > 0 else g


def forward(params: dict, batch: tuple, cfg: GPTConfig, step: int = 0, xp=np):
    """The loss of one batch and what the backward needs.

    params: init_params' dict; batch: (tokens, targets), (B, T) int64 arrays on the params'
    backend, T <= cfg.seq; step: selects the dropout masks (dropout_seed); xp: the array module of
    the params (numpy or cupy), for the embedding lookup. Returns (loss, cache): loss a 0-d float32
    array (float64 for float64 params), the mean cross-entropy in nats per token; cache a dict."""
    tokens, targets = batch
    b, t = tokens.shape
    d, nh, hd, p = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.dropout
    c = {"cfg": cfg, "step": step, "shape": (b, t), "tokens": tokens, "xp": xp, "layers": []}
    site = itertools.count()                         # dropout sites, in forward order

    x = cudakit.add(_rows(params["wte"], tokens, xp), params["wpe"][:t])          # (B, T, D)
    c["emb_seed"] = dropout_seed(step, next(site))
    x = _dropout(x, p, c["emb_seed"])
    for i in range(cfg.n_layers):
        L = {"x_in": x}
        P = Block(params, i)
        # attention: layernorm, QKV projection, heads split off, causal attention, heads merged
        L["h1"], L["m1"], L["r1"] = cudakit.layernorm_with_stats(x, P["ln1.w"], P["ln1.b"])
        qkv = cudakit.linear(L["h1"], P["qkv.w"], P["qkv.b"]).reshape(b, t, 3, nh, hd)
        # q, k, v: (B, T, H, hd) views of the packed projection, no copies (layout "blhd")
        L["q"], L["k"], L["v"] = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        L["a"], L["lse"] = cudakit.attention_with_lse(L["q"], L["k"], L["v"], causal=True, layout="blhd")
        L["a2"] = L["a"].reshape(b, t, d)                                      # heads merged: (B, T, D)
        L["seed1"] = dropout_seed(step, next(site))
        x = _plus_linear(x, L["a2"], P["proj.w"], P["proj.b"], p, L["seed1"])
        # MLP: layernorm, linear + GELU (one fused op), linear
        L["x_mid"] = x
        L["h2"], L["m2"], L["r2"] = cudakit.layernorm_with_stats(x, P["ln2.w"], P["ln2.b"])
        L["f"], L["pre"] = cudakit.fused_linear_gelu_with_preact(L["h2"], P["fc.w"], P["fc.b"])
        L["seed2"] = dropout_seed(step, next(site))
        x = _plus_linear(x, L["f"], P["fc2.w"], P["fc2.b"], p, L["seed2"])
        c["layers"].append(L)
    c["x_final"] = x
    c["hf"], c["mf"], c["rf"] = cudakit.layernorm_with_stats(x, params["lnf.w"], params["lnf.b"])
    logits = cudakit.linear(c["hf"], params["head.w"])                       # (B, T, V)
    loss, c["dlogits"] = cudakit.cross_entropy_with_grad(logits.reshape(b * t, -1), targets.reshape(b * t))
    c["params"] = params
    return loss, c


# ---- backward ------------------------------------------------------------------------------------

def backward(cache: dict, on_grad=None) -> dict:
    """{name: gradient of the mean loss} for every parameter, each of the parameter's shape and
    dtype, from forward's cache (cross_entropy_with_grad already gave d loss / d logits).
    on_grad(name, gradient), when given, is called as each gradient is produced (data parallel:
    its bucket's all-reduce can start while the rest of the backward runs)."""
    params, cfg, xp = cache["params"], cache["cfg"], cache["xp"]
    b, t = cache["shape"]
    d, nh, hd, p = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.dropout
    g = common.GradHook(on_grad)
    dlogits = cache["dlogits"].reshape(b, t, -1)
    dhf, g["head.w"], _ = cudakit.linear_backward(dlogits, cache["hf"], params["head.w"], bias=False)
    dx, g["lnf.w"], g["lnf.b"] = cudakit.layernorm_backward(dhf, cache["x_final"], params["lnf.w"],
                                                            cache["mf"], cache["rf"])
    for i in reversed(range(cfg.n_layers)):
        L = cache["layers"][i]
        P = Block(params, i)
        # MLP: x_out = x_mid + dropout(fc2(gelu(fc(ln2(x_mid)))))
        do = _dropout_backward(dx, p, L["seed2"])
        # fc2's backward goes through the GELU too (gelu_pre): the gradient of fc's pre-activation
        dpre, g[f"h{i}.fc2.w"], g[f"h{i}.fc2.b"] = cudakit.linear_backward(do, L["f"], P["fc2.w"], gelu_pre=L["pre"])
        dh2, g[f"h{i}.fc.w"], g[f"h{i}.fc.b"] = cudakit.linear_backward(dpre, L["h2"], P["fc.w"])
        # the residual path's gradient dx added to the MLP path's in layernorm's backward pass
        dx, g[f"h{i}.ln2.w"], g[f"h{i}.ln2.b"] = cudakit.layernorm_backward(dh2, L["x_mid"], P["ln2.w"],
                                                                            L["m2"], L["r2"], residual_grad=dx)
        # attention: x_mid = x_in + dropout(proj(merge(attention(split(qkv(ln1(x_in)))))))
        do = _dropout_backward(dx, p, L["seed1"])
        da2, g[f"h{i}.proj.w"], g[f"h{i}.proj.b"] = cudakit.linear_backward(do, L["a2"], P["proj.w"])
        # dq, dk, dv as the thirds of one (B, T, 3, H, hd) array, as q, k, v were of the projection's
        dqkv = cudakit.attention_backward(da2.reshape(b, t, nh, hd), L["q"], L["k"], L["v"], L["a"], L["lse"],
                                          causal=True, layout="blhd", qkv_packed=True)
        dh1, g[f"h{i}.qkv.w"], g[f"h{i}.qkv.b"] = cudakit.linear_backward(dqkv.reshape(b, t, 3 * d), L["h1"],
                                                                          P["qkv.w"])
        dx, g[f"h{i}.ln1.w"], g[f"h{i}.ln1.b"] = cudakit.layernorm_backward(dh1, L["x_in"], P["ln1.w"],
                                                                            L["m1"], L["r1"], residual_grad=dx)
    dx = _dropout_backward(dx, p, cache["emb_seed"])
    # embeddings: the position table's gradient sums over the batch; the token table's adds each
    # row's gradient into the row of its token: one_hot(tokens)^T @ dx, one matrix product
    g["wpe"] = _pad_rows(cudakit.sum(dx, axis=0), params["wpe"].shape[0], xp)
    g["wte"] = cudakit.matmul(_one_hot_t(cache["tokens"], params["wte"].shape[0], dx.dtype, xp),
                              dx.reshape(b * t, d))
    return g


# The array module's indexing, used where cudakit has no op, moves the arrays' bits as unsigned
# integers of the same size: a pure copy for every float dtype (bfloat16 included), with no
# arithmetic and no dependence on the array module's support for that dtype.

def _bits(a, xp):
    """a viewed as unsigned integers of its item size."""
    return a.view({2: xp.uint16, 4: xp.uint32, 8: xp.uint64}[a.dtype.itemsize])


def _rows(table, index, xp):
    """table[index]: the rows of a (N, D) table for an int array of indices, index.shape + (D,)."""
    return xp.take(_bits(table, xp), index, axis=0).view(table.dtype)


def _one_hot_t(tokens, vocab: int, dtype, xp):
    """(vocab, tokens.size) matrix of `dtype` with a 1 in row tokens[j] of column j."""
    flat = tokens.reshape(-1)
    oh = xp.zeros((vocab, flat.size), dtype=dtype)
    one = _bits(np.ones(1, dtype), np)[0]          # the bits of 1 in dtype
    _bits(oh, xp)[flat, xp.arange(flat.size)] = one
    return oh


def _pad_rows(g, rows: int, xp):
    """g (T, D) as the gradient of a (rows, D) table of which the first T rows were used."""
    if g.shape[0] == rows:
        return g
    out = xp.zeros((rows,) + g.shape[1:], dtype=g.dtype)
    _bits(out, xp)[:g.shape[0]] = _bits(g, xp)
    return out


# ---- training ------------------------------------------------------------------------------------

def with_vocab(cfg: GPTConfig, data: TextData) -> GPTConfig:
    """cfg with its vocabulary size taken from the data (the character set of a text)."""
    return cfg if cfg.vocab == data.vocab else replace(cfg, vocab=data.vocab)


class Trainer:
    """The parameters, AdamW and the step of one model on one backend.

    step(tokens, targets) runs forward, backward and one AdamW step (queued, no host
    synchronisation) and returns the loss before the update as a 0-d array. With graph=True the
    forward and backward are captured once in a CUDA graph (cudakit.graph) on the first call and
    replayed after; AdamW runs outside the graph as one multi-tensor launch. Data parallel with
    graph=True: the whole step (forward, the loss's all-reduce, the backward with its bucket
    copies and NCCL all-reduces, both AdamW parts) is captured on the second call, after one
    eager step made the gradient buckets and the optimizer state, and replayed from then on:
    the host then spends one launch a step instead of the step's Python, which two busy ranks on
    one host otherwise fight over. Dropout takes its seed as a host value (baked into a capture),
    so graph=True needs cfg.dropout == 0.
    """

    def __init__(self, cfg: GPTConfig, device: common.Device, dtype: str = "float32", seed: int = 0,
                 graph: bool = False, bucket_mb: float = 25.0, tail_bucket_mb: float = 1.0, grad_copy: bool = True, zero: bool = False):
        if graph and cfg.dropout > 0:
            raise ValueError(f"graph=True replays the dropout masks it captured on every step (cudakit.dropout "
                             f"takes its seed as a host integer); use dropout=0 (got {cfg.dropout})")
        self.cfg, self.device, self.graph = cfg, device, graph
        # first: joining the group selects this rank's GPU
        self.dp = common.DataParallel(device, bucket_mb, tail_bucket_mb, grad_copy, peer=not graph, zero=zero)
        self.params = init_params(cfg, seed, device, dtype)
        self.names = sorted(self.params)
        self._optimizer_over = lambda arrays: cudakit.AdamW(   # noqa: E731 -- data parallel: one per part
            arrays, lr=cfg.lr, weight_decay=cfg.weight_decay, master_weights=dtype in ("bfloat16", "float16"))
        self._make_opt = lambda names: self._optimizer_over([self.params[n] for n in names])  # noqa: E731
        self.opt = None if self.dp.active else self._make_opt(self.names)
        self.steps = 0
        self._graphed = None
        self.params = self.dp.attach(self.params, self._optimizer_over)

    def forward_backward(self, tokens, targets):
        """(loss, gradient, gradient, ...) in the order of self.names, for the current step."""
        with cudakit.profiler.range("forward"):   # ranges: no-ops unless a profile is active (--trace)
            loss, cache = forward(self.params, (tokens, targets), self.cfg, self.steps, self.device.xp)
        with cudakit.profiler.range("backward"):
            grads = backward(cache)
        return (loss, *(grads[n] for n in self.names))

    def _dp_step(self, tokens, targets):
        """One data-parallel step: gradients all-reduced in buckets as the backward makes them;
        returns the loss averaged over the ranks."""
        with cudakit.profiler.range("forward"):
            loss, cache = forward(self.params, (tokens, targets), self.cfg, self.steps, self.device.xp)
        mean = self.dp.start_mean_loss(loss)
        # the backward (its "backward" range) and AdamW, which steps the parameters of the last
        # bucket after its all-reduce and the others while it runs
        self.dp.step(lambda hook: backward(cache, hook), self.names, self._make_opt)
        return self.dp.finish_mean_loss(mean)

    def step(self, tokens, targets):
        if self.dp.active:
            loss = self.dp.run_step(self._dp_step, (tokens, targets), self.graph)
            self.steps += 1
            return loss
        if self.graph:
            if self._graphed is None:
                self._graphed = cudakit.graph(self.forward_backward, tokens, targets)
            loss, *grads = self._graphed(tokens, targets)
        else:
            loss, *grads = self.forward_backward(tokens, targets)
        with cudakit.profiler.range("optimizer"):
            self.opt.step(grads)
        self.steps += 1
        return loss


def main(argv=None) -> int:
    p = common.parser("Train a small GPT with cudakit's ops and a hand-written backward.", PRESETS)
    p.add_argument("--dropout", type=float, default=None, help="dropout probability (default: the preset's)")
    args = common.parse(p, argv)
    cfg = PRESETS[args.preset]
    cfg = replace(cfg, lr=args.lr if args.lr is not None else cfg.lr,
                  dropout=args.dropout if args.dropout is not None else cfg.dropout)
    if args.graph and cfg.dropout > 0:
        p.error(f"--graph replays the dropout masks of the captured step on every step (cudakit.dropout takes "
                f"its seed as a host integer); pass --dropout 0 (preset {args.preset} has {cfg.dropout})")
    if not 0 <= cfg.dropout < 1:
        p.error(f"--dropout must be in [0, 1) (got {cfg.dropout})")
    device = common.Device(args.backend)
    data = make_data(cfg, args.seed)
    cfg = with_vocab(cfg, data)
    trainer = Trainer(cfg, device, args.dtype, args.seed, args.graph, args.bucket_mb, args.tail_bucket_mb,
                      args.grad_copy, args.zero)
    rng = np.random.default_rng(args.seed + 1 + 1000 * trainer.dp.rank)   # each rank its own batches
    print(f"gpt {args.preset}: d_model {cfg.d_model}, {cfg.n_heads} heads, {cfg.n_layers} layers, seq {cfg.seq}, "
          f"batch {cfg.batch}, vocab {cfg.vocab}, {sum(int(np.prod(s)) for s in param_shapes(cfg).values())} "
          f"parameters; {args.dtype} on {device.name}" + (", CUDA graph" if args.graph else "")
          + (f", data parallel over {trainer.dp.world} ranks" if trainer.dp.active else ""))

    def next_batch(_i):
        return tuple(device.asarray(a) for a in data.batch(rng, cfg.batch, cfg.seq))
    common.run(trainer.step, next_batch, args.steps, device, rank=trainer.dp.rank, trace=args.trace,
               profile_host=args.profile_host)
    trainer.dp.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
