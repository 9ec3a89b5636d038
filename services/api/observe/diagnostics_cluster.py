"""The cluster views stitched from every node's `NodeDiagnostics` (pure): upstream's
`/v1/diagnostics/cluster` and `ClusterTimeline`.

Each peer's answer is checked before use; a peer that refused, timed out, or answered something
that is not a usable `NodeDiagnostics` lands in `unreachableNodes` with the reason, and the
others are merged as if it were absent. Runners sort by (modelId, deviceRank, runnerId); the
timeline holds every flight entry of every runner, sorted by (at, nodeId, deviceRank), so ranks
that disagree (one waiting in a decode barrier, another silent since long before) show at a
glance.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from skulk.services.api.http.schema import BOOLEAN, INTEGER, NUMBER, STRING, Schema, array, nullable, obj
from skulk.services.api.links.peers import PeerAnswer
from skulk.services.api.observe.diagnostics_node import NODE_DIAGNOSTICS
from skulk.services.api.observe.diagnostics_runners import ATTRS, MLX_MEMORY, PHASE
from skulk.services.api.observe.timestamps import iso_micros


@dataclass(frozen=True)
class NodeAnswer:
    """One node's part in a cluster view: its diagnostics, or why there are none."""

    node_id: str
    url: str | None
    diagnostics: dict[str, Any] | None
    error: str = ""


def unusable(body: Any) -> str:
    """Why a peer's body is not a `NodeDiagnostics` we can merge ("" when it is)."""
    if not isinstance(body, dict):
        return "answer is not a JSON object"
    runners = body.get("supervisorRunners")
    if not isinstance(runners, list) or not all(isinstance(r, dict) for r in runners):
        return "answer has no supervisorRunners list"
    return ""


def node_answers(local: NodeAnswer, answers: list[PeerAnswer], departed: dict[str, float],
                 now: float) -> list[NodeAnswer]:
    """This node first, then each peer's answer in peer order (`departed`: peers no longer in the
    state, by when gossip last saw them live, so their error says so)."""
    out = [local]
    for a in answers:
        error = a.error or unusable(a.body)
        if error and a.peer.node_id in departed:
            error += f" (left the cluster {max(0.0, now - departed[a.peer.node_id]):.0f} s ago)"
        out.append(NodeAnswer(a.peer.node_id, a.peer.url, None if error else a.body, error))
    return out


def cluster_json(local_id: str, master: str | None, nodes: list[NodeAnswer], now: float) -> dict[str, Any]:
    """Upstream's `/v1/diagnostics/cluster`, plus `unreachableNodes` as in the timeline."""
    return {"generatedAt": iso_micros(now), "localNodeId": local_id, "masterNodeId": master,
            "nodes": [{"nodeId": n.node_id, "url": n.url, "ok": not n.error, "diagnostics": n.diagnostics,
                       "error": n.error or None} for n in nodes],
            "unreachableNodes": unreachable(nodes)}


def unreachable(nodes: list[NodeAnswer]) -> list[dict[str, Any]]:
    return [{"nodeId": n.node_id, "url": n.url, "error": n.error} for n in nodes if n.error]


def at_key(at: str) -> dt.datetime:
    """Sort key of an entry's time (ValueError when it is not ISO 8601 with a zone)."""
    when = dt.datetime.fromisoformat(at)
    if when.tzinfo is None:
        raise ValueError(f"timestamp without a zone: {at!r}")
    return when


def runner_synopsis(node_id: str, r: dict[str, Any]) -> dict[str, Any]:
    return {"nodeId": node_id, "runnerId": r["runnerId"], "instanceId": r["instanceId"], "modelId": r["modelId"],
            "deviceRank": int(r["deviceRank"]), "worldSize": int(r["worldSize"]), "pid": r.get("pid"),
            "processAlive": bool(r.get("processAlive")), "statusKind": r["statusKind"], "phase": r["phase"],
            "phaseDetail": r.get("phaseDetail"), "secondsInPhase": float(r.get("secondsInPhase") or 0.0),
            "lastProgressAt": r.get("lastProgressAt"), "activeTaskId": r.get("activeTaskId"),
            "activeCommandId": r.get("activeCommandId"), "lastMlxMemory": r.get("lastMlxMemory")}


