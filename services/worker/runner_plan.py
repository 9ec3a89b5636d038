"""Which runner processes this node should have (pure): start what the state assigns here,
stop what it no longer does. The worker sends the result to the runners sub-supervisor.

Nothing starts while the node is marked restarting in place: the old image is stopping, and
the new one starts its runners once it has cleared the mark, so a runner never reports ready
while routing still skips its node."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from skulk.cluster.placement import ring_port
from skulk.cluster.state import State
from skulk.node.role_args import RunnerPlacement


@dataclass(frozen=True, slots=True)
class RunnerStart:
    runner_id: str
    args: tuple[str, ...]  # its `RunnerPlacement`, after the node's runner settings (the template's)


@dataclass(frozen=True, slots=True)
class Plan:
    """Runners to start, runners to stop, and models to stage first (their runners wait)."""

    start: list[RunnerStart]
    stop: list[str]
    missing: list[str]
    starting: list[str] = field(default_factory=list)  # the models (and companions) of `start`


def plan(state: State, node_id: str, running: set[str], locate: Callable[[str], Path | None], listen: str,
         advertise: str) -> Plan:
    """`locate(model_id)`: where this node loads the model from (its models dir, the store
    path on the store host, a complete staged copy), or None while it has no copy. A runner
    starts once its model and the model's companions are all here."""
    wanted: dict[str, RunnerStart] = {}
    models: dict[str, tuple[str, ...]] = {}  # runner -> its model and companions
    missing: set[str] = set()
    for inst in state.instances.values():
        rid = inst.node_to_runner.get(node_id)
        if rid is None:
            continue
        model_dir = locate(inst.model_id)
        absent = ([inst.model_id] if model_dir is None else []) + \
            [c for c in inst.card.companions if locate(c) is None]  # its companions are staged with it
        if absent or model_dir is None:
            missing.update(absent)
            if rid in running:  # a runner already on it (a copy is never removed under one)
                wanted[rid] = RunnerStart(rid, ())
            continue
        models[rid] = (inst.model_id, *inst.card.companions)
        shard = inst.runner_to_shard[rid]
        ranks = sorted(inst.runner_to_shard.values(), key=lambda m: m.device_rank)
        control = f"{inst.ring_hosts[0].rsplit(':', 1)[0]}:{ring_port(inst.instance_id, -1)}" \
            if inst.ring_hosts else ""
        placement = RunnerPlacement(
            runner_id=rid, instance_id=inst.instance_id, node_id=node_id, model_id=inst.model_id,
            model_dir=model_dir, listen=listen, advertise=advertise, rank=shard.device_rank,
            world_size=shard.world_size, start_layer=shard.start_layer, end_layer=shard.end_layer,
            embedding=inst.card.is_embedding, engine=inst.engine)
        if shard.world_size > 1:
            placement = replace(placement, sharding=shard.kind, hosts=inst.ring_hosts, control=control,
                                split=tuple(m.end_layer - m.start_layer for m in ranks))
        wanted[rid] = RunnerStart(rid, placement.to_argv())
    start = [] if node_id in state.restarting else [s for rid, s in sorted(wanted.items()) if rid not in running]
    stop = sorted(rid for rid in running if rid not in wanted)
    return Plan(start, stop, sorted(missing), sorted({m for s in start for m in models[s.runner_id]}))
