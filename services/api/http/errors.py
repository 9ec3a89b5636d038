"""Every HTTP error leaves in its client's shape: upstream's envelope
`{"error": {"message", "type": <reason phrase>, "param": null, "code": <status>}}` everywhere,
Anthropic's `{"type": "error", "error": {"type", "message"}}` under `/v1/messages` and
Ollama's `{"error": <message>}` under `/api/` and `/ollama/`, so each SDK raises its own
error types. The shape is chosen by path, in this one place (docs/architecture.md,
"Compatibility with upstream Skulk")."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

import falcon

from skulk.services.api.http.schema import INTEGER, STRING, Schema, enum, obj


class ApiError(Exception):
    """A request the API refuses before doing anything: its status and the message for people."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def envelope(status: int, message: str) -> dict[str, Any]:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return {"error": {"message": message, "type": phrase, "param": None, "code": status}}


ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                   503: "overloaded_error", 529: "overloaded_error"}


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}


def error_shape(path: str) -> str:
    """Which client's error shape a path answers with: "anthropic", "ollama" or "openai"."""
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith(("/api/", "/ollama/")):
        return "ollama"
    return "openai"


def error_body(path: str, status: int, message: str) -> dict[str, Any]:
    shape = error_shape(path)
    if shape == "anthropic":
        return anthropic_error(status, message)
    if shape == "ollama":
        return {"error": message}
    return envelope(status, message)


ERROR_SCHEMAS: dict[str, Schema] = {
    "openai": obj({"error": obj({"message": STRING, "type": STRING, "param": {"type": "null"},
                                 "code": INTEGER})}),
    "anthropic": obj({"type": enum("error"), "error": obj({"type": STRING, "message": STRING})}),
    "ollama": obj({"error": STRING}),
}
"""The body of an HTTP error in each shape (`error_shape`), published in the OpenAPI document."""


def serialize_error(req: falcon.Request, resp: falcon.Response, exc: falcon.HTTPError) -> None:
    """Falcon error serializer: every HTTPError leaves as JSON in its client's shape."""
    status = int(exc.status_code)
    message = exc.description or exc.title or HTTPStatus(status).phrase
    resp.content_type = falcon.MEDIA_JSON
    resp.text = json.dumps(error_body(req.path, status, message))


def handle_unexpected(req: falcon.Request, resp: falcon.Response, exc: Exception,
                      params: dict[str, Any]) -> None:
    """Any uncaught exception becomes a 500 in the envelope, never an HTML page or a hang; but a
    body gunicorn refuses while the app reads it (a malformed chunked body) is the client's 400,
    as gunicorn's refusals before the app are (`gunicorn_worker.py`), and quotes none of its bytes."""
    if isinstance(exc, falcon.HTTPError):
        raise exc
    from skulk.services.api.http.gunicorn_worker import refusal  # here: that module imports this one
    from skulk.services.api.http.limits import HEADER_LIMITS
    refused = refusal(exc, HEADER_LIMITS)
    if refused is not None:
        raise falcon.HTTPError(refused[0], description=refused[1])
    raise falcon.HTTPInternalServerError(description=f"{type(exc).__name__}: {exc}")


def http_error(status: int, message: str) -> falcon.HTTPError:
    """An HTTP error with its status as given (499: the command was cancelled, nginx's code)."""
    return falcon.HTTPError(status if 400 <= status < 600 else 500, description=message)
