"""A supervisor object: starts children in order, restarts them by strategy and budget,
stops them in reverse order, and escalates to its parent when the budget is exhausted.

It is driven entirely by its owner's poll loop (`handle_exit`, `on_ready`, `on_beat`, `tick`)
and never blocks: a stop is SIGTERM now and SIGKILL at `kill_at`, sequenced by an op queue.
Decisions come from the pure modules (strategy, intensity, watchdog).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from skulk.node import exitcodes
from skulk.supervisor.child import Process
from skulk.supervisor.exits import ExitKind, classify_exit
from skulk.supervisor.intensity import RestartBudget
from skulk.supervisor.slots import Slot, StopThen, SupervisorSlot, WorkerSlot
from skulk.supervisor.spec import ChildSpec, SupervisorSpec
from skulk.supervisor.strategy import affected, should_restart
from skulk.supervisor.watchdog import (
    ChildClock,
    Progress,
    Verdict,
    boot_backoff_s,
    forgive,
    judge,
    others_silent,
)
from skulk.supervisor.watchdog_log import kill_line, late_line, ready_late_line
from skulk.wire.control import ChildStatus
from skulk.wire.events import LifecycleEvent

log = logging.getLogger("skulk.supervisor")

Spawn = Callable[[ChildSpec, str, tuple[str, ...]], Process]
Probe = Callable[[int, float], Progress | None]
"""probe(pid, now): what the child did over its last seconds (`supervisor/probe.py`); None when
it cannot be read (the watchdog then kills at the deadline, as it would without a probe)."""

WATCHDOG_BATCH_S = 5.0
"""Watchdog kills this close together are one event to the restart budget: a machine that stalled
every child at once (a boot storm) is charged one restart, not one per child."""
Emit = Callable[..., None]
"""emit(child_id, supervisor_id, event (a LifecycleEvent), pid, restarts, detail[, exit_code])"""


@dataclass
class Supervisor:
    spec: SupervisorSpec
    spawn: Spawn
    emit: Emit
    on_terminated: Callable[[str, int, float], None]
    parent: Supervisor | None = None
    probe: Probe | None = None
    slots: dict[str, Slot] = field(default_factory=dict)
    budget: RestartBudget = field(init=False)
    terminated: bool = False
    terminating: bool = False
    _ops: deque[StopThen] = field(default_factory=deque)
    _charged_watchdog_at: float | None = None  # the watchdog kill last charged to the budget

    def __post_init__(self) -> None:
        self.budget = RestartBudget(self.spec.intensity, self.spec.period_s)
        for child in self.spec.children:
            self.slots[child.id] = (WorkerSlot(child.id, child) if isinstance(child, ChildSpec)
                                    else SupervisorSlot(child.id, child))

    # ---- lifecycle -------------------------------------------------------------------
    def start(self, now: float) -> None:
        """Start every child in declaration order (boot does not wait for ready)."""
        self._start_ids(list(self.slots), now)

    def stop(self, now: float, reason: str = "stop") -> None:
        """Orderly stop: every live child in reverse start order, then report CLEAN."""
        self._terminate(now, exitcodes.CLEAN, reason)

    def _terminate(self, now: float, code: int, reason: str) -> None:
        if self.terminating:
            return
        self.terminating = True
        self._ops.clear()
        for slot in self.slots.values():
            if isinstance(slot, WorkerSlot) and slot.state == "waiting":
                slot.state, slot.restart_at = "stopped", None
        log.info("supervisor %s stopping all children (%s)", self.spec.id, reason)
        ids = [i for i in reversed(self.slots) if self.slots[i].alive()]
        self._ops.append(StopThen(ids, lambda t: self._finish(code, t)))
        self._drive(now)

    def _finish(self, code: int, now: float) -> None:
        self.terminated = True
        self.on_terminated(self.spec.id, code, now)

    def stopping(self) -> bool:
        """This supervisor or one above it is stopping its children: nothing is restarted, and
        a child that ends by the stop signal (sent to the whole group) is simply stopped."""
        return self.terminating or (self.parent is not None and self.parent.stopping())

    # ---- events from the loop -------------------------------------------------------
    def on_ready(self, child_id: str, pid: int, now: float) -> bool:
        slot = self.slots.get(child_id)
        if not isinstance(slot, WorkerSlot) or slot.proc is None or slot.proc.pid != pid:
            return False
        if slot.state == "starting" and slot.clock is not None:
            if slot.clock.graces:
                log.warning("%s", ready_late_line(child_id, pid, slot.clock, now))
            else:
                log.info("%s ready (pid %d)", child_id, pid)
            slot.state, slot.clock, slot.boot_failures = "running", slot.clock.ready(now), 0
            self.emit(child_id, self.spec.id, LifecycleEvent.READY, pid, slot.restarts, "")
        return True

    def on_beat(self, child_id: str, pid: int, now: float, step: str = "", step_age_s: float = 0.0,
                seq: int = 0) -> bool:
        """A beat from the child's loop (`seq`: its number), or (`step`) from its watch thread
        while the loop is inside one long step (`watchdog.ChildClock.in_step`)."""
        slot = self.slots.get(child_id)
        if not isinstance(slot, WorkerSlot) or slot.proc is None or slot.proc.pid != pid:
            return False
        if not step:
            slot.beat_seq = seq
        if slot.clock is not None and slot.clock.ready_at is not None:
            slot.clock = slot.clock.in_step(now, step_age_s, step) if step else slot.clock.beat(now)
        return True

    def handle_exit(self, child_id: str, returncode: int, now: float, words: str = "") -> None:
        """A child process (or child supervisor) has ended with `returncode`; `words`: the reason
        the child left for its exit (`node/last_words.py`), told after the code."""
        slot = self.slots[child_id]
        prev = slot.state
        pid = slot.proc.pid if isinstance(slot, WorkerSlot) and slot.proc else None
        killed_for, killed_at = (slot.killed_for, slot.killed_at) if isinstance(slot, WorkerSlot) else (None, None)
        if isinstance(slot, WorkerSlot):
            slot.proc, slot.kill_at, slot.killed_for, slot.killed_at = None, None, None, None
        else:
            slot.sup = None
        slot.state = "stopped"
        detail = exitcodes.describe(returncode) if isinstance(slot, WorkerSlot) else (
            "escalated" if returncode == exitcodes.ESCALATED else "stopped")
        if words:
            detail = f"{detail}: {words}"
        if classify_exit(prev, returncode, self.stopping()) is ExitKind.STOPPED:
            log.info("%s stopped (pid %s, %s)", child_id, pid, detail)
            self.emit(child_id, self.spec.id, LifecycleEvent.STOPPED, pid, slot.restarts, detail, returncode)
            self._drive(now)
            return
        log.warning("%s exited unexpectedly (pid %s, %s, was %s)", child_id, pid, detail, prev)
        self.emit(child_id, self.spec.id, LifecycleEvent.EXITED, pid, slot.restarts, detail, returncode)
        if self.stopping() or any(child_id in op.restarting for op in self._ops):
            self._drive(now)
            return
        restart = slot.spec.restart
        if not should_restart(restart, returncode):
            log.info("%s not restarted (%s child, %s)", child_id, restart, detail)
            if self.spec.strategy == "simple_one_for_one":
                del self.slots[child_id]
            return
        # a child killed for not booting in time is retried with the boot back-off, as one
        # that failed to boot: never in a tight loop
        boot_failed = (prev == "starting" and returncode == exitcodes.BOOT_FAILURE) \
            or killed_for == LifecycleEvent.READY_TIMEOUT
        self._on_failure(slot, now, boot_failed, killed_at)

    def _on_failure(self, slot: Slot, now: float, boot_failed: bool, killed_at: float | None = None) -> None:
        if killed_at is not None and self._charged_watchdog_at is not None \
                and abs(killed_at - self._charged_watchdog_at) < WATCHDOG_BATCH_S:
            exceeded = False  # one of a batch of watchdog kills already charged (see WATCHDOG_BATCH_S)
        else:
            if killed_at is not None:
                self._charged_watchdog_at = killed_at
            self.budget, exceeded = self.budget.record(now)
        if exceeded:
            log.error("supervisor %s: restart intensity %d in %.0fs exceeded by %s; escalating",
                      self.spec.id, self.spec.intensity, self.spec.period_s, slot.id)
            self.emit(slot.id, self.spec.id, LifecycleEvent.ESCALATE, None, slot.restarts,
                      f"budget {self.spec.intensity}/{self.spec.period_s:.0f}s exhausted")
            self._terminate(now, exitcodes.ESCALATED, f"{slot.id} exhausted the restart budget")
            return
        if isinstance(slot, WorkerSlot):
            slot.boot_failures = slot.boot_failures + 1 if boot_failed else 0
        ids = affected(self.spec.strategy, list(self.slots), slot.id)
        others = [i for i in reversed(ids) if i != slot.id and self.slots[i].alive()]
        self._ops.append(StopThen(others, lambda t: self._start_ids(ids, t, counted=True),
                                   restarting=frozenset(ids)))
        self._drive(now)

    def tick(self, now: float) -> None:
        """Watchdog verdicts, SIGKILL deadlines and delayed restarts that are due.

        While stopping, the watchdog rests and nothing is restarted: children leave on their
        own (a whole-group signal) or when the stop sequence reaches them, SIGKILL `shutdown_s`
        after their SIGTERM."""
        watch = not self.stopping()
        beats = {slot.id: slot.clock.last_beat for slot in self.slots.values()
                 if isinstance(slot, WorkerSlot) and slot.state == "running" and slot.clock is not None
                 and slot.clock.last_beat is not None}
        for slot in list(self.slots.values()):
            if isinstance(slot, SupervisorSlot):
                if slot.sup is not None:
                    slot.sup.tick(now)
                continue
            if slot.proc is not None and slot.kill_at is not None and now >= slot.kill_at:
                log.warning("%s did not stop within %.1fs; SIGKILL", slot.id, slot.spec.shutdown_s)
                slot.proc.kill()
                slot.kill_at = None
            if watch and slot.state in ("starting", "running") and slot.clock is not None \
                    and slot.proc is not None and now >= slot.clock.deadline():
                progress = self.probe(slot.proc.pid, now) if self.probe is not None else None
                late = slot.clock.grace_until is not None
                quiet = others_silent(slot.id, beats, now, slot.clock.heartbeat_s)
                slot.clock, why = judge(slot.clock, now, progress, quiet)
                if why is not None:
                    self._watchdog_kill(slot, why, now, progress)
                elif not late and slot.clock.grace_until is not None and progress is not None:
                    log.warning("%s", late_line(slot.id, slot.proc.pid, slot.clock, progress, quiet))
            if watch and slot.state == "waiting" and slot.restart_at is not None and now >= slot.restart_at:
                slot.restart_at = None
                self._start_worker(slot, now)

    def forgive(self, now: float) -> None:
        """After the supervisor's own stall: every child's liveness window starts again now."""
        for slot in self.slots.values():
            if isinstance(slot, SupervisorSlot):
                if slot.sup is not None:
                    slot.sup.forgive(now)
            elif slot.clock is not None and slot.state in ("starting", "running"):
                slot.clock = forgive(slot.clock, now)

    def _watchdog_kill(self, slot: WorkerSlot, why: Verdict, now: float, progress: Progress | None = None) -> None:
        assert slot.proc is not None and slot.clock is not None
        log.log(*kill_line(slot.id, slot.proc.pid, slot.clock, why, now, progress, slot.beat_seq))
        self.emit(slot.id, self.spec.id, why, slot.proc.pid, slot.restarts, "watchdog kill")
        slot.state, slot.killed_for, slot.killed_at = "killing", why, now
        slot.proc.terminate()
        slot.kill_at = now + slot.spec.shutdown_s

    # ---- operator verbs ---------------------------------------------------------------
    def restart_child(self, child_id: str, now: float) -> None:
        """Manual restart: stop then start; does not consume the restart budget."""
        self._ops.append(StopThen([child_id] if self.slots[child_id].alive() else [],
                                   lambda t: self._start_ids([child_id], t, counted=True),
                                   restarting=frozenset([child_id])))
        self._drive(now)

    def start_child(self, child_id: str, args: tuple[str, ...], now: float) -> None:
        """simple_one_for_one: a new child from the template with extra arguments."""
        if self.spec.strategy != "simple_one_for_one" or self.spec.template is None:
            raise ValueError(f"{self.spec.id} is not a simple_one_for_one supervisor")
        if child_id in self.slots:
            raise ValueError(f"{child_id} already exists")
        self.slots[child_id] = WorkerSlot(child_id, self.spec.template, extra_args=args)
        self._start_ids([child_id], now)

    def terminate_child(self, child_id: str, now: float) -> None:
        """Stop a dynamic child for good and forget it."""
        if self.spec.strategy != "simple_one_for_one":
            raise ValueError(f"{self.spec.id} is not a simple_one_for_one supervisor")
        slot = self.slots[child_id]
        if isinstance(slot, WorkerSlot) and slot.state == "waiting":
            slot.state = "stopped"
        self._ops.append(StopThen([child_id] if slot.alive() else [],
                                   lambda _t: self.slots.pop(child_id, None),
                                   restarting=frozenset([child_id])))
        self._drive(now)

    # ---- internals ----------------------------------------------------------------------
    def _start_ids(self, ids: list[str], now: float, counted: bool = False) -> None:
        if self.stopping():  # a restart under way in a child supervisor ends with the node
            return
        for child_id in ids:
            slot = self.slots.get(child_id)
            if slot is None or slot.alive():
                continue
            if counted:
                slot.restarts += 1
            if isinstance(slot, SupervisorSlot):
                self._start_supervisor(slot, now)
                continue
            delay = boot_backoff_s(slot.boot_failures)
            if delay > 0:
                log.warning("%s failed to boot %d time(s); restarting in %.0fs",
                            child_id, slot.boot_failures, delay)
                slot.state, slot.restart_at = "waiting", now + delay
            else:
                self._start_worker(slot, now)

    def _start_worker(self, slot: WorkerSlot, now: float) -> None:
        try:
            slot.proc = self.spawn(slot.spec, slot.id, slot.extra_args)
        except OSError as exc:
            log.error("%s could not be spawned: %s", slot.id, exc)
            slot.state = "starting"
            self.handle_exit(slot.id, exitcodes.BOOT_FAILURE, now)
            return
        slot.state, slot.started_at, slot.beat_seq = "starting", now, 0
        slot.clock = ChildClock(now, slot.spec.ready_timeout_s, slot.spec.heartbeat_s,
                                slot.spec.liveness, step_deadline_s=slot.spec.step_deadline_s)
        log.info("%s started (pid %d%s)", slot.id, slot.proc.pid, ", forked" if slot.proc.forked else "")
        self.emit(slot.id, self.spec.id, LifecycleEvent.STARTED, slot.proc.pid, slot.restarts, "")

    def _start_supervisor(self, slot: SupervisorSlot, now: float) -> None:
        slot.sup = Supervisor(slot.spec, self.spawn, self.emit, self.handle_exit, parent=self, probe=self.probe)
        slot.state, slot.started_at = "running", now
        slot.sup.start(now)
        self.emit(slot.id, self.spec.id, LifecycleEvent.STARTED, None, slot.restarts, "supervisor")

    def _drive(self, now: float) -> None:
        """Advance the op at the head of the queue: stop one child at a time, then continue."""
        while self._ops:
            op = self._ops[0]
            if op.current is not None and self.slots.get(op.current) is not None \
                    and self.slots[op.current].alive():
                return
            op.current = None
            while op.ids and not (op.ids[0] in self.slots and self.slots[op.ids[0]].alive()):
                op.ids.pop(0)
            if not op.ids:
                self._ops.popleft()
                op.then(now)
                continue
            op.current = op.ids.pop(0)
            self._request_stop(self.slots[op.current], now)
            return

    def _request_stop(self, slot: Slot, now: float) -> None:
        slot.state = "stopping"
        if isinstance(slot, SupervisorSlot):
            assert slot.sup is not None
            slot.sup.stop(now, reason="parent stopping it")
            return
        assert slot.proc is not None
        slot.proc.terminate()
        slot.kill_at = now + slot.spec.shutdown_s

    # ---- queries ------------------------------------------------------------------------
    def workers(self) -> Iterator[tuple[Supervisor, WorkerSlot]]:
        for slot in list(self.slots.values()):
            if isinstance(slot, WorkerSlot):
                yield self, slot
            elif slot.sup is not None:
                yield from slot.sup.workers()

    def find(self, child_id: str) -> tuple[Supervisor, Slot] | None:
        if child_id in self.slots:
            return self, self.slots[child_id]
        for slot in self.slots.values():
            if isinstance(slot, SupervisorSlot) and slot.sup is not None:
                found = slot.sup.find(child_id)
                if found:
                    return found
        return None

    def next_deadline(self) -> float | None:
        times: list[float] = []
        watch = not self.stopping()  # as in `tick`: no watchdog or restart deadlines while stopping
        for slot in self.slots.values():
            if isinstance(slot, SupervisorSlot):
                if slot.sup is not None and (t := slot.sup.next_deadline()) is not None:
                    times.append(t)
                continue
            if slot.kill_at is not None:
                times.append(slot.kill_at)
            if watch and slot.restart_at is not None:
                times.append(slot.restart_at)
            if watch and slot.state in ("starting", "running") and slot.clock is not None:
                times.append(slot.clock.deadline())
        return min(times) if times else None

    def status(self, now: float) -> list[ChildStatus]:
        rows: list[ChildStatus] = []
        for slot in self.slots.values():
            proc = slot.proc if isinstance(slot, WorkerSlot) else None
            uptime = round(now - slot.started_at, 3) if slot.alive() and slot.started_at else None
            rows.append(ChildStatus(
                id=slot.id, supervisor=self.spec.id, kind="worker" if isinstance(slot, WorkerSlot) else "supervisor",
                pid=proc.pid if proc else None, state=slot.state, restarts=slot.restarts, uptime_s=uptime,
                forked=bool(proc and proc.forked), standby=bool(proc and proc.standby)))
            if isinstance(slot, SupervisorSlot) and slot.sup is not None:
                rows.extend(slot.sup.status(now))
        return rows

