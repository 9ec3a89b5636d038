"""Runners that step at once on one machine share its cores.

llama.cpp gives a step one thread per core, and its threads spin at every barrier inside the step:
two runners of one machine stepping at once (two models on a node, or two nodes on one machine),
each with a thread per core, take turns so badly that on a 2-core machine four streams over two
instances ran at 6-35 tok/s instead of 55-75 with one thread each (docs/engines.md). So a runner
uses every core while it is the only one stepping, and an even share while others step too.

Runners learn of each other without a service: each holds an exclusive `flock` on a file of its
own in a per-user directory while it has requests (`busy`), and lets go when it has none
(`idle`). A stepping runner counts, at most every `CHECK_S`, the files it cannot lock: the busy
runners. A lock ends with its process, so a killed runner's share comes back at once; its file is
removed by the next runner that finds it unlocked and its process gone. Anything that fails here
(no directory, a full disk) only means no sharing: the runner steps with its own threads.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil

log = logging.getLogger("skulk.runner")

CHECK_S = 0.25
"""How often a stepping runner counts the busy ones (a few syscalls per runner on the machine)."""
LOCK_TRIES = 20
"""A runner's own exclusive lock may meet another's brief shared test of it: tried this often."""


def share(cores: int, busy: int, position: int, cap: int = 0) -> int:
    """Threads for the runner at `position` (0-based) of `busy` runners stepping on `cores` cores:
    an even share, the remainder to the first ones, at least one; at most `cap` when it is set."""
    busy = max(1, busy)
    n = max(1, cores // busy + (1 if position < cores % busy else 0))
    return min(n, cap) if cap > 0 else n


def default_directory() -> Path:
    return Path(tempfile.gettempdir()) / f"skulk-core-share-{os.getuid()}"


class CoreShare:
    """This runner's place among the machine's busy runners, and its threads now."""

    def __init__(self, cores: int, cap: int = 0, directory: Path | None = None) -> None:
        self.cores, self.cap = max(1, cores), cap
        self.directory = directory or default_directory()
        self.name = f"{os.getpid()}-{uuid.uuid4().hex[:8]}.lock"
        self.fd: int | None = None  # open and locked while this runner is busy
        self.checked = float("-inf")
        self.threads = share(self.cores, 1, 0, cap)
        self.busy_runners = 1
        self.enabled = True

    def busy(self, now: float) -> int:
        """Called before each step: this runner is busy; the threads it should step with."""
        if not self.enabled:
            return self.threads
        if self.fd is None:
            self.fd = self._lock()
            self.checked = float("-inf")  # a runner that starts stepping looks at once
        if now - self.checked >= CHECK_S:
            self.checked = now
            busy = self._busy_names()
            self.busy_runners = len(busy)
            position = busy.index(self.name) if self.name in busy else 0
            self.threads = share(self.cores, len(busy), position, self.cap)
        return self.threads

    def step_with(self, now: float, current: int, set_threads: Callable[[int], None]) -> int:
        """`busy`, and the engine told (`set_threads`) when its share changed from `current`:
        the threads it steps with now."""
        threads = self.busy(now)
        if threads != current:
            set_threads(threads)
        return threads

    def idle(self) -> None:
        """No requests left: this runner's share goes to the others."""
        if self.fd is not None:
            os.close(self.fd)  # the lock goes with the descriptor
            self.fd = None

    def close(self) -> None:
        self.idle()
        try:
            (self.directory / self.name).unlink(missing_ok=True)
        except OSError:
            pass

    def _lock(self) -> int | None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.directory / self.name, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:
            log.warning("runners will not share this machine's cores: %s", exc)
            self.enabled = False
            return None
        for _ in range(LOCK_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    break
        os.close(fd)  # not seen by the others this time; the next busy stretch tries again
        return None

    def _busy_names(self) -> list[str]:
        """The lock files held busy now, this runner's own among them, sorted."""
        busy = [self.name]
        try:
            names = [p for p in os.listdir(self.directory) if p.endswith(".lock") and p != self.name]
        except OSError:
            return busy
        for name in names:
            path = self.directory / name
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                busy.append(name)  # held: that runner is stepping
            else:
                if not _alive(name):
                    path.unlink(missing_ok=True)  # a killed runner's file
            finally:
                os.close(fd)
        return sorted(busy)


def _alive(name: str) -> bool:
    """Whether the process that made lock file `name` (`<pid>-<token>.lock`) still runs."""
    pid = name.split("-", 1)[0]
    return pid.isdigit() and psutil.pid_exists(int(pid))
