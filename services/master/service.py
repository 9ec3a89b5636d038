"""The master's loop (every node runs one): election; the leader indexes events and pushes
them to followers, which apply them in order and republish them locally; commands from any
API reach the leader (held and re-forwarded across elections, 503 after a deadline); runner
facts go to the leader. Tokens never pass through here. See docs/architecture.md."""

from __future__ import annotations

import argparse
import contextlib
import logging
import time
import uuid
from typing import Any

import zmq

from skulk.services.base import ServiceLoop
from skulk.services.master.commands import describe, handle, lost_changes
from skulk.services.master.desk import CommandDesk
from skulk.services.master.election import BecomeLeader, Broadcast, Election, Follow
from skulk.services.master.failures import RecoveryPolicy, process_ended
from skulk.services.master.loads import RunnerLoads
from skulk.services.master.peer_links import MAX_PEER_FRAME, PeerLinks
from skulk.services.master import config_sync, saved_state
from skulk.services.master.recovery import next_recreation, runner_failed
from skulk.services.master.replication import SessionLog, seed
from skulk.services.master.roster import Roster
from skulk.services.master.runner_keeper import RunnerKeeper
from skulk.wire import endpoints
from skulk.wire.cluster import (Campaign, EventBatch, ForwardCommand, ForwardedReply, LeaderAnnounce,
                                LocalEvent, Membership, ReplayRequest, RunnerLoad, SnapshotPush)
from skulk.wire.commands import (CommandAccepted, CommandRejected, RejectReason, RestartNode,
                                 SnapshotRequest, StateSnapshot)
from skulk.wire.errors import WireError
from skulk.wire.events import ChildLifecycle, RunnerReport
from skulk.wire.message import Message
from skulk.wire.reducer import apply
from skulk.wire.sockets import (RoutedDecodeError, drain, make_socket, recv_published, recv_routed,
                                send, send_routed)
from skulk.wire.state import (RESTART_GRACE_S, IndexedEvent, NodeRestarting, RunnerStatus,
                              RunnerStatusUpdated, State, StateHead)
from skulk.wire.topics import EVT_STATE

log = logging.getLogger("skulk.master")
ANNOUNCE_INTERVAL_S = 0.5


def _rejected(exc: WireError) -> None:
    log.warning("master: rejected a bad frame on the cluster port: %s", exc)


