"""What the leader does when a runner of an instance fails (pure). The instance is always
deleted (its other ranks are stopped by their nodes' runner plans and its streams end); it is
re-created after a back-off that doubles per failure, unless the runner wedged (it overran its
warmup deadline: it would only wedge again) or the instance is in a crash loop
(`limit` failures within `window_s`, 3 in 60 s as upstream's breaker). Failures are counted per
lineage: a re-created instance inherits the count of the one it replaces."""

from __future__ import annotations

from dataclasses import dataclass, field

from skulk.wire.events import ChildLifecycle
from skulk.wire.state import RunnerStatus

WEDGE_MARKERS = ("exit code 86", "GPU may be wedged")
"""A warmup overrun: the device is likely wedged, a new runner would only wedge again. A ring
that did not form (exit 87) is re-created instead: new instance id, new ring ports."""
ENDED = frozenset({"exited", "stopped", "ready_timeout", "heartbeat_missed"})
ORDERLY_STOP = "Terminated (stopped by its supervisor"
"""The cause of a runner its own node stopped on purpose: not a failure to recover from."""


def process_ended(msg: ChildLifecycle, node_id: str) -> RunnerStatus | None:
    """A runner process ended, whatever the cause: that incarnation no longer serves."""
    if msg.supervisor != "runners" or msg.event not in ENDED:
        return None
    if msg.event == "stopped":
        return RunnerStatus(kind="RunnerFailed", node_id=node_id,
                            error_message=f"{ORDERLY_STOP}, {msg.detail})")
    cause = msg.detail if msg.event == "exited" else msg.event.replace("_", " ")
    return RunnerStatus(kind="RunnerFailed", node_id=node_id, error_message=f"Terminated ({cause})")


@dataclass(frozen=True, slots=True)
class Recreate:
    """Re-create the failed instance `delay_s` from now (same model, sharding and width)."""

    delay_s: float


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Delete the instance for good, for this reason."""

    reason: str


@dataclass
class FailureBook:
    limit: int = 3
    window_s: float = 60.0
    backoff_s: float = 0.5
    stamps: dict[str, tuple[float, ...]] = field(default_factory=dict)
    lineage: dict[str, str] = field(default_factory=dict)  # instance id -> its first ancestor

    def verdict(self, instance_id: str, error: str, now: float) -> Recreate | GiveUp:
        if any(marker in error for marker in WEDGE_MARKERS):
            return GiveUp(f"a runner overran its deadline and is not retried: {error}")
        root = self.lineage.get(instance_id, instance_id)
        recent = tuple(t for t in self.stamps.get(root, ()) if now - t < self.window_s) + (now,)
        self.stamps[root] = recent
        if len(recent) >= self.limit:
            del self.stamps[root]
            return GiveUp(f"crash loop: {len(recent)} runner failures within {self.window_s:.0f}s "
                          f"(last: {error})")
        return Recreate(self.backoff_s * 2 ** (len(recent) - 1))

    def replaced(self, old_id: str, new_id: str) -> None:
        """`new_id` re-creates `old_id`: it carries on that lineage's failure count."""
        self.lineage[new_id] = self.lineage.pop(old_id, old_id)
