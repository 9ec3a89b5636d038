"""The Ollama API under `/ollama/api/` and `/api/`: `chat` and `generate` (NDJSON streaming,
the default as in Ollama), `tags`, `show`, `ps`, `version`.

Options map onto the common parameters (`num_predict` is the budget, `stop`, `temperature`,
`top_p`, `top_k`, `min_p`, `seed`); `generate` with `raw: true` skips the chat template. A
failure after the stream began is a last line with `error` and `done_reason: "error"` (the
Ollama client raises on it); before it, an HTTP error `{"error": ...}` (`errors.py`).
"""

from __future__ import annotations

import time
from collections.abc import Generator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import falcon

from skulk.cluster.replica import StateReplica
from skulk.cluster.state import ChatMessage, TaskParams
from skulk.services.api.dialects.adapter import ndjson, open_stream, parsed, respond
from skulk.services.api.dialects.fields import (
    FLAG,
    SAMPLING,
    STOPS,
    ApiError,
    flag,
    grammar_of,
    message_list,
    model_of,
    require_content,
    require_object,
    sampling,
    stops_of,
)
from skulk.services.api.dialects.models import Catalog
from skulk.services.api.generate.generation import Generation
from skulk.services.api.generate.stream import Stream
from skulk.services.api.generate.timing import KeepAlive
from skulk.services.api.http.declare import NDJSON
from skulk.services.api.http.errors import http_error
from skulk.services.api.http.request_body import json_body
from skulk.services.api.http.schema import (
    BOOLEAN,
    INTEGER,
    STRING,
    TEXT,
    Schema,
    array,
    enum,
    map_of,
    nullable,
    obj,
    one_of,
)
from skulk.wire.inference import Done, Failed, TokenChunk
from skulk.wire.models import EngineKind, ModelCard

ROLES = ("system", "user", "assistant", "tool")



def ollama_format(fmt: Any) -> dict[str, Any] | None:
    """Ollama's `format` (`"json"` or a JSON schema) as a `response_format`."""
    if fmt in (None, ""):
        return None
    if fmt == "json":
        return {"type": "json_object"}
    if isinstance(fmt, dict):
        return {"type": "json_schema", "json_schema": {"schema": fmt}}
    raise ApiError(400, "format must be \"json\" or a JSON schema object")


def _options(body: dict[str, Any]) -> dict[str, Any]:
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "options must be an object")
    budget = options.get("num_predict")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        raise ApiError(400, "options.num_predict must be an integer")
    return {"max_tokens": budget if budget and budget > 0 else 0, "stop": stops_of(options),
            "stream": flag(body, "stream", True), "grammar": grammar_of(ollama_format(body.get("format"))),
            **sampling(options)}


def parse_chat(body: Any) -> TaskParams:
    body = require_object(body)
    model = model_of(body)
    messages = []
    for i, m in enumerate(message_list(body)):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content", ""), str):
            raise ApiError(400, f"messages[{i}] needs a role in {list(ROLES)} and string content")
        messages.append(ChatMessage(role=m["role"], content=m.get("content", "")))
    require_content(messages)
    return TaskParams(model=model, messages=tuple(messages), **_options(body))


def parse_generate(body: Any) -> TaskParams:
    body = require_object(body)
    model = model_of(body)
    prompt, system = body.get("prompt", ""), body.get("system")
    if not isinstance(prompt, str) or (system is not None and not isinstance(system, str)):
        raise ApiError(400, "prompt and system must be strings")
    if flag(body, "raw"):
        if not prompt:
            require_content([])
        return TaskParams(model=model, messages=(), prompt=prompt, **_options(body))
    messages = (([ChatMessage(role="system", content=system)] if system else [])
                + [ChatMessage(role="user", content=prompt)])
    require_content(messages)
    return TaskParams(model=model, messages=tuple(messages), **_options(body))



OPTIONS: Schema = nullable(obj({}, {"num_predict": nullable({"type": "integer"}), "stop": STOPS, **SAMPLING}))
FORMAT: Schema = nullable(one_of(enum("", "json"), {"type": "object", "description": "a JSON schema"}))
"""`format` (`response_format.ollama_format`): "json", or a JSON schema the answer must follow."""
CHAT_REQUEST: Schema = obj(
    {"model": TEXT, "messages": array(obj({"role": enum(*ROLES)}, {"content": STRING}), min_items=1)},
    {"stream": FLAG, "options": OPTIONS, "format": FORMAT})
"""What `parse_chat` accepts; beyond it, some message must have content."""
GENERATE_REQUEST: Schema = obj({"model": TEXT},
                               {"prompt": STRING, "system": nullable(STRING), "raw": FLAG, "stream": FLAG,
                                "options": OPTIONS, "format": FORMAT})
"""What `parse_generate` accepts; beyond it, the prompt (or, unless raw, the system) must have content."""
SHOW_REQUEST: Schema = obj({}, {"model": STRING, "name": STRING})
"""`show`'s body (`model`, or `name` as older clients send)."""

def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _final(stream: Stream, done: Done, started: float) -> dict[str, Any]:
    total_ns = int((time.monotonic() - started) * 1e9)
    return {"done": True, "done_reason": done.finish_reason, "total_duration": total_ns, "load_duration": 0,
            "prompt_eval_count": done.prompt_tokens,
            "prompt_eval_duration": int(done.prompt_tokens / done.prompt_tps * 1e9) if done.prompt_tps else 0,
            "eval_count": done.completion_tokens,
            "eval_duration": int(done.completion_tokens / done.generation_tps * 1e9) if done.generation_tps else 0}



