"""Pure decisions of the tree: strategy, restart type, budget, watchdog, back-off, exit codes."""

from __future__ import annotations

import signal

import pytest

from skulk.node import exitcodes
from skulk.supervisor.intensity import RestartBudget
from skulk.supervisor.strategy import affected, should_restart
from skulk.supervisor.watchdog import (
    SLOW_PATIENCE,
    ChildClock,
    Progress,
    RunState,
    boot_backoff_s,
    forgive,
    judge,
    others_silent,
    verdict,
)

IDS = ["a", "b", "c", "d"]


@pytest.mark.parametrize("strategy,failed,expected", [
    ("one_for_one", "b", ["b"]),
    ("simple_one_for_one", "c", ["c"]),
    ("one_for_all", "b", IDS),
    ("rest_for_one", "b", ["b", "c", "d"]),
    ("rest_for_one", "a", IDS),
    ("rest_for_one", "d", ["d"]),
])
def test_affected(strategy, failed, expected):
    assert affected(strategy, IDS, failed) == expected


def test_affected_rejects_unknown_child_and_strategy():
    with pytest.raises(ValueError):
        affected("one_for_one", IDS, "z")
    with pytest.raises(ValueError):
        affected("bogus", IDS, "a")  # type: ignore[arg-type]


@pytest.mark.parametrize("restart,code,expected", [
    ("permanent", 0, True), ("permanent", 1, True), ("permanent", -9, True),
    ("transient", 0, False), ("transient", -signal.SIGTERM, False), ("transient", 1, True),
    ("transient", -signal.SIGKILL, True), ("temporary", 1, False), ("temporary", -9, False),
])
def test_should_restart(restart, code, expected):
    assert should_restart(restart, code) is expected


def test_budget_allows_intensity_restarts_in_period_then_exceeds():
    budget = RestartBudget(3, 60.0)
    for t in (0.0, 1.0, 2.0):
        budget, exceeded = budget.record(t)
        assert not exceeded
    _, exceeded = budget.record(3.0)
    assert exceeded


def test_budget_forgets_restarts_older_than_the_period():
    budget = RestartBudget(2, 10.0)
    for t in (0.0, 5.0):
        budget, _ = budget.record(t)
    budget, exceeded = budget.record(10.5)  # the one at 0.0 has aged out
    assert not exceeded and budget.stamps == (5.0, 10.5)
    _, exceeded = budget.record(11.0)
    assert exceeded


def test_zero_intensity_escalates_on_first_failure():
    _, exceeded = RestartBudget(0, 5.0).record(100.0)
    assert exceeded


def test_watchdog_ready_deadline():
    clock = ChildClock(started_at=10.0, ready_timeout_s=5.0, heartbeat_s=1.0, liveness=3)
    assert clock.deadline() == 15.0
    assert verdict(clock, 14.99) is None
    assert verdict(clock, 15.0) == "ready_timeout"


def test_watchdog_heartbeats_after_ready():
    clock = ChildClock(0.0, 5.0, 1.0, 3).ready(2.0)
    assert verdict(clock, 4.9) is None and clock.deadline() == 5.0
    assert verdict(clock, 5.0) == "heartbeat_missed"
    clock = clock.beat(4.5)
    assert verdict(clock, 7.4) is None
    assert verdict(clock, 7.5) == "heartbeat_missed"


