"""`skulk model wait`'s check: ready, still coming, or gone for good (pure, on /state's JSON)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from skulk.scripts.http_client import GivenUp, given_up_reason, model_ready

MODEL = "org/model"
SINCE = datetime.fromisoformat("2026-11-28T15:31:00+00:00").timestamp()  # when the wait began


def state(instances: dict[str, str] | None = None, runners: dict[str, str] | None = None,
          deleted: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """/state with one-runner instances ({iid: model}), runner kinds ({rid: kind}) and deletion notes."""
    ring = {iid: {"shardAssignments": {"modelId": m, "runnerToShard": {f"r-{iid}": {}}}}
            for iid, m in (instances or {}).items()}
    return {"instances": {iid: {"MlxRingInstance": r} for iid, r in ring.items()},
            "runners": {rid: {kind: {}} for rid, kind in (runners or {}).items()},
            "deletedInstances": deleted or {}}


def note(reason: str = "crash loop: 3 runner failures within 60s", at: str = "2026-11-28T15:31:44+00:00",
         **extra: Any) -> dict[str, Any]:
    return {"modelId": MODEL, "reason": reason, "deletedAt": at, "recreateAt": None, "replacedBy": None, **extra}


def test_a_model_with_an_instance_is_not_given_up() -> None:
    assert given_up_reason(state({"i1": MODEL}, deleted={"i0": note()}), MODEL, SINCE) is None


def test_a_deletion_replaced_or_with_a_recreation_pending_is_not_given_up() -> None:
    assert given_up_reason(state(deleted={"b": note(replacedBy="i2")}), MODEL, SINCE) is None
    pending = note("runner failed; re-creating in 1.0s", recreateAt="2026-11-28T15:31:45+00:00")
    assert given_up_reason(state(deleted={"a": pending}), MODEL, SINCE) is None
    # one replica's re-creation pending keeps the wait going though the other was deleted for good
    assert given_up_reason(state(deleted={"a": pending, "b": note("deleted by an operator")}), MODEL, SINCE) is None


def test_a_deletion_since_the_wait_began_gives_the_latest_reason_and_older_ones_are_history() -> None:
    s = state(deleted={"a": note("first", "2026-11-28T15:31:10+00:00"), "b": note("second"),
                       "old": note("an hour ago", "2026-11-28T14:30:00+00:00"),
                       "c": {**note("other model"), "modelId": "org/other"}})
    assert given_up_reason(s, MODEL, SINCE) == "second"
    assert given_up_reason(state(deleted={"old": note(at="2026-11-28T14:30:00+00:00")}), MODEL, SINCE) is None
    assert given_up_reason(state(deleted={"skewed": note(at="2026-11-28T15:30:59+00:00")}), MODEL, SINCE) is not None


def test_the_check_returns_the_ready_instance_waits_on_a_loading_one_and_raises_when_given_up() -> None:
    check = model_ready(MODEL, since_wall=SINCE)
    assert check(state({"i1": MODEL}, {"r-i1": "RunnerLoading"})) is None
    assert check(state({"i1": MODEL}, {"r-i1": "RunnerReady"})) == "i1"
    assert check(state(deleted={"old": note(at="2026-11-28T14:30:00+00:00")})) is None  # a session's history
    with pytest.raises(GivenUp, match="crash loop"):
        check(state(deleted={"old": note(at="2026-11-28T14:30:00+00:00"), "new": note()}))
