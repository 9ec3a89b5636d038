"""This node's runners in upstream's `RunnerSupervisorDiagnostics` shape, from what the API's
runner view heard on the bus and the replicated state (pure: `now` and liveness passed in).

Phases are `wire/flight.py`'s `Phase`, upstream's names. A phase this API does not know (a newer
runner's) shows as `idle`, with the runner's word kept in the entry's `attrs.runnerPhase`, so
the documents keep their schema across versions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from skulk.cluster.state import Instance, RunnerKind, ShardMeta, State
from skulk.services.api.http.schema import (
    BOOLEAN,
    INTEGER,
    NUMBER,
    STRING,
    Schema,
    array,
    enum,
    map_of,
    nullable,
    obj,
    one_of,
)
from skulk.services.api.observe.runner_view import RunnerSeen
from skulk.services.api.observe.timestamps import iso_micros
from skulk.wire.flight import PHASES, FlightEntry, MlxMemory, Phase

Alive = Callable[[int], bool]


def shown_phase(phase: str) -> str:
    """A runner's phase as the diagnostics show it: one of `PHASES` (see the module docstring)."""
    return phase if phase in PHASES else Phase.IDLE


def memory(n: int | None) -> dict[str, int] | None:
    return None if n is None else {"inBytes": int(n)}


