"""Node-to-node messages: gossip hellos, membership, election, replication, forwarding.

Cluster ports face the network: frames are size-capped and every decode error is logged and
dropped. A hello from another namespace is refused (clusters never merge).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from skulk.cluster.state import Event, IndexedEvent, NodeInfo, State
from skulk.wire.commands import MasterCommand, Reply
from skulk.wire.config_sync import SetConfig
from skulk.wire.message import Message
from skulk.wire.staging import PurgeStaging
from skulk.wire.tracing import SetTracing


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerHello(Message):
    """gossip -> gossip every 0.25 s: who I am, where to reach me, whom I know."""

    TYPE: ClassVar[str] = "cluster.peer_hello"
    namespace: str  # sha256 of the namespace, never the namespace itself
    info: NodeInfo
    gossip_port: int
    master_port: int
    known: tuple[str, ...] = ()  # "ip:port" of other gossip endpoints (transitive discovery)
    started: float = 0.0  # the node's start (epoch s): of two live nodes with one name, the later refuses
    name_given: bool = True  # False: named after its host, it takes its derived name on a clash


@dataclass(frozen=True, slots=True, kw_only=True)
class Member(Message):
    TYPE: ClassVar[str] = "cluster.member"
    info: NodeInfo
    master_endpoint: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Membership(Message):
    """gossip -> local bus: every live node (this one included), at once on a change of who is there
    or how to reach them, else at most every second (fresh memory and disk readings)."""

    TYPE: ClassVar[str] = "cluster.membership"
    node_id: str
    members: tuple[Member, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Campaign(Message):
    TYPE: ClassVar[str] = "cluster.campaign"
    node_id: str
    clock: int
    last_idx: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAnnounce(Message):
    """The leader, every 0.5 s: its session, clock, seniority (largest cluster it has led),
    head index and how many state-changing commands it has executed (upstream's
    `commandsSeen`: of two lone leaders that meet, the one that was used wins)."""

    TYPE: ClassVar[str] = "cluster.leader_announce"
    node_id: str
    session: str
    clock: int
    seniority: int
    head: int
    commands: int = 0
    fresh: bool = False  # a session opened at boot by a lone node with no state, never used since


@dataclass(frozen=True, slots=True, kw_only=True)
class EventBatch(Message):
    TYPE: ClassVar[str] = "cluster.event_batch"
    session: str
    events: tuple[IndexedEvent, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayRequest(Message):
    """A follower missing events (`since` = its last index; -1 or another session: snapshot)."""

    TYPE: ClassVar[str] = "cluster.replay_request"
    node_id: str
    session: str
    since: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotPush(Message):
    TYPE: ClassVar[str] = "cluster.snapshot_push"
    state: State


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalEvent(Message):
    """A follower's own fact (a runner's status) for the leader to index."""

    TYPE: ClassVar[str] = "cluster.local_event"
    node_id: str
    event: Event


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerLoad(Message):
    """A follower's runner's load changed (requests in its batch and waiting): for the
    leader's routing, never indexed."""

    TYPE: ClassVar[str] = "cluster.runner_load"
    runner_id: str
    active: int
    waiting: int


ForwardableCommand: TypeAlias = MasterCommand | SetConfig | PurgeStaging | SetTracing
"""What a follower's master hands its leader: every command but `RestartNode` (sent to its target node)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardCommand(Message):
    TYPE: ClassVar[str] = "cluster.forward_command"
    node_id: str
    command: ForwardableCommand


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardedReply(Message):
    TYPE: ClassVar[str] = "cluster.forwarded_reply"
    reply: Reply
