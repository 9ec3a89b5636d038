"""The upstream error envelope for every HTTP error:
`{"error": {"message", "type": <reason phrase>, "param": null, "code": <status>}}`."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

import falcon


def envelope(status: int, message: str) -> dict[str, Any]:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return {"error": {"message": message, "type": phrase, "param": None, "code": status}}


def serialize_error(req: falcon.Request, resp: falcon.Response, exc: falcon.HTTPError) -> None:
    """Falcon error serializer: every HTTPError leaves in the envelope, as JSON."""
    status = int(exc.status_code)
    message = exc.description or exc.title or HTTPStatus(status).phrase
    resp.content_type = falcon.MEDIA_JSON
    resp.text = json.dumps(envelope(status, message))


def handle_unexpected(req: falcon.Request, resp: falcon.Response, exc: Exception,
                      params: dict[str, Any]) -> None:
    """Any uncaught exception becomes a 500 in the envelope, never an HTML page or a hang."""
    if isinstance(exc, falcon.HTTPError):
        raise exc
    raise falcon.HTTPInternalServerError(description=f"{type(exc).__name__}: {exc}")
