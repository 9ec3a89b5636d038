"""The worker's socket to its node's supervisor: keeps this node's runner processes in line with
the state (every second, and at once when the state changes, ask which runners exist, then
start or stop runners per the pure `runner_plan.plan`). One DEALER, owned by the worker's loop."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq

from skulk.cluster.state import State
from skulk.services.worker.runner_plan import plan
from skulk.wire.control import AdminCommand, AdminReply, AdminVerb
from skulk.wire.sockets import drain, send

log = logging.getLogger("skulk.worker")

REQUEST_AGAIN_S = 2.0
STATUS_TIMEOUT_S = 5.0


class RunnerKeeper:
    def __init__(self, sup: zmq.Socket[Any], node_id: str, locate: Callable[[str], Path | None], listen: str,
                 advertise: str, state: Callable[[], State | None],
                 on_plan: Callable[[set[str], list[str], list[str]], None]) -> None:
        """`on_plan(running, missing, starting)`: after each reconcile, the runners that exist,
        the models this node must stage before their runners can start, and the models of the
        runners just asked to start."""
        self.sup, self.node_id, self.locate = sup, node_id, locate
        self.listen, self.advertise, self.state, self.on_plan = listen, advertise, state, on_plan
        self.status_pending_since: float | None = None
        self.requested: dict[str, float] = {}

    def ask(self) -> None:
        now = time.monotonic()
        if self.status_pending_since is not None and now - self.status_pending_since < STATUS_TIMEOUT_S:
            return
        self.status_pending_since = now
        send(self.sup, AdminCommand(verb=AdminVerb.STATUS), flags=zmq.NOBLOCK)

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
        state = self.state()
        if state is None:
            return
        now = time.monotonic()
        decided = plan(state, self.node_id, running, self.locate, self.listen, self.advertise)
        for s in decided.start:
            if now - self.requested.get(s.runner_id, -1e9) >= REQUEST_AGAIN_S:
                self.requested[s.runner_id] = now
                log.info("starting runner %s", s.runner_id)
                send(self.sup, AdminCommand(verb=AdminVerb.START_CHILD, supervisor="runners",
                                            target=s.runner_id, args=s.args), flags=zmq.NOBLOCK)
        for rid in decided.stop:
            if now - self.requested.get(rid, -1e9) >= REQUEST_AGAIN_S:
                self.requested[rid] = now
                log.info("stopping runner %s (no longer in state)", rid)
                send(self.sup, AdminCommand(verb=AdminVerb.TERMINATE_CHILD, supervisor="runners", target=rid),
                     flags=zmq.NOBLOCK)
        self.on_plan(running - set(decided.stop), decided.missing, decided.starting)
