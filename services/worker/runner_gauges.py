"""This node's runners as Prometheus metrics, from the `RunnerReport`s they publish on the bus.

Runners never write metrics themselves: the worker (long-lived, one per node) turns each report
into the runner's queue depth, batch size, status kind and generated tokens, and the node's
busy flag (`node/metrics.py` declares them; `GET /metrics` serves them). A report's
`tokens_total` counts from its runner process's start, so the counter grows by the difference
(`token_delta`, pure).
"""

from __future__ import annotations

from skulk.cluster.state import RunnerKind, State
from skulk.node import metrics
from skulk.wire.events import RunnerReport


def token_delta(seen: tuple[int, int] | None, now: tuple[int, int]) -> int:
    """Tokens to add for a report `(pid, tokens_total)` after the last one seen of the runner.

    The first report seen is a baseline (a restarted worker must not count again what its
    predecessor counted; a new runner's first report says 0 anyway); a new process, or a total
    that went down, starts again from zero."""
    if seen is None:
        return 0
    (pid, total), (new_pid, new_total) = seen, now
    if new_pid != pid or new_total < total:
        return new_total
    return new_total - total


class RunnerGauges:
    def __init__(self) -> None:
        self.tokens: dict[str, tuple[int, int]] = {}  # runner id -> (pid, tokens_total) last seen
        self.load: dict[str, int] = {}  # runner id -> requests active or waiting
        self.busy: bool | None = None  # as last written

    def on_report(self, report: RunnerReport, state: State | None) -> None:
        """A report of a runner the state knows (a series per runner id: a process publishing
        reports under made-up ids on the node-local bus must not grow the metric files)."""
        if state is None or report.runner_id not in metrics.live_runners(state):
            return  # not known yet: its next report (every 2 s) comes after the state
        inst = state.instances.get(report.instance_id)
        labels = (report.runner_id, report.instance_id, inst.model_id if inst else "")
        metrics.RUNNER_WAITING.labels(*labels).set(report.waiting)
        metrics.RUNNER_ACTIVE.labels(*labels).set(report.active)
        for kind in RunnerKind:
            metrics.RUNNER_STATE.labels(*labels, kind).set(1 if kind == report.status.kind else 0)
        seen = (report.pid, report.tokens_total)
        if added := token_delta(self.tokens.get(report.runner_id), seen):
            metrics.RUNNER_TOKENS.labels(*labels).inc(added)
        self.tokens[report.runner_id] = seen
        self.load[report.runner_id] = report.active + report.waiting
        self._busy()

    def forget_gone(self, state: State) -> None:
        """Runners no longer in the state stop counting toward busy (`GET /metrics` drops
        their series)."""
        live = metrics.live_runners(state)
        for runner_id in [r for r in self.load if r not in live]:
            del self.load[runner_id]
            self.tokens.pop(runner_id, None)
        self._busy()

    def _busy(self) -> None:
        busy = any(self.load.values())
        if busy != self.busy:
            self.busy = busy
            metrics.NODE_BUSY.set(int(busy))
