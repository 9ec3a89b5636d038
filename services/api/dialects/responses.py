"""`POST /v1/responses`: the OpenAI Responses adapter (text in, one message out).

`input` is a string or a list of messages (`{role, content}` with a string or `input_text` /
`output_text` parts), `instructions` the system prompt, `max_output_tokens` the budget.
Streaming is the Responses event sequence, each event numbered: `response.created`,
`response.in_progress`, `response.output_item.added`, `response.content_part.added`,
`response.output_text.delta`..., `response.output_text.done`, `response.content_part.done`,
`response.output_item.done`, `response.completed`; a failure after the stream began is
`event: error`.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator
from typing import Any

import falcon

from skulk.cluster.state import ChatMessage, TaskParams
from skulk.services.api.dialects.adapter import open_stream, parsed, respond, sse_comment, sse_event
from skulk.services.api.dialects.fields import (
    FLAG,
    POSITIVE,
    SAMPLING,
    ApiError,
    flag,
    grammar_of,
    max_tokens_of,
    model_of,
    require_content,
    require_object,
    sampling,
)
from skulk.services.api.generate.errors import fail_status
from skulk.services.api.generate.generation import Generation
from skulk.services.api.generate.stream import Stream
from skulk.services.api.generate.timing import KeepAlive
from skulk.services.api.http.schema import INTEGER, NUMBER, STRING, TEXT, Schema, array, enum, nullable, obj, one_of
from skulk.wire.inference import Done, Failed, TokenChunk

ROLES = ("system", "developer", "user", "assistant")
TEXT_PARTS = ("input_text", "output_text", "text")



def responses_format(text: Any) -> dict[str, Any] | None:
    """The Responses API's `text.format` (`{type: json_schema, name, schema}`) as a `response_format`."""
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return fmt if isinstance(fmt, dict) else None
    return {"type": "json_schema", "json_schema": {"schema": fmt.get("schema", {})}}


