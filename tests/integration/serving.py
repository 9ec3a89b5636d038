"""Helpers for tests that need a node serving the demo model."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from tests.integration.harness import Node, wait_until
from tests.integration.patience import patience

MODEL = "skulk/demo-tiny"

NO_RESUME = {"api": {"resume": {"max_attempts": 0}}}
"""A node whose API never goes on with a lost stream elsewhere (`api.resume`): for tests of the
error a client gets when its runner or node is lost."""


def http_json(url: str, body: Any = None, method: str | None = None,
              timeout: float | None = None) -> tuple[int, Any]:
    """One JSON request; by default it may take `patience(20)` (a generation of a few dozen
    tokens of the real model on a busy, slow machine)."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=patience(20) if timeout is None else timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def ready_runners(node: Node) -> list[str]:
    _status, state = http_json(f"{node.url}/state")
    return [rid for rid, st in state["runners"].items() if "RunnerReady" in st or "RunnerRunning" in st]


def wait_model_ready(node: Node, timeout: float = 60.0, exclude: tuple[str, ...] = ()) -> str:
    """The runner id once a runner of the node is Ready in `/state` (re-checked on every state
    message on the bus, so a change published before the subscription is still seen)."""
    return wait_until(node, lambda: next((r for r in ready_runners(node) if r not in exclude), None),
                      timeout, "a ready runner")


def sse_events(resp: Any) -> Any:
    """(kind, payload) per SSE frame of an http.client response: ('comment', text) or ('data', obj)."""
    buf = b""
    while True:
        line = resp.readline()
        if not line:
            return
        if line in (b"\n", b"\r\n"):
            if buf.startswith(b": "):
                yield "comment", buf[2:].decode().strip()
            elif buf.startswith(b"data: "):
                payload = buf[6:].decode().strip()
                yield "data", payload if payload == "[DONE]" else json.loads(payload)
            buf = b""
            continue
        buf += line


def abandon_after(conn: Any, path: str, body: dict[str, Any], chunks: int) -> None:
    """Start a streamed request on `conn`, read `chunks` content chunks, then go away (the client
    disconnects mid-stream: its row must leave the batch)."""
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    seen = 0
    for kind, payload in sse_events(conn.getresponse()):
        if kind == "data" and isinstance(payload, dict) and payload.get("choices"):
            seen += 1
            if seen == chunks:
                break
    conn.close()
