"""`GET /instance/previews`: every placement the cluster could make for a model."""

from __future__ import annotations

import uuid
from typing import Any

import falcon

from skulk.cluster.engines import kind_of
from skulk.cluster.placement import PlacementError, drafter_bytes, place, shares
from skulk.cluster.replica import StateReplica
from skulk.services.api.resources.common import state_or_503
from skulk.services.api.resources.models import Catalog
from skulk.services.api.schema import INTEGER, STRING, Schema, array, enum, map_of, nullable, obj
from skulk.services.api.state_json import INSTANCE, instance_json
from skulk.wire.commands import PlaceInstance


class PreviewsResource:
    def __init__(self, replica: StateReplica, catalog: Catalog) -> None:
        self.replica = replica
        self.catalog = catalog

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        card = self.catalog.card(req.get_param("model_id"))
        state = state_or_503(self.replica)
        excluded = tuple(req.get_param_as_list("excluded_node_ids") or ())
        previews: list[dict[str, Any]] = []
        seen: set[tuple[str, str, str | int]] = set()  # (sharding, meta, "error" or the width)
        for sharding in ("Pipeline", "Tensor"):
            for meta in ("MlxRing", "MlxJaccl"):
                for width in range(1, max(1, len(state.nodes)) + 1):
                    result = place(state, PlaceInstance(command_id="preview", card=card, sharding=sharding,
                                                        instance_meta=meta, min_nodes=width,
                                                        excluded_nodes=excluded), lambda: uuid.uuid4().hex)
                    if isinstance(result, PlacementError):
                        key: tuple[str, str, str | int] = (sharding, meta, "error")
                        if key not in seen:
                            seen.add(key)
                            previews.append({"model_id": card.model_id, "sharding": sharding,
                                             "instance_meta": meta, "instance": None,
                                             "memory_delta_by_node": None, "error": result.message})
                        continue
                    key = (sharding, meta, len(result.node_to_runner))
                    if key in seen:
                        continue
                    seen.add(key)
                    ring = tuple(result.node_to_runner)  # what each node's runner will hold
                    kind = next(iter(result.runner_to_shard.values())).kind
                    engine = kind_of(result.engine)
                    held = {n: share + drafter_bytes(state, card, state.nodes[n], len(ring), engine)
                            for n, share in zip(ring, shares(card, ring, state, kind, engine))}
                    previews.append({"model_id": card.model_id, "sharding": sharding,
                                     "instance_meta": meta, "instance": instance_json(result),
                                     "memory_delta_by_node": held,
                                     "error": None})
        resp.media = {"previews": previews}


PREVIEWS: Schema = obj({"previews": array(obj({
    "model_id": STRING, "sharding": enum("Pipeline", "Tensor"), "instance_meta": enum("MlxRing", "MlxJaccl"),
    "instance": nullable(INSTANCE), "memory_delta_by_node": nullable(map_of(INTEGER)),
    "error": nullable(STRING)}))})
