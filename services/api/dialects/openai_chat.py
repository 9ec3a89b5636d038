"""`POST /v1/chat/completions` and `POST /bench/chat/completions`: OpenAI chat, whole.

Its parser (`parse`) and request schema (`CHAT_REQUEST`), its renderers and response schemas
(shaped as upstream Skulk frames them: docs/architecture.md, "Compatibility with upstream
Skulk"), and the Falcon resource. Unknown extra fields are ignored (OpenAI clients send many);
known fields of the wrong type are a 400 naming the field. The context check needs the served
model's limit: it is the generation path's (`generation.context_checked`).

Streaming frames follow upstream exactly: `: keep-alive`, `: command_id <id>`, `data:` chunks,
a final chunk with `finish_reason` and `usage`, `: generation_stats {...}`, `data: [DONE]`;
an error is a `data: {"error": ...}` event then `[DONE]`. Non-streaming errors are real HTTP
errors in the envelope. Whatever happens, the client gets an answer.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import replace
from typing import Any

import falcon

from skulk.cluster.state import ChatMessage, TaskParams, ToolCall
from skulk.services.api.dialects.adapter import open_stream, parsed, respond, sse_comment, sse_data
from skulk.services.api.dialects.fields import (
    FLAG,
    POSITIVE,
    SAMPLING,
    STOPS,
    TEXT_PART,
    ApiError,
    _int,
    flag,
    grammar_of,
    max_tokens_of,
    message_list,
    model_of,
    require_content,
    require_object,
    sampling,
    stops_of,
)
from skulk.services.api.generate.errors import fail_status
from skulk.services.api.generate.generation import Generation
from skulk.services.api.generate.stream import Stream
from skulk.services.api.generate.timing import KeepAlive
from skulk.services.api.http.schema import (
    INTEGER,
    NUMBER,
    STRING,
    TEXT,
    Schema,
    array,
    enum,
    nullable,
    obj,
    one_of,
    ranged,
)
from skulk.wire.inference import Done, Failed, Progress, ProgressPhase, TokenChunk

# ---- the request ------------------------------------------------------------------------------
ROLES = ("assistant", "developer", "system", "tool", "user")  # a tuple: `[] in ROLES` is False, not a TypeError

# The tool-calling and thinking fields: `tools`, the tool calls of assistant messages and the
# results of `tool` messages, `enable_thinking` and `reasoning_effort`. They go to the model's
# chat template; the runner parses the model's calls with mlx-lm's tool parser for that model.

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def tools_of(body: dict[str, Any]) -> str:
    """The `tools` list as JSON text (every entry a function with a name), or ""."""
    tools = body.get("tools")
    if tools in (None, []):
        return ""
    if not isinstance(tools, list):
        raise ApiError(400, "tools must be a list")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ApiError(400, f"tools[{i}] must be {{type: 'function', function: {{name, parameters}}}}")
    return json.dumps(tools)


def thinking_of(body: dict[str, Any]) -> dict[str, Any]:
    enable = body.get("enable_thinking")
    if enable is not None and not isinstance(enable, bool):
        raise ApiError(400, "enable_thinking must be a boolean")
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in EFFORTS:
        raise ApiError(400, f"reasoning_effort must be one of {list(EFFORTS)}")
    return {"enable_thinking": enable, "reasoning_effort": effort or ""}


def calls_of(message: dict[str, Any], index: int) -> tuple[ToolCall, ...]:
    """An assistant message's `tool_calls`, given back in a multi-turn chat."""
    raw = message.get("tool_calls")
    if raw in (None, []):
        return ()
    if not isinstance(raw, list):
        raise ApiError(400, f"messages[{index}].tool_calls must be a list")
    calls = []
    for j, call in enumerate(raw):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ApiError(400, f"messages[{index}].tool_calls[{j}] needs function.name")
        args = fn.get("arguments", "{}")
        calls.append(ToolCall(id=str(call.get("id", f"call_{j}")), name=fn["name"],
                              arguments=args if isinstance(args, str) else json.dumps(args)))
    return tuple(calls)


def tool_result_of(message: dict[str, Any], index: int) -> dict[str, str]:
    """A `tool` message's call id and function name (for templates that show them)."""
    if message.get("role") != "tool":
        return {}
    call_id, name = message.get("tool_call_id", ""), message.get("name", "")
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise ApiError(400, f"messages[{index}].tool_call_id and name must be strings")
    return {"tool_call_id": call_id, "name": name}


def _content(raw: Any, index: int) -> str:
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        parts = []
        for part in raw:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"messages[{index}].content: only text parts are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise ApiError(400, f"messages[{index}].content must be a string or a list of text parts")


