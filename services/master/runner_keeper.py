"""The master's socket to its own node's supervisor: keeps this node's runner processes in line
with the state (every second, and at once when instances come or go, ask which runners exist,
then start or stop runners per the pure `runner_plan.plan`), and asks for the node's in-place
restart. One DEALER, owned by the master's loop thread."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import zmq

from skulk.services.master.runner_plan import plan
from skulk.wire.commands import RESTART_PENDING, CommandAccepted, CommandRejected, RejectReason, Reply
from skulk.wire.control import AdminCommand, AdminReply
from skulk.wire.sockets import drain, send
from skulk.wire.state import IndexedEvent, InstanceCreated, InstanceDeleted, NodeTimedOut, State

PLACEMENT_EVENTS = (InstanceCreated, InstanceDeleted, NodeTimedOut)

log = logging.getLogger("skulk.master")

REQUEST_AGAIN_S = 2.0
STATUS_TIMEOUT_S = 5.0


class RunnerKeeper:
    def __init__(self, sup: zmq.Socket[Any], node_id: str, models_dir: Path, listen: str,
                 advertise: str, state: Callable[[], State]) -> None:
        self.sup, self.node_id, self.models_dir = sup, node_id, models_dir
        self.listen, self.advertise, self.state = listen, advertise, state
        self.status_pending_since: float | None = None
        self.requested: dict[str, float] = {}
        self.restart_asked = False

    def restart_node(self, command_id: str) -> Reply:
        """Ask the supervisor to restart the node in place; a second ask is upstream's 409 (this
        process is replaced by the restart, so the flag lives exactly as long as it must)."""
        if self.restart_asked:
            return CommandRejected(command_id=command_id, status=409, message=RESTART_PENDING,
                                   reason=RejectReason.RESTART_PENDING)
        log.warning("restarting this node in place (asked through the API)")
        send(self.sup, AdminCommand(verb="restart"), flags=zmq.NOBLOCK)
        self.restart_asked = True
        return CommandAccepted(command_id=command_id, message="restarting")

    def ask(self) -> None:
        now = time.monotonic()
        if self.status_pending_since is not None and now - self.status_pending_since < STATUS_TIMEOUT_S:
            return
        self.status_pending_since = now
        send(self.sup, AdminCommand(verb="status"), flags=zmq.NOBLOCK)

    def poke(self, events: Sequence[IndexedEvent]) -> None:
        """Reconcile now when instances come or go: a dead instance's other ranks stop at once."""
        if any(isinstance(e.event, PLACEMENT_EVENTS) for e in events):
            self.ask()

    def on_reply(self, sock: zmq.Socket[Any]) -> None:
        for reply in drain(sock, limit=100):
            if not isinstance(reply, AdminReply):
                continue
            if not reply.ok:
                log.warning("supervisor refused a runner command: %s", reply.message)
            elif not reply.message:  # the answer to `status`
                self.status_pending_since = None
                self.reconcile({c.id for c in reply.children if c.supervisor == "runners"})

    def reconcile(self, running: set[str]) -> None:
        now = time.monotonic()
        start, stop = plan(self.state(), self.node_id, running, self.models_dir, self.listen,
                           self.advertise)
        for s in start:
            if now - self.requested.get(s.runner_id, -1e9) >= REQUEST_AGAIN_S:
                self.requested[s.runner_id] = now
                log.info("starting runner %s", s.runner_id)
                send(self.sup, AdminCommand(verb="start_child", supervisor="runners",
                                            target=s.runner_id, args=s.args), flags=zmq.NOBLOCK)
        for rid in stop:
            if now - self.requested.get(rid, -1e9) >= REQUEST_AGAIN_S:
                self.requested[rid] = now
                log.info("stopping runner %s (no longer in state)", rid)
                send(self.sup, AdminCommand(verb="terminate_child", supervisor="runners", target=rid),
                     flags=zmq.NOBLOCK)
