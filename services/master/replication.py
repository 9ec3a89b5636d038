"""The leader's log of its session's events, for followers that missed some (pure)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from skulk.cluster.state import IndexedEvent, State

LOG_KEEP = 10_000
REPLAY_MAX = 2_000


@dataclass
class SessionLog:
    session: str
    events: deque[IndexedEvent] = field(default_factory=lambda: deque(maxlen=LOG_KEEP))

    def append(self, event: IndexedEvent) -> None:
        self.events.append(event)

    def since(self, idx: int) -> list[IndexedEvent] | None:
        """Events after `idx`, or None when they are no longer kept (send a snapshot)."""
        if not self.events or idx + 1 < self.events[0].idx:
            return None if self.events and idx + 1 < self.events[0].idx else []
        return [e for e in self.events if e.idx > idx]

    def note(self, event: IndexedEvent) -> None:
        """Keep an event this master published on its node's bus (a new session starts over)."""
        if event.session != self.session:
            self.session = event.session
            self.events.clear()
        self.events.append(event)

    def after(self, session: str, idx: int, limit: int = REPLAY_MAX) -> tuple[IndexedEvent, ...]:
        """What the node's own readers missed after `idx` (the event log catching up), as far
        as it is kept, the oldest `limit` first (one frame stays small; the reader asks again)."""
        if session != self.session:
            return ()
        return tuple(e for e in self.events if e.idx > idx)[:limit]


def seed(previous: State, session: str, node_id: str, tracing_default: bool = False) -> State:
    """A new leader's first state: what the old session knew about instances, runners and
    nodes carries over (instances survive a master loss); tasks belong to the old session.
    A cluster's very first session (no session before it) starts tracing as configured
    (`tracing.enabled`); later ones keep the replicated switch."""
    tracing = tracing_default if not previous.session else previous.tracing_enabled
    return replace(previous, session=session, master_node_id=node_id, last_event_applied_idx=-1,
                   tasks={}, tracing_enabled=tracing)


def carried_over(saved: State, node_id: str, age_s: float, max_age_s: float = 120.0) -> State | None:
    """The state a node saved at an orderly stop, if it is this node's own and recent (an
    in-place restart): instances and nodes carry over; runner statuses and tasks do not (the
    runners are new processes and report again). Its index is dropped (-1): the live nodes that
    elected a leader while this one restarted know more (the runners' statuses), so in a campaign
    (`election.py`: clock, then last index) this node never outranks one of them with its file."""
    if saved.master_node_id != node_id or age_s > max_age_s:
        return None
    return replace(saved, runners={}, tasks={}, last_event_applied_idx=-1)
