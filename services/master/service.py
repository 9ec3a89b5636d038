"""The master's loop (every node runs one): election; the leader indexes events and pushes
them to followers, which apply them in order and republish them locally; commands from any
API reach the leader (held and re-forwarded across elections, 503 after a deadline); runner
facts go to the leader. Tokens never pass through here. See docs/architecture.md.

This file owns the sockets and the loop; the leader's work is in `leading.py`, the follower's
in `following.py`, this node's own facts in `local_facts.py` (mixins of `Master`). Starting and
stopping this node's runners, and staging their models, is the worker's (services/worker/)."""

from __future__ import annotations

import argparse
import logging
import time
import uuid
from typing import Any

import zmq

from skulk.services.base import ServiceLoop
from skulk.services.master.desk import CommandDesk
from skulk.services.master.drain import Pending
from skulk.services.master.election import BOOT_WAIT_S, BecomeLeader, Broadcast, Election, Follow
from skulk.services.master.failures import RecoveryPolicy
from skulk.services.master.following import Following
from skulk.services.master.leading import Leading
from skulk.services.master.local_facts import LocalFacts
from skulk.services.master.loads import RunnerLoads
from skulk.services.master.peer_links import MAX_PEER_FRAME, PeerLinks
from skulk.services.master import config_sync, saved_state
from skulk.services.master.replication import SessionLog, seed
from skulk.services.master.roster import Roster
from skulk.services.master.restart import NodeRestart
from skulk.wire import endpoints
from skulk.wire.cluster import (Campaign, EventBatch, ForwardCommand, ForwardedReply, LeaderAnnounce,
                                LocalEvent, Membership, ReplayRequest, RunnerLoad, SnapshotPush)
from skulk.wire.commands import (CommandAccepted, CommandRejected, RejectReason, RestartNode,
                                 SnapshotRequest, StateSnapshot)
from skulk.wire.errors import UnexpectedMessage, WireError
from skulk.wire.message import Message
from skulk.wire.catalog import NodeCatalogUpdated, catalog_key
from skulk.wire.model_cards import scan
from skulk.wire.staging import DownloadProgress, NodeDownloadUpdated
from skulk.wire.refusals import Refusals, peer_of
from skulk.wire.sockets import RoutedDecodeError, drain, make_socket, recv_routed, send_routed
from skulk.wire.state import NodeRestarting, RunnerStatus, RunnerStatusUpdated, State, StateHead
from skulk.wire.topics import EVT_STATE

log = logging.getLogger("skulk.master")
ANNOUNCE_INTERVAL_S = 0.5


REFUSALS = Refusals("master: cluster port", log)


def _rejected(exc: WireError) -> None:
    REFUSALS.refuse(peer_of(exc.envelope) if isinstance(exc, RoutedDecodeError) else "", exc, time.monotonic())


