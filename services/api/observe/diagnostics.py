"""`GET /v1/diagnostics/node` (this node's `NodeDiagnostics`) and
`POST /v1/diagnostics/node/runners/{runner_id}/cancel` (stop one task on one of its runners).

The runners' part comes from the API's runner view (what they published on the bus, kept even
after a runner froze or died) and the replicated state; the host's part from psutil. A cancel
goes the way `POST /v1/cancel` goes: a `Cancel` to the instance's rank 0, which takes the
request out of every rank's batch within one step; the stream's own thread (on whichever node
owns it) renders the outcome and does the bookkeeping.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import falcon

from skulk.cluster.replica import StateReplica
from skulk.cluster.state import State, TaskStatus
from skulk.services.api.http.cluster_replies import state_or_503
from skulk.services.api.http.errors import http_error
from skulk.services.api.http.request_body import json_body
from skulk.services.api.http.schema import STRING, TEXT, Schema, enum, obj
from skulk.services.api.links.runner_link import RunnerLink
from skulk.services.api.observe import diagnostics_host as host
from skulk.services.api.observe.diagnostics_node import NodeFacts, node_diagnostics
from skulk.services.api.observe.runner_view import RING, RunnerView


def entries_param(req: falcon.Request) -> int:
    """`?entries=N`: how many of each runner's newest flight entries to include (default all)."""
    n = req.get_param_as_int("entries", min_value=0)
    return RING if n is None else n


class NodeDiagnosticsSource:
    """Builds this node's `NodeDiagnostics` (used here and by the cluster views)."""

    def __init__(self, facts: NodeFacts, replica: StateReplica, view: RunnerView, run_dir: Path,
                 home: Path) -> None:
        self.facts, self.replica, self.view, self.home = facts, replica, view, home
        self.processes = host.ProcessTable(run_dir)

    def build(self, state: State | None, entries: int = RING) -> dict[str, Any]:
        now = time.time()
        return node_diagnostics(self.facts, state, self.view.runners(), host.alive,
                                host.resources(self.home, None), self.processes.rows(now), now, entries)


class NodeDiagnosticsResource:
    def __init__(self, source: NodeDiagnosticsSource) -> None:
        self.source = source

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.source.build(self.source.replica.get(timeout=1.0), entries_param(req))


# ---- cancel -------------------------------------------------------------------------------------

FINISHED = frozenset({TaskStatus.COMPLETE, TaskStatus.FAILED, TaskStatus.TIMED_OUT})


@dataclass(frozen=True)
class CancelPlan:
    """What to do about a cancel: answer `status` at once, or send `Cancel(command_id)` to
    `endpoint` first (`status` "cancel_requested")."""

    status: str
    message: str
    endpoint: str = ""
    command_id: str = ""


def plan_cancel(state: State, node_id: str, runner_id: str, task_id: str) -> CancelPlan:
    """Pure: how to cancel `task_id` on this node's runner `runner_id` (HTTPError: refused)."""
    inst = next((i for i in state.instances.values() if i.node_to_runner.get(node_id) == runner_id), None)
    if inst is None:
        raise http_error(404, f"Runner not found on this node: {runner_id}")
    task = state.tasks.get(task_id)
    if task is None:
        raise http_error(404, f"Task not found: {task_id}")
    if task.instance_id != inst.instance_id:
        raise http_error(409, f"Task {task_id} does not run on runner {runner_id} (its instance is "
                              f"{task.instance_id})")
    if task.status == TaskStatus.CANCELLED:
        return CancelPlan("already_cancelled", f"Task {task_id} was already cancelled.")
    if task.status in FINISHED:
        return CancelPlan("already_completed", f"Task {task_id} already finished ({task.status}).")
    rank0 = next((rid for rid, s in inst.runner_to_shard.items() if s.device_rank == 0), "")
    status = state.runners.get(rank0)
    if status is None or not status.endpoint:
        raise http_error(409, f"Task {task_id}: the instance's rank 0 is not serving, nothing to cancel")
    return CancelPlan("cancel_requested", f"Cancel sent to rank 0 ({rank0}) for task {task_id}.",
                      status.endpoint, task.command_id)


def parse_cancel(body: Any) -> str:
    if not isinstance(body, dict):
        raise http_error(400, "request body must be a JSON object")
    task_id = body.get("taskId", body.get("task_id"))
    if not isinstance(task_id, str) or not task_id:
        raise http_error(400, "taskId is required (a string)")
    return task_id


class NodeCancelResource:
    def __init__(self, runners: RunnerLink, replica: StateReplica, node_id: str) -> None:
        self.runners, self.replica, self.node_id = runners, replica, node_id

    def on_post(self, req: falcon.Request, resp: falcon.Response, runner_id: str) -> None:
        resp.media = self.cancel(runner_id, parse_cancel(json_body(req)))

    def cancel(self, runner_id: str, task_id: str) -> dict[str, Any]:
        state = state_or_503(self.replica, timeout=2.0)
        plan = plan_cancel(state, self.node_id, runner_id, task_id)
        if plan.endpoint:
            self.runners.cancel_once(plan.endpoint, plan.command_id)
        return {"nodeId": self.node_id, "runnerId": runner_id, "taskId": task_id,
                "status": plan.status, "message": plan.message}


CANCEL_REQUEST: Schema = obj({"taskId": TEXT})
"""Upstream's body (`task_id` is taken too, as its camelCase models take snake_case)."""
CANCELLED: Schema = obj({"nodeId": STRING, "runnerId": STRING, "taskId": STRING,
                         "status": enum("cancel_requested", "already_cancelled", "already_completed"),
                         "message": STRING})
