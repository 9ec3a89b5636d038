"""`POST /admin/restart[?node_id=]`: replace a node's process image in place (same PID); the
node rejoins by itself and serves its instances again."""

from __future__ import annotations

import uuid

import falcon

from skulk.services.api.gateway import Gateway
from skulk.services.api.resources.common import command
from skulk.wire.commands import RESTART_PENDING, CommandAccepted, RestartNode


class AdminRestartResource:
    def __init__(self, gateway: Gateway, node_id: str) -> None:
        self.gateway = gateway
        self.node_id = node_id

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        target = req.get_param("node_id") or self.node_id
        restart = RestartNode(command_id=uuid.uuid4().hex, node_id=target)
        try:
            reply = command(self.gateway, restart)
        except falcon.HTTPError as exc:
            if exc.status_code == 409 and exc.description == RESTART_PENDING:
                resp.status = falcon.HTTP_409  # upstream's body, not the error envelope
                resp.media = {"status": RESTART_PENDING, "node_id": target}
                return
            raise
        status = reply.message if isinstance(reply, CommandAccepted) else "restart_sent"
        resp.media = {"status": status, "node_id": target}
