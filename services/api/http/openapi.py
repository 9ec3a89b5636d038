"""`GET /api/openapi.json`: the OpenAPI 3.1 document of the whole HTTP surface, generated from
the route table the app itself is built from (`routes.py`), so it cannot drift from the server.

Every operation lists its request body, its 200 body (and the streamed variant's media type
where a request can ask for one), its declared error statuses and a `default` response: any
other status is an error too, always in the path's client shape (`errors.py`).

Who may call it is published too: `securitySchemes` names the two ways to send a key (bearer,
`x-api-key`), and each operation's `security` lists them with the scope its route needs as the
role (`x-skulk-scope` says it plainly; public operations have `security: []`). Operations that
need a key declare 401 (and 403 for admin ones: an inference key, or a remote client of a node
without keys); those with a body 413; those that run a model 429 (`limits.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from http import HTTPStatus
from typing import Any

import falcon

from skulk.node.api_keys import Scope
from skulk.services.api.http.declare import JSON, NDJSON, SSE, Op, Route
from skulk.services.api.http.errors import ERROR_SCHEMAS, error_shape
from skulk.services.api.http.schema import STRING, Schema

ERROR_NAMES = {"openai": "Error", "anthropic": "AnthropicError", "ollama": "OllamaError"}
SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer",
               "description": "an API key from `api.keys` (`Authorization: Bearer <key>`)"},
    "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key",
               "description": "the same key in `x-api-key` (as the Anthropic SDK sends it)"},
}
STREAM_DOCS = {SSE: "server-sent events (the request asked for `stream: true`)",
               NDJSON: "one JSON object per line (Ollama streams unless `stream: false`)"}


def _error_ref(path: str) -> Schema:
    return {"$ref": f"#/components/schemas/{ERROR_NAMES[error_shape(path)]}"}


def _phrase(status: int) -> str:
    if status == 499:
        return "Cancelled (nginx's Client Closed Request)"
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _operation_id(method: str, path: str) -> str:
    """Unique per (method, path): a trailing-slash alias (`/cluster/`) gets its own `_slash` id."""
    slash = "_slash" if len(path) > 1 and path.endswith("/") else ""
    return method.lower() + "_" + (re.sub(r"[^A-Za-z0-9]+", "_", path).strip("_") or "root") + slash


def _statuses(op: Op, scope: Scope) -> tuple[int, ...]:
    """The declared errors plus those of the auth and limits middleware."""
    extra = {Scope.PUBLIC: (), Scope.INFERENCE: (401,), Scope.ADMIN: (401, 403)}[scope]
    extra += (413,) if op.body is not None else ()
    extra += (429,) if op.generation else ()
    return tuple(sorted(set(op.errors) | set(extra)))


def _responses(path: str, op: Op, scope: Scope = Scope.PUBLIC) -> dict[str, Any]:
    ok: dict[str, Any] = {"description": op.summary}
    content: dict[str, Any] = {}
    if op.ok is not None:
        content[op.media] = {"schema": op.ok}
    if op.stream:
        content[op.stream] = {"schema": {**STRING, "description": STREAM_DOCS.get(op.stream, op.stream)}}
    if content:
        ok["content"] = content
    responses: dict[str, Any] = {"200": ok}
    for status, schema in op.other.items():
        responses[str(status)] = {"description": _phrase(status), "content": {JSON: {"schema": schema}}}
    error = {JSON: {"schema": _error_ref(path)}}
    for status in _statuses(op, scope):
        responses[str(status)] = {"description": _phrase(status), "content": error}
    responses["default"] = {"description": "any other error, in the same shape", "content": error}
    return responses


def _parameters(path: str, op: Op) -> list[dict[str, Any]]:
    params = [{"name": name, "in": "path", "required": True, "schema": STRING}
              for name in re.findall(r"{(\w+)}", path)]
    params += [{"name": p.name, "in": "query", "required": p.required, "description": p.doc, "schema": p.schema}
               for p in op.query]
    return params


def operation(path: str, method: str, op: Op, tag: str, scope: Scope = Scope.PUBLIC) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": _operation_id(method, path), "summary": op.summary, "tags": [tag],
                           "x-skulk-scope": scope.value,
                           "security": [] if scope is Scope.PUBLIC else [{name: [scope.value]}
                                                                          for name in SECURITY_SCHEMES]}
    params = _parameters(path, op)
    if params:
        out["parameters"] = params
    if op.body is not None:
        out["requestBody"] = {"required": True, "content": {JSON: {"schema": op.body}}}
    out["responses"] = _responses(path, op, scope)
    return out


def document(routes: Iterable[Route], version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of `routes` (every alias is its own path, as clients call it)."""
    paths: dict[str, Any] = {}
    for route in routes:
        for path in route.paths:
            paths[path] = {method.lower(): operation(path, method, op, route.tag, route.scope)
                           for method, op in route.ops.items()}
    return {"openapi": "3.1.0",
            "info": {"title": "Skulk", "version": version,
                     "description": "One node's HTTP API: OpenAI-, Anthropic- and Ollama-compatible "
                                    "inference plus the cluster's state, placement and admin."},
            "paths": paths,
            "components": {"schemas": {ERROR_NAMES[shape]: schema for shape, schema in ERROR_SCHEMAS.items()},
                           "securitySchemes": SECURITY_SCHEMES}}


OPENAPI: Schema = {"type": "object", "required": ["openapi", "info", "paths"],
                   "properties": {"openapi": STRING, "info": {"type": "object"}, "paths": {"type": "object"}}}


class OpenApiResource:
    """Serves the document, built once per worker from the table the worker serves."""

    def __init__(self, routes: Iterable[Route], version: str) -> None:
        self.document = document(routes, version)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.document
