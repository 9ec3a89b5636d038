"""`GET /health`: idle or busy, and the version (seed 001's check)."""

from __future__ import annotations

import falcon

from skulk.wire.replica import StateReplica
from skulk.services.api.schema import STRING, Schema, enum, obj


class HealthResource:
    """`{"status": "idle"|"busy", "version"}`: busy while any task is pending or running."""

    def __init__(self, replica: StateReplica, version: str) -> None:
        self.replica = replica
        self.version = version

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        state = self.replica.get(timeout=1.0)
        busy = state is not None and any(t.status in ("Pending", "Running") for t in state.tasks.values())
        resp.media = {"status": "busy" if busy else "idle", "version": self.version}


HEALTH: Schema = obj({"status": enum("idle", "busy"), "version": STRING})
