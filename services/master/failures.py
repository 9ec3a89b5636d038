"""When the leader gives up on an instance (pure): at once on a wedge (the runner overran its
warmup or group-connect deadline: it would only wedge again), or after `limit` runner failures
within `window_s` (a crash loop: 3 in 60 s, as upstream's breaker)."""

from __future__ import annotations

from dataclasses import dataclass, field

from skulk.wire.events import ChildLifecycle
from skulk.wire.state import RunnerStatus

WEDGE_MARKERS = ("exit code 86", "exit code 87", "exceeded its")
ENDED = frozenset({"exited", "stopped", "ready_timeout", "heartbeat_missed"})


def process_ended(msg: ChildLifecycle, node_id: str) -> RunnerStatus | None:
    """A runner process ended, whatever the cause: that incarnation no longer serves."""
    if msg.supervisor != "runners" or msg.event not in ENDED:
        return None
    cause = {"exited": msg.detail, "stopped": f"stopped by its supervisor, {msg.detail}"}.get(
        msg.event, msg.event.replace("_", " "))
    return RunnerStatus(kind="RunnerFailed", node_id=node_id, error_message=f"Terminated ({cause})")


@dataclass
class FailureBook:
    limit: int = 3
    window_s: float = 60.0
    stamps: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def verdict(self, instance_id: str, error: str, now: float) -> str | None:
        """Why the instance must be deleted now, or None to let its runner be restarted."""
        if any(marker in error for marker in WEDGE_MARKERS):
            return f"a runner overran its deadline and is not retried: {error}"
        recent = tuple(t for t in self.stamps.get(instance_id, ()) if now - t < self.window_s) + (now,)
        self.stamps[instance_id] = recent
        if len(recent) >= self.limit:
            del self.stamps[instance_id]
            return (f"crash loop: {len(recent)} runner failures within {self.window_s:.0f}s "
                    f"(last: {error})")
        return None
