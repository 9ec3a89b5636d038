"""What the leader does when a runner of an instance fails (pure). The instance is always
deleted (its other ranks are stopped by their nodes' runner plans and its streams end); it is
re-created after a back-off that doubles per failure, unless the runner wedged (it overran its
warmup deadline: it would only wedge again) or the instance is in a crash loop
(`limit` failures within `window_s`, 3 in 60 s as upstream's breaker). Failures are counted per
lineage: a re-created instance inherits the count of the ones it replaces, read from the
replicated deletion notes, so a new leader counts exactly as the old one did."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from skulk.cluster.state import RunnerKind, RunnerStatus, State
from skulk.node import exitcodes
from skulk.wire.events import ChildLifecycle, LifecycleEvent

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
