"""The master as a core without I/O (every node runs one): election; the leader indexes events
and pushes them to followers, which apply them in order and republish them locally; commands
from any API reach the leader (held and re-forwarded across elections, 503 after a deadline);
this node's own facts go to the leader. Tokens never pass through here.

Each input (`on_local`, `on_cluster`, `on_peer`, `on_bus`, `tick`, `every_second`) takes the
message and the clocks (`Instant`) and returns the effects to carry out, in order
(`effects.py`); `service.py` owns the sockets, the files and the clock. The leader's work is in
`leader.py`, the follower's in `follower.py`, this node's own facts in `own_node.py`; they share
`Shared`, declared once, and each is handed the input's `Turn` explicitly. See docs/architecture.md."""

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
from skulk.services.master.follower import Follower
from skulk.services.master.leader import Leader
from skulk.services.master.own_node import OwnNode
from skulk.services.master.recovery import RecoveryPolicy
from skulk.services.master.shared import Shared, Turn
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
        self.own = OwnNode(self.s, self.leader.index_fact, settings.drain_timeout_s)
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
    # Each input makes a `Turn` (its clocks, the effects it makes) and hands it explicitly to
    # every part it asks; the effects come back in order.
    def boot(self, now: Instant, wait_s: float = BOOT_WAIT_S) -> list[Effect]:
        turn = Turn(now)
        state = self.s.state
        has_state = bool(state.session) or state.last_event_applied_idx >= 0
        if has_state and not knows_peers(state, self.s.node_id):
            wait_s = 0.0  # a lone node restarted: it was its whole cluster, it leads again at once
        self._act(turn, self.election.boot(now.mono, wait_s=wait_s, has_state=has_state))
        self.own.back_from_restart(turn)  # a lone node's saved state carries the mark of its restart
        return turn.out

    def on_local(self, envelope: list[bytes], msg: Message, now: Instant) -> list[Effect]:
        """From this node's own processes: a command (its API) or a replay (its event log)."""
        turn = Turn(now)
        if isinstance(msg, ReplayRequest):  # the event log, behind on the bus
            events = self.s.published.after(msg.session, msg.since)
            turn.out.append(Answer(Channel.LOCAL, envelope, EventBatch(session=msg.session, events=events)))
        elif isinstance(msg, Command):
            self.command(turn, envelope, msg)
        else:
            _answer(turn, envelope, CommandRejected(command_id="", status=400, message=f"{msg.TYPE} is not a command"))
        return turn.out

    def on_cluster(self, envelope: list[bytes], msg: Message, now: Instant) -> list[Effect]:
        """From another node's master, on this master's cluster port."""
        turn = Turn(now)
        s, last = self.s, self.s.state.last_event_applied_idx
        if isinstance(msg, Campaign):
            self._act(turn, s.election.on_campaign(msg, now.mono, last))
        elif isinstance(msg, LeaderAnnounce):
            self._announced(turn, msg)
        elif isinstance(msg, EventBatch):
            self.follower.follow(turn, msg)
        elif isinstance(msg, ReplayRequest) and s.leading:
            self.leader.replay(turn, envelope, msg)
        elif isinstance(msg, RunnerLoad):
            s.loads.record(msg.runner_id, msg.active, msg.waiting)
        elif isinstance(msg, LocalEvent) and s.leading:
            self._their_fact(turn, msg)
        elif isinstance(msg, RestartNode) and msg.node_id == s.node_id:
            self._restart_node(turn, None, msg)
        elif isinstance(msg, ForwardCommand):  # a follower's API command, for us as leader
            reply = self.leader.execute(turn, msg.command) if s.leading else CommandRejected(
                command_id=msg.command.command_id, status=503, reason=RejectReason.NOT_LEADER,
                message="not the leader (election in progress); please retry")
            turn.out.append(Answer(Channel.CLUSTER, envelope, ForwardedReply(reply=reply)))
        else:
            turn.out.append(Unexpected(envelope, msg.TYPE))
        return turn.out

    def on_peer(self, msg: Message, now: Instant) -> list[Effect]:
        """On a link this master dialled to another member's master."""
        turn = Turn(now)
        if isinstance(msg, ForwardedReply):
            held = self.s.desk.held.get(msg.reply.command_id)
            not_leader = isinstance(msg.reply, CommandRejected) and msg.reply.reason == RejectReason.NOT_LEADER
            if held is not None and not not_leader:  # else: wait for the next leader
                del self.s.desk.held[msg.reply.command_id]
                _answer(turn, held.envelope, msg.reply)
        elif isinstance(msg, EventBatch):
            self.follower.follow(turn, msg)
        elif isinstance(msg, SnapshotPush):
            self._adopt(turn, msg.state)
        return turn.out

    def on_bus(self, msg: Message, now: Instant) -> list[Effect]:
        """A report on this node's bus: gossip's membership, the runners', the worker's, the store's."""
        turn = Turn(now)
        if isinstance(msg, Membership):
            if msg.node_id == self.s.node_id:
                self._membership(turn, msg)
        else:
            self.own.on_bus(turn, msg)
        return turn.out

    def tick(self, now: Instant) -> list[Effect]:
        """Every 0.1 s: the election's deadlines, the leader's announce, held commands."""
        turn = Turn(now)
        s = self.s
        self._act(turn, s.election.tick(now.mono, s.state.last_event_applied_idx))
        if now.mono >= self.announce_due and (s.leading or s.election.session):
            self.announce_due = now.mono + ANNOUNCE_INTERVAL_S
            if s.leading:
                s.to_peers(turn, s.election.announce(s.state.last_event_applied_idx))
            else:  # resend held commands at the announce pace until answered (the leader dedupes)
                for command_id in list(s.desk.held):
                    self.follower.forward(turn, command_id)
        for envelope, rejected in s.desk.expired(now.mono):
            _answer(turn, envelope, rejected)
        self.leader.recreate_due(turn)
        self.own.check_drain(turn)
        return turn.out

    def every_second(self, now: Instant) -> list[Effect]:
        """Every second: the head for the node's replicas, facts the state still lacks."""
        turn = Turn(now)
        s = self.s
        s.publish_head(turn)
        self._place_at_boot(turn)
        s.loads.forget(set(s.state.runners))
        self.leader.refresh_nodes(turn)
        self.own.back_from_restart(turn)
        self.own.mark_again(turn)
        self.own.forget_gone_runners()
        if not s.leading:  # re-send local facts the leader has not indexed yet
            self.own.send_all(turn)
        return turn.out

    def supervisor_missed(self, verb: AdminVerb) -> None:
        """The supervisor could not take `verb` yet (its queue is full): `drained` is told again
        at the next tick; a restart is forgotten, so the operator's next request asks again
        instead of a 409 for a restart that is not coming."""
        self.own.supervisor_missed(verb)

    # -- what the service asks ---------------------------------------------------------------
    def to_save(self) -> State | None:
        """The state to keep across an in-place restart (a leader's only)."""
        return self.s.state if self.s.leading else None

    def describe(self) -> str:
        e, st = self.s.election, self.s.state
        return (f"{'leader' if e.is_leader else 'follower'} of {e.leader or '-'} "
                f"session {st.session[:12]} idx {st.last_event_applied_idx}")

    # -- decisions ----------------------------------------------------------------------------
    def command(self, turn: Turn, envelope: list[bytes] | None, cmd: Command) -> None:
        """Where a command is carried out: here (this node's restart, a state snapshot), by
        us as leader (`commands.handle`), or held and forwarded to the leader."""
        s = self.s
        if isinstance(cmd, RestartNode):
            self._restart_node(turn, envelope, cmd)
        elif isinstance(cmd, SnapshotRequest):
            if envelope is not None and s.state.session:  # no session yet: the replica asks again
                _answer(turn, envelope, StateSnapshot(command_id=cmd.command_id, state=s.state))
        elif s.leading:
            _answer(turn, envelope, self.leader.execute(turn, cmd))
        elif isinstance(cmd, ForwardableCommand):
            s.desk.hold(cmd.command_id, envelope, cmd, turn.now.mono)
            self.follower.forward(turn, cmd.command_id)
        else:  # a command type no leader takes (the wire's forwardable set lacks it)
            _answer(turn, envelope, CommandRejected(command_id=cmd.command_id, status=400,
                                                   message=f"{cmd.TYPE} cannot be forwarded to the leader"))

    def _act(self, turn: Turn, actions: list[Action]) -> None:
        s = self.s
        if actions and s.desk.held:  # a session boundary: what was in flight cannot carry over
            for envelope, rejected in s.desk.session_changed():
                _answer(turn, envelope, rejected)
        for action in actions:
            if isinstance(action, Broadcast):
                log.info("campaigning for leader (clock %d, %d member(s), last index %d)",
                         action.msg.clock, len(s.roster.members), action.msg.last_idx)
                s.to_peers(turn, action.msg)
            elif isinstance(action, BecomeLeader):
                self.leader.open_session(turn, action.session, self.settings.tracing_enabled)
                self.own.send_all(turn)
                self._flush_held(turn)
            elif isinstance(action, Follow):
                self.follower.start_following(turn, action.leader, action.session)

    def _announced(self, turn: Turn, msg: LeaderAnnounce) -> None:
        s = self.s
        self._act(turn, s.election.on_announce(msg, turn.now.mono, s.state.last_event_applied_idx))
        if s.election.leader == msg.node_id and msg.session == s.election.session:
            if msg.session != s.state.session:  # e.g. the first replay request went out before we could reach it
                self.follower.ask_replay(turn, -1)
            elif msg.head > s.state.last_event_applied_idx:
                self.follower.ask_replay(turn, s.state.last_event_applied_idx)

    def _their_fact(self, turn: Turn, msg: LocalEvent) -> None:
        """A follower's own fact, for us as leader: indexed unless the state already says it."""
        event = msg.event
        if isinstance(event, RunnerStatusUpdated):
            if self.s.state.runners.get(event.runner_id) != event.status:
                self.leader.index_fact(turn, event)
        elif isinstance(event, NodeDownloadUpdated | NodeCatalogUpdated) and event.node_id == msg.node_id:
            if not self.own.indexed(event):
                self.leader.index_fact(turn, event)
        elif isinstance(event, NodeRestarting) and event.node_id == msg.node_id:
            self.leader.index_fact(turn, event)

    def _adopt(self, turn: Turn, snapshot: State) -> None:
        lost = self.follower.adopt(turn, snapshot)
        if lost is None:
            return
        self.own.back_from_restart(turn)
        for rid, status in self.own.runners.items():
            self.own.runner_fact(turn, rid, status)
        for cmd in lost:
            self.command(turn, None, cmd)

    def _membership(self, turn: Turn, msg: Membership) -> None:
        s = self.s
        members = {m.info.node_id: m for m in msg.members}
        turn.out.append(LinkPeers(members))
        s.roster.members = members
        self._act(turn, s.election.on_membership(frozenset(members), turn.now.mono, s.state.last_event_applied_idx))
        self.leader.refresh_nodes(turn)
        self._place_at_boot(turn)

    def _place_at_boot(self, turn: Turn) -> None:
        """`skulk run --place`: once this node is a member and the catalog has its models."""
        s = self.s
        if self.boot_places and s.node_id in s.roster.members:
            made, self.boot_places = saved_state.boot_placements(s.state, s.node_id, self.boot_places, s.new_id)
            for cmd in made:
                self.command(turn, None, cmd)

    def _restart_node(self, turn: Turn, envelope: list[bytes] | None, cmd: RestartNode) -> None:
        """Restart this node (its own supervisor), or pass the request to the target's master."""
        s = self.s
        reply: Reply = CommandAccepted(command_id=cmd.command_id, message="restart_sent")
        if cmd.node_id == s.node_id:
            reply = self.own.restart_self(turn, cmd.command_id)
        elif cmd.node_id in s.roster.members:
            turn.out.append(ToPeer(cmd.node_id, cmd))
        else:
            reply = CommandRejected(command_id=cmd.command_id, status=404, message=f"Unknown node {cmd.node_id}",
                                    reason=RejectReason.UNKNOWN_NODE)
        if envelope is not None:
            _answer(turn, envelope, reply)

    def _flush_held(self, turn: Turn) -> None:
        s = self.s
        for command_id in list(s.desk.held):
            if s.leading:
                held = s.desk.held.pop(command_id)
                _answer(turn, held.envelope, self.leader.execute(turn, held.command))
            else:
                self.follower.forward(turn, command_id)



def _answer(turn: Turn, envelope: list[bytes] | None, reply: Message) -> None:
    turn.out.append(Answer(Channel.LOCAL, envelope, reply))


def knows_peers(state: State, node_id: str) -> bool:
    """Whether a saved state names another node (a member, or a runner's host): a node restarted
    with such a state waits for its first membership to see who is still there; one that was alone
    has no one to wait for."""
    return bool(set(state.nodes) - {node_id}) or any(
        n != node_id for inst in state.instances.values() for n in inst.node_to_runner)
