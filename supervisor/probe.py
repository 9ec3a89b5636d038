"""What each child has been doing, read from the OS for the watchdog (`watchdog.Progress`).

The root's loop calls `sample` on every turn (it never sleeps longer than a heartbeat), so
when a deadline comes the probe already holds the child's CPU time from a few seconds before:
`progress` compares that with a fresh reading. psutil reads /proc (Linux) or the task info
(macOS); a process that is gone or unreadable gives None, which the watchdog treats as no
progress.
"""

from __future__ import annotations

from collections import deque

import psutil

from skulk.supervisor.watchdog import Progress, RunState

WINDOW_S = 3.0
"""How far back progress is measured: long enough for a starved process to be charged a tick."""

MIN_GAP_S = 0.5
"""Samples closer than this to the last one are skipped (the loop may turn many times a second)."""

_STATES = {
    psutil.STATUS_RUNNING: RunState.RUNNABLE, psutil.STATUS_DISK_SLEEP: RunState.RUNNABLE,
    psutil.STATUS_STOPPED: RunState.STOPPED, psutil.STATUS_TRACING_STOP: RunState.STOPPED,
    psutil.STATUS_ZOMBIE: RunState.GONE, psutil.STATUS_DEAD: RunState.GONE,
}


class ProgressProbe:
    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}
        self._samples: dict[int, deque[tuple[float, float]]] = {}

    def _read(self, pid: int) -> tuple[float, RunState] | None:
        proc = self._procs.get(pid)
        try:
            if proc is None:
                proc = self._procs[pid] = psutil.Process(pid)
            with proc.oneshot():
                times = proc.cpu_times()
                state = _STATES.get(proc.status(), RunState.SLEEPING)
        except (psutil.Error, OSError):
            self.forget(pid)
            return None
        return times.user + times.system, state

    def sample(self, pids: list[int], now: float) -> None:
        """Record each live child's CPU time; forget the children no longer listed."""
        for gone in set(self._samples) - set(pids):
            self.forget(gone)
        for pid in pids:
            seen = self._samples.setdefault(pid, deque())
            if seen and now - seen[-1][0] < MIN_GAP_S:
                continue
            read = self._read(pid)
            if read is None:
                continue
            seen.append((now, read[0]))
            while len(seen) > 2 and now - seen[1][0] >= WINDOW_S:
                seen.popleft()

    def progress(self, pid: int, now: float) -> Progress | None:
        """The CPU the child used since the oldest sample kept (a fresh reading now)."""
        read = self._read(pid)
        if read is None:
            return None
        cpu, state = read
        seen = self._samples.get(pid)
        if not seen:
            return Progress(cpu_s=0.0, window_s=0.0, state=state)
        since, cpu_then = seen[0]
        return Progress(cpu_s=max(0.0, cpu - cpu_then), window_s=now - since, state=state)

    def forget(self, pid: int) -> None:
        self._procs.pop(pid, None)
        self._samples.pop(pid, None)
