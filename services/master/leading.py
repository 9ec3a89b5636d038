"""The leader's work: index events and push them to followers, carry out commands, make due
re-creations, judge the nodes. A mixin of `Master` (service.py owns the sockets and the loop)."""

from __future__ import annotations

import logging
import time
import uuid

from skulk.services.master.commands import handle
from skulk.services.master.recovery import next_recreation
from skulk.wire.cluster import EventBatch
from skulk.wire.commands import Routed
from skulk.wire.message import Message
from skulk.wire.reducer import apply
from skulk.wire.state import IndexedEvent
from skulk.wire.topics import EVT_STATE
from skulk.wire.trace_files import TracePart, now_us, write_part

log = logging.getLogger("skulk.master")


class Leading:
    def emit(self, events: list[Message]) -> None:
        """Leader only: index, apply, publish locally, push to followers."""
        batch = []
        for event in events:
            indexed = IndexedEvent(idx=self.state.last_event_applied_idx + 1,
                                   session=self.state.session, event=event)  # type: ignore[arg-type]
            self.state = apply(self.state, indexed)
            self.loop.publish(EVT_STATE, indexed, suffix=event.TYPE)
            assert self.log is not None
            self.log.append(indexed)
            self.published.note(indexed)
            batch.append(indexed)
        if batch:
            self.to_peers(EventBatch(session=self.state.session, events=tuple(batch)))
            self.config_file.sync(self.state)

    def execute(self, cmd: Message) -> Message:
        command_id = getattr(cmd, "command_id", "")
        reply = self.desk.cached(command_id)
        if reply is None:
            start_us = now_us()
            outcome = handle(self.state, cmd, lambda: uuid.uuid4().hex, self.loads.loads)
            self.emit(outcome.events)
            self.election.commands += bool(outcome.events)
            reply = outcome.reply
            self.desk.remember(command_id, reply)
            if isinstance(reply, Routed) and reply.trace:
                self.trace_route(reply, start_us)
        return reply

    def trace_route(self, routed: Routed, start_us: int) -> None:
        """The router's span of a traced task (the leader's decision and its event), kept on
        this node under the task id."""
        task = self.state.tasks.get(routed.task_id)
        part = TracePart(task_id=routed.task_id, part="router", node_id=self.node_id, friendly_name="",
                         model_id=task.params.model if task else "")
        part.add("route", "router", start_us, now_us(), attrs={"instanceId": routed.instance_id,
                                                               "runnerId": routed.runner_id,
                                                               "load": self.loads.get(routed.runner_id)})
        write_part(self.loop.rt.args.home, part)

    def flush_pending(self) -> None:
        for command_id in list(self.desk.held):
            if self.election.is_leader:
                held = self.desk.held.pop(command_id)
                self.answer(held.envelope, self.execute(held.command))
            else:
                self.forward(command_id)

    def recreate_due(self) -> None:
        """Leader: make the re-creations that are due (whoever led when their runner failed)."""
        while self.election.is_leader and (events := next_recreation(
                self.state, time.time(), lambda: uuid.uuid4().hex, self.policy)):
            self.emit(events)
            self.election.commands += 1

    def refresh_nodes(self, force: bool = False) -> None:
        if self.election.is_leader and self.node_id in self.roster.members:  # else: nobody judged yet
            self.emit(self.roster.events(self.state, time.monotonic(), time.time(), force))
