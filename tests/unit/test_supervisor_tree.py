"""The Supervisor object's sequencing, driven with fake process handles and explicit `now`.

The node's own tree is one_for_one; these tests cover the other strategies, ordered stops,
escalation across levels, the watchdog and boot back-off without starting processes
(the integration tests do the same with real ones).
"""

from __future__ import annotations

from skulk.node import exitcodes
from skulk.supervisor.spec import SupervisorSpec
from skulk.supervisor.supervisor import Supervisor
from skulk.supervisor.watchdog import Progress, RunState
from tests.unit.supervisor_fakes import World, child, make


def unready(*children: str) -> tuple[Supervisor, World]:
    """A supervisor whose children were started at 0.0 and have not reported ready."""
    world = World()
    spec = SupervisorSpec(id="top", strategy="one_for_one", intensity=10, period_s=60.0,
                          children=tuple(child(c) for c in children))
    sup = Supervisor(spec, world.spawn, world.emit, world.on_terminated)  # type: ignore[arg-type]
    sup.start(0.0)
    return sup, world


def stop_in_turn(sup: Supervisor, world: World, now: float) -> list[str]:
    """Let each child that got SIGTERM exit, one at a time; return the order they were asked."""
    order = []
    while True:
        asked = [cid for cid, p in world.procs.items() if p.signals == ["TERM"] and p.returncode is None]
        if not asked:
            return order
        assert len(asked) == 1, f"more than one child stopping at once: {asked}"
        order.append(asked[0])
        world.exit(sup, asked[0], -15, now)


def test_one_for_all_stops_the_others_in_reverse_then_restarts_all_in_order():
    sup, world = make("one_for_all")
    world.exit(sup, "b", 1, 1.0)
    assert stop_in_turn(sup, world, 1.1) == ["d", "c", "a"]
    assert [c for e, c in world.log if e == "spawn"] == ["a", "b", "c", "d"]
    assert all(s.restarts == 1 for s in sup.slots.values())


def test_rest_for_one_restarts_the_failed_child_and_those_started_after_it():
    sup, world = make("rest_for_one")
    a_pid = world.procs["a"].pid
    world.exit(sup, "b", 1, 1.0)
    assert stop_in_turn(sup, world, 1.1) == ["d", "c"]
    assert [c for e, c in world.log if e == "spawn"] == ["b", "c", "d"]
    assert world.procs["a"].pid == a_pid and sup.slots["a"].restarts == 0


def test_budget_exhaustion_stops_everything_in_reverse_and_reports_escalated():
    sup, world = make("one_for_one", intensity=1)
    world.exit(sup, "c", 1, 1.0)
    world.ready_all(sup, 1.1)
    world.exit(sup, "c", 1, 2.0)
    assert stop_in_turn(sup, world, 2.1) == ["d", "b", "a"]
    assert world.terminated == [("top", exitcodes.ESCALATED)]
    assert sup.terminated


def test_manual_restarts_do_not_consume_the_budget():
    sup, world = make("one_for_one", intensity=0)
    for n in range(5):
        sup.restart_child("b", float(n))
        assert stop_in_turn(sup, world, float(n)) == ["b"]
        world.ready_all(sup, n + 0.5)
    assert not sup.terminating and sup.slots["b"].restarts == 5


def test_child_supervisor_escalation_is_a_failure_of_that_child_in_the_parent():
    inner = SupervisorSpec(id="inner", strategy="one_for_one", intensity=0, period_s=60.0,
                           children=(child("x"), child("y")))
    sup, world = make("one_for_one", children=("a", inner, "b"))
    world.exit(sup, "x", 1, 1.0)  # inner has no budget: it stops y, then escalates
    assert stop_in_turn(sup, world, 1.1) == ["y"]
    assert sup.slots["inner"].restarts == 1 and sup.slots["inner"].alive()
    assert [c for e, c in world.log if e == "spawn"] == ["x", "y"]
    assert world.procs["a"].signals == [] and not sup.terminating


def test_stop_escalates_to_sigkill_after_the_shutdown_time():
    sup, world = make("one_for_one", children=("a",))
    sup.stop(1.0)
    assert world.procs["a"].signals == ["TERM"]
    sup.tick(5.9)
    assert world.procs["a"].signals == ["TERM"]
    assert sup.next_deadline() == 6.0
    sup.tick(6.0)
    assert world.procs["a"].signals == ["TERM", "KILL"]
    world.exit(sup, "a", -9, 6.1)
    assert world.terminated == [("top", exitcodes.CLEAN)]


def test_watchdog_kills_a_child_that_never_reports_ready_and_restarts_it():
    sup, world = unready("a")
    assert sup.next_deadline() == 10.0
    sup.tick(10.0)
    assert world.procs["a"].signals == ["TERM"]
    first = world.procs["a"].pid
    world.exit(sup, "a", -15, 10.2)
    assert sup.slots["a"].state == "waiting"  # not booting in time is a boot failure: back-off
    sup.tick(11.2)
    assert world.procs["a"].pid != first and sup.slots["a"].restarts == 1


def busy(pid: int, now: float) -> Progress:
    return Progress(cpu_s=0.5, window_s=3.0, state=RunState.SLEEPING)


