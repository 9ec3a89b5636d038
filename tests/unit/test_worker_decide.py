"""The worker's decisions about the models its runners need (pure)."""

from __future__ import annotations

from dataclasses import replace

from skulk.cluster.state import RunnerStatus, RunnerStatusUpdated
from skulk.node.staged import in_use_here
from skulk.services.worker.decide import Waiting, eviction_due, plan_staging, waiting
from tests.unit.builders import placed, run

MODEL = "skulk/demo-tiny"


def with_companion(state, iid):
    inst = state.instances[iid]
    return replace(state, instances={iid: replace(inst, card=replace(inst.card, companions=("skulk/drafter",)))})


def test_a_missing_model_is_staged_and_a_failed_copy_fails_its_waiting_runner_at_once():
    state, iid, rid = placed(ready=False)
    assert plan_staging(state, "n1", [MODEL], {}, can_stage=True).stage == [MODEL]
    failed = plan_staging(state, "n1", [MODEL], {MODEL: "sha256 mismatch"}, can_stage=True)
    assert failed.stage == [] and failed.fail == [(Waiting(rid, iid), "sha256 mismatch")]
    assert failed.forget == []


def test_a_companion_that_failed_fails_the_runner_of_the_model_that_needs_it():
    state, iid, rid = placed(ready=False)
    state = with_companion(state, iid)
    assert waiting(state, "n1") == {MODEL: [Waiting(rid, iid)], "skulk/drafter": [Waiting(rid, iid)]}
    decided = plan_staging(state, "n1", ["skulk/drafter"], {"skulk/drafter": "404"}, can_stage=True)
    assert decided.fail == [(Waiting(rid, iid), "404")]
    assert in_use_here(state, "n1") == {MODEL, "skulk/drafter"}


def test_a_failed_copy_nobody_here_waits_for_is_forgotten_so_the_next_placement_copies_again():
    state, iid, rid = placed(ready=False)
    reported = run(state, [RunnerStatusUpdated(runner_id=rid, status=RunnerStatus(kind="RunnerFailed"))])
    assert plan_staging(reported, "n1", [], {MODEL: "x"}, can_stage=True).forget == [MODEL]
    assert plan_staging(state, "other", [], {MODEL: "x"}, can_stage=True).forget == [MODEL]


def test_without_a_store_a_missing_model_fails_its_runner_with_the_reason():
    state, iid, rid = placed(ready=False)
    decided = plan_staging(state, "n1", [MODEL], {}, can_stage=False)
    assert decided.stage == [] and decided.fail[0][0] == Waiting(rid, iid)
    assert "no model store" in decided.fail[0][1]


def test_eviction_runs_at_start_up_and_when_a_model_leaves_this_node():
    assert eviction_due({"a"}, None)  # start-up
    assert eviction_due(set(), {"a"})  # deactivation
    assert not eviction_due({"a", "b"}, {"a"})  # a new model only: nothing to evict
