"""`POST /v1/messages`: the Anthropic Messages adapter.

Parses system, multi-turn messages (text blocks), `stop_sequences` and sampling into the common
parameters; renders the generation as a `message` or as Anthropic's event stream, in order:
`message_start`, `content_block_start`, `ping` (keep-alive), `content_block_delta`...,
`content_block_stop`, `message_delta` (stop reason, usage), `message_stop`; a failure after the
stream began is `event: error`. Errors before it are HTTP errors in Anthropic's shape
(`errors.py` picks the shape by path), so the SDK raises its own error types.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import falcon

from skulk.cluster.state import ChatMessage, TaskParams
from skulk.services.api.dialects.adapter import open_stream, parsed, respond, sse_event
from skulk.services.api.dialects.fields import (
    FLAG,
    STOPS,
    TEXT_PART,
    ApiError,
    _int,
    _number,
    flag,
    max_tokens_of,
    message_list,
    model_of,
    require_content,
    require_object,
    stops_of,
)
from skulk.services.api.generate.errors import fail_status
from skulk.services.api.generate.generation import Generation
from skulk.services.api.generate.stream import Stream
from skulk.services.api.generate.timing import KeepAlive
from skulk.services.api.http.errors import anthropic_error
from skulk.services.api.http.schema import INTEGER, STRING, TEXT, Schema, array, enum, nullable, obj, one_of, ranged
from skulk.wire.inference import Done, Failed, TokenChunk


def _text(raw: Any, where: str) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        parts = []
        for i, block in enumerate(raw):
            if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
                raise ApiError(400, f"{where}[{i}]: only text blocks are supported")
            parts.append(block["text"])
        return "".join(parts)
    raise ApiError(400, f"{where} must be a string or a list of text blocks")


def parse_messages(body: Any) -> TaskParams:
    body = require_object(body)
    model = model_of(body)
    if body.get("max_tokens") is None:
        raise ApiError(400, "max_tokens: Field required")
    raw = message_list(body)
    messages = []
    if body.get("system") is not None:
        messages.append(ChatMessage(role="system", content=_text(body["system"], "system")))
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise ApiError(400, f"messages[{i}].role must be 'user' or 'assistant'")
        messages.append(ChatMessage(role=m["role"], content=_text(m.get("content"), f"messages[{i}].content")))
    require_content(messages)
    return TaskParams(model=model, messages=tuple(messages), max_tokens=max_tokens_of(body, "max_tokens"),
                      stream=flag(body, "stream"), stop=stops_of(body, "stop_sequences"),
                      temperature=_number(body, "temperature", 0.0, 2.0), top_p=_number(body, "top_p", 0.0, 1.0),
                      top_k=_int(body, "top_k", 0, 1_000_000))



TEXT_BLOCKS: Schema = one_of(STRING, array(TEXT_PART))
MESSAGES_REQUEST: Schema = obj(
    {"model": TEXT, "max_tokens": {"type": "integer", "minimum": 1},
     "messages": array(obj({"role": enum("user", "assistant"), "content": TEXT_BLOCKS}))},
    {"system": nullable(TEXT_BLOCKS), "stream": FLAG, "stop_sequences": STOPS,
     "temperature": ranged("number", 0, 2), "top_p": ranged("number", 0, 1),
     "top_k": ranged("integer", 0, 1_000_000)})
"""What `parse_messages` accepts; beyond it, the system or some message must have content."""

def stop_reason(done: Done) -> str:
    if done.finish_reason == "length":
        return "max_tokens"
    if done.finish_reason == "tool_calls":
        return "tool_use"
    return "stop_sequence" if done.stop_string else "end_turn"


def usage(done: Done | None, prompt_tokens: int) -> dict[str, int]:
    return {"input_tokens": done.prompt_tokens if done else prompt_tokens,
            "output_tokens": done.completion_tokens if done else 0,
            "cache_read_input_tokens": done.cached_tokens if done else 0,
            "cache_creation_input_tokens": 0}


def message(stream: Stream, text: str | None, done: Done | None) -> dict[str, Any]:
    return {"id": f"msg_{stream.command_id}", "type": "message", "role": "assistant",
            "model": stream.params.model,
            "content": [{"type": "text", "text": text}] if text is not None else [],
            "stop_reason": stop_reason(done) if done else None,
            "stop_sequence": (done.stop_string or None) if done else None,
            "usage": usage(done, stream.prompt_tokens)}



MESSAGE: Schema = obj({
    "id": STRING, "type": enum("message"), "role": enum("assistant"), "model": STRING,
    "content": array(obj({"type": enum("text"), "text": STRING})),
    "stop_reason": nullable(enum("end_turn", "max_tokens", "stop_sequence", "tool_use")),
    "stop_sequence": nullable(STRING),
    "usage": obj({"input_tokens": INTEGER, "output_tokens": INTEGER},
                 {"cache_read_input_tokens": INTEGER, "cache_creation_input_tokens": INTEGER})})
"""`message(...)`: the whole answer, and (unfinished) the `message_start` event's message."""

class MessagesResource:
    def __init__(self, generation: Generation) -> None:
        self.generation = generation

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        respond(resp, open_stream(self.generation, parsed(req, parse_messages)), events,
                lambda stream, chunks, done: message(stream, "".join(c.text for c in chunks), done))


def events(stream: Stream) -> Generator[bytes, None, None]:
    yield sse_event("message_start", {"type": "message_start", "message": message(stream, None, None)})
    yield sse_event("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": {"type": "text", "text": ""}})
    for msg in stream:
        if isinstance(msg, KeepAlive):
            yield sse_event("ping", {"type": "ping"})
        elif isinstance(msg, TokenChunk) and msg.text:
            yield sse_event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                    "delta": {"type": "text_delta", "text": msg.text}})
        elif isinstance(msg, Done):
            yield sse_event("content_block_stop", {"type": "content_block_stop", "index": 0})
            yield sse_event("message_delta", {"type": "message_delta",
                                              "delta": {"stop_reason": stop_reason(msg),
                                                        "stop_sequence": msg.stop_string or None},
                                              "usage": usage(msg, stream.prompt_tokens)})
            yield sse_event("message_stop", {"type": "message_stop"})
        elif isinstance(msg, Failed):
            yield sse_event("error", anthropic_error(fail_status(msg.reason), msg.error))
