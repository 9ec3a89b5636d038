"""Why a request's runner can no longer finish it (pure): the verdict that decides what its
client sees, from the replicated state alone.

Checked by incarnation, not only by status: a runner that crashed and was restarted (same id,
new process, new endpoint) cannot finish a request the old one started. The reason is typed,
and it decides what happens next (`resume.py`): an instance its operator deleted ends the
request (`instance_deleted`); one deleted to be created again after its runner failed
(`runner_failed`) or lost with its node (`instance_lost`) is resumable elsewhere.
"""

from __future__ import annotations

from collections.abc import Set

from skulk.cluster.state import SERVING_KINDS, RunnerKind, State
from skulk.wire.commands import INSTANCE_DELETED, INSTANCE_LOST, RUNNER_LOST
from skulk.wire.inference import REFUSALS, Failed, FailReason

RECREATED = ("runner_failed", "engine_refused")
"""Deletion causes of an instance that is being created again (`DeletionNote.cause`)."""


def why_lost(state: State | None, departed: Set[str], instance_id: str, runner_id: str,
             endpoint: str) -> tuple[FailReason, str] | None:
    """Why the request that `runner_id` (at `endpoint`) serves for `instance_id` can no longer
    complete, or None while every rank of its instance still serves. `departed`: the nodes the
    cluster has seen leave (their instances may still be listed for a moment)."""
    if state is None:
        return None
    inst = state.instances.get(instance_id)
    if inst is None:
        note = state.deleted.get(instance_id)
        cause = note.cause if note else ""
        if cause == "operator":
            return FailReason.INSTANCE_DELETED, INSTANCE_DELETED
        if note and cause in RECREATED:
            return FailReason.RUNNER_FAILED, RUNNER_LOST.format(detail=note.reason)
        return FailReason.INSTANCE_LOST, INSTANCE_LOST
    if not departed.isdisjoint(inst.node_to_runner):
        return FailReason.INSTANCE_LOST, INSTANCE_LOST
    for rid in inst.runner_to_shard:  # every rank must still serve: they run one loop
        status = state.runners.get(rid)
        if status is None:
            return FailReason.RUNNER_FAILED, RUNNER_LOST.format(detail="no status")
        if status.kind == RunnerKind.FAILED:
            return FailReason.RUNNER_FAILED, RUNNER_LOST.format(detail=status.error_message or "failed")
        if status.kind not in SERVING_KINDS or (rid == runner_id and status.endpoint != endpoint):
            return FailReason.RUNNER_FAILED, RUNNER_LOST.format(detail=f"it restarted and is now {status.kind}")
    return None


def maybe_symptom(failed: Failed) -> bool:
    """Whether a runner's own `Failed` may be the symptom of a loss the state will name (a peer
    rank stopped because the instance was deleted): not a refusal of the request, not a cancel."""
    return failed.reason not in REFUSALS and failed.reason != FailReason.CANCELLED
