"""Parse and validate a `/v1/chat/completions` body into TaskParams (pure).

Unknown extra fields are ignored (OpenAI clients send many); known fields of the wrong type
are a 400 naming the field. The context check needs the served model's limit, so it is a
separate step (`check_context`).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from skulk.wire.state import ChatMessage, TaskParams

DEFAULT_MAX_TOKENS = int(os.environ.get("SKULK_MAX_OUTPUT_TOKENS", "4096"))
ROLES = {"system", "developer", "user", "assistant", "tool"}


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


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


def parse(body: Any) -> TaskParams:
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "model is required (a string)")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list):
        raise ApiError(400, "messages is required (a list)")
    messages = []
    for i, m in enumerate(raw_messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ApiError(400, f"messages[{i}] needs a role in {sorted(ROLES)}")
        messages.append(ChatMessage(role=m["role"], content=_content(m.get("content"), i)))
    if not any(m.content for m in messages):
        raise ApiError(400, "the request has no content to generate from "
                            "(messages / input must contain a non-empty message)")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens <= 0):
        raise ApiError(400, "max_tokens (max_output_tokens) must be a positive integer")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) for s in stop)):
        raise ApiError(400, "stop must be a string or a list of strings")
    stream = body.get("stream", False)
    logprobs = body.get("logprobs", False)
    for name, value in (("stream", stream), ("logprobs", logprobs)):
        if not isinstance(value, bool):
            raise ApiError(400, f"{name} must be a boolean")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not -2**63 <= seed < 2**63):
        raise ApiError(400, "seed must be an integer between -2**63 and 2**63 - 1")
    return TaskParams(
        model=model, messages=tuple(messages), max_tokens=max_tokens or 0, stream=stream,
        temperature=_number(body, "temperature", 0.0, 2.0), top_p=_number(body, "top_p", 0.0, 1.0),
        top_k=_int(body, "top_k", 0, 1_000_000), min_p=_number(body, "min_p", 0.0, 1.0),
        stop=tuple(stop or ()), seed=seed, logprobs=logprobs,
        top_logprobs=_int(body, "top_logprobs", 0, 20) or 0)


def check_context(params: TaskParams, context_limit: int) -> TaskParams:
    """Fill the default output budget, or refuse a max_tokens the model cannot hold."""
    if params.max_tokens == 0:
        budget = min(DEFAULT_MAX_TOKENS, context_limit) if context_limit > 0 else DEFAULT_MAX_TOKENS
        return replace(params, max_tokens=max(1, budget))
    if context_limit > 0 and params.max_tokens > context_limit:
        raise ApiError(400, f"context_length_exceeded: max_tokens ({params.max_tokens}) cannot fit "
                            f"within this model's usable context limit of {context_limit} tokens; "
                            "lower max_tokens or place the model with more memory")
    return params

