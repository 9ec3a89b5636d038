"""A request's body: its JSON read once and checked before any resource looks at it (size,
depth, integers a wire frame can carry, the number of messages), and what a handler left of it
read after the response, so the connection stays usable (`DrainMiddleware`)."""

from __future__ import annotations

import json
from typing import Any

import falcon

from skulk.services.api.http.errors import http_error
from skulk.services.api.http.limits import too_large
from skulk.wire.schema import INT_MAX as WIRE_INT_MAX
from skulk.wire.schema import INT_MIN as WIRE_INT_MIN

MAX_BODY = 32 * 1024 * 1024
MAX_MESSAGES = 1024
"""Defaults of `api.max_body_mb` and `api.max_messages` (the app puts the node's in `req.context`)."""


def json_body(req: falcon.Request) -> Any:
    """The body as JSON whatever the Content-Type (clients often omit it), size-capped (413, a
    chunked body too: a Content-Length above the cap is refused before, in `limits.py`)."""
    limit = getattr(req.context, "max_body", MAX_BODY)
    if req.content_length is not None and req.content_length > limit:
        raise too_large(limit)
    # a chunked body has no Content-Length: Falcon's bounded stream would read none of it, while
    # the server's own input (gunicorn decodes chunks) ends where the body ends
    raw = (req.bounded_stream if req.content_length is not None else req.stream).read(limit + 1)
    if len(raw) > limit:
        raise too_large(limit)
    if not raw.strip():
        raise http_error(400, "request body is required (JSON)")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise http_error(400, f"malformed JSON body: {exc}") from None
    except RecursionError:  # found by fuzzing: it was a 500
        raise http_error(400, f"JSON body nested deeper than {MAX_DEPTH} levels") from None
    if too_deep(body):
        raise http_error(400, f"JSON body nested deeper than {MAX_DEPTH} levels")
    where = out_of_range(body)
    if where is not None:
        raise http_error(400, f"{where or 'the body'}: integer out of range "
                              f"(must be between {INT_MIN} and {INT_MAX})")
    return body


def check_messages(req: falcon.Request, count: int) -> None:
    """A conversation longer than `api.max_messages` is the client's 400."""
    most = getattr(req.context, "max_messages", MAX_MESSAGES)
    if count > most:
        raise http_error(400, f"messages: {count} messages, at most {most} per request (api.max_messages)")


INT_MIN, INT_MAX = WIRE_INT_MIN, WIRE_INT_MAX
"""What any integer in a request may be: every number ends up in a wire frame, whose decoder
refuses bigger ones (wire/schema.py); here that is the client's 400 naming the field."""
MAX_DEPTH = 64
"""How deeply a JSON body may nest (a chat with tools and schemas needs a dozen levels)."""


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether arrays and objects nest deeper than `limit` (checked without recursion, so the
    checks after it, which recurse, stay far from Python's recursion limit)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def out_of_range(value: Any, path: str = "") -> str | None:
    """The path (`messages[2].max_tokens`) of the first integer beyond 64 bits, or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return path if not INT_MIN <= value <= INT_MAX else None
    if isinstance(value, dict):
        for key, item in value.items():
            if (found := out_of_range(item, f"{path}.{key}" if path else str(key))) is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if (found := out_of_range(item, f"{path}[{i}]")) is not None:
                return found
    return None


class DrainMiddleware:
    """Read what a request's handler left of its body, so its connection stays usable.

    gunicorn sends `Connection: keep-alive`, then drains at most 64 KiB of a body the app did not
    read, and closes the connection if more was left: the client's next request on it (a `GET`
    sent with a large body, a refusal before the body was read) fails with a dropped connection
    (found by fuzzing the HTTP routes). The app cannot say `Connection: close` (gunicorn drops
    hop-by-hop headers), so it reads the rest itself, up to `api.max_body_mb`; a larger body was
    refused by its Content-Length (413) and its connection closes, as it must."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: Any,
                         req_succeeded: bool) -> None:
        length = req.content_length
        if length and length <= self.max_body and not req.bounded_stream.eof:
            try:
                req.bounded_stream.exhaust()
            except OSError:  # the client went away or stalled past the socket's timeout
                pass
