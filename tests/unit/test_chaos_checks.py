"""The chaos soak's pure judgements: convergence, state against processes, the layout it
restores, the fault schedule and the pass criteria."""

from __future__ import annotations

import random

from tools.chaos_checks import (
    FaultRecord,
    NodeView,
    RequestRecord,
    agreement_problems,
    cutting_target,
    judge,
    membership_problems,
    mid_answer,
    missing_placements,
    pending_recreations,
)
from tools.chaos_faults import NODE_LOSS, Kind, plan_fault

MODEL = "skulk/demo-tiny"
ROLE_TITLES = tuple(f"skulk: {r}" for r in ("supervisor", "bus", "eventlog", "store", "gossip", "master",
                                              "worker", "api", "api worker", "janitor"))


def instance(iid: str, nodes: dict[str, str], model: str = MODEL) -> dict:
    return {"MlxRingInstance": {"instanceId": iid, "shardAssignments": {
        "modelId": model, "runnerToShard": {r: {} for r in nodes.values()}, "nodeToRunner": nodes}}}


def state(master: str, members: list[str], instances: dict | None = None, runners: dict | None = None,
          deleted: dict | None = None) -> dict:
    return {"masterNodeId": master, "nodeIdentities": {m: {} for m in members},
            "instances": instances or {}, "runners": runners or {}, "deletedInstances": deleted or {}}


def test_membership_agrees_only_with_one_master_and_exactly_the_live_nodes():
    good = [NodeView(n, n, state("a", ["a", "b"]), ()) for n in ("a", "b")]
    assert membership_problems(good) == []
    split = [NodeView("a", "a", state("a", ["a", "b"]), ()), NodeView("b", "b", state("b", ["a", "b"]), ())]
    assert "masters disagree" in membership_problems(split)[0]
    stale = [NodeView(n, n, state("a", ["a", "b", "gone"]), ()) for n in ("a", "b")]
    assert len(membership_problems(stale)) == 2
    dead_master = [NodeView(n, n, state("gone", ["a", "b"]), ()) for n in ("a", "b")]
    assert "not a live node" in membership_problems(dead_master)[0]
    silent = [NodeView("a", "a", state("a", ["a", "b"]), ()), NodeView("b", None, None, ())]
    assert membership_problems(silent) == ["b: no /node_id or /state answer"]


def test_state_and_processes_agree_runner_by_runner():
    insts = {"i1": instance("i1", {"a": "r1"}), "i2": instance("i2", {"a": "r2", "b": "r3"})}
    runners = {r: {"RunnerReady": {}} for r in ("r1", "r2", "r3")}
    s = state("a", ["a", "b"], insts, runners)
    a = NodeView("a", "a", s, (*ROLE_TITLES, "skulk: runner r1", "skulk: runner r2"))
    b = NodeView("b", "b", s, (*ROLE_TITLES, "skulk: runner r3"))
    assert agreement_problems([a, b]) == []
    orphan = NodeView("b", "b", s, (*ROLE_TITLES, "skulk: runner r3", "skulk: runner r9"))
    assert agreement_problems([a, orphan]) == ["b: runner process r9 has no instance here (orphan)"]
    missing = NodeView("b", "b", s, ROLE_TITLES)
    assert agreement_problems([a, missing]) == ["b: runner r3 of the state has no process"]
    twice = NodeView("b", "b", s, (*ROLE_TITLES, "skulk: master", "skulk: runner r3"))
    assert agreement_problems([a, twice]) == ["b: 2 processes titled 'skulk: master'"]
    loading = state("a", ["a", "b"], insts, {**runners, "r3": {"RunnerLoading": {}}})
    views = [NodeView("a", "a", loading, a.titles), NodeView("b", "b", loading, b.titles)]
    assert agreement_problems(views) == ["b: runner r3 is RunnerLoading"]
    stale = state("a", ["a", "b"], insts, {**runners, "r9": {"RunnerFailed": {}}})
    views = [NodeView("a", "a", stale, a.titles), NodeView("b", "b", stale, b.titles)]
    assert agreement_problems(views) == ["a: the state lists runner r9 of no instance",
                                         "b: the state lists runner r9 of no instance"]
    behind = NodeView("b", "b", state("a", ["a", "b"], {"i1": insts["i1"]}, runners), ROLE_TITLES)
    assert "instances ['i1'] != a's ['i1', 'i2']" in agreement_problems([a, behind])[0]


