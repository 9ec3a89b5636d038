"""`POST /v1/embeddings` in and out (pure): OpenAI's body and response, upstream's rules.

The runner answers each vector as little-endian float32 bytes; `base64` is those bytes as they
are (what OpenAI sends and its SDK decodes with `numpy.frombuffer(..., "float32")`), `float` the
same numbers as JSON, so both encodings give the same vector bit for bit.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from skulk.services.api.http.errors import ApiError
from skulk.services.api.http.schema import INTEGER, NUMBER, STRING, TEXT, Schema, array, enum, nullable, obj, one_of
from skulk.wire.commands import NO_INSTANCE, NOT_EMBEDDING
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
