"""The diagnostics' pure parts on one node: the API's runner view, `/health`'s rule, the runner
and node documents, the cancel plan (the cluster-wide views: test_diagnostics_cluster.py)."""

from __future__ import annotations

from pathlib import Path

import falcon
import pytest

from skulk.cluster.state import RunnerStatus, Task, TaskParams
from skulk.services.api.links.bus_feed import RECORD_MAX_BYTES, recv_bounded
from skulk.services.api.observe import diagnostics_host as host
from skulk.services.api.observe.diagnostics import plan_cancel
from skulk.services.api.observe.diagnostics_node import NODE_DIAGNOSTICS, NodeFacts, node_diagnostics
from skulk.services.api.observe.diagnostics_runners import (
    FLIGHT_ENTRY,
    STUCK_S,
    entry_json,
    runner_warnings,
    runners_json,
    shown_phase,
)
from skulk.services.api.observe.health import REPORT_STALE_S, busy
from skulk.services.api.observe.runner_view import (
    FORGET_AFTER_S,
    MAX_RUNNERS,
    REMEMBER_NODE_S,
    RING,
    RunnerView,
)
from skulk.wire.cluster import Member, Membership
from skulk.wire.events import RunnerReport
from skulk.wire.flight import MlxMemory
from tests.unit.diagnostics_builders import CARD, GIB, T0, entry, node, pipeline_state, report, validate

# ---- the runner view ----------------------------------------------------------------------------

def test_the_view_keeps_the_latest_report_and_a_bounded_ring_of_entries():
    view = RunnerView()
    view.on_message(report(active=1), T0)
    for seq in range(RING + 10):
        view.on_message(entry(seq=seq, at=T0 + seq), T0 + seq)
    view.on_message(entry(seq=5), T0 + 400)  # a stale duplicate from the same process
    seen = view.runners()["r0"]
    assert seen.report is not None and seen.report.active == 1 and seen.reported_at == T0
    assert len(seen.entries) == RING and seen.entries[0].seq == 10 and seen.entries[-1].seq == RING + 9
    view.on_message(entry(seq=0, pid=200), T0 + 500)  # a new process of that runner starts again at 0
    assert view.runners()["r0"].entries[-1].pid == 200
    seen.entries.clear()  # a copy: the reader cannot change the view
    assert len(view.runners()["r0"].entries) == RING


def test_the_view_dates_status_changes_and_forgets_runners_gone_for_good():
    placed: set[str] = {"r0"}
    view = RunnerView(lambda: frozenset(placed))
    view.on_message(report("r0", kind="RunnerLoading"), T0)
    view.on_message(report("r0", kind="RunnerLoading"), T0 + 2)
    view.on_message(report("r0", kind="RunnerReady"), T0 + 4)
    view.on_message(report("gone"), T0)
    assert view.runners()["r0"].status_since == T0 + 4
    view.prune(T0 + FORGET_AFTER_S + 10)
    assert set(view.runners()) == {"r0"}  # silent too, but still placed here (a frozen rank)
    placed.clear()
    view.prune(T0 + FORGET_AFTER_S + 10)
    assert view.runners() == {}


def test_the_view_remembers_nodes_gossip_listed():
    view = RunnerView()
    view.on_message(Membership(node_id="n1", members=(Member(info=node("n1"), master_endpoint=""),
                                                      Member(info=node("n2"), master_endpoint=""))), T0)
    view.on_message(Membership(node_id="n1", members=(Member(info=node("n1"), master_endpoint=""),)), T0 + 100)
    assert view.nodes()["n2"][1] == T0 and view.nodes()["n1"][1] == T0 + 100
    view.prune(T0 + REMEMBER_NODE_S + 50)
    assert set(view.nodes()) == {"n1"}


# ---- /health ------------------------------------------------------------------------------------

def test_busy_while_a_fresh_report_has_requests_in_its_batch():
    view = RunnerView()
    view.on_message(report("a", active=0), T0)
    assert not busy(view.runners().values(), T0)
    view.on_message(report("b", active=2), T0)
    assert busy(view.runners().values(), T0 + 1)
    assert not busy(view.runners().values(), T0 + REPORT_STALE_S + 1)  # died or froze mid-request


@pytest.mark.parametrize("phase,is_busy", [("task_submission", True), ("prefill_pipeline", True),
                                           ("decode_stream", True), ("decode_barrier", True), ("idle", False),
                                           ("completion", False), ("load_model", False)])
def test_busy_while_the_latest_entry_is_in_a_working_phase(phase, is_busy):
    """A load change inside the runner's report window shows in its entries first."""
    view = RunnerView()
    view.on_message(report("a", active=0), T0)
    view.on_message(entry("a", 0, T0, "decode_stream"), T0)
    view.on_message(entry("a", 1, T0 + 1, phase), T0 + 1)
    assert busy(view.runners().values(), T0 + 2) == is_busy
    assert not busy(view.runners().values(), T0 + 1 + REPORT_STALE_S + 1)


