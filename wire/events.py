"""Node-local events published on the bus (lossy PUB/SUB; never tokens)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from skulk.cluster.state import RunnerStatus
from skulk.wire.message import Message


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceStatus(Message):
    """Periodic sign of life of one role, so the tap and the event log see every process."""

    TYPE: ClassVar[str] = "event.service_status"
    role: str
    child_id: str
    pid: int
    seq: int
    uptime_s: float
    detail: str = ""


class LifecycleEvent(StrEnum):
    """What a `ChildLifecycle` says happened (the watchdog's kills are named by their cause)."""

    STARTED = "started"
    READY = "ready"
    EXITED = "exited"  # it ended by itself (a crash, a deadline it enforces, a clean stop)
    STOPPED = "stopped"  # its supervisor stopped it on purpose
    ESCALATE = "escalate"  # a supervisor's restart budget ran out
    READY_TIMEOUT = "ready_timeout"
    HEARTBEAT_MISSED = "heartbeat_missed"
    STEP_DEADLINE = "step_deadline"
    RESTARTING = "restarting"  # child "node": the whole node restarts in place
    STOPPING = "stopping"  # child "node": the whole node stops


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildLifecycle(Message):
    """The supervisor saw a child start, become ready, exit, or get killed by the watchdog."""

    TYPE: ClassVar[str] = "event.child_lifecycle"
    child_id: str
    supervisor: str
    event: str  # a LifecycleEvent
    pid: int | None
    restarts: int
    detail: str = ""
    exit_code: int | None = None  # exited / stopped: the return code (negative: the signal)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerReport(Message):
    """A runner's current status and load, sent on every change and every 2 s (the bus is
    lossy; the master indexes only status changes). The load (`active` in the batch,
    `waiting` behind it) is for routing and is never replicated state."""

    TYPE: ClassVar[str] = "event.runner_report"
    runner_id: str
    instance_id: str
    status: RunnerStatus
    active: int = 0
    waiting: int = 0
    phase: str = ""  # the flight recorder's current phase (a wire/flight.py Phase)
    tok_s: float = 0.0  # tokens generated per second over the last report interval (all requests)
    pid: int = 0
    tokens_total: int = 0  # tokens generated since the runner started (a counter: rates come from it)
    step_cpu_s: float = 0.0  # CPU seconds (all its threads) spent inside engine steps since it started
    step_wall_s: float = 0.0  # wall seconds spent inside engine steps since it started
