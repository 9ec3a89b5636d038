"""The master's loop: commands in, indexed events out, runner processes reconciled.

On a single node it is always the leader: it indexes events (a new session per start),
applies them with the shared reducer and publishes them on the bus (`evt.state.`) with a
`StateHead` every second, so replicas (API workers) follow by snapshot + updates. Runner
reports and supervisor lifecycle events become `RunnerStatusUpdated` events (only on
change). Every second it asks the supervisor which runners exist and starts or stops runners
to match the state (`runner_plan`).
"""

from __future__ import annotations

import argparse
import logging
import socket
import time
import uuid
from collections import OrderedDict
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import psutil
import zmq

from skulk.services.base import ServiceLoop
from skulk.services.master.commands import handle
from skulk.services.master.runner_plan import plan
from skulk.wire import endpoints
from skulk.wire.commands import CommandRejected, PlaceInstance
from skulk.wire.control import AdminCommand, AdminReply
from skulk.wire.errors import WireError
from skulk.wire.events import ChildLifecycle, RunnerReport
from skulk.wire.message import Message
from skulk.wire.models import ModelDirError, card_from_dir, dir_name
from skulk.wire.reducer import apply
from skulk.wire.sockets import (RoutedDecodeError, make_socket, recv, recv_published, recv_routed,
                                send, send_routed)
from skulk.wire.state import (IndexedEvent, NodeGatheredInfo, NodeInfo, RunnerStatus,
                              RunnerStatusUpdated, State, StateHead)
from skulk.wire.topics import EVT_STATE

log = logging.getLogger("skulk.master")

REPLY_CACHE = 1024
NODE_INFO_INTERVAL_S = 10.0
RECONCILE_INTERVAL_S = 1.0
FAILED_EVENTS = frozenset({"exited", "stopped", "ready_timeout", "heartbeat_missed"})
"""Runner process ends: whatever the cause, that incarnation no longer serves."""
REQUEST_AGAIN_S = 2.0


def skulk_version() -> str:
    try:
        return version("skulk")
    except PackageNotFoundError:
        return "0+unknown"


