"""Ready deadlines, heartbeat liveness and step deadlines (pure): is a child overdue, and why.

A child beats from its loop. A runner's loop can sit inside one long evaluation (a first-use
kernel compile on a GPU, a large prefill on a slow device): its own watch thread then says so
(a beat carrying the step and its age), and the child is judged by the step's age against
`step_deadline_s` instead of by missed beats. A step that never returns is still killed, at
its step's deadline; a child that says nothing at all is killed after `liveness` beats, as
before.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from skulk.wire.events import LifecycleEvent

Verdict = Literal[
    LifecycleEvent.READY_TIMEOUT, LifecycleEvent.HEARTBEAT_MISSED, LifecycleEvent.STEP_DEADLINE]
"""Why a child is killed, told on the bus as the `ChildLifecycle` event of its kill."""


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

    def ready(self, now: float) -> ChildClock:
        return replace(self, ready_at=now, last_beat=now, step_since=None, step_beat=None, step="")

    def beat(self, now: float) -> ChildClock:
        """A beat from the loop: whatever step it reported has returned."""
        return replace(self, last_beat=now, step_since=None, step_beat=None, step="")

    def in_step(self, now: float, age_s: float, step: str) -> ChildClock:
        """The child's watch thread: its loop has been inside `step` for `age_s` seconds. The
        last loop beat stays what it was: only the step's own deadline is added. A report of a
        step that began before the loop's last beat is late (it came on another socket): the
        step has returned, so it is ignored."""
        if self.ready_at is None or self.step_deadline_s <= 0 or age_s < 0:
            return self
        began = now - age_s
        if self.last_beat is not None and began < self.last_beat:
            return self
        return replace(self, step_since=began if self.step_since is None else min(self.step_since, began),
                       step_beat=now, step=step)

    def deadline(self) -> float:
        """The moment this child becomes overdue if nothing arrives before then."""
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
                          step_deadline_s=clock.step_deadline_s)
    return clock.beat(now)


def verdict(clock: ChildClock, now: float) -> Verdict | None:
    """None while the child is on time; otherwise why it must be killed."""
    if now < clock.deadline():
        return None
    if clock.ready_at is None:
        return LifecycleEvent.READY_TIMEOUT
    if clock.step_since is not None and clock.step_beat is not None \
            and now >= clock.step_since + clock.step_deadline_s:
        return LifecycleEvent.STEP_DEADLINE
    return LifecycleEvent.HEARTBEAT_MISSED


def boot_backoff_s(consecutive_boot_failures: int, *, base_s: float = 1.0, cap_s: float = 30.0) -> float:
    """Delay before restarting a child that failed to boot: 0, then 1, 2, 4 ... capped.

    A boot failure (bad bind, bad config slice) is never retried in a tight loop.
    """
    if consecutive_boot_failures <= 0:
        return 0.0
    return min(cap_s, base_s * 2 ** (consecutive_boot_failures - 1))
