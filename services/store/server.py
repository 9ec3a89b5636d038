"""The store host's HTTP server (stdlib `ThreadingHTTPServer`, one thread per connection).

It runs beside the store role's poll loop, in daemon threads started from `setup`, so a slow
peer streaming gigabytes never holds the loop or its heartbeat. Routing, ranges and path
checks are the pure functions of `protocol.py`; this file only answers with what they say.
Files go out with `socket.sendfile` (zero-copy on Linux) from the requested offset.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from skulk.node import model_import as fetch
from skulk.node.model_files import disk_usage, list_files, model_card, model_dirs, remove_tree, resolve_file
from skulk.services.store.protocol import (
    BadRequest,
    NotFound,
    RangeNotSatisfiable,
    Route,
    RouteKind,
    parse_range,
    parse_route,
)
from skulk.services.store.registry import Registry
from skulk.wire import curve

log = logging.getLogger("skulk.store")

SOCKET_TIMEOUT_S = 60.0
"""A peer that stops reading for this long loses its connection (and its thread)."""
MAX_BODY = 1 << 16


@dataclass
class DownloadJob:
    model_id: str
    status: str = "running"
    total_bytes: int = 0
    error: str = ""
    started: float = field(default_factory=time.time)
    thread: threading.Thread | None = None


class StoreApp:
    """What the handlers share: the store directory, its registry and download jobs."""

    def __init__(self, store: Path, registry: Registry, allow_hf_fallback: bool) -> None:
        self.store = store
        self.registry = registry
        self.allow_hf_fallback = allow_hf_fallback
        self.jobs: dict[str, DownloadJob] = {}
        self.lock = threading.Lock()

    def health(self) -> dict[str, Any]:
        total, used, free = disk_usage(self.store)
        return {"store_path": str(self.store), "free_bytes": free, "total_bytes": total,
                "used_bytes": used}

    def registry_doc(self) -> dict[str, Any]:
        entries = []
        for name in model_dirs(self.store):
            files = list_files(self.store / name)
            entries.append({"model_id": name.replace("--", "/", 1), "dir": name,
                            "total_bytes": sum(f.size for f in files), "files": len(files),
                            "downloaded_at": self.registry.downloaded_at(name)})
        return {"entries": entries}

    def model_dir(self, route: Route) -> Path:
        if model_card(self.store, route.model_dir) is None:
            raise NotFound(f"Model {route.model_id} not in store")
        return self.store / route.model_dir

    def files_doc(self, route: Route) -> dict[str, Any]:
        files = list_files(self.model_dir(route))
        sums = self.registry.checksums(route.model_dir, files)
        return {"model_id": route.model_id,
                "files": [{"path": f.path, "size": f.size, "sha256": sums[f.path]} for f in files],
                "total_bytes": sum(f.size for f in files)}

    def delete(self, route: Route) -> dict[str, Any]:
        directory = self.model_dir(route)
        remove_tree(directory)
        self.registry.forget(route.model_dir)
        log.info("store: deleted %s", route.model_id)
        return {"modelId": route.model_id, "deleted": True}

    def start_download(self, route: Route) -> tuple[int, dict[str, Any]]:
        """Start fetching a model into the store in a thread (202), or say it is there (200)."""
        if model_card(self.store, route.model_dir) is not None:
            return 200, {"modelId": route.model_id, "status": "completed"}
        if not self.allow_hf_fallback:
            return 409, {"error": f"{route.model_id}: Hugging Face downloads are off "
                                  "(model_store.download.allow_hf_fallback: false)"}
        with self.lock:
            job = self.jobs.get(route.model_id)
            if job is not None and job.status == "running":
                return 202, self.job_doc(job)
            job = DownloadJob(route.model_id)
            job.thread = threading.Thread(target=self._download, args=(job,),
                                          name=f"store-download-{route.model_dir}", daemon=True)
            self.jobs[route.model_id] = job
        job.thread.start()
        return 202, self.job_doc(job)

    def _download(self, job: DownloadJob) -> None:
        try:
            fetch.download_into_store(job.model_id, self.store, True, progress=False,
                                      on_total=lambda n: setattr(job, "total_bytes", n))
            job.status = "completed"
            log.info("store: downloaded %s", job.model_id)
        except fetch.FetchError as exc:
            job.status, job.error = "failed", str(exc)
            log.warning("store: %s", exc)
        except Exception as exc:  # noqa: BLE001 - a job's failure is its status, never the server's
            job.status, job.error = "failed", f"{job.model_id}: {exc}"
            log.exception("store: download of %s failed", job.model_id)

    def job_doc(self, job: DownloadJob) -> dict[str, Any]:
        done = job.total_bytes if job.status == "completed" else fetch.partial_bytes(self.store, job.model_id)
        return {"modelId": job.model_id, "status": job.status, "downloadedBytes": done,
                "totalBytes": job.total_bytes, "error": job.error or None}

    def download_status(self, route: Route) -> dict[str, Any]:
        job = self.jobs.get(route.model_id)
        if job is not None:
            return self.job_doc(job)
        if model_card(self.store, route.model_dir) is not None:
            return {"modelId": route.model_id, "status": "completed", "downloadedBytes": 0,
                    "totalBytes": 0, "error": None}
        raise NotFound(f"no download of {route.model_id}")


class StoreHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "skulk-store"
    timeout = SOCKET_TIMEOUT_S
    app: StoreApp  # set on the subclass `serve` makes

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        log.debug("store http: %s - %s", self.address_string(), format % args)

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _drain_body(self) -> None:
        """Read a request body we do not use, so the next request on this connection parses."""
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.close_connection = True
        elif length > 0:
            self.rfile.read(length)

    def _dispatch(self) -> None:
        try:
            self._drain_body()
            if not curve.store_authorized(self.headers.get("Authorization")):
                curve.refusals.note("a store request without the cluster's token", self.client_address[0])
                self._json(401, {"error": "this store serves only its cluster's nodes (cluster key)"})
                return
            route = parse_route(self.command, self.path)
            kind = route.kind
            if kind is RouteKind.HEALTH:
                self._json(200, self.app.health())
            elif kind is RouteKind.REGISTRY:
                self._json(200, self.app.registry_doc())
            elif kind is RouteKind.FILES:
                self._json(200, self.app.files_doc(route))
            elif kind is RouteKind.FILE:
                self._send_file(route)
            elif kind is RouteKind.MODEL:
                self._json(200, self.app.delete(route))
            elif kind is RouteKind.DOWNLOAD:
                self._json(*self.app.start_download(route))
            elif kind is RouteKind.DOWNLOAD_STATUS:
                self._json(200, self.app.download_status(route))
        except (BadRequest, ValueError) as exc:
            self._json(400, {"error": str(exc)})
        except NotFound as exc:
            self._json(404, {"error": str(exc)})
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True  # the peer went away mid-answer
        except OSError as exc:
            log.warning("store: %s %s failed: %s", self.command, self.path, exc)
            self._json(500, {"error": f"store I/O error: {exc}"})

    def _send_file(self, route: Route) -> None:
        path = resolve_file(self.app.model_dir(route), route.rel_path)
        if path is None:
            raise NotFound(f"{route.model_id}: no file {route.rel_path}")
        with path.open("rb") as f:
            size = f.seek(0, 2)
            try:
                rng = parse_range(self.headers.get("Range"), size)
            except RangeNotSatisfiable as exc:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                data = json.dumps({"error": str(exc)}).encode()
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                return
            first, last = rng if rng is not None else (0, size - 1)
            length = last - first + 1 if size else 0
            self.send_response(206 if rng is not None else 200)
            if rng is not None:
                self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(length))
            self.end_headers()
            if self.command == "HEAD" or length == 0:
                return
            try:
                self.connection.sendfile(f, offset=first, count=length)
            except OSError as exc:  # headers are out: no other answer fits; the peer resumes
                self.close_connection = True
                if not isinstance(exc, (BrokenPipeError, ConnectionResetError, TimeoutError)):
                    log.warning("store: sending %s failed: %s", path, exc)

    do_GET = do_HEAD = do_DELETE = do_POST = _dispatch


class StoreServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 64


def serve(app: StoreApp, host: str, port: int) -> StoreServer:
    """Bind now (a taken port fails the role's boot), serve from a daemon thread."""
    handler = type("BoundStoreHandler", (StoreHandler,), {"app": app})
    server = StoreServer((host, port), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.25},
                     name="store-http", daemon=True).start()
    log.info("store: serving %s on %s:%d", app.store, host, server.server_address[1])
    return server