def parse(body: Any) -> TaskParams:
    """An OpenAI chat completions body."""
    body = require_object(body)
    model = model_of(body)
    messages = []
    for i, m in enumerate(message_list(body)):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ApiError(400, f"messages[{i}] needs a role in {sorted(ROLES)}")
        messages.append(ChatMessage(role=m["role"], content=_content(m.get("content"), i),
                                    tool_calls=calls_of(m, i), **tool_result_of(m, i)))
    require_content(messages)
    return TaskParams(
        model=model, messages=tuple(messages), max_tokens=max_tokens_of(body, "max_tokens", "max_completion_tokens"),
        stream=flag(body, "stream"), stop=stops_of(body), logprobs=flag(body, "logprobs"),
        top_logprobs=_int(body, "top_logprobs", 0, 20) or 0, grammar=grammar_of(body.get("response_format")),
        tools=tools_of(body), **thinking_of(body),
        **sampling(body))


RESPONSE_FORMAT: Schema = nullable({
    **obj({"type": enum("text", "json_object", "json_schema")},
          {"json_schema": obj({}, {"schema": {"type": "object"}})}),
    "if": {"properties": {"type": {"const": "json_schema"}}},
    "then": {"required": ["json_schema"]}})
"""`response_format` (`response_format.grammar_of`); a schema llguidance cannot compile is a 400 too."""

TOOLS: Schema = nullable(array(obj({"function": obj({"name": TEXT},
                                                    {"parameters": {"description": "a JSON schema of the arguments"}})},
                                   {"type": {"description": "\"function\""}})))
"""`tools` (`tools_of`)."""
TOOL_CALLS: Schema = nullable(array(obj({"function": obj({"name": STRING}, {"arguments": {}})},
                                        {"id": {}, "type": {}})))
"""An assistant message's `tool_calls` given back (`calls_of`)."""
MESSAGE: Schema = {
    **obj({"role": enum(*ROLES)},
          {"content": nullable(one_of(STRING, array(TEXT_PART))), "tool_calls": TOOL_CALLS,
           "tool_call_id": {"description": "a tool message's call id (a string)"},
           "name": {"description": "a tool message's function name (a string)"}}),
    "if": {"properties": {"role": {"const": "tool"}}},
    "then": {"properties": {"tool_call_id": STRING, "name": STRING}}}

CHAT_REQUEST: Schema = obj(
    {"model": TEXT, "messages": array(MESSAGE, min_items=1)},
    {"max_tokens": POSITIVE, "max_completion_tokens": POSITIVE, "stream": FLAG, "stop": STOPS,
     "logprobs": FLAG, "top_logprobs": ranged("integer", 0, 20), "response_format": RESPONSE_FORMAT,
     "tools": TOOLS, "enable_thinking": FLAG, "reasoning_effort": nullable(enum(*EFFORTS)), **SAMPLING})
"""What `parse` accepts; beyond it, some message must have content (a 400 otherwise)."""


# ---- the response, as upstream frames it -----------------------------------------------------
DONE = b"data: [DONE]\n\n"


def usage(prompt: int, completion: int, cached: int = 0, accepted: int = 0, rejected: int = 0) -> dict[str, Any]:
    """OpenAI's usage; `accepted`/`rejected`: speculative drafts the model kept / threw away."""
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": accepted,
                                          "rejected_prediction_tokens": rejected}}


def token_logprob(chunk: TokenChunk) -> dict[str, Any] | None:
    if chunk.logprob is None:
        return None
    return {"token": chunk.token_bytes.decode(errors="replace"), "logprob": chunk.logprob,
            "bytes": list(chunk.token_bytes),
            "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": list(t.token_bytes)}
                             for t in chunk.top_logprobs]}


def stream_chunk(command_id: str, model: str, created: int, content: str | None,
                 chunk: TokenChunk | None = None, finish_reason: str | None = None,
                 usage_obj: dict[str, Any] | None = None) -> dict[str, Any]:
    """One `data:` chunk exactly as upstream frames it (object is "chat.completion")."""
    lp = token_logprob(chunk) if chunk is not None else None
    delta: dict[str, Any] = {"role": "assistant", "content": content}
    if chunk is not None and chunk.reasoning:  # thinking text: its own field, as upstream
        delta = {"role": "assistant", "reasoning_content": content}
    elif chunk is not None and chunk.tool_calls:  # one chunk with every call
        delta = {"role": "assistant", "content": None, "tool_calls": tool_calls_json(chunk.tool_calls)}
    return {"id": command_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta,
                         "logprobs": {"content": [lp]} if lp else None,
                         "finish_reason": finish_reason, "usage": None}],
            "usage": usage_obj, "service_tier": None}


def generation_stats(done: Done) -> dict[str, Any]:
    return {"prompt_tps": done.prompt_tps, "generation_tps": done.generation_tps,
            "prompt_tokens": done.prompt_tokens, "generation_tokens": done.completion_tokens,
            "peak_memory_usage": {"inBytes": done.peak_memory_bytes},
            "accepted_prediction_tokens": done.accepted_prediction_tokens,
            "rejected_prediction_tokens": done.rejected_prediction_tokens}


