"""`GET /events`: this node's event log in upstream's shape, a JSON array of tagged events
(`[{"TaskCreated": {...}}, ...]`, snake_case inside), oldest first, the newest `limit` (1000;
at most 100,000). Reads the archives and the active file; a torn or corrupt tail (a kill or
a power loss mid-write) is skipped, never an error."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import falcon

from skulk.cluster.state import IndexedEvent
from skulk.node.eventlog_files import iter_records, log_files
from skulk.services.api.http.errors import http_error
from skulk.services.api.http.schema import ANY_OBJECT, Schema, array
from skulk.wire.codec import decode
from skulk.wire.errors import WireError
from skulk.wire.message import Message
from skulk.wire.schema import to_plain

DEFAULT_LIMIT = 1000
MAX_LIMIT = 100_000


def _plain(value: Any) -> Any:
    """A message's fields without the codec's envelopes (nested messages too)."""
    if isinstance(value, dict) and {"t", "v", "b"} <= value.keys():
        return _plain(value["b"])
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


def tagged(msg: Message, when: float) -> dict[str, Any]:
    if isinstance(msg, IndexedEvent):
        body = {**_plain(to_plain(msg.event)), "event_id": msg.idx, "session": msg.session, "at": when}
        return {type(msg.event).__name__: body}
    fields = _plain(to_plain(msg))  # the API's records carry their own time (`at`): they reach the log in groups
    return {type(msg).__name__: {**fields, "at": fields.get("at") or when}}


class EventsResource:
    def __init__(self, home: Path) -> None:
        self.dir = home / "eventlog"

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        limit = req.get_param_as_int("limit")
        limit = DEFAULT_LIMIT if limit is None else limit
        if not 1 <= limit <= MAX_LIMIT:
            raise http_error(400, f"limit must be between 1 and {MAX_LIMIT}")
        newest: list[dict[str, Any]] = []
        for path in reversed(log_files(self.dir)):  # newest file first, until enough
            chunk: deque[dict[str, Any]] = deque(maxlen=limit - len(newest))  # memory: the page only
            for when, _topic, payload in iter_records(path):
                try:
                    chunk.append(tagged(decode(payload), when))
                except WireError:
                    continue  # a record of a message this build does not know
            newest = [*chunk, *newest]
            if len(newest) >= limit:
                break
        resp.media = newest


EVENTS: Schema = array(ANY_OBJECT)
