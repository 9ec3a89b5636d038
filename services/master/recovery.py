"""The leader's answer to a failed runner: delete its instance now (the other ranks are stopped
by their nodes' runner plans, its streams end), then re-create it after a back-off, or give it
up with the reason (`failures.FailureBook` decides). Re-creations wait here until due; they are
the leader's memory only, so a failover in between drops them (the instance stays deleted,
with its reason in `/state`)."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from skulk.services.master.commands import delete_events, place_again
from skulk.services.master.failures import FailureBook, GiveUp
from skulk.wire.commands import CommandAccepted, PlaceInstance, Reply
from skulk.wire.message import Message
from skulk.wire.state import State

log = logging.getLogger("skulk.master")


@dataclass(frozen=True, slots=True)
class Pending:
    due: float
    replaces: str  # the failed instance's id
    command: PlaceInstance


@dataclass
class Recovery:
    book: FailureBook = field(default_factory=FailureBook)
    pending: list[Pending] = field(default_factory=list)

    def runner_failed(self, state: State, runner_id: str, error: str, now: float,
                      wall: float) -> list[Message]:
        """The events that delete the failed runner's instance (none if it has none)."""
        inst = next((i for i in state.instances.values() if runner_id in i.runner_to_shard), None)
        if inst is None:
            return []
        verdict = self.book.verdict(inst.instance_id, error, now)
        if isinstance(verdict, GiveUp):
            log.error("deleting instance %s (%s): %s", inst.instance_id, inst.model_id, verdict.reason)
            return delete_events(state, inst.instance_id, verdict.reason, wall, "given_up")
        self.pending.append(Pending(now + verdict.delay_s, inst.instance_id,
                                    place_again(inst, uuid.uuid4().hex)))
        reason = f"runner {runner_id} failed ({error}); re-creating in {verdict.delay_s:.1f}s"
        log.warning("instance %s (%s): %s", inst.instance_id, inst.model_id, reason)
        return delete_events(state, inst.instance_id, reason, wall, "runner_failed")

    def due(self, now: float) -> list[Pending]:
        ready = [p for p in self.pending if p.due <= now]
        self.pending = [p for p in self.pending if p.due > now]
        return ready

    def placed(self, pending: Pending, reply: Reply) -> None:
        if isinstance(reply, CommandAccepted):
            self.book.replaced(pending.replaces, reply.instance_id)
            log.info("re-created instance %s as %s", pending.replaces, reply.instance_id)
        else:
            log.error("could not re-create instance %s: %s", pending.replaces,
                      getattr(reply, "message", reply.TYPE))