def tool_calls_json(calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
    return [{"id": c.id, "index": i, "type": "function",
             "function": {"id": c.id, "name": c.name, "arguments": c.arguments}} for i, c in enumerate(calls)]


def completion(command_id: str, model: str, created: int, chunks: list[TokenChunk],
               done: Done, want_logprobs: bool) -> dict[str, Any]:
    logprobs = None
    if want_logprobs:
        logprobs = {"content": [lp for c in chunks if (lp := token_logprob(c)) is not None]}
    text = "".join(c.text for c in chunks if not c.reasoning)
    reasoning = "".join(c.text for c in chunks if c.reasoning)
    calls = tuple(call for c in chunks for call in c.tool_calls)
    return {"id": command_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0,
                         "message": {"role": "assistant", "content": text,
                                     "reasoning_content": reasoning or None,
                                     "tool_calls": tool_calls_json(calls) if calls else None},
                         "logprobs": logprobs, "finish_reason": done.finish_reason}],
            "usage": done_usage(done), "service_tier": None}


def done_usage(done: Done) -> dict[str, Any]:
    return usage(done.prompt_tokens, done.completion_tokens, done.cached_tokens,
                 done.accepted_prediction_tokens, done.rejected_prediction_tokens)


def stream_error(message: str, status: int = 500) -> dict[str, Any]:
    """The SSE error event; client errors (400) are upstream's `invalid_request_error`."""
    if status == 400:
        return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": 400}}
    if status == 499:
        return {"error": {"message": message, "type": "cancelled", "param": None, "code": 499}}
    if status == 503:
        return {"error": {"message": message, "type": "ServiceUnavailable", "param": None, "code": 503}}
    return {"error": {"message": message, "type": "InternalServerError", "param": None, "code": 500}}


USAGE: Schema = obj({"prompt_tokens": INTEGER, "completion_tokens": INTEGER, "total_tokens": INTEGER})
CHAT_COMPLETION: Schema = obj({
    "id": STRING, "object": enum("chat.completion"), "created": INTEGER, "model": STRING,
    "choices": array(obj({"index": INTEGER, "message": obj({"role": enum("assistant"), "content": STRING}),
                          "logprobs": nullable(obj({"content": array({"type": "object"})})),
                          "finish_reason": STRING}), min_items=1),
    "usage": USAGE})
"""`completion(...)`: a whole (non-streaming) chat completion."""
GENERATION_STATS: Schema = obj({"prompt_tps": NUMBER, "generation_tps": NUMBER, "prompt_tokens": INTEGER,
                                "generation_tokens": INTEGER,
                                "peak_memory_usage": obj({"inBytes": INTEGER})})
BENCH_COMPLETION: Schema = {**CHAT_COMPLETION, "required": [*CHAT_COMPLETION["required"], "generation_stats"],
                            "properties": {**CHAT_COMPLETION["properties"], "generation_stats": GENERATION_STATS}}
"""`POST /bench/chat/completions`: the completion plus `generation_stats`."""


# ---- the resource -----------------------------------------------------------------------------
class ChatResource:
    def __init__(self, generation: Generation, bench: bool = False) -> None:
        self.generation = generation
        self.bench = bench

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        params = parsed(req, parse)
        if self.bench:  # upstream: always a whole response, with the generation stats
            params = replace(params, stream=False)
        respond(resp, open_stream(self.generation, params), sse, self.whole)

    def whole(self, stream: Stream, chunks: list[TokenChunk], done: Done) -> dict[str, Any]:
        body = completion(stream.command_id, stream.params.model, stream.created, chunks, done,
                          stream.params.logprobs)
        if self.bench:
            body["generation_stats"] = generation_stats(done)
        return body


def sse(stream: Stream) -> Generator[bytes, None, None]:
    cid, model, created = stream.command_id, stream.params.model, stream.created
    yield sse_comment("keep-alive")
    yield sse_comment(f"command_id {cid}")
    for msg in stream:
        if isinstance(msg, KeepAlive):
            yield sse_comment("keep-alive")
        elif isinstance(msg, Progress) and msg.phase == ProgressPhase.PREFILL:
            yield sse_comment("prefill_progress " + json.dumps({"PrefillProgressChunk": {
                "processedTokens": msg.processed, "totalTokens": msg.total}}))
        elif isinstance(msg, TokenChunk):
            yield sse_data(stream_chunk(cid, model, created, msg.text, chunk=msg))
        elif isinstance(msg, Done):
            yield sse_data(stream_chunk(cid, model, created, "", finish_reason=msg.finish_reason,
                                        usage_obj=done_usage(msg)))
            yield sse_comment("generation_stats " + json.dumps(generation_stats(msg)))
            yield DONE
        elif isinstance(msg, Failed):
            yield sse_data(stream_error(msg.error, fail_status(msg.reason)))
            yield DONE
