"""What the API's gunicorn worker answers for a request gunicorn refuses while parsing it
(`services/api/http/gunicorn_worker.py`): the exceptions come from gunicorn's own parser fed real bytes (so a
gunicorn that words its limits differently fails here), each maps to its status and a message
naming the limit, the answer is a whole HTTP response carrying the envelope, and nothing the
client sent (a key in a malformed header line) is ever echoed or logged; a chunked body gunicorn
refuses while the app reads it is the client's 400 too (`errors.handle_unexpected`)."""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace
from typing import Any

import falcon
import falcon.testing
import pytest
from gunicorn.config import Config
from gunicorn.http import errors as g
from gunicorn.http.parser import RequestParser

from skulk.services.api.http.errors import handle_unexpected, serialize_error
from skulk.services.api.http.gunicorn_worker import EnvelopeWorker, refusal, response
from skulk.services.api.http.limits import HEADER_LIMITS

SECRET = "sk-never-echo-0123456789abcdef"


def config() -> Config:
    cfg = Config()
    for key, value in HEADER_LIMITS.items():
        cfg.set(key, value)
    return cfg


def parse_error(data: bytes) -> Exception:
    try:
        req = next(RequestParser(config(), iter([data]), ("127.0.0.1", 1)))
        req.body.read()
    except Exception as exc:  # what gunicorn's worker hands to handle_error
        return exc
    raise AssertionError(f"gunicorn accepted {data[:60]!r}")


MANY = b"".join(b"X-H%d: v\r\n" % i for i in range(101))


@pytest.mark.parametrize("data, status, words", [
    (b"GET /health?" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 414, ("8190", "limit_request_line")),
    (b"GET / HTTP/1.1\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n", 431, ("8190", "limit_request_field_size")),
    (b"GET / HTTP/1.1\r\n" + MANY + b"\r\n", 431, ("at most 100 fields", "limit_request_fields")),
    (b"hello there\r\n\r\n", 400, ("request line",)),
    (b"G@T / HTTP/1.1\r\n\r\n", 400, ("method",)),
    (b"GET / HTTP/9.9\r\n\r\n", 400, ("HTTP version",)),
    (b"GET / HTTP/1.1\r\nAuthorization Bearer " + SECRET.encode() + b"\r\n\r\n", 400, ("header field",)),
    (b"GET / HTTP/1.1\r\nX\x01: a\r\n\r\n", 400, ("header field name",)),
    (b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400, ("Content-Length",)),
    (b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 400, ("line folding",)),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 400, ("chunk size",)),
    (b"GET / HTTP/1.1\r\nExpect: " + SECRET.encode() + b"\r\n\r\n", 417, ("Expect",)),
])
def test_gunicorns_parse_errors_map_to_a_status_and_a_message_naming_the_limit(data, status, words):
    exc = parse_error(data)
    answer = refusal(exc, HEADER_LIMITS)
    assert answer is not None and answer[0] == status, (type(exc).__name__, answer)
    assert all(w in answer[1] for w in words), answer
    assert SECRET not in answer[1]


@pytest.mark.parametrize("exc, status", [
    (g.LimitRequestHeaders("max buffer headers"), 431), (g.LimitRequestHeaders("Too many headers"), 431),
    (g.LimitRequestHeaders("Request header field is too large"), 431), (g.InvalidChunkExtension("x"), 400),
    (g.ChunkMissingTerminator(b"xx"), 400), (g.UnsupportedTransferCoding("gzip"), 501),
    (g.InvalidSchemeHeaders(), 400), (g.InvalidProxyLine("x"), 400), (g.ParseException(), 400),
])
def test_every_refusal_has_a_status(exc, status):
    answer = refusal(exc, HEADER_LIMITS)
    assert answer is not None and answer[0] == status and answer[1]
    if status == 431:
        assert "limit_request_field" in answer[1]


@pytest.mark.parametrize("exc", [ValueError("boom"), g.InvalidResponseHeader("X-Bad"),
                                 g.InvalidResponseHeaderName("X Bad"), g.ConfigurationProblem("x"), OSError()])
def test_anything_else_stays_gunicorns(exc):
    assert refusal(exc, HEADER_LIMITS) is None


def test_the_response_is_whole_http_with_the_envelope():
    raw = response(431, "more than 100 header fields (limit_request_fields)")
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 431 Request Header Fields Too Large"
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert headers == {"Connection": "close", "Content-Type": "application/json", "Content-Length": str(len(body))}
    assert json.loads(body) == {"error": {"message": "more than 100 header fields (limit_request_fields)",
                                          "type": "Request Header Fields Too Large", "param": None, "code": 431}}


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __getattr__(self, level: str) -> Any:
        return lambda msg, *args, **_: self.lines.append(f"{level}: {msg % args if args else msg}")


def test_handle_error_writes_the_envelope_logs_quietly_and_never_raises():
    worker: Any = SimpleNamespace(cfg=config(), log=Log())
    exc = parse_error(b"GET / HTTP/1.1\r\nAuthorization Bearer " + SECRET.encode() + b"\r\n\r\n")
    ours, theirs = socket.socketpair()
    with ours, theirs:
        EnvelopeWorker.handle_error(worker, None, ours, ("127.0.0.1", 5), exc)
        ours.close()
        answer = theirs.recv(65536)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n") and SECRET.encode() not in answer
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == 400
    assert worker.log.lines and all(line.startswith("debug: ") and SECRET not in line for line in worker.log.lines)
    closed, other = socket.socketpair()
    other.close()
    closed.close()
    EnvelopeWorker.handle_error(worker, None, closed, None, g.LimitRequestLine(9000, 8190))  # no raise


def test_a_body_gunicorn_refuses_while_the_app_reads_it_is_the_clients_400():
    class Broken:
        def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
            raise parse_error(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n")

        def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
            raise ValueError("boom")

    app = falcon.App()
    app.add_route("/v1/x", Broken())
    app.add_error_handler(Exception, handle_unexpected)
    app.set_error_serializer(serialize_error)
    client = falcon.testing.TestClient(app)
    got = client.simulate_post("/v1/x")
    assert got.status_code == 400 and got.json["error"]["message"] == "malformed chunked body: invalid chunk size"
    assert client.simulate_get("/v1/x").status_code == 500  # anything else stays a 500
