"""`create_app()`: the Falcon application (resources are plain classes, no zmq here)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import falcon

from skulk.services.api.errors import handle_unexpected, serialize_error


def skulk_version() -> str:
    try:
        return version("skulk")
    except PackageNotFoundError:
        return "0+unknown"


class HealthResource:
    """`GET /health`: `{"status": "idle"|"busy", "version"}` (seed 001's check)."""

    def __init__(self, version_str: str) -> None:
        self.version = version_str

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"status": "idle", "version": self.version}


def create_app() -> falcon.App:
    app = falcon.App(cors_enable=True)
    app.set_error_serializer(serialize_error)
    app.add_error_handler(Exception, handle_unexpected)
    app.add_route("/health", HealthResource(skulk_version()))
    return app
