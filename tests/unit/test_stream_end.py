"""The verdict on why a request's runner can no longer finish it (`generate/stream_end.py`): it
decides what a client sees (and whether the answer is resumed elsewhere), from the state alone."""

from __future__ import annotations

from dataclasses import replace

from skulk.cluster.state import DeletionNote, RunnerStatus
from skulk.services.api.generate.stream_end import maybe_symptom, why_lost
from skulk.wire.inference import REFUSALS, Failed, FailReason
from tests.unit.builders import placed

ENDPOINT = "tcp://127.0.0.1:1"  # where `placed` says its runner serves


def test_a_serving_runner_is_not_lost_and_no_state_yet_is_no_verdict():
    state, iid, rid = placed()
    assert why_lost(state, frozenset(), iid, rid, ENDPOINT) is None
    assert why_lost(None, frozenset(), iid, rid, ENDPOINT) is None


def test_an_instance_gone_is_deleted_recreated_or_lost_by_its_note():
    state, iid, rid = placed()
    gone = replace(state, instances={})
    assert why_lost(gone, frozenset(), iid, rid, ENDPOINT)[0] == FailReason.INSTANCE_LOST  # no note: lost
    for cause, reason in (("operator", FailReason.INSTANCE_DELETED), ("runner_failed", FailReason.RUNNER_FAILED),
                          ("engine_refused", FailReason.RUNNER_FAILED), ("node_lost", FailReason.INSTANCE_LOST)):
        note = DeletionNote(model_id="m", reason="boom", when=0.0, cause=cause)
        verdict = why_lost(replace(gone, deleted={iid: note}), frozenset(), iid, rid, ENDPOINT)
        assert verdict is not None and verdict[0] == reason, cause
        if cause == "runner_failed":
            assert "boom" in verdict[1]  # the client reads why the runner failed


def test_a_node_seen_leaving_loses_its_instances_before_the_state_drops_them():
    state, iid, rid = placed()
    (node_id,) = state.instances[iid].node_to_runner
    assert why_lost(state, frozenset({node_id}), iid, rid, ENDPOINT)[0] == FailReason.INSTANCE_LOST
    assert why_lost(state, frozenset({"another"}), iid, rid, ENDPOINT) is None


def test_a_rank_failed_missing_not_serving_or_restarted_elsewhere_is_a_runner_failure():
    state, iid, rid = placed()
    cases = {
        "failed": {rid: RunnerStatus(kind="RunnerFailed", error_message="out of memory")},
        "missing": {},
        "loading": {rid: RunnerStatus(kind="RunnerLoading", endpoint=ENDPOINT)},
        "a new incarnation": {rid: RunnerStatus(kind="RunnerReady", endpoint="tcp://127.0.0.1:2")},
    }
    for case, runners in cases.items():
        verdict = why_lost(replace(state, runners=runners), frozenset(), iid, rid, ENDPOINT)
        assert verdict is not None and verdict[0] == FailReason.RUNNER_FAILED, case
    failed = why_lost(replace(state, runners=cases["failed"]), frozenset(), iid, rid, ENDPOINT)
    assert failed is not None and "out of memory" in failed[1]


def test_only_a_runner_error_that_may_hide_a_loss_waits_for_the_state():
    assert maybe_symptom(Failed(request_id="r", error="x", reason=FailReason.RUNNER_FAILED))
    assert not maybe_symptom(Failed(request_id="r", error="x", reason=FailReason.CANCELLED))
    for reason in REFUSALS:
        assert not maybe_symptom(Failed(request_id="r", error="x", reason=reason))
