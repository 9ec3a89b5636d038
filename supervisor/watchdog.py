"""Ready deadlines and heartbeat liveness (pure): is a child overdue, and when to look next."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["ready_timeout", "heartbeat_missed"]


@dataclass(frozen=True, slots=True)
class ChildClock:
    started_at: float
    ready_timeout_s: float
    heartbeat_s: float
    liveness: int
    ready_at: float | None = None
    last_beat: float | None = None

    def ready(self, now: float) -> ChildClock:
        return ChildClock(self.started_at, self.ready_timeout_s, self.heartbeat_s,
                          self.liveness, now, now)

    def beat(self, now: float) -> ChildClock:
        return ChildClock(self.started_at, self.ready_timeout_s, self.heartbeat_s,
                          self.liveness, self.ready_at, now)

    def deadline(self) -> float:
        """The moment this child becomes overdue if nothing arrives before then."""
        if self.ready_at is None:
            return self.started_at + self.ready_timeout_s
        last = self.last_beat if self.last_beat is not None else self.ready_at
        return last + self.heartbeat_s * self.liveness


def forgive(clock: ChildClock, now: float) -> ChildClock:
    """The supervisor itself was frozen (SIGSTOP, machine suspend): restart the child's
    liveness window from `now` instead of blaming it for beats nobody was there to read."""
    if clock.ready_at is None:
        return ChildClock(now, clock.ready_timeout_s, clock.heartbeat_s, clock.liveness)
    return clock.beat(now)


def verdict(clock: ChildClock, now: float) -> Verdict | None:
    """None while the child is on time; otherwise why it must be killed."""
    if now < clock.deadline():
        return None
    return "ready_timeout" if clock.ready_at is None else "heartbeat_missed"


def boot_backoff_s(consecutive_boot_failures: int, *, base_s: float = 1.0, cap_s: float = 30.0) -> float:
    """Delay before restarting a child that failed to boot: 0, then 1, 2, 4 ... capped.

    A boot failure (bad bind, bad config slice) is never retried in a tight loop.
    """
    if consecutive_boot_failures <= 0:
        return 0.0
    return min(cap_s, base_s * 2 ** (consecutive_boot_failures - 1))
