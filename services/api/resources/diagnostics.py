"""`GET /v1/diagnostics/node`: who this node is and whom it follows."""

from __future__ import annotations

import datetime
import os
import socket

import falcon

from skulk.wire.replica import StateReplica
from skulk.services.api.schema import BOOLEAN, STRING, Schema, array, nullable, obj


class NodeDiagnosticsResource:
    """`GET /v1/diagnostics/node`: who this node is and whom it follows."""

    def __init__(self, replica: StateReplica, node_id: str, version: str) -> None:
        self.replica, self.node_id, self.version = replica, node_id, version

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        state = self.replica.get(timeout=1.0)
        me = state.nodes.get(self.node_id) if state else None
        master = state.master_node_id if state else None
        resp.media = {
            "generatedAt": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "runtime": {"nodeId": self.node_id, "hostname": socket.gethostname(),
                        "friendlyName": me.friendly_name if me else socket.gethostname(),
                        "isMaster": master == self.node_id, "masterNodeId": master or None,
                        "skulkVersion": self.version, "cwd": os.getcwd()},
            "identity": ({"friendlyName": me.friendly_name, "skulkVersion": me.skulk_version}
                         if me else None),
            "warnings": [] if state else ["cluster state not available yet"]}


DIAGNOSTICS: Schema = obj({
    "generatedAt": STRING,
    "runtime": obj({"nodeId": STRING, "hostname": STRING, "friendlyName": STRING, "isMaster": BOOLEAN,
                    "masterNodeId": nullable(STRING), "skulkVersion": STRING, "cwd": STRING}),
    "identity": nullable(obj({"friendlyName": STRING, "skulkVersion": STRING})),
    "warnings": array(STRING)})
