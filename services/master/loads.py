"""How busy each runner says it is (requests in its batch plus waiting), for routing only.

The load is not replicated state: a runner going busy and idle for each request adds no event.
Runners report it on their node's bus (`RunnerReport.active/waiting`, on change and every 2 s);
a follower's master passes changes, and every `RESEND_S` the unchanged load too (a message lost
or a new leader must not leave a stale figure for good), to the leader (`cluster.RunnerLoad`),
which keeps the latest per runner here and forgets runners that left the state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from skulk.wire.cluster import RunnerLoad
from skulk.wire.events import RunnerReport

RESEND_S = 5.0


@dataclass
class RunnerLoads:
    loads: dict[str, int] = field(default_factory=dict)
    sent_at: dict[str, float] = field(default_factory=dict)

    def record(self, runner_id: str, active: int, waiting: int) -> bool:
        """Remember a report; True when the load changed (worth passing on to the leader)."""
        load = active + waiting
        changed = self.loads.get(runner_id) != load
        self.loads[runner_id] = load
        return changed

    def on_report(self, report: RunnerReport, now: float) -> RunnerLoad | None:
        """Remember a local runner's report; what to tell the leader when its load changed or
        was last told `RESEND_S` ago."""
        changed = self.record(report.runner_id, report.active, report.waiting)
        if not changed and now - self.sent_at.get(report.runner_id, -1e9) < RESEND_S:
            return None
        self.sent_at[report.runner_id] = now
        return RunnerLoad(runner_id=report.runner_id, active=report.active, waiting=report.waiting)

    def get(self, runner_id: str) -> int:
        return self.loads.get(runner_id, 0)

    def forget(self, keep: set[str]) -> None:
        """Drop runners that no longer exist in the state."""
        for rid in [r for r in self.loads if r not in keep]:
            del self.loads[rid]
            self.sent_at.pop(rid, None)
