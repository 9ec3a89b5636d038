"""`GET /v1/models` and `GET /models`: every model of the cluster, from the replicated catalog
(each node's store role reports its models dir, the store host the store), and the card
lookup placement uses. No disk is read per request; this node's own models dir is read only
while the catalog does not list this node yet (right after start)."""

from __future__ import annotations

from pathlib import Path

import falcon

from skulk.services.api.replica import StateReplica
from skulk.services.api.resources.common import http_error
from skulk.services.api.state_json import model_entry
from skulk.wire.catalog import cards_of
from skulk.wire.models import ModelCard, ModelDirError, card_from_dir, dir_name, scan


class Catalog:
    """The cluster's models as this API worker sees them."""

    def __init__(self, replica: StateReplica, node_id: str, models_dir: Path) -> None:
        self.replica, self.node_id, self.models_dir = replica, node_id, models_dir

    def cards(self) -> dict[str, ModelCard]:
        state = self.replica.get(timeout=1.0)
        known = cards_of(state.catalog) if state else {}
        if state is None or self.node_id not in state.catalog:
            local, _rejected = scan(self.models_dir)
            known = {**local, **known}
        return dict(sorted(known.items()))

    def card(self, model_id: object) -> ModelCard:
        """The model's card (400 without an id, 404 when no node and no store has it)."""
        if not isinstance(model_id, str) or not model_id:
            raise http_error(400, "model_id is required (a string)")
        found = self.cards().get(model_id)
        if found is not None:
            return found
        try:
            return card_from_dir(self.models_dir / dir_name(model_id))
        except ModelDirError as exc:
            raise http_error(404, f"Model {model_id} is not available in the cluster (no node and no "
                                  f"model store has it): {exc}") from None


class ModelsResource:
    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"object": "list", "data": [model_entry(c) for c in self.catalog.cards().values()]}
