"""What the worker does about the models its runners need (pure; the loop carries it out).

A model (or a companion of one) that is not on this node is staged; a copy that failed fails
the runners waiting for it, at once, so the leader's recovery deletes their instance with the
reason and re-creates it with back-off, up to its crash-loop limit: a runner never waits
forever. A failed copy is tried again once nobody on this node waits for it any more (its
instance was deleted): the re-created instance copies afresh.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from skulk.cluster.state import State

NO_STORE = "{model} is not in this node's models dir and no model store can stage it here"


@dataclass(frozen=True, slots=True)
class Waiting:
    runner_id: str
    instance_id: str


@dataclass(frozen=True, slots=True)
class StagingPlan:
    stage: list[str] = field(default_factory=list)
    fail: list[tuple[Waiting, str]] = field(default_factory=list)  # (runner, why)
    forget: list[str] = field(default_factory=list)  # failed copies nobody waits for: try again later


def waiting(state: State, node_id: str) -> dict[str, list[Waiting]]:
    """Per model: this node's runners that need it (as their model or a companion) and have not
    reported yet (a runner with a status started, or failed already)."""
    out: dict[str, list[Waiting]] = {}
    for inst in state.instances.values():
        rid = inst.node_to_runner.get(node_id)
        if rid is None or rid in state.runners:
            continue
        for model_id in (inst.model_id, *inst.card.companions):
            out.setdefault(model_id, []).append(Waiting(rid, inst.instance_id))
    return out


def plan_staging(state: State, node_id: str, missing: list[str], failed: dict[str, str],
                 can_stage: bool) -> StagingPlan:
    """`missing`: models this node's runners need and lack; `failed`: copies that failed (why)."""
    needed = waiting(state, node_id)
    plan = StagingPlan(forget=sorted(m for m in failed if m not in needed))
    for model_id in missing:
        why = failed.get(model_id) if model_id in needed else None
        if not can_stage:
            why = NO_STORE.format(model=model_id)
        if why is None:
            plan.stage.append(model_id)
        else:
            plan.fail.extend((w, why) for w in needed.get(model_id, []))
    return plan


def eviction_due(in_use: set[str], before: set[str] | None) -> bool:
    """Start-up (nothing known before), or a model stopped being used here (a deactivation)."""
    return before is None or not in_use >= before
