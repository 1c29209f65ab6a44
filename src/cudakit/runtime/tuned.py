"""A table of tuning choices kept on disk: {signature text: choice}, one JSON file per (what is
tuned, GPU model, versions) under <cache>/autotune/, written atomically (os.replace), so a second
process does not time the same candidates again. A corrupt file is noted (cudakit.fallbacks) and
rewritten; an unwritable cache is logged, the choices then live in memory. Used by the Triton
autotuner (runtime/triton.py: config indices), cuDNN's plan choice and kernels/paths.py (names).
"""
from __future__ import annotations

import hashlib
import json
import logging

log = logging.getLogger("cudakit.tuned")


def _is_name(v) -> bool:
    return isinstance(v, str)


class TunedTable:
    """prefix: the file name's start ("cudnn", "paths", a Triton kernel's name); ident(): the
    JSON-able values the choices depend on besides the signature (GPU model, library versions),
    asked when first loaded; valid(choice): whether a choice read from the file can be used (a
    file holding another is corrupt); what: how the note of a corrupt file names the choices."""

    def __init__(self, prefix: str, ident, valid=_is_name, what: str = "its choices"):
        self.prefix, self._ident, self._valid, self._what = prefix, ident, valid, what
        self._table: dict | None = None
        self._path = None

    def _file(self):
        if self._path is None:
            from . import compiler
            h = hashlib.sha256(json.dumps(self._ident(), default=str).encode()).hexdigest()
            self._path = compiler.cache_dir() / "autotune" / f"{self.prefix}-{h[:32]}.json"
        return self._path

    def table(self) -> dict:
        if self._table is None:
            self._table = {}
            path = self._file()
            try:
                t = json.loads(path.read_text())
                if not isinstance(t, dict) or not all(self._valid(v) for v in t.values()):
                    raise ValueError("not a {signature: choice} table")
                self._table.update(t)
            except FileNotFoundError:
                pass
            except (OSError, ValueError) as e:
                from .. import fallbacks
                fallbacks.note(f"autotune:{path}", f"the tuning file {path} is unreadable or corrupt ({e}); "
                                                   f"{self._what} are timed again and the file rewritten")
        return self._table

    def get(self, key: str):
        return self.table().get(key)

    def put(self, key: str, choice, save: bool = True) -> None:
        """Keep `choice` for `key`, on disk too unless save is False."""
        import os
        import tempfile
        from ..errors import CacheError
        from . import cache
        t = self.table()
        t[key] = choice
        if not save:
            return
        path = self._file()
        try:
            cache.prepare(path)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                json.dump(t, f)
            os.replace(tmp, path)
        except (OSError, CacheError) as e:
            log.warning("could not write the tuning file %s: %s", path, e)

    def forget(self) -> None:
        """Drop the in-memory copy (the file stays): the next lookup reads the file again."""
        self._table, self._path = None, None
