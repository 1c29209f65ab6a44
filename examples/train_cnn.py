"""Train a small ResNet-style CNN on generated images with cudakit's functional ops and a
hand-written backward.

    python examples/train_cnn.py --backend cpu --preset tiny --steps 30
    python examples/train_cnn.py --backend cuda --preset issue --dtype bfloat16 --graph
    python examples/train_cnn.py --backend cuda --preset issue --dtype bfloat16 --channels-last

The model, for widths (w1, w2, ...):
    per stage i:   x = relu(bn(conv3x3(x)))                       (to w_i channels)
                   x = relu(x + bn(conv3x3(relu(bn(conv3x3(x))))))  (a residual block)
                   x = max_pool2x2(x)                              (all stages but the last)
    logits = linear(mean of x over H and W)                        (global average pooling)
    loss = cross_entropy(logits, labels)
trained with SGD with momentum (float32 master weights when the parameters are 16-bit). Batch
norm runs in training mode: batch statistics, and the running statistics updated in place. Each
batch norm writes relu(bn(z)), or relu(x + bn(z)) at the end of a block, in one pass
(batch_norm's activation= and residual=), and the backward of relu(bn(z)) is one batch_norm_backward
(activation="relu"): no separate relu, add or relu_backward pass over those activations.
With --channels-last the images are (N, C, H, W) views of (N, H, W, C) memory, as PyTorch's
channels_last: every op keeps that layout (convolutions, batch norm, activations, the residual
adds and pooling return channels-last results for channels-last inputs), so no layer copies.

The images are generated (generate_batch): each class has its own colour tint and its own
orientation and frequency of a stripe pattern; every image gets a random phase and noise.

As a module: init_params(cfg, seed, device, dtype) -> {name: array}; forward(params, batch, cfg,
buffers) -> (loss, cache); backward(cache) -> {name: gradient}; Trainer(cfg, device, ...).step(
images, labels) -> loss, one SGD step. benchmarks (cudakit bench --ops train_cnn...) import these.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a script: train_common.py sits beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import cudakit  # noqa: E402
import train_common as common  # noqa: E402


@dataclass(frozen=True)
class CNNConfig:
    """Sizes and training settings: images (batch, 3, image, image), `classes` classes."""
    batch: int
    image: int
    widths: tuple
    classes: int = 10
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    bn_momentum: float = 0.1
    eps: float = 1e-5
    channels: int = 3


PRESETS = {
    "tiny": CNNConfig(batch=32, image=16, widths=(8, 16, 32), classes=4, lr=0.05),
    "small": CNNConfig(batch=64, image=32, widths=(16, 32, 64), classes=10, lr=0.05),
    # the CNN of issue 25 (its benchmark size)
    "issue": CNNConfig(batch=256, image=32, widths=(64, 128, 256), classes=10, lr=0.05),
}


# ---- data ----------------------------------------------------------------------------------------

def generate_batch(rng: np.random.Generator, cfg: CNNConfig, noise: float = 0.5) -> tuple:
    """(images (batch, channels, image, image) float32, labels (batch,) int64) drawn from rng.

    Class c: stripes at angle pi c / classes with 1 + c % 3 periods across the image and a random
    phase, tinted by a colour that depends on c, plus N(0, noise^2) noise per pixel."""
    n, s, k = cfg.batch, cfg.image, cfg.classes
    labels = rng.integers(0, k, size=n)
    yy, xx = np.meshgrid(np.arange(s) / s, np.arange(s) / s, indexing="ij")
    angle = np.pi * labels / k
    freq = 2 * np.pi * (1 + labels % 3)
    phase = rng.uniform(0, 2 * np.pi, size=n)
    proj = np.cos(angle)[:, None, None] * xx + np.sin(angle)[:, None, None] * yy
    stripes = np.sin(freq[:, None, None] * proj + phase[:, None, None])            # (n, s, s)
    tint = np.cos(2 * np.pi * (labels[:, None] / k + np.arange(cfg.channels) / cfg.channels))  # (n, C)
    images = stripes[:, None] * (0.5 + 0.5 * tint[:, :, None, None]) + 0.5 * tint[:, :, None, None]
    images += rng.normal(0.0, noise, size=images.shape)
    return images.astype(np.float32), labels.astype(np.int64)


# ---- parameters ----------------------------------------------------------------------------------

def conv_names(cfg: CNNConfig) -> list:
    """The conv-bn layers in forward order: (name, in channels, out channels)."""
    out, c = [], cfg.channels
    for i, w in enumerate(cfg.widths):
        out += [(f"s{i}.conv0", c, w), (f"s{i}.res1", w, w), (f"s{i}.res2", w, w)]
        c = w
    return out


def param_shapes(cfg: CNNConfig) -> dict:
    """{name: shape}: conv weights (K, C, 3, 3) without bias, batch-norm gamma and beta (K,), and
    the classifier's weight (classes, widths[-1]) and bias."""
    shapes = {}
    for name, cin, cout in conv_names(cfg):
        shapes.update({f"{name}.w": (cout, cin, 3, 3), f"{name}.gamma": (cout,), f"{name}.beta": (cout,)})
    shapes.update({"fc.w": (cfg.classes, cfg.widths[-1]), "fc.b": (cfg.classes,)})
    return shapes


