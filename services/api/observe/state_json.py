"""The replicated State in upstream's `/state` shape: camelCase, tagged unions, Memory as
`{"inBytes": n}` (pure; docs/architecture.md, "Compatibility with upstream Skulk")."""

from __future__ import annotations

import time
from typing import Any

from skulk.cluster.state import Instance, NodeInfo, RunnerKind, RunnerStatus, State, Task
from skulk.services.api.http.schema import (
    ANY_OBJECT,
    BOOLEAN,
    INTEGER,
    STRING,
    Schema,
    array,
    enum,
    map_of,
    obj,
    tagged,
)
from skulk.services.api.observe.timestamps import iso_auto
from skulk.wire.accelerator import Accelerator
from skulk.wire.models import ModelCard
from skulk.wire.staging import DownloadKind, DownloadProgress

GIB = 1024 ** 3


def memory(n: int) -> dict[str, int]:
    return {"inBytes": int(n)}


def card_json(card: ModelCard) -> dict[str, Any]:
    return {"modelId": card.model_id, "storageSize": memory(card.storage_size_bytes),
            "nLayers": card.n_layers, "hiddenSize": card.hidden_size,
            "supportsTensor": card.supports_tensor, "tasks": list(card.tasks),
            "numKeyValueHeads": card.num_key_value_heads, "family": card.family,
            "quantization": card.quantization, "contextLength": card.context_length,
            "engines": list(card.engines)}


def instance_json(inst: Instance) -> dict[str, Any]:
    shards = {rid: {f"{s.kind}ShardMetadata": {
        "modelCard": card_json(inst.card), "deviceRank": s.device_rank, "worldSize": s.world_size,
        "startLayer": s.start_layer, "endLayer": s.end_layer, "nLayers": s.n_layers}}
        for rid, s in inst.runner_to_shard.items()}
    return {f"{inst.instance_meta}Instance": {
        "instanceId": inst.instance_id,
        "shardAssignments": {"modelId": inst.model_id, "runnerToShard": shards,
                             "nodeToRunner": dict(inst.node_to_runner)},
        "contextTokenLimit": inst.context_token_limit,
        "engine": inst.engine,
        "hostsByNode": {}, "ephemeralPort": 0}}


def runner_json(status: RunnerStatus) -> dict[str, Any]:
    if status.kind == RunnerKind.LOADING:
        return {RunnerKind.LOADING: {"layersLoaded": status.layers_loaded,
                                  "totalLayers": status.total_layers}}
    if status.kind == RunnerKind.FAILED:
        return {RunnerKind.FAILED: {"errorMessage": status.error_message}}
    if status.engine_path:  # ours: the device and dtype path it serves with (e.g. the quantized choice)
        return {status.kind: {"enginePath": status.engine_path, "speculation": status.speculation or None}}
    return {status.kind: {}}


def task_json(task: Task) -> dict[str, Any]:
    p = task.params
    params = {"model": p.model, "input": [{"role": m.role, "content": m.content} for m in p.messages],
              "max_output_tokens": p.max_tokens, "temperature": p.temperature, "top_p": p.top_p,
              "top_k": p.top_k, "min_p": p.min_p, "stop": list(p.stop), "seed": p.seed,
              "stream": p.stream, "logprobs": p.logprobs, "top_logprobs": p.top_logprobs}
    return {"TextGeneration": {"taskId": task.task_id, "taskStatus": task.status,
                               "instanceId": task.instance_id, "commandId": task.command_id,
                               "ownerNode": task.owner_node, "taskParams": params,
                               "traceEnabled": task.trace, "errorType": task.error_type or None,
                               "errorMessage": task.error_message or None}}


def node_health(info: NodeInfo, now_wall: float) -> dict[str, Any]:
    """Upstream's health rules: disk_full <= 2 GB free (error), disk_low < 10 GB (warn),
    unreachable when last seen more than 15 s ago (warn)."""
    reasons, level = [], "ok"
    free = info.disk_available
    if info.disk_total and free <= 2 * GIB:
        reasons.append({"code": "disk_full", "message": f"{free / GIB:.1f} GB free",
                        "remediation": "Free disk on this node; the event log degrades at 2 GiB."})
        level = "error"
    elif info.disk_total and free < 10 * GIB:
        reasons.append({"code": "disk_low", "message": f"{free / GIB:.1f} GB free",
                        "remediation": "Free disk on this node before it fills up."})
        level = "warn"
    if info.event_log_mode == "counting":
        reasons.append({"code": "event_log_counting_only",
                        "message": f"event log counting only: {info.event_log_reason or 'disk full'}",
                        "remediation": "Free disk on this node; persistence resumes by itself within 10 s."})
        level = "error" if level == "error" else "warn"
    if now_wall - info.when > 15:
        reasons.append({"code": "unreachable", "message": f"last seen {now_wall - info.when:.0f}s ago",
                        "remediation": "Check the node is running and reachable on its cluster port."})
        level = "error" if level == "error" else "warn"
    return {"level": level, "reasons": reasons}


