"""`GET /node_id`: this node's id."""

from __future__ import annotations

import falcon

from skulk.services.api.http.schema import STRING, Schema


class NodeIdResource:
    def __init__(self, node_id: str) -> None:
        self.node_id = node_id

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.node_id


NODE_ID: Schema = STRING