FINAL: dict[str, Schema] = {"model": STRING, "created_at": STRING, "done": BOOLEAN, "done_reason": STRING,
                            "total_duration": INTEGER, "eval_count": INTEGER, "prompt_eval_count": INTEGER}
CHAT_RESPONSE: Schema = obj({**FINAL, "message": obj({"role": enum("assistant"), "content": STRING})})
GENERATE_RESPONSE: Schema = obj({**FINAL, "response": STRING})
"""A whole (`stream: false`) answer; streamed, each NDJSON line has the same keys but the totals."""

class OllamaGenerateResource:
    """`chat` (`message` objects) or `generate` (`response` strings), by `kind`."""

    def __init__(self, generation: Generation, kind: str) -> None:
        self.generation = generation
        self.kind = kind

    def _piece(self, text: str) -> dict[str, Any]:
        return {"message": {"role": "assistant", "content": text}} if self.kind == "chat" else {"response": text}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        started = time.monotonic()
        stream = open_stream(self.generation, parsed(req, parse_chat if self.kind == "chat" else parse_generate))
        respond(resp, stream, lambda s: self.lines(s, started),
                lambda s, chunks, done: {"model": s.params.model, "created_at": _now(),
                                         **self._piece("".join(c.text for c in chunks)), **_final(s, done, started)},
                media=NDJSON)

    def lines(self, stream: Stream, started: float) -> Generator[bytes, None, None]:
        model = stream.params.model
        for msg in stream:
            if isinstance(msg, TokenChunk) and msg.text:
                yield ndjson({"model": model, "created_at": _now(), **self._piece(msg.text), "done": False})
            elif isinstance(msg, KeepAlive):  # an empty piece: Ollama's clients parse every line as JSON
                yield ndjson({"model": model, "created_at": _now(), **self._piece(""), "done": False})
            elif isinstance(msg, Done):
                yield ndjson({"model": model, "created_at": _now(), **self._piece(""), **_final(stream, msg, started)})
            elif isinstance(msg, Failed):
                yield ndjson({"model": model, "created_at": _now(), "error": msg.error, "done": True,
                              "done_reason": "error"})


def _details(card: ModelCard) -> dict[str, Any]:
    fmt = "mlx" if EngineKind.MLX.value in card.engines else "gguf"  # a GGUF-only model has no MLX weights
    return {"parent_model": "", "format": fmt, "family": card.family, "families": [card.family],
            "parameter_size": "", "quantization_level": card.quantization}


def _tag(card: ModelCard, when: float) -> dict[str, Any]:
    return {"name": card.model_id, "model": card.model_id, "size": card.storage_size_bytes,
            "modified_at": datetime.fromtimestamp(when, UTC).isoformat().replace("+00:00", "Z"),
            "digest": "", "details": _details(card)}



DETAILS: Schema = obj({"format": STRING, "family": STRING, "families": array(STRING),
                       "quantization_level": STRING})
TAG: Schema = obj({"name": STRING, "model": STRING, "size": INTEGER, "modified_at": STRING, "digest": STRING,
                   "details": DETAILS})
TAGS: Schema = obj({"models": array(TAG)})
PS: Schema = obj({"models": array({**TAG, "required": [*TAG["required"], "expires_at", "size_vram"]})})
SHOW: Schema = obj({"details": DETAILS, "model_info": map_of({}), "capabilities": array(STRING),
                    "modified_at": STRING})
VERSION: Schema = obj({"version": STRING})

class OllamaTagsResource:
    """`GET tags`: the cluster's models (the replicated catalog)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"models": [_tag(c, _mtime(self.catalog.models_dir, c)) for c in self.catalog.cards().values()]}


def _mtime(models_dir: Path, card: ModelCard) -> float:
    try:
        return (models_dir / card.model_id.replace("/", "--")).stat().st_mtime
    except OSError:
        return 0.0


class OllamaShowResource:
    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = json_body(req)
        name = body.get("model", body.get("name")) if isinstance(body, dict) else None
        card = self.catalog.cards().get(name) if isinstance(name, str) else None
        if card is None:
            raise http_error(404, f"model '{name}' not found")
        resp.media = {"modelfile": "", "parameters": "", "template": "", "details": _details(card),
                      "model_info": {"general.architecture": card.family,
                                     f"{card.family}.context_length": card.context_length,
                                     f"{card.family}.block_count": card.n_layers,
                                     f"{card.family}.embedding_length": card.hidden_size},
                      "capabilities": ["completion"], "modified_at": _tag(card, 0)["modified_at"]}


class OllamaPsResource:
    """`GET ps`: the models with an instance in the cluster."""

    def __init__(self, replica: StateReplica, catalog: Catalog) -> None:
        self.replica = replica
        self.catalog = catalog

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        state = self.replica.get(timeout=5.0)
        running = {i.model_id for i in state.instances.values()} if state else set()
        cards = self.catalog.cards()
        resp.media = {"models": [{**_tag(cards[m], 0), "expires_at": "9999-12-31T23:59:59Z",
                                  "size_vram": cards[m].storage_size_bytes}
                                 for m in sorted(running) if m in cards]}


class OllamaVersionResource:
    def __init__(self, version: str) -> None:
        self.version = version

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"version": self.version}

    def on_head(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.status = falcon.HTTP_200


class OllamaRootResource:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = falcon.MEDIA_TEXT
        resp.text = "Ollama is running"

    def on_head(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.status = falcon.HTTP_200

