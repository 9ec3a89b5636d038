"""Which state events the event log records, in order and without gaps (pure, `now` passed in).

The log hears the leader's indexed events on the node's bus, and a SUB socket misses what was
published before it connected (a node that places a model at boot publishes `InstanceCreated`
within a second of starting) or while the role was down (killed, restarted). So it tracks the
last index it recorded; an event past the next index, or a `StateHead` ahead of it, means some
were missed: it holds what it hears, asks the node's master for the events after its index (the
master keeps the ones it published, `SessionLog`), records them in order, then what it held.
Events the master no longer holds (or never published: a follower that adopted a snapshot)
are skipped and counted, never waited on: at most `ASK_TIMEOUT_S` passes before it goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

Item = TypeVar("Item")

ASK_TIMEOUT_S = 3.0
HOLD_MAX = 20_000
"""Events heard while a catch-up is in flight: past this, the oldest are recorded as they are."""


@dataclass(frozen=True, slots=True)
class Ask:
    """Send the master `ReplayRequest(session, since)`."""

    session: str
    since: int


@dataclass(slots=True)
class Step(Generic[Item]):
    """What to do now: record these, in this order; ask this (or nothing)."""

    record: list[Item] = field(default_factory=list)
    ask: Ask | None = None
    skipped: int = 0  # indexes given up on (not held anywhere): the caller says so once


class CatchUp(Generic[Item]):
    def __init__(self, session: str = "", idx: int = -1) -> None:
        self.session, self.idx = session, idx  # the last state event recorded
        self.asked_at: float | None = None
        self.target = idx  # the highest index known to exist (events or heads) in `session`
        self.held: dict[int, Item] = {}

    def _next(self, session: str) -> int:
        return self.idx + 1 if session == self.session else 0

    def _ask(self, session: str, now: float) -> Ask:
        if session != self.session:
            self.session, self.idx, self.target = session, -1, -1
        self.asked_at = now
        return Ask(session, self.idx)

    def on_event(self, session: str, idx: int, item: Item, now: float) -> Step[Item]:
        if session == self.session and idx <= self.idx:
            return Step()  # heard again (a catch-up and the bus both brought it)
        if self.asked_at is not None and session != self.session:
            finished = self._finish()  # the session changed under the catch-up: go on from here
            return _joined(finished, self.on_event(session, idx, item, now))
        if self.asked_at is None and idx == self._next(session):
            if session != self.session:
                self.target = -1
            self.session, self.idx, self.target = session, idx, max(self.target, idx)
            return Step(record=[item])
        step: Step[Item] = Step()
        if self.asked_at is None:
            step.ask = self._ask(session, now)
        self.held[idx] = item
        self.target = max(self.target, idx)
        if len(self.held) > HOLD_MAX:
            step = _joined(step, self._finish())
        return step

    def on_head(self, session: str, idx: int, now: float) -> Step[Item]:
        """The leader's latest index: ahead of what was recorded means events were missed."""
        if self.asked_at is not None or idx < self._next(session):
            return Step()
        step: Step[Item] = Step(ask=self._ask(session, now))
        self.target = max(self.target, idx)
        return step

    def on_batch(self, session: str, events: list[tuple[int, Item]], now: float) -> Step[Item]:
        """The master's answer: the events after the index asked for, as far as it holds them."""
        if self.asked_at is None or session != self.session:
            return Step()  # late, or about another session: the timeout settles it
        fresh = [(idx, item) for idx, item in events if idx > self.idx]
        for idx, item in fresh:
            self.held[idx] = item
        if not fresh:  # the master holds nothing after our index: go on from what was heard
            return self._finish()
        step: Step[Item] = Step()
        first = min(self.held)
        if first > self.idx + 1:  # older than the master's oldest: held by nobody
            step.skipped, self.idx = first - self.idx - 1, first - 1
        while self.idx + 1 in self.held:  # the part without a gap: record it now
            self.idx += 1
            step.record.append(self.held.pop(self.idx))
        if self.idx < self.target:  # it sent what fits in one answer (or a gap follows): ask again
            step.ask = self._ask(self.session, now)
            return step
        self.asked_at = None
        return step

    def due(self, now: float) -> Step[Item]:
        """No answer in time (the master restarting): record what was held and go on."""
        if self.asked_at is not None and now - self.asked_at > ASK_TIMEOUT_S:
            return self._finish()
        return Step()

    def _finish(self) -> Step[Item]:
        step: Step[Item] = Step()
        expected = self.idx + 1
        for idx in sorted(self.held):
            step.skipped += idx - expected
            step.record.append(self.held[idx])
            expected = idx + 1
        if self.target >= expected:
            step.skipped += self.target - expected + 1
        self.idx = max(self.target, expected - 1)
        self.target = self.idx
        self.held.clear()
        self.asked_at = None
        return step


def _joined(a: Step[Item], b: Step[Item]) -> Step[Item]:
    return Step(record=a.record + b.record, ask=b.ask or a.ask, skipped=a.skipped + b.skipped)
