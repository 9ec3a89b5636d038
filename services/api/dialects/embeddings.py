"""`POST /v1/embeddings`: OpenAI's embeddings endpoint for the cluster's embedding models.

Its parser, schemas and response builder (pure: OpenAI's body and response, upstream's rules),
then the resource. Checked against the state replica first (404 no instance, 400 not an
embedding model), routed once through the master (`TextEmbedding`: no task, the exchange is
short), then one `Embed` to the instance's runner over the data plane. The runner answers each
vector as little-endian float32 bytes; `base64` is those bytes as they are (what OpenAI sends
and its SDK decodes with `numpy.frombuffer(..., "float32")`), `float` the same numbers as JSON,
so both encodings give the same vector bit for bit.
"""

from __future__ import annotations

import base64
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import falcon

from skulk.cluster.replica import StateReplica
from skulk.services.api.generate.errors import fail_status
from skulk.services.api.http.cluster_replies import state_or_503
from skulk.services.api.http.errors import ApiError, http_error
from skulk.services.api.http.request_body import json_body
from skulk.services.api.http.schema import INTEGER, NUMBER, STRING, TEXT, Schema, array, enum, nullable, obj, one_of
from skulk.services.api.links.master_client import THROUGH_FAILOVER, MasterClient, MasterUnavailable
from skulk.services.api.links.runner_link import RunnerLink
from skulk.wire.commands import NO_INSTANCE, NOT_EMBEDDING, CommandRejected, Routed, TextEmbedding
from skulk.wire.inference import Failed
from skulk.wire.models import ModelCard

MAX_INPUTS = 2048
"""OpenAI's limit on inputs per request."""
ENCODINGS = ("float", "base64")

EMBEDDING_REQUEST: Schema = obj(
    {"model": TEXT, "input": one_of(TEXT, {**array(TEXT, min_items=1), "maxItems": MAX_INPUTS})},
    {"encoding_format": nullable(enum(*ENCODINGS)), "dimensions": {"type": ["integer", "null"], "minimum": 1},
     "user": nullable(STRING)})
EMBEDDING_LIST: Schema = obj({
    "object": enum("list"), "model": STRING,
    "data": array(obj({"object": enum("embedding"), "index": INTEGER,
                       "embedding": one_of(array(NUMBER), STRING)})),
    "usage": obj({"prompt_tokens": INTEGER, "total_tokens": INTEGER})})


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    model: str
    inputs: tuple[str, ...]
    encoding_format: str = "float"
    dimensions: int = 0  # 0: the model's width


def parse(body: Any) -> EmbeddingRequest:
    """The validated request, or ApiError(400) naming the field."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "model is required (a string)")
    raw = body.get("input")
    if isinstance(raw, str):
        inputs: tuple[str, ...] = (raw,)
    elif isinstance(raw, list) and raw and all(isinstance(x, str) for x in raw):
        inputs = tuple(raw)
    elif isinstance(raw, list) and raw and all(isinstance(x, (int, list)) for x in raw):
        raise ApiError(400, "input: token arrays are not supported; send text")
    else:
        raise ApiError(400, "input must be a non-empty string or a non-empty array of strings")
    if len(inputs) > MAX_INPUTS:
        raise ApiError(400, f"input: at most {MAX_INPUTS} inputs per request, got {len(inputs)}")
    empty = next((i for i, text in enumerate(inputs) if not text), None)
    if empty is not None:
        raise ApiError(400, f"input[{empty}] is empty; every input must contain text")
    encoding = body.get("encoding_format")
    encoding = "float" if encoding is None else encoding
    if encoding not in ENCODINGS:
        raise ApiError(400, f"encoding_format must be one of {', '.join(ENCODINGS)}")
    dims = body.get("dimensions")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        raise ApiError(400, "dimensions must be a positive integer")
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise ApiError(400, "user must be a string")
    return EmbeddingRequest(model=model, inputs=inputs, encoding_format=encoding, dimensions=dims or 0)


def check_model(request: EmbeddingRequest, cards: Sequence[ModelCard]) -> None:
    """Refuse before routing, on the cards the state's instances of the model carry: none is
    a 404, text-generation models a 400, `dimensions` wider than the model a 400."""
    if not cards:
        raise ApiError(404, NO_INSTANCE.format(model=request.model))
    embedding = [c for c in cards if c.is_embedding]
    if not embedding:
        raise ApiError(400, NOT_EMBEDDING.format(model=request.model))
    width = embedding[0].hidden_size
    if request.dimensions > width:
        raise ApiError(400, f"dimensions must be at most {width} for {request.model}")


def encode(vector: bytes, encoding_format: str) -> list[float] | str:
    """One vector in the client's encoding (`vector`: little-endian float32 bytes)."""
    if encoding_format == "base64":
        return base64.b64encode(vector).decode("ascii")
    return list(struct.unpack(f"<{len(vector) // 4}f", vector))


def response(model: str, vectors: Sequence[bytes], prompt_tokens: int, encoding_format: str) -> dict[str, Any]:
    return {"object": "list", "model": model,
            "data": [{"object": "embedding", "index": i, "embedding": encode(v, encoding_format)}
                     for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}


class EmbeddingsResource:
    def __init__(self, master: MasterClient, runners: RunnerLink, replica: StateReplica, node_id: str) -> None:
        self.master, self.runners, self.replica, self.node_id = master, runners, replica, node_id

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            request = parse(json_body(req))
            state = state_or_503(self.replica)
            check_model(request, [i.card for i in state.instances.values() if i.model_id == request.model])
        except ApiError as exc:
            raise http_error(exc.status, exc.message) from None
        try:  # asked again while the leader changes (a rolling restart)
            routed = THROUGH_FAILOVER.ask(self.master, lambda _attempt: TextEmbedding(
                command_id=uuid.uuid4().hex, owner_node=self.node_id, model=request.model,
                avoid_nodes=tuple(sorted(self.replica.departed))))
        except MasterUnavailable as exc:
            raise http_error(503, str(exc)) from None
        if isinstance(routed, CommandRejected):
            raise http_error(routed.status, routed.message)
        assert isinstance(routed, Routed)
        out = self.runners.embed(routed.endpoint, routed.command_id, routed.task_id, routed.instance_id,
                                 routed.runner_id, request.inputs, request.dimensions)
        if isinstance(out, Failed):
            raise http_error(fail_status(out.reason), out.error)
        resp.media = response(request.model, out.vectors, out.prompt_tokens, request.encoding_format)
