"""Server-sent events framing (pure): comments, `data:` lines, named events, NDJSON lines."""

from __future__ import annotations

import json
from typing import Any


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