def test_the_layout_is_one_instance_per_node_and_a_pipeline():
    assert missing_placements(state("a", ["a", "b", "c"]), ["a", "b", "c"], MODEL) == [
        {"model_id": MODEL, "excluded_nodes": ["b", "c"]}, {"model_id": MODEL, "excluded_nodes": ["a", "c"]},
        {"model_id": MODEL, "excluded_nodes": ["a", "b"]}, {"model_id": MODEL, "min_nodes": 2, "sharding": "Pipeline"}]
    full = {"1": instance("1", {"a": "r1"}), "2": instance("2", {"b": "r2"}), "3": instance("3", {"c": "r3"}),
            "p": instance("p", {"a": "r4", "b": "r5"})}
    assert missing_placements(state("a", ["a", "b", "c"], full), ["a", "b", "c"], MODEL) == []
    other_model = {"1": instance("1", {"a": "r1"}, "other/model")}
    assert len(missing_placements(state("a", ["a"], other_model), ["a"], MODEL)) == 1
    assert missing_placements(state("a", ["a"], {"1": instance("1", {"a": "r1"})}), ["a"], MODEL) == []


def test_a_pending_recreation_is_waited_for_not_placed_over():
    due = {"old": {"recreateAt": "2025-01-01T00:00:00Z", "replacedBy": None, "cause": "runner_failed"}}
    assert pending_recreations(state("a", ["a"], deleted=due)) == ["old"]
    assert missing_placements(state("a", ["a"], deleted=due), ["a"], MODEL) == []
    done = {"old": {**due["old"], "replacedBy": "new"}}
    given_up = {"old": {**due["old"], "cause": "given_up"}}
    assert pending_recreations(state("a", ["a"], deleted=done)) == []
    assert pending_recreations(state("a", ["a"], deleted=given_up)) == []


def test_fault_plans_follow_the_seed_and_name_real_targets():
    runners = {"n0": ["r1"], "n1": [], "n2": ["r2", "r3"]}
    plans = [plan_fault(random.Random(7), runners, "n1") for _ in range(3)]
    assert plans[0] == plans[1] == plans[2]
    rng = random.Random(1)
    seen = set()
    for _ in range(400):
        plan = plan_fault(rng, runners, "n1")
        seen.add(plan.kind)
        if plan.kind in (Kind.KILL_RUNNER, Kind.STOP_RUNNER):
            assert plan.target in runners[plan.node]
        if plan.kind == Kind.KILL_MASTER:
            assert plan.node == "n1"
        if plan.kind in (Kind.STOP_ROLE, Kind.STOP_RUNNER, Kind.FREEZE_NODE):
            assert plan.pause_s > 0
        if plan.kind in NODE_LOSS:
            assert plan.target == ""
    assert seen == set(Kind)
    no_runners = {"n0": [], "n1": []}
    assert all(plan_fault(rng, no_runners, None).kind not in (Kind.KILL_RUNNER, Kind.STOP_RUNNER, Kind.KILL_MASTER)
               for _ in range(100))
    only = plan_fault(rng, runners, "n1", kinds=(Kind.KILL_NODE,))
    assert only.kind == Kind.KILL_NODE and only.label == "SIGKILL node tree"


def req(**kw) -> RequestRecord:
    return RequestRecord(**{"client": 0, "node": "n0", "started": 0.0, "max_tokens": 8, **kw})