def mlx_memory_json(m: MlxMemory | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {"generatedAt": iso_micros(m.at), "active": memory(m.active), "cache": memory(m.cache),
            "peak": memory(m.peak), "wiredLimit": memory(m.wired_limit), "source": m.source}


def entry_attrs(e: FlightEntry) -> dict[str, Any]:
    attrs: dict[str, Any] = dict(e.attrs)
    if shown_phase(e.phase) != e.phase:
        attrs["runnerPhase"] = e.phase
    return attrs


def entry_json(e: FlightEntry, shard: ShardMeta | None) -> dict[str, Any]:
    """One flight-recorder entry as upstream's supervisor keeps it (with its `context`)."""
    return {"at": iso_micros(e.at), "phase": shown_phase(e.phase), "event": e.event, "detail": e.detail or None,
            "attrs": entry_attrs(e),
            "context": {"nodeId": e.node_id, "runnerId": e.runner_id, "pid": e.pid or None,
                        "instanceId": e.instance_id, "modelId": e.model_id, "rank": e.rank,
                        "worldSize": e.world_size, "startLayer": shard.start_layer if shard else None,
                        "endLayer": shard.end_layer if shard else None, "nLayers": shard.n_layers if shard else None},
            "taskId": e.task_id or None, "commandId": e.command_id or None, "mlxMemory": mlx_memory_json(e.mlx_memory)}


def placed_here(state: State | None, node_id: str) -> dict[str, Instance]:
    """Runner id -> its instance, for every runner the state places on `node_id`."""
    if state is None:
        return {}
    return {rid: inst for inst in state.instances.values()
            if (rid := inst.node_to_runner.get(node_id))}


def runner_json(runner_id: str, node_id: str, seen: RunnerSeen | None, inst: Instance | None,
                state: State | None, alive: Alive, now: float, entries: int) -> dict[str, Any]:
    """One runner of this node (`entries`: how many of its newest flight entries to include)."""
    report = seen.report if seen else None
    ring = list(seen.entries) if seen else []
    last = ring[-1] if ring else None
    shard = inst.runner_to_shard.get(runner_id) if inst else None
    status = state.runners.get(runner_id) if state else None
    kind = status.kind if status else report.status.kind if report else RunnerKind.IDLE
    pid = (report.pid if report and report.pid else 0) or (last.pid if last else 0)
    phase = shown_phase(last.phase if last else report.phase if report and report.phase else Phase.CREATED)
    since = last.phase_since if last and last.phase_since else 0.0
    mem = next((e.mlx_memory for e in reversed(ring) if e.mlx_memory is not None), None)
    return {
        "runnerId": runner_id, "nodeId": node_id,
        "instanceId": inst.instance_id if inst else report.instance_id if report else last.instance_id if last else "",
        "modelId": inst.model_id if inst else last.model_id if last else "",
        "deviceRank": shard.device_rank if shard else last.rank if last else 0,
        "worldSize": shard.world_size if shard else last.world_size if last else 1,
        "startLayer": shard.start_layer if shard else None, "endLayer": shard.end_layer if shard else None,
        "nLayers": shard.n_layers if shard else None,
        "pid": pid or None, "processAlive": bool(pid) and alive(pid),
        "exitCode": status.exit_code if status else None,
        "statusKind": kind,
        "statusSince": iso_micros(seen.status_since) if seen and seen.status_since else None,
        "secondsInStatus": round(now - seen.status_since, 3) if seen and seen.status_since else None,
        "phase": phase, "phaseStartedAt": iso_micros(since) if since else None,
        "secondsInPhase": round(max(0.0, now - since), 3) if since else 0.0,
        "lastProgressAt": iso_micros(max(last.at, last.last_progress_at)) if last else None,
        "activeTaskId": (last.task_id or None) if last else None,
        "activeCommandId": (last.command_id or None) if last else None,
        "phaseDetail": (last.detail or None) if last else None,
        "lastMlxMemory": mlx_memory_json(mem),
        "tokensPerSecond": report.tok_s if report else None,
        "tokensTotal": report.tokens_total if report else None,
        "active": report.active if report else None, "waiting": report.waiting if report else None,
        "lastReportAt": iso_micros(seen.reported_at) if seen and seen.reported_at else None,
        "flightRecorder": [entry_json(e, shard) for e in ring[-entries:]] if entries > 0 else [],
    }


def runners_json(node_id: str, seen: dict[str, RunnerSeen], state: State | None, alive: Alive, now: float,
                 entries: int) -> list[dict[str, Any]]:
    """Every runner placed on this node or heard from lately, by (modelId, deviceRank, runnerId)."""
    placed = placed_here(state, node_id)
    out = [runner_json(rid, node_id, seen.get(rid), placed.get(rid), state, alive, now, entries)
           for rid in sorted(set(placed) | set(seen))]
    return sorted(out, key=lambda r: (r["modelId"], r["deviceRank"], r["runnerId"]))


STUCK_S = 30.0
"""A runner in a working phase with no flight entry for this long is probably frozen or blocked."""
WORKING = frozenset({Phase.TASK_AGREEMENT, Phase.PROMPT_BUILD, Phase.KV_CACHE_LOOKUP, Phase.PREFILL_BARRIER,
                     Phase.PREFILL_PIPELINE, Phase.PREFILL_STREAM, Phase.DECODE_BARRIER, Phase.DECODE_WAIT_FIRST_TOKEN,
                     Phase.DECODE_STREAM, Phase.PARSER})


def runner_warnings(runners: Iterable[dict[str, Any]], last_update: dict[str, float], now: float) -> list[str]:
    """Warnings an operator should act on (`last_update`: runner id -> its newest entry's time)."""
    out = []
    for r in runners:
        rid, kind = r["runnerId"], r["statusKind"]
        if r["pid"] and not r["processAlive"] and kind not in (RunnerKind.FAILED, RunnerKind.SHUTTING_DOWN):
            out.append(f"runner {rid}: process {r['pid']} is not alive but its status is {kind}")
        quiet = now - last_update.get(rid, now)
        if r["phase"] in WORKING and quiet > STUCK_S:
            out.append(f"runner {rid} (rank {r['deviceRank']}): no flight-recorder update for {quiet:.0f} s "
                       f"in {r['phase']} (frozen, or blocked in a collective waiting on another rank?)")
    return out


# ---- schemas ------------------------------------------------------------------------------------

MEMORY: Schema = obj({"inBytes": INTEGER})
MLX_MEMORY: Schema = nullable(obj({"generatedAt": STRING, "active": nullable(MEMORY), "cache": nullable(MEMORY),
                                   "peak": nullable(MEMORY), "wiredLimit": nullable(MEMORY), "source": STRING}))
PHASE: Schema = enum(*PHASES)
ATTRS: Schema = map_of(one_of(STRING, INTEGER, NUMBER, BOOLEAN, array(STRING)))
N_STRING, N_INTEGER = nullable(STRING), nullable(INTEGER)
FLIGHT_ENTRY: Schema = obj({
    "at": STRING, "phase": PHASE, "event": STRING, "detail": N_STRING, "attrs": ATTRS,
    "context": obj({"nodeId": STRING, "runnerId": STRING, "pid": N_INTEGER, "instanceId": STRING,
                    "modelId": STRING, "rank": INTEGER, "worldSize": INTEGER, "startLayer": N_INTEGER,
                    "endLayer": N_INTEGER, "nLayers": N_INTEGER}),
    "taskId": N_STRING, "commandId": N_STRING, "mlxMemory": MLX_MEMORY})
RUNNER: Schema = obj({
    "runnerId": STRING, "nodeId": STRING, "instanceId": STRING, "modelId": STRING, "deviceRank": INTEGER,
    "worldSize": INTEGER, "startLayer": N_INTEGER, "endLayer": N_INTEGER, "nLayers": N_INTEGER,
    "pid": N_INTEGER, "processAlive": BOOLEAN, "exitCode": N_INTEGER, "statusKind": STRING,
    "statusSince": N_STRING, "secondsInStatus": nullable(NUMBER), "phase": PHASE, "phaseStartedAt": N_STRING,
    "secondsInPhase": NUMBER, "lastProgressAt": N_STRING, "activeTaskId": N_STRING, "activeCommandId": N_STRING,
    "phaseDetail": N_STRING, "lastMlxMemory": MLX_MEMORY, "tokensPerSecond": nullable(NUMBER),
    "tokensTotal": N_INTEGER, "active": N_INTEGER, "waiting": N_INTEGER, "lastReportAt": N_STRING,
    "flightRecorder": array(FLIGHT_ENTRY)})
"""Upstream's `RunnerSupervisorDiagnostics` (the fields we can know), plus the runner's live load."""
