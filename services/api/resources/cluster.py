"""State, identity, health, models and instances: `/state`, `/node_id`, `/health`, `/v1/models`,
`/models`, `/place_instance`, `/instance/previews`, `/instance/{id}`."""

from __future__ import annotations

import datetime
import os
import socket
import time
import uuid
from dataclasses import replace
from pathlib import Path

import falcon

from skulk.services.api.gateway import Gateway, MasterUnavailable
from skulk.services.api.replica import StateReplica
from skulk.services.api.resources.common import command, http_error, json_body, state_or_503
from skulk.services.api.state_json import card_json, instance_json, model_entry, state_json
from skulk.wire.commands import CommandRejected, DeleteInstance, PlaceInstance, Reply
from skulk.wire.models import ModelCard, ModelDirError, card_from_dir, dir_name, scan
from skulk.wire.placement import PlacementError, place


class StateResource:
    def __init__(self, replica: StateReplica) -> None:
        self.replica = replica

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """`?wait_after_idx=N&timeout=S` (ours, optional): long-poll until the state moves past
        index N or S seconds (at most 30) pass, so tools wait on changes instead of polling."""
        state = state_or_503(self.replica)
        after = req.get_param_as_int("wait_after_idx")
        if after is not None:
            timeout = min(max(req.get_param_as_float("timeout") or 10.0, 0.0), 30.0)
            state = self.replica.wait_change(after, timeout) or state
        resp.media = state_json(state)


class NodeIdResource:
    def __init__(self, node_id: str) -> None:
        self.node_id = node_id

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.node_id


class NodeDiagnosticsResource:
    """`GET /v1/diagnostics/node`: who this node is and whom it follows."""

    def __init__(self, replica: StateReplica, node_id: str, version: str) -> None:
        self.replica, self.node_id, self.version = replica, node_id, version

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        state = self.replica.get(timeout=1.0)
        me = state.nodes.get(self.node_id) if state else None
        master = state.master_node_id if state else None
        resp.media = {
            "generatedAt": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "runtime": {"nodeId": self.node_id, "hostname": socket.gethostname(),
                        "friendlyName": me.friendly_name if me else socket.gethostname(),
                        "isMaster": master == self.node_id, "masterNodeId": master or None,
                        "skulkVersion": self.version, "cwd": os.getcwd()},
            "identity": ({"friendlyName": me.friendly_name, "skulkVersion": me.skulk_version}
                         if me else None),
            "warnings": [] if state else ["cluster state not available yet"]}


class HealthResource:
    """`{"status": "idle"|"busy", "version"}`: busy while any task is pending or running."""

    def __init__(self, replica: StateReplica, version: str) -> None:
        self.replica = replica
        self.version = version

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        state = self.replica.get(timeout=1.0)
        busy = state is not None and any(t.status in ("Pending", "Running") for t in state.tasks.values())
        resp.media = {"status": "busy" if busy else "idle", "version": self.version}


class ModelsResource:
    def __init__(self, models_dir: Path) -> None:
        self.models_dir = models_dir

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        cards, _rejected = scan(self.models_dir)
        resp.media = {"object": "list", "data": [model_entry(c) for c in cards.values()]}


def load_card(models_dir: Path, model_id: object) -> ModelCard:
    if not isinstance(model_id, str) or not model_id:
        raise http_error(400, "model_id is required (a string)")
    try:
        return card_from_dir(models_dir / dir_name(model_id))
    except ModelDirError as exc:
        raise http_error(404, f"Model {model_id} is not available on this node: {exc}") from None