def timeline_entry(node_id: str, r: dict[str, Any], e: dict[str, Any]) -> dict[str, Any]:
    ctx = e.get("context") or {}
    at_key(e["at"])  # refuse an entry whose time cannot be sorted
    return {"at": e["at"], "nodeId": ctx.get("nodeId") or node_id, "runnerId": r["runnerId"],
            "deviceRank": int(ctx.get("rank", r["deviceRank"])), "worldSize": int(ctx.get("worldSize", r["worldSize"])),
            "phase": e["phase"], "event": e["event"], "detail": e.get("detail"), "attrs": e.get("attrs") or {},
            "taskId": e.get("taskId"), "commandId": e.get("commandId"), "mlxMemory": e.get("mlxMemory")}


def node_part(n: NodeAnswer) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One node's runners and entries (KeyError/TypeError/ValueError: its diagnostics are malformed)."""
    assert n.diagnostics is not None
    runners, entries = [], []
    for r in n.diagnostics["supervisorRunners"]:
        runners.append(runner_synopsis(n.node_id, r))
        entries += [timeline_entry(n.node_id, r, e) for e in r.get("flightRecorder") or []]
    return runners, entries


def timeline_json(local_id: str, master: str | None, nodes: list[NodeAnswer], now: float) -> dict[str, Any]:
    """Upstream's `ClusterTimeline` from every node's part; a malformed part makes its node
    unreachable (with the reason), never the call fail."""
    runners: list[dict[str, Any]] = []
    entries: list[dict[str, Any]] = []
    checked = []
    for n in nodes:
        if not n.error:
            try:
                part = node_part(n)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                n = NodeAnswer(n.node_id, n.url, None, f"malformed diagnostics: {type(exc).__name__}: {exc}")
            else:
                runners += part[0]
                entries += part[1]
        checked.append(n)
    runners.sort(key=lambda r: (r["modelId"], r["deviceRank"], r["runnerId"]))
    entries.sort(key=lambda e: (at_key(e["at"]), e["nodeId"], e["deviceRank"]))
    return {"generatedAt": iso_micros(now), "localNodeId": local_id, "masterNodeId": master,
            "runners": runners, "timeline": entries, "unreachableNodes": unreachable(checked)}


_N_STRING = nullable(STRING)
UNREACHABLE: Schema = array(obj({"nodeId": STRING, "url": _N_STRING, "error": STRING}))
CLUSTER: Schema = obj({
    "generatedAt": STRING, "localNodeId": STRING, "masterNodeId": _N_STRING,
    "nodes": array(obj({"nodeId": STRING, "url": _N_STRING, "ok": BOOLEAN,
                        "diagnostics": nullable(NODE_DIAGNOSTICS), "error": _N_STRING})),
    "unreachableNodes": UNREACHABLE})
TIMELINE: Schema = obj({
    "generatedAt": STRING, "localNodeId": STRING, "masterNodeId": _N_STRING,
    "runners": array(obj({
        "nodeId": STRING, "runnerId": STRING, "instanceId": STRING, "modelId": STRING, "deviceRank": INTEGER,
        "worldSize": INTEGER, "pid": nullable(INTEGER), "processAlive": BOOLEAN, "statusKind": STRING,
        "phase": PHASE, "phaseDetail": _N_STRING, "secondsInPhase": NUMBER, "lastProgressAt": _N_STRING,
        "activeTaskId": _N_STRING, "activeCommandId": _N_STRING, "lastMlxMemory": MLX_MEMORY})),
    "timeline": array(obj({
        "at": STRING, "nodeId": STRING, "runnerId": STRING, "deviceRank": INTEGER, "worldSize": INTEGER,
        "phase": PHASE, "event": STRING, "detail": _N_STRING, "attrs": ATTRS, "taskId": _N_STRING,
        "commandId": _N_STRING, "mlxMemory": MLX_MEMORY})),
    "unreachableNodes": UNREACHABLE})
"""Upstream's `ClusterTimeline`, field by field."""
