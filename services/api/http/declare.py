"""The shape of a route declaration: the one thing both the Falcon app and the OpenAPI document
are built from (`routes.py` lists them; `app.py` and `openapi.py` read them).

A `Route` names its path (and aliases), how to build its resource from the worker's `Deps`,
and per HTTP method an `Op`: what it takes and what it answers. `check` refuses a resource
whose responders (`on_get`, `on_post`, ...) differ from its declared methods, so a handler
cannot exist undeclared, nor a declaration without a handler.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from falcon.routing import map_http_methods

from skulk.cluster.replica import StateReplica
from skulk.node.api_keys import ApiKey, Scope
from skulk.node.model_store import ModelStoreConfig
from skulk.node.role_args import ApiArgs, ChildArgs
from skulk.services.api.generate.generation import Generation
from skulk.services.api.http.schema import Schema
from skulk.services.api.links.master_client import MasterClient
from skulk.services.api.links.runner_link import RunnerLink
from skulk.services.api.observe.runner_view import RunnerView

JSON = "application/json"
SSE = "text/event-stream"
NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class Param:
    """A query parameter."""

    name: str
    schema: Schema
    doc: str
    required: bool = False


@dataclass(frozen=True)
class Op:
    """One method of a route. `ok` is the 200 body (None: no body, as HEAD); `stream` the media
    type of the streamed variant a request can ask for; `errors` the statuses it answers with an
    error body in its path's client shape (`errors.error_shape`); `other` non-error bodies."""

    summary: str
    ok: Schema | None = None
    body: Schema | None = None
    errors: tuple[int, ...] = ()
    stream: str = ""
    media: str = JSON
    query: tuple[Param, ...] = ()
    other: Mapping[int, Schema] = field(default_factory=dict)
    generation: bool = False
    """Runs a model: counts against the caller's concurrent streams (`api.max_streams_per_key`; 429
    beyond) and its answer is dropped, and the generation cancelled, when the client stops reading."""


@dataclass(frozen=True)
class Limits:
    """What one client may ask of a node (`api.*`; `services/api/http/limits.py` enforces them)."""

    max_body_bytes: int = 32 * 1024 * 1024
    max_messages: int = 1024
    max_streams_per_key: int = 64
    write_timeout_s: float = 60.0
    streams_root: Path | None = None  # the slots' lock files (`limits.streams_dir`); None: not counted

    @classmethod
    def of(cls, api: ApiArgs, streams_root: Path | None) -> Limits:
        return cls(max_body_bytes=int(api.max_body_mb * 2 ** 20), max_messages=api.max_messages,
                   max_streams_per_key=api.max_streams_per_key, write_timeout_s=api.write_timeout,
                   streams_root=streams_root)


@dataclass(frozen=True)
class Deps:
    """What a worker's resources are built from (one of each per gunicorn worker): the API's
    arguments as its supervisor gave them (declared once, in `node/role_args.py`), and what the
    worker built from them."""

    replica: StateReplica
    master: MasterClient
    runners: RunnerLink
    generation: Generation
    child: ChildArgs  # home, run dir, logging
    api: ApiArgs  # the node's `api.*` settings
    version: str
    store: ModelStoreConfig | None = None  # the cluster's model store (None: none)
    staging_root: Path | None = None  # model_store staging (None: no store configured)
    runner_view: RunnerView = field(default_factory=RunnerView)
    """This node's runners as they report on the bus, and the nodes gossip saw (`runner_view.py`)."""
    routes: tuple[Route, ...] = ()
    """The table being served (the OpenAPI resource publishes it)."""
    keys: tuple[ApiKey, ...] = field(default=(), repr=False)  # `api.keys`, read from the file (none: `auth.py`)
    limits: Limits = field(default_factory=Limits)  # `Limits.of(api, ...)`; the default counts no streams

    @property
    def node_id(self) -> str:
        return self.api.node_id

    @property
    def home(self) -> Path:
        return self.child.home

    @property
    def run_dir(self) -> Path:
        """The node's run dir (its root's pid is in `skulk.lock`)."""
        return self.child.run_dir

    @property
    def models(self) -> Path:
        return self.child.home / "models"

    @property
    def config_file(self) -> Path:
        return Path(self.api.config_file) if self.api.config_file else self.child.home / "skulk.yaml"

    @property
    def listen(self) -> str:
        """The API's address (on loopback, the store is reached on loopback)."""
        return self.api.listen

    @property
    def namespace(self) -> str:
        return self.api.namespace

    @property
    def open_admin(self) -> bool:
        return self.api.open_admin

    @property
    def log_json(self) -> bool:
        return self.child.log.json


@dataclass(frozen=True)
class Route:
    path: str
    make: Callable[[Deps], object]
    ops: Mapping[str, Op]
    """Keyed by upper-case HTTP method: "GET", "POST", "PUT", "DELETE", "HEAD"."""
    tag: str
    aliases: tuple[str, ...] = ()
    """More paths served by the same resource with the same operations."""
    suffix: str | None = None
    """Falcon's responder suffix (`on_get_<suffix>`), for a resource serving several routes."""
    scope: Scope = Scope.ADMIN
    """What a caller's key must grant (`services/api/http/auth.py`); admin unless said, so a route
    declared without thinking about it is closed."""

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.path, *self.aliases)


class RouteMismatch(Exception):
    """A resource's responders and its declaration disagree (a bug caught at start)."""


def responder_methods(resource: object, suffix: str | None = None) -> set[str]:
    """The HTTP methods `resource` answers, as Falcon maps them (OPTIONS is Falcon's own: CORS)."""
    return set(map_http_methods(resource, suffix=suffix)) - {"OPTIONS"}


def check(route: Route, resource: object) -> None:
    answered, declared = responder_methods(resource, route.suffix), set(route.ops)
    if answered != declared:
        raise RouteMismatch(f"{route.path}: the resource answers {sorted(answered)} but the route "
                            f"declares {sorted(declared)}")
