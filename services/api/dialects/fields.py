"""The request fields several client shapes share, their checkers and their schemas (pure).

One checker per field, so a field reads and fails the same way in every dialect: known fields of
the wrong type are a 400 naming the field (unknown extras are ignored; clients send many). Each
client shape's own parser and schemas live in its module (`openai_chat.parse`, ...).
"""

from __future__ import annotations

from typing import Any

from skulk.cluster.state import ChatMessage
from skulk.node.json_grammar import GrammarError, json_schema_grammar
from skulk.services.api.http.errors import ApiError
from skulk.services.api.http.schema import BOOLEAN, STRING, Schema, array, enum, nullable, obj, one_of, ranged


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


def grammar_of(response_format: Any) -> str:
    """The llguidance grammar of an OpenAI `response_format` (a 400 when unusable):
    `json_schema` constrains to its schema, `json_object` to any JSON object, `text` to nothing."""
    if response_format is None:
        return ""
    if not isinstance(response_format, dict):
        raise ApiError(400, "response_format must be an object")
    kind = response_format.get("type")
    if kind == "text":
        return ""
    if kind == "json_object":
        schema: Any = {"type": "object"}
    elif kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise ApiError(400, "response_format.json_schema must be an object with a `schema` object")
        schema = spec.get("schema", {})
    else:
        raise ApiError(400, "response_format.type must be 'text', 'json_object' or 'json_schema'")
    try:
        return json_schema_grammar(schema)
    except GrammarError as exc:
        raise ApiError(400, f"response_format: the JSON schema cannot be used: {exc}") from None