def init_params(cfg: CNNConfig, seed: int, device: common.Device, dtype: str = "float32") -> dict:
    """He-normal conv weights (std sqrt(2 / fan_in)), gamma 1 (0 for the last batch norm of each
    residual block, so blocks start as the identity), beta 0, classifier N(0, 0.01); drawn in
    float32 on the host from `seed` and copied to the device in `dtype`."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if name.endswith(".w") and len(shape) == 4:
            a = rng.normal(0.0, math.sqrt(2.0 / (shape[1] * 9)), size=shape)
        elif name.endswith(".gamma"):
            a = np.full(shape, 0.0 if name.endswith("res2.gamma") else 1.0)
        elif name == "fc.w":
            a = rng.normal(0.0, 0.01, size=shape)
        else:
            a = np.zeros(shape)
        out[name] = device.asarray(a.astype(np.float32).astype(common.np_dtype(dtype)))
    return out


def init_buffers(cfg: CNNConfig, device: common.Device, dtype: str = "float32") -> dict:
    """Batch-norm running statistics: {name.running_mean: zeros, name.running_var: ones}, (K,)."""
    out = {}
    for name, _, cout in conv_names(cfg):
        out[f"{name}.running_mean"] = device.asarray(np.zeros(cout, common.np_dtype(dtype)))
        out[f"{name}.running_var"] = device.asarray(np.ones(cout, common.np_dtype(dtype)))
    return out


# ---- forward -------------------------------------------------------------------------------------

def _conv_bn_relu(params, buffers, name, x, cfg, cache, residual=None):
    """relu(bn(conv3x3(x)) + residual) (residual None: relu(bn(conv3x3(x)))) in training mode, the
    add and the relu in the batch norm's pass; saves what the backward needs under cache[name]."""
    z = cudakit.conv2d(x, params[f"{name}.w"], None, 1, 1)
    y, mean, invstd = cudakit.batch_norm_with_stats(z, params[f"{name}.gamma"], params[f"{name}.beta"],
                                                    buffers.get(f"{name}.running_mean"),
                                                    buffers.get(f"{name}.running_var"), True,
                                                    cfg.bn_momentum, cfg.eps, residual=residual, activation="relu")
    cache[name] = {"x": x, "z": z, "mean": mean, "invstd": invstd, "y": y, "residual": residual}
    return y


def forward(params: dict, batch: tuple, cfg: CNNConfig, buffers: dict | None = None):
    """The loss of one batch and what the backward needs.

    params: init_params' dict; batch: (images (N, C, H, W) in the params' dtype, labels (N,)
    int64) on the params' backend; buffers: init_buffers' running statistics, updated in place
    (None or {}: not kept). Returns (loss, cache): loss a 0-d float32 array (float64 for float64
    params), the mean cross-entropy in nats; cache a dict."""
    images, labels = batch
    buffers = buffers or {}
    c = {"cfg": cfg, "params": params, "pool_in": {}}
    x = images
    for i in range(len(cfg.widths)):
        x = _conv_bn_relu(params, buffers, f"s{i}.conv0", x, cfg, c)
        y = _conv_bn_relu(params, buffers, f"s{i}.res1", x, cfg, c)
        x = _conv_bn_relu(params, buffers, f"s{i}.res2", y, cfg, c, residual=x)   # the residual connection
        if i < len(cfg.widths) - 1:
            c["pool_in"][i] = x
            x = cudakit.max_pool2d(x, 2)
    c["last"] = x   # (its shape and layout: the gradient of the pooling takes both)
    c["pooled"] = cudakit.mean(x, axis=(2, 3))                           # (N, C)
    logits = cudakit.linear(c["pooled"], params["fc.w"], params["fc.b"])
    loss, c["dlogits"] = cudakit.cross_entropy_with_grad(logits, labels)
    return loss, c


