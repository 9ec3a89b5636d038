"""Which instance serves a request (pure). Never an instance with a failed or missing runner,
nor one on a node restarting in place (its runners are about to stop)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from skulk.cluster.state import OPEN_STATUSES, Instance, State, serving
from skulk.wire.commands import NO_INSTANCE, NO_READY_INSTANCE, RejectReason


@dataclass(frozen=True, slots=True)
class RouteError:
    status: int
    message: str
    reason: RejectReason


@dataclass(frozen=True, slots=True)
class Route:
    instance: Instance
    runner_id: str
    endpoint: str


def rank0(inst: Instance) -> str:
    return next(rid for rid, shard in inst.runner_to_shard.items() if shard.device_rank == 0)


def loads(state: State, instances: list[Instance], reported: Mapping[str, int] | None = None) -> dict[str, int]:
    """Each instance's load: the larger of what its rank-0 runner reports (requests in its batch
    and waiting; the truth about the runner, a report or so late) and the open tasks routed to
    it (which count a burst routed since that report). One pass over the tasks for all of them."""
    wanted = {i.instance_id for i in instances}
    tasks = Counter(t.instance_id for t in state.tasks.values()
                    if t.instance_id in wanted and t.status in OPEN_STATUSES)
    return {i.instance_id: max(tasks[i.instance_id], reported.get(rank0(i), 0) if reported else 0)
            for i in instances}


def route(state: State, model_id: str, reported: Mapping[str, int] | None = None,
          avoid_nodes: Collection[str] = ()) -> Route | RouteError:
    """The least-loaded serving instance of `model_id`, or an immediate error (never a wait).
    None on a node in `avoid_nodes` (the asker has seen it leave): with only those left, the
    answer is "no instance", which the asker waits out while this state catches up."""
    candidates = [i for i in state.instances.values()
                  if i.model_id == model_id and all(n not in avoid_nodes for n in i.node_to_runner)]
    if not candidates:
        return RouteError(404, NO_INSTANCE.format(model=model_id), RejectReason.NO_INSTANCE)
    ready = [i for i in candidates if serving(state, i)]
    if not ready:
        kinds = sorted({state.runners[r].kind if r in state.runners else "no runner status yet"
                        for i in candidates for r in i.runner_to_shard} |
                       {"node restarting" for i in candidates for n in i.node_to_runner if n in state.restarting})
        return RouteError(503, NO_READY_INSTANCE.format(model=model_id, kinds=", ".join(kinds)),
                          RejectReason.NOT_READY)
    load = loads(state, ready, reported)
    best = min(ready, key=lambda i: (load[i.instance_id], i.instance_id))
    rid = rank0(best)
    return Route(best, rid, state.runners[rid].endpoint)
