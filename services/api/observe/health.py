"""`GET /health`: idle or busy, and the version (an operator's first check); 503 `draining` while
the node restarts in place.

Draining: from the moment the node's restart begins (its drain, `supervisor/drain.py`: the root's
notice on the bus, kept by the runner view) until this API process ends with the old image; the
new image's API answers idle or busy again. A load balancer that checks `/health` stops sending
new requests here while the node finishes the ones it holds; the API still serves meanwhile,
routing to other nodes' instances.

Busy means one of this node's runners has a request in hand, by what it last published (the
API's runner view): its flight recorder's phase (admitted, prefill, decode) and its report's
batch. A runner records every phase change, but reports its load at most every 50 ms and then
only every 2 s, so its newest word decides: an entry newer than the report (a request that
just joined, or the completion of the last one) is believed over the report's figures. Only
local runners count, as the check is per server; anything older than `REPORT_STALE_S`
is ignored, so a runner that died or froze mid-request stops counting within seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import falcon

from skulk.services.api.http.schema import STRING, Schema, enum, obj
from skulk.services.api.observe.diagnostics_runners import WORKING
from skulk.services.api.observe.runner_view import RunnerSeen, RunnerView
from skulk.wire.flight import Phase

REPORT_STALE_S = 10.0
BUSY_PHASES = WORKING | {Phase.TASK_SUBMISSION}
"""Phases of a runner with a request in hand (admitted, prefilling, decoding)."""


def generating(active: int | None, reported_at: float, phase: str | None, entry_at: float, now: float) -> bool:
    """A runner has a request in hand (pure; see the module docstring)."""
    entry_fresh = phase is not None and now - entry_at <= REPORT_STALE_S
    if entry_fresh and entry_at >= reported_at:
        return phase in BUSY_PHASES
    return (bool(active) and now - reported_at <= REPORT_STALE_S) or (entry_fresh and phase in BUSY_PHASES)


def busy(runners: Iterable[RunnerSeen], now: float) -> bool:
    """Whether any of these runners generates (pure)."""
    for s in runners:
        last = s.entries[-1] if s.entries else None
        if generating(s.report.active if s.report else 0, s.reported_at, last.phase if last else None,
                      last.at if last else 0.0, now):
            return True
    return False


class HealthResource:
    """`{"status": "idle"|"busy", "version"}`, or 503 `{"status": "draining", "version"}`."""

    def __init__(self, view: RunnerView, version: str) -> None:
        self.view = view
        self.version = version

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if self.view.restarting():
            resp.status = falcon.HTTP_503
            resp.media = {"status": "draining", "version": self.version}
            return
        status = "busy" if busy(self.view.runners().values(), time.time()) else "idle"
        resp.media = {"status": status, "version": self.version}


HEALTH: Schema = obj({"status": enum("idle", "busy"), "version": STRING})
DRAINING: Schema = obj({"status": enum("draining"), "version": STRING})
