"""What the master core asks its service to do (typed values; `service.py` carries them out).

The core decides and never touches a socket, a file or the clock: each input (a message, a
tick) returns a list of these, in the order they must happen."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from skulk.cluster.state import IndexedEvent, State, StateHead
from skulk.wire.cluster import Member
from skulk.wire.commands import Routed
from skulk.wire.control import AdminVerb
from skulk.wire.message import Message


@dataclass(frozen=True, slots=True)
class Instant:
    """The clocks of one input: `mono` orders deadlines, `wall` is shared by every node's
    reading of the replicated state (deletion notes, restart marks)."""

    mono: float
    wall: float


class Channel(Enum):
    """Where a reply goes back: the node-local ROUTER (its API, event log) or the cluster one
    (another node's master)."""

    LOCAL = "local"
    CLUSTER = "cluster"


@dataclass(frozen=True, slots=True)
class Publish:
    """Put a state event (or the head) on this node's bus."""

    message: IndexedEvent | StateHead


@dataclass(frozen=True, slots=True)
class ToPeers:
    """Send to every member's master (campaigns, announces, event batches)."""

    message: Message


@dataclass(frozen=True, slots=True)
class ToPeer:
    """Send to one member's master (the leader, mostly); dropped where no link is open."""

    node_id: str
    message: Message


@dataclass(frozen=True, slots=True)
class LinkPeers:
    """Keep one link to each member's master (open new members', close those that left)."""

    members: Mapping[str, Member]


@dataclass(frozen=True, slots=True)
class Answer:
    """Reply on the ROUTER the request came in on; `envelope` None: a command of the master
    itself (`--place`, a re-submission), whose reply is only logged."""

    channel: Channel
    envelope: list[bytes] | None
    message: Message


@dataclass(frozen=True, slots=True)
class TellSupervisor:
    """Ask this node's supervisor: `restart` (this node in place) or `drained` (that restart's
    drain is over)."""

    verb: AdminVerb


@dataclass(frozen=True, slots=True)
class SyncConfig:
    """Write this node's `skulk.yaml` if the state holds a config it has not written yet."""

    state: State


@dataclass(frozen=True, slots=True)
class TraceRoute:
    """Keep the router's span of a traced task (the leader's decision and its event)."""

    routed: Routed
    model_id: str
    load: int
    start_us: int  # the input's wall clock: the span runs from there to when the service writes it


@dataclass(frozen=True, slots=True)
class Unexpected:
    """A message the cluster port does not take (counted and logged as a refusal)."""

    envelope: list[bytes]
    message_type: str


Effect = Publish | LinkPeers | ToPeers | ToPeer | Answer | TellSupervisor | SyncConfig | TraceRoute | Unexpected