class Master:
    def __init__(self, loop: ServiceLoop, ns: argparse.Namespace) -> None:
        self.loop, self.ns, self.node_id = loop, ns, ns.node_id
        self.election = Election(ns.node_id, timeout_s=ns.election_timeout, incarnation=uuid.uuid4().hex[:6])
        self.state = State()
        self.log: SessionLog | None = None
        self.roster = Roster()
        self.peers = PeerLinks(loop, ns.node_id, self.on_peer)
        self.desk = CommandDesk()
        self.local_runners: dict[str, RunnerStatus] = {}
        self.loads = RunnerLoads()
        self.boot_places: list[str] = list(ns.place)
        self.leaving = False  # our node is restarting in place (this process is the old image)
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
                               subscribe=(b"evt.runner.", b"evt.supervisor.", b"evt.cluster."))
        self.keeper = RunnerKeeper(
            make_socket(loop.ctx, zmq.DEALER, connect=endpoints.supervisor_control(run)),
            ns.node_id, loop.rt.args.home / "models", ns.listen, ns.advertise, lambda: self.state)

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
                self.state = seed(self.state, action.session, self.node_id)
                self.log = SessionLog(action.session)
                self.publish_head()
                self.to_peers(self.election.announce(-1))
                self.refresh_nodes(force=True)
                for rid, status in self.local_runners.items():
                    self.runner_fact(rid, status)
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
            batch.append(indexed)
        if batch:
            self.to_peers(EventBatch(session=self.state.session, events=tuple(batch)))
            self.keeper.poke(batch)
            self.config_file.sync(self.state)

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
        self.keeper.poke(batch.events)
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

    def publish_head(self) -> None:
        self.loop.publish(EVT_STATE, StateHead(idx=self.state.last_event_applied_idx,
                                               session=self.state.session), suffix="head")

    def command(self, envelope: list[bytes] | None, cmd: Message) -> None:
        if isinstance(cmd, RestartNode):
            self.restart_node(envelope, cmd)
            return
        if isinstance(cmd, SnapshotRequest):
            if envelope is not None:
                send_routed(self.local, envelope, StateSnapshot(command_id=cmd.command_id, state=self.state))
            return
        if self.election.is_leader:
            self.answer(envelope, self.execute(cmd))
            return
        command_id = getattr(cmd, "command_id", "")
        self.desk.hold(command_id, envelope, cmd, time.monotonic())
        self.forward(command_id)

    def execute(self, cmd: Message) -> Message:
        command_id = getattr(cmd, "command_id", "")
        reply = self.desk.cached(command_id)
        if reply is None:
            outcome = handle(self.state, cmd, lambda: uuid.uuid4().hex, self.loads.loads)
            self.emit(outcome.events)
            self.election.commands += bool(outcome.events)
            reply = outcome.reply
            self.desk.remember(command_id, reply)
        return reply

    def answer(self, envelope: list[bytes] | None, reply: Message) -> None:
        if envelope is not None:
            send_routed(self.local, envelope, reply)
        else:
            log.info("boot command: %s", getattr(reply, "message", reply.TYPE))

    def forward(self, command_id: str) -> None:
        sock, held = self.leader_sock(), self.desk.held.get(command_id)
        if sock is not None and held is not None:
            send(sock, ForwardCommand(node_id=self.node_id, command=held.command),  # type: ignore[arg-type]
                 flags=zmq.NOBLOCK)

    def flush_pending(self) -> None:
        for command_id in list(self.desk.held):
            if self.election.is_leader:
                held = self.desk.held.pop(command_id)
                self.answer(held.envelope, self.execute(held.command))
            else:
                self.forward(command_id)

    def on_local(self, sock: zmq.Socket[Any]) -> None:
        def refuse(exc: WireError) -> None:
            if isinstance(exc, RoutedDecodeError):
                send_routed(sock, exc.envelope, CommandRejected(command_id="", status=400,
                                                                message=f"bad command: {exc}"))

        for envelope, cmd in drain(sock, recv_routed, limit=100, on_error=refuse):
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
                log.warning("master: ignored %s on the cluster port", msg.TYPE)

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

    def on_bus(self, sock: zmq.Socket[Any]) -> None:
        for _topic, msg in drain(sock, recv_published):
            if isinstance(msg, RunnerReport):
                self.local_runners[msg.runner_id] = msg.status
                self.runner_fact(msg.runner_id, msg.status)
                if (load := self.loads.on_report(msg, time.monotonic())) and (to := self.leader_sock()):
                    with contextlib.suppress(zmq.Again):  # routing's; resent anyway
                        send(to, load, flags=zmq.NOBLOCK)
            elif isinstance(msg, ChildLifecycle) and (status := process_ended(msg, self.node_id)):
                self.local_runners[msg.child_id] = status
                self.runner_fact(msg.child_id, status)
            elif isinstance(msg, ChildLifecycle) and msg.child_id == "node" and msg.event == "restarting":
                self.leaving = True  # kept by the leader, with its instances, while gossip does not hear it
                self.local_fact(NodeRestarting(node_id=self.node_id, until=time.time() + RESTART_GRACE_S))
            elif isinstance(msg, Membership) and msg.node_id == self.node_id:
                self.membership(msg)

    def runner_fact(self, runner_id: str, status: RunnerStatus) -> None:
        if self.state.runners.get(runner_id) != status:
            self.local_fact(RunnerStatusUpdated(runner_id=runner_id, status=status))

    def local_fact(self, event: RunnerStatusUpdated | NodeRestarting) -> None:
        """A node's own fact (runner status, in-place restart): indexed if we lead, else a `LocalEvent`."""
        if not self.election.is_leader:
            if (sock := self.leader_sock()) is not None:
                send(sock, LocalEvent(node_id=self.node_id, event=event), flags=zmq.NOBLOCK)
            return
        previous = self.state.runners.get(event.runner_id) if isinstance(event, RunnerStatusUpdated) else None
        self.emit([event])
        if isinstance(event, RunnerStatusUpdated) and event.status.kind == "RunnerFailed" \
                and (previous is None or previous.kind != "RunnerFailed"):  # delete, re-create later
            self.emit(runner_failed(self.state, event.runner_id, event.status, time.time(),
                                    self.policy))

    def recreate_due(self) -> None:
        """Leader: make the re-creations that are due (whoever led when their runner failed)."""
        while self.election.is_leader and (events := next_recreation(
                self.state, time.time(), lambda: uuid.uuid4().hex, self.policy)):
            self.emit(events)
            self.election.commands += 1

    def membership(self, msg: Membership) -> None:
        members = {m.info.node_id: m for m in msg.members}
        self.peers.sync(members)
        self.roster.members = members
        self.act(self.election.on_membership(frozenset(members), time.monotonic(),
                                             self.state.last_event_applied_idx))
        self.refresh_nodes()
        if self.boot_places and self.node_id in members:
            for cmd in saved_state.boot_placements(self.state, self.loop.rt.args.home / "models", self.boot_places):
                self.command(None, cmd)
            self.boot_places = []

    def refresh_nodes(self, force: bool = False) -> None:
        if self.election.is_leader and self.node_id in self.roster.members:  # else: nobody judged yet
            self.emit(self.roster.events(self.state, time.monotonic(), time.time(), force))

    def restart_node(self, envelope: list[bytes] | None, cmd: RestartNode) -> None:
        """Restart this node (its own supervisor), or pass the request to the target's master."""
        reply: Message = CommandAccepted(command_id=cmd.command_id, message="restart_sent")
        if cmd.node_id == self.node_id:
            reply = self.keeper.restart_node(cmd.command_id)
        elif not self.peers.send(cmd.node_id, cmd):
            reply = CommandRejected(command_id=cmd.command_id, status=404, message=f"Unknown node {cmd.node_id}",
                                    reason=RejectReason.UNKNOWN_NODE)
        if envelope is not None:
            send_routed(self.local, envelope, reply)

    def tick(self) -> None:
        now = time.monotonic()
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

    def back_from_restart(self) -> None:
        """The new image clears its node's restart mark (routing and the runner plan wait for it)."""
        if self.node_id in self.state.restarting and not self.leaving:
            self.local_fact(NodeRestarting(node_id=self.node_id, until=0.0))

    def every_second(self) -> None:
        self.publish_head()
        self.loads.forget(set(self.state.runners))
        self.refresh_nodes()
        self.back_from_restart()
        if not self.election.is_leader:  # re-send local facts the leader has not indexed yet
            for rid, status in self.local_runners.items():
                self.runner_fact(rid, status)


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="skulk.services.master")
    p.add_argument("--listen", default="0.0.0.0")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--node-id", required=True)
    p.add_argument("--election-timeout", type=float, default=3.0)
    p.add_argument("--recreate-backoff", type=float, default=0.5)
    p.add_argument("--place", action="append", default=[])
    p.add_argument("--config-file", default="")  # the node's skulk.yaml (kept equal to the cluster's)
    ns = p.parse_args(argv)
    ns.advertise = "127.0.0.1" if ns.listen in ("0.0.0.0", "::", "") else ns.listen
    master = Master(loop, ns)
    master.state = saved_state.load(master.saved_path, master.node_id) or master.state
    loop.on_stop(lambda: saved_state.save(master.saved_path, master.state) if master.election.is_leader else None)
    loop.add_reader(master.local, master.on_local)
    loop.add_reader(master.cluster, master.on_cluster)
    loop.add_reader(master.sub, master.on_bus)
    loop.add_reader(master.keeper.sup, master.keeper.on_reply)
    master.act(master.election.boot(time.monotonic()))
    master.back_from_restart()  # a lone node's saved state carries the mark of its restart
    loop.every(0.1, master.tick)
    loop.every(1.0, master.every_second)
    loop.every(1.0, master.keeper.ask, first_in=0.1)
