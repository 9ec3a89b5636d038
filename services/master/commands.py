"""Commands -> events and a reply (pure). The service stamps, applies and publishes the events."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from skulk.cluster.placement import PlacementError, place
from skulk.cluster.state import (
    DELETED_BY_OPERATOR,
    OPEN_STATUSES,
    Cause,
    Event,
    Instance,
    InstanceCreated,
    InstanceDeleted,
    NodeTimedOut,
    RecreationAbandoned,
    State,
    Task,
    TaskCreated,
    TaskDeleted,
    TaskFailed,
    TaskStatus,
    TaskStatusUpdated,
)
from skulk.services.master.config_sync import set_config
from skulk.services.master.routing import RouteError, route
from skulk.wire.commands import (
    INSTANCE_LOST,
    NOT_EMBEDDING,
    NOT_GENERATIVE,
    RUNNER_LOST,
    CommandAccepted,
    CommandRejected,
    DeleteInstance,
    PlaceInstance,
    RejectReason,
    Reply,
    Routed,
    TaskCancelled,
    TaskFinished,
    TextEmbedding,
    TextGeneration,
)
from skulk.wire.config_sync import SetConfig
from skulk.wire.inference import FailReason
from skulk.wire.message import Command, Message
from skulk.wire.staging import PurgeStaging, StagingPurged
from skulk.wire.tracing import SetTracing, TracingSet

log = logging.getLogger("skulk.master")


@dataclass(frozen=True, slots=True)
class Outcome:
    reply: Reply
    events: list[Event] = field(default_factory=list)


def _open_tasks(state: State, instance_ids: set[str]) -> list[Task]:
    return [t for t in state.tasks.values() if t.instance_id in instance_ids and t.status in OPEN_STATUSES]


def delete_events(state: State, instance_id: str, reason: str, when: float, cause: Cause,
                  recreate_at: float = 0.0, refused_engine: str = "",
                  awaiting_cause: tuple[str, ...] = ()) -> list[Event]:
    """End the instance's open tasks, then delete it: an operator's delete cancels them; a
    failed runner fails them with upstream's runner-shutdown message (their API threads have
    usually ended the streams already; the events are the record)."""
    if cause == "operator":
        ends: list[Event] = [TaskStatusUpdated(task_id=t.task_id, status=TaskStatus.CANCELLED)
                             for t in _open_tasks(state, {instance_id})]
    else:
        ends = [TaskFailed(task_id=t.task_id, error_type=FailReason.RUNNER_FAILED,
                           error_message=RUNNER_LOST.format(detail=reason))
                for t in _open_tasks(state, {instance_id})]
    return [*ends, InstanceDeleted(instance_id=instance_id, reason=reason, when=when, cause=cause,
                                   recreate_at=recreate_at, refused_engine=refused_engine,
                                   awaiting_cause=awaiting_cause)]


def node_lost_events(state: State, node_id: str, when: float, replace_after_s: float = 0.0) -> list[Event]:
    """Upstream's order: `TaskFailed(instance_lost)` for every open task of an instance on the
    node, then `NodeTimedOut` (which removes the node, its instances and their tasks, and keeps
    each instance in its deletion note to be placed again `replace_after_s` later, if not 0)."""
    log.warning("node %s timed out; removing it and its instances", node_id)
    gone = {i for i, inst in state.instances.items() if node_id in inst.node_to_runner}
    return [*(TaskFailed(task_id=t.task_id, error_type=FailReason.INSTANCE_LOST,
                         error_message=INSTANCE_LOST)
              for t in _open_tasks(state, gone)),
            NodeTimedOut(node_id=node_id, when=when, replace_after_s=replace_after_s)]


def place_again(inst: Instance, command_id: str, refused_engine: str = "", min_nodes: int = 0) -> PlaceInstance:
    """A placement of the same model, sharding and width as `inst` (placement picks the nodes
    again: some may be gone; `min_nodes` asks for a narrower one), on any engine of its card but
    `refused_engine` (one that could not run the checkpoint: the card of the new instance no
    longer names it)."""
    shard = next(iter(inst.runner_to_shard.values()))
    card = inst.card
    if refused_engine:
        card = replace(card, engines=tuple(e for e in card.engines if e != refused_engine))
    return PlaceInstance(command_id=command_id, card=card, sharding=shard.kind,
                         instance_meta=inst.instance_meta, min_nodes=min_nodes or shard.world_size)


def describe(cmd: PlaceInstance | DeleteInstance) -> str:
    """A re-submitted change, for the log."""
    if isinstance(cmd, PlaceInstance):
        return f"the placement of {cmd.card.model_id}"
    return f"the deletion of {cmd.instance_id}"


def lost_changes(mine: State, winner: State, new_id: Callable[[], str]) -> list[PlaceInstance | DeleteInstance]:
    """What a deposed leader accepted that the winner's state lacks, as commands to ask the winner
    for, so an operator's change accepted just before two lone leaders met is not lost: a
    placement for each model it served and the winner does not (unless the winner's operator
    deleted it, or the winner is about to place it again), and the operator's deletion of each
    instance the winner still has, or of the one the winner placed in its stead (deletions for
    other causes were judgements of the deposed side, not the operator's intent)."""
    have = {i.model_id for i in winner.instances.values()}
    have |= {n.instance.model_id for n in winner.deleted.values() if n.instance is not None and not n.replaced_by}
    out: list[PlaceInstance | DeleteInstance] = []
    for inst in mine.instances.values():
        # the winner's operator deleted it, or what it replaces, or what the winner put in its stead
        deleted_there = any(_last_note(winner, i) == "operator" for i in lineage(mine, inst.instance_id))
        if inst.model_id not in have and not deleted_there:
            have.add(inst.model_id)
            out.append(place_again(inst, new_id()))
    for iid, note in mine.deleted.items():
        if note.cause != "operator":
            continue
        # what the winner has of it: the instance itself, or one placed again in its stead
        target = next((t for i in lineage(mine, iid) if (t := current(winner, i))), "")
        if target:
            out.append(DeleteInstance(command_id=new_id(), instance_id=target))
    return out


def lineage(state: State, instance_id: str) -> list[str]:
    """`instance_id` and every instance it re-creates, directly or further back (by the notes)."""
    replaced = {note.replaced_by: old for old, note in state.deleted.items() if note.replaced_by}
    out = [instance_id]
    while out[-1] in replaced and replaced[out[-1]] not in out:
        out.append(replaced[out[-1]])
    return out


def _last_note(state: State, instance_id: str) -> Cause:
    """The cause of the last deletion along `instance_id`'s re-creations in `state` ("" while
    one of them stands)."""
    seen: set[str] = set()
    cause: Cause = ""
    while instance_id in state.deleted and instance_id not in seen:
        seen.add(instance_id)
        note = state.deleted[instance_id]
        cause, instance_id = note.cause, note.replaced_by
    return "" if instance_id in state.instances else cause


def current(state: State, instance_id: str) -> str:
    """What stands for `instance_id` in `state` now: itself, the instance that re-created it
    (directly or further along), or a re-creation still pending; "" when it is gone for good."""
    seen: set[str] = set()
    while instance_id not in state.instances and instance_id not in seen:
        seen.add(instance_id)
        note = state.deleted.get(instance_id)
        if note is None:
            return ""
        if not note.replaced_by:
            return instance_id if note.instance is not None else ""
        instance_id = note.replaced_by
    return instance_id if instance_id in state.instances else ""


def _task_of_command(state: State, command_id: str) -> Task | None:
    return next((t for t in state.tasks.values() if t.command_id == command_id), None)


def wrong_task(state: State, command_id: str, model: str, embedding: bool) -> CommandRejected | None:
    """400 when the model's instances serve the other kind of request (decided on the cards)."""
    cards = [i.card for i in state.instances.values() if i.model_id == model]
    if not cards or any(c.is_embedding == embedding for c in cards):
        return None
    return CommandRejected(command_id=command_id, status=400, reason=RejectReason.WRONG_TASK,
                           message=(NOT_EMBEDDING if embedding else NOT_GENERATIVE).format(model=model))


def route_embedding(state: State, cmd: TextEmbedding, new_id: Callable[[], str],
                    loads: Mapping[str, int] | None) -> Reply:
    """Like a TextGeneration's route, without a task (one short exchange with the runner)."""
    wrong = wrong_task(state, cmd.command_id, cmd.model, embedding=True)
    if wrong is not None:
        return wrong
    found = route(state, cmd.model, loads, cmd.avoid_nodes)
    if isinstance(found, RouteError):
        return CommandRejected(command_id=cmd.command_id, status=found.status, message=found.message,
                               reason=found.reason)
    return Routed(command_id=cmd.command_id, task_id=new_id(), instance_id=found.instance.instance_id,
                  runner_id=found.runner_id, endpoint=found.endpoint)


def handle(state: State, cmd: Message, new_id: Callable[[], str], wall: float,
           loads: Mapping[str, int] | None = None) -> Outcome:
    """The leader carrying out a command (`core.command` decides where each is carried out;
    this is the leader's part). `wall`: the leader's clock, stamped on what it records (a
    config's time, a deletion)."""
    if isinstance(cmd, SetConfig):  # the cluster-wide skulk.yaml (config_sync.py)
        return Outcome(*set_config(state, cmd, wall))
    if isinstance(cmd, SetTracing):  # new tasks carry the flag from the next one on
        told: list[Event] = [] if cmd.enabled == state.tracing_enabled else [TracingSet(enabled=cmd.enabled)]
        return Outcome(CommandAccepted(command_id=cmd.command_id), told)
    if isinstance(cmd, PurgeStaging):  # every node's worker purges when it applies the event
        return Outcome(CommandAccepted(command_id=cmd.command_id),
                       [StagingPurged(command_id=cmd.command_id, model_id=cmd.model_id)])
    if isinstance(cmd, PlaceInstance):
        placed = place(state, cmd, new_id)
        if isinstance(placed, PlacementError):
            return Outcome(CommandRejected(command_id=cmd.command_id, status=placed.status,
                                           message=placed.message, reason=placed.reason))
        return Outcome(CommandAccepted(command_id=cmd.command_id, instance_id=placed.instance_id),
                       [InstanceCreated(instance=placed)])
    if isinstance(cmd, DeleteInstance):
        pending = state.deleted.get(cmd.instance_id)
        if cmd.instance_id not in state.instances and pending is not None and pending.instance is not None \
                and not pending.replaced_by:  # being placed again: the operator's deletion cancels that
            return Outcome(CommandAccepted(command_id=cmd.command_id, instance_id=cmd.instance_id),
                           [RecreationAbandoned(instance_id=cmd.instance_id, reason=DELETED_BY_OPERATOR,
                                                by_operator=True)])
        if cmd.instance_id not in state.instances:
            return Outcome(CommandRejected(command_id=cmd.command_id, status=404,
                                           message="Instance not found", reason=RejectReason.UNKNOWN_INSTANCE))
        return Outcome(CommandAccepted(command_id=cmd.command_id, instance_id=cmd.instance_id),
                       delete_events(state, cmd.instance_id, DELETED_BY_OPERATOR, wall, "operator"))
    if isinstance(cmd, TextEmbedding):
        return Outcome(route_embedding(state, cmd, new_id, loads))
    if isinstance(cmd, TextGeneration):
        if wrong := wrong_task(state, cmd.command_id, cmd.params.model, embedding=False):
            return Outcome(wrong)
        found = route(state, cmd.params.model, loads, cmd.avoid_nodes)
        if isinstance(found, RouteError):
            return Outcome(CommandRejected(command_id=cmd.command_id, status=found.status,
                                           message=found.message, reason=found.reason))
        task = Task(task_id=new_id(), command_id=cmd.command_id,
                    instance_id=found.instance.instance_id, status=TaskStatus.RUNNING,
                    owner_node=cmd.owner_node, params=cmd.params, trace=state.tracing_enabled)
        return Outcome(Routed(command_id=cmd.command_id, task_id=task.task_id,
                              instance_id=task.instance_id, runner_id=found.runner_id,
                              endpoint=found.endpoint, trace=task.trace), [TaskCreated(task=task)])
    if isinstance(cmd, (TaskCancelled, TaskFinished)):
        target = cmd.cancelled_command_id if isinstance(cmd, TaskCancelled) else cmd.finished_command_id
        ended = _task_of_command(state, target)
        events: list[Event] = []
        if ended is not None:
            if isinstance(cmd, TaskCancelled):
                events.append(TaskStatusUpdated(task_id=ended.task_id, status=TaskStatus.CANCELLED))
            elif cmd.failed and ended.status != TaskStatus.FAILED:  # the API saw it first: the record says so
                events.append(TaskFailed(task_id=ended.task_id, error_type=cmd.reason or FailReason.ENGINE_ERROR,
                                         error_message=cmd.error_message))
            events.append(TaskDeleted(task_id=ended.task_id))
        return Outcome(CommandAccepted(command_id=cmd.command_id), events)
    return Outcome(CommandRejected(command_id=cmd.command_id if isinstance(cmd, Command) else "", status=400,
                                   message=f"{cmd.TYPE} is not a command"))
