"""The leader's answer to a failed runner (pure): delete its instance now (the other ranks are
stopped by their nodes' runner plans, its streams end), then re-create it after a back-off, or
give it up with the reason (`failures.verdict`). A pending re-creation lives in the replicated
deletion note (`recreate_at`, the instance), not in the leader's memory: whoever leads when it
falls due makes it, so a failover during the back-off does not lose it."""

from __future__ import annotations

import logging
from collections.abc import Callable

from skulk.cluster.placement import PlacementError, place
from skulk.cluster.state import DeletionNote, Event, Instance, InstanceCreated, RecreationAbandoned, RunnerStatus, State
from skulk.services.master.commands import delete_events, place_again
from skulk.services.master.failures import GiveUp, OtherEngine, RecoveryPolicy, lineage_failures, verdict

log = logging.getLogger("skulk.master")


def runner_failed(state: State, runner_id: str, failed: RunnerStatus, now: float,
                  policy: RecoveryPolicy) -> list[Event]:
    """The events that delete the failed runner's instance (none if it has none, or if its own
    node stopped it: the plan, a shutdown, a restart); `now` is the wall clock, shared by every
    leader's reading of the notes."""
    if failed.orderly:
        return []
    inst = next((i for i in state.instances.values() if runner_id in i.runner_to_shard), None)
    if inst is None:
        return []
    decided = verdict(failed, lineage_failures(state, inst.instance_id), now, policy,
                      inst.engine, inst.card.engines)
    if isinstance(decided, GiveUp):
        log.error("deleting instance %s (%s): %s", inst.instance_id, inst.model_id, decided.reason)
        return delete_events(state, inst.instance_id, decided.reason, now, "given_up")
    if isinstance(decided, OtherEngine):
        reason = f"runner {runner_id} failed ({failed.error_message}); placing it again without {decided.refused}"
        log.warning("instance %s (%s): %s", inst.instance_id, inst.model_id, reason)
        return delete_events(state, inst.instance_id, reason, now, "engine_refused", recreate_at=now,
                             refused_engine=decided.refused)
    reason = f"runner {runner_id} failed ({failed.error_message}); re-creating in {decided.delay_s:.1f}s"
    log.warning("instance %s (%s): %s", inst.instance_id, inst.model_id, reason)
    return delete_events(state, inst.instance_id, reason, now, "runner_failed",
                         recreate_at=now + decided.delay_s)


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
    """The note's instance placed again: at its width or the next wider that fits; an instance
    lost with its node may also take the next narrower width that fits (fewer nodes remain)."""
    assert note.instance is not None
    width = next(iter(note.instance.runner_to_shard.values())).world_size
    placed = place(state, place_again(note.instance, new_id(), note.refused_engine), new_id)
    if not isinstance(placed, PlacementError) or note.cause != "node_lost":
        return placed
    for narrower in range(width - 1, 0, -1):
        again = place(state, place_again(note.instance, new_id(), note.refused_engine, min_nodes=narrower), new_id)
        if not isinstance(again, PlacementError):
            return again
    return placed
