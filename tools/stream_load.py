"""Concurrent chat-completion clients for failure tests and benchmarks: each client thread
sends one request (streaming or not) and records what it got and when, so a caller can inject
a fault once every stream is producing and then check that each client got its answer or its
error, and how long after the fault. Every read has a socket timeout: a hung stream is
recorded as `hung`, never waited on forever."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Outcome:
    tokens: int = 0
    status: int = 0
    done: bool = False  # `[DONE]` seen (streaming) or a whole body read (non-streaming)
    finish_reason: str | None = None
    error: str | None = None
    error_at: float | None = None  # monotonic time the error reached the client
    hung: bool = False  # the socket timeout fired: the server left this client waiting
    ended_at: float | None = None


def chat_body(model: str, prompt: str, max_tokens: int, stream: bool = True) -> dict[str, Any]:
    """A long greedy request (temperature 0: the demo model does not stop early)."""
    return {"model": model, "max_tokens": max_tokens, "stream": stream, "temperature": 0,
            "messages": [{"role": "user", "content": prompt}]}


class StreamLoad:
    def __init__(self, host: str, port: int, bodies: list[dict[str, Any]], read_timeout: float = 60.0) -> None:
        self.host, self.port, self.read_timeout = host, port, read_timeout
        self.bodies = bodies
        self.outcomes = [Outcome() for _ in bodies]
        self._cond = threading.Condition()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                         for i in range(len(bodies))]

    def start(self) -> StreamLoad:
        for t in self._threads:
            t.start()
        return self

    def wait_for(self, check: Callable[[list[Outcome]], bool], timeout: float) -> bool:
        """True once `check(outcomes)` holds (re-checked on every client event), else False."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not check(self.outcomes):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def join(self, timeout: float) -> list[Outcome]:
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        for t, o in zip(self._threads, self.outcomes):
            if t.is_alive():
                o.hung = True
        return self.outcomes

    def _note(self, i: int, **changes: Any) -> None:
        with self._cond:
            for k, v in changes.items():
                setattr(self.outcomes[i], k, v)
            self._cond.notify_all()

    def _client(self, i: int) -> None:
        body = self.bodies[i]
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.read_timeout)
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            self._note(i, status=resp.status)
            if body.get("stream") and resp.status == 200:
                self._read_stream(i, resp)
            else:
                data = json.loads(resp.read() or b"null")
                if isinstance(data, dict) and "error" in data:
                    self._note(i, error=data["error"]["message"], error_at=time.monotonic())
                else:
                    choice = data["choices"][0]
                    self._note(i, tokens=data["usage"]["completion_tokens"], done=True,
                               finish_reason=choice["finish_reason"])
        except TimeoutError:
            self._note(i, hung=True)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            self._note(i, error=f"client: {exc!r}", error_at=time.monotonic())
        finally:
            conn.close()
            self._note(i, ended_at=time.monotonic())

    def _read_stream(self, i: int, resp: http.client.HTTPResponse) -> None:
        for line in resp:
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip()
            if payload == b"[DONE]":
                self._note(i, done=True)
                return
            obj = json.loads(payload)
            if "error" in obj:
                self._note(i, error=obj["error"]["message"], error_at=time.monotonic())
                continue
            choice = obj["choices"][0]
            with self._cond:
                out = self.outcomes[i]
                if choice.get("finish_reason"):
                    out.finish_reason = choice["finish_reason"]
                else:  # one chunk per token (its text may be empty while a character is incomplete)
                    out.tokens += 1
                self._cond.notify_all()


def summary(outcomes: list[Outcome], fault_at: float | None = None) -> str:
    """One line per client: tokens, how it ended, seconds from the fault to its error."""
    lines = []
    for n, o in enumerate(outcomes):
        after = f" {o.error_at - fault_at:.3f}s after the fault" if fault_at and o.error_at else ""
        how = "HUNG" if o.hung else (f"error{after}: {o.error}" if o.error else f"done ({o.finish_reason})")
        lines.append(f"  client {n}: {o.tokens} tokens, {how}")
    return "\n".join(lines)