def download_json(node_id: str, p: DownloadProgress) -> dict[str, Any]:
    """Upstream's tagged download progress (`DownloadPending|Ongoing|Completed|Failed`)."""
    body: dict[str, Any] = {"nodeId": node_id, "modelId": p.model_id}
    if p.kind == DownloadKind.ONGOING:
        body["downloadProgress"] = {"downloadedBytes": {"inBytes": p.done_bytes},
                                    "totalBytes": {"inBytes": p.total_bytes}, "speed": p.rate_bps}
    elif p.kind == DownloadKind.COMPLETED:
        body["totalBytes"] = {"inBytes": p.total_bytes}
    elif p.kind == DownloadKind.FAILED:
        body["errorMessage"] = p.error_message
    return {p.kind: body}


def state_json(state: State, now_wall: float | None = None) -> dict[str, Any]:
    now_wall = time.time() if now_wall is None else now_wall
    nodes = state.nodes
    return {
        "instances": {i: instance_json(inst) for i, inst in state.instances.items()},
        "runners": {r: runner_json(s) for r, s in state.runners.items()},
        "tasks": {t: task_json(task) for t, task in state.tasks.items()},
        "downloads": {n: [download_json(n, p) for _m, p in sorted(models.items())]
                      for n, models in state.downloads.items()},
        "lastSeen": {n: iso_auto(info.when) for n, info in nodes.items()},
        "topology": {"nodes": sorted(nodes), "connections": {}},
        "tracingEnabled": state.tracing_enabled,
        "lastEventAppliedIdx": state.last_event_applied_idx,
        "nodeNetwork": {n: {"interfaces": [{"name": f"addr{k}", "ipAddress": a}
                                            for k, a in enumerate(i.addresses)]} for n, i in nodes.items()},
        "nodeMemory": {n: {"ramTotal": memory(i.ram_total), "ramAvailable": memory(i.ram_available),
                           "swapTotal": memory(0), "swapAvailable": memory(0)} for n, i in nodes.items()},
        "nodeIdentities": {n: {"friendlyName": i.friendly_name, "skulkVersion": i.skulk_version}
                           for n, i in nodes.items()},
        "nodeDisk": {n: {"total": memory(i.disk_total), "available": memory(i.disk_available)}
                     for n, i in nodes.items()},
        "nodeSystem": {n: {"accelerator": accelerator_json(i.accelerator), "engines": list(i.engines or ("mlx",))}
                       for n, i in nodes.items() if i.accelerator is not None},
        "nodeHealth": {n: node_health(i, now_wall) for n, i in nodes.items()},
        "clusterWarnings": cluster_warnings(nodes),
        "masterNodeId": state.master_node_id,
        "restartingNodes": {n: iso_auto(until) for n, until in state.restarting.items()},
        "deletedInstances": {i: {"modelId": d.model_id, "reason": d.reason, "cause": d.cause or None,
                                 "deletedAt": iso_auto(d.when) if d.when else None,
                                 "recreateAt": iso_auto(d.recreate_at) if d.recreate_at and d.instance else None,
                                 "replacedBy": d.replaced_by or None}
                             for i, d in state.deleted.items()},
    }


def cluster_warnings(nodes: dict[str, NodeInfo]) -> list[dict[str, Any]]:
    """What concerns the whole cluster (upstream's ClusterWarnings): nodes on different skulk
    versions (a rolling upgrade in progress, or one forgotten)."""
    by_version: dict[str, list[str]] = {}
    for node_id, info in sorted(nodes.items()):
        by_version.setdefault(info.skulk_version, []).append(info.friendly_name or node_id)
    if len(by_version) < 2:
        return []
    detail = "; ".join(f"{v} on {', '.join(names)}" for v, names in sorted(by_version.items()))
    return [{"code": "version_mismatch", "versions": by_version,
             "message": f"nodes run different skulk versions ({detail}): finish the upgrade node by node "
                        "(POST /admin/restart?node_id=... drains each)"}]


