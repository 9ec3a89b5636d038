"""The chaos soak's clients: threads that each send one streaming chat completion after
another to a node picked at random among those serving, and record what they got and when.

Each request has its own deadline (`deadline_s` from its start) and every read its own socket
timeout, so a request is never waited on forever: one that passes its deadline is recorded
as hung and abandoned.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time

from tools.chaos_checks import RequestRecord

PROMPTS = ("Explain, step by step, why errors should never pass silently.",
           "Write a long story about a fox that runs a cluster of machines.",
           "List every reason a distributed system might lose a message.",
           "ping")


class Hung(Exception):
    """The request passed its own deadline."""


class Targets:
    """The nodes a new request may go to (name -> API port), set by the soak as nodes go and
    come back; clients block on it while it is empty."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ports: dict[str, int] = {}
        self._closed = False

    def set(self, name: str, port: int | None) -> None:
        with self._cond:
            if port is None:
                self._ports.pop(name, None)
            else:
                self._ports[name] = port
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait(self) -> dict[str, int]:
        """The current targets once there are some ({} once closed)."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._ports)
            return {} if self._closed else dict(self._ports)


class Clients:
    """`count` client threads sending to `targets` until stopped."""

    def __init__(self, count: int, model: str, targets: Targets, seed: int,
                 deadline_s: float, max_tokens: tuple[int, int] = (16, 160)) -> None:
        self.model, self.targets, self.deadline_s, self.max_tokens = model, targets, deadline_s, max_tokens
        self.records: list[RequestRecord] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._rngs = [random.Random(seed * 1000 + i) for i in range(count)]
        self._threads = [threading.Thread(target=self._run, args=(i,), name=f"chaos-client-{i}", daemon=True)
                         for i in range(count)]

    def start(self) -> Clients:
        for t in self._threads:
            t.start()
        return self

    def stop(self, timeout: float) -> list[str]:
        """Stop sending; wait (each request has its own deadline) for the threads. The names of
        the threads still alive afterwards (should be none)."""
        self._stop.set()
        self.targets.close()
        end = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))
        return [t.name for t in self._threads if t.is_alive()]

    def snapshot(self) -> list[RequestRecord]:
        with self._lock:
            return list(self.records)

    def _run(self, i: int) -> None:
        rng = self._rngs[i]
        while not self._stop.is_set():
            targets = self.targets.wait()
            if not targets:
                return
            name = rng.choice(sorted(targets))
            rec = RequestRecord(client=i, node=name, started=time.monotonic(),
                                max_tokens=rng.randint(*self.max_tokens))
            with self._lock:
                self.records.append(rec)
            body = {"model": self.model, "max_tokens": rec.max_tokens, "stream": True,
                    "temperature": rng.choice((0.0, 0.7)), "seed": rng.randint(0, 2 ** 31),
                    "messages": [{"role": "user", "content": rng.choice(PROMPTS)}]}
            self._one(rec, targets[name], body)
            rec.ended = time.monotonic()

    def _one(self, rec: RequestRecord, port: int, body: dict[str, object]) -> None:
        deadline = rec.started + self.deadline_s
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=self.deadline_s)
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            _limit(conn, deadline)
            resp = conn.getresponse()
            rec.status = resp.status
            if resp.status != 200:
                _limit(conn, deadline)
                self._envelope(rec, resp.read())
                return
            self._stream(rec, resp, conn, deadline)
        except Hung:
            rec.hung = True
        except TimeoutError:
            rec.hung = True
        except (OSError, http.client.HTTPException) as exc:
            rec.transport, rec.error_type, rec.error = True, type(exc).__name__, str(exc)
            rec.error_at = time.monotonic()
        except ValueError as exc:  # a frame that is not JSON: a protocol error, never retryable
            rec.code, rec.error_type, rec.error = -1, "bad frame", str(exc)
            rec.error_at = time.monotonic()
        finally:
            conn.close()

    def _envelope(self, rec: RequestRecord, raw: bytes) -> None:
        rec.error_at = time.monotonic()
        try:
            err = json.loads(raw)["error"]
            rec.code, rec.error_type, rec.error = int(err["code"]), str(err["type"]), str(err["message"])
        except (ValueError, KeyError, TypeError):
            rec.code, rec.error_type, rec.error = rec.status, "no envelope", raw[:200].decode(errors="replace")
            rec.code = -rec.status  # not the envelope: never retryable

    def _stream(self, rec: RequestRecord, resp: http.client.HTTPResponse, conn: http.client.HTTPConnection,
                deadline: float) -> None:
        while True:
            _limit(conn, deadline)
            line = resp.readline()
            if not line:
                rec.transport, rec.error_type, rec.error = True, "EOF", "stream ended without [DONE]"
                rec.error_at = time.monotonic()
                return
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip()
            if payload == b"[DONE]":
                rec.done = not rec.failed
                return
            obj = json.loads(payload)
            if "error" in obj:
                err = obj["error"]
                rec.code, rec.error_type, rec.error = int(err.get("code") or 0), str(err.get("type")), \
                    str(err.get("message"))
                rec.in_stream, rec.error_at = True, time.monotonic()
                continue
            rec.command_id = rec.command_id or str(obj.get("id") or "")
            if obj.get("choices") and not obj["choices"][0].get("finish_reason"):
                rec.tokens += 1


def _limit(conn: http.client.HTTPConnection, deadline: float) -> None:
    """The next read waits at most until the request's deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise Hung()
    if conn.sock is not None:
        conn.sock.settimeout(left)
