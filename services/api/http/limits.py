"""Limits on what one client controls: body size (413), concurrent generations per key (429
with `Retry-After`), and a reader that stops reading (its answer is dropped and its generation
cancelled at the runner). The message count (400) is checked where a body becomes a request
(`adapter.parsed`), the body cap again where it is read (`json_body`: a chunked body).

Concurrent streams are counted per node, across the API's gunicorn workers, with one lock file
per slot: `<run>/api-streams/<bucket>/<i>` for i < `api.max_streams_per_key`. A request takes
the first slot whose `flock` it gets and holds it until its answer ends; the kernel drops the
lock when the holder closes it or dies, so a crashed worker cannot leak a slot and no count can
drift. (Per worker with the limit divided would refuse a client below its limit whenever its
streams landed unevenly on the workers.) The bucket is the key's name, or without keys the
client's address.

A client that stops reading a streamed answer would otherwise hold a thread and a batch slot
until the generation ends (which may be thousands of tokens away): before each part is written
the stream waits at most `api.write_timeout_s` for room in the socket; without it the stream is
ended, the connection shut, and the generation's own clean-up cancels it at the runner. The
socket's timeout is the same value, so a write that blocks midway ends too.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import logging
import os
import select
import shutil
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import falcon

from skulk.services.api.http.declare import Limits

log = logging.getLogger("skulk.api.limits")

HEADER_LIMITS = {"limit_request_line": 8190, "limit_request_fields": 100, "limit_request_field_size": 8190}
"""gunicorn's request-line and header limits, set explicitly (8190 is the largest request line
gunicorn allows): beyond them gunicorn refuses the request before the app runs, and the API's
worker (`worker.EnvelopeWorker`) answers 414 (the line) or 431 (too many fields, a field too
large) in the error envelope, naming the limit and its value, and closes the connection."""
STREAM_SNDBUF = 32 * 1024
"""The kernel's send buffer for a streamed generation (Linux doubles it): what a client that stops
reading can leave unread before the stream notices. Autotuned, it grows to megabytes (the whole
answer), and the generation would run to its end for nobody. A token stream needs far less."""
STREAMS_DIR = "api-streams"
RETRY_AFTER_S = 1


def streams_dir(run_dir: Path) -> Path:
    return run_dir / STREAMS_DIR


def fresh_streams_dir(run_dir: Path) -> None:
    """At the API's start, before any worker: no slot of an earlier API process survives it."""
    shutil.rmtree(streams_dir(run_dir), ignore_errors=True)
    streams_dir(run_dir).mkdir(mode=0o700, parents=True, exist_ok=True)


def bucket_of(key_name: str | None, client: str) -> str:
    """Whose streams a request counts against: its key, or without keys its client's address."""
    return f"key:{key_name}" if key_name is not None else f"addr:{client}"


class StreamSlots:
    """At most `limit` concurrent holders per bucket, across processes (lock files)."""

    def __init__(self, root: Path, limit: int) -> None:
        self.root, self.limit = root, limit

    def folder(self, bucket: str) -> Path:
        return self.root / hashlib.sha256(bucket.encode()).hexdigest()[:24]  # any key name is a safe file name

    def acquire(self, bucket: str) -> Callable[[], None] | None:
        """A release function for a free slot, or None when all `limit` are held."""
        folder = self.folder(bucket)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for i in range(self.limit):
            fd = os.open(folder / str(i), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue
                raise
            return _once(functools.partial(os.close, fd))
        return None


def _nothing() -> None:
    pass


def _once(fn: Callable[[], None]) -> Callable[[], None]:
    done = False

    def call() -> None:
        nonlocal done
        if not done:
            done = True
            fn()

    return call


def writable(sock: socket.socket, timeout_s: float) -> bool:
    """Whether the socket has room for more within `timeout_s` (an error or hang-up counts:
    the write that follows fails at once)."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLOUT)
    return bool(poller.poll(max(0, int(timeout_s * 1000))))


class WatchedStream:
    """A streamed answer that ends when its client reads nothing for `timeout_s`, and runs
    `on_close` (the slot's release) once, however it ends."""

    def __init__(self, inner: Iterable[bytes], sock: socket.socket | None, timeout_s: float,
                 on_close: Callable[[], None], what: str) -> None:
        self.inner, self.sock, self.timeout_s = inner, sock, timeout_s
        self.on_close, self.what = on_close, what

    def __iter__(self) -> Iterator[bytes]:
        for part in self.inner:
            if self.sock is not None and not writable(self.sock, self.timeout_s):
                log.info("%s: the client read nothing for %.0f s; dropping it (its generation is cancelled)",
                         self.what, self.timeout_s)
                with contextlib.suppress(OSError):
                    self.sock.shutdown(socket.SHUT_RDWR)  # the server's last writes fail at once (EPIPE)
                return
            yield part

    def close(self) -> None:
        try:
            close = getattr(self.inner, "close", None)
            if close is not None:
                close()  # the generation's clean-up: cancel at the runner, tell the master
        finally:
            self.on_close()


class LimitsMiddleware:
    """Enforces `Limits` around every routed request (after `AuthMiddleware`: it counts per key)."""

    def __init__(self, limits: Limits, generation: Mapping[tuple[str, str], bool]) -> None:
        self.limits = limits
        self.generation = generation  # (path template, method) -> runs a model (`Op.generation`)
        root = limits.streams_root  # None: not counted (an app without a run dir, as in unit tests)
        self.slots = StreamSlots(root, limits.max_streams_per_key) if root is not None else None

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: Any,
                         params: dict[str, Any]) -> None:
        req.context.max_body = self.limits.max_body_bytes
        req.context.max_messages = self.limits.max_messages
        req.context.release = None  # set for a generation: ends its slot (a no-op when not counted)
        sock = req.env.get("gunicorn.socket")
        if isinstance(sock, socket.socket):
            sock.settimeout(self.limits.write_timeout_s)  # reset by gunicorn for the next request
        if req.content_length is not None and req.content_length > self.limits.max_body_bytes:
            raise too_large(self.limits.max_body_bytes)
        if not self.generation.get((req.uri_template or "", req.method), False):
            return
        if self.slots is None:
            req.context.release = _nothing
            return
        key = getattr(req.context, "api_key", None)
        release = self.slots.acquire(bucket_of(key.name if key else None, req.remote_addr or ""))
        if release is None:
            who = f"the API key {key.name!r}" if key else f"client {req.remote_addr}"
            raise falcon.HTTPError(429, description=f"{who} already has {self.limits.max_streams_per_key} "
                                   "generations in progress on this node (api.max_streams_per_key); retry "
                                   "when one ends", headers={"Retry-After": str(RETRY_AFTER_S)})
        req.context.release = release

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: Any,
                         req_succeeded: bool) -> None:
        release = getattr(req.context, "release", None)
        if release is None:
            return
        if resp.stream is None:
            release()
            return
        sock = req.env.get("gunicorn.socket")
        if not isinstance(sock, socket.socket):
            sock = None
        else:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_SNDBUF)
        assert isinstance(resp.stream, Iterable), "a generation's body is an iterable (`StreamBody`), not a file"
        resp.stream = WatchedStream(resp.stream, sock, self.limits.write_timeout_s, release,
                                    f"{req.method} {req.path}")


def too_large(limit: int) -> falcon.HTTPError:
    return falcon.HTTPError(413, description=f"request body larger than {limit} bytes "
                                             f"({limit / 2 ** 20:g} MiB, api.max_body_mb)")
