"""Tiny builders for the JSON Schemas (2020-12, as OpenAPI 3.1 uses) that the API declares.

Request schemas live next to the parser that enforces them and response schemas next to the
code that renders them; `routes.py` points at both and `openapi.py` publishes them, so the
document is never a second, hand-kept description of the server (pure).
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
NUMBER: Schema = {"type": "number"}
BOOLEAN: Schema = {"type": "boolean"}
ANY_OBJECT: Schema = {"type": "object"}
TEXT: Schema = {"type": "string", "minLength": 1}
"""A required, non-empty string (a model id)."""


def obj(required: dict[str, Schema] | None = None, optional: dict[str, Schema] | None = None,
        extra: bool = True) -> Schema:
    """An object with these properties; unknown keys are allowed unless `extra` is False
    (clients send many fields the server ignores)."""
    required, optional = required or {}, optional or {}
    schema: Schema = {"type": "object", "properties": {**required, **optional}}
    if required:
        schema["required"] = list(required)
    if not extra:
        schema["additionalProperties"] = False
    return schema


def array(items: Schema, min_items: int = 0) -> Schema:
    schema: Schema = {"type": "array", "items": items}
    if min_items:
        schema["minItems"] = min_items
    return schema


def nullable(schema: Schema) -> Schema:
    """The schema, or JSON null (a field the server treats as absent, or renders as null)."""
    kind = schema.get("type")
    if kind is None and set(schema) == {"enum"}:
        return {"enum": [*schema["enum"], None]}
    if not isinstance(kind, str):
        return {"anyOf": [schema, {"type": "null"}]}
    out = {**schema, "type": [kind, "null"]}
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    return out


def one_of(*schemas: Schema) -> Schema:
    return {"anyOf": list(schemas)}


def enum(*values: Any) -> Schema:
    return {"enum": list(values)}


def ranged(kind: str, lo: float, hi: float) -> Schema:
    """A number or integer in [lo, hi]; null is accepted as "not given", as the parsers do."""
    return {"type": [kind, "null"], "minimum": lo, "maximum": hi}


def map_of(values: Schema) -> Schema:
    """An object keyed by ids (node ids, runner ids, ...)."""
    return {"type": "object", "additionalProperties": values}


def tagged(pattern: str, body: Schema) -> Schema:
    """Upstream's tagged union: one key (matching `pattern`) whose value is the variant."""
    return {"type": "object", "minProperties": 1, "maxProperties": 1,
            "patternProperties": {pattern: body}, "additionalProperties": False}
