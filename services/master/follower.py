"""The follower's part of the master core: apply the leader's event batches strictly in order
(a gap asks for a replay), adopt a snapshot, forward held commands to the leader. Pure: it
only appends effects to `Shared.out`."""

from __future__ import annotations

import logging

from skulk.cluster.reducer import apply
from skulk.cluster.state import State
from skulk.services.master.commands import describe, lost_changes
from skulk.services.master.effects import SyncConfig
from skulk.services.master.shared import Shared
from skulk.wire.cluster import EventBatch, ForwardCommand, ReplayRequest
from skulk.wire.commands import DeleteInstance, PlaceInstance

log = logging.getLogger("skulk.master")


class Follower:
    def __init__(self, shared: Shared) -> None:
        self.s = shared
        self.deposed: State | None = None
        """Our state as leader, until the winner's arrives (what we accepted that it lacks is
        asked of it again)."""

    def start_following(self, leader: str, session: str) -> None:
        s = self.s
        log.info("following leader %s (session %s)", leader, session)
        self.deposed = s.state if s.log is not None else None  # we led until now
        s.log = None
        self.ask_replay(-1)

    def follow(self, batch: EventBatch) -> None:
        s = self.s
        if s.leading:
            return
        if batch.session != s.state.session:
            self.ask_replay(-1)
            return
        for ev in batch.events:
            if ev.idx <= s.state.last_event_applied_idx:
                continue
            if ev.idx != s.state.last_event_applied_idx + 1:
                self.ask_replay(s.state.last_event_applied_idx)
                return
            s.state = apply(s.state, ev)
            s.publish(ev)
        s.out.append(SyncConfig(s.state))

    def ask_replay(self, since: int) -> None:
        s = self.s
        s.to_leader(ReplayRequest(node_id=s.node_id, session=s.state.session, since=since))

    def adopt(self, snapshot: State) -> list[PlaceInstance | DeleteInstance] | None:
        """Take the leader's whole state; None when it is not ours to take (we lead, or it is of
        another session), else what a deposed leader must ask the winner for again."""
        s = self.s
        if s.leading or snapshot.session != s.election.session:
            return None
        s.state = snapshot
        s.out.append(SyncConfig(snapshot))
        s.publish_head()
        lost: list[PlaceInstance | DeleteInstance] = []
        if self.deposed is not None:
            lost = lost_changes(self.deposed, snapshot, s.new_id)
            for cmd in lost:
                log.warning("re-submitting %s to leader %s (it was ours before the sessions merged)",
                            describe(cmd), s.election.leader)
            self.deposed = None
        return lost

    def forward(self, command_id: str) -> None:
        s = self.s
        if (held := s.desk.held.get(command_id)) is not None:
            s.to_leader(ForwardCommand(node_id=s.node_id, command=held.command))
