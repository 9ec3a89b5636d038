"""Commands to the master (API REQ -> master ROUTER) and its replies.

Every command carries a `command_id`; the master answers a repeated id (a Lazy Pirate retry)
with the reply it gave the first time, so retries are idempotent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from skulk.wire.message import Message
from skulk.wire.models import ModelCard
from skulk.wire.state import State, TaskParams


SESSION_CHANGED = ("The cluster session changed (master failover) while this request was in "
                   "flight; please retry")
"""Upstream's words for a command that was in flight when its leader went away."""
NO_INSTANCE = "No instance found for model {model}"
NO_READY_INSTANCE = "No ready instance for model {model} yet ({kinds}); retry shortly"
"""Routing's immediate answers (404, 503): a request never waits for an instance."""
INSTANCE_DELETED = "The request was cancelled because its instance was deleted"
INSTANCE_LOST = "The instance executing this request was lost (node disconnected or instance deleted)"
RUNNER_LOST = "Runner shutdown before completing command ({detail})"
STREAM_STALLED = "Stream stalled: no output for {seconds:g}s; the response may be incomplete."
"""Upstream's words for a request whose instance an operator deleted, whose instance was lost
with its node, whose runner died, or whose stream stalled (the master's `TaskFailed` and the
API's error say the same)."""


def error_type(message: str) -> str:
    """The machine-readable kind of a request's error (`TaskFailed.error_type`), whichever side
    noticed it first: the master (instance lost, runner failed) or the API (link, stall)."""
    if message == INSTANCE_LOST:
        return "instance_lost"
    if message.startswith(RUNNER_LOST.split("{", 1)[0]):
        return "runner_failed"
    if message == SESSION_CHANGED:
        return "session_changed"
    if message.startswith(STREAM_STALLED.split("{", 1)[0]):
        return "stalled"
    return "runner_error"


RESTART_PENDING = "restart_already_pending"
"""The 409 of `POST /admin/restart` while the node's restart is under way."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlaceInstance(Message):
    TYPE: ClassVar[str] = "command.place_instance"
    command_id: str
    card: ModelCard
    sharding: str = "Pipeline"
    instance_meta: str = "MlxRing"
    min_nodes: int = 1
    excluded_nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteInstance(Message):
    TYPE: ClassVar[str] = "command.delete_instance"
    command_id: str
    instance_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TextGeneration(Message):
    """Route one chat request: the master picks an instance and creates the task."""

    TYPE: ClassVar[str] = "command.text_generation"
    command_id: str
    owner_node: str
    params: TaskParams


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskCancelled(Message):
    TYPE: ClassVar[str] = "command.task_cancelled"
    command_id: str
    cancelled_command_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFinished(Message):
    TYPE: ClassVar[str] = "command.task_finished"
    command_id: str
    finished_command_id: str
    failed: bool = False
    error_message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RestartNode(Message):
    """Restart a node in place (`POST /admin/restart?node_id=`): sent by the API to its master,
    and by that master to the target node's master, which asks its own supervisor."""

    TYPE: ClassVar[str] = "command.restart_node"
    command_id: str
    node_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotRequest(Message):
    TYPE: ClassVar[str] = "command.snapshot_request"
    command_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandAccepted(Message):
    TYPE: ClassVar[str] = "reply.accepted"
    command_id: str
    message: str = "Command received."
    instance_id: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandRejected(Message):
    """The command cannot be carried out; `status` is the HTTP status the API answers with."""

    TYPE: ClassVar[str] = "reply.rejected"
    command_id: str
    status: int
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Routed(Message):
    """Where a TextGeneration goes: the rank-0 runner's ROUTER endpoint."""

    TYPE: ClassVar[str] = "reply.routed"
    command_id: str
    task_id: str
    instance_id: str
    runner_id: str
    endpoint: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StateSnapshot(Message):
    TYPE: ClassVar[str] = "reply.state_snapshot"
    command_id: str
    state: State


Command = PlaceInstance | DeleteInstance | TextGeneration | TaskCancelled | TaskFinished | SnapshotRequest
Reply = CommandAccepted | CommandRejected | Routed | StateSnapshot
