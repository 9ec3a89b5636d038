"""`POST /place_instance`: place a model; a too-small topology right after formation is
info-pending (wait, then 503), never a false 400."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace

import falcon

from skulk.cluster.engines import AUTO
from skulk.cluster.replica import StateReplica
from skulk.services.api.dialects.models import Catalog
from skulk.services.api.http.errors import http_error
from skulk.services.api.http.request_body import json_body
from skulk.services.api.http.schema import INTEGER, STRING, TEXT, Schema, array, enum, obj
from skulk.services.api.links.master_client import WHILE_FORMING, MasterClient, MasterUnavailable
from skulk.services.api.observe.state_json import CARD, card_json
from skulk.wire.commands import CommandRejected, PlaceInstance, RejectReason, Reply
from skulk.wire.models import EngineKind

ENGINES = (AUTO, *(e.value for e in EngineKind))
MAX_NODES = 1024
"""More nodes than any cluster we serve: a larger `min_nodes` is a typo, refused by name."""


class PlaceResource:
    def __init__(self, master: MasterClient, replica: StateReplica, catalog: Catalog) -> None:
        self.master = master
        self.replica = replica
        self.catalog = catalog

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = json_body(req)
        if not isinstance(body, dict):
            raise http_error(400, "request body must be a JSON object")
        card = self.catalog.card(body.get("model_id"))
        excluded = body.get("excluded_nodes", [])
        min_nodes = body.get("min_nodes", 1)
        if not isinstance(excluded, list) or not all(isinstance(n, str) for n in excluded):
            raise http_error(400, "excluded_nodes must be a list of node ids")
        if isinstance(min_nodes, bool) or not isinstance(min_nodes, int) or not 1 <= min_nodes <= MAX_NODES:
            raise http_error(400, f"min_nodes must be an integer between 1 and {MAX_NODES}")
        engine = body.get("engine", AUTO)
        if engine not in ENGINES:
            raise http_error(400, f"engine must be one of {', '.join(ENGINES)}")
        cmd = PlaceInstance(command_id=uuid.uuid4().hex, card=card,
                            sharding=str(body.get("sharding", "Pipeline")),
                            instance_meta=str(body.get("instance_meta", "MlxRing")),
                            min_nodes=min_nodes, excluded_nodes=tuple(excluded), engine=engine)
        reply = self._place(cmd)
        resp.media = {"message": "Command received.", "command_id": cmd.command_id,
                      "model_card": card_json(card), "instance_id": getattr(reply, "instance_id", "")}

    def _place(self, cmd: PlaceInstance) -> Reply:
        """Right after formation the state may not list every node yet: that is info-pending
        (asked again on each change of the state for up to 15 s, then 503), never a false 400."""
        try:
            reply = WHILE_FORMING.ask(self.master, lambda n: replace(cmd, command_id=f"{cmd.command_id}-{n}"),
                                      still=lambda _reply: self._forming(cmd), pause=self._state_change)
        except MasterUnavailable as exc:
            raise http_error(503, str(exc)) from None
        if not isinstance(reply, CommandRejected):
            return reply
        if reply.reason == RejectReason.TOO_FEW_NODES and self._forming(cmd):  # still info-pending
            raise http_error(503, f"{reply.message}; node info is still being gathered (the cluster may be "
                                  f"forming), retry shortly (waited {WHILE_FORMING.budget_s:.0f}s)")
        raise http_error(reply.status, reply.message)

    def _state_change(self, most_s: float) -> None:
        state = self.replica.get(timeout=0)
        self.replica.wait_change(state.last_event_applied_idx if state else -1, most_s)

    def _forming(self, cmd: PlaceInstance) -> bool:
        state = self.replica.get(timeout=0)
        known = len(state.nodes) if state else 0
        young = time.monotonic() - self.replica.started < FORMING_S
        return self.replica.members > known or (young and cmd.min_nodes > known)


FORMING_S = 15.0
"""A node this young may not have met its peers yet: a too-small topology is info-pending."""


PLACE_REQUEST: Schema = obj({"model_id": TEXT},
                            {"sharding": enum("Pipeline", "Tensor"), "instance_meta": enum("MlxRing", "MlxJaccl"),
                             "min_nodes": INTEGER, "excluded_nodes": array(STRING),
                             "engine": enum(*ENGINES)})
PLACED: Schema = obj({"message": STRING, "command_id": STRING, "model_card": CARD, "instance_id": STRING})
