"""`POST /v1/embeddings`: OpenAI's embeddings endpoint for the cluster's embedding models.

Checked against the state replica first (404 no instance, 400 not an embedding model), routed
once through the master (`TextEmbedding`: no task, the exchange is short), then one `Embed` to
the instance's runner over the data plane; the vectors come back as float32 bytes and leave as
JSON floats or base64 (`embedding_request.py`).
"""

from __future__ import annotations

import uuid

import falcon

from skulk.cluster.replica import StateReplica
from skulk.services.api.dialects.embedding_request import check_model, parse, response
from skulk.services.api.generate.generation import fail_status
from skulk.services.api.http.errors import ApiError
from skulk.services.api.http.request_body import http_error, json_body, state_or_503
from skulk.services.api.links import failover
from skulk.services.api.links.gateway import Gateway, MasterUnavailable
from skulk.wire.commands import CommandRejected, Routed, TextEmbedding
from skulk.wire.inference import Failed


class EmbeddingsResource:
    def __init__(self, gateway: Gateway, replica: StateReplica, node_id: str) -> None:
        self.gateway, self.replica, self.node_id = gateway, replica, node_id

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            request = parse(json_body(req))
            state = state_or_503(self.replica)
            check_model(request, [i.card for i in state.instances.values() if i.model_id == request.model])
        except ApiError as exc:
            raise http_error(exc.status, exc.message) from None
        try:  # asked again while the leader changes (a rolling restart): `failover.py`
            routed = failover.route(self.gateway, lambda: TextEmbedding(
                command_id=uuid.uuid4().hex, owner_node=self.node_id, model=request.model))
        except MasterUnavailable as exc:
            raise http_error(503, str(exc)) from None
        if isinstance(routed, CommandRejected):
            raise http_error(routed.status, routed.message)
        assert isinstance(routed, Routed)
        out = self.gateway.embed(routed.endpoint, routed.command_id, routed.task_id, routed.instance_id,
                                 routed.runner_id, request.inputs, request.dimensions)
        if isinstance(out, Failed):
            raise http_error(fail_status(out.reason), out.error)
        resp.media = response(request.model, out.vectors, out.prompt_tokens, request.encoding_format)