class Master:
    def __init__(self, loop: ServiceLoop, ns: argparse.Namespace) -> None:
        self.loop = loop
        self.ns = ns
        self.node_id = ns.node_id
        self.session = uuid.uuid4().hex
        self.state = State(session=self.session, master_node_id=self.node_id)
        self.replies: OrderedDict[str, Message] = OrderedDict()
        run = loop.rt.args.run_dir
        self.router = make_socket(loop.ctx, zmq.ROUTER, bind=endpoints.master_local(run))
        self.sub = make_socket(loop.ctx, zmq.SUB, hwm=10000, connect=endpoints.bus_out(run),
                               subscribe=(b"evt.runner.", b"evt.supervisor."))
        self.sup = make_socket(loop.ctx, zmq.DEALER, connect=endpoints.supervisor_control(run))
        self.status_pending_since: float | None = None
        self.requested: dict[str, float] = {}

    # ---- events ---------------------------------------------------------------------------
    def emit(self, events: list[Message]) -> None:
        for event in events:
            indexed = IndexedEvent(idx=self.state.last_event_applied_idx + 1,
                                   session=self.session, event=event)  # type: ignore[arg-type]
            self.state = apply(self.state, indexed)
            self.loop.publish(EVT_STATE, indexed, suffix=event.TYPE)
        if events:
            self.loop.status_detail = f"leader, session {self.session[:8]}, idx {self.state.last_event_applied_idx}"

    def publish_head(self) -> None:
        self.loop.publish(EVT_STATE, StateHead(idx=self.state.last_event_applied_idx,
                                               session=self.session), suffix="head")

    def gather_node_info(self) -> None:
        mem = psutil.virtual_memory()
        self.emit([NodeGatheredInfo(info=NodeInfo(
            node_id=self.node_id, friendly_name=socket.gethostname(), skulk_version=skulk_version(),
            ram_total=int(mem.total), ram_available=int(mem.available), when=time.time()))])

    # ---- commands -------------------------------------------------------------------------
    def on_command(self, sock: zmq.Socket[Any]) -> None:
        for _ in range(100):
            try:
                envelope, cmd = recv_routed(sock, flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            except RoutedDecodeError as exc:
                send_routed(sock, exc.envelope, CommandRejected(command_id="", status=400,
                                                                message=f"bad command: {exc}"))
                continue
            command_id = getattr(cmd, "command_id", "")
            reply = self.replies.get(command_id) if command_id else None
            if reply is None:
                outcome = handle(self.state, cmd, lambda: uuid.uuid4().hex)
                self.emit(outcome.events)
                reply = outcome.reply
                if command_id and not reply.TYPE == "reply.state_snapshot":
                    self.replies[command_id] = reply
                    while len(self.replies) > REPLY_CACHE:
                        self.replies.popitem(last=False)
            send_routed(sock, envelope, reply)

    def place_at_boot(self, model_id: str) -> None:
        """`skulk run --place MODEL`: place it from the local models dir, or say why not."""
        try:
            card = card_from_dir(self.loop.rt.args.home / "models" / dir_name(model_id))
        except ModelDirError as exc:
            log.error("--place %s: %s", model_id, exc)
            return
        outcome = handle(self.state, PlaceInstance(command_id=uuid.uuid4().hex, card=card),
                         lambda: uuid.uuid4().hex)
        self.emit(outcome.events)
        log.info("--place %s: %s", model_id, getattr(outcome.reply, "message", outcome.reply))

    # ---- runner reports and lifecycle -----------------------------------------------------------
    def on_bus(self, sock: zmq.Socket[Any]) -> None:
        for _ in range(1000):
            try:
                _topic, msg = recv_published(sock, flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            except WireError as exc:
                log.warning("master: dropped bad bus frame: %s", exc)
                continue
            if isinstance(msg, RunnerReport):
                self.runner_status(msg.runner_id, msg.status)
            elif isinstance(msg, ChildLifecycle) and msg.supervisor == "runners" \
                    and msg.event in FAILED_EVENTS:
                cause = {"exited": msg.detail, "stopped": f"stopped by its supervisor, {msg.detail}"}.get(
                    msg.event, msg.event.replace("_", " "))
                self.runner_status(msg.child_id, RunnerStatus(
                    kind="RunnerFailed", node_id=self.node_id,
                    error_message=f"Terminated ({cause})"))

    def runner_status(self, runner_id: str, status: RunnerStatus) -> None:
        if self.state.runners.get(runner_id) != status:
            self.emit([RunnerStatusUpdated(runner_id=runner_id, status=status)])

    # ---- runner processes -----------------------------------------------------------------
    def ask_supervisor(self) -> None:
        now = time.monotonic()
        if self.status_pending_since is not None and now - self.status_pending_since < 5.0:
            return
        self.status_pending_since = now
        send(self.sup, AdminCommand(verb="status"), flags=zmq.NOBLOCK)

    def on_supervisor(self, sock: zmq.Socket[Any]) -> None:
        for _ in range(100):
            try:
                reply = recv(sock, flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            if not isinstance(reply, AdminReply):
                continue
            if not reply.ok:
                log.warning("supervisor refused a runner command: %s", reply.message)
            elif not reply.message:  # the answer to `status`
                self.status_pending_since = None
                self.reconcile({c.id for c in reply.children if c.supervisor == "runners"})

    def reconcile(self, running: set[str]) -> None:
        now = time.monotonic()
        start, stop = plan(self.state, self.node_id, running, self.loop.rt.args.home / "models",
                           self.ns.listen, self.ns.advertise)
        for s in start:
            if now - self.requested.get(s.runner_id, -1e9) < REQUEST_AGAIN_S:
                continue
            self.requested[s.runner_id] = now
            log.info("starting runner %s", s.runner_id)
            send(self.sup, AdminCommand(verb="start_child", supervisor="runners", target=s.runner_id,
                                        args=s.args), flags=zmq.NOBLOCK)
        for rid in stop:
            if now - self.requested.get(rid, -1e9) < REQUEST_AGAIN_S:
                continue
            self.requested[rid] = now
            log.info("stopping runner %s (no longer in state)", rid)
            send(self.sup, AdminCommand(verb="terminate_child", supervisor="runners", target=rid),
                 flags=zmq.NOBLOCK)


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="skulk.services.master")
    p.add_argument("--listen", default="0.0.0.0")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--node-id", required=True)
    p.add_argument("--place", action="append", default=[])
    ns = p.parse_args(argv)
    ns.advertise = "127.0.0.1" if ns.listen in ("0.0.0.0", "::", "") else ns.listen
    master = Master(loop, ns)
    master.gather_node_info()
    for model_id in ns.place:
        master.place_at_boot(model_id)
    loop.add_reader(master.router, master.on_command)
    loop.add_reader(master.sub, master.on_bus)
    loop.add_reader(master.sup, master.on_supervisor)
    loop.every(1.0, master.publish_head)
    loop.every(RECONCILE_INTERVAL_S, master.ask_supervisor, first_in=0.1)
    loop.every(NODE_INFO_INTERVAL_S, master.gather_node_info)
    loop.status_detail = f"leader, session {master.session[:8]}"