def accelerator_json(acc: Accelerator | None) -> dict[str, Any] | None:
    """A node's accelerator: `{kind: cpu|cuda|metal, name, memory, count, backend, note}`."""
    if acc is None:
        return None
    return {"kind": acc.kind, "name": acc.name, "memory": memory(acc.memory_bytes), "count": acc.count,
            "backend": acc.backend, "note": acc.note or None}


def model_entry(card: ModelCard, serving: list[str] | None = None) -> dict[str, Any]:
    """One `/v1/models` entry (snake_case, upstream's ModelListModel); ours: the engines that can
    run it and those its instances run on now."""
    serving = sorted(set(serving or ()))
    return {"id": card.model_id, "object": "model", "created": 0, "owned_by": "skulk",
            "hugging_face_id": card.model_id, "name": card.model_id.split("/", 1)[1],
            "description": "", "context_length": card.context_length,
            "tags": ["tensor"] * card.supports_tensor + ["embedding"] * card.is_embedding,
            "storage_size_megabytes": round(card.storage_size_bytes / 1024 ** 2),
            "supports_tensor": card.supports_tensor, "tasks": list(card.tasks),
            "is_custom": False, "family": card.family, "quantization": card.quantization,
            "base_model": card.model_id, "capabilities": ["embedding" if card.is_embedding else "text"],
            "engines": list(card.engines), "serving_engines": serving}


# ---- the shapes above as JSON Schemas (published in /api/openapi.json via routes.py) ----------
MEMORY: Schema = obj({"inBytes": INTEGER})
CARD: Schema = obj({"modelId": STRING, "storageSize": MEMORY, "nLayers": INTEGER, "hiddenSize": INTEGER,
                    "supportsTensor": BOOLEAN, "tasks": array(STRING), "family": STRING,
                    "quantization": STRING, "contextLength": INTEGER}, {"engines": array(STRING)})
INSTANCE: Schema = tagged(r"^[A-Za-z]+Instance$", obj({
    "instanceId": STRING, "contextTokenLimit": INTEGER, "engine": STRING,
    "shardAssignments": obj({"modelId": STRING, "nodeToRunner": map_of(STRING),
                             "runnerToShard": map_of(tagged(r"^[A-Za-z]+ShardMetadata$", obj({
                                 "modelCard": CARD, "deviceRank": INTEGER, "worldSize": INTEGER,
                                 "startLayer": INTEGER, "endLayer": INTEGER})))})}))
"""`instance_json`: `{"MlxRingInstance": {...}}` (upstream's tagged union)."""
STATE: Schema = obj({
    "instances": map_of(INSTANCE), "runners": map_of(tagged(r"^Runner[A-Za-z]+$", ANY_OBJECT)),
    "tasks": map_of(tagged(r"^[A-Za-z]+$", ANY_OBJECT)), "downloads": ANY_OBJECT, "lastSeen": map_of(STRING),
    "topology": obj({"nodes": array(STRING), "connections": ANY_OBJECT}), "tracingEnabled": BOOLEAN,
    "lastEventAppliedIdx": INTEGER, "nodeNetwork": ANY_OBJECT, "nodeMemory": ANY_OBJECT,
    "nodeIdentities": ANY_OBJECT, "nodeDisk": ANY_OBJECT, "nodeSystem": ANY_OBJECT,
    "nodeHealth": map_of(obj({"level": enum("ok", "warn", "error"), "reasons": array(ANY_OBJECT)})),
    "masterNodeId": STRING, "restartingNodes": map_of(STRING), "deletedInstances": ANY_OBJECT,
    "clusterWarnings": array(obj({"code": STRING, "message": STRING}))})
"""`state_json`: every top-level key with its type (the inner telemetry maps are open)."""
MODEL_ENTRY: Schema = obj({
    "id": STRING, "object": enum("model"), "created": INTEGER, "owned_by": STRING, "name": STRING,
    "context_length": INTEGER, "supports_tensor": BOOLEAN, "tasks": array(STRING), "family": STRING,
    "quantization": STRING, "storage_size_megabytes": INTEGER},
    {"capabilities": array(STRING), "engines": array(STRING), "serving_engines": array(STRING)})
"""`model_entry`: one model (upstream's ModelListModel)."""
MODEL_LIST: Schema = obj({"object": enum("list"), "data": array(MODEL_ENTRY)})
"""`/v1/models`: `{"object": "list", "data": [model_entry(...)]}`."""
