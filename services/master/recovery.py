"""A runner that fails, from its process's end to its instance placed again, in one place (pure).

The process ending is a `FAILED` status (`process_ended`); the leader's answer to a failed runner
(`runner_failed`) deletes its instance now (the other ranks are stopped by their nodes' runner
plans, its streams end), then re-creates it after a back-off, or gives it up with the reason
(`verdict`). The back-off doubles per failure, unless the runner wedged (it overran its warmup
deadline: it would only wedge again), its engine refused the checkpoint (placed again at once
on another engine), or the instance is in a crash loop (`limit` failures within `window_s`, 3 in
60 s as upstream's breaker). Failures are counted per lineage: a re-created instance inherits the
count of the ones it replaces, read from the replicated deletion notes, so a new leader counts
exactly as the old one did. A pending re-creation lives in the replicated deletion note
(`recreate_at`, the instance), not in the leader's memory: whoever leads when it falls due makes
it (`next_recreation`), so a failover during the back-off does not lose it. A rank that stopped
because its peer rank was gone (`exitcodes.PEER_LOST`) may be reported before the peer itself:
the instance is deleted at once all the same, and the peer's report, when it comes, becomes the
note's reason (`cause_found`), so an operator reads the cause, not its echo."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from skulk.cluster.placement import PlacementError, place
from skulk.cluster.state import (
    DeletionCauseFound,
    DeletionNote,
    Event,
    Instance,
    InstanceCreated,
    RecreationAbandoned,
    RunnerKind,
    RunnerStatus,
    State,
)
from skulk.node import exitcodes
from skulk.services.master.commands import delete_events, place_again
from skulk.wire.events import ChildLifecycle, LifecycleEvent

log = logging.getLogger("skulk.master")

NOT_RETRIED = frozenset({exitcodes.WEDGED})
"""A warmup overrun: the device is likely wedged, a new runner would only wedge again. A ring
that did not form (`exitcodes.GROUP_CONNECT_FAILED`) is re-created instead: new instance id, new ring ports."""
ENDED = frozenset({LifecycleEvent.EXITED, LifecycleEvent.STOPPED, LifecycleEvent.READY_TIMEOUT,
                   LifecycleEvent.HEARTBEAT_MISSED, LifecycleEvent.STEP_DEADLINE})


def process_ended(msg: ChildLifecycle, node_id: str) -> RunnerStatus | None:
    """A runner process ended, whatever the cause: that incarnation no longer serves."""
    if msg.supervisor != "runners" or msg.event not in ENDED:
        return None
    if msg.event == LifecycleEvent.STOPPED:  # its own node stopped it on purpose: not a failure to recover from
        return RunnerStatus(kind=RunnerKind.FAILED, node_id=node_id, orderly=True, exit_code=msg.exit_code,
                            error_message=f"Terminated (stopped by its supervisor, {msg.detail})")
    cause = msg.detail if msg.event == LifecycleEvent.EXITED else msg.event.replace("_", " ")
    return RunnerStatus(kind=RunnerKind.FAILED, node_id=node_id, error_message=f"Terminated ({cause})",
                        exit_code=msg.exit_code if msg.event == LifecycleEvent.EXITED else None)


@dataclass(frozen=True, slots=True)
class Recreate:
    """Re-create the failed instance `delay_s` from now (same model, sharding and width)."""

    delay_s: float


@dataclass(frozen=True, slots=True)
class OtherEngine:
    """The instance's engine cannot run its checkpoint (`exitcodes.ENGINE_REFUSED`): re-create
    it at once without that engine (the card names another that can). Not a failure to back
    off from: the same engine would refuse again, another one may serve."""

    refused: str


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Delete the instance for good, for this reason."""

    reason: str


@dataclass(frozen=True, slots=True)
class RecoveryPolicy:
    limit: int = 3
    window_s: float = 60.0
    backoff_s: float = 0.5
    replace_lost_after_s: float = 2.0  # a lost node's instances placed again this long after; 0: never


def verdict(failed: RunnerStatus, earlier: Sequence[float], now: float, policy: RecoveryPolicy,
            engine: str = "", card_engines: Sequence[str] = ()) -> Recreate | OtherEngine | GiveUp:
    """`earlier`: when the instances this one replaces failed (wall clock), oldest first;
    `engine`: the instance's, `card_engines`: every engine its checkpoint has."""
    error = failed.error_message
    if failed.exit_code in NOT_RETRIED:
        return GiveUp(f"a runner overran its deadline and is not retried: {error}")
    if failed.exit_code == exitcodes.ENGINE_REFUSED:
        if any(e != engine for e in card_engines):
            return OtherEngine(engine)
        return GiveUp(f"no other engine can run it: {error}")
    recent = [t for t in earlier if now - t < policy.window_s] + [now]
    if len(recent) >= policy.limit:
        return GiveUp(f"crash loop: {len(recent)} runner failures within {policy.window_s:.0f}s "
                      f"(last: {error})")
    return Recreate(policy.backoff_s * 2 ** (len(recent) - 1))


def lineage_failures(state: State, instance_id: str) -> list[float]:
    """When each instance that `instance_id` re-creates (directly or further back) failed."""
    replaced = {note.replaced_by: (old, note) for old, note in state.deleted.items() if note.replaced_by}
    out: list[float] = []
    current = instance_id
    for _ in range(len(state.deleted)):  # a chain is never longer than the notes kept
        if current not in replaced:
            break
        current, note = replaced[current]
        out.append(note.when)
    return sorted(out)