class PlaceResource:
    def __init__(self, gateway: Gateway, replica: StateReplica, models_dir: Path) -> None:
        self.gateway = gateway
        self.replica = replica
        self.models_dir = models_dir

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = json_body(req)
        if not isinstance(body, dict):
            raise http_error(400, "request body must be a JSON object")
        card = load_card(self.models_dir, body.get("model_id"))
        excluded = body.get("excluded_nodes", [])
        min_nodes = body.get("min_nodes", 1)
        if not isinstance(excluded, list) or not all(isinstance(n, str) for n in excluded):
            raise http_error(400, "excluded_nodes must be a list of node ids")
        if isinstance(min_nodes, bool) or not isinstance(min_nodes, int):
            raise http_error(400, "min_nodes must be an integer")
        cmd = PlaceInstance(command_id=uuid.uuid4().hex, card=card,
                            sharding=str(body.get("sharding", "Pipeline")),
                            instance_meta=str(body.get("instance_meta", "MlxRing")),
                            min_nodes=min_nodes, excluded_nodes=tuple(excluded))
        reply = self._place(cmd)
        resp.media = {"message": "Command received.", "command_id": cmd.command_id,
                      "model_card": card_json(card), "instance_id": getattr(reply, "instance_id", "")}

    def _place(self, cmd: PlaceInstance) -> Reply:
        """Right after formation the state may not list every node yet: that is info-pending
        (wait up to 15 s for the state to catch up, then 503), never a false 400."""
        deadline = time.monotonic() + INFO_PENDING_S
        attempt = 0
        while True:
            try:
                reply = self.gateway.command(replace(cmd, command_id=f"{cmd.command_id}-{attempt}"))
            except MasterUnavailable as exc:
                raise http_error(503, str(exc)) from None
            attempt += 1
            pending = (isinstance(reply, CommandRejected) and reply.status == 400
                       and reply.message.startswith("The topology has only") and self._forming(cmd))
            if not pending:
                if isinstance(reply, CommandRejected):
                    raise http_error(reply.status, reply.message)
                return reply
            left = deadline - time.monotonic()
            if left <= 0:
                raise http_error(503, f"{reply.message}; node info is still being gathered (the "
                                      f"cluster may be forming), retry shortly (waited {INFO_PENDING_S:.0f}s)")
            state = self.replica.get(timeout=0)
            self.replica.wait_change(state.last_event_applied_idx if state else -1, min(left, 1.0))

    def _forming(self, cmd: PlaceInstance) -> bool:
        state = self.replica.get(timeout=0)
        known = len(state.nodes) if state else 0
        young = time.monotonic() - self.replica.started < FORMING_S
        return self.replica.members > known or (young and cmd.min_nodes > known)


INFO_PENDING_S = 15.0
FORMING_S = 15.0
"""A node this young may not have met its peers yet: a too-small topology is info-pending."""


class PreviewsResource:
    def __init__(self, replica: StateReplica, models_dir: Path) -> None:
        self.replica = replica
        self.models_dir = models_dir

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        card = load_card(self.models_dir, req.get_param("model_id"))
        state = state_or_503(self.replica)
        excluded = tuple(req.get_param_as_list("excluded_node_ids") or ())
        previews, seen = [], set()
        for sharding in ("Pipeline", "Tensor"):
            for meta in ("MlxRing", "MlxJaccl"):
                for width in range(1, max(1, len(state.nodes)) + 1):
                    result = place(state, PlaceInstance(command_id="preview", card=card, sharding=sharding,
                                                        instance_meta=meta, min_nodes=width,
                                                        excluded_nodes=excluded), lambda: uuid.uuid4().hex)
                    if isinstance(result, PlacementError):
                        key = (sharding, meta, "error")
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
                    share = card.storage_size_bytes // len(result.node_to_runner)
                    previews.append({"model_id": card.model_id, "sharding": sharding,
                                     "instance_meta": meta, "instance": instance_json(result),
                                     "memory_delta_by_node": {n: share for n in result.node_to_runner},
                                     "error": None})
        resp.media = {"previews": previews}


class InstanceResource:
    def __init__(self, gateway: Gateway, replica: StateReplica) -> None:
        self.gateway = gateway
        self.replica = replica

    def on_get(self, req: falcon.Request, resp: falcon.Response, instance_id: str) -> None:
        inst = state_or_503(self.replica).instances.get(instance_id)
        if inst is None:
            raise http_error(404, "Instance not found")
        resp.media = instance_json(inst)

    def on_delete(self, req: falcon.Request, resp: falcon.Response, instance_id: str) -> None:
        cmd = DeleteInstance(command_id=uuid.uuid4().hex, instance_id=instance_id)
        command(self.gateway, cmd)
        resp.media = {"message": "Command received.", "command_id": cmd.command_id,
                      "instance_id": instance_id}
