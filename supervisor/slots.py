"""What a supervisor keeps per child (`supervisor.py` drives them): a worker's process, state,
watchdog clock and restart bookkeeping; a nested supervisor; a queued stop-then-continue."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from skulk.supervisor.child import Process
from skulk.supervisor.spec import ChildSpec, SupervisorSpec
from skulk.supervisor.watchdog import ChildClock, Verdict

if TYPE_CHECKING:
    from skulk.supervisor.supervisor import Supervisor


@dataclass
class WorkerSlot:
    id: str
    spec: ChildSpec
    extra_args: tuple[str, ...] = ()
    proc: Process | None = None
    state: str = "stopped"  # starting | running | killing | stopping | stopped | waiting
    clock: ChildClock | None = None
    restarts: int = 0
    kill_at: float | None = None
    restart_at: float | None = None
    boot_failures: int = 0
    started_at: float | None = None
    killed_for: Verdict | None = None  # the watchdog's reason, while its kill is under way
    killed_at: float | None = None
    beat_seq: int = 0  # the last loop beat's number heard from this process (0: none yet)

    def alive(self) -> bool:
        return self.proc is not None


@dataclass
class SupervisorSlot:
    id: str
    spec: SupervisorSpec
    sup: Supervisor | None = None
    state: str = "stopped"
    restarts: int = 0
    started_at: float | None = None

    def alive(self) -> bool:
        return self.sup is not None and not self.sup.terminated


Slot = WorkerSlot | SupervisorSlot


@dataclass
class StopThen:
    """Stop `ids` one at a time (already in reverse start order), then run `then(now)`."""

    ids: list[str]
    then: Callable[[float], object]  # its result is not used
    restarting: frozenset[str] = frozenset()
    current: str | None = None
