"""Messages between children, the admin CLI and the supervisor (never on the bus).

Child -> supervisor travels PUSH -> PULL; admin -> supervisor travels REQ -> ROUTER.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

from skulk.wire.message import Message


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildReady(Message):
    """A child finished booting; the supervisor stops its ready deadline."""

    TYPE: ClassVar[str] = "control.child_ready"
    child_id: str
    pid: int
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat(Message):
    """Sent from the child's working loop; missing `liveness` of them gets it killed."""

    TYPE: ClassVar[str] = "control.heartbeat"
    child_id: str
    pid: int
    seq: int
    step: str = ""  # set by a runner's watch thread: its loop is inside this step ...
    step_age_s: float = 0.0  # ... since this long (the supervisor judges it by its step deadline)


class AdminVerb(StrEnum):
    """What an `AdminCommand` asks of the supervisor: every sender and the supervisor's dispatch
    use these members, so a verb is spelled once."""

    STATUS = "status"
    RESTART = "restart"  # a child (`target`), or the whole node: drain, then execv in place
    STOP = "stop"  # the whole node (exit 0)
    WAIT = "wait"
    START_CHILD = "start_child"  # under a dynamic supervisor (`runners`)
    TERMINATE_CHILD = "terminate_child"
    DRAINED = "drained"  # the node's master: a restart's drain is over (no operator sends it)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminCommand(Message):
    """An operator verb (`AdminVerb`).

    `target` names a child (or is empty for the whole node). `wait` replies once the target
    (or every child) is running with at least `min_restarts` restarts, or at `timeout_s`.
    """

    TYPE: ClassVar[str] = "control.admin_command"
    verb: str  # an AdminVerb; a str on the wire, so an unknown verb decodes and the supervisor refuses it by name
    target: str = ""
    supervisor: str = ""
    args: tuple[str, ...] = ()
    min_restarts: int = 0
    timeout_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildStatus(Message):
    """One row of `skulk admin status`."""

    TYPE: ClassVar[str] = "control.child_status"
    id: str
    supervisor: str
    kind: str
    pid: int | None
    state: str
    restarts: int
    uptime_s: float | None
    forked: bool = False  # forked from the node's zygote (its modules preloaded), not a fresh interpreter
    standby: bool = False  # a runner that was a standby (mlx and mlx-lm imported before it was asked for)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminReply(Message):
    """The supervisor's answer to one AdminCommand."""

    TYPE: ClassVar[str] = "control.admin_reply"
    ok: bool
    message: str = ""
    root_pid: int = 0
    children: tuple[ChildStatus, ...] = field(default_factory=tuple)
    node_name: str = ""  # the name the node goes by now (its derived name once it took it)
