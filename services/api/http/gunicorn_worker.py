"""The API's gunicorn worker: gthread, with gunicorn's own refusals in the error envelope.

gunicorn parses a request's line and headers before the app runs, and answers what it refuses
there itself (`Worker.handle_error`): a request line over `limit_request_line` (414), too many or
too large header fields (431), any other malformed request (400), as an HTML page, with a
WARNING that quotes the offending bytes (a header line without its colon can be
`Authorization Bearer <key>`). Every error of the API is upstream's envelope (`errors.envelope`),
so here these leave as one too, naming the limit and its value; the messages are fixed and quote
nothing the client sent, and they are logged at DEBUG only (client errors, not the node's).
Anything else (the application's error: 500) is left to gunicorn as before. The path (and so an
Anthropic or Ollama shape) is not known yet: it is always the envelope.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from gunicorn import util
from gunicorn.http import errors as g
from gunicorn.workers.gthread import ThreadWorker

from skulk.services.api.http.errors import envelope

LIMITS = ("limit_request_line", "limit_request_fields", "limit_request_field_size")

MESSAGES: tuple[tuple[type[Exception], int, str], ...] = (
    (g.InvalidRequestLine, 400, "malformed request line (expected `METHOD /path HTTP/1.1`)"),
    (g.InvalidRequestMethod, 400, "invalid HTTP method in the request line"),
    (g.InvalidHTTPVersion, 400, "unsupported HTTP version in the request line (HTTP/1.0 or HTTP/1.1)"),
    (g.InvalidHeaderName, 400, "invalid header field name"),
    (g.ObsoleteFolding, 400, "a header field continued on the next line (obsolete line folding)"),
    (g.InvalidSchemeHeaders, 400, "contradictory scheme headers"),
    (g.InvalidChunkSize, 400, "malformed chunked body: invalid chunk size"),
    (g.ChunkMissingTerminator, 400, "malformed chunked body: a chunk does not end with CRLF"),
    (g.InvalidChunkExtension, 400, "malformed chunked body: invalid chunk extension"),
    (g.InvalidH2CPreface, 400, "invalid HTTP/2 connection preface"),
    (g.InvalidProxyLine, 400, "invalid PROXY protocol line"),
    (g.UnsupportedTransferCoding, 501, "unsupported transfer coding in Transfer-Encoding"),
    (g.ExpectationFailed, 417, "unsupported Expect header (only 100-continue is)"),
    (g.ForbiddenProxyRequest, 403, "PROXY protocol not accepted from this address"),
)
FRAMING = ("CONTENT-LENGTH", "TRANSFER-ENCODING")  # an InvalidHeader naming one of these is safe to name


def refusal(exc: BaseException, limits: Mapping[str, int]) -> tuple[int, str] | None:
    """The status and message for a request gunicorn refused while parsing it, or None for
    anything else (an application's error, a configuration problem: gunicorn's own answer)."""
    if not isinstance(exc, g.ParseException) or isinstance(
            exc, (g.InvalidResponseHeader, g.InvalidResponseHeaderName, g.ConfigurationProblem)):
        return None
    line, fields, size = (limits[k] for k in LIMITS)
    if isinstance(exc, g.LimitRequestLine):
        return 414, f"request line longer than {line} bytes (limit_request_line)"
    if isinstance(exc, g.LimitRequestHeaders):  # one type for count and size: name both limits
        return 431, (f"request headers too large: at most {fields} fields (limit_request_fields) "
                     f"of at most {size} bytes each (limit_request_field_size)")
    if isinstance(exc, g.InvalidHeader):
        hdr = getattr(exc, "hdr", None)
        named = hdr.title() if isinstance(hdr, str) and hdr.upper() in FRAMING else None
        return 400, f"invalid {named} header" if named else "malformed header field"
    for kind, status, message in MESSAGES:
        if isinstance(exc, kind):
            return status, message
    return 400, "malformed HTTP request"


def response(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 answer carrying the envelope; the connection closes after it."""
    body = json.dumps(envelope(status, message)).encode()
    return (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


class EnvelopeWorker(ThreadWorker):
    """gunicorn's gthread worker whose parse refusals are the API's error envelope."""

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        try:
            answer = refusal(exc, {k: getattr(self.cfg, k) for k in LIMITS})
            if answer is None:
                super().handle_error(req, client, addr, exc)
                return
            status, message = answer
            self.log.debug("refused a request from %s: %d %s (%s)", (addr or ("",))[0], status,
                           message, type(exc).__name__)
            util.write_nonblock(client, response(status, message))
        except Exception as failure:  # never raise from here: the thread's connection just closes
            self.log.debug("could not answer a refused request: %s", type(failure).__name__)
