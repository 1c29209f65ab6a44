"""Every CUDAKIT_* setting, in one place. Read from the environment when first needed, not at import.

| variable                  | meaning                                                          |
| ------------------------- | ---------------------------------------------------------------- |
| CUDAKIT_BACKEND           | "auto" (default), "cpu" or "cuda": what get_backend() picks      |
| CUDAKIT_CACHE_DIR         | compiled-kernel cache (default ~/.cache/cudakit)                 |
| CUDAKIT_GPU_MEMORY_LIMIT  | pool limit per device: bytes, "8GiB", "512MB" or "80%"           |
| CUDAKIT_LAUNCH_BLOCKING   | "1": synchronise after every launch so errors name their kernel  |
| CUDAKIT_AUTOTUNE          | "0": use the first config instead of timing them                 |
| CUDAKIT_AUTOTUNE_LOG      | "1": log each autotuning trial                                   |
| CUDAKIT_NATIVE            | "0": launch through CuPy's binding, not the native launcher      |
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

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

    @classmethod
    def from_env(cls) -> "Settings":
        env = os.environ
        backend = env.get("CUDAKIT_BACKEND", "auto").strip().lower() or "auto"
        cache = env.get("CUDAKIT_CACHE_DIR") or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cudakit")
        return cls(
            backend=backend,
            cache_dir=Path(cache),
            memory_limit=env.get("CUDAKIT_GPU_MEMORY_LIMIT") or None,
            launch_blocking=env.get("CUDAKIT_LAUNCH_BLOCKING", "0").strip().lower() in _TRUE,
            autotune=env.get("CUDAKIT_AUTOTUNE", "1").strip().lower() not in {"0", "false", "no", "off"},
            autotune_log=env.get("CUDAKIT_AUTOTUNE_LOG", "0").strip().lower() in _TRUE,
            native=env.get("CUDAKIT_NATIVE", "1").strip().lower() not in {"0", "false", "no", "off"},
        )


_settings: Settings | None = None


def settings() -> Settings:
    """The settings in force; read from the environment on first use."""
    global _settings
    if _settings is None:
        _settings = Settings.from_env()
    return _settings


def reload() -> Settings:
    """Re-read every CUDAKIT_* variable (after changing os.environ)."""
    global _settings
    _settings = None
    from .runtime import launch  # the launch path caches launch_blocking
    launch._refresh()
    return settings()


_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str | int | float) -> tuple[int | None, float | None]:
    """Parse a memory size: 123, "8GiB", "512 MB" -> (bytes, None); "80%" -> (None, 0.8).

    Raises ValueError naming the text when it is neither.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"memory size must be >= 0 (got {text})")
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
    return int(float(m.group(1)) * _UNITS[m.group(2)]), None
