"""Kernel shapes measured on this GPU for the contiguous elementwise kernels (`cudakit tune`).

Why: the fastest (U loads in flight per thread, threads per block, blocks-per-SM cap) of a
bandwidth-bound elementwise kernel differs between GPUs of one model. On three lent H100s on 2026-11-23
(benchmarks/sweeps/ew_variants.py), one-input ops were fastest with 128-thread blocks on one and with
256-512-thread blocks on the two others, by up to 2% -- the margin that decides whether an op beats
torch. `cudakit tune` (bench/tune.py) times each op's candidate shapes through its public call on
this GPU and stores the winners here, per GPU UUID, in CUDAKIT_CACHE_DIR/tune/; every later process
on that GPU launches them. Ops without a stored shape use their GPU model's TUNED_BY_MODEL table,
else TUNED, in kernels/elementwise.py.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

# A shape is (U, threads, cap): cap > 0 lets at most cap blocks reside on an SM (through dynamic
# shared memory, elementwise.cap_shared_memory), 0 leaves occupancy to the registers. The shapes
# `cudakit tune` tries: light ops (one or two loads and a few instructions per element), and for the
# 16-bit heavy ops (elementwise.HEAVY_OPS) also their untuned default. The capped ones: on an H100
# (GPU-17df4f59, 2026-11-26, kernels launched directly against torch) full occupancy keeps more
# bytes in flight than HBM serves best: bfloat16 add 1.014x torch at (1, 256, 6), the uncapped
# shapes at most 1.004x; float32 relu 1.010x at (2, 256, 4), uncapped at most 0.994x. On an H200
# (more bandwidth) the caps mostly lost (elementwise.TUNED_BY_MODEL).
CANDIDATES = ((2, 512, 0), (1, 512, 0), (1, 256, 0), (1, 128, 0), (2, 128, 0), (2, 256, 0), (4, 256, 0),
              (1, 256, 6), (1, 512, 3), (2, 256, 4), (2, 256, 5), (2, 256, 6), (4, 256, 3), (4, 256, 4),
              (4, 128, 6), (4, 128, 8))
HEAVY_CANDIDATES = CANDIDATES + ((4, 128, 0),)
MAX_CAP = 32  # resident blocks an SM can hold at most (sm_90)

_by_device: dict[int, dict] = {}   # device index -> {(op, dtype name): (U, threads, cap)}


def full(shape) -> tuple:
    """(U, threads, cap) of a shape given as (U, threads) (no cap) or (U, threads, cap)."""
    return (int(shape[0]), int(shape[1]), int(shape[2]) if len(shape) > 2 else 0)


def valid(shape) -> bool:
    """Whether a shape can be launched: U 1..8, whole warps up to 1024 threads, cap 0..MAX_CAP."""
    u, t, cap = full(shape)
    return 1 <= u <= 8 and 32 <= t <= 1024 and t % 32 == 0 and 0 <= cap <= MAX_CAP


def path(uuid: str) -> Path:
    from ..runtime.compiler import cache_dir
    return Path(cache_dir()) / "tune" / f"elementwise-{uuid}.json"


def _uuid(dev: int) -> str | None:
    from ..runtime.device import get_device_info
    return get_device_info(dev).uuid


def model(dev: int) -> str:
    """Device dev's model name (elementwise.TUNED_BY_MODEL's key)."""
    from ..runtime.device import get_device_info
    return get_device_info(dev).name


def shapes(dev: int) -> dict:
    """{(op, dtype name): (U, threads, cap)} stored for device `dev` (read once per process)."""
    s = _by_device.get(dev)
    if s is None:
        s = _by_device[dev] = _read(_uuid(dev))
    return s


def _read(uuid: str | None) -> dict:
    if not uuid:
        return {}
    p = path(uuid)
    try:
        raw = json.loads(p.read_text())["shapes"]
        return {tuple(k.split(":")): full(v) for k, v in raw.items() if len(v) in (2, 3) and valid(v)}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        log.warning("ignoring the tuned elementwise shapes in %s (%s); `cudakit tune` rewrites it", p, e)
        return {}


def store(dev: int, found: dict, meta: dict) -> Path:
    """Merge `found` ({(op, dtype name): (U, threads[, cap])}) into device dev's file (atomically)
    and make it effective for kernels created from now on in this process."""
    uuid = _uuid(dev)
    if not uuid:
        raise RuntimeError(f"device {dev} reports no UUID: tuned shapes cannot be kept for it")
    merged = {**_read(uuid), **{k: full(v) for k, v in found.items()}}
    p = path(uuid)
    from ..runtime.cache import prepare
    prepare(p)
    body = {**meta, "uuid": uuid, "shapes": {f"{op}:{dt}": list(s) for (op, dt), s in sorted(merged.items())}}
    fd, tmp = tempfile.mkstemp(dir=p.parent, suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(body, f, indent=1)
        os.replace(tmp, p)  # atomic: a reader sees the old file or the new one
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _by_device[dev] = merged
    return p


def forget() -> None:
    """Re-read the files on next use (after CUDAKIT_CACHE_DIR changes); the ops' launch entries
    built with the old shapes are rebuilt."""
    from . import elementwise
    _by_device.clear()
    for op in elementwise.EW_TABLES:
        elementwise.forget_entries(op)


def has_uuid(dev: int) -> bool:
    """Whether shapes can be kept for device dev (it reports a UUID)."""
    return bool(_uuid(dev))
