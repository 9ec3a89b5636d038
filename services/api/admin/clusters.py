"""`GET /admin/clusters`: the cluster this node belongs to, at a glance (an operator's second
check after `/health`, and what the dashboard's cluster card shows).

Its namespace and master; each node with its health (`ok|warn|error`) and status
(`idle|busy|unreachable`); each instance as a pool with its ranks, whether it serves (every rank
moves from loading to ready; the pool serves once all are ready), its display phase and live
tok/s. The live figures come from every node's `/v1/diagnostics/node`, asked at once (the
same fan-out as the diagnostics): an unreachable node's figures are null and it is listed.

A rank's display phase (`display_phase`) is one of loading / idle / prefill / decode /
streaming / failed, from its runner status and its flight-recorder phase:

| runner status | flight phase | display |
|---|---|---|
| RunnerFailed | any | failed |
| Idle, Connecting, Connected, Loading, Loaded, WarmingUp, ShuttingDown | any | loading |
| Ready / Running | task_submission .. prefill_stream | prefill |
| Ready / Running | decode_barrier, decode_wait_first_token | decode (first token not out yet) |
| Ready / Running | decode_stream, parser | streaming |
| Ready / Running | anything else, with requests in its batch | streaming |
| Ready / Running | anything else | idle |
| any serving status, node unreachable | unknown | null |
"""

from __future__ import annotations

import time
from typing import Any

import falcon

from skulk.cluster.state import SERVING_KINDS, Instance, RunnerKind, State
from skulk.services.api.http.cluster_replies import state_or_503
from skulk.services.api.http.schema import BOOLEAN, INTEGER, NUMBER, STRING, Schema, array, enum, nullable, obj
from skulk.services.api.observe.diagnostics_cluster import UNREACHABLE, NodeAnswer, at_key, unreachable
from skulk.services.api.observe.diagnostics_fanout import ClusterFanOut
from skulk.services.api.observe.health import generating
from skulk.services.api.observe.state_json import node_health
from skulk.wire.flight import Phase

LOADING_KINDS = frozenset(RunnerKind) - SERVING_KINDS - {RunnerKind.FAILED}
PREFILL_PHASES = frozenset({Phase.TASK_SUBMISSION, Phase.TASK_AGREEMENT, Phase.PROMPT_BUILD, Phase.VISION_PREPROCESS,
                            Phase.KV_CACHE_LOOKUP, Phase.PREFILL_BARRIER, Phase.PREFILL_PIPELINE, Phase.PREFILL_STREAM})
DECODE_PHASES = frozenset({Phase.DECODE_BARRIER, Phase.DECODE_WAIT_FIRST_TOKEN})
STREAMING_PHASES = frozenset({Phase.DECODE_STREAM, Phase.PARSER})
PHASE_ORDER = ("streaming", "decode", "prefill", "idle")
"""A pool of working ranks shows its busiest rank's phase."""


def display_phase(kind: str | None, flight_phase: str | None, active: int | None) -> str | None:
    """The rank's phase for people (see the table in the module docstring); None: unknown."""
    if kind == RunnerKind.FAILED:
        return "failed"
    if kind in LOADING_KINDS:
        return "loading"
    if kind is None or (flight_phase is None and active is None):
        return None
    if flight_phase in PREFILL_PHASES:
        return "prefill"
    if flight_phase in DECODE_PHASES:
        return "decode"
    if flight_phase in STREAMING_PHASES or active:
        return "streaming"
    return "idle"


def pool_phase(phases: list[str | None]) -> str | None:
    if "failed" in phases:
        return "failed"
    if "loading" in phases:
        return "loading"
    return next((p for p in PHASE_ORDER if p in phases), None)


def live_runners(nodes: list[NodeAnswer]) -> dict[str, dict[str, Any]]:
    """Runner id -> its live entry in its node's diagnostics (reachable nodes only)."""
    out = {}
    for n in nodes:
        for r in (n.diagnostics or {}).get("supervisorRunners") or []:
            if isinstance(r, dict) and isinstance(r.get("runnerId"), str):
                out[r["runnerId"]] = r
    return out


def rank_json(rid: str, inst: Instance, state: State, live: dict[str, Any] | None) -> dict[str, Any]:
    shard = inst.runner_to_shard[rid]
    node = next((n for n, r in inst.node_to_runner.items() if r == rid), "")
    status = state.runners.get(rid)
    kind = status.kind if status else None
    active = live.get("active") if live else None
    return {"runnerId": rid, "nodeId": node, "deviceRank": shard.device_rank, "status": kind,
            "phase": display_phase(kind, live.get("phase") if live else None, active),
            "tokensPerSecond": live.get("tokensPerSecond") if live else None,
            "active": active, "waiting": live.get("waiting") if live else None}


