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
from skulk.node.role_args import ApiArgs, ChildArgs
from skulk.services.api.generate.generation import Generation
from skulk.services.api.generate.timing import StreamTiming
from skulk.services.api.http.auth import AuthMiddleware, Policy
from skulk.services.api.http.declare import Deps, Limits, Route, check
from skulk.services.api.http.errors import handle_unexpected, serialize_error
from skulk.services.api.http.limits import LimitsMiddleware
from skulk.services.api.http.request_body import DrainMiddleware
from skulk.services.api.http.routes import ROUTES
from skulk.services.api.links.event_log import EventRecorder
from skulk.services.api.links.master_client import MasterClient
from skulk.services.api.links.runner_link import RunnerLink
from skulk.services.api.observe.diagnostics_runners import placed_here
from skulk.services.api.observe.runner_view import RunnerView
from skulk.wire.version import skulk_version


def create_app(child: ChildArgs, api: ApiArgs, keys: tuple[ApiKey, ...] = (),
               store: ModelStoreConfig | None = None, staging_root: Path | None = None,
               limits: Limits | None = None) -> falcon.App:
    """The app of one worker, from the API role's arguments (`keys`: read from the node's file;
    `store`, `staging_root`: the model store as this node sees it; `limits`: `Limits.of(api)`)."""
    replica = StateReplica(child.run_dir)
    # this node's runners as they report on the bus (kept while the state still places them here)
    view = RunnerView(lambda: frozenset(placed_here(replica.get(timeout=0), api.node_id))).start(child.run_dir)
    master = MasterClient(child.run_dir)
    runners = RunnerLink(replica, StreamTiming.of(api))
    generation = Generation(master, runners, replica, api.node_id, max_output_tokens=api.max_output_tokens)
    generation.home = child.home  # traced requests' spans (`request_trace.py`)
    generation.events = EventRecorder(child.run_dir)  # chunks and requests in the event log (`links/event_log.py`)
    return build_app(Deps(replica=replica, master=master, runners=runners, generation=generation, child=child,
                          api=api, version=skulk_version(), store=store, staging_root=staging_root,
                          runner_view=view, keys=keys, limits=limits or Limits()))


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