class Master(Leading, Following, LocalFacts):
    def __init__(self, loop: ServiceLoop, ns: argparse.Namespace) -> None:
        self.loop, self.ns, self.node_id = loop, ns, ns.node_id
        self.election = Election(ns.node_id, timeout_s=ns.election_timeout, incarnation=uuid.uuid4().hex[:6])
        self.state = State()
        self.log: SessionLog | None = None
        self.published = SessionLog("")  # what this master put on its node's bus, leader or not
        self.roster = Roster()
        self.peers = PeerLinks(loop, ns.node_id, self.on_peer)
        self.desk = CommandDesk()
        self.local_runners: dict[str, RunnerStatus] = {}
        self.loads = RunnerLoads()
        self.boot_places: list[str] = list(ns.place)
        self.leaving = False  # our node is restarting in place (this process is the old image)
        self.leaving_until = 0.0  # the mark's `until` asked for (wall clock)
        self.drain_waits: Pending | None = None  # what the restart's drain waits for (`drain.py`)
        self.drain_told = False  # the supervisor knows the drain is over
        self.policy = RecoveryPolicy(backoff_s=ns.recreate_backoff)
        self.deposed: State | None = None  # our state as leader, until the winner's arrives
        self.saved_path = loop.rt.args.run_dir / "master-state.bin"
        self.config_file = config_sync.ConfigFile(ns.config_file, loop.rt.args.home)
        self.announce_due = 0.0
        run = loop.rt.args.run_dir
        self.local = make_socket(loop.ctx, zmq.ROUTER, bind=endpoints.master_local(run))
        self.cluster = make_socket(loop.ctx, zmq.ROUTER, max_msg_bytes=MAX_PEER_FRAME,
                                   bind=f"tcp://{ns.listen}:{ns.port}")
        self.sub = make_socket(loop.ctx, zmq.SUB, hwm=10000, connect=endpoints.bus_out(run),
                               subscribe=(b"evt.runner.", b"evt.supervisor.", b"evt.cluster.", b"evt.download.",
                                          b"evt.catalog."))
        self.restarter = NodeRestart(make_socket(loop.ctx, zmq.DEALER, connect=endpoints.supervisor_control(run)))
        self.local_downloads: dict[str, DownloadProgress] = {}  # this node's copies (the worker's reports)
        self.local_catalog: dict[str, NodeCatalogUpdated] = {}  # this node's models (the store role's reports)
        # Known at start, as the store role's first report (sent before this process listened)
        # will say: indexed as soon as this node leads, so `--place` need not wait for the next.
        own = NodeCatalogUpdated(node_id=self.node_id, cards=tuple(scan(loop.rt.args.home / "models")[0].values()))
        self.local_catalog[catalog_key(own)] = own

    def act(self, actions: list[Any]) -> None:
        if actions and self.desk.held:  # a session boundary: what was in flight cannot carry over
            for envelope, rejected in self.desk.session_changed():
                self.answer(envelope, rejected)
        for action in actions:
            if isinstance(action, Broadcast):
                log.info("campaigning for leader (clock %d, %d member(s), last index %d)",
                         action.msg.clock, len(self.roster.members), action.msg.last_idx)
                self.to_peers(action.msg)
            elif isinstance(action, BecomeLeader):
                log.info("elected leader: session %s (%d member(s))", action.session, len(self.roster.members))
                self.state = seed(self.state, action.session, self.node_id, bool(self.ns.tracing_enabled))
                self.log = SessionLog(action.session)
                self.publish_head()
                self.to_peers(self.election.announce(-1))
                self.refresh_nodes(force=True)
                for rid, status in self.local_runners.items():
                    self.runner_fact(rid, status)
                for entry in self.local_catalog.values():
                    self.catalog_fact(entry)
                self.flush_pending()
            elif isinstance(action, Follow):
                log.info("following leader %s (session %s)", action.leader, action.session)
                self.deposed = self.state if self.log is not None else None  # we led until now
                self.log = None
                self.ask_replay(-1)
        self.loop.status_detail = (f"{'leader' if self.election.is_leader else 'follower'} "
                                   f"of {self.election.leader or '-'} session {self.state.session[:12]} "
                                   f"idx {self.state.last_event_applied_idx}")

    def leader_sock(self) -> zmq.Socket[Any] | None:
        leader = self.election.leader
        return self.peers.get(leader) if leader and leader != self.node_id and self.election.session else None

    def to_peers(self, msg: Message) -> None:
        self.peers.broadcast(msg)

    def publish_head(self) -> None:
        if not self.state.session:  # booting or campaigning with nothing yet: the replicas keep theirs
            return
        self.loop.publish(EVT_STATE, StateHead(idx=self.state.last_event_applied_idx,
                                               session=self.state.session), suffix="head")

    def command(self, envelope: list[bytes] | None, cmd: Message) -> None:
        if isinstance(cmd, RestartNode):
            self.restart_node(envelope, cmd)
            return
        if isinstance(cmd, SnapshotRequest):
            if envelope is not None and self.state.session:  # no session yet: the replica asks again
                send_routed(self.local, envelope, StateSnapshot(command_id=cmd.command_id, state=self.state))
            return
        if self.election.is_leader:
            self.answer(envelope, self.execute(cmd))
            return
        command_id = getattr(cmd, "command_id", "")
        self.desk.hold(command_id, envelope, cmd, time.monotonic())
        self.forward(command_id)

    def answer(self, envelope: list[bytes] | None, reply: Message) -> None:
        if envelope is not None:
            send_routed(self.local, envelope, reply)
        else:
            log.info("boot command: %s", getattr(reply, "message", reply.TYPE))

    def on_local(self, sock: zmq.Socket[Any]) -> None:
        def refuse(exc: WireError) -> None:
            if isinstance(exc, RoutedDecodeError):
                send_routed(sock, exc.envelope, CommandRejected(command_id="", status=400,
                                                                message=f"bad command: {exc}"))

        for envelope, cmd in drain(sock, recv_routed, limit=100, on_error=refuse):
            if isinstance(cmd, ReplayRequest):  # the event log, behind on the bus
                send_routed(sock, envelope, EventBatch(session=cmd.session,
                                                       events=self.published.after(cmd.session, cmd.since)))
            else:
                self.command(envelope, cmd)

    def on_cluster(self, sock: zmq.Socket[Any]) -> None:
        now = time.monotonic()
        for envelope, msg in drain(sock, recv_routed, limit=200, on_error=_rejected):
            if isinstance(msg, Campaign):
                self.act(self.election.on_campaign(msg, now, self.state.last_event_applied_idx))
            elif isinstance(msg, LeaderAnnounce):
                self.act(self.election.on_announce(msg, now, self.state.last_event_applied_idx))
                if self.election.leader == msg.node_id and msg.session == self.election.session:
                    behind = msg.session != self.state.session or msg.head > self.state.last_event_applied_idx
                    if behind:  # e.g. the first replay request went out before we could reach it
                        self.ask_replay(self.state.last_event_applied_idx if msg.session == self.state.session else -1)
            elif isinstance(msg, EventBatch):
                self.follow(msg)
            elif isinstance(msg, ReplayRequest) and self.election.is_leader and self.log is not None:
                self.election.follower(msg.node_id)
                events = self.log.since(msg.since) if msg.session == self.state.session else None
                reply: Message = (EventBatch(session=self.state.session, events=tuple(events))
                                  if events is not None else SnapshotPush(state=self.state))
                send_routed(sock, envelope, reply)
            elif isinstance(msg, RunnerLoad):
                self.loads.record(msg.runner_id, msg.active, msg.waiting)
            elif isinstance(msg, LocalEvent) and self.election.is_leader:
                if isinstance(msg.event, RunnerStatusUpdated):
                    self.runner_fact(msg.event.runner_id, msg.event.status)
                elif isinstance(msg.event, NodeDownloadUpdated | NodeCatalogUpdated) \
                        and msg.event.node_id == msg.node_id and not self.indexed(msg.event):
                    self.local_fact(msg.event)
                elif isinstance(msg.event, NodeRestarting) and msg.event.node_id == msg.node_id:
                    self.local_fact(msg.event)
            elif isinstance(msg, RestartNode) and msg.node_id == self.node_id:
                self.restart_node(None, msg)
            elif isinstance(msg, ForwardCommand):  # a follower's API command, for us as leader
                reply = (self.execute(msg.command) if self.election.is_leader else CommandRejected(
                    command_id=getattr(msg.command, "command_id", ""), status=503, reason=RejectReason.NOT_LEADER,
                    message="not the leader (election in progress); please retry"))
                send_routed(sock, envelope, ForwardedReply(reply=reply))  # type: ignore[arg-type]
            else:
                REFUSALS.refuse(peer_of(envelope), UnexpectedMessage(f"ignored {msg.TYPE}"), now)

    def on_peer(self, sock: zmq.Socket[Any]) -> None:
        for msg in drain(sock, limit=200):
            if isinstance(msg, ForwardedReply):
                held = self.desk.held.get(getattr(msg.reply, "command_id", ""))
                not_leader = isinstance(msg.reply, CommandRejected) and msg.reply.reason == RejectReason.NOT_LEADER
                if held is not None and not not_leader:  # else: wait for the next leader
                    del self.desk.held[msg.reply.command_id]  # type: ignore[union-attr]
                    self.answer(held.envelope, msg.reply)
            elif isinstance(msg, EventBatch):
                self.follow(msg)
            elif isinstance(msg, SnapshotPush):
                self.adopt(msg.state)

    def membership(self, msg: Membership) -> None:
        members = {m.info.node_id: m for m in msg.members}
        self.peers.sync(members)
        self.roster.members = members
        self.act(self.election.on_membership(frozenset(members), time.monotonic(),
                                             self.state.last_event_applied_idx))
        self.refresh_nodes()
        self.place_at_boot()

    def place_at_boot(self) -> None:
        """`skulk run --place`: once this node is a member and the catalog has its models."""
        if self.boot_places and self.node_id in self.roster.members:
            made, self.boot_places = saved_state.boot_placements(self.state, self.node_id, self.boot_places)
            for cmd in made:
                self.command(None, cmd)

    def restart_node(self, envelope: list[bytes] | None, cmd: RestartNode) -> None:
        """Restart this node (its own supervisor), or pass the request to the target's master."""
        reply: Message = CommandAccepted(command_id=cmd.command_id, message="restart_sent")
        if cmd.node_id == self.node_id:
            reply = self.restarter.restart_node(cmd.command_id)
        elif not self.peers.send(cmd.node_id, cmd):
            reply = CommandRejected(command_id=cmd.command_id, status=404, message=f"Unknown node {cmd.node_id}",
                                    reason=RejectReason.UNKNOWN_NODE)
        if envelope is not None:
            send_routed(self.local, envelope, reply)

    def tick(self) -> None:
        now = time.monotonic()
        self.peers.tick()
        self.act(self.election.tick(now, self.state.last_event_applied_idx))
        if self.election.is_leader:
            if now >= self.announce_due:
                self.announce_due = now + ANNOUNCE_INTERVAL_S
                self.to_peers(self.election.announce(self.state.last_event_applied_idx))
        elif self.election.session and now >= self.announce_due:
            # Resend pending commands at the announce pace until answered (the leader dedupes).
            self.announce_due = now + ANNOUNCE_INTERVAL_S
            for command_id in list(self.desk.held):
                self.forward(command_id)
        for envelope, rejected in self.desk.expired(now):
            self.answer(envelope, rejected)
        self.recreate_due()
        self.check_drain()

    def every_second(self) -> None:
        self.publish_head()
        self.place_at_boot()
        self.loads.forget(set(self.state.runners))
        self.refresh_nodes()
        self.back_from_restart()
        self.mark_again()
        live = {r for i in self.state.instances.values() for r in i.runner_to_shard}
        self.local_runners = {r: st for r, st in self.local_runners.items() if r in live}  # gone with their instance
        if not self.election.is_leader:  # re-send local facts the leader has not indexed yet
            for rid, status in self.local_runners.items():
                self.runner_fact(rid, status)
            for progress in self.local_downloads.values():
                self.download_fact(progress)
            for entry in self.local_catalog.values():
                self.catalog_fact(entry)


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="skulk.services.master")
    p.add_argument("--listen", default="0.0.0.0")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--node-id", required=True)
    p.add_argument("--election-timeout", type=float, default=3.0)
    p.add_argument("--recreate-backoff", type=float, default=0.5)
    p.add_argument("--drain-timeout", type=float, default=0.0)  # node.drain_timeout_s (0: no drain)
    p.add_argument("--place", action="append", default=[])
    p.add_argument("--tracing-enabled", type=int, choices=(0, 1), default=0)  # a new cluster's first switch
    p.add_argument("--config-file", default="")  # the node's skulk.yaml (kept equal to the cluster's)
    ns = p.parse_args(argv)
    ns.advertise = "127.0.0.1" if ns.listen in ("0.0.0.0", "::", "") else ns.listen
    master = Master(loop, ns)
    master.state = saved_state.load(master.saved_path, master.node_id) or master.state
    loop.on_stop(lambda: saved_state.save(master.saved_path, master.state) if master.election.is_leader else None)
    loop.add_reader(master.local, master.on_local)
    loop.add_reader(master.cluster, master.on_cluster)
    loop.add_reader(master.sub, master.on_bus)
    loop.add_reader(master.restarter.sup, master.restarter.drain)
    master.act(master.election.boot(time.monotonic(), wait_s=BOOT_WAIT_S))
    master.back_from_restart()  # a lone node's saved state carries the mark of its restart
    loop.every(0.1, master.tick)
    loop.every(1.0, master.every_second)
