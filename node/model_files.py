"""Reading the store's directories: which files a model has, and which real file a checked
relative path names (never one outside the model directory, whatever symlinks say)."""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from skulk.node.model_cards import card_from_dir
from skulk.wire.models import ModelCard, ModelDirError

HASH_CHUNK = 4 << 20


@dataclass(frozen=True, slots=True)
class FileStat:
    path: str
    """Relative posix path inside the model directory."""
    size: int
    mtime_ns: int


def _inside(root_real: str, candidate: str) -> bool:
    real = os.path.realpath(candidate)
    return real == root_real or real.startswith(root_real + os.sep)


def list_files(model_dir: Path) -> list[FileStat]:
    """Every regular file of a model directory, sorted; hidden names (`.cache`, temp files) and
    symlinks that lead outside the directory are left out (they are never served either)."""
    root_real = os.path.realpath(model_dir)
    out: list[FileStat] = []
    for dirpath, dirnames, filenames in os.walk(model_dir, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")
                             and _inside(root_real, os.path.join(dirpath, d)))
        for name in filenames:
            if name.startswith("."):
                continue
            full = os.path.join(dirpath, name)
            if not _inside(root_real, full):
                continue
            try:
                st = os.stat(full)
            except OSError:
                continue
            if not os.path.isfile(full):
                continue
            rel = Path(os.path.relpath(full, model_dir)).as_posix()
            out.append(FileStat(rel, st.st_size, st.st_mtime_ns))
    return sorted(out, key=lambda f: f.path)


def resolve_file(model_dir: Path, rel_path: str) -> Path | None:
    """The real regular file `rel_path` (already checked by `protocol.safe_rel_path`) names
    inside `model_dir`, or None when it is missing or its real path leaves the directory."""
    root_real = os.path.realpath(model_dir)
    candidate = os.path.join(model_dir, *rel_path.split("/"))
    if not _inside(root_real, candidate):
        return None
    real = os.path.realpath(candidate)
    return Path(real) if os.path.isfile(real) else None


def model_card(store: Path, model_dir: str) -> ModelCard | None:
    """The card of `<store>/<model_dir>` when it is a usable model directory, else None."""
    directory = store / model_dir
    if not directory.is_dir():
        return None
    try:
        return card_from_dir(directory)
    except ModelDirError:
        return None


def model_dirs(store: Path) -> list[str]:
    """Directory names of the usable models under `store` (hidden entries are work areas)."""
    if not store.is_dir():
        return []
    return sorted(e.name for e in store.iterdir()
                  if not e.name.startswith(".") and e.is_dir() and model_card(store, e.name))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def remove_tree(directory: Path) -> None:
    """Delete a directory so that no reader ever sees it half-removed: rename it to a hidden
    sibling first (atomic), then remove that."""
    doomed = directory.with_name(f".deleting-{directory.name}-{uuid.uuid4().hex[:8]}")
    os.rename(directory, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def disk_usage(path: Path) -> tuple[int, int, int]:
    """(total, used, free) bytes of the volume holding `path`."""
    usage = shutil.disk_usage(path)
    return usage.total, usage.used, usage.free
