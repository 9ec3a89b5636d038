"""The reducer, routing, single-node placement, command handling and the runner plan (pure)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from skulk.cluster.placement import GIB, PlacementError, place
from skulk.cluster.reducer import OutOfOrder, apply
from skulk.cluster.state import (
    IndexedEvent,
    InstanceDeleted,
    NodeGatheredInfo,
    NodeRestarting,
    NodeTimedOut,
    RunnerStatus,
    RunnerStatusUpdated,
    State,
)
from skulk.services.master.commands import handle, lost_changes
from skulk.services.master.recovery import RecoveryPolicy, next_recreation
from skulk.services.master.routing import Route, RouteError, route
from skulk.services.worker.runner_plan import Plan, plan
from skulk.wire.commands import (
    INSTANCE_LOST,
    RUNNER_LOST,
    SESSION_CHANGED,
    CommandAccepted,
    CommandRejected,
    DeleteInstance,
    PlaceInstance,
    RejectReason,
    Routed,
    TaskCancelled,
    TaskFinished,
    TextGeneration,
)
from skulk.wire.inference import FailReason
from tests.unit.builders import CARD, PARAMS, base, ids, node, placed, run


def test_reducer_rejects_out_of_order_events():
    with pytest.raises(OutOfOrder):
        apply(State(), IndexedEvent(idx=1, session="s", event=NodeGatheredInfo(info=node())))


def test_instance_delete_removes_its_runners_and_late_runner_reports_are_ignored():
    state, iid, rid = placed()
    assert rid in state.runners
    state = run(state, [InstanceDeleted(instance_id=iid)])
    assert state.instances == {} and state.runners == {}
    state = run(state, [RunnerStatusUpdated(runner_id=rid, status=RunnerStatus(kind="RunnerReady"))])
    assert state.runners == {}


def test_route_picks_only_serving_instances_and_errors_at_once_otherwise():
    assert route(base(), "skulk/demo-tiny") == RouteError(404, "No instance found for model skulk/demo-tiny",
                                                          RejectReason.NO_INSTANCE)
    state, iid, rid = placed(ready=False)
    err = route(state, "skulk/demo-tiny")
    assert isinstance(err, RouteError) and (err.status, err.reason) == (503, RejectReason.NOT_READY)
    for kind in ("RunnerLoading", "RunnerWarmingUp", "RunnerFailed"):
        s = run(state, [RunnerStatusUpdated(runner_id=rid, status=RunnerStatus(kind=kind))])
        assert isinstance(route(s, "skulk/demo-tiny"), RouteError), kind
    state, iid, rid = placed()
    got = route(state, "skulk/demo-tiny")
    assert isinstance(got, Route) and got.runner_id == rid and got.endpoint == "tcp://127.0.0.1:1"


def test_route_skips_an_instance_on_a_node_restarting_in_place_until_its_new_image_clears_the_mark():
    state, iid, rid = placed()
    marked = run(state, [NodeRestarting(node_id="n1", until=30.0)])
    err = route(marked, "skulk/demo-tiny")
    assert isinstance(err, RouteError) and err.status == 503 and "node restarting" in err.message
    cleared = run(marked, [NodeRestarting(node_id="n1", until=0.0)])
    assert isinstance(route(cleared, "skulk/demo-tiny"), Route)


def two_ready_instances() -> State:
    state, _, _ = placed()
    state = run(state, handle(state, PlaceInstance(command_id="c2", card=CARD), ids(), 0.0).events)
    for rid in {r for i in state.instances.values() for r in i.runner_to_shard}:
        state = run(state, [RunnerStatusUpdated(runner_id=rid, status=RunnerStatus(
            kind="RunnerReady", endpoint=f"tcp://127.0.0.1:{len(rid)}"))])
    assert len(state.instances) == 2
    return state


def test_route_prefers_the_least_loaded_ready_instance():
    state = two_ready_instances()
    out = handle(state, TextGeneration(command_id="t1", owner_node="n1", params=PARAMS), ids(), 0.0)
    busy = out.reply.instance_id
    state = run(state, out.events)
    second = handle(state, TextGeneration(command_id="t2", owner_node="n1", params=PARAMS), ids(), 0.0)
    assert second.reply.instance_id != busy


def test_route_follows_the_load_runners_report_and_it_adds_no_events():
    state = two_ready_instances()
    first, second = sorted(state.instances)
    rank0 = {iid: next(iter(state.instances[iid].runner_to_shard)) for iid in (first, second)}
    for busy, idle in ((first, second), (second, first)):  # the reported load decides, not the id
        loads = {rank0[busy]: 12, rank0[idle]: 3}
        out = handle(state, TextGeneration(command_id=f"t-{busy}", owner_node="n1", params=PARAMS), ids(), 0.0, loads)
        assert out.reply.instance_id == idle
        assert [type(e).__name__ for e in out.events] == ["TaskCreated"]  # the task; the load is no event
    # A burst routed since the last report counts too: open tasks beat a stale report of 0.
    for n in range(4):
        state = run(state, handle(state, TextGeneration(command_id=f"b{n}", owner_node="n1", params=PARAMS),
                                  ids(), 0.0, {rank0[first]: 0, rank0[second]: 2}).events)
    tasks = [t.instance_id for t in state.tasks.values()]
    assert (tasks.count(first), tasks.count(second)) == (3, 1)  # 0 1 2 | 2 (ties: lower id)


def test_route_avoids_the_nodes_the_asker_has_seen_leave_and_with_only_those_left_says_no_instance():
    state = run(base(), [NodeGatheredInfo(info=node("n2"))])
    for command_id, other in (("c1", "n2"), ("c2", "n1")):  # one instance on each node
        state = run(state, handle(state, PlaceInstance(command_id=command_id, card=CARD, excluded_nodes=(other,)),
                                  ids(), 0.0).events)
    for rid in {r for i in state.instances.values() for r in i.runner_to_shard}:
        state = run(state, [RunnerStatusUpdated(runner_id=rid, status=RunnerStatus(kind="RunnerReady",
                                                                                   endpoint=f"tcp://{rid}:1"))])
    on = {next(iter(i.node_to_runner)): i.instance_id for i in state.instances.values()}
    for gone, survivor in (("n1", "n2"), ("n2", "n1")):  # the load would pick either; the departure decides
        out = handle(state, TextGeneration(command_id=f"t-{gone}", owner_node="n1", params=PARAMS,
                                           avoid_nodes=(gone,)), ids(), 0.0)
        assert isinstance(out.reply, Routed) and out.reply.instance_id == on[survivor]
    out = handle(state, TextGeneration(command_id="t-both", owner_node="n1", params=PARAMS, avoid_nodes=("n1", "n2")),
                 ids(), 0.0)
    assert isinstance(out.reply, CommandRejected) and out.reply.reason == RejectReason.NO_INSTANCE
    assert out.events == []


def test_text_generation_creates_a_task_and_finish_or_cancel_removes_it():
    state, iid, rid = placed()
    out = handle(state, TextGeneration(command_id="t1", owner_node="n1", params=PARAMS), ids(), 0.0)
    assert isinstance(out.reply, Routed) and out.reply.instance_id == iid and out.reply.runner_id == rid
    state = run(state, out.events)
    assert [t.status for t in state.tasks.values()] == ["Running"]
    done = run(state, handle(state, TaskFinished(command_id="f", finished_command_id="t1"), ids(), 0.0).events)
    assert done.tasks == {}
    cancelled = handle(state, TaskCancelled(command_id="x", cancelled_command_id="t1"), ids(), 0.0)
    assert [type(e).__name__ for e in cancelled.events] == ["TaskStatusUpdated", "TaskDeleted"]
    assert isinstance(handle(state, TaskFinished(command_id="g", finished_command_id="zz"), ids(), 0.0).reply,
                      CommandAccepted)


@pytest.mark.parametrize("message,reason,kind", [
    (INSTANCE_LOST, FailReason.INSTANCE_LOST, "instance_lost"),
    (RUNNER_LOST.format(detail="signal 9 (SIGKILL)"), FailReason.RUNNER_FAILED, "runner_failed"),
    (SESSION_CHANGED, FailReason.SESSION_CHANGED, "session_changed"),
    ("any words at all", FailReason.STALLED, "stalled"), ("boom", "", "engine_error")])
def test_a_failure_the_api_saw_first_is_recorded_as_task_failed_by_its_reason(message, reason, kind):
    state, _, _ = placed()
    state = run(state, handle(state, TextGeneration(command_id="t1", owner_node="n1", params=PARAMS),
                              ids(), 0.0).events)
    events = handle(state, TaskFinished(command_id="f", finished_command_id="t1", failed=True,
                                        error_message=message, reason=reason), ids(), 0.0).events
    assert [type(e).__name__ for e in events] == ["TaskFailed", "TaskDeleted"]
    assert (events[0].error_type, events[0].error_message) == (kind, message)
    failed = run(state, events[:1])
    again = handle(failed, TaskFinished(command_id="g", finished_command_id="t1", failed=True,
                                        error_message=message), ids(), 0.0).events
    assert [type(e).__name__ for e in again] == ["TaskDeleted"]  # the master recorded it already


def test_deletions_say_why_for_people_and_for_machines():
    state, iid, _ = placed()
    gone = run(state, handle(state, DeleteInstance(command_id="d", instance_id=iid), ids(), 0.0).events)
    assert (gone.deleted[iid].reason, gone.deleted[iid].cause) == ("deleted by operator", "operator")
    lost = run(state, [NodeTimedOut(node_id="n1", when=5.0)])
    assert lost.instances == {} and "n1" not in lost.nodes
    assert (lost.deleted[iid].cause, lost.deleted[iid].when) == ("node_lost", 5.0)
    assert "lost with node n1" in lost.deleted[iid].reason


def test_a_deposed_leader_resubmits_only_models_the_winner_lacks():
    mine, iid, _ = placed()
    winner = base()
    (again,) = lost_changes(mine, winner, lambda: "c9")
    assert again == PlaceInstance(command_id="c9", card=CARD, sharding="Pipeline", min_nodes=1)
    theirs, _, _ = placed(base())
    assert lost_changes(mine, theirs, lambda: "c9") == []  # the winner serves that model


def test_a_deposed_leader_resubmits_its_operator_deletions_of_instances_the_winner_still_has():
    shared, iid, _ = placed()  # placed before the two sides split
    mine = run(shared, handle(shared, DeleteInstance(command_id="d", instance_id=iid), ids(), 0.0).events)
    assert mine.deleted[iid].cause == "operator"
    assert lost_changes(mine, shared, lambda: "c9") == [DeleteInstance(command_id="c9", instance_id=iid)]
    assert lost_changes(mine, base(), lambda: "c9") == []  # the winner has no such instance
    failed = run(shared, [InstanceDeleted(instance_id=iid, reason="runner failed", when=1.0,
                                          cause="runner_failed")])
    assert lost_changes(failed, shared, lambda: "c9") == []  # not the operator's intent


def test_across_a_split_an_instance_placed_again_on_one_side_counts_as_the_one_it_replaces():
    shared, x, _ = placed()  # X on n1, before the split; each side then lost n1 and placed X again
    two = run(shared, [NodeGatheredInfo(info=node("n2")), NodeGatheredInfo(info=node("n3"))])
    def placed_again(state: State) -> tuple[State, str]:
        gone = run(state, [NodeTimedOut(node_id="n1", when=1.0, replace_after_s=2.0)])
        (made,) = next_recreation(gone, 3.0, ids(), RecoveryPolicy())
        return run(gone, [made]), made.instance.instance_id
    mine, a = placed_again(two)
    winner, c = placed_again(two)
    mine = run(mine, handle(mine, DeleteInstance(command_id="d", instance_id=a), ids(), 0.0).events)
    assert lost_changes(mine, winner, lambda: "c9") == [DeleteInstance(command_id="c9", instance_id=c)]
    pending = run(two, [NodeTimedOut(node_id="n1", when=1.0, replace_after_s=2.0)])  # not placed again yet
    assert lost_changes(mine, pending, lambda: "c9") == [DeleteInstance(command_id="c9", instance_id=x)]
    cancelled = handle(pending, DeleteInstance(command_id="d2", instance_id=x), ids(), 0.0)
    assert isinstance(cancelled.reply, CommandAccepted)
    after = run(pending, cancelled.events)
    assert after.deleted[x].cause == "operator" and next_recreation(after, 9.0, ids(), RecoveryPolicy()) == []
    theirs = run(winner, handle(winner, DeleteInstance(command_id="d3", instance_id=c), ids(), 0.0).events)
    kept, _ = placed_again(two)  # the deposed side still serves it: not placed again over the deletion
    assert lost_changes(kept, theirs, lambda: "c9") == []
    assert lost_changes(kept, pending, lambda: "c9") == []  # the winner places it again itself


def test_delete_cancels_running_tasks_then_deletes():
    state, iid, _ = placed()
    state = run(state, handle(state, TextGeneration(command_id="t1", owner_node="n1", params=PARAMS),
                              ids(), 0.0).events)
    out = handle(state, DeleteInstance(command_id="d", instance_id=iid), ids(), 0.0)
    assert [type(e).__name__ for e in out.events] == ["TaskStatusUpdated", "InstanceDeleted"]
    assert handle(state, DeleteInstance(command_id="d2", instance_id="nope"), ids(), 0.0).reply == \
        CommandRejected(command_id="d2", status=404, message="Instance not found",
                        reason=RejectReason.UNKNOWN_INSTANCE)


@pytest.mark.parametrize("cmd,status,needle", [
    (PlaceInstance(command_id="c", card=CARD, min_nodes=2), 400, "has only 1 node(s)"),
    (PlaceInstance(command_id="c", card=CARD, excluded_nodes=("n1",)), 400, "touch an excluded node"),
    (PlaceInstance(command_id="c", card=CARD, instance_meta="MlxJaccl"), 400, "RDMA"),
    (PlaceInstance(command_id="c", card=CARD, sharding="Diagonal"), 400, "Unknown sharding"),
    (PlaceInstance(command_id="c", card=replace(CARD, supports_tensor=False), sharding="Tensor"), 400,
     "does not support tensor parallelism"),
])
def test_placement_refusals(cmd, status, needle):
    got = place(base(), cmd, ids())
    assert isinstance(got, PlacementError) and got.status == status and needle in got.message


def test_placement_memory_is_per_node_and_a_model_equal_to_free_memory_is_refused():
    big = replace(CARD, storage_size_bytes=9 * GIB)
    state = run(State(session="s"), [NodeGatheredInfo(info=node(available=9 * GIB))])
    got = place(state, PlaceInstance(command_id="c", card=big), ids())
    assert isinstance(got, PlacementError) and got.status == 400
    assert "node host-n1 needs ~" in got.message and "but can use 9.0GB" in got.message
    roomy = run(State(session="s"), [NodeGatheredInfo(info=node(total=64 * GIB, available=60 * GIB))])
    assert not isinstance(place(roomy, PlaceInstance(command_id="c", card=big), ids()), PlacementError)


def test_placement_of_one_node_is_pipeline_over_all_layers_with_a_context_limit():
    got = place(base(), PlaceInstance(command_id="c", card=CARD, sharding="Tensor"), ids())
    assert not isinstance(got, PlacementError)
    (shard,) = got.runner_to_shard.values()
    assert (shard.kind, shard.world_size, shard.start_layer, shard.end_layer) == ("Pipeline", 1, 0, 4)
    assert got.context_token_limit == 2048 and got.node_to_runner.keys() == {"n1"}


def AT_M(model_id: str) -> Path:  # noqa: N802 - a locator: every model in /m
    return Path("/m") / model_id.replace("/", "--")


def test_runner_plan_starts_assigned_and_stops_orphans():
    state, iid, rid = placed()
    decided = plan(state, "n1", {"runner-orphan"}, AT_M, "127.0.0.1", "127.0.0.1")
    assert [s.runner_id for s in decided.start] == [rid] and decided.stop == ["runner-orphan"]
    args = dict(zip(decided.start[0].args[::2], decided.start[0].args[1::2]))
    assert args["--model-dir"] == "/m/skulk--demo-tiny" and args["--end-layer"] == "4"
    assert plan(state, "n1", {rid}, AT_M, "h", "h") == Plan([], [], [])
    assert plan(state, "other-node", set(), AT_M, "h", "h") == Plan([], [], [])


def test_a_runner_waits_while_its_model_has_no_local_copy_and_a_running_one_is_kept():
    state, iid, rid = placed()
    assert plan(state, "n1", set(), lambda m: None, "h", "h") == Plan([], [], ["skulk/demo-tiny"])
    assert plan(state, "n1", {rid}, lambda m: None, "h", "h") == Plan([], [], ["skulk/demo-tiny"])


def test_a_runner_waits_for_its_models_companions_too():
    state, iid, rid = placed()
    inst = state.instances[iid]
    card = replace(inst.card, companions=("skulk/drafter",))
    with_drafter = replace(state, instances={iid: replace(inst, card=card)})
    only_main = plan(with_drafter, "n1", set(), lambda m: AT_M(m) if m == "skulk/demo-tiny" else None, "h", "h")
    assert only_main == Plan([], [], ["skulk/drafter"])
    assert [s.runner_id for s in plan(with_drafter, "n1", set(), AT_M, "h", "h").start] == [rid]


def test_runner_plan_starts_nothing_while_the_node_is_marked_restarting():
    state, iid, rid = placed()
    marked = run(state, [NodeRestarting(node_id="n1", until=30.0)])
    assert plan(marked, "n1", {"runner-orphan"}, AT_M, "h", "h") == Plan([], ["runner-orphan"], [])
    cleared = run(marked, [NodeRestarting(node_id="n1", until=0.0)])
    assert [s.runner_id for s in plan(cleared, "n1", set(), AT_M, "h", "h").start] == [rid]


def test_runner_loads_pass_changes_at_once_and_the_same_load_again_after_a_while():
    from skulk.services.master.loads import RESEND_S, RunnerLoads
    from skulk.wire.events import RunnerReport

    loads = RunnerLoads()
    report = RunnerReport(runner_id="r1", instance_id="i", status=RunnerStatus(kind="RunnerReady"), active=3, waiting=1)
    assert loads.on_report(report, 0.0).active == 3 and loads.get("r1") == 4
    assert loads.on_report(report, 1.0) is None  # unchanged: not again at once
    assert loads.on_report(replace(report, active=0), 1.5).active == 0  # changed: at once
    assert loads.on_report(replace(report, active=0), 1.5 + RESEND_S) is not None  # a lost message heals
    loads.forget({"other"})
    assert loads.get("r1") == 0 and loads.on_report(report, 2.0) is not None


def test_the_tracing_switch_is_state_and_stamps_new_tasks_only():
    from skulk.services.master.replication import seed
    from skulk.wire.tracing import SetTracing, TracingSet

    state = two_ready_instances()
    before = handle(state, TextGeneration(command_id="t1", owner_node="n1", params=PARAMS), ids(), 0.0)
    assert before.reply.trace is False and before.events[0].task.trace is False
    state = run(state, before.events)
    on = handle(state, SetTracing(command_id="s1", enabled=True), ids(), 0.0)
    assert isinstance(on.reply, CommandAccepted) and on.events == [TracingSet(enabled=True)]
    state = run(state, on.events)
    assert state.tracing_enabled and handle(state, SetTracing(command_id="s2", enabled=True), ids(), 0.0).events == []
    after = handle(state, TextGeneration(command_id="t2", owner_node="n1", params=PARAMS), ids(), 0.0)
    assert after.reply.trace is True and after.events[0].task.trace is True
    state = run(state, after.events)
    assert not state.tasks[before.reply.task_id].trace  # an earlier task stays untraced
    # a later leader keeps the replicated switch; only a cluster's first session takes the config's
    assert seed(state, "s2", "n2", tracing_default=False).tracing_enabled is True
    assert seed(State(), "s1", "n1", tracing_default=True).tracing_enabled is True
    assert seed(replace(State(), session="s0"), "s1", "n1", tracing_default=True).tracing_enabled is False
