"""`POST /admin/restart[?node_id=]`: replace a node's process image in place (same PID); the
node rejoins by itself and serves its instances again."""

from __future__ import annotations

import uuid

import falcon

from skulk.services.api.http.cluster_replies import master_reply
from skulk.services.api.http.errors import http_error
from skulk.services.api.http.schema import STRING, Schema, enum, obj
from skulk.services.api.links.master_client import MasterClient
from skulk.wire.commands import RESTART_PENDING, CommandAccepted, CommandRejected, RejectReason, RestartNode


class AdminRestartResource:
    def __init__(self, master: MasterClient, node_id: str) -> None:
        self.master = master
        self.node_id = node_id

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        target = req.get_param("node_id") or self.node_id
        restart = RestartNode(command_id=uuid.uuid4().hex, node_id=target)
        reply = master_reply(self.master, restart)
        if isinstance(reply, CommandRejected) and reply.reason == RejectReason.RESTART_PENDING:
            resp.status = falcon.HTTP_409  # upstream's body, not the error envelope
            resp.media = {"status": RESTART_PENDING, "node_id": target}
            return
        if isinstance(reply, CommandRejected):
            raise http_error(reply.status, reply.message)
        status = reply.message if isinstance(reply, CommandAccepted) else "restart_sent"
        resp.media = {"status": status, "node_id": target}


RESTARTING: Schema = obj({"status": enum("restarting", "restart_sent"), "node_id": STRING})
RESTART_ALREADY_PENDING: Schema = obj({"status": enum(RESTART_PENDING), "node_id": STRING})
"""The 409 body: upstream's own, not the error envelope."""
