"""The user's cache folder: what a runner computes once per install or machine and later runners
read back instead (transformers' index of its classes, the decode-matmul measurements).

Everything kept here is a cache: missing, stale, torn or unwritable only means it is computed
again, as without it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_dir() -> Path | None:
    """`$XDG_CACHE_HOME/skulk`, else `~/.cache/skulk`; None where there is no home to tell."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no HOME and no password entry (a bare service account)
            return None
    return Path(base) / "skulk"


def write_atomic(path: Path, data: bytes) -> None:
    """`data` as `path`, written to a temporary name and renamed: a concurrent reader sees the old
    file or the new one, never half of one. Raises OSError (a read-only home, a full disk)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
