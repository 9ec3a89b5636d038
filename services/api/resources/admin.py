"""`POST /admin/restart[?node_id=]`: replace a node's process image in place (same PID); the
node rejoins by itself and serves its instances again."""

from __future__ import annotations

import uuid

import falcon

from skulk.services.api.gateway import Gateway
from skulk.services.api.resources.common import command
from skulk.wire.commands import CommandAccepted, RestartNode


class AdminRestartResource:
    def __init__(self, gateway: Gateway, node_id: str) -> None:
        self.gateway = gateway
        self.node_id = node_id

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        target = req.get_param("node_id") or self.node_id
        reply = command(self.gateway, RestartNode(command_id=uuid.uuid4().hex, node_id=target))
        status = reply.message if isinstance(reply, CommandAccepted) else "restart_sent"
        resp.media = {"status": status, "node_id": target}
