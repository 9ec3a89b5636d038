"""Upstream's `NodeDiagnostics` document of one node, assembled from its parts: the host's
facts, the runner view's records, the state and `now` are passed in (pure but for the host
name, the working directory and the platform strings of `runtime` and `identity`)."""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skulk.cluster.state import OPEN_STATUSES, Instance, RunnerKind, State
from skulk.services.api.http.schema import BOOLEAN, INTEGER, STRING, Schema, array, enum, nullable, obj
from skulk.services.api.observe.diagnostics_host import PROCESS, RESOURCES
from skulk.services.api.observe.diagnostics_runners import RUNNER, Alive, memory, runner_warnings, runners_json
from skulk.services.api.observe.runner_view import RunnerSeen
from skulk.services.api.observe.state_json import accelerator_json
from skulk.services.api.observe.timestamps import iso_micros


@dataclass(frozen=True)
class NodeFacts:
    """What this API knows about its own node from its arguments."""

    node_id: str
    version: str
    namespace: str
    config_path: Path
    structured_logging: bool = False


def runtime_json(facts: NodeFacts, state: State | None) -> dict[str, Any]:
    me = state.nodes.get(facts.node_id) if state else None
    master = state.master_node_id if state and state.master_node_id else None
    return {"nodeId": facts.node_id, "hostname": socket.gethostname(),
            "friendlyName": me.friendly_name if me else socket.gethostname(),
            "isMaster": master == facts.node_id, "masterNodeId": master, "cwd": os.getcwd(),
            "configPath": str(facts.config_path), "configFileExists": facts.config_path.is_file(),
            "skulkVersion": facts.version, "skulkCommit": None, "libp2pNamespace": facts.namespace,
            "pythonUnbuffered": bool(os.environ.get("PYTHONUNBUFFERED")),
            "tracingEnabled": bool(getattr(state, "tracing_enabled", False)),
            "structuredLoggingConfigured": facts.structured_logging, "loggingIngestUrl": None}


def identity_json(facts: NodeFacts, state: State | None) -> dict[str, Any] | None:
    me = state.nodes.get(facts.node_id) if state else None
    if me is None:
        return None
    acc = me.accelerator
    return {"modelId": platform.machine(), "chipId": (acc.name if acc and acc.kind != "cuda" else "")
            or platform.processor() or platform.machine(),
            "friendlyName": me.friendly_name, "osVersion": f"{platform.system()} {platform.release()}",
            "osBuildVersion": platform.version(), "skulkVersion": me.skulk_version, "skulkCommit": None,
            "accelerator": accelerator_json(acc)}


def gathered_memory(facts: NodeFacts, state: State | None) -> dict[str, Any] | None:
    me = state.nodes.get(facts.node_id) if state else None
    if me is None:
        return None
    return {"ramTotal": memory(me.ram_total), "ramAvailable": memory(me.ram_available),
            "swapTotal": memory(0), "swapAvailable": memory(0)}


def placement_json(inst: Instance, state: State, node_id: str) -> dict[str, Any]:
    """One instance as upstream's `placements` entry, with the warnings its ranks raise."""
    node_of = {rid: nid for nid, rid in inst.node_to_runner.items()}
    master = state.master_node_id or None
    tasks = sorted(t.task_id for t in state.tasks.values()
                   if t.instance_id == inst.instance_id and t.status in OPEN_STATUSES)
    runners: list[dict[str, Any]] = []
    for rid, shard in sorted(inst.runner_to_shard.items(), key=lambda kv: kv[1].device_rank):
        nid = node_of.get(rid, "")
        info = state.nodes.get(nid)
        status = state.runners.get(rid)
        runners.append({"runnerId": rid, "nodeId": nid, "friendlyName": info.friendly_name if info else None,
                        "statusKind": status.kind if status else None, "deviceRank": shard.device_rank,
                        "worldSize": shard.world_size, "startLayer": shard.start_layer, "endLayer": shard.end_layer,
                        "nLayers": shard.n_layers, "isLocal": nid == node_id, "isMaster": nid == master,
                        "tasks": tasks})
    warnings = []
    kinds = {r["statusKind"] for r in runners}
    if len(kinds) > 1:
        warnings.append("ranks disagree on status: " + ", ".join(
            f"rank {r['deviceRank']} {r['statusKind'] or 'unknown'}" for r in runners))
    for r in runners:
        status = state.runners.get(r["runnerId"])
        if status is not None and status.kind == RunnerKind.FAILED:
            warnings.append(f"rank {r['deviceRank']} failed: {status.error_message or 'no reason given'}")
        if r["nodeId"] and r["nodeId"] not in state.nodes:
            warnings.append(f"rank {r['deviceRank']}'s node {r['nodeId']} is not in the cluster")
    placement_nodes = sorted(inst.node_to_runner)
    return {"instanceId": inst.instance_id, "modelId": inst.model_id, "masterNodeId": master,
            "masterIsPlacementNode": master in placement_nodes, "localNodeIsPlacementNode": node_id in placement_nodes,
            "placementNodeIds": placement_nodes, "runners": runners, "warnings": warnings}


