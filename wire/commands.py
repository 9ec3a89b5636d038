"""Commands to the master (API REQ -> master ROUTER) and its replies.

Every command carries a `command_id`; the master answers a repeated id (a Lazy Pirate retry)
with the reply it gave the first time, so retries are idempotent.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from skulk.cluster.state import State, TaskParams
from skulk.wire.message import Command, CommandReply
from skulk.wire.models import ModelCard

SESSION_CHANGED = ("The cluster session changed (master failover) while this request was in "
                   "flight; please retry")
"""Upstream's words for a command that was in flight when its leader went away."""
NO_INSTANCE = "No instance found for model {model}"
NO_READY_INSTANCE = "No ready instance for model {model} yet ({kinds}); retry shortly"
"""Routing's immediate answers (404, 503): a request never waits for an instance."""
NOT_EMBEDDING = "Model {model} is not an embedding model"
NOT_GENERATIVE = "Model {model} is an embedding model: use /v1/embeddings"
"""A request for the wrong kind of model (400), decided on the card's `tasks`."""
INSTANCE_DELETED = "The request was cancelled because its instance was deleted"
INSTANCE_LOST = "The instance executing this request was lost (node disconnected or instance deleted)"
RUNNER_LOST = "Runner shutdown before completing command ({detail})"
STREAM_STALLED = "Stream stalled: no output for {seconds:g}s; the response may be incomplete."
"""Upstream's words for a request whose instance an operator deleted, whose instance was lost
with its node, whose runner died, or whose stream stalled (the master's `TaskFailed` and the
API's error say the same)."""


class RejectReason(StrEnum):
    """Why the master refused a command; the API decides on this, never on the message."""

    BAD_COMMAND = "bad_command"  # malformed or not a command: 400
    NO_INSTANCE = "no_instance"  # no instance of that model: 404
    NOT_READY = "not_ready"  # instances exist, none serves yet: 503
    PLACEMENT_REFUSED = "placement_refused"  # placement impossible as asked: 400
    TOO_FEW_NODES = "too_few_nodes"  # fewer nodes than min_nodes (the cluster may still be forming)
    UNKNOWN_INSTANCE = "unknown_instance"  # 404
    UNKNOWN_NODE = "unknown_node"  # 404
    NOT_LEADER = "not_leader"  # asked a master that no longer leads: wait for the next one
    NO_LEADER = "no_leader"  # no leader answered in time: 503
    SESSION_CHANGED = "session_changed"  # the leader went away with the command in flight: 503
    RESTART_PENDING = "restart_pending"  # 409
    INVALID_CONFIG = "invalid_config"  # `PUT /config` with a bad key or value: 422
    WRONG_TASK = "wrong_task"  # the model does not serve this kind of request (embedding vs text): 400


RESTART_PENDING = "restart_already_pending"
"""The 409 of `POST /admin/restart` while the node's restart is under way."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlaceInstance(Command):
    TYPE: ClassVar[str] = "command.place_instance"
    card: ModelCard
    sharding: str = "Pipeline"
    instance_meta: str = "MlxRing"
    min_nodes: int = 1
    excluded_nodes: tuple[str, ...] = ()
    engine: str = "auto"  # auto | mlx | llama_cpp (an EngineKind): auto picks the fastest the ring has


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteInstance(Command):
    TYPE: ClassVar[str] = "command.delete_instance"
    instance_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TextGeneration(Command):
    """Route one chat request: the master picks an instance and creates the task."""

    TYPE: ClassVar[str] = "command.text_generation"
    owner_node: str
    params: TaskParams
    avoid_nodes: tuple[str, ...] = ()
    """Nodes the asking API node's gossip has seen leave: the leader may list their instances a
    few seconds longer (until its own `NodeTimedOut`), and a request routed there is lost at once."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TextEmbedding(Command):
    """Route one embedding request to an instance of an embedding model. No task is created:
    the request is one short exchange with the runner (its load report counts it)."""

    TYPE: ClassVar[str] = "command.text_embedding"
    owner_node: str
    model: str
    avoid_nodes: tuple[str, ...] = ()  # as `TextGeneration.avoid_nodes`


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskCancelled(Command):
    TYPE: ClassVar[str] = "command.task_cancelled"
    cancelled_command_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFinished(Command):
    TYPE: ClassVar[str] = "command.task_finished"
    finished_command_id: str
    failed: bool = False
    error_message: str = ""
    reason: str = ""  # a FailReason when failed: the task's `error_type`


@dataclass(frozen=True, slots=True, kw_only=True)
class RestartNode(Command):
    """Restart a node in place (`POST /admin/restart?node_id=`): sent by the API to its master,
    and by that master to the target node's master, which asks its own supervisor."""

    TYPE: ClassVar[str] = "command.restart_node"
    node_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotRequest(Command):
    TYPE: ClassVar[str] = "command.snapshot_request"


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandAccepted(CommandReply):
    TYPE: ClassVar[str] = "reply.accepted"
    message: str = "Command received."
    instance_id: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandRejected(CommandReply):
    """The command cannot be carried out; `status` is the HTTP status the API answers with."""

    TYPE: ClassVar[str] = "reply.rejected"
    status: int
    message: str
    reason: str = RejectReason.BAD_COMMAND  # a RejectReason


@dataclass(frozen=True, slots=True, kw_only=True)
class Routed(CommandReply):
    """Where a TextGeneration or TextEmbedding goes: the rank-0 runner's ROUTER endpoint."""

    TYPE: ClassVar[str] = "reply.routed"
    task_id: str
    instance_id: str
    runner_id: str
    endpoint: str
    trace: bool = False  # the task is traced: the API and every rank record spans for it


@dataclass(frozen=True, slots=True, kw_only=True)
class StateSnapshot(CommandReply):
    TYPE: ClassVar[str] = "reply.state_snapshot"
    state: State


MasterCommand = (PlaceInstance | DeleteInstance | TextGeneration | TextEmbedding | TaskCancelled | TaskFinished
                 | SnapshotRequest)
"""The commands of this module a follower forwards to its leader (the wire's closed set)."""
Reply = CommandAccepted | CommandRejected | Routed | StateSnapshot
