"""The master's process: its sockets, its files and its clock around the core (`core.py`),
which decides everything. Each socket's messages go to the core with the clocks of the moment;
the effects it returns are carried out here, in order. Starting and stopping this node's
runners, and staging their models, is the worker's (services/worker/)."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import zmq

from skulk.cluster.catalog import NodeCatalogUpdated
from skulk.cluster.state import StateHead
from skulk.node.model_cards import scan
from skulk.node.role_args import MasterArgs
from skulk.node.trace_files import TracePart, now_us, write_part
from skulk.services.base import ServiceLoop
from skulk.services.master import config_sync, saved_state
from skulk.services.master.core import CoreSettings, MasterCore
from skulk.services.master.effects import (
    Answer,
    Channel,
    Effect,
    Instant,
    LinkPeers,
    Publish,
    SyncConfig,
    TellSupervisor,
    ToPeer,
    ToPeers,
    TraceRoute,
    Unexpected,
)
from skulk.services.master.peer_links import MAX_PEER_FRAME, PeerLinks
from skulk.services.master.restart import SupervisorLink
from skulk.wire import endpoints
from skulk.wire.commands import CommandRejected
from skulk.wire.errors import UnexpectedMessage, WireError
from skulk.wire.refusals import Refusals, peer_of
from skulk.wire.sockets import RoutedDecodeError, drain, make_socket, recv_published, recv_routed, send_routed
from skulk.wire.topics import EVT_CATALOG, EVT_CLUSTER, EVT_DOWNLOAD, EVT_RUNNER, EVT_STATE, EVT_SUPERVISOR

log = logging.getLogger("skulk.master")

REFUSALS = Refusals("master: cluster port", log)


def now() -> Instant:
    return Instant(time.monotonic(), time.time())


class MasterService:
    def __init__(self, loop: ServiceLoop, core: MasterCore, listen: str, port: int, config_file: str) -> None:
        self.loop, self.core = loop, core
        run = loop.rt.args.run_dir
        self.local = make_socket(loop.ctx, zmq.ROUTER, bind=endpoints.master_local(run))
        self.cluster = make_socket(loop.ctx, zmq.ROUTER, max_msg_bytes=MAX_PEER_FRAME, bind=f"tcp://{listen}:{port}")
        self.sub = make_socket(loop.ctx, zmq.SUB, hwm=10000, connect=endpoints.bus_out(run),
                               subscribe=tuple(t.prefix for t in (EVT_RUNNER, EVT_SUPERVISOR, EVT_CLUSTER, EVT_DOWNLOAD,
                                                                     EVT_CATALOG)))
        self.supervisor = SupervisorLink(make_socket(loop.ctx, zmq.DEALER, connect=endpoints.supervisor_control(run)))
        self.peers = PeerLinks(loop, core.s.node_id, self.on_peer)
        self.config_file = config_sync.ConfigFile(config_file, loop.rt.args.home)

    # -- inputs ------------------------------------------------------------------------------
    def on_local(self, sock: zmq.Socket[Any]) -> None:
        def refuse(exc: WireError) -> None:
            if isinstance(exc, RoutedDecodeError):
                send_routed(sock, exc.envelope,
                            CommandRejected(command_id="", status=400, message=f"bad command: {exc}"))

        for envelope, msg in drain(sock, recv_routed, limit=100, on_error=refuse):
            self.carry_out(self.core.on_local(envelope, msg, now()))

    def on_cluster(self, sock: zmq.Socket[Any]) -> None:
        def refuse(exc: WireError) -> None:
            REFUSALS.refuse(peer_of(exc.envelope) if isinstance(exc, RoutedDecodeError) else "", exc, time.monotonic())

        for envelope, msg in drain(sock, recv_routed, limit=200, on_error=refuse):
            self.carry_out(self.core.on_cluster(envelope, msg, now()))

    def on_peer(self, sock: zmq.Socket[Any]) -> None:
        for msg in drain(sock, limit=200):
            self.carry_out(self.core.on_peer(msg, now()))

    def on_bus(self, sock: zmq.Socket[Any]) -> None:
        for _topic, msg in drain(sock, recv_published):
            self.carry_out(self.core.on_bus(msg, now()))

    def tick(self) -> None:
        self.peers.tick()
        self.carry_out(self.core.tick(now()))

    def every_second(self) -> None:
        self.carry_out(self.core.every_second(now()))

    # -- effects -----------------------------------------------------------------------------
    def carry_out(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Publish):
                msg = effect.message
                self.loop.publish(EVT_STATE, msg, suffix="head" if isinstance(msg, StateHead) else msg.event.TYPE)
            elif isinstance(effect, ToPeers):
                self.peers.broadcast(effect.message)
            elif isinstance(effect, ToPeer):
                self.peers.send(effect.node_id, effect.message)
            elif isinstance(effect, LinkPeers):
                self.peers.sync(effect.members)
            elif isinstance(effect, Answer):
                self.answer(effect)
            elif isinstance(effect, SyncConfig):
                self.config_file.sync(effect.state)
            elif isinstance(effect, TellSupervisor):
                if not self.supervisor.tell(effect.verb):
                    self.core.supervisor_missed(effect.verb)
            elif isinstance(effect, TraceRoute):
                self.trace_route(effect)
            elif isinstance(effect, Unexpected):
                REFUSALS.refuse(peer_of(effect.envelope), UnexpectedMessage(f"ignored {effect.message_type}"),
                                time.monotonic())
        self.loop.status_detail = self.core.describe()

    def answer(self, effect: Answer) -> None:
        if effect.envelope is None:
            log.info("boot command: %s", getattr(effect.message, "message", effect.message.TYPE))
        else:
            send_routed(self.local if effect.channel is Channel.LOCAL else self.cluster, effect.envelope,
                        effect.message)

    def trace_route(self, effect: TraceRoute) -> None:
        """The router's span of a traced task (the leader's decision and its event), kept on
        this node under the task id."""
        routed = effect.routed
        part = TracePart(task_id=routed.task_id, part="router", node_id=self.core.s.node_id, friendly_name="",
                         model_id=effect.model_id)
        part.add("route", "router", effect.start_us, now_us(),
                 attrs={"instanceId": routed.instance_id, "runnerId": routed.runner_id, "load": effect.load})
        write_part(self.loop.rt.args.home, part)


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    args = MasterArgs.from_argv(argv)
    home = loop.rt.args.home
    saved_path = loop.rt.args.run_dir / "master-state.bin"
    settings = CoreSettings(node_id=args.node_id, election_timeout_s=args.election_timeout,
                            recreate_backoff_s=args.recreate_backoff, replace_lost_after_s=args.replace_lost_after,
                            drain_timeout_s=args.drain_timeout,
                            place=args.place, tracing_enabled=args.tracing_enabled, incarnation=uuid.uuid4().hex[:6])
    own = NodeCatalogUpdated(node_id=args.node_id, cards=tuple(scan(home / "models")[0].values()))
    core = MasterCore(settings, lambda: uuid.uuid4().hex, saved=saved_state.load(saved_path, args.node_id),
                      own_catalog=own)
    service = MasterService(loop, core, args.listen, args.port, args.config_file)

    def save() -> None:
        if (state := core.to_save()) is not None:
            saved_state.save(saved_path, state)

    loop.on_stop(save)
    loop.add_reader(service.local, service.on_local)
    loop.add_reader(service.cluster, service.on_cluster)
    loop.add_reader(service.sub, service.on_bus)
    loop.add_reader(service.supervisor.sup, service.supervisor.drain)
    service.carry_out(core.boot(now()))
    loop.every(0.1, service.tick)
    loop.every(1.0, service.every_second)
