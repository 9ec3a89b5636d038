"""The follower's part of the master core: apply the leader's event batches strictly in order
(a gap asks for a replay), adopt a snapshot, forward held commands to the leader. Pure: it
only appends effects to the `Turn` it is given."""

from __future__ import annotations

import logging

from skulk.cluster.reducer import apply
from skulk.cluster.state import State
from skulk.services.master.commands import describe, lost_changes
from skulk.services.master.effects import SyncConfig
from skulk.services.master.shared import Shared, Turn
from skulk.wire.cluster import EventBatch, ForwardCommand, ReplayRequest
from skulk.wire.commands import DeleteInstance, PlaceInstance

log = logging.getLogger("skulk.master")


class Follower:
    def __init__(self, shared: Shared) -> None:
        self.s = shared
        self.deposed: State | None = None
        """Our state as leader, until the winner's arrives (what we accepted that it lacks is
        asked of it again)."""

    def start_following(self, turn: Turn, leader: str, session: str) -> None:
        s = self.s
        log.info("following leader %s (session %s)", leader, session)
        self.deposed = s.state if s.log is not None else None  # we led until now
        s.log = None
        self.ask_replay(turn, -1)

    def follow(self, turn: Turn, batch: EventBatch) -> None:
        s = self.s
        if s.leading:
            return
        if batch.session != s.state.session:
            self.ask_replay(turn, -1)
            return
        for ev in batch.events:
            if ev.idx <= s.state.last_event_applied_idx:
                continue
            if ev.idx != s.state.last_event_applied_idx + 1:
                self.ask_replay(turn, s.state.last_event_applied_idx)
                return
            s.state = apply(s.state, ev)
            s.publish(turn, ev)
        turn.out.append(SyncConfig(s.state))

    def ask_replay(self, turn: Turn, since: int) -> None:
        s = self.s
        s.to_leader(turn, ReplayRequest(node_id=s.node_id, session=s.state.session, since=since))

    def adopt(self, turn: Turn, snapshot: State) -> list[PlaceInstance | DeleteInstance] | None:
        """Take the leader's whole state; None when it is not ours to take (we lead, or it is of
        another session), else what a deposed leader must ask the winner for again."""
        s = self.s
        if s.leading or snapshot.session != s.election.session:
            return None
        s.state = snapshot
        turn.out.append(SyncConfig(snapshot))
        s.publish_head(turn)
        lost: list[PlaceInstance | DeleteInstance] = []
        if self.deposed is not None:
            lost = lost_changes(self.deposed, snapshot, s.new_id)
            for cmd in lost:
                log.warning("re-submitting %s to leader %s (it was ours before the sessions merged)",
                            describe(cmd), s.election.leader)
            self.deposed = None
        return lost

    def forward(self, turn: Turn, command_id: str) -> None:
        s = self.s
        if (held := s.desk.held.get(command_id)) is not None:
            s.to_leader(turn, ForwardCommand(node_id=s.node_id, command=held.command))
