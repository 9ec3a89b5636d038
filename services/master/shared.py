"""What the master core's parts share, declared once: the replicated state as this master
holds it, the election, the command desk, the roster, the runners' loads, and the effects of
the input being handled. The leader part, the follower part and this node's own facts each
take it explicitly (no mixins, no undeclared attributes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from skulk.cluster.state import IndexedEvent, State, StateHead
from skulk.services.master.desk import CommandDesk
from skulk.services.master.effects import Effect, Instant, Publish, ToPeer, ToPeers
from skulk.services.master.election import Election
from skulk.services.master.loads import RunnerLoads
from skulk.services.master.replication import SessionLog
from skulk.services.master.roster import Roster
from skulk.wire.message import Message


@dataclass
class Shared:
    node_id: str
    election: Election
    new_id: Callable[[], str]
    """Fresh ids (instances, tasks, re-submitted commands); a counter in tests."""
    state: State = field(default_factory=State)
    log: SessionLog | None = None
    """The leader's log of its session (None while following)."""
    published: SessionLog = field(default_factory=lambda: SessionLog(""))
    """What this master put on its node's bus, leader or not (the event log catches up from it)."""
    roster: Roster = field(default_factory=Roster)
    desk: CommandDesk = field(default_factory=CommandDesk)
    loads: RunnerLoads = field(default_factory=RunnerLoads)
    now: Instant = Instant(0.0, 0.0)
    """The clocks of the input being handled."""
    out: list[Effect] = field(default_factory=list)
    """The effects of the input being handled, in order."""

    @property
    def leading(self) -> bool:
        return self.election.is_leader

    def leader_link(self) -> str | None:
        """The leader to send to, when there is one other than us in a known session."""
        leader = self.election.leader
        return leader if leader and leader != self.node_id and self.election.session else None

    def to_leader(self, msg: Message) -> None:
        if (leader := self.leader_link()) is not None:
            self.out.append(ToPeer(leader, msg))

    def to_peers(self, msg: Message) -> None:
        self.out.append(ToPeers(msg))

    def publish(self, event: IndexedEvent) -> None:
        self.out.append(Publish(event))
        self.published.note(event)

    def publish_head(self) -> None:
        if self.state.session:  # booting or campaigning with nothing yet: the replicas keep theirs
            self.out.append(Publish(StateHead(idx=self.state.last_event_applied_idx, session=self.state.session)))