def test_the_verdict_holds_each_request_to_the_promise():
    fault = FaultRecord(kind="SIGKILL master", node="n1", target="master", at=10.0, converged_at=20.0)
    served = req(done=True, tokens=8)
    in_flight = req(started=5.0, code=500, error_type="x", in_stream=True, error_at=11.0)
    later = req(started=18.0, code=503, error_type="y", error_at=19.0)
    v = judge([served, in_flight, later], [fault], promise_s=30, grace_s=5, leaked=[], ports=[])
    assert v.passed and v.served == 1 and sum(v.errors.values()) == 2
    assert v.worst_fault_to_error == 1.0 and v.worst_error_latency == 1.0
    assert not judge([req(hung=True)], [fault], 30, 5, [], []).passed
    assert judge([req(code=404, error_at=11.0), served], [fault], 30, 5, [], []).not_retryable
    outside = judge([req(code=500, error_at=40.0), served], [fault], 30, 5, [], [])
    assert outside.unexplained and not outside.passed
    transport_elsewhere = judge([req(node="n2", transport=True, error_at=11.0), served], [fault], 30, 5, [], [])
    assert transport_elsewhere.unexplained
    transport_here = judge([req(node="n1", transport=True, error_at=11.0), served], [fault], 30, 5, [], [])
    assert transport_here.passed
    slow = judge([req(code=500, started=1.0, error_at=45.0), served],
                 [FaultRecord(kind="k", node="n1", target="", at=10.0, converged_at=50.0)], 30, 5, [], [])
    assert slow.late and not slow.passed
    unconverged = judge([served], [FaultRecord(kind="k", node="n1", target="", at=10.0)], 30, 5, [], [])
    assert unconverged.unconverged and not unconverged.passed
    assert not judge([served], [fault], 30, 5, ["n0: 'skulk: master' outlived its root"], []).passed
    assert not judge([served], [fault], 30, 5, [], [21000]).passed
    assert not judge([], [fault], 30, 5, [], []).passed  # nothing served proves nothing


def test_the_replicas_kill_goes_where_it_cuts_streams_another_nodes_api_holds():
    def task(iid: str, owner: str, status: str = "Running") -> dict:
        return {"TextGeneration": {"instanceId": iid, "ownerNode": owner, "taskStatus": status}}

    names = {"ia": "a", "ib": "b", "ic": "c"}
    layout = {"x": instance("x", {"ia": "ra"}), "y": instance("y", {"ib": "rb"})}
    on = {**state("ia", list(names), layout), "tasks": {
        "1": task("x", "ia"),  # a's own API: killing a loses its client anyway
        "2": task("y", "ic"), "3": task("y", "ia"), "4": task("x", "ic", "Complete")}}
    assert cutting_target(on, names, ["a", "b"]) == ("b", 2)
    assert cutting_target(on, names, ["a"]) is None  # only a's own stream runs there
    assert cutting_target({**on, "tasks": {}}, names, ["a", "b"]) is None


def test_the_replicas_kill_aims_at_streams_mid_answer():
    """A stream a kill is aimed at must have had tokens (one cut before its runner admitted it is
    only routed again: nothing to go on with) and have enough ahead to still run when the kill
    lands; its client's command id is its task's."""
    def task(cid: str, iid: str) -> dict:
        return {"TextGeneration": {"commandId": cid, "instanceId": iid, "ownerNode": "ic", "taskStatus": "Running"}}

    def rec(cid: str, tokens: int, asked: int = 300, ended: float | None = None) -> RequestRecord:
        return RequestRecord(client=0, node="c", started=0.0, max_tokens=asked, command_id=cid, tokens=tokens,
                             ended=ended)

    names = {"ia": "a", "ib": "b", "ic": "c"}
    layout = {"x": instance("x", {"ia": "ra"}), "y": instance("y", {"ib": "rb"})}
    on = {**state("ia", list(names), layout), "tasks": {"1": task("c1", "x"), "2": task("c2", "x"),
                                                        "3": task("c3", "y")}}
    records = [rec("c1", 0), rec("c2", 250), rec("c3", 40), rec("c4", 10, ended=1.0), rec("", 5)]
    assert mid_answer(records, 100) == {"c3"}  # c1 not admitted yet, c2 nearly done, c4 over
    assert cutting_target(on, names, ["a", "b"]) == ("a", 2)  # the most streams, wherever they stand
    assert cutting_target(on, names, ["a", "b"], mid_answer(records, 100)) == ("b", 1)
    assert cutting_target(on, names, ["a", "b"], set()) is None
