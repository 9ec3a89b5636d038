"""A follower's work: apply the leader's event batches strictly in order (a gap asks for a
replay), adopt a snapshot, forward commands to the leader. A mixin of `Master`."""

from __future__ import annotations

import logging
import uuid

import zmq

from skulk.services.master.commands import describe, lost_changes
from skulk.wire.cluster import EventBatch, ForwardCommand, ReplayRequest
from skulk.wire.reducer import apply
from skulk.wire.sockets import send
from skulk.wire.state import State
from skulk.wire.topics import EVT_STATE

log = logging.getLogger("skulk.master")


class Following:
    def follow(self, batch: EventBatch) -> None:
        if self.election.is_leader:
            return
        if batch.session != self.state.session:
            self.ask_replay(-1)
            return
        for ev in batch.events:
            if ev.idx <= self.state.last_event_applied_idx:
                continue
            if ev.idx != self.state.last_event_applied_idx + 1:
                self.ask_replay(self.state.last_event_applied_idx)
                return
            self.state = apply(self.state, ev)
            self.loop.publish(EVT_STATE, ev, suffix=ev.event.TYPE)
            self.published.note(ev)
        self.config_file.sync(self.state)

    def ask_replay(self, since: int) -> None:
        sock = self.leader_sock()
        if sock is not None:
            send(sock, ReplayRequest(node_id=self.node_id, session=self.state.session, since=since),
                 flags=zmq.NOBLOCK)

    def adopt(self, snapshot: State) -> None:
        if self.election.is_leader or snapshot.session != self.election.session:
            return
        self.state = snapshot
        self.config_file.sync(snapshot)
        self.publish_head()
        self.back_from_restart()
        for rid, status in self.local_runners.items():
            self.runner_fact(rid, status)
        if self.deposed is not None:
            for cmd in lost_changes(self.deposed, snapshot, lambda: uuid.uuid4().hex):
                log.warning("re-submitting %s to leader %s (it was ours before the sessions merged)",
                            describe(cmd), self.election.leader)
                self.command(None, cmd)
            self.deposed = None

    def forward(self, command_id: str) -> None:
        sock, held = self.leader_sock(), self.desk.held.get(command_id)
        if sock is not None and held is not None:
            send(sock, ForwardCommand(node_id=self.node_id, command=held.command),  # type: ignore[arg-type]
                 flags=zmq.NOBLOCK)
