"""`GET`/`PUT /v1/tracing`: the cluster-wide tracing switch (replicated, new requests only)."""

from __future__ import annotations

import time
import uuid

import falcon

from skulk.cluster.replica import StateReplica
from skulk.services.api.http.cluster_replies import master_accepts
from skulk.services.api.http.errors import http_error
from skulk.services.api.http.request_body import json_body
from skulk.services.api.http.schema import BOOLEAN, Schema, obj
from skulk.services.api.links.master_client import MasterClient
from skulk.wire.tracing import SetTracing

FLIP_WAIT_S = 2.0
"""How long `PUT` waits for this node's replica to apply the switch (upstream polls 2 s)."""


class TracingResource:
    def __init__(self, replica: StateReplica, master: MasterClient) -> None:
        self.replica, self.master = replica, master

    def enabled(self) -> bool:
        state = self.replica.get(timeout=1.0)
        return bool(state and state.tracing_enabled)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"enabled": self.enabled()}

    def on_put(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = json_body(req)
        if not isinstance(body, dict) or set(body) != {"enabled"} or not isinstance(body["enabled"], bool):
            raise http_error(422, 'the body must be {"enabled": true|false} (no other keys)')
        want = body["enabled"]
        master_accepts(self.master, SetTracing(command_id=uuid.uuid4().hex, enabled=want))
        deadline = time.monotonic() + FLIP_WAIT_S
        state = self.replica.get(timeout=1.0)
        while state is not None and state.tracing_enabled != want and time.monotonic() < deadline:
            state = self.replica.wait_change(state.last_event_applied_idx, deadline - time.monotonic())
        resp.media = {"enabled": bool(state and state.tracing_enabled)}


TRACING: Schema = obj({"enabled": BOOLEAN})
