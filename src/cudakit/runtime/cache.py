"""The on-disk cache root (CUDAKIT_CACHE_DIR): what cudakit writes there, and what it may delete.

cudakit writes a marker file (MARKER) into the root the first time it puts anything there, and
keeps its entries under a few names of its own (ENTRIES: compiled kernels, Triton binaries,
autotuning choices, the native launcher). `clear()` deletes only those entries, and only where the
marker is present: a directory someone pointed CUDAKIT_CACHE_DIR at by mistake (their documents)
loses nothing. The measured elementwise shapes under tune/ are measurements, not compiled code, and
are kept by a clear.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

from ..errors import ArgumentError, CacheError

log = logging.getLogger(__name__)

MARKER = ".cudakit-cache"
ENTRIES = ("nvrtc", "triton", "autotune", "native")   # cleared by clear()
KEPT = ("tune",)                                      # cudakit's too, kept by clear()


def root() -> Path:
    """The cache root in force (CUDAKIT_CACHE_DIR, default ~/.cache/cudakit)."""
    from ..config import settings
    return settings().cache_dir


def _check_dir(r: Path) -> None:
    if r.exists() and not r.is_dir():
        raise CacheError(f"the kernel cache CUDAKIT_CACHE_DIR={r} is a file, not a directory; point "
                         f"CUDAKIT_CACHE_DIR at a directory (or unset it for ~/.cache/cudakit)")


def subdir(name: str) -> Path:
    """root()/name, created, with the root marked as cudakit's (before anything is written).
    name: one of ENTRIES or KEPT."""
    if name not in ENTRIES + KEPT:
        raise ArgumentError(f"{name!r} is not a cudakit cache entry ({', '.join(ENTRIES + KEPT)})")
    r = root()
    _check_dir(r)
    r.mkdir(parents=True, exist_ok=True)
    marker = r / MARKER
    if not marker.exists():
        try:
            marker.write_text("This directory is a cudakit kernel cache. `cudakit cache clear` deletes "
                              f"only its entries ({', '.join(ENTRIES)}).\n")
        except OSError as e:
            log.warning("could not mark %s as cudakit's cache: %s", r, e)
    d = r / name
    d.mkdir(exist_ok=True)
    return d


def write_atomic(path: Path, data: bytes, suffix: str = "") -> None:
    """Write `data` to `path` through a temporary file in its folder moved into place with
    os.replace: a reader sees the old file or the whole new one, never a torn one. Raises OSError;
    the temporary file is not left behind."""
    fd, tmp = tempfile.mkstemp(dir=Path(path).parent, prefix=".tmp-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def digest(data: bytes) -> str:
    """A short content digest of a cached file (its integrity check, not a security one)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def prepare(path: Path) -> None:
    """Create the directory a cache file `path` goes into: through subdir() (marking the root) when
    it is one of cudakit's entries in the root, else plainly."""
    path = Path(path)
    if path.parent.name in ENTRIES + KEPT and path.parent.parent == root():
        subdir(path.parent.name)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)


def is_marked(r: Path | None = None) -> bool:
    """Whether the root carries cudakit's marker."""
    r = root() if r is None else r
    return (r / MARKER).is_file()


def files(r: Path | None = None) -> list:
    """cudakit's cached files (under ENTRIES) in the root; [] where the root is absent or unmarked."""
    r = root() if r is None else r
    _check_dir(r)
    if not r.is_dir():
        return []
    out = []
    for name in ENTRIES:
        d = r / name
        if d.is_dir():
            out.extend(f for f in d.rglob("*") if f.is_file())
    return out


def info() -> dict:
    """{'path', 'entries', 'bytes', 'marked'} of the on-disk cache (tune/ not counted). Raises
    CacheError when CUDAKIT_CACHE_DIR is a file."""
    r = root()
    fs = files(r)
    return {"path": str(r), "entries": len(fs), "bytes": sum(f.stat().st_size for f in fs), "marked": is_marked(r)}


def clear() -> int:
    """Delete cudakit's entries (ENTRIES) from the root; returns the number of files removed. A
    root without cudakit's marker raises CacheError naming it, and nothing is deleted; a root that
    does not exist, or an empty directory, is empty (0). Anything else in the root (tune/, foreign files) stays."""
    r = root()
    _check_dir(r)
    if not r.exists() or (r.is_dir() and not any(r.iterdir())):
        return 0   # nothing there: nothing to refuse either
    if not is_marked(r):
        raise CacheError(f"refusing to clear {r}: it has no {MARKER} marker, so cudakit did not create it as its "
                         f"cache; nothing was deleted. Check CUDAKIT_CACHE_DIR, or delete the directory yourself")
    n = len(files(r))
    for name in ENTRIES:
        d = r / name
        if d.is_symlink() or d.is_file():
            d.unlink()
        elif d.is_dir():
            shutil.rmtree(d)
    return n