def test_the_newest_word_decides_between_a_report_and_an_entry():
    view = RunnerView()
    view.on_message(report("a", active=1), T0)
    view.on_message(entry("a", 0, T0 + 0.5, "completion"), T0 + 0.5)  # the load report was held back
    assert not busy(view.runners().values(), T0 + 1)
    view.on_message(entry("a", 1, T0 + 0.6, "decode_stream"), T0 + 0.6)
    view.on_message(report("a", active=0, phase="decode_stream"), T0 + 0.7)  # one report behind
    assert busy(view.runners().values(), T0 + 1)


# ---- one node's runners -------------------------------------------------------------------------

def test_unknown_phases_show_as_idle_with_the_runners_word_kept():
    assert shown_phase("decode_stream") == "decode_stream" and shown_phase("warp_drive") == "idle"
    e = entry_json(entry(phase="warp_drive"), None)
    assert e["phase"] == "idle" and e["attrs"] == {"runnerPhase": "warp_drive"}
    validate(FLIGHT_ENTRY, e)


def test_runners_are_the_placed_ones_and_the_heard_ones_sorted_with_their_phase_clock():
    view = RunnerView()
    mem = MlxMemory(at=T0 + 1, active=10, cache=None, peak=30)
    view.on_message(report("r0", active=1, tok_s=12.5, phase="decode_stream"), T0 + 2)
    view.on_message(entry("r0", 0, T0 + 1, "prefill_stream", mem=mem, task="t1"), T0 + 1)
    view.on_message(entry("r0", 1, T0 + 2, "decode_stream", since=T0 + 2, task="t1"), T0 + 2)
    view.on_message(report("old", pid=55), T0)  # its instance is gone, its records kept a while
    state = pipeline_state()
    runners = runners_json("n1", view.runners(), state, lambda pid: pid == 100, T0 + 12, entries=1)
    assert [r["runnerId"] for r in runners] == ["old", "r0"]  # (modelId "", ...) sorts first
    r0 = runners[1]
    assert r0["phase"] == "decode_stream" and r0["secondsInPhase"] == 10.0 and r0["activeTaskId"] == "t1"
    assert r0["processAlive"] and r0["pid"] == 100 and r0["tokensPerSecond"] == 12.5 and r0["active"] == 1
    assert r0["statusKind"] == "RunnerReady" and r0["startLayer"] == 0 and r0["worldSize"] == 2
    assert r0["lastMlxMemory"]["active"] == {"inBytes": 10} and r0["lastMlxMemory"]["cache"] is None
    assert len(r0["flightRecorder"]) == 1 and r0["flightRecorder"][0]["phase"] == "decode_stream"
    assert not runners[0]["processAlive"] and runners[0]["modelId"] == ""


def test_warnings_name_a_dead_process_and_a_rank_stuck_in_a_working_phase():
    runners = [{"runnerId": "a", "statusKind": "RunnerReady", "pid": 7, "processAlive": False, "phase": "idle",
                "deviceRank": 0},
               {"runnerId": "b", "statusKind": "RunnerRunning", "pid": 8, "processAlive": True,
                "phase": "decode_barrier", "deviceRank": 1},
               {"runnerId": "c", "statusKind": "RunnerFailed", "pid": 9, "processAlive": False, "phase": "error",
                "deviceRank": 0}]
    warnings = runner_warnings(runners, {"b": T0}, T0 + STUCK_S + 5)
    assert len(warnings) == 2 and "process 7 is not alive" in warnings[0]
    assert "runner b (rank 1)" in warnings[1] and "decode_barrier" in warnings[1]
    assert runner_warnings(runners[1:2], {"b": T0}, T0 + 1) == []


def test_the_node_document_has_upstreams_shape_and_flags_divergent_ranks(tmp_path: Path):
    view = RunnerView()
    view.on_message(entry("r0", 0, T0, "decode_stream"), T0)
    state = pipeline_state(("RunnerReady", "RunnerLoading"))
    facts = NodeFacts("n1", "0.1", "lab", tmp_path / "skulk.yaml")
    table = host.ProcessTable(tmp_path)
    doc = node_diagnostics(facts, state, view.runners(), host.alive, host.resources(tmp_path, None),
                           table.rows(T0), T0 + 1, RING)
    validate(NODE_DIAGNOSTICS, doc)
    assert doc["runtime"]["libp2pNamespace"] == "lab" and doc["runtime"]["isMaster"]
    assert doc["resources"]["gatheredMemory"]["ramTotal"] == {"inBytes": 16 * GIB}
    placement = doc["placements"][0]
    assert placement["placementNodeIds"] == ["n1", "n2"] and placement["localNodeIsPlacementNode"]
    assert "ranks disagree on status: rank 0 RunnerReady, rank 1 RunnerLoading" in placement["warnings"]
    assert [r["runnerId"] for r in doc["supervisorRunners"]] == ["r0"]
    assert doc["processes"] and doc["processes"][0]["pid"] > 0
    empty = node_diagnostics(facts, None, {}, host.alive, host.resources(tmp_path, None), [], T0, RING)
    validate(NODE_DIAGNOSTICS, empty)
    assert empty["warnings"] and empty["identity"] is None


