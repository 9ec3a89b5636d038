"""A whole-group stop (systemd's control-group kill, Ctrl-C) as the tree sees it: children that
end by the stop signal are stopped, not failed; failures while not stopping are unchanged."""

from __future__ import annotations

import os
import signal

import pytest

from skulk.node import exitcodes, last_words
from skulk.supervisor.exits import ExitKind, classify_exit
from skulk.supervisor.spec import SupervisorSpec
from tests.unit.supervisor_fakes import World, child, make

TERM, INT, HUP, KILL = -signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP, -signal.SIGKILL


@pytest.mark.parametrize("prev,code,stopping,expected", [
    # asked by its supervisor: always a stop, however it ended
    ("stopping", 0, False, ExitKind.STOPPED), ("stopping", KILL, True, ExitKind.STOPPED),
    ("stopping", 1, False, ExitKind.STOPPED),
    # the stop signal reached it before its supervisor did (group signal)
    ("running", 0, True, ExitKind.STOPPED), ("running", TERM, True, ExitKind.STOPPED),
    ("running", INT, True, ExitKind.STOPPED), ("running", HUP, True, ExitKind.STOPPED),
    ("starting", TERM, True, ExitKind.STOPPED), ("starting", 0, True, ExitKind.STOPPED),
    # a real failure during a stop is still reported
    ("running", 1, True, ExitKind.EXITED), ("running", KILL, True, ExitKind.EXITED),
    ("running", exitcodes.BOOT_FAILURE, True, ExitKind.EXITED),
    ("killing", 1, True, ExitKind.EXITED),
    # not stopping: every exit it was not asked for is a failure, a clean one too
    ("running", 0, False, ExitKind.EXITED), ("running", TERM, False, ExitKind.EXITED),
    ("running", INT, False, ExitKind.EXITED), ("starting", 0, False, ExitKind.EXITED),
    ("killing", TERM, False, ExitKind.EXITED),
])
def test_classify_exit(prev, code, stopping, expected):
    assert classify_exit(prev, code, stopping) is expected


def events(world: World) -> list[tuple[str, str]]:
    return [e for e in world.log if e[0] in ("stopped", "exited", "spawn")]


def test_children_ending_by_a_group_signal_are_stopped_without_restart_or_budget():
    sup, world = make("one_for_one", intensity=0)  # any failure would escalate at once
    sup.stop(1.0)  # the supervisor's own SIGTERM: it asks d first ...
    assert world.procs["d"].signals == ["TERM"]
    for cid, code in (("a", 0), ("b", INT), ("c", TERM)):  # ... the others leave on their own
        world.exit(sup, cid, code, 1.1)
    world.exit(sup, "d", 0, 1.2)
    assert events(world) == [("stopped", "a"), ("stopped", "b"), ("stopped", "c"), ("stopped", "d")]
    assert world.terminated == [("top", exitcodes.CLEAN)]
    assert sup.budget.stamps == ()
    assert all(p.signals in ([], ["TERM"]) for p in world.procs.values())


def test_a_crash_during_the_stop_is_reported_but_not_restarted():
    sup, world = make("one_for_one", intensity=0)
    sup.stop(1.0)
    world.exit(sup, "a", 1, 1.1)
    world.exit(sup, "d", TERM, 1.2)
    for cid in ("c", "b"):
        world.exit(sup, cid, TERM, 1.3)
    assert events(world) == [("exited", "a"), ("stopped", "d"), ("stopped", "c"), ("stopped", "b")]
    assert world.terminated == [("top", exitcodes.CLEAN)]


def test_a_clean_exit_while_not_stopping_is_still_a_failure_and_restarted():
    sup, world = make("one_for_one")
    first = world.procs["b"].pid
    world.exit(sup, "b", 0, 1.0)
    assert events(world) == [("exited", "b"), ("spawn", "b")]
    assert world.procs["b"].pid != first and sup.slots["b"].restarts == 1
    assert len(sup.budget.stamps) == 1 and not sup.terminating


