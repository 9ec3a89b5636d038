"""Parse and validate a `/v1/chat/completions` body into TaskParams (pure).

Unknown extra fields are ignored (OpenAI clients send many); known fields of the wrong type
are a 400 naming the field. The context check needs the served model's limit: it is the
generation path's (`generation.context_checked`). The field checkers are shared by every
adapter.
"""

from __future__ import annotations

import os
from typing import Any

from skulk.cluster.state import ChatMessage, TaskParams
from skulk.services.api.dialects.response_format import grammar_of
from skulk.services.api.dialects.tools import EFFORTS, calls_of, thinking_of, tool_result_of, tools_of
from skulk.services.api.http.errors import ApiError
from skulk.services.api.http.schema import BOOLEAN, STRING, TEXT, Schema, array, enum, nullable, obj, one_of, ranged

DEFAULT_MAX_TOKENS = int(os.environ.get("SKULK_MAX_OUTPUT_TOKENS", "4096"))
ROLES = ("assistant", "developer", "system", "tool", "user")  # a tuple: `[] in ROLES` is False, not a TypeError


def _number(body: dict[str, Any], name: str, lo: float, hi: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"{name} must be a number")
    if not lo <= value <= hi:
        raise ApiError(400, f"{name} must be between {lo:g} and {hi:g}")
    return float(value)


def _int(body: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ApiError(400, f"{name} must be an integer between {lo} and {hi}")
    return value


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


def require_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body


def model_of(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "model is required (a string)")
    return model


def max_tokens_of(body: dict[str, Any], *names: str) -> int:
    """The first of `names` present: a positive integer, or 0 for the default budget."""
    value = next((body[n] for n in names if body.get(n) is not None), None)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise ApiError(400, "max_tokens (max_output_tokens) must be a positive integer")
    return value or 0


def stops_of(body: dict[str, Any], name: str = "stop") -> tuple[str, ...]:
    stop = body.get(name)
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) for s in stop)):
        raise ApiError(400, f"{name} must be a string or a list of strings")
    return tuple(stop or ())


def flag(body: dict[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be a boolean")
    return value


def seed_of(body: dict[str, Any]) -> int | None:
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not -2**63 <= seed < 2**63):
        raise ApiError(400, "seed must be an integer between -2**63 and 2**63 - 1")
    return seed


def sampling(body: dict[str, Any]) -> dict[str, Any]:
    """The sampling fields every shape shares, checked (TaskParams keyword arguments)."""
    return {"temperature": _number(body, "temperature", 0.0, 2.0), "top_p": _number(body, "top_p", 0.0, 1.0),
            "top_k": _int(body, "top_k", 0, 1_000_000), "min_p": _number(body, "min_p", 0.0, 1.0),
            "seed": seed_of(body)}


def require_content(messages: list[ChatMessage] | tuple[ChatMessage, ...]) -> None:
    if not any(m.content for m in messages):
        raise ApiError(400, "the request has no content to generate from "
                            "(messages / input must contain a non-empty message)")


def message_list(body: dict[str, Any]) -> list[Any]:
    raw = body.get("messages")
    if not isinstance(raw, list):
        raise ApiError(400, "messages is required (a list)")
    return raw


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


# ---- the schemas these checks enforce (published in /api/openapi.json via routes.py) ----------
POSITIVE: Schema = nullable({"type": "integer", "minimum": 1})
"""An output budget: a positive integer, or null for the default (`max_tokens_of`)."""
FLAG: Schema = nullable(BOOLEAN)
STOPS: Schema = nullable(one_of(STRING, array(STRING)))
SAMPLING: dict[str, Schema] = {
    "temperature": ranged("number", 0, 2), "top_p": ranged("number", 0, 1),
    "top_k": ranged("integer", 0, 1_000_000), "min_p": ranged("number", 0, 1),
    "seed": ranged("integer", -2**63, 2**63 - 1)}
TEXT_PART: Schema = obj({"type": enum("text"), "text": STRING})
RESPONSE_FORMAT: Schema = nullable({
    **obj({"type": enum("text", "json_object", "json_schema")},
          {"json_schema": obj({}, {"schema": {"type": "object"}})}),
    "if": {"properties": {"type": {"const": "json_schema"}}},
    "then": {"required": ["json_schema"]}})
"""`response_format` (`response_format.grammar_of`); a schema llguidance cannot compile is a 400 too."""

TOOLS: Schema = nullable(array(obj({"function": obj({"name": TEXT},
                                                    {"parameters": {"description": "a JSON schema of the arguments"}})},
                                   {"type": {"description": "\"function\""}})))
"""`tools` (`tools_request.tools_of`)."""
TOOL_CALLS: Schema = nullable(array(obj({"function": obj({"name": STRING}, {"arguments": {}})},
                                        {"id": {}, "type": {}})))
"""An assistant message's `tool_calls` given back (`tools_request.calls_of`)."""
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