def node_diagnostics(facts: NodeFacts, state: State | None, seen: dict[str, RunnerSeen], alive: Alive,
                     resources: dict[str, Any], processes: list[dict[str, Any]], now: float,
                     entries: int) -> dict[str, Any]:
    """The whole document (`resources` and `processes` come from `diagnostics_host`)."""
    runners = runners_json(facts.node_id, seen, state, alive, now, entries)
    last_update = {rid: s.entries[-1].at for rid, s in seen.items() if s.entries}
    warnings = [] if state is not None else ["cluster state not available yet (the master is starting)"]
    warnings += runner_warnings(runners, last_update, now)
    placements = ([placement_json(i, state, facts.node_id)
                   for i in sorted(state.instances.values(), key=lambda i: i.instance_id)] if state else [])
    return {"generatedAt": iso_micros(now), "runtime": runtime_json(facts, state),
            "identity": identity_json(facts, state),
            "resources": {**resources, "gatheredMemory": gathered_memory(facts, state)},
            "processes": processes, "supervisorRunners": runners, "placements": placements, "warnings": warnings}


_N_STRING, _N_INTEGER = nullable(STRING), nullable(INTEGER)
RUNTIME: Schema = obj({
    "nodeId": STRING, "hostname": STRING, "friendlyName": STRING, "isMaster": BOOLEAN, "masterNodeId": _N_STRING,
    "cwd": STRING, "configPath": STRING, "configFileExists": BOOLEAN, "skulkVersion": STRING,
    "skulkCommit": _N_STRING, "libp2pNamespace": STRING, "pythonUnbuffered": BOOLEAN, "tracingEnabled": BOOLEAN,
    "structuredLoggingConfigured": BOOLEAN, "loggingIngestUrl": _N_STRING})
IDENTITY: Schema = nullable(obj({
    "modelId": STRING, "chipId": STRING, "friendlyName": STRING, "osVersion": STRING, "osBuildVersion": STRING,
    "skulkVersion": STRING, "skulkCommit": _N_STRING},
    {"accelerator": nullable(obj({"kind": enum("cpu", "cuda", "metal"), "name": STRING,
                                  "memory": obj({"inBytes": INTEGER}), "count": INTEGER, "backend": STRING,
                                  "note": _N_STRING}))}))
PLACEMENT: Schema = obj({
    "instanceId": STRING, "modelId": STRING, "masterNodeId": _N_STRING, "masterIsPlacementNode": BOOLEAN,
    "localNodeIsPlacementNode": BOOLEAN, "placementNodeIds": array(STRING),
    "runners": array(obj({"runnerId": STRING, "nodeId": STRING, "friendlyName": _N_STRING,
                          "statusKind": _N_STRING, "deviceRank": INTEGER, "worldSize": INTEGER,
                          "startLayer": INTEGER, "endLayer": INTEGER, "nLayers": INTEGER, "isLocal": BOOLEAN,
                          "isMaster": BOOLEAN, "tasks": array(STRING)})),
    "warnings": array(STRING)})
NODE_DIAGNOSTICS: Schema = obj({
    "generatedAt": STRING, "runtime": RUNTIME, "identity": IDENTITY, "resources": RESOURCES,
    "processes": array(PROCESS), "supervisorRunners": array(RUNNER), "placements": array(PLACEMENT),
    "warnings": array(STRING)})
"""Upstream's `NodeDiagnostics` (section 1.6)."""
