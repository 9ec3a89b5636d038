"""The dashboard: one HTML page at `/` (and upstream's SPA paths) and its static files under
`/dashboard/{name}`, all shipped in the package (`services/api/observe/dashboard_files/`, package data), so a
node serves it offline. The page reads only the public HTTP API (docs/dashboard.md).

Files are read on every request (they are small), so an edit shows on the next reload without
restarting the node. Only a flat file name made of safe characters that names a file in the
folder is served: nothing outside the folder can be named (no `/`, no `..`).
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.resources.abc import Traversable

import falcon

from skulk.services.api.http.errors import http_error
from skulk.services.api.http.schema import STRING, Schema

PAGE = "index.html"
SPA_PATHS = ("/cluster", "/chat", "/model-store", "/operator")
"""Upstream's dashboard routes: each serves the same page (with and without a trailing slash)."""

CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".txt": "text/plain; charset=utf-8"}
"""Explicit, not `mimetypes` (which reads the host's tables): ES modules need a JS type."""

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
          "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
"""The page may load nothing from elsewhere: a stray CDN link fails loudly in the browser."""


def dashboard_dir() -> Traversable:
    return resources.files("skulk.services.api.observe").joinpath("dashboard_files")


def asset(folder: Traversable, name: str) -> tuple[bytes, str] | None:
    """The bytes and content type of `name` in `folder`, or None when it is not a servable file
    (pure apart from reading the file)."""
    suffix = name[name.rfind("."):] if "." in name else ""
    if not SAFE_NAME.match(name) or ".." in name or suffix not in CONTENT_TYPES:
        return None
    path = folder.joinpath(name)
    if not path.is_file():
        return None
    return path.read_bytes(), CONTENT_TYPES[suffix]


def _send(resp: falcon.Response, body: bytes, content_type: str) -> None:
    resp.data = body
    resp.content_type = content_type
    resp.cache_control = ["no-cache"]
    resp.set_header("X-Content-Type-Options", "nosniff")
    resp.set_header("Content-Security-Policy", POLICY)


class DashboardPageResource:
    """`GET /` and the SPA paths: the page (the client decides the view from the path)."""

    def __init__(self, folder: Traversable | None = None) -> None:
        self.folder = folder or dashboard_dir()

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        found = asset(self.folder, PAGE)
        if found is None:
            raise http_error(404, "The dashboard is not installed on this node")
        _send(resp, *found)


class DashboardAssetResource:
    """`GET /dashboard/{name}`: one of the page's scripts, its style sheet or its icon."""

    def __init__(self, folder: Traversable | None = None) -> None:
        self.folder = folder or dashboard_dir()

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        found = asset(self.folder, name)
        if found is None:
            raise http_error(404, f"No dashboard file {name!r}")
        _send(resp, *found)


PAGE_SCHEMA: Schema = {**STRING, "description": "the dashboard's HTML page"}
ASSET_SCHEMA: Schema = {**STRING, "description": "a dashboard file (JavaScript module, CSS, SVG or licence text)"}
