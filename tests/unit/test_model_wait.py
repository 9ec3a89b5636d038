"""`skulk model wait`'s check: ready, still coming, or gone for good (pure, on /state's JSON)."""

from __future__ import annotations

from typing import Any

import pytest

from skulk.scripts.http_client import GivenUp, given_up_reason, model_ready

MODEL = "org/model"


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
    assert given_up_reason(state({"i1": MODEL}, deleted={"i0": note()}), MODEL, set()) is None


def test_a_deletion_with_a_recreation_pending_or_done_is_not_given_up() -> None:
    s = state(deleted={"a": note(recreateAt="2026-11-28T15:32:00+00:00"), "b": note(replacedBy="i2")})
    assert given_up_reason(s, MODEL, set()) is None


def test_a_deletion_with_nothing_to_follow_gives_the_latest_reason() -> None:
    s = state(deleted={"a": note("first", "2026-11-28T15:00:00+00:00"), "b": note("second"),
                       "c": {**note("other model"), "modelId": "org/other"}})
    assert given_up_reason(s, MODEL, set()) == "second"
    assert given_up_reason(s, MODEL, {"b"}) == "first"
    assert given_up_reason(s, MODEL, {"a", "b"}) is None


def test_the_check_returns_the_ready_instance_and_waits_on_a_loading_one() -> None:
    check = model_ready(MODEL, since_wall=0.0)
    assert check(state({"i1": MODEL}, {"r-i1": "RunnerLoading"})) is None
    assert check(state({"i1": MODEL}, {"r-i1": "RunnerReady"})) == "i1"


def test_the_check_ignores_notes_from_before_the_wait_and_raises_on_a_new_one() -> None:
    since = 1_800_000_000.0  # 2027-01-15: the note below is older
    check = model_ready(MODEL, since_wall=since)
    assert check(state(deleted={"old": note(at="2026-11-28T15:00:00+00:00")})) is None
    with pytest.raises(GivenUp, match="crash loop"):
        check(state(deleted={"old": note(at="2026-11-28T15:00:00+00:00"), "new": note()}))