def test_a_long_step_is_judged_by_its_step_deadline_not_by_missed_beats():
    """A runner's loop inside one evaluation (a first-use compile): its watch thread reports the
    step and its age; the step may run to its deadline, then the runner is killed all the same."""
    clock = ChildClock(0.0, 5.0, 1.0, 10, step_deadline_s=300.0).ready(1.0).beat(10.0)
    assert verdict(clock, 20.0) == "heartbeat_missed"  # said nothing: the usual 10 beats
    in_step = clock.in_step(15.0, 5.0, "prefill step 0")  # the step began at 10.0
    assert in_step.step == "prefill step 0" and verdict(in_step, 20.0) is None
    assert verdict(in_step, 25.0) == "heartbeat_missed"  # its watch thread went quiet too (frozen)
    t, still = 15.0, in_step
    while t < 305.0:  # the watch thread keeps telling, every 2 s
        t += 2.0
        still = still.in_step(t, t - 10.0, "prefill step 0")
        assert verdict(still, t + 1.0) is None or t + 1.0 >= 310.0
    assert verdict(still, 310.0) == "step_deadline"  # the step's start is fixed: killed at its deadline
    assert verdict(in_step.beat(50.0), 60.1) == "heartbeat_missed"  # the step returned: beats again
    late = in_step.beat(50.0).in_step(51.0, 40.0, "prefill step 0")  # a report from before that beat
    assert late.step_since is None
    # A busy machine: the loop's last beat before the step (sent at 10.0) is read at 10.6, after
    # the step began at 10.05; the step's reports still count (the step did not return).
    busy = clock.beat(10.6).in_step(15.0, 4.95, "prefill step 1")
    assert busy.step_since == 10.05 and verdict(busy, 21.0) is None


def test_children_without_a_step_deadline_get_no_grace():
    clock = ChildClock(0.0, 5.0, 1.0, 3).ready(1.0)
    assert clock.in_step(2.0, 1.0, "x") == clock and verdict(clock.in_step(2.0, 1.0, "x"), 4.0) == "heartbeat_missed"
    booting = ChildClock(0.0, 5.0, 1.0, 3, step_deadline_s=300.0)
    assert booting.in_step(2.0, 1.0, "x") == booting  # boot has its own (ready) deadline


def test_boot_backoff_is_never_a_tight_loop():
    assert [boot_backoff_s(n) for n in range(7)] == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]


def test_exit_codes_in_plain_words():
    assert exitcodes.describe(-9) == "signal 9 (SIGKILL)"
    assert exitcodes.describe(-6) == "signal 6 (SIGABRT)"
    assert exitcodes.describe(70) == "exit code 70 (escalated)"
    assert exitcodes.describe(5) == "exit code 5"
    assert exitcodes.is_normal(0) and exitcodes.is_normal(-15) and not exitcodes.is_normal(1)


def test_forgive_restarts_the_liveness_window_after_the_supervisors_own_stall():
    clock = ChildClock(0.0, 5.0, 1.0, 3).ready(1.0)
    assert verdict(clock, 100.0) == "heartbeat_missed"
    assert verdict(forgive(clock, 100.0), 100.0) is None
    booting = ChildClock(0.0, 5.0, 1.0, 3)
    assert forgive(booting, 100.0).deadline() == 105.0


def test_judge_gives_a_late_child_that_makes_progress_another_window():
    clock = ChildClock(started_at=10.0, ready_timeout_s=5.0, heartbeat_s=1.0, liveness=3)
    working = Progress(cpu_s=0.3, window_s=3.0, state=RunState.SLEEPING)
    starved = Progress(cpu_s=0.0, window_s=3.0, state=RunState.RUNNABLE)  # waits for a CPU
    asleep = Progress(cpu_s=0.0, window_s=3.0, state=RunState.SLEEPING)  # a wedged device
    frozen = Progress(cpu_s=0.2, window_s=3.0, state=RunState.STOPPED)
    assert judge(clock, 14.0, asleep) == (clock, None)  # on time: nothing to weigh
    for seen in (working, starved):
        later, why = judge(clock, 15.0, seen)
        assert why is None and later.grace_until == 20.0 and later.graces == 1
        assert later.deadline() == 20.0 and verdict(later, 19.9) is None
    for seen in (asleep, frozen, None):
        assert judge(clock, 15.0, seen) == (clock, "ready_timeout")
    late, _ = judge(clock, 15.0, working)
    assert judge(late, 20.0, asleep)[1] == "ready_timeout"  # stopped making progress: killed
    assert late.ready(21.0).grace_until is None  # ready: judged by its beats from then on


