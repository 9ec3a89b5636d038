"""Ready deadlines, heartbeat liveness and step deadlines (pure): is a child overdue, and why.

A child beats from its loop. A runner's loop can sit inside one long evaluation (a first-use
kernel compile on a GPU, a large prefill on a slow device): its own watch thread then says so
(a beat carrying the step and its age), and the child is judged by the step's age against
`step_deadline_s` instead of by missed beats. A step that never returns is still killed, at
its step's deadline; a child that says nothing at all is killed after `liveness` beats, as
before.

A busy machine is not a wedged one. When a ready or heartbeat deadline passes, `judge` weighs
what the child did (`Progress`, read from the OS by `supervisor/probe.py`): a child that used
CPU in the last seconds, or waits in the run queue for a CPU the machine has not given it (a
boot storm, a neighbour compiling, a runner prefilling on every core), is given another short
window instead of being killed, up to `SLOW_PATIENCE` times its deadline. A child that makes no
progress (frozen by SIGSTOP, asleep at 0 % CPU as a wedged GPU leaves it) is killed at its
deadline as before; so is one whose process cannot be read, and one still busy at the limit.
An idle child's silence is not held against it while every other child of the same supervisor
is silent too (`others_silent`): the supervisor is then not hearing anyone (its machine stalled
the whole node), and a child asleep at 0 % CPU is what an idle role looks like.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Literal

from skulk.wire.events import LifecycleEvent

Verdict = Literal[
    LifecycleEvent.READY_TIMEOUT, LifecycleEvent.HEARTBEAT_MISSED, LifecycleEvent.STEP_DEADLINE]
"""Why a child is killed, told on the bus as the `ChildLifecycle` event of its kill."""

SLOW_PATIENCE = 10.0
"""How far a child that keeps making progress may run past its deadline: this many times its
ready deadline (boot) or its heartbeat window (after ready). Past that it is killed anyway: a
loop that burns CPU and never beats is a bug, not a slow machine."""

MIN_PROGRESS_CPU_S = 0.01
"""CPU seconds within the probe window that count as progress: one scheduler tick (Linux
accounts CPU time in 10 ms ticks). A process asleep on a wedged device uses none."""


class RunState(StrEnum):
    """The child's scheduling state as the OS reports it, reduced to what the watchdog needs."""

    RUNNABLE = "runnable"  # on a CPU or waiting for one, or in uninterruptible I/O (disk)
    SLEEPING = "sleeping"  # waiting on something of its own (a socket, a lock, a device)
    STOPPED = "stopped"  # SIGSTOP or traced: frozen
    GONE = "gone"  # exited (a zombie) or unreadable: its exit is about to be reaped


@dataclass(frozen=True, slots=True)
class Progress:
    """What the supervisor saw of a child over its last probe window."""

    cpu_s: float  # CPU seconds (user + system) the child used within the window
    window_s: float  # how long that window was
    state: RunState  # at the end of the window

    def moving(self) -> bool:
        """Working, or ready to work and only waiting for the machine."""
        if self.state in (RunState.STOPPED, RunState.GONE):
            return False
        return self.state == RunState.RUNNABLE or self.cpu_s >= MIN_PROGRESS_CPU_S


STEP_REPORT_SKEW_S = 1.0
"""How much later than a step's start the loop beat sent just before it may be read here."""


@dataclass(frozen=True, slots=True)
class ChildClock:
    started_at: float
    ready_timeout_s: float
    heartbeat_s: float
    liveness: int
    ready_at: float | None = None
    last_beat: float | None = None
    step_deadline_s: float = 0.0  # 0: this child's steps get no grace (every role but runners)
    step_since: float | None = None  # when the long step it reported began (supervisor's clock)
    step_beat: float | None = None  # when its watch thread last said so
    step: str = ""  # what that step is, for the log line that kills it
    grace_until: float | None = None  # late but making progress: judged again then
    graces: int = 0  # windows given so far for being late (boot: told when it reports ready)

    def ready(self, now: float) -> ChildClock:
        return replace(self, ready_at=now, last_beat=now, step_since=None, step_beat=None, step="",
                       grace_until=None)

    def beat(self, now: float) -> ChildClock:
        """A beat from the loop: whatever step it reported has returned."""
        return replace(self, last_beat=now, step_since=None, step_beat=None, step="", grace_until=None)

    def in_step(self, now: float, age_s: float, step: str) -> ChildClock:
        """The child's watch thread: its loop has been inside `step` for `age_s` seconds. The
        last loop beat stays what it was: only the step's own deadline is added. A report of a
        step that began well before the loop's last beat is late (it came on another socket):
        the step has returned, so it is ignored. "Well before": the loop's beat just before a
        step began may be read here after the step began (a busy machine delays this loop), so
        a step that began up to `STEP_REPORT_SKEW_S` before that beat was read is the current one
        (a returned step ran at least the watch's 2 s before its report, so it began earlier)."""
        if self.ready_at is None or self.step_deadline_s <= 0 or age_s < 0:
            return self
        began = now - age_s
        if self.last_beat is not None and began < self.last_beat - STEP_REPORT_SKEW_S:
            return self
        return replace(self, step_since=began if self.step_since is None else min(self.step_since, began),
                       step_beat=now, step=step)

    def deadline(self) -> float:
        """The moment this child is judged if nothing arrives before then: its own deadline,
        or, late but making progress, the end of the window it was given."""
        own = self._own_deadline()
        return own if self.grace_until is None else max(own, self.grace_until)

    def window_s(self) -> float:
        """The span one deadline gives: boot's ready deadline, or the heartbeat window."""
        return self.ready_timeout_s if self.ready_at is None else self.heartbeat_s * self.liveness

    def patience_end(self) -> float:
        """Past this, a child still making progress is killed all the same."""
        if self.ready_at is None:
            return self.started_at + self.ready_timeout_s * SLOW_PATIENCE
        last = self.last_beat if self.last_beat is not None else self.ready_at
        return last + self.window_s() * SLOW_PATIENCE

    def _own_deadline(self) -> float:
        if self.ready_at is None:
            return self.started_at + self.ready_timeout_s
        last = self.last_beat if self.last_beat is not None else self.ready_at
        window = self.heartbeat_s * self.liveness
        missed = last + window
        if self.step_since is None or self.step_beat is None:
            return missed
        # inside a step: until its deadline, while the watch thread keeps saying so (a frozen
        # process says nothing: it is judged by the missed beats of its watch thread, too)
        return max(missed, min(self.step_since + self.step_deadline_s, self.step_beat + window))


