"""A `Supervisor` without processes: fake process handles (`FakeProc`), the `World` that spawns
them and hears the supervisor's events, a child's spec (`child`) and a started tree whose
children are all ready (`make`). Time is the tests' explicit `now`."""

from __future__ import annotations

from dataclasses import dataclass, field

from skulk.supervisor.spec import ChildSpec, SupervisorSpec
from skulk.supervisor.supervisor import Supervisor


@dataclass
class FakeProc:
    pid: int
    returncode: int | None = None
    forked: bool = False
    standby: bool = False
    signals: list[str] = field(default_factory=list)

    def poll(self) -> int | None:
        return self.returncode

    def terminate(self) -> None:
        self.signals.append("TERM")

    def kill(self) -> None:
        self.signals.append("KILL")


class World:
    def __init__(self) -> None:
        self.procs: dict[str, FakeProc] = {}
        self.log: list[tuple[str, str]] = []
        self.terminated: list[tuple[str, int]] = []
        self.details: list[str] = []  # each stop's or exit's detail, in order
        self._pid = 100

    def spawn(self, spec: ChildSpec, child_id: str, extra: tuple[str, ...]) -> FakeProc:
        self._pid += 1
        self.procs[child_id] = FakeProc(self._pid)
        self.log.append(("spawn", child_id))
        return self.procs[child_id]  # type: ignore[return-value]

    def emit(self, child_id, sup, event, pid, restarts, detail, exit_code=None) -> None:
        if event in ("stopped", "exited"):
            self.log.append((event, child_id))
            self.details.append(detail)

    def on_terminated(self, sup_id: str, code: int, now: float) -> None:
        self.terminated.append((sup_id, code))

    def exit(self, sup: Supervisor, child_id: str, code: int, now: float, words: str = "") -> None:
        """The process ends (leaving `words`): the loop reaps it and tells its owner."""
        self.procs[child_id].returncode = code
        for owner, slot in list(sup.workers()):
            if slot.id == child_id:
                owner.handle_exit(child_id, code, now, words)

    def ready_all(self, sup: Supervisor, now: float) -> None:
        for owner, slot in sup.workers():
            if slot.proc is not None:
                owner.on_ready(slot.id, slot.proc.pid, now)


def child(cid: str, restart: str = "permanent") -> ChildSpec:
    return ChildSpec(id=cid, module="m", title=cid, restart=restart, shutdown_s=5.0,  # type: ignore[arg-type]
                     ready_timeout_s=10.0, heartbeat_s=1.0, liveness=3)


def make(strategy: str, intensity: int = 5, children=("a", "b", "c", "d"), world=None):
    world = world or World()
    spec = SupervisorSpec(id="top", strategy=strategy, intensity=intensity, period_s=60.0,  # type: ignore[arg-type]
                          children=tuple(child(c) if isinstance(c, str) else c for c in children))
    sup = Supervisor(spec, world.spawn, world.emit, world.on_terminated)  # type: ignore[arg-type]
    sup.start(0.0)
    world.ready_all(sup, 0.1)
    world.log.clear()
    return sup, world
