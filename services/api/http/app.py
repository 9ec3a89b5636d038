"""`create_app(...)`: the Falcon application of one gunicorn worker (Falcon "look" style).

Built after the fork, in each worker: it starts the worker's state replica thread, and its
links to the master and the runners (their sockets are per thread). The routes come from the one
table (`routes.py`), which the OpenAPI document (`GET /api/openapi.json`) is generated from too.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import falcon

from skulk.cluster.replica import StateReplica
from skulk.node.api_keys import ApiKey
from skulk.node.model_store import ModelStoreConfig
from skulk.services.api.generate.event_record import EventRecorder
from skulk.services.api.generate.generation import Generation
from skulk.services.api.generate.timing import StreamTiming
from skulk.services.api.http.auth import AuthMiddleware, Policy
from skulk.services.api.http.declare import Deps, Limits, Route, check
from skulk.services.api.http.errors import handle_unexpected, serialize_error
from skulk.services.api.http.limits import LimitsMiddleware
from skulk.services.api.http.routes import ROUTES
from skulk.services.api.http.unread_body import DrainMiddleware
from skulk.services.api.links.master_client import MasterClient
from skulk.services.api.links.runner_link import RunnerLink
from skulk.services.api.observe.diagnostics_runners import placed_here
from skulk.services.api.observe.runner_view import RunnerView
from skulk.wire.version import skulk_version


def create_app(home: Path, run_dir: Path, node_id: str, timing: StreamTiming | None = None,
               config_file: Path | None = None, staging_root: Path | None = None,
               store: ModelStoreConfig | None = None, listen: str = "0.0.0.0", namespace: str = "skulk",
               log_json: bool = False, keys: tuple[ApiKey, ...] = (), open_admin: bool = False,
               limits: Limits | None = None) -> falcon.App:
    replica = StateReplica(run_dir)
    # this node's runners as they report on the bus (kept while the state still places them here)
    view = RunnerView(lambda: frozenset(placed_here(replica.get(timeout=0), node_id))).start(run_dir)
    master = MasterClient(run_dir)
    runners = RunnerLink(replica, timing or StreamTiming())
    generation = Generation(master, runners, replica, node_id)
    generation.home = home  # traced requests' spans (`request_trace.py`)
    generation.events = EventRecorder(run_dir)  # chunks and requests in the event log (`event_record.py`)
    return build_app(Deps(replica=replica, master=master, runners=runners, generation=generation,
                          node_id=node_id, models=home / "models", version=skulk_version(),
                          config_file=config_file or home / "skulk.yaml", home=home,
                          staging_root=staging_root, store=store, listen=listen, run_dir=run_dir,
                          runner_view=view, namespace=namespace, log_json=log_json, keys=keys,
                          open_admin=open_admin, limits=limits or Limits()))


def other_nodes(deps: Deps) -> frozenset[str]:
    """The addresses the cluster's other nodes advertise: without keys, their cluster views may
    read this node's admin routes (`auth.py`)."""
    state = deps.replica.get(timeout=0)
    if state is None:
        return frozenset()
    return frozenset(a for node_id, info in state.nodes.items() if node_id != deps.node_id for a in info.addresses)


def build_app(deps: Deps, routes: tuple[Route, ...] = ROUTES) -> falcon.App:
    """The app serving exactly `routes`: one resource per route, at its path and aliases.
    A resource whose responders differ from its declared methods stops the worker here."""
    deps = replace(deps, routes=routes)
    scopes = {path: route.scope for route in routes for path in route.paths}
    generation = {(path, method): op.generation for route in routes for path in route.paths
                  for method, op in route.ops.items()}
    # the middleware: who may call it (`auth.py`), then how much (`limits.py`)
    app: falcon.App[falcon.Request, falcon.Response] = falcon.App(cors_enable=True, middleware=[
        AuthMiddleware(Policy(deps.keys, deps.open_admin, deps.listen), scopes, lambda: other_nodes(deps)),
        LimitsMiddleware(deps.limits, generation),
        DrainMiddleware(deps.limits.max_body_bytes)])  # a body left unread must not cost the connection
    app.set_error_serializer(serialize_error)
    app.add_error_handler(Exception, handle_unexpected)
    for route in routes:
        resource = route.make(deps)
        check(route, resource)
        for path in route.paths:
            app.add_route(path, resource, suffix=route.suffix)
    return app