def test_an_exit_record_carries_the_childs_own_words_after_its_code(tmp_path):
    """The words a child left (`last_words`) reach the exit record, whatever order its bus
    reports and its exit arrive in; taken once, so a later child with the same pid finds none."""
    sup, world = make("one_for_one")
    world.exit(sup, "a", exitcodes.ENGINE_REFUSED, 1.0, "llama_cpp cannot run m: a damaged file")
    world.exit(sup, "b", -signal.SIGKILL, 1.1)
    assert world.details == ["exit code 88 (the engine cannot run this checkpoint): llama_cpp cannot run m: "
                             "a damaged file", "signal 9 (SIGKILL)"]
    last_words.leave(tmp_path, "cannot load model.gguf:\n  truncated   at 1 MiB" + "x" * 5000)
    words = last_words.take(tmp_path, os.getpid())
    assert words.startswith("cannot load model.gguf: truncated at 1 MiB") and len(words) <= last_words.LIMIT
    assert last_words.take(tmp_path, os.getpid()) == "" and last_words.take(tmp_path / "none", 1) == ""
    last_words.leave(tmp_path, "left by a node killed before its supervisor read it")
    last_words.clear(tmp_path)  # the next start's
    assert last_words.take(tmp_path, os.getpid()) == ""


def test_a_child_supervisor_not_yet_asked_knows_its_parent_is_stopping():
    inner = SupervisorSpec(id="inner", strategy="one_for_one", intensity=0, period_s=60.0,
                           children=(child("x"), child("y")))
    sup, world = make("one_for_one", children=("a", inner, "b"))
    sup.stop(1.0)  # b is asked first; inner's children get the group signal meanwhile
    world.exit(sup, "x", INT, 1.1)
    world.exit(sup, "y", 1, 1.1)  # a crash: reported, yet neither restarted nor escalated
    assert ("spawn", "x") not in world.log and ("spawn", "y") not in world.log
    assert ("stopped", "x") in world.log and ("exited", "y") in world.log
    world.exit(sup, "b", TERM, 1.2)
    world.exit(sup, "a", TERM, 1.3)
    assert world.terminated == [("top", exitcodes.CLEAN)]
    assert sup.slots["inner"].restarts == 0


def test_the_watchdog_rests_while_stopping():
    sup, world = make("one_for_one", children=("a", "b"))
    sup.stop(1.0)  # b asked first; a has stopped beating (it is leaving on its own)
    assert sup.next_deadline() == 6.0  # b's SIGKILL deadline, not a's liveness deadline (3.1)
    sup.tick(5.0)
    assert world.procs["a"].signals == []


def test_a_child_supervisor_restarting_when_the_node_stops_starts_nothing():
    inner = SupervisorSpec(id="inner", strategy="one_for_all", intensity=5, period_s=60.0,
                           children=(child("x"), child("y")))
    sup, world = make("one_for_one", children=(inner, "a"))
    world.exit(sup, "x", 1, 1.0)  # inner restarts both: y is asked to stop first ...
    assert world.procs["y"].signals == ["TERM"]
    world.log.clear()
    sup.stop(1.1)  # ... and the node stops meanwhile (a first: inner is not asked yet)
    assert world.procs["a"].signals == ["TERM"] and not sup.slots["inner"].sup.terminating
    world.exit(sup, "y", TERM, 1.2)
    assert ("spawn", "x") not in world.log and ("spawn", "y") not in world.log
    world.exit(sup, "a", TERM, 1.3)
    assert world.terminated == [("top", exitcodes.CLEAN)]


def test_a_delayed_restart_is_dropped_when_the_node_stops():
    inner = SupervisorSpec(id="inner", strategy="one_for_one", intensity=5, period_s=60.0,
                           children=(child("x"),))
    sup, world = make("one_for_one", children=(inner, "a"))
    world.exit(sup, "x", exitcodes.BOOT_FAILURE, 1.0)
    world.exit(sup, "x", exitcodes.BOOT_FAILURE, 1.0)  # restarted at once; now 1 s of back-off
    assert sup.slots["inner"].sup.slots["x"].state == "waiting"
    sup.stop(1.5)  # a is asked first; inner's delayed restart must not happen meanwhile
    assert sup.next_deadline() == 6.5  # a's SIGKILL deadline only (no 2.0 restart, no busy loop)
    world.log.clear()
    sup.tick(3.0)
    assert ("spawn", "x") not in world.log
    world.exit(sup, "a", TERM, 3.1)
    assert world.terminated == [("top", exitcodes.CLEAN)]
