"""transformers' index of its model classes, computed once per install instead of at every import.

mlx-lm imports transformers for its tokenizers, and transformers (5.x) builds, at every import,
the list of what each of its ~400 model folders exports by reading all ~3,300 of their source
files (`create_import_structure_from_path`): about a CPU second of a runner's start on a small
x86 machine, paid again by every runner and standby. The result depends only on the installed
files, so it is kept in the user's cache folder (`$XDG_CACHE_HOME/skulk`, else `~/.cache/skulk`)
under transformers' version, each folder's entry stamped with the folder's mtime, and read back by
the next process; a missing, stale or unreadable cache is computed as before. Nothing changes when
transformers no longer has that function (its next versions): the import then runs as it comes.

`install()` must run before transformers is first imported (`prelude.prepare`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import pickle
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from skulk.services.runner.user_cache import cache_dir, write_atomic

log = logging.getLogger("skulk.runner")

MODULE = "transformers.utils.import_utils"
FUNCTION = "create_import_structure_from_path"


class FolderIndex:
    """The cached structures of one transformers version: {folder: (mtime_ns, structure)}."""

    def __init__(self, path: Path | None) -> None:
        self.path = path  # None: nowhere to keep it (every process walks, as without the cache)
        self.entries: dict[str, tuple[int, Any]] = {}
        if path is None:
            return
        try:
            with path.open("rb") as f:
                loaded = pickle.load(f)
            if isinstance(loaded, dict):
                self.entries = loaded
        except Exception:  # noqa: BLE001 - none yet, torn or foreign: walked again and written anew
            pass

    def get(self, folder: str, stamp: int) -> Any | None:
        hit = self.entries.get(folder)
        return hit[1] if hit is not None and hit[0] == stamp else None

    def put(self, folder: str, stamp: int, structure: Any) -> None:
        self.entries[folder] = (stamp, structure)
        if self.path is None:
            return
        try:
            write_atomic(self.path, pickle.dumps(self.entries, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception as exc:  # noqa: BLE001 - a read-only home, say: every process walks, as without us
            log.debug("transformers index not cached: %s", exc)


def cached(real: Callable[[str], Any], index_of: Callable[[], FolderIndex]) -> Callable[[Any], Any]:
    """`real` (the walk of one folder) answered from the index for a top-level call; the walk's
    own recursion into subfolders goes to `real` (its own memo)."""
    depth = 0

    def create_import_structure_from_path(module_path: Any) -> Any:
        nonlocal depth
        if depth:
            return real(module_path)
        folder = str(module_path)
        try:  # the cache must never fail transformers' import: anything wrong, and it walks
            if os.path.isfile(folder):
                folder = os.path.dirname(folder)  # as `real` does: a file stands for its folder
            stamp = os.stat(folder).st_mtime_ns
            index = index_of()
            hit = index.get(folder, stamp)
        except Exception:  # noqa: BLE001 - see above
            return real(module_path)
        if hit is not None:
            return hit
        depth += 1
        try:
            structure = real(module_path)
        finally:
            depth -= 1
        index.put(folder, stamp, structure)
        return structure

    create_import_structure_from_path.__wrapped__ = real  # type: ignore[attr-defined]
    return create_import_structure_from_path


class _Hook(importlib.abc.MetaPathFinder):
    """Finds `transformers.utils.import_utils` as the import system would, and swaps the walk for
    the cached one as soon as the module has run (before transformers' `__init__` calls it)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != MODULE:
            return None
        uninstall()
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            real = getattr(module, FUNCTION, None)
            if callable(real):
                version = str(getattr(sys.modules.get("transformers"), "__version__", "unknown"))
                index: list[FolderIndex] = []

                def index_of() -> FolderIndex:
                    if not index:
                        folder = cache_dir()
                        index.append(FolderIndex(folder / f"transformers-{version}-index.pickle" if folder else None))
                    return index[0]

                setattr(module, FUNCTION, cached(real, index_of))

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_HOOK = _Hook()


def install() -> None:
    """Hook transformers' import (a no-op once it is imported, or when installed already)."""
    if MODULE not in sys.modules and _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)


def uninstall() -> None:
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)
