"""Limits on what a client controls, on a real node serving the demo model: a body over
`api.max_body_mb` is a 413 (declared or chunked), more than `api.max_messages` messages a 400,
`max_tokens` or a prompt beyond the model's context a 400, an oversized request line or header
a 414/431 at once (no hang) and a malformed request a 400, in the error envelope though gunicorn
answers them itself (`services/api/http/gunicorn_worker.py`), never echoing a key; concurrent generations per
key are counted across the API's two workers (429 with Retry-After beyond
`api.max_streams_per_key`); and a client that sends a streaming request and never reads has its
generation cancelled at the runner within `api.write_timeout_s` of its buffers filling: the
runner's batch frees the slot long before the answer's 1900 tokens."""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any

from skulk.wire.events import RunnerReport
from skulk.wire.topics import EVT_RUNNER
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import BusWatcher, Node, wait_until
from tests.integration.patience import patience
from tests.integration.serving import MODEL, sse_events, wait_model_ready

KEY_A, KEY_B = "sk-limits-a-0123456789abcdef", "sk-limits-b-0123456789abcdef"


def chat(n: int = 2, stream: bool = False, messages: int = 1, content: str = "Tell me a long story.") -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": n, "temperature": 0, "stream": stream,  # greedy: no early EOS
            "messages": [{"role": "user", "content": content}] * messages}


def post(node: Node, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", node.api_port, timeout=60)
    try:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, raw, {"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        text = resp.read()
        return resp.status, json.loads(text) if text else None, {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def raw_exchange(node: Node, request: bytes) -> bytes:
    """Send bytes (the server may answer and stop reading before the end), then read the answer
    until the server closes (bounded by the socket timeout)."""
    with socket.create_connection(("127.0.0.1", node.api_port), timeout=10) as s:
        try:
            s.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
        return out


def test_bodies_messages_context_and_headers(nodes, demo_model):
    node = nodes(config={"api": {"max_body_mb": 1, "max_messages": 4}}, args=("--place", MODEL),
                 models={DEMO_DIR: demo_model})
    wait_model_ready(node)
    big = json.dumps({**chat(), "padding": "x" * (1 << 20)}).encode()
    status, body, _ = post(node, "/v1/chat/completions", big)
    assert status == 413 and body["error"]["code"] == 413 and "api.max_body_mb" in body["error"]["message"]
    status, body, _ = post(node, "/v1/messages", big)
    assert status == 413 and body["error"]["type"] == "request_too_large"  # Anthropic's shape
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (big[:1000], big[1000:])) + b"0\r\n\r\n"
    answer = raw_exchange(node, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                b"Transfer-Encoding: chunked\r\n\r\n" + chunked)  # no Content-Length
    assert answer.startswith(b"HTTP/1.1 413") and b'"code": 413' in answer, answer[:300]
    small = json.dumps(chat()).encode()  # a chunked body within the limit is read whole
    answer = raw_exchange(node, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(small), small))
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]

    status, body, _ = post(node, "/v1/chat/completions", chat(messages=5))
    assert status == 400 and "at most 4" in body["error"]["message"] and "api.max_messages" in body["error"]["message"]
    status, body, _ = post(node, "/v1/chat/completions", chat(messages=4))
    assert status == 200 and body["usage"]["completion_tokens"] == 2
    status, body, _ = post(node, "/v1/chat/completions", {**chat(), "max_tokens": 10_000_000})
    assert status == 400 and "context" in body["error"]["message"]
    status, body, _ = post(node, "/v1/chat/completions", chat(content="story " * 5000))  # > 2048 tokens
    assert status == 400 and "context" in body["error"]["message"].lower()
    status, body, _ = post(node, "/v1/chat/completions", {**chat(), "max_tokens": 10 ** 30})
    assert status == 400 and "max_tokens" in body["error"]["message"]

    started = time.monotonic()  # gunicorn's own refusals, before the app: the envelope, at once
    for request, status, words in (
            (b"GET /health?" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, ("8190", "limit_request_line")),
            (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n", 431,
             ("8190", "limit_request_field_size")),
            (b"GET /health HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(101)) + b"\r\n", 431,
             ("100", "limit_request_fields")),
            (b"garbage\r\n\r\n", 400, ("request line",)),
            (b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization Bearer " + KEY_A.encode() + b"\r\n\r\n", 400,
             ("header",)),
            (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n"
             b"0\r\n\r\n", 400, ("chunk size",))):  # found by the app while reading the body
        answer = raw_exchange(node, request)
        head, _, text = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 %d " % status), answer[:300]
        assert b"content-type: application/json" in head.lower(), answer[:300]
        error = json.loads(text)["error"]
        assert error["code"] == status and all(w in error["message"] for w in words), error
        assert KEY_A.encode() not in answer
    assert time.monotonic() - started < patience(10)  # at once: no read waits out a client's timeout
    assert KEY_A not in node.log_path.read_text()  # gunicorn's WARNING quoted the malformed line
    health = http.client.HTTPConnection("127.0.0.1", node.api_port, timeout=10)
    health.request("GET", "/health")
    assert health.getresponse().status == 200  # the worker survived
    health.close()
    assert post(node, "/v1/chat/completions", chat())[0] == 200  # still serving


