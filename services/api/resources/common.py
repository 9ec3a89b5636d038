"""Helpers every resource shares: reading a JSON body and turning replies into HTTP errors."""

from __future__ import annotations

import json
from typing import Any

import falcon

from skulk.services.api.chat_request import ApiError
from skulk.services.api.gateway import Gateway, MasterUnavailable
from skulk.wire.replica import StateReplica
from skulk.wire.commands import CommandRejected, Reply
from skulk.wire.message import Message
from skulk.wire.state import State

def http_error(status: int, message: str) -> falcon.HTTPError:
    """An HTTP error with its status as given (499: the command was cancelled, nginx's code)."""
    return falcon.HTTPError(status if 400 <= status < 600 else 500, description=message)


MAX_BODY = 32 * 1024 * 1024


def json_body(req: falcon.Request) -> Any:
    """The body as JSON whatever the Content-Type (clients often omit it), size-capped."""
    if req.content_length is not None and req.content_length > MAX_BODY:
        raise http_error(400, f"request body larger than {MAX_BODY} bytes")
    raw = req.bounded_stream.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise http_error(400, f"request body larger than {MAX_BODY} bytes")
    if not raw.strip():
        raise http_error(400, "request body is required (JSON)")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise http_error(400, f"malformed JSON body: {exc}") from None


def state_or_503(replica: StateReplica, timeout: float = 5.0) -> State:
    state = replica.get(timeout)
    if state is None:
        raise http_error(503, "cluster state is not available yet (the master is starting); retry shortly")
    return state


def ask(gateway: Gateway, cmd: Message) -> Reply:
    """The master's reply, a rejection included (the caller decides on its `reason`)."""
    try:
        return gateway.command(cmd)
    except MasterUnavailable as exc:
        raise http_error(503, str(exc)) from None


def command(gateway: Gateway, cmd: Message) -> Reply:
    """The master's acceptance; a rejection becomes its HTTP error."""
    reply = ask(gateway, cmd)
    if isinstance(reply, CommandRejected):
        raise http_error(reply.status, reply.message)
    return reply


def raise_api_error(exc: ApiError) -> None:
    raise http_error(exc.status, exc.message) from None
