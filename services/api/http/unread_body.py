"""Read what a request's handler left of its body, so its connection stays usable.

gunicorn sends `Connection: keep-alive`, then drains at most 64 KiB of a body the app did not
read, and closes the connection if more was left: the client's next request on it (a `GET`
sent with a large body, a refusal before the body was read) fails with a dropped connection
(found by fuzzing the HTTP routes). The app cannot say `Connection: close` (gunicorn drops
hop-by-hop headers), so it reads the rest itself, up to `api.max_body_mb`; a larger body was
refused by its Content-Length (413) and its connection closes, as it must."""

from __future__ import annotations

from typing import Any

import falcon


class DrainMiddleware:
    def __init__(self, max_body: int) -> None:
        self.max_body = max_body

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: Any,
                         req_succeeded: bool) -> None:
        length = req.content_length
        if length and length <= self.max_body and not req.bounded_stream.eof:
            try:
                req.bounded_stream.exhaust()
            except OSError:  # the client went away or stalled past the socket's timeout
                pass