def forgive(clock: ChildClock, now: float) -> ChildClock:
    """The supervisor itself was frozen (SIGSTOP, machine suspend): restart the child's
    liveness window from `now` instead of blaming it for beats nobody was there to read."""
    if clock.ready_at is None:
        return ChildClock(now, clock.ready_timeout_s, clock.heartbeat_s, clock.liveness,
                          step_deadline_s=clock.step_deadline_s, graces=clock.graces)
    return clock.beat(now)


def regrace_s(clock: ChildClock) -> float:
    """How long a late child that makes progress is given before it is judged again: short, so
    that one that stops progressing is still killed soon after."""
    return max(clock.heartbeat_s, min(clock.window_s(), 5.0))


def verdict(clock: ChildClock, now: float) -> Verdict | None:
    """None while the child is on time; otherwise why it is overdue (`judge` weighs progress)."""
    if now < clock.deadline():
        return None
    if clock.ready_at is None:
        return LifecycleEvent.READY_TIMEOUT
    if clock.step_since is not None and clock.step_beat is not None \
            and now >= clock.step_since + clock.step_deadline_s:
        return LifecycleEvent.STEP_DEADLINE
    return LifecycleEvent.HEARTBEAT_MISSED


QUIET_BEATS = 2
"""A supervisor that has heard no beat from any of its other children for this many heartbeats
is itself not hearing (its machine stalled it, or the beats queue unread): a child's silence
then is not the child's."""


def others_silent(child: str, last_beats: dict[str, float], now: float, heartbeat_s: float) -> bool:
    """Every other running child of this supervisor (two at least) has been silent for
    `QUIET_BEATS` heartbeats too. One wedged child among live ones is alone in its silence; a
    machine that stalls a whole node for seconds (seen under a saturated 2-core machine, every
    role late within one second, the idle ones at 0 % CPU) silences them all at once."""
    others = [t for c, t in last_beats.items() if c != child]
    return len(others) >= 2 and all(now - t >= QUIET_BEATS * heartbeat_s for t in others)


def judge(clock: ChildClock, now: float, progress: Progress | None,
          quiet: bool = False) -> tuple[ChildClock, Verdict | None]:
    """The watchdog's decision at `now`: (the clock, None) while the child is on time; (a clock
    with another window, None) when it is overdue but making progress on a slow or saturated
    machine, or overdue while every sibling is silent too (`quiet`: `others_silent`) and it is
    not frozen; (the clock, why) when it must be killed. A step past its own deadline is killed
    whatever it does: that deadline is the operator's setting (`runner.step_deadline_s`)."""
    why = verdict(clock, now)
    if why is None:
        return clock, None
    silenced = quiet and why == LifecycleEvent.HEARTBEAT_MISSED and progress is not None \
        and progress.state not in (RunState.STOPPED, RunState.GONE)
    if why == LifecycleEvent.STEP_DEADLINE or progress is None or not (progress.moving() or silenced):
        return clock, why
    end = clock.patience_end()
    if now >= end:
        return clock, why
    return replace(clock, grace_until=min(now + regrace_s(clock), end), graces=clock.graces + 1), None


def boot_backoff_s(consecutive_boot_failures: int, *, base_s: float = 1.0, cap_s: float = 30.0) -> float:
    """Delay before restarting a child that failed to boot: 0, then 1, 2, 4 ... capped.

    A boot failure (bad bind, bad config slice) is never retried in a tight loop.
    """
    if consecutive_boot_failures <= 0:
        return 0.0
    return min(cap_s, base_s * 2 ** (consecutive_boot_failures - 1))
