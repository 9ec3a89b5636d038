"""Which runner processes this node should have (pure): start what the state assigns here,
stop what it no longer does. The service sends the result to the runners sub-supervisor.

Nothing starts while the node is marked restarting in place: the old image is stopping, and
the new one starts its runners once it has cleared the mark, so a runner never reports ready
while routing still skips its node."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from skulk.wire.models import dir_name
from skulk.wire.placement import ring_port
from skulk.wire.state import State


@dataclass(frozen=True, slots=True)
class RunnerStart:
    runner_id: str
    args: tuple[str, ...]


def plan(state: State, node_id: str, running: set[str], models_dir: Path, listen: str,
         advertise: str) -> tuple[list[RunnerStart], list[str]]:
    wanted: dict[str, RunnerStart] = {}
    for inst in state.instances.values():
        rid = inst.node_to_runner.get(node_id)
        if rid is None:
            continue
        shard = inst.runner_to_shard[rid]
        ranks = sorted(inst.runner_to_shard.values(), key=lambda m: m.device_rank)
        control = f"{inst.ring_hosts[0].rsplit(':', 1)[0]}:{ring_port(inst.instance_id, -1)}" \
            if inst.ring_hosts else ""
        distributed = ("--sharding", shard.kind, "--hosts", ",".join(inst.ring_hosts),
                       "--split", ",".join(str(m.end_layer - m.start_layer) for m in ranks),
                       "--control", control) if shard.world_size > 1 else ()
        wanted[rid] = RunnerStart(rid, (*distributed,
            "--runner-id", rid, "--instance-id", inst.instance_id, "--node-id", node_id,
            "--model-id", inst.model_id, "--model-dir", str(models_dir / dir_name(inst.model_id)),
            "--listen", listen, "--advertise", advertise,
            "--rank", str(shard.device_rank), "--world-size", str(shard.world_size),
            "--start-layer", str(shard.start_layer), "--end-layer", str(shard.end_layer)))
    start = [] if node_id in state.restarting else [s for rid, s in sorted(wanted.items()) if rid not in running]
    stop = sorted(rid for rid in running if rid not in wanted)
    return start, stop
