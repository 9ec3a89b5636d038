"""Builders for the diagnostics' tests (one node's and the cluster's): a two-rank pipeline
state on two nodes, runner reports and flight-recorder entries at a fixed time, and a schema
check. Their `CARD` and `node` are the diagnostics' own (a 512-token context, nodes with
addresses and disks), not `builders.py`'s."""

from __future__ import annotations

from typing import Any

import jsonschema

from skulk.cluster.state import Instance, NodeInfo, RunnerStatus, ShardMeta, State, Task
from skulk.wire.events import RunnerReport
from skulk.wire.flight import FlightEntry, MlxMemory
from skulk.wire.models import ModelCard

T0 = 1_700_000_000.0
GIB = 1024 ** 3
CARD = ModelCard(model_id="skulk/demo-tiny", storage_size_bytes=13_000_000, n_layers=4, hidden_size=256,
                 num_key_value_heads=2, supports_tensor=True, context_length=512, family="qwen2", quantization="")


def report(rid: str = "r0", active: int = 0, kind: str = "RunnerReady", phase: str = "idle", tok_s: float = 0.0,
           pid: int = 100) -> RunnerReport:
    return RunnerReport(runner_id=rid, instance_id="i1", status=RunnerStatus(kind=kind), active=active, phase=phase,
                        tok_s=tok_s, pid=pid)


def entry(rid: str = "r0", seq: int = 0, at: float = T0, phase: str = "idle", rank: int = 0, node: str = "n1",
          since: float = T0, pid: int = 100, mem: MlxMemory | None = None, task: str = "") -> FlightEntry:
    return FlightEntry(runner_id=rid, instance_id="i1", model_id=CARD.model_id, node_id=node, rank=rank, world_size=2,
                       pid=pid, seq=seq, at=at, phase=phase, event="enter", phase_since=since, mlx_memory=mem,
                       task_id=task, command_id=f"c-{task}" if task else "")


def node(nid: str, port: int = 1000) -> NodeInfo:
    return NodeInfo(node_id=nid, friendly_name=f"name-{nid}", skulk_version="0.1", ram_total=16 * GIB,
                    ram_available=8 * GIB, when=T0, addresses=("127.0.0.1",), disk_total=500 * GIB,
                    disk_available=100 * GIB, api_port=port)


def pipeline_state(kinds: tuple[str, str] = ("RunnerReady", "RunnerReady"), tasks: dict[str, Task] | None = None,
                   master: str = "n1") -> State:
    shards = {f"r{k}": ShardMeta(kind="Pipeline", device_rank=k, world_size=2, start_layer=2 * k,
                                 end_layer=2 * k + 2, n_layers=4) for k in range(2)}
    inst = Instance(instance_id="i1", instance_meta="MlxRing", card=CARD, runner_to_shard=shards,
                    node_to_runner={"n1": "r0", "n2": "r1"}, context_token_limit=512)
    runners = {f"r{k}": RunnerStatus(kind=kinds[k], endpoint=f"tcp://127.0.0.1:{7000 + k}") for k in range(2)}
    return State(session="s", master_node_id=master, instances={"i1": inst}, runners=runners,
                 nodes={"n1": node("n1", 1001), "n2": node("n2", 1002)}, tasks=tasks or {})


def validate(schema: dict[str, Any], doc: Any) -> None:
    jsonschema.Draft202012Validator(schema).validate(doc)