def _text(raw: Any, where: str) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        parts = []
        for i, part in enumerate(raw):
            if (not isinstance(part, dict) or part.get("type") not in TEXT_PARTS
                    or not isinstance(part.get("text"), str)):
                raise ApiError(400, f"{where}[{i}]: only text parts are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise ApiError(400, f"{where} must be a string or a list of text parts")


def parse_response(body: Any) -> TaskParams:
    body = require_object(body)
    model = model_of(body)
    raw = body.get("input")
    messages = []
    if body.get("instructions") is not None:
        messages.append(ChatMessage(role="system", content=_text(body["instructions"], "instructions")))
    if isinstance(raw, str):
        messages.append(ChatMessage(role="user", content=raw))
    elif isinstance(raw, list):
        for i, item in enumerate(raw):
            if not isinstance(item, dict) or item.get("type", "message") != "message" or item.get("role") not in ROLES:
                raise ApiError(400, f"input[{i}] must be a message with a role in {list(ROLES)}")
            messages.append(ChatMessage(role=item["role"], content=_text(item.get("content"), f"input[{i}].content")))
    else:
        raise ApiError(400, "input is required (a string or a list of messages)")
    require_content(messages)
    return TaskParams(model=model, messages=tuple(messages), max_tokens=max_tokens_of(body, "max_output_tokens"),
                      stream=flag(body, "stream"), grammar=grammar_of(responses_format(body.get("text"))),
                      **sampling(body))



TEXT_PARTS_SCHEMA: Schema = one_of(STRING, array(obj({"type": enum(*TEXT_PARTS), "text": STRING})))
RESPONSE_REQUEST: Schema = obj(
    {"model": TEXT,
     "input": one_of(STRING, array(obj({"role": enum(*ROLES), "content": TEXT_PARTS_SCHEMA},
                                       {"type": enum("message")})))},
    {"instructions": nullable(TEXT_PARTS_SCHEMA), "max_output_tokens": POSITIVE, "stream": FLAG,
     "text": nullable(obj({}, {"format": obj({"type": enum("text", "json_object", "json_schema")},
                                             {"name": {"description": "the schema's name"},
                                              "schema": {"type": "object"}})})),
     **SAMPLING})
"""What `parse_response` accepts; beyond it, the instructions or some input must have content."""

def _usage(done: Done | None) -> dict[str, Any] | None:
    if done is None:
        return None
    return {"input_tokens": done.prompt_tokens, "output_tokens": done.completion_tokens,
            "total_tokens": done.prompt_tokens + done.completion_tokens,
            "input_tokens_details": {"cached_tokens": done.cached_tokens},
            "output_tokens_details": {"reasoning_tokens": 0}}


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def _item(stream: Stream, text: str | None) -> dict[str, Any]:
    return {"type": "message", "id": f"msg_{stream.command_id}", "role": "assistant",
            "status": "in_progress" if text is None else "completed",
            "content": [] if text is None else [_part(text)]}


def response(stream: Stream, text: str | None, done: Done | None) -> dict[str, Any]:
    incomplete = done is not None and done.finish_reason == "length"
    status = "in_progress" if done is None else ("incomplete" if incomplete else "completed")
    p = stream.params
    return {"id": f"resp_{stream.command_id}", "object": "response", "created_at": stream.created,
            "status": status, "model": p.model, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": None, "max_output_tokens": p.max_tokens, "metadata": {},
            "output": [] if text is None else [_item(stream, text)],
            "parallel_tool_calls": False, "temperature": p.temperature, "top_p": p.top_p,
            "tool_choice": "auto", "tools": [], "text": {"format": {"type": "text"}},
            "usage": _usage(done)}



RESPONSE: Schema = obj({
    "id": STRING, "object": enum("response"), "created_at": INTEGER,
    "status": enum("in_progress", "completed", "incomplete"), "model": STRING,
    "output": array(obj({"type": enum("message"), "id": STRING, "role": enum("assistant"), "status": STRING,
                         "content": array(obj({"type": enum("output_text"), "text": STRING}))})),
    "usage": nullable(obj({"input_tokens": INTEGER, "output_tokens": INTEGER, "total_tokens": INTEGER})),
    "max_output_tokens": INTEGER, "temperature": nullable(NUMBER), "top_p": nullable(NUMBER)})
"""`response(...)`: the whole answer, and (in progress) the `response.created` event's response."""

class ResponsesResource:
    def __init__(self, generation: Generation) -> None:
        self.generation = generation

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        respond(resp, open_stream(self.generation, parsed(req, parse_response)), events,
                lambda stream, chunks, done: response(stream, "".join(c.text for c in chunks), done))


def events(stream: Stream) -> Generator[bytes, None, None]:
    seq = itertools.count()
    item_id = f"msg_{stream.command_id}"
    at = {"item_id": item_id, "output_index": 0, "content_index": 0}

    def event(kind: str, **fields: Any) -> bytes:
        return sse_event(kind, {"type": kind, "sequence_number": next(seq), **fields})

    yield event("response.created", response=response(stream, None, None))
    yield event("response.in_progress", response=response(stream, None, None))
    yield event("response.output_item.added", output_index=0, item=_item(stream, None))
    yield event("response.content_part.added", **at, part=_part(""))
    text: list[str] = []
    for msg in stream:
        if isinstance(msg, KeepAlive):
            yield sse_comment("keep-alive")
        elif isinstance(msg, TokenChunk) and msg.text:
            text.append(msg.text)
            yield event("response.output_text.delta", **at, delta=msg.text, logprobs=[])
        elif isinstance(msg, Done):
            whole = "".join(text)
            yield event("response.output_text.done", **at, text=whole, logprobs=[])
            yield event("response.content_part.done", **at, part=_part(whole))
            yield event("response.output_item.done", output_index=0, item=_item(stream, whole))
            yield event("response.completed", response=response(stream, whole, msg))
        elif isinstance(msg, Failed):
            yield event("error", code=str(fail_status(msg.reason)), message=msg.error, param=None)
