"""What every generation adapter does the same way: parse the body with its parser, open the
stream (refusals become HTTP errors), then either hand the framework a streaming body or
collect the whole answer and render it; and the framings the streams are written in
(server-sent events: comments, `data:` lines, named events; NDJSON lines). Each adapter
supplies only its parser and renderers."""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterator
from typing import Any

import falcon

from skulk.cluster.state import TaskParams
from skulk.services.api.generate.errors import GenerationError, fail_status
from skulk.services.api.generate.generation import Generation
from skulk.services.api.generate.stream import Stream, collect
from skulk.services.api.http.errors import ApiError, http_error
from skulk.services.api.http.request_body import check_messages, json_body
from skulk.wire.inference import Done, Failed, TokenChunk

SSE_HEADERS = {"Cache-Control": "no-cache", "Connection": "close", "X-Accel-Buffering": "no"}

Whole = Callable[[Stream, list[TokenChunk], Done], Any]
"""Renders a finished answer as the response body."""


def parsed(req: falcon.Request, parser: Callable[[Any], TaskParams]) -> TaskParams:
    try:
        params = parser(json_body(req))
    except ApiError as exc:
        raise http_error(exc.status, exc.message) from None
    check_messages(req, len(params.messages))
    return params


def open_stream(generation: Generation, params: TaskParams) -> Stream:
    """`generation.open` with its refusals as HTTP errors (in the path's client shape)."""
    try:
        return generation.open(params)
    except GenerationError as exc:
        raise http_error(exc.status, exc.message) from None


class StreamBody:
    """The WSGI body of a streamed answer. The server calls `close()` however the response
    ends; closing the `Stream` too does its bookkeeping even when the client left before the
    adapter's first frames reached the stream's own iteration (no generator `finally` ran)."""

    def __init__(self, frames: Generator[bytes, None, None], stream: Stream) -> None:
        self.frames, self.stream = frames, stream

    def __iter__(self) -> Iterator[bytes]:
        return self.frames

    def close(self) -> None:
        try:
            self.frames.close()
        finally:
            self.stream.close()


def respond(resp: falcon.Response, stream: Stream, streamed: Callable[[Stream], Generator[bytes, None, None]],
            whole: Whole, media: str = "text/event-stream") -> None:
    """A streaming body when the request asked for one, else the whole answer (a failure is a
    real HTTP error, never a 200 with an error inside)."""
    if stream.params.stream:
        resp.content_type = media
        if media == "text/event-stream":
            resp.set_headers(SSE_HEADERS)
        resp.stream = StreamBody(streamed(stream), stream)
        return
    chunks, outcome = collect(stream)
    if isinstance(outcome, Failed):
        raise http_error(fail_status(outcome.reason), outcome.error)
    resp.media = whole(stream, chunks, outcome)


# ---- stream framings (pure) -------------------------------------------------------------------
def _json(obj: Any) -> str:
    return obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))


def sse_comment(text: str) -> bytes:
    """A comment line: SDKs ignore it; proxies see traffic (keep-alive, command id, progress)."""
    return f": {text}\n\n".encode()


def sse_data(obj: Any) -> bytes:
    return f"data: {_json(obj)}\n\n".encode()


def sse_event(name: str, obj: Any) -> bytes:
    """A named event (Anthropic Messages, OpenAI Responses): `event:` then `data:`."""
    return f"event: {name}\ndata: {_json(obj)}\n\n".encode()


def ndjson(obj: Any) -> bytes:
    """One JSON object per line (Ollama's streaming)."""
    return (_json(obj) + "\n").encode()
