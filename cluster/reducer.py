"""`apply(state, indexed_event) -> state`: the one pure reducer every replica runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from skulk.cluster.catalog import NodeCatalogUpdated, catalog_key
from skulk.cluster.state import (
    DeletionCauseFound,
    DeletionNote,
    IndexedEvent,
    InstanceCreated,
    InstanceDeleted,
    NodeGatheredInfo,
    NodeRestarting,
    NodeTimedOut,
    RecreationAbandoned,
    RunnerStatusUpdated,
    State,
    Task,
    TaskCreated,
    TaskDeleted,
    TaskFailed,
    TaskStatus,
    TaskStatusUpdated,
)
from skulk.wire.config_sync import ConfigChanged
from skulk.wire.staging import NodeDownloadUpdated, StagingPurged
from skulk.wire.tracing import TracingSet

DELETIONS_KEPT = 20


class OutOfOrder(ValueError):
    """An event whose index is not the next one: the replica must re-sync."""


def _has_runner(state: State, runner_id: str) -> bool:
    """Whether an instance has this runner (a scan, no set of every runner built per event)."""
    return any(runner_id in inst.runner_to_shard for inst in state.instances.values())


def apply(state: State, indexed: IndexedEvent) -> State:
    if indexed.idx != state.last_event_applied_idx + 1:
        raise OutOfOrder(f"event {indexed.idx} after {state.last_event_applied_idx}")
    return replace(_apply(state, indexed.event), last_event_applied_idx=indexed.idx)


def _apply(state: State, event: object) -> State:
    if isinstance(event, InstanceCreated):
        state = replace(state, instances={**state.instances, event.instance.instance_id: event.instance})
        return _note(state, event.replaces, lambda n: replace(n, instance=None, replaced_by=event.instance.instance_id))
    if isinstance(event, RecreationAbandoned):
        return _note(state, event.instance_id, lambda n: replace(
            n, instance=None, cause="operator" if event.by_operator else "given_up",
            reason=f"{n.reason}; not re-created: {event.reason}"))
    if isinstance(event, DeletionCauseFound):
        return _note(state, event.instance_id, lambda n: replace(n, reason=event.reason, awaiting_cause=()))
    if isinstance(event, InstanceDeleted):
        inst = state.instances.get(event.instance_id)
        if inst is None:
            return state
        instances = {k: v for k, v in state.instances.items() if k != event.instance_id}
        runners = {k: v for k, v in state.runners.items() if k not in inst.runner_to_shard}
        deleted = {**state.deleted, event.instance_id: DeletionNote(
            model_id=inst.model_id, reason=event.reason, when=event.when, cause=event.cause,
            recreate_at=event.recreate_at, instance=inst if event.recreate_at else None,
            refused_engine=event.refused_engine, awaiting_cause=event.awaiting_cause)}
        return replace(state, instances=instances, runners=runners,
                       deleted=_trim(deleted))
    if isinstance(event, RunnerStatusUpdated):
        if not _has_runner(state, event.runner_id):
            return state  # a runner of no instance (late report after a delete) is ignored
        return replace(state, runners={**state.runners, event.runner_id: event.status})
    if isinstance(event, TaskCreated):
        return replace(state, tasks={**state.tasks, event.task.task_id: event.task})
    if isinstance(event, TaskStatusUpdated):
        return _task(state, event.task_id, lambda t: replace(t, status=event.status))
    if isinstance(event, TaskFailed):
        return _task(state, event.task_id, lambda t: replace(
            t, status=TaskStatus.FAILED, error_type=event.error_type, error_message=event.error_message))
    if isinstance(event, TaskDeleted):
        return replace(state, tasks={k: v for k, v in state.tasks.items() if k != event.task_id})
    if isinstance(event, ConfigChanged):
        return replace(state, config=event.config)
    if isinstance(event, TracingSet):
        return replace(state, tracing_enabled=event.enabled)
    if isinstance(event, NodeDownloadUpdated):
        mine = {**state.downloads.get(event.node_id, {}), event.progress.model_id: event.progress}
        return replace(state, downloads={**state.downloads, event.node_id: mine})
    if isinstance(event, StagingPurged):
        return replace(state, purge=event)
    if isinstance(event, NodeCatalogUpdated):
        return replace(state, catalog={**state.catalog, catalog_key(event): event})
    if isinstance(event, NodeGatheredInfo):
        return replace(state, nodes={**state.nodes, event.info.node_id: event.info})
    if isinstance(event, NodeRestarting):  # `until` 0: the node is back
        restarting = {k: v for k, v in state.restarting.items() if k != event.node_id}
        return replace(state, restarting={**restarting, **({event.node_id: event.until} if event.until else {})})
    if isinstance(event, NodeTimedOut):
        gone = {i for i, inst in state.instances.items() if event.node_id in inst.node_to_runner}
        lost = {r for i in gone for r in state.instances[i].runner_to_shard}
        again = (f"; placing it again in {event.replace_after_s:g}s" if event.replace_after_s > 0 else "")
        deleted = {**state.deleted, **{i: DeletionNote(
            model_id=state.instances[i].model_id, when=event.when, cause="node_lost",
            reason=f"lost with node {event.node_id} (timed out){again}",
            recreate_at=event.when + event.replace_after_s if again else 0.0,
            instance=state.instances[i] if again else None) for i in sorted(gone)}}
        return replace(
            state, nodes={k: v for k, v in state.nodes.items() if k != event.node_id},
            restarting={k: v for k, v in state.restarting.items() if k != event.node_id},
            deleted=_trim(deleted),
            downloads={k: v for k, v in state.downloads.items() if k != event.node_id},
            catalog={k: v for k, v in state.catalog.items() if v.node_id != event.node_id},
            instances={k: v for k, v in state.instances.items() if k not in gone},
            runners={k: v for k, v in state.runners.items() if k not in lost},
            tasks={k: v for k, v in state.tasks.items() if v.instance_id not in gone})
    raise TypeError(f"no reducer for {type(event).__name__}")


def _trim(deleted: dict[str, DeletionNote]) -> dict[str, DeletionNote]:
    """The last `DELETIONS_KEPT` notes, and every note whose re-creation is still pending."""
    recent = set(list(deleted)[-DELETIONS_KEPT:])
    return {i: n for i, n in deleted.items() if i in recent or n.instance is not None}


def _note(state: State, instance_id: str, change: Callable[[DeletionNote], DeletionNote]) -> State:
    note: DeletionNote | None = state.deleted.get(instance_id)
    if note is None:
        return state
    return replace(state, deleted={**state.deleted, instance_id: change(note)})


def _task(state: State, task_id: str, change: Callable[[Task], Task]) -> State:
    task: Task | None = state.tasks.get(task_id)
    if task is None:
        return state
    return replace(state, tasks={**state.tasks, task_id: change(task)})
