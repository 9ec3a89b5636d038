"""What the watchdog says (pure): the line for each kill, for a child waited for because it is
making progress, and for one that came up late. Operators grep these, and tests read them."""

from __future__ import annotations

import logging

from skulk.supervisor.watchdog import SLOW_PATIENCE, ChildClock, Progress, Verdict
from skulk.wire.events import LifecycleEvent


def kill_line(child_id: str, pid: int, clock: ChildClock, why: Verdict, now: float,
              progress: Progress | None = None, beat_seq: int = 0) -> tuple[int, str]:
    """(log level, message) for a watchdog kill; a missed-heartbeat kill says what the child was
    seen doing (its CPU over the probe's window and its run state), the evidence it was judged on,
    and the last beat heard (`beat_seq`, when): the child's own stop line says the last it sent,
    so the two logs tell a loop that stopped beating from beats that did not arrive."""
    if why == LifecycleEvent.READY_TIMEOUT:
        busy = (f" (still busy {now - clock.started_at:.0f}s after its start, past the {SLOW_PATIENCE:g}x it "
                "may take on a slow machine)") if clock.graces else " (no progress)"
        return logging.CRITICAL, (
            f"{child_id} (pid {pid}) did not report ready within {clock.ready_timeout_s:.1f}s{busy}; killing it. "
            "If this recurs on the same machine and the child uses the GPU, the GPU may be wedged: reboot "
            "that machine.")
    if why == LifecycleEvent.STEP_DEADLINE:
        return logging.ERROR, (
            f"{child_id} (pid {pid}) has been inside one step ({clock.step}) for "
            f"{now - (clock.step_since or now):.1f}s, past its step deadline (runner.step_deadline_s "
            f"{clock.step_deadline_s:.0f}s); killing it")
    seen = (f": {progress.cpu_s:.2f}s CPU in the last {progress.window_s:.1f}s, {progress.state}"
            if progress is not None else ": not readable")
    heard = (f"; last heard beat #{beat_seq} {now - clock.last_beat:.1f}s ago"
             if beat_seq and clock.last_beat is not None else "")
    return logging.ERROR, (f"{child_id} (pid {pid}) missed {clock.liveness} heartbeats "
                           f"({clock.heartbeat_s * clock.liveness:.1f}s{seen}{heard}); killing it")


def late_line(child_id: str, pid: int, clock: ChildClock, progress: Progress, quiet: bool = False) -> str:
    """A child past its deadline given another window (said once, at the first)."""
    deadline = "ready" if clock.ready_at is None else "heartbeat"
    seen = f"{progress.cpu_s:.2f}s CPU in the last {progress.window_s:.1f}s, {progress.state}"
    if quiet and not progress.moving():
        return (f"{child_id} (pid {pid}) is past its {deadline} deadline, and every other child is silent "
                f"too ({seen}): this machine or this supervisor stalled, not the child; waiting")
    return (f"{child_id} (pid {pid}) is past its {deadline} deadline but making progress ({seen}): this "
            "machine is slow or busy, not wedged; waiting")


def ready_late_line(child_id: str, pid: int, clock: ChildClock, now: float) -> str:
    return (f"{child_id} ready (pid {pid}) {now - clock.started_at:.1f}s after its start, past its "
            f"{clock.ready_timeout_s:.1f}s ready deadline: this machine is slow or busy (it was making "
            "progress, so it was not killed)")
