"""`GET /v1/models` and `GET /models`: every model of the cluster, from the replicated catalog
(each node's store role reports its models dir, the store host the store), and the card
lookup placement uses. No request reads a disk. A node's own models are known at start: the
API reads its models dir once when it starts and lists those too until the catalog lists this
node (a node just started, whose master has not yet indexed its store's first report, answers
its models from the first request). A lookup for placement waits for the catalog of every
node (a 503 to retry past 15 s, never a false 404)."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import falcon

from skulk.cluster.catalog import cards_of, catalogs_pending
from skulk.cluster.replica import StateReplica
from skulk.node.model_cards import scan
from skulk.services.api.http.errors import http_error
from skulk.services.api.observe.state_json import model_entry
from skulk.wire.models import ModelCard

CATALOG_PENDING_S = 15.0
"""How long a lookup waits for the models of nodes not reported yet (a store role reports at
start, then every 2 s; the leader indexes a new member's within seconds), as placement waits for
node info."""


@functools.cache
def own_models(models_dir: Path) -> dict[str, ModelCard]:
    """This node's models as this API process found them at start: read once per process (the
    routes' catalogs share it; the store role logs the directories it rejects)."""
    return scan(models_dir)[0]


class Catalog:
    """The cluster's models as this API worker sees them."""

    def __init__(self, replica: StateReplica, node_id: str, models_dir: Path) -> None:
        self.replica, self.node_id, self.models_dir = replica, node_id, models_dir
        self.own = own_models(models_dir)

    def cards(self) -> dict[str, ModelCard]:
        """The cluster's models; this node's own (read at start) too while the catalog does not
        list this node yet (no wait for the first state where they are known)."""
        state = self.replica.get(timeout=0.0 if self.own else 1.0)
        if state is not None and self.node_id in state.catalog:
            return cards_of(state.catalog)
        listed = cards_of(state.catalog) if state else {}
        return dict(sorted({**self.own, **listed}.items()))

    def card(self, model_id: object) -> ModelCard:
        """The model's card (400 without an id, 404 when no node and no store has it). A node
        whose models have not been reported yet (the cluster forming) may have it: the lookup
        waits for its report, and past `CATALOG_PENDING_S` answers 503 (retry), never a false 404."""
        if not isinstance(model_id, str) or not model_id:
            raise http_error(400, "model_id is required (a string)")
        started = time.monotonic()
        while True:
            state = self.replica.get(timeout=1.0)
            if state is not None and (found := cards_of(state.catalog).get(model_id)) is not None:
                return found
            waited = time.monotonic() - started
            pending = catalogs_pending(state, self.replica.members) if state is not None else ["this node"]
            if state is not None and self.node_id in state.catalog and not pending or waited >= CATALOG_PENDING_S:
                if pending:
                    raise http_error(503, f"Model {model_id} is not in the catalog yet: the models of "
                                          f"{', '.join(pending)} are not reported yet (the cluster may be "
                                          f"forming), retry shortly (waited {CATALOG_PENDING_S:.0f}s)")
                raise http_error(404, f"Model {model_id} is not available in the cluster "
                                      "(no node and no model store has it)")
            self.replica.wait_change(state.last_event_applied_idx if state else -1,
                                     min(CATALOG_PENDING_S - waited, 1.0))


class ModelsResource:
    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        state = self.catalog.replica.get(timeout=0.0)
        serving: dict[str, list[str]] = {}
        for inst in (state.instances.values() if state is not None else ()):
            serving.setdefault(inst.model_id, []).append(inst.engine)
        resp.media = {"object": "list", "data": [model_entry(c, serving.get(c.model_id))
                                                 for c in self.catalog.cards().values()]}
