"""A child's own reason for a failing exit, left for its supervisor in a file named by its pid.

The exit record (`ChildLifecycle` EXITED) carries it, so whoever acts on the exit (the leader
giving an instance up, an operator reading `skulk admin status`) reads the child's words, not
only its exit code. A status report on the bus can reach the leader after the exit does (and
PUB/SUB may drop it); a file written before the process exits is there when its supervisor reaps
it, whatever the order. The supervisor takes (reads and removes) it as it handles the exit.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

LIMIT = 1000
"""Characters kept: a reason, not a traceback."""


def _path(run_dir: Path, pid: int) -> Path:
    return run_dir / "last-words" / str(pid)


def leave(run_dir: Path, reason: str) -> None:
    """This process's reason, for its supervisor; best effort (a full disk costs the words only)."""
    path = _path(run_dir, os.getpid())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(reason[:LIMIT])
        tmp.replace(path)
    except OSError:
        pass


def take(run_dir: Path, pid: int) -> str:
    """The words child `pid` left ("" if none), removed so that a later pid finds none."""
    path = _path(run_dir, pid)
    try:
        words = path.read_text(errors="replace")[:LIMIT]
        path.unlink()
    except OSError:
        return ""
    return " ".join(words.split())


def clear(run_dir: Path) -> None:
    """At a node's start: words a killed node's children left unread must not be read as those of
    a new child that happens to get the same pid."""
    shutil.rmtree(run_dir / "last-words", ignore_errors=True)