def idle(pid: int, now: float) -> Progress:
    return Progress(cpu_s=0.0, window_s=3.0, state=RunState.SLEEPING)


def test_a_late_child_making_progress_is_waited_for_and_an_idle_one_is_killed():
    world = World()
    spec = SupervisorSpec(id="top", strategy="one_for_one", intensity=10, period_s=60.0,
                          children=(child("busy"), child("idle")))
    verdicts = {"busy": busy, "idle": idle}
    pids: dict[int, str] = {}
    sup = Supervisor(spec, world.spawn, world.emit, world.on_terminated,  # type: ignore[arg-type]
                     probe=lambda pid, now: verdicts[pids[pid]](pid, now))
    sup.start(0.0)
    pids.update({p.pid: cid for cid, p in world.procs.items()})
    sup.tick(10.0)
    assert world.procs["busy"].signals == [] and world.procs["idle"].signals == ["TERM"]
    assert sup.next_deadline() == 15.0  # judged again after a short window, not at once
    sup.on_ready("busy", world.procs["busy"].pid, 42.0)
    assert sup.slots["busy"].state == "running" and sup.slots["busy"].restarts == 0


def test_a_busy_child_is_killed_at_the_patience_limit():
    world = World()
    spec = SupervisorSpec(id="top", strategy="one_for_one", intensity=10, period_s=60.0, children=(child("a"),))
    sup = Supervisor(spec, world.spawn, world.emit, world.on_terminated, probe=busy)  # type: ignore[arg-type]
    sup.start(0.0)
    now = 10.0
    while True:
        sup.tick(now)
        if world.procs["a"].signals:
            break
        now = sup.next_deadline() or now + 1
        assert now <= 100.0
    assert now == 100.0  # SLOW_PATIENCE x the 10 s ready deadline


def test_simultaneous_watchdog_kills_are_one_restart_to_the_budget():
    """A boot storm's stall kills every child at once: one charge, not one per child."""
    world = World()
    spec = SupervisorSpec(id="top", strategy="one_for_one", intensity=1, period_s=60.0,
                          children=tuple(child(c) for c in "abcd"))
    sup = Supervisor(spec, world.spawn, world.emit, world.on_terminated)  # type: ignore[arg-type]
    sup.start(0.0)
    sup.tick(10.0)
    for cid in "abcd":
        world.exit(sup, cid, -15, 10.5)
    assert world.terminated == [] and sup.budget.stamps == (10.5,)
    sup.tick(12.0)  # after the boot back-off, all four again
    assert all(s.restarts == 1 for s in sup.slots.values())
    world.exit(sup, "a", 1, 20.0)  # a crash is a charge of its own: 2 > 1 escalates
    assert world.terminated or sup.terminating


def test_missed_heartbeats_kill_a_ready_child():
    sup, world = make("one_for_one", children=("a",))
    sup.on_beat("a", world.procs["a"].pid, 1.0)
    sup.tick(3.9)
    assert world.procs["a"].signals == []
    sup.tick(4.0)
    assert world.procs["a"].signals == ["TERM"]


def test_beats_from_a_stale_pid_are_ignored():
    sup, world = make("one_for_one", children=("a",))
    assert sup.on_beat("a", 99999, 1.0, seq=5) is False
    assert sup.slots["a"].beat_seq == 0


def test_the_last_loop_beats_number_is_kept_for_the_kill_line():
    """A watch thread's step report is not a loop beat: the number stays the loop's last."""
    sup, world = make("one_for_one", children=("a",))
    pid = world.procs["a"].pid
    assert sup.on_beat("a", pid, 1.0, seq=3) and sup.slots["a"].beat_seq == 3
    assert sup.on_beat("a", pid, 1.5, step="prefill", step_age_s=2.5, seq=1) and sup.slots["a"].beat_seq == 3


def test_boot_failures_back_off_instead_of_looping():
    sup, world = unready("a")
    world.exit(sup, "a", exitcodes.BOOT_FAILURE, 0.5)
    assert sup.slots["a"].state == "waiting" and sup.next_deadline() == 1.5
    sup.tick(1.5)
    world.exit(sup, "a", exitcodes.BOOT_FAILURE, 1.6)
    assert sup.next_deadline() == 3.6  # 2 s after the second failure


def test_transient_and_temporary_children():
    sup, world = make("one_for_one", children=(child("t", "transient"), child("p", "temporary")))
    world.exit(sup, "t", 0, 1.0)
    world.exit(sup, "p", 1, 1.0)
    assert not sup.slots["t"].alive() and not sup.slots["p"].alive()
    assert [e for e in world.log if e[0] == "spawn"] == []


def test_simple_one_for_one_start_and_terminate_child():
    world = World()
    spec = SupervisorSpec(id="runners", strategy="simple_one_for_one", intensity=5, period_s=30.0,
                          template=child("runner", "transient"))
    sup = Supervisor(spec, world.spawn, world.emit, world.on_terminated)  # type: ignore[arg-type]
    sup.start(0.0)
    sup.start_child("r1", ("--rank", "0"), 1.0)
    assert sup.slots["r1"].extra_args == ("--rank", "0")
    sup.terminate_child("r1", 2.0)
    world.exit(sup, "r1", -15, 2.1)
    assert "r1" not in sup.slots