def test_concurrent_streams_per_key_across_workers(nodes, demo_model):
    node = nodes(config={"api": {"workers": 2, "max_streams_per_key": 2, "keys": [
        {"name": "a", "scope": "inference", "key": KEY_A}, {"name": "b", "scope": "inference", "key": KEY_B}]}},
        args=("--place", MODEL), models={DEMO_DIR: demo_model})
    wait_serving(node)
    open_streams = []
    try:
        for _ in range(2):
            conn, events = stream(node, KEY_A)
            open_streams.append(conn)
            next(p for kind, p in events if kind == "data")  # generating now
        status, body, headers = post(node, "/v1/chat/completions", chat(stream=True),
                                     {"Authorization": f"Bearer {KEY_A}"})
        assert status == 429 and headers["retry-after"] == "1", body
        assert "'a'" in body["error"]["message"] and "api.max_streams_per_key" in body["error"]["message"]
        assert post(node, "/v1/chat/completions", chat(), {"Authorization": f"Bearer {KEY_B}"})[0] == 200
        open_streams.pop().close()  # the server notices at its next write and frees the slot
        wait_until(node, lambda: post(node, "/v1/chat/completions", chat(),
                                      {"Authorization": f"Bearer {KEY_A}"})[0] == 200, 30, "a freed slot")
    finally:
        for conn in open_streams:
            conn.close()


def wait_serving(node: Node) -> None:
    """Wait for the runner on a keyed node (the shared helper reads /state without a key)."""
    def ready() -> bool:
        status, _, _ = post(node, "/v1/chat/completions", chat(1), {"Authorization": f"Bearer {KEY_B}"})
        return status == 200

    wait_until(node, ready, 60, "the model serving")


def stream(node: Node, key: str) -> tuple[http.client.HTTPConnection, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", node.api_port, timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps(chat(1900, stream=True)),
                 {"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    resp = conn.getresponse()
    assert resp.status == 200
    return conn, sse_events(resp)


def test_a_client_that_never_reads_frees_its_batch_slot(nodes, demo_model):
    node = nodes(config={"api": {"write_timeout_s": 2}}, args=("--place", MODEL), models={DEMO_DIR: demo_model})
    wait_model_ready(node)
    watcher = BusWatcher(node, EVT_RUNNER.prefix)
    body = json.dumps(chat(1900, stream=True)).encode()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    try:
        client.connect(("127.0.0.1", node.api_port))
        client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(body) + body)  # and never read
        busy = watcher.wait_for(lambda m: isinstance(m, RunnerReport) and m.active == 1, 30)
        started = time.monotonic()
        freed = watcher.wait_for(lambda m: isinstance(m, RunnerReport) and m.active == 0, 30)
        assert time.monotonic() - started < patience(20)
        assert freed.tokens_total - busy.tokens_total < 1800, "the generation ran to its end for nobody"
    finally:
        client.close()
        watcher.close()
    log = node.log_path.read_text()
    assert "the client read nothing for 2 s" in log and "client gone, cancelling" in log