def test_process_titles_give_the_role(tmp_path: Path):
    assert host.service_of("skulk: runner abc123") == "runner" and host.role_of("skulk: runner abc") == "runner"
    assert host.service_of("skulk: api worker") == "api worker" and host.role_of("skulk: api worker") == "skulk"
    assert host.role_of("/usr/bin/python3 -m x") == "python" and host.service_of("bash") == ""
    (tmp_path / "skulk.lock").write_text("1\n")
    assert host.root_pid(tmp_path) == 1


# ---- cancel -------------------------------------------------------------------------------------

def task(status: str, instance: str = "i1") -> Task:
    return Task(task_id="t1", command_id="cmd1", instance_id=instance, status=status, owner_node="n2",
                params=TaskParams(model=CARD.model_id, messages=(), max_tokens=4))


def test_a_cancel_goes_to_rank_0_of_the_tasks_instance():
    plan = plan_cancel(pipeline_state(tasks={"t1": task("Running")}), "n2", "r1", "t1")
    assert (plan.status, plan.endpoint, plan.command_id) == ("cancel_requested", "tcp://127.0.0.1:7000", "cmd1")
    assert plan_cancel(pipeline_state(tasks={"t1": task("Cancelled")}), "n1", "r0", "t1").status == "already_cancelled"
    done = plan_cancel(pipeline_state(tasks={"t1": task("Complete")}), "n1", "r0", "t1")
    assert done.status == "already_completed" and not done.endpoint


@pytest.mark.parametrize("runner,tid,tasks,code", [
    ("r1", "t1", {"t1": task("Running")}, 404),  # r1 is not on n1
    ("r0", "nope", {"t1": task("Running")}, 404),
    ("r0", "t1", {"t1": task("Running", instance="other")}, 409)])
def test_a_cancel_is_refused_for_an_unknown_runner_or_task(runner, tid, tasks, code):
    with pytest.raises(falcon.HTTPError) as err:
        plan_cancel(pipeline_state(tasks=tasks), "n1", runner, tid)
    assert err.value.status_code == code


def test_the_runner_view_is_bounded_by_count_whatever_ids_the_bus_brings():
    """Found by a 10-minute fuzz run: reports under ever new runner ids grew the API worker by
    hundreds of MiB before the time-based forgetting caught up."""
    view = RunnerView()
    view.on_message(RunnerReport(runner_id="real", instance_id="i1", status=RunnerStatus(kind="RunnerReady")), 0.0)
    for n in range(3 * MAX_RUNNERS):
        view.on_message(RunnerReport(runner_id=f"made-up-{n}", instance_id="i1",
                                     status=RunnerStatus(kind="RunnerReady")), 1.0 + n)
    assert len(view.runners()) == MAX_RUNNERS
    assert "real" not in view.runners()  # heard from longest ago: it made room first
    view.on_message(RunnerReport(runner_id="real", instance_id="i1", status=RunnerStatus(kind="RunnerReady")), 1e6)
    assert "real" in view.runners() and len(view.runners()) == MAX_RUNNERS  # back at its next report


def test_the_view_refuses_an_oversized_runner_record_before_decoding_it():
    import zmq

    from skulk.wire import codec
    from skulk.wire.errors import MalformedFrame
    from skulk.wire.topics import EVT_CLUSTER, EVT_RUNNER

    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        a.bind("inproc://view"), b.connect("inproc://view")
        report = RunnerReport(runner_id="r", instance_id="i1", status=RunnerStatus(kind="RunnerReady"))
        a.send_multipart([EVT_RUNNER.prefix + b"r", codec.encode(report)])
        assert recv_bounded(b)[1] == report
        a.send_multipart([EVT_RUNNER.prefix + b"r", b"\x00" * (RECORD_MAX_BYTES + 1)])
        with pytest.raises(MalformedFrame):
            recv_bounded(b)
        big = Membership(node_id="n", members=())  # other topics keep the socket's own bound
        a.send_multipart([EVT_CLUSTER.prefix, codec.encode(big)])
        assert recv_bounded(b)[1] == big
    finally:
        a.close(0), b.close(0), ctx.term()