def runner_failed(state: State, runner_id: str, failed: RunnerStatus, now: float,
                  policy: RecoveryPolicy) -> list[Event]:
    """The events that delete the failed runner's instance (none if it has none, or if its own
    node stopped it: the plan, a shutdown, a restart); `now` is the wall clock, shared by every
    leader's reading of the notes."""
    if failed.orderly:
        return []
    inst = next((i for i in state.instances.values() if runner_id in i.runner_to_shard), None)
    if inst is None:
        return cause_found(state, runner_id, failed, policy)
    decided = verdict(failed, lineage_failures(state, inst.instance_id), now, policy,
                      inst.engine, inst.card.engines)
    awaiting = (tuple(sorted(r for r in inst.runner_to_shard if r != runner_id))
                if failed.exit_code == exitcodes.PEER_LOST else ())
    if isinstance(decided, GiveUp):
        log.error("deleting instance %s (%s): %s", inst.instance_id, inst.model_id, decided.reason)
        return delete_events(state, inst.instance_id, decided.reason, now, "given_up", awaiting_cause=awaiting)
    if isinstance(decided, OtherEngine):
        reason = f"runner {runner_id} failed ({failed.error_message}); placing it again without {decided.refused}"
        log.warning("instance %s (%s): %s", inst.instance_id, inst.model_id, reason)
        return delete_events(state, inst.instance_id, reason, now, "engine_refused", recreate_at=now,
                             refused_engine=decided.refused)
    reason = f"runner {runner_id} failed ({failed.error_message}); re-creating in {decided.delay_s:.1f}s"
    log.warning("instance %s (%s): %s", inst.instance_id, inst.model_id, reason)
    return delete_events(state, inst.instance_id, reason, now, "runner_failed",
                         recreate_at=now + decided.delay_s, awaiting_cause=awaiting)


def cause_found(state: State, runner_id: str, failed: RunnerStatus, policy: RecoveryPolicy) -> list[Event]:
    """A runner of an instance already deleted because its peer rank lost it: its own failure is
    the cause, and the deletion note says so, followed by what the peer reported (the back-off,
    counted once, is unchanged). The cause's verdict stands: a pending re-creation the cause
    rules out (a wedge) is abandoned with its reason. A runner that lost its peer too adds nothing."""
    if failed.exit_code == exitcodes.PEER_LOST:
        return []
    found = next((i for i, note in state.deleted.items() if runner_id in note.awaiting_cause), None)
    if found is None:
        return []
    note = state.deleted[found]
    reason = f"runner {runner_id} failed ({failed.error_message}); its peer rank reported first: {note.reason}"
    log.warning("instance %s: the cause: %s", found, reason)
    events: list[Event] = [DeletionCauseFound(instance_id=found, reason=reason)]
    if note.instance is not None:
        decided = verdict(failed, lineage_failures(state, found), note.when, policy,
                          note.instance.engine, note.instance.card.engines)
        if isinstance(decided, GiveUp):
            log.error("not re-creating instance %s (%s): %s", found, note.model_id, decided.reason)
            events.append(RecreationAbandoned(instance_id=found, reason=decided.reason))
    return events


def next_recreation(state: State, now: float, new_id: Callable[[], str],
                    policy: RecoveryPolicy) -> list[Event]:
    """The events of the first re-creation due at `now` (the caller applies them and asks
    again, so each placement sees the ones before it). A placement refused now is tried again
    on later calls (node info may be pending, a memory reading may still count the dead
    runner); still refused once the failure window has passed, it is abandoned with the reason."""
    for old_id, note in state.deleted.items():
        if note.instance is None or note.recreate_at > now:
            continue
        placed = _place_again(state, note, new_id)
        if isinstance(placed, PlacementError):
            if now - note.recreate_at <= policy.window_s:
                continue
            log.error("could not re-create instance %s: %s", old_id, placed.message)
            return [RecreationAbandoned(instance_id=old_id, reason=placed.message)]
        log.info("re-creating instance %s as %s", old_id, placed.instance_id)
        return [InstanceCreated(instance=placed, replaces=old_id)]
    return []


def _place_again(state: State, note: DeletionNote, new_id: Callable[[], str]) -> Instance | PlacementError:
    """The note's instance placed again: at its width or the next wider that fits. An instance
    lost with its node is a replica lost: it goes first to nodes that serve no other instance of
    its model where it fits (a second loss then takes one replica, not both), and may also take
    the next narrower width that fits (fewer nodes remain)."""
    assert note.instance is not None
    width = next(iter(note.instance.runner_to_shard.values())).world_size
    if note.cause == "node_lost" and (serving := _serving(state, note.instance.model_id)):
        spread = replace(place_again(note.instance, new_id(), note.refused_engine), excluded_nodes=serving)
        if not isinstance(elsewhere := place(state, spread, new_id), PlacementError):
            return elsewhere
    placed = place(state, place_again(note.instance, new_id(), note.refused_engine), new_id)
    if not isinstance(placed, PlacementError) or note.cause != "node_lost":
        return placed
    for narrower in range(width - 1, 0, -1):
        again = place(state, place_again(note.instance, new_id(), note.refused_engine, min_nodes=narrower), new_id)
        if not isinstance(again, PlacementError):
            return again
    return placed


def _serving(state: State, model_id: str) -> tuple[str, ...]:
    """The nodes that hold a rank of an instance of `model_id` now."""
    return tuple(sorted({n for i in state.instances.values() if i.model_id == model_id for n in i.node_to_runner}))
