"""`response_format` to a grammar the runner enforces (pure; no MLX in the API process).

The schema is compiled here (`node/json_grammar.py`), so an unusable schema is a 400 at once;
the runner turns the grammar into a logits processor (`runner/grammar.py`).
"""

from __future__ import annotations

from typing import Any

from skulk.node.json_grammar import GrammarError, json_schema_grammar
from skulk.services.api.http.errors import ApiError


def ollama_format(fmt: Any) -> dict[str, Any] | None:
    """Ollama's `format` (`"json"` or a JSON schema) as a `response_format`."""
    if fmt in (None, ""):
        return None
    if fmt == "json":
        return {"type": "json_object"}
    if isinstance(fmt, dict):
        return {"type": "json_schema", "json_schema": {"schema": fmt}}
    raise ApiError(400, "format must be \"json\" or a JSON schema object")


def responses_format(text: Any) -> dict[str, Any] | None:
    """The Responses API's `text.format` (`{type: json_schema, name, schema}`) as a `response_format`."""
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return fmt if isinstance(fmt, dict) else None
    return {"type": "json_schema", "json_schema": {"schema": fmt.get("schema", {})}}


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
