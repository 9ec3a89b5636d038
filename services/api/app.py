"""`create_app(...)`: the Falcon application of one gunicorn worker (Falcon "look" style).

Built after the fork, in each worker: it starts the worker's state replica thread and a
gateway whose sockets are per thread. The routes come from the one table (`routes.py`), which
the OpenAPI document (`GET /api/openapi.json`) is generated from too.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import falcon

from skulk.services.api.declare import Deps, Route, check
from skulk.services.api.errors import handle_unexpected, serialize_error
from skulk.services.api.gateway import Gateway, StreamTiming
from skulk.services.api.generation import Generation
from skulk.wire.replica import StateReplica
from skulk.services.api.routes import ROUTES
from skulk.supervisor.model_store import ModelStoreConfig
from skulk.wire.version import skulk_version


def create_app(home: Path, run_dir: Path, node_id: str, timing: StreamTiming | None = None,
               config_file: Path | None = None, staging_root: Path | None = None,
               store: ModelStoreConfig | None = None, listen: str = "0.0.0.0") -> falcon.App:
    replica = StateReplica(run_dir)
    gateway = Gateway(run_dir, replica, timing or StreamTiming())
    return build_app(Deps(replica=replica, gateway=gateway, generation=Generation(gateway, replica, node_id),
                          node_id=node_id, models=home / "models", version=skulk_version(),
                          config_file=config_file or home / "skulk.yaml", home=home,
                          staging_root=staging_root, store=store, listen=listen))


def build_app(deps: Deps, routes: tuple[Route, ...] = ROUTES) -> falcon.App:
    """The app serving exactly `routes`: one resource per route, at its path and aliases.
    A resource whose responders differ from its declared methods stops the worker here."""
    deps = replace(deps, routes=routes)
    app = falcon.App(cors_enable=True)
    app.set_error_serializer(serialize_error)
    app.add_error_handler(Exception, handle_unexpected)
    for route in routes:
        resource = route.make(deps)
        check(route, resource)
        for path in route.paths:
            app.add_route(path, resource, suffix=route.suffix)
    return app