def test_judge_stops_waiting_at_the_patience_limit():
    clock = ChildClock(started_at=0.0, ready_timeout_s=5.0, heartbeat_s=1.0, liveness=3)
    working = Progress(cpu_s=1.0, window_s=3.0, state=RunState.RUNNABLE)
    now, why = 5.0, None
    while why is None:
        clock, why = judge(clock, now, working)
        now = clock.deadline()
    assert why == "ready_timeout" and clock.deadline() == 5.0 * SLOW_PATIENCE


def test_judge_after_ready_weighs_missed_beats_the_same_way():
    clock = ChildClock(0.0, 5.0, 1.0, 3).ready(2.0)
    working = Progress(cpu_s=0.5, window_s=3.0, state=RunState.SLEEPING)
    late, why = judge(clock, 5.0, working)
    assert why is None and late.deadline() == 8.0
    assert late.beat(6.0).deadline() == 9.0  # a beat: back on its own window
    assert judge(late, 8.0, Progress(0.0, 3.0, RunState.SLEEPING))[1] == "heartbeat_missed"


def test_a_silent_idle_child_is_waited_for_only_while_its_siblings_are_silent_too():
    """Seen on a saturated 2-core machine: every role of a node missed its beats within one
    second, and the idle ones (asleep at 0 % CPU, as a wedged one is) were killed. One child
    silent among beating siblings is still killed at its window; one frozen, even among silent ones."""
    clock = ChildClock(0.0, 5.0, 1.0, 3).ready(2.0)  # last beat 2.0: overdue at 5.0
    asleep = Progress(0.0, 3.0, RunState.SLEEPING)
    beating = {"api": 2.0, "master": 4.6, "store": 4.8}
    stalled = {"api": 2.0, "master": 2.6, "store": 2.9}
    assert not others_silent("api", beating, 5.0, 1.0) and others_silent("api", stalled, 5.0, 1.0)
    assert not others_silent("api", {"api": 2.0, "master": 2.6}, 5.0, 1.0)  # one sibling is no quorum
    assert judge(clock, 5.0, asleep, quiet=False)[1] == "heartbeat_missed"
    late, why = judge(clock, 5.0, asleep, quiet=True)
    assert why is None and late.grace_until is not None
    assert judge(clock, 5.0, Progress(0.0, 3.0, RunState.STOPPED), quiet=True)[1] == "heartbeat_missed"
    assert judge(late, late.grace_until, asleep, quiet=False)[1] == "heartbeat_missed"  # the others beat again
    step = ChildClock(0.0, 5.0, 1.0, 10, step_deadline_s=30.0).ready(1.0).beat(2.0).in_step(10.0, 8.0, "prefill")
    assert judge(step, 40.0, asleep, quiet=True)[1] == "step_deadline"  # a step's own deadline stands


def test_a_step_past_its_deadline_is_killed_even_while_busy():
    clock = ChildClock(0.0, 5.0, 1.0, 10, step_deadline_s=30.0).ready(1.0).beat(2.0)
    clock = clock.in_step(20.0, 18.0, "prefill").in_step(31.0, 29.0, "prefill")
    working = Progress(cpu_s=3.0, window_s=3.0, state=RunState.RUNNABLE)
    assert judge(clock, 32.0, working)[1] == "step_deadline"


def test_a_missed_heartbeat_kill_says_what_the_child_was_seen_doing():
    from skulk.supervisor.watchdog_log import kill_line

    clock = ChildClock(0.0, 15.0, 1.0, 3).ready(1.0)
    idle = Progress(cpu_s=0.0, window_s=3.0, state=RunState.SLEEPING)
    _level, line = kill_line("master", 42, clock, "heartbeat_missed", 4.5, idle)
    assert line == "master (pid 42) missed 3 heartbeats (3.0s: 0.00s CPU in the last 3.0s, sleeping); killing it"
    assert "not readable" in kill_line("master", 42, clock, "heartbeat_missed", 4.5)[1]
    heard = kill_line("master", 42, clock.beat(2.0), "heartbeat_missed", 5.5, idle, beat_seq=7)[1]
    assert heard.endswith("sleeping; last heard beat #7 3.5s ago); killing it"), heard
