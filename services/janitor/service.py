"""Runs the retention policy over `<home>/traces`: first pass 60 s after start, then hourly."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

from skulk.node.role_args import JanitorArgs
from skulk.node.trace_files import traces_root, valid_task_id
from skulk.services.base import ServiceLoop
from skulk.services.janitor.policy import expired_tasks

log = logging.getLogger("skulk.janitor")

FIRST_RUN_S = 60.0
INTERVAL_S = 3600.0


def newest_mtime(folder: Path) -> float:
    """The mtime of the newest file in a task directory (a writer's `.tmp` leftover too: it
    ages out with its task); the directory's own when it holds none."""
    times = []
    for entry in folder.iterdir():
        try:
            if entry.is_file():
                times.append(entry.stat().st_mtime)
        except OSError:
            continue
    return max(times) if times else folder.stat().st_mtime


def task_dirs(root: Path) -> list[tuple[str, float]]:
    """(task id, newest mtime) of every task directory under `root`; anything else is left alone."""
    out = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    for entry in entries:
        try:
            if valid_task_id(entry.name) and entry.is_dir() and not entry.is_symlink():
                out.append((entry.name, newest_mtime(entry)))
        except OSError:
            continue  # deleted meanwhile (an operator's POST /v1/traces/delete)
    return out


def sweep(root: Path, now_wall: float, retention_days: float) -> list[str]:
    """Delete the expired task directories under `root`; the names deleted."""
    deleted = []
    for name in expired_tasks(task_dirs(root), now_wall, retention_days):
        try:
            shutil.rmtree(root / name)
            deleted.append(name)
        except OSError as exc:
            log.warning("janitor: cannot delete trace %s: %s", name, exc)
    return deleted


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    args = JanitorArgs.from_argv(argv)
    root = traces_root(loop.rt.args.home)

    def run() -> None:
        deleted = sweep(root, time.time(), args.trace_retention_days)
        if deleted:
            log.info("janitor: deleted %d expired trace(s)", len(deleted))
        loop.status_detail = f"last sweep deleted {len(deleted)}"

    loop.every(INTERVAL_S, run, first_in=FIRST_RUN_S)
    loop.status_detail = f"retention {args.trace_retention_days} days"
