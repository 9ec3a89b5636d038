"""The master as a core without I/O (every node runs one): election; the leader indexes events
and pushes them to followers, which apply them in order and republish them locally; commands
from any API reach the leader (held and re-forwarded across elections, 503 after a deadline);
this node's own facts go to the leader. Tokens never pass through here.

Each input (`on_local`, `on_cluster`, `on_peer`, `on_bus`, `tick`, `every_second`) takes the
message and the clocks (`Instant`) and returns the effects to carry out, in order
(`effects.py`); `service.py` owns the sockets, the files and the clock. The leader's work is in
`leader.py`, the follower's in `follower.py`, this node's own facts in `own_node.py`; they share
`Shared`, declared once. See docs/architecture.md."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from skulk.cluster.catalog import NodeCatalogUpdated, catalog_key
from skulk.cluster.state import NodeRestarting, RunnerStatusUpdated, State
from skulk.services.master import saved_state
from skulk.services.master.effects import (
    Answer,
    Channel,
    Effect,
    Instant,
    LinkPeers,
    ToPeer,
    Unexpected,
)
from skulk.services.master.election import BOOT_WAIT_S, Action, BecomeLeader, Broadcast, Election, Follow
from skulk.services.master.failures import RecoveryPolicy
from skulk.services.master.follower import Follower
from skulk.services.master.leader import Leader
from skulk.services.master.own_node import OwnNode, Restart
from skulk.services.master.shared import Shared
from skulk.wire.cluster import (
    Campaign,
    EventBatch,
    ForwardableCommand,
    ForwardCommand,
    ForwardedReply,
    LeaderAnnounce,
    LocalEvent,
    Membership,
    ReplayRequest,
    RunnerLoad,
    SnapshotPush,
)
from skulk.wire.commands import (
    CommandAccepted,
    CommandRejected,
    RejectReason,
    Reply,
    RestartNode,
    SnapshotRequest,
    StateSnapshot,
)
from skulk.wire.control import AdminVerb
from skulk.wire.message import Command, Message
from skulk.wire.staging import NodeDownloadUpdated

log = logging.getLogger("skulk.master")

ANNOUNCE_INTERVAL_S = 0.5


@dataclass(frozen=True, slots=True)
class CoreSettings:
    node_id: str
    election_timeout_s: float = 3.0
    recreate_backoff_s: float = 0.5
    replace_lost_after_s: float = 2.0  # 0: a lost node's instances are not placed again
    drain_timeout_s: float = 0.0  # node.drain_timeout_s (0: a restart does not drain)
    place: tuple[str, ...] = ()  # `skulk run --place`
    tracing_enabled: bool = False  # a new cluster's first switch
    incarnation: str = ""  # part of every session id this process opens (`Election.incarnation`)


class MasterCore:
    def __init__(self, settings: CoreSettings, new_id: Callable[[], str], saved: State | None = None,
                 own_catalog: NodeCatalogUpdated | None = None) -> None:
        """`saved`: the state kept across an in-place restart; `own_catalog`: this node's models
        as its store role's first report will say (indexed as soon as this node leads, so
        `--place` need not wait for the next report)."""
        self.settings = settings
        election = Election(settings.node_id, timeout_s=settings.election_timeout_s,
                            incarnation=settings.incarnation)
        self.s = Shared(settings.node_id, election, new_id, state=saved or State())
        self.leader = Leader(self.s, RecoveryPolicy(backoff_s=settings.recreate_backoff_s,
                                                          replace_lost_after_s=settings.replace_lost_after_s))
        self.follower = Follower(self.s)
        self.own = OwnNode(self.s, self.leader, settings.drain_timeout_s)
        if own_catalog is not None:
            self.own.catalog[catalog_key(own_catalog)] = own_catalog
        self.boot_places = list(settings.place)
        self.announce_due = 0.0

    @property
    def state(self) -> State:
        return self.s.state

    @property
    def election(self) -> Election:
        return self.s.election

    # -- inputs ----------------------------------------------------------------------------
    def boot(self, now: Instant, wait_s: float = BOOT_WAIT_S) -> list[Effect]:
        self._begin(now)
        self._act(self.election.boot(now.mono, wait_s=wait_s))
        self.own.back_from_restart()  # a lone node's saved state carries the mark of its restart
        return self._end()

    def on_local(self, envelope: list[bytes], msg: Message, now: Instant) -> list[Effect]:
        """From this node's own processes: a command (its API) or a replay (its event log)."""
        self._begin(now)
        if isinstance(msg, ReplayRequest):  # the event log, behind on the bus
            events = self.s.published.after(msg.session, msg.since)
            self.s.out.append(Answer(Channel.LOCAL, envelope, EventBatch(session=msg.session, events=events)))
        elif isinstance(msg, Command):
            self.command(envelope, msg)
        else:
            self._answer(envelope, CommandRejected(command_id="", status=400, message=f"{msg.TYPE} is not a command"))
        return self._end()

    def on_cluster(self, envelope: list[bytes], msg: Message, now: Instant) -> list[Effect]:
        """From another node's master, on this master's cluster port."""
        self._begin(now)
        s, last = self.s, self.s.state.last_event_applied_idx
        if isinstance(msg, Campaign):
            self._act(s.election.on_campaign(msg, now.mono, last))
        elif isinstance(msg, LeaderAnnounce):
            self._announced(msg)
        elif isinstance(msg, EventBatch):
            self.follower.follow(msg)
        elif isinstance(msg, ReplayRequest) and s.leading:
            self.leader.replay(envelope, msg)
        elif isinstance(msg, RunnerLoad):
            s.loads.record(msg.runner_id, msg.active, msg.waiting)
        elif isinstance(msg, LocalEvent) and s.leading:
            self._their_fact(msg)
        elif isinstance(msg, RestartNode) and msg.node_id == s.node_id:
            self._restart_node(None, msg)
        elif isinstance(msg, ForwardCommand):  # a follower's API command, for us as leader
            reply = self.leader.execute(msg.command) if s.leading else CommandRejected(
                command_id=msg.command.command_id, status=503, reason=RejectReason.NOT_LEADER,
                message="not the leader (election in progress); please retry")
            s.out.append(Answer(Channel.CLUSTER, envelope, ForwardedReply(reply=reply)))
        else:
            s.out.append(Unexpected(envelope, msg.TYPE))
        return self._end()

    def on_peer(self, msg: Message, now: Instant) -> list[Effect]:
        """On a link this master dialled to another member's master."""
        self._begin(now)
        if isinstance(msg, ForwardedReply):
            held = self.s.desk.held.get(msg.reply.command_id)
            not_leader = isinstance(msg.reply, CommandRejected) and msg.reply.reason == RejectReason.NOT_LEADER
            if held is not None and not not_leader:  # else: wait for the next leader
                del self.s.desk.held[msg.reply.command_id]
                self._answer(held.envelope, msg.reply)
        elif isinstance(msg, EventBatch):
            self.follower.follow(msg)
        elif isinstance(msg, SnapshotPush):
            self._adopt(msg.state)
        return self._end()

    def on_bus(self, msg: Message, now: Instant) -> list[Effect]:
        """A report on this node's bus: gossip's membership, the runners', the worker's, the store's."""
        self._begin(now)
        if isinstance(msg, Membership):
            if msg.node_id == self.s.node_id:
                self._membership(msg)
        else:
            self.own.on_bus(msg)
        return self._end()

    def tick(self, now: Instant) -> list[Effect]:
        """Every 0.1 s: the election's deadlines, the leader's announce, held commands."""
        self._begin(now)
        s = self.s
        self._act(s.election.tick(now.mono, s.state.last_event_applied_idx))
        if now.mono >= self.announce_due and (s.leading or s.election.session):
            self.announce_due = now.mono + ANNOUNCE_INTERVAL_S
            if s.leading:
                s.to_peers(s.election.announce(s.state.last_event_applied_idx))
            else:  # resend held commands at the announce pace until answered (the leader dedupes)
                for command_id in list(s.desk.held):
                    self.follower.forward(command_id)
        for envelope, rejected in s.desk.expired(now.mono):
            self._answer(envelope, rejected)
        self.leader.recreate_due()
        self.own.check_drain()
        return self._end()

    def every_second(self, now: Instant) -> list[Effect]:
        """Every second: the head for the node's replicas, facts the state still lacks."""
        self._begin(now)
        s = self.s
        s.publish_head()
        self._place_at_boot()
        s.loads.forget(set(s.state.runners))
        self.leader.refresh_nodes()
        self.own.back_from_restart()
        self.own.mark_again()
        self.own.forget_gone_runners()
        if not s.leading:  # re-send local facts the leader has not indexed yet
            self.own.send_all()
        return self._end()

    def supervisor_missed(self, verb: AdminVerb) -> None:
        """The supervisor could not take `verb` yet (its queue is full): `drained` is told again
        at the next tick; a restart is forgotten, so the operator's next request asks again
        instead of a 409 for a restart that is not coming."""
        if verb is AdminVerb.DRAINED:
            if self.own.restart is Restart.DRAINED:
                self.own.restart = Restart.DRAINING
        elif self.own.restart is Restart.ASKED:
            log.warning("could not ask this node's supervisor to restart (its queue is full); not restarting")
            self.own.restart = Restart.NONE

    # -- what the service asks ---------------------------------------------------------------
    def to_save(self) -> State | None:
        """The state to keep across an in-place restart (a leader's only)."""
        return self.s.state if self.s.leading else None

    def describe(self) -> str:
        e, st = self.s.election, self.s.state
        return (f"{'leader' if e.is_leader else 'follower'} of {e.leader or '-'} "
                f"session {st.session[:12]} idx {st.last_event_applied_idx}")

    # -- decisions ----------------------------------------------------------------------------
    def command(self, envelope: list[bytes] | None, cmd: Command) -> None:
        s = self.s
        if isinstance(cmd, RestartNode):
            self._restart_node(envelope, cmd)
        elif isinstance(cmd, SnapshotRequest):
            if envelope is not None and s.state.session:  # no session yet: the replica asks again
                self._answer(envelope, StateSnapshot(command_id=cmd.command_id, state=s.state))
        elif s.leading:
            self._answer(envelope, self.leader.execute(cmd))
        elif isinstance(cmd, ForwardableCommand):
            s.desk.hold(cmd.command_id, envelope, cmd, s.now.mono)
            self.follower.forward(cmd.command_id)
        else:  # a command type no leader takes (the wire's forwardable set lacks it)
            self._answer(envelope, CommandRejected(command_id=cmd.command_id, status=400,
                                                   message=f"{cmd.TYPE} cannot be forwarded to the leader"))

    def _act(self, actions: list[Action]) -> None:
        s = self.s
        if actions and s.desk.held:  # a session boundary: what was in flight cannot carry over
            for envelope, rejected in s.desk.session_changed():
                self._answer(envelope, rejected)
        for action in actions:
            if isinstance(action, Broadcast):
                log.info("campaigning for leader (clock %d, %d member(s), last index %d)",
                         action.msg.clock, len(s.roster.members), action.msg.last_idx)
                s.to_peers(action.msg)
            elif isinstance(action, BecomeLeader):
                self.leader.open_session(action.session, self.settings.tracing_enabled)
                self.own.send_all()
                self._flush_held()
            elif isinstance(action, Follow):
                self.follower.start_following(action.leader, action.session)

    def _announced(self, msg: LeaderAnnounce) -> None:
        s = self.s
        self._act(s.election.on_announce(msg, s.now.mono, s.state.last_event_applied_idx))
        if s.election.leader == msg.node_id and msg.session == s.election.session:
            if msg.session != s.state.session:  # e.g. the first replay request went out before we could reach it
                self.follower.ask_replay(-1)
            elif msg.head > s.state.last_event_applied_idx:
                self.follower.ask_replay(s.state.last_event_applied_idx)

    def _their_fact(self, msg: LocalEvent) -> None:
        """A follower's own fact, for us as leader: indexed unless the state already says it."""
        event = msg.event
        if isinstance(event, RunnerStatusUpdated):
            if self.s.state.runners.get(event.runner_id) != event.status:
                self.leader.index_fact(event)
        elif isinstance(event, NodeDownloadUpdated | NodeCatalogUpdated) and event.node_id == msg.node_id:
            if not self.own.indexed(event):
                self.leader.index_fact(event)
        elif isinstance(event, NodeRestarting) and event.node_id == msg.node_id:
            self.leader.index_fact(event)

    def _adopt(self, snapshot: State) -> None:
        lost = self.follower.adopt(snapshot)
        if lost is None:
            return
        self.own.back_from_restart()
        for rid, status in self.own.runners.items():
            self.own.runner_fact(rid, status)
        for cmd in lost:
            self.command(None, cmd)

    def _membership(self, msg: Membership) -> None:
        s = self.s
        members = {m.info.node_id: m for m in msg.members}
        s.out.append(LinkPeers(members))
        s.roster.members = members
        self._act(s.election.on_membership(frozenset(members), s.now.mono, s.state.last_event_applied_idx))
        self.leader.refresh_nodes()
        self._place_at_boot()

    def _place_at_boot(self) -> None:
        """`skulk run --place`: once this node is a member and the catalog has its models."""
        s = self.s
        if self.boot_places and s.node_id in s.roster.members:
            made, self.boot_places = saved_state.boot_placements(s.state, s.node_id, self.boot_places, s.new_id)
            for cmd in made:
                self.command(None, cmd)

    def _restart_node(self, envelope: list[bytes] | None, cmd: RestartNode) -> None:
        """Restart this node (its own supervisor), or pass the request to the target's master."""
        s = self.s
        reply: Reply = CommandAccepted(command_id=cmd.command_id, message="restart_sent")
        if cmd.node_id == s.node_id:
            reply = self.own.restart_self(cmd.command_id)
        elif cmd.node_id in s.roster.members:
            s.out.append(ToPeer(cmd.node_id, cmd))
        else:
            reply = CommandRejected(command_id=cmd.command_id, status=404, message=f"Unknown node {cmd.node_id}",
                                    reason=RejectReason.UNKNOWN_NODE)
        if envelope is not None:
            self._answer(envelope, reply)

    def _flush_held(self) -> None:
        s = self.s
        for command_id in list(s.desk.held):
            if s.leading:
                held = s.desk.held.pop(command_id)
                self._answer(held.envelope, self.leader.execute(held.command))
            else:
                self.follower.forward(command_id)

    def _answer(self, envelope: list[bytes] | None, reply: Message) -> None:
        self.s.out.append(Answer(Channel.LOCAL, envelope, reply))

    def _begin(self, now: Instant) -> None:
        self.s.now, self.s.out = now, []

    def _end(self) -> list[Effect]:
        out, self.s.out = self.s.out, []
        return out
