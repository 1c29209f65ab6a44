"""Every CUDAKIT_* setting, in one place. Read from the environment when first needed, not at import.

| variable                  | meaning                                                          |
| ------------------------- | ---------------------------------------------------------------- |
| CUDAKIT_BACKEND           | "auto" (default), "cpu" or "cuda": what get_backend() picks      |
| CUDAKIT_CACHE_DIR         | compiled-kernel cache (default ~/.cache/cudakit)                 |
| CUDAKIT_GPU_MEMORY_LIMIT  | pool limit per device: bytes, "8GiB", "512MB" or "80%"           |
| CUDAKIT_GPU_CACHE_SIZE    | most cached free bytes a device's pool keeps: "2GB", "10%"       |
| CUDAKIT_LAUNCH_BLOCKING   | "1": synchronise after every launch so errors name their kernel  |
| CUDAKIT_AUTOTUNE          | "0": use the first config instead of timing them                 |
| CUDAKIT_AUTOTUNE_LOG      | "1": log each autotuning trial                                   |
| CUDAKIT_NATIVE            | "0": launch through CuPy's binding, not the native launcher      |
| CUDAKIT_DISPATCH_PLANS    | "0": every call takes its checked path (no cudakit.dispatch plans) |
| CUDAKIT_CUDNN             | "auto" (default): cuDNN (the `cudnn` extra) is a candidate path of |
|                           | conv2d and attention where installed; "0": never; "1": required  |
| CUDAKIT_FLOAT32_PRECISION | products in float32 conv2d and attention: "tf32x3" (default),    |
|                           | "ieee" or "tf32" (see float32_precision below)                   |
| CUDAKIT_DISTRIBUTED_DEBUG | "1": check that shapes and dtypes agree across ranks before each |
|                           | collective (one store round trip per collective)                 |
| CUDAKIT_ATTENTION_DROPOUT | attention's dropout mask on the GPU: "cudnn" (default: cuDNN's   |
|                           | fused dropout and its own stream where cuDNN takes the call) or  |
|                           | "cudakit" (cudakit.dropout's Philox stream, the CPU backend's)   |
| CUDAKIT_ATTENTION_F16_PARTS | "0": withdraw the float32 attention forward on float16     |
|                           | parts (offered by default, timed against the TF32 split forward) |
| CUDAKIT_PDL               | "0": launch the kernels that support it without programmatic     |
|                           | dependent launch (on by default from compute capability 9.0)     |
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ArgumentError, ConfigError

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Settings:
    backend: str
    cache_dir: Path
    memory_limit: str | None
    launch_blocking: bool
    autotune: bool
    autotune_log: bool
    native: bool = True
    dispatch_plans: bool = True
    float32_precision: str = "tf32x3"
    cache_size: str | None = None
    distributed_debug: bool = False
    cudnn: str = "auto"
    attention_dropout: str = "cudnn"
    attention_f16_parts: bool = True
    pdl: bool = True
    bn_single_read: bool = True

    @classmethod
    def from_env(cls) -> "Settings":
        """The settings of os.environ, every value checked: one a variable cannot take raises
        ConfigError naming the variable, the value and the accepted forms (at the first use of
        any setting, not deep inside the first GPU kernel that reads it)."""
        env = os.environ
        backend = env.get("CUDAKIT_BACKEND", "auto").strip().lower() or "auto"
        if backend not in BACKENDS:
            raise ConfigError(f"CUDAKIT_BACKEND={env.get('CUDAKIT_BACKEND')!r} is not a backend; accepted: "
                              f"{', '.join(BACKENDS)} (or unset for auto)")
        cache = env.get("CUDAKIT_CACHE_DIR") or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cudakit")
        sizes = {}
        for var in ("CUDAKIT_GPU_MEMORY_LIMIT", "CUDAKIT_GPU_CACHE_SIZE"):
            v = env.get(var) or None
            if v is not None:
                try:
                    parse_size(v)
                except ValueError as e:
                    raise ConfigError(f"{var}={v!r} is not a memory size ({e}); accepted: bytes (1073741824), "
                                      f"a size with a unit ('8GiB', '512MB') or a fraction of the device ('80%')") from None
            sizes[var] = v
        prec = env.get("CUDAKIT_FLOAT32_PRECISION", "tf32x3").strip().lower() or "tf32x3"
        if prec not in FLOAT32_PRECISIONS:
            raise ConfigError(f"CUDAKIT_FLOAT32_PRECISION={env.get('CUDAKIT_FLOAT32_PRECISION')!r} must be one of "
                              f"{', '.join(map(repr, FLOAT32_PRECISIONS))} (got {prec!r})")
        cudnn = env.get("CUDAKIT_CUDNN", "auto").strip().lower() or "auto"
        cudnn = {"auto": "auto", **{t: "1" for t in _TRUE}, **{f: "0" for f in _FALSE}}.get(cudnn)
        if cudnn is None:
            raise ConfigError(f"CUDAKIT_CUDNN={env.get('CUDAKIT_CUDNN')!r} must be 'auto', '0' (never use cuDNN) or "
                              f"'1' (require it)")
        drop = env.get("CUDAKIT_ATTENTION_DROPOUT", "cudnn").strip().lower() or "cudnn"
        if drop not in ATTENTION_DROPOUT_STREAMS:
            raise ConfigError(f"CUDAKIT_ATTENTION_DROPOUT={env.get('CUDAKIT_ATTENTION_DROPOUT')!r} must be one of "
                              f"{', '.join(map(repr, ATTENTION_DROPOUT_STREAMS))}")
        return cls(
            backend=backend,
            cache_dir=Path(cache),
            memory_limit=sizes["CUDAKIT_GPU_MEMORY_LIMIT"],
            cache_size=sizes["CUDAKIT_GPU_CACHE_SIZE"],
            launch_blocking=_flag(env, "CUDAKIT_LAUNCH_BLOCKING", False),
            autotune=_flag(env, "CUDAKIT_AUTOTUNE", True),
            autotune_log=_flag(env, "CUDAKIT_AUTOTUNE_LOG", False),
            native=_flag(env, "CUDAKIT_NATIVE", True),
            dispatch_plans=_flag(env, "CUDAKIT_DISPATCH_PLANS", True),
            float32_precision=prec,
            distributed_debug=_flag(env, "CUDAKIT_DISTRIBUTED_DEBUG", False),
            cudnn=cudnn,
            attention_dropout=drop,
            attention_f16_parts=_flag(env, "CUDAKIT_ATTENTION_F16_PARTS", True),
            pdl=_flag(env, "CUDAKIT_PDL", True),
            bn_single_read=_flag(env, "CUDAKIT_BN_SINGLE_READ", True),
        )


BACKENDS = ("auto", "cpu", "cuda")
# where attention's dropout mask comes from on the GPU: "cudnn" (the default: cuDNN's fused dropout,
# its own Philox stream, for the 16-bit calls cuDNN takes, the others cudakit's; on an H100 it ran
# 0.97-1.01x torch's SDPA with dropout where cudakit's stream on the Triton kernels ran forward
# 0.54-0.65x, backward 0.37-0.42x: kernels/attention.py cudnn_dropout) or "cudakit" (cudakit.dropout's
# Philox stream over the flat scores on every call, the CPU backend's too: both backends drop the
# same probabilities)
ATTENTION_DROPOUT_STREAMS = ("cudakit", "cudnn")
_FALSE = {"0", "false", "no", "off"}


def _flag(env, var: str, default: bool) -> bool:
    """A yes/no variable: 1/true/yes/on or 0/false/no/off (any case), empty or unset for the default."""
    v = env.get(var, "").strip().lower()
    if not v:
        return default
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ConfigError(f"{var}={env.get(var)!r} is not a yes/no value; accepted: {', '.join(sorted(_TRUE))} or "
                      f"{', '.join(sorted(_FALSE))}")


_settings: Settings | None = None


def settings() -> Settings:
    """The settings in force; read from the environment on first use."""
    global _settings
    if _settings is None:
        _settings = Settings.from_env()
    return _settings


# How the GPU's float32 conv2d and attention kernels multiply (Triton's input_precision names):
#   "ieee"   float32 FMA on the CUDA cores: exact products, the slowest;
#   "tf32x3" each operand split into a TF32 high part and a TF32 remainder, three tensor-core
#            products summed in float32 (the remainders' product, ~2^-22 of the term, is dropped):
#            each product within about 2^-20 of exact (float32 FMA: exact, the sum rounded at
#            2^-24), inf and NaN propagate;
#   "tf32"   one tensor-core product of operands rounded to TF32 (10-bit mantissa, relative error
#            ~2^-11 per product), what cuDNN runs float32 convolutions with by default.
# 16-bit inputs, float64 and cuBLAS matrix products are not affected.
FLOAT32_PRECISIONS = ("tf32x3", "ieee", "tf32")
_float32_precision: str | None = None   # set_float32_precision's value, over the environment's


def _check_precision(value, what: str, error=None) -> str:
    """value where it is one of FLOAT32_PRECISIONS, else `error` (ConfigError by default: a setting)."""
    if value not in FLOAT32_PRECISIONS:
        raise (error or ConfigError)(f"{what} must be one of {', '.join(map(repr, FLOAT32_PRECISIONS))} "
                                     f"(got {value!r})")
    return value


def float32_precision() -> str:
    """The products of float32 conv2d and attention on the GPU: "tf32x3", "ieee" or "tf32" (see
    FLOAT32_PRECISIONS); set_float32_precision's value, else CUDAKIT_FLOAT32_PRECISION's (a value
    that is none of them raises ValueError here)."""
    if _float32_precision is not None:
        return _float32_precision
    return _check_precision(settings().float32_precision, "CUDAKIT_FLOAT32_PRECISION")


def set_float32_precision(value: str | None) -> str | None:
    """Set float32_precision() for this process ("tf32x3", "ieee" or "tf32", any case; None: back to
    CUDAKIT_FLOAT32_PRECISION). Returns what was set before (None when nothing was), so that
    `old = set_float32_precision(p); ...; set_float32_precision(old)` restores it exactly. Raises
    ArgumentError (a ValueError) for another value or a value that is not a string."""
    global _float32_precision
    previous = _float32_precision
    if value is not None:
        if not isinstance(value, str):
            raise ArgumentError(f"set_float32_precision: value must be a string, one of "
                                f"{', '.join(map(repr, FLOAT32_PRECISIONS))}, or None (got {value!r})")
        value = _check_precision(value.strip().lower(), "set_float32_precision: value", ArgumentError)
    _float32_precision = value
    return previous


def reload() -> Settings:
    """Re-read every CUDAKIT_* variable (after changing os.environ), and forget cudakit.dispatch's
    plans: a plan keeps what the settings chose when it was made (CUDAKIT_ATTENTION_DROPOUT's mask
    stream among them: a forward replayed under the old one and a backward checked under the new
    one would drop different probabilities)."""
    global _settings
    _settings = None
    from . import dispatch
    from .runtime import launch  # the launch path caches launch_blocking
    launch._refresh()
    dispatch.clear()
    return settings()


_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str | int | float) -> tuple[int | None, float | None]:
    """Parse a memory size: 123, "8GiB", "512 MB" -> (bytes, None); "80%" -> (None, 0.8).

    Raises ValueError naming the text when it is neither.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text != text or text in (float("inf"), float("-inf")):
            raise ValueError(f"memory size must be a finite number of bytes (got {text})")
        if text < 0:
            raise ValueError(f"memory size must be >= 0 (got {text})")
        if 0 < text < 1:   # 0.8 meant as a fraction would silently be 0 bytes: no cap at all
            raise ValueError(f"memory size {text} is less than a byte; a fraction is written as '{text:.0%}'")
        return int(text), None
    s = str(text).strip().lower()
    if s.endswith("%"):
        try:
            pct = float(s[:-1])
        except ValueError:
            raise ValueError(f"bad memory fraction {text!r}: expected e.g. '80%'") from None
        if not 0 < pct <= 100:
            raise ValueError(f"memory fraction must be in (0%, 100%] (got {text!r})")
        return None, pct / 100.0
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([a-z]*)", s)
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"bad memory size {text!r}: expected bytes, '8GiB', '512MB' or '80%'")
    value = float(m.group(1)) * _UNITS[m.group(2)]
    if 0 < value < 1:
        hint = "" if m.group(2) else f"; a fraction is written as '{value:.0%}'"
        raise ValueError(f"memory size {text!r} is less than a byte{hint}")
    return int(value), None
