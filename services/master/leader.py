"""The leader's part of the master core: index events and push them to followers, carry out
commands (each once: replies are cached by command id), answer followers' replay requests,
make due re-creations, judge the nodes. Pure: it only appends effects to the `Turn` it is given."""

from __future__ import annotations

import logging
from typing import TypeAlias

from skulk.cluster.catalog import NodeCatalogUpdated
from skulk.cluster.reducer import apply
from skulk.cluster.state import Event, IndexedEvent, NodeRestarting, RunnerKind, RunnerStatusUpdated
from skulk.services.master.commands import handle
from skulk.services.master.effects import Answer, Channel, SyncConfig, TraceRoute
from skulk.services.master.recovery import RecoveryPolicy, next_recreation, runner_failed
from skulk.services.master.replication import SessionLog, seed
from skulk.services.master.shared import Shared, Turn
from skulk.wire.cluster import EventBatch, ReplayRequest, SnapshotPush
from skulk.wire.commands import Reply, Routed
from skulk.wire.message import Command, Message
from skulk.wire.staging import NodeDownloadUpdated

log = logging.getLogger("skulk.master")

OwnFact: TypeAlias = RunnerStatusUpdated | NodeRestarting | NodeDownloadUpdated | NodeCatalogUpdated
"""A node's own fact: its runners' statuses, its restart mark, its copies and its models."""


class Leader:
    def __init__(self, shared: Shared, policy: RecoveryPolicy) -> None:
        self.s, self.policy = shared, policy

    def open_session(self, turn: Turn, session: str, tracing_default: bool) -> None:
        """Just elected: the state carries over into the new session, announced at once."""
        s = self.s
        log.info("elected leader: session %s (%d member(s))", session, len(s.roster.members))
        s.state = seed(s.state, session, s.node_id, tracing_default)
        s.log = SessionLog(session)
        s.publish_head(turn)
        s.to_peers(turn, s.election.announce(-1))
        self.refresh_nodes(turn, force=True)

    def emit(self, turn: Turn, events: list[Event]) -> None:
        """Index, apply, publish locally, push to followers."""
        s = self.s
        assert s.log is not None, "only a leader emits"
        batch = []
        for event in events:
            indexed = IndexedEvent(idx=s.state.last_event_applied_idx + 1, session=s.state.session,
                                   event=event)
            s.state = apply(s.state, indexed)
            s.publish(turn, indexed)
            s.log.append(indexed)
            batch.append(indexed)
        if batch:
            s.to_peers(turn, EventBatch(session=s.state.session, events=tuple(batch)))
            turn.out.append(SyncConfig(s.state))

    def index_fact(self, turn: Turn, event: OwnFact) -> None:
        """A node's own fact, this node's or a follower's `LocalEvent`: a runner that fails
        (just now) deletes its instance, to re-create after a back-off or give up."""
        s = self.s
        previous = s.state.runners.get(event.runner_id) if isinstance(event, RunnerStatusUpdated) else None
        self.emit(turn, [event])
        if isinstance(event, RunnerStatusUpdated) and event.status.kind == RunnerKind.FAILED \
                and (previous is None or previous.kind != RunnerKind.FAILED):
            self.emit(turn, runner_failed(s.state, event.runner_id, event.status, turn.now.wall, self.policy))

    def execute(self, turn: Turn, cmd: Command) -> Reply:
        """Carry out a command once; a repeated id gets the first reply again."""
        s = self.s
        reply = s.desk.cached(cmd.command_id)
        if reply is None:
            outcome = handle(s.state, cmd, s.new_id, turn.now.wall, s.loads.loads)
            self.emit(turn, outcome.events)
            s.election.commands += bool(outcome.events)
            reply = outcome.reply
            s.desk.remember(cmd.command_id, reply)
            if isinstance(reply, Routed) and reply.trace:
                task = s.state.tasks.get(reply.task_id)
                turn.out.append(TraceRoute(reply, task.params.model if task else "", s.loads.get(reply.runner_id),
                                        start_us=int(turn.now.wall * 1_000_000)))
        return reply

    def replay(self, turn: Turn, envelope: list[bytes], msg: ReplayRequest) -> None:
        """A follower asks for what it missed: the events, or the whole state when they are no
        longer kept or it was in another session. Asking makes it a follower of ours."""
        s = self.s
        assert s.log is not None, "only a leader answers replays"
        s.election.follower(msg.node_id)
        events = s.log.since(msg.since) if msg.session == s.state.session else None
        reply: Message = (EventBatch(session=s.state.session, events=tuple(events)) if events is not None
                          else SnapshotPush(state=s.state))
        turn.out.append(Answer(Channel.CLUSTER, envelope, reply))

    def recreate_due(self, turn: Turn) -> None:
        """Make the re-creations that are due (whoever led when their runner failed)."""
        s = self.s
        while s.leading and (events := next_recreation(s.state, turn.now.wall, s.new_id, self.policy)):
            self.emit(turn, events)
            s.election.commands += 1

    def refresh_nodes(self, turn: Turn, force: bool = False) -> None:
        s = self.s
        if s.leading and s.node_id in s.roster.members:  # else: nobody judged yet
            self.emit(turn, s.roster.events(s.state, turn.now.mono, turn.now.wall, force,
                                            self.policy.replace_lost_after_s))