# ---- backward ------------------------------------------------------------------------------------

def _conv_bn_backward(params, name, dy, cache, g, relu: bool):
    """d loss / d x of bn(conv3x3(x)) from dy, the gradient of its output (relu: of relu(bn(...)),
    the relu's mask applied by batch_norm_backward); the weights' gradients into g."""
    s = cache[name]
    gamma, beta = params[f"{name}.gamma"], params[f"{name}.beta"]
    dz, g[f"{name}.gamma"], g[f"{name}.beta"] = cudakit.batch_norm_backward(
        dy, s["z"], gamma, s["mean"], s["invstd"], beta=beta, activation="relu" if relu else None)
    dx, g[f"{name}.w"], _ = cudakit.conv2d_backward(dz, s["x"], params[f"{name}.w"], 1, 1, bias=False)
    return dx


def backward(cache: dict, on_grad=None) -> dict:
    """{name: gradient of the mean loss} for every parameter (its shape and dtype), from forward's
    cache, in the reverse order of the forward. on_grad(name, gradient), when given, is called as
    each gradient is produced (data parallel: its bucket's all-reduce starts early)."""
    params, cfg = cache["params"], cache["cfg"]
    g = common.GradHook(on_grad)
    dpooled, g["fc.w"], g["fc.b"] = cudakit.linear_backward(cache["dlogits"], cache["pooled"], params["fc.w"])
    dx = cudakit.mean_backward(dpooled, cache["last"].shape, axis=(2, 3), like=cache["last"])
    for i in reversed(range(len(cfg.widths))):
        if i < len(cfg.widths) - 1:
            dx = cudakit.max_pool2d_backward(dx, cache["pool_in"][i], 2)
        ds = cudakit.relu_backward(dx, cache[f"s{i}.res2"]["y"])   # x_out = relu(x + res(x)): d(x + res(x))
        dr = _conv_bn_backward(params, f"s{i}.res2", ds, cache, g, relu=False)
        dr = _conv_bn_backward(params, f"s{i}.res1", dr, cache, g, relu=True)
        dx = cudakit.add(ds, dr)                                 # the skip path and the residual path
        dx = _conv_bn_backward(params, f"s{i}.conv0", dx, cache, g, relu=True)
    return g


# ---- training ------------------------------------------------------------------------------------

def to_channels_last(x):
    """The (N, C, H, W) channels-last view of a copy of (N, C, H, W) x (cudakit's permute)."""
    return cudakit.permute(x, (0, 2, 3, 1)).transpose(0, 3, 1, 2)