def pool_json(inst: Instance, state: State, live: dict[str, dict[str, Any]]) -> dict[str, Any]:
    ranks = sorted((rank_json(rid, inst, state, live.get(rid)) for rid in inst.runner_to_shard),
                   key=lambda r: r["deviceRank"])
    first = ranks[0] if ranks else None
    shard0 = inst.runner_to_shard[first["runnerId"]] if first else None
    return {"instanceId": inst.instance_id, "modelId": inst.model_id,
            "sharding": shard0.kind if shard0 else None, "worldSize": shard0.world_size if shard0 else 0,
            "serving": bool(ranks) and all(r["status"] in SERVING_KINDS for r in ranks),
            "phase": pool_phase([r["phase"] for r in ranks]),
            # rank 0 holds the queue and steps the batch every rank runs: its figures are the pool's
            "tokensPerSecond": first["tokensPerSecond"] if first else None,
            "activeRequests": first["active"] if first else None,
            "waitingRequests": first["waiting"] if first else None, "ranks": ranks}


def stamp(at: str | None) -> float:
    return at_key(at).timestamp() if at else 0.0


def node_busy(diagnostics: dict[str, Any]) -> bool:
    """`/health`'s rule applied to a node's diagnostics (its own clock for staleness)."""
    try:
        now = at_key(diagnostics["generatedAt"]).timestamp()
        return any(r.get("processAlive") and generating(
            r.get("active"), stamp(r.get("lastReportAt")), r.get("phase"), stamp(r.get("lastProgressAt")), now)
            for r in diagnostics.get("supervisorRunners") or [])
    except (KeyError, TypeError, ValueError, AttributeError):
        return False


def node_json(node_id: str, state: State, answer: NodeAnswer | None, now: float) -> dict[str, Any]:
    info = state.nodes[node_id]
    level = node_health(info, now)["level"]
    diag = answer.diagnostics if answer and not answer.error else None
    if diag is None:
        level, status = "error", "unreachable"
    else:
        status = "busy" if node_busy(diag) else "idle"
        if level == "ok" and diag.get("warnings"):
            level = "warn"
    return {"nodeId": node_id, "friendlyName": info.friendly_name, "health": level, "status": status,
            "ramTotal": info.ram_total, "ramAvailable": info.ram_available,
            "diskTotal": info.disk_total, "diskAvailable": info.disk_available}


def cluster_view(namespace: str, node_id: str, state: State, nodes: list[NodeAnswer], now: float) -> dict[str, Any]:
    """The one cluster this node belongs to (pure)."""
    by_id = {n.node_id: n for n in nodes}
    live = live_runners(nodes)
    pools = [pool_json(i, state, live) for i in sorted(state.instances.values(), key=lambda i: (i.model_id,
                                                                                             i.instance_id))]
    return {"namespace": namespace, "nodeId": node_id, "masterNodeId": state.master_node_id or None,
            "serving": any(p["serving"] for p in pools),
            "nodes": [node_json(n, state, by_id.get(n), now) for n in sorted(state.nodes)],
            "pools": pools, "unreachableNodes": unreachable(nodes) + [
                {"nodeId": n, "url": None, "error": "the node advertises no API address"}
                for n in sorted(state.nodes) if n not in by_id]}


class ClustersResource:
    def __init__(self, fan: ClusterFanOut, namespace: str) -> None:
        self.fan, self.namespace = fan, namespace

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        state_or_503(self.fan.source.replica, timeout=2.0)  # before asking anyone
        state, nodes = self.fan.gather(entries=0)
        state = state or state_or_503(self.fan.source.replica, timeout=0)
        resp.media = {"clusters": [cluster_view(self.namespace, self.fan.node_id, state, nodes, time.time())]}


_N_NUMBER, _N_INTEGER = nullable(NUMBER), nullable(INTEGER)
_PHASE = enum("loading", "idle", "prefill", "decode", "streaming", "failed", None)
CLUSTERS: Schema = obj({"clusters": array(obj({
    "namespace": STRING, "nodeId": STRING, "masterNodeId": nullable(STRING), "serving": BOOLEAN,
    "nodes": array(obj({"nodeId": STRING, "friendlyName": STRING, "health": enum("ok", "warn", "error"),
                        "status": enum("idle", "busy", "unreachable"), "ramTotal": INTEGER,
                        "ramAvailable": INTEGER, "diskTotal": INTEGER, "diskAvailable": INTEGER})),
    "pools": array(obj({
        "instanceId": STRING, "modelId": STRING, "sharding": nullable(STRING), "worldSize": INTEGER,
        "serving": BOOLEAN, "phase": _PHASE, "tokensPerSecond": _N_NUMBER, "activeRequests": _N_INTEGER,
        "waitingRequests": _N_INTEGER,
        "ranks": array(obj({"runnerId": STRING, "nodeId": STRING, "deviceRank": INTEGER,
                            "status": nullable(STRING), "phase": _PHASE, "tokensPerSecond": _N_NUMBER,
                            "active": _N_INTEGER, "waiting": _N_INTEGER}))})),
    "unreachableNodes": UNREACHABLE}))})
"""The cluster view; byte counts are plain integers, figures null where unknown."""
