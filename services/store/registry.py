"""`<store_path>/registry.json`: each model's files with their sha256, and when it arrived.

A checksum is valid for a file while its (path, size, mtime_ns) is unchanged, so a restarted
store rehashes nothing and a replaced file is rehashed. Hashing happens outside the lock and
at most once per model at a time (the store's hashing thread and a request listing the same
model wait for each other instead of both reading gigabytes).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skulk.node.model_files import FileStat, sha256_file

log = logging.getLogger("skulk.store")

REGISTRY_FILE = "registry.json"
VERSION = 1

Cached = dict[str, dict[str, Any]]
"""rel path -> {"size", "mtime_ns", "sha256"} for one model."""


def stale(files: Iterable[FileStat], cached: Cached) -> list[FileStat]:
    """The files whose cached checksum is missing or was taken of another (size, mtime_ns)."""
    out = []
    for f in files:
        entry = cached.get(f.path)
        if not entry or entry.get("size") != f.size or entry.get("mtime_ns") != f.mtime_ns \
                or not isinstance(entry.get("sha256"), str):
            out.append(f)
    return out


def iso_utc(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Registry:
    """The checksum cache and arrival times, shared by the server's threads."""

    def __init__(self, store: Path, hasher: Callable[[Path], str] = sha256_file) -> None:
        self.store = store
        self.path = store / REGISTRY_FILE
        self._hasher = hasher
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()  # one writer at a time, each writing the latest state
        self._dirty = False
        self._model_locks: dict[str, threading.Lock] = {}
        self._models: dict[str, dict[str, Any]] = self._load()

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("store: ignoring unreadable %s (%s); checksums will be recomputed", self.path, exc)
            return {}
        models = doc.get("models") if isinstance(doc, dict) else None
        if not isinstance(models, dict):
            return {}
        return {k: v for k, v in models.items() if isinstance(v, dict) and isinstance(v.get("files", {}), dict)}

    def save(self) -> None:
        """Write the registry atomically (temp file, fsync, rename)."""
        with self._save_lock:
            with self._lock:
                doc = json.dumps({"version": VERSION, "models": self._models}, indent=1, sort_keys=True)
                self._dirty = False
            tmp = self.path.with_name(f".{REGISTRY_FILE}.{os.getpid()}.tmp")
            with tmp.open("w") as f:
                f.write(doc)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)

    def save_if_changed(self) -> None:
        if self._dirty:
            self.save()

    def _model_lock(self, model_dir: str) -> threading.Lock:
        with self._lock:
            return self._model_locks.setdefault(model_dir, threading.Lock())

    def downloaded_at(self, model_dir: str) -> str:
        """When the model arrived: recorded the first time the store saw it (the directory's
        mtime, which an atomic rename into the store leaves at the copy's end)."""
        with self._lock:
            entry = self._models.setdefault(model_dir, {"files": {}})
            if "downloaded_at" not in entry:
                try:
                    entry["downloaded_at"] = iso_utc((self.store / model_dir).stat().st_mtime)
                except OSError:
                    entry["downloaded_at"] = iso_utc(time.time())
                self._dirty = True
            return str(entry["downloaded_at"])

    def needs_hashing(self, model_dir: str, files: list[FileStat]) -> bool:
        with self._lock:
            cached = dict(self._models.get(model_dir, {}).get("files", {}))
        return bool(stale(files, cached))

    def checksums(self, model_dir: str, files: list[FileStat]) -> dict[str, str]:
        """sha256 of each file (by rel path), hashing only the stale ones; saves when it hashed."""
        with self._model_lock(model_dir):
            with self._lock:
                cached = dict(self._models.get(model_dir, {}).get("files", {}))
            todo = stale(files, cached)
            fresh: Cached = {}
            for f in todo:
                fresh[f.path] = {"size": f.size, "mtime_ns": f.mtime_ns,
                                 "sha256": self._hasher(self.store / model_dir / f.path)}
            keep = {f.path for f in files}
            with self._lock:
                entry = self._models.setdefault(model_dir, {"files": {}})
                merged = {p: v for p, v in entry.get("files", {}).items() if p in keep}
                merged.update(fresh)
                changed = bool(fresh) or len(merged) != len(entry.get("files", {}))
                entry["files"] = merged
                result = {f.path: str(merged[f.path]["sha256"]) for f in files}
            if changed:
                self.save()
            return result

    def forget(self, model_dir: str) -> None:
        with self._lock:
            removed = self._models.pop(model_dir, None) is not None
        if removed:
            self.save()

    def prune(self, present: Iterable[str]) -> None:
        """Drop models no longer in the store (deleted by hand)."""
        keep = set(present)
        with self._lock:
            gone = [m for m in self._models if m not in keep]
            for m in gone:
                del self._models[m]
        if gone:
            self.save()
