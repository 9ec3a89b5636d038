"""Tiny HTTP helpers for operator tools and benchmarks: JSON in and out, and waiting on a
node's state by long-polling `GET /state?wait_after_idx=N` (no sleep loops)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
from typing import Any

from skulk.cluster.state import SERVING_KINDS


def auth_headers() -> dict[str, str]:
    """`SKULK_API_KEY` as a bearer token, for a node with `api.keys` (none when unset)."""
    key = os.environ.get("SKULK_API_KEY", "")
    return {"Authorization": f"Bearer {key}"} if key else {}


def request(url: str, body: Any = None, method: str | None = None, timeout: float = 60) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **auth_headers()})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def wait_for_state(url: str, check: Callable[[dict[str, Any]], Any], timeout: float) -> Any:
    """Return `check(state)` once truthy; each try blocks until the state changes (or 5 s)."""
    deadline = time.monotonic() + timeout
    idx: int | None = None
    last_error = "no answer"
    while (left := deadline - time.monotonic()) > 0:
        query = f"?wait_after_idx={idx}&timeout={min(5.0, left):.1f}" if idx is not None else ""
        try:
            state = request(f"{url}/state{query}", timeout=min(left, 5.0) + 5)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            last_error = str(exc)
            if isinstance(exc, urllib.error.HTTPError) or "refused" not in str(exc):
                continue  # a timeout or a 503 while the node starts: each try already waited
            raise TimeoutError(f"no node answers at {url}: {exc}") from None
        result = check(state)
        if result:
            return result
        idx = state["lastEventAppliedIdx"]
    raise TimeoutError(f"state condition not met within {timeout:.0f}s ({last_error})")


def instance_ready(instance_id: str | None = None, model: str | None = None) -> Callable[[dict[str, Any]], Any]:
    """A `wait_for_state` check: the instance (by id, or any of the model) has every runner ready."""
    def check(state: dict[str, Any]) -> Any:
        for iid, inst in state["instances"].items():
            ring = next(iter(inst.values()))
            if (instance_id and iid != instance_id) or (model and ring["shardAssignments"]["modelId"] != model):
                continue
            kinds = [next(iter(state["runners"].get(r, {"none": {}})))
                     for r in ring["shardAssignments"]["runnerToShard"]]
            if all(k in SERVING_KINDS for k in kinds):
                return iid
        return None
    return check


class GivenUp(Exception):
    """The model's instance is gone for good (a crash loop, placement abandoned, deleted): waiting
    longer would only wait out the deadline. The message is the reason /state gives."""


SKEW_S = 2.0
"""A deletion this much older than the wait's start still counts as its answer (the leader's clock
and this one's may differ a little); older notes are history (another placement's, another
session's)."""


def given_up_reason(state: dict[str, Any], model: str, since_wall: float) -> str | None:
    """Why `model` will not come up (pure): it has no instance, no re-creation of it is pending,
    and a deletion note from after `since_wall` says it was deleted; None while it has one or
    may get one."""
    if any(next(iter(inst.values()))["shardAssignments"]["modelId"] == model for inst in state["instances"].values()):
        return None
    notes = [d for d in (state.get("deletedInstances") or {}).values() if d.get("modelId") == model]
    if any(d.get("recreateAt") and not d.get("replacedBy") for d in notes):
        return None  # a re-creation is due (a back-off, a node lost): it may still come up
    gone = [d for d in notes if not d.get("replacedBy") and _wall(d.get("deletedAt")) >= since_wall - SKEW_S]
    return max(gone, key=lambda d: _wall(d.get("deletedAt")))["reason"] if gone else None


def model_ready(model: str, since_wall: float) -> Callable[[dict[str, Any]], Any]:
    """A `wait_for_state` check: an instance of `model` is ready (its id); raises GivenUp when
    the model was deleted after `since_wall` and nothing will re-create it."""
    ready = instance_ready(model=model)

    def check(state: dict[str, Any]) -> Any:
        if iid := ready(state):
            return iid
        if (reason := given_up_reason(state, model, since_wall)) is not None:
            raise GivenUp(reason)
        return None
    return check


def _wall(iso: str | None) -> float:
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else 0.0
    except ValueError:
        return 0.0
