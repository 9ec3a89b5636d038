"""`GET /instance/previews`: every placement the cluster could make for a model."""

from __future__ import annotations

import uuid
from typing import Any

import falcon

from skulk.cluster.engines import kind_of
from skulk.cluster.placement import PlacementError, drafter_bytes, shares
from skulk.cluster.previews import previews
from skulk.cluster.replica import StateReplica
from skulk.services.api.dialects.models import Catalog
from skulk.services.api.http.cluster_replies import state_or_503
from skulk.services.api.http.schema import INTEGER, STRING, Schema, array, enum, map_of, nullable, obj
from skulk.services.api.observe.state_json import INSTANCE, instance_json


class PreviewsResource:
    def __init__(self, replica: StateReplica, catalog: Catalog) -> None:
        self.replica = replica
        self.catalog = catalog

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        card = self.catalog.card(req.get_param("model_id"))
        state = state_or_503(self.replica)
        excluded = tuple(req.get_param_as_list("excluded_node_ids") or ())
        out: list[dict[str, Any]] = []
        for sharding, meta, result in previews(state, card, excluded, lambda: uuid.uuid4().hex):
            if isinstance(result, PlacementError):
                out.append({"model_id": card.model_id, "sharding": sharding, "instance_meta": meta,
                            "instance": None, "memory_delta_by_node": None, "error": result.message})
                continue
            ring = tuple(result.node_to_runner)  # what each node's runner will hold
            kind = next(iter(result.runner_to_shard.values())).kind
            engine = kind_of(result.engine)
            held = {n: share + drafter_bytes(state, card, state.nodes[n], len(ring), engine)
                    for n, share in zip(ring, shares(card, ring, state, kind, engine))}
            out.append({"model_id": card.model_id, "sharding": sharding, "instance_meta": meta,
                        "instance": instance_json(result), "memory_delta_by_node": held, "error": None})
        resp.media = {"previews": out}


PREVIEWS: Schema = obj({"previews": array(obj({
    "model_id": STRING, "sharding": enum("Pipeline", "Tensor"), "instance_meta": enum("MlxRing", "MlxJaccl"),
    "instance": nullable(INSTANCE), "memory_delta_by_node": nullable(map_of(INTEGER)),
    "error": nullable(STRING)}))})