class Trainer:
    """The parameters, running statistics, SGD and the step of one CNN on one backend.

    step(images, labels) runs forward, backward and one SGD step (queued, no host
    synchronisation) and returns the loss before the update as a 0-d array. With graph=True the
    forward and backward are captured once in a CUDA graph (cudakit.graph) on the first call and
    replayed after; SGD runs outside the graph as one multi-tensor launch (cudakit's optimizer
    passes its step-dependent scalars as host values). The running statistics are updated by the
    graph's warm-up calls too. Data parallel with graph=True: the whole step (with its NCCL
    all-reduces and both SGD parts) is captured on the second call, after one eager step, and
    replayed from then on (see train_gpt.Trainer).
    """

    def __init__(self, cfg: CNNConfig, device: common.Device, dtype: str = "float32", seed: int = 0,
                 graph: bool = False, bucket_mb: float = 25.0, tail_bucket_mb: float = 1.0, grad_copy: bool = True,
                 zero: bool = False, channels_last: bool = False):
        self.cfg, self.device, self.graph, self.channels_last = cfg, device, graph, channels_last
        # first: joining the group selects this rank's GPU
        self.dp = common.DataParallel(device, bucket_mb, tail_bucket_mb, grad_copy, peer=not graph, zero=zero)
        self.params = init_params(cfg, seed, device, dtype)
        if channels_last:   # the conv weights too, as PyTorch's model.to(memory_format=channels_last):
            # cuDNN reads them in place and writes their gradients so (no layout copy a call)
            self.params = {n: to_channels_last(a) if a.ndim == 4 else a for n, a in self.params.items()}
        self.buffers = init_buffers(cfg, device, dtype)
        self.names = sorted(self.params)
        self._optimizer_over = lambda arrays: cudakit.SGD(   # noqa: E731 -- data parallel: one per part
            arrays, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
            master_weights=dtype in ("bfloat16", "float16"))
        self._make_opt = lambda names: self._optimizer_over([self.params[n] for n in names])  # noqa: E731
        self.opt = None if self.dp.active else self._make_opt(self.names)
        self._graphed = None
        self.params = self.dp.attach(self.params, self._optimizer_over)

    def images(self, host_images):
        """A batch's images on the device, in the trainer's layout (channels-last: an (N, C, H, W)
        view of (N, H, W, C) memory)."""
        x = self.device.asarray(host_images)
        return to_channels_last(x) if self.channels_last else x

    def forward_backward(self, images, labels):
        """(loss, gradient, gradient, ...) in the order of self.names."""
        with cudakit.profiler.range("forward"):   # ranges: no-ops unless a profile is active (--trace)
            loss, cache = forward(self.params, (images, labels), self.cfg, self.buffers)
        with cudakit.profiler.range("backward"):
            grads = backward(cache)
        return (loss, *(grads[n] for n in self.names))

    def _dp_step(self, images, labels):
        """One data-parallel step: gradients all-reduced in buckets as the backward makes them;
        returns the loss averaged over the ranks."""
        with cudakit.profiler.range("forward"):
            loss, cache = forward(self.params, (images, labels), self.cfg, self.buffers)
        mean = self.dp.start_mean_loss(loss)
        # the backward (its "backward" range) and the optimizer, which steps the parameters of the
        # last bucket after its all-reduce and the others while it runs
        self.dp.step(lambda hook: backward(cache, hook), self.names, self._make_opt)
        return self.dp.finish_mean_loss(mean)

    def step(self, images, labels):
        if self.dp.active:
            return self.dp.run_step(self._dp_step, (images, labels), self.graph)
        if self.graph:
            if self._graphed is None:
                self._graphed = cudakit.graph(self.forward_backward, images, labels)
            loss, *grads = self._graphed(images, labels)
        else:
            loss, *grads = self.forward_backward(images, labels)
        with cudakit.profiler.range("optimizer"):
            self.opt.step(grads)
        return loss


def main(argv=None) -> int:
    p = common.parser("Train a small ResNet-style CNN on generated images with cudakit's ops.", PRESETS)
    p.add_argument("--channels-last", action="store_true",
                   help="images (and so every activation) in channels-last memory, as PyTorch's channels_last")
    args = common.parse(p, argv)
    cfg = PRESETS[args.preset]
    if args.lr is not None:
        cfg = replace(cfg, lr=args.lr)
    device = common.Device(args.backend)
    trainer = Trainer(cfg, device, args.dtype, args.seed, args.graph, args.bucket_mb, args.tail_bucket_mb,
                      args.grad_copy, args.zero, args.channels_last)
    rng = np.random.default_rng(args.seed + 1 + 1000 * trainer.dp.rank)   # each rank its own batches
    dt = common.np_dtype(args.dtype)
    print(f"cnn {args.preset}: batch {cfg.batch}, {cfg.channels}x{cfg.image}x{cfg.image} images, widths "
          f"{'-'.join(map(str, cfg.widths))}, {cfg.classes} classes, "
          f"{sum(int(np.prod(s)) for s in param_shapes(cfg).values())} parameters; {args.dtype} on {device.name}"
          + (", CUDA graph" if args.graph else "") + (", channels-last" if args.channels_last else ""))

    def next_batch(_i):
        images, labels = generate_batch(rng, cfg)
        return trainer.images(images.astype(dt)), device.asarray(labels)
    common.run(trainer.step, next_batch, args.steps, device, rank=trainer.dp.rank, trace=args.trace,
               profile_host=args.profile_host)
    trainer.dp.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
