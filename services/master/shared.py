"""What the master core's parts share, declared once: the replicated state as this master
holds it, the election, the command desk, the roster, the runners' loads; and the `Turn`, the
input being handled (its clocks and the effects it makes), which every part that decides is
given explicitly: nothing ambient, so a reader sees from a signature what a step may do."""

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

    @property
    def leading(self) -> bool:
        return self.election.is_leader

    def leader_link(self) -> str | None:
        """The leader to send to, when there is one other than us in a known session."""
        leader = self.election.leader
        return leader if leader and leader != self.node_id and self.election.session else None

    def to_leader(self, turn: Turn, msg: Message) -> None:
        if (leader := self.leader_link()) is not None:
            turn.out.append(ToPeer(leader, msg))

    def to_peers(self, turn: Turn, msg: Message) -> None:
        turn.out.append(ToPeers(msg))

    def publish(self, turn: Turn, event: IndexedEvent) -> None:
        turn.out.append(Publish(event))
        self.published.note(event)

    def publish_head(self, turn: Turn) -> None:
        if self.state.session:  # booting or campaigning with nothing yet: the replicas keep theirs
            turn.out.append(Publish(StateHead(idx=self.state.last_event_applied_idx, session=self.state.session)))


@dataclass
class Turn:
    """One input being handled: its clocks, and the effects it makes, in order."""

    now: Instant
    out: list[Effect] = field(default_factory=list)
