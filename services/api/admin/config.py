"""`GET`/`PUT /config`: this node's `skulk.yaml` (the file it was started with), secrets stripped.

A valid `PUT` is written here first, then made the cluster's: the leader records it in the
replicated state and every node's master writes its own file from there, keeping that node's
secrets (`services/master/config_sync.py`). Validation is the node's own at start, so a bad
key or type is a 422 naming it, and then nothing is written or sent. The node reads the file
only at start: `requiresRestart` says whether the change waits for one.
"""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path
from typing import Any

import falcon

from skulk.cluster.replica import StateReplica
from skulk.node import config_file
from skulk.node.config import ConfigError
from skulk.services.api.http.request_body import json_body
from skulk.services.api.http.schema import ANY_OBJECT, BOOLEAN, INTEGER, STRING, Schema, obj
from skulk.services.api.links.master_client import MasterClient, MasterUnavailable
from skulk.wire.commands import CommandAccepted, CommandRejected
from skulk.wire.config_sync import ClusterConfig, SetConfig


def config_json(data: dict[str, Any] | None, path: Path, synced: ClusterConfig | None,
                hf_token_in_env: bool) -> dict[str, Any]:
    """Upstream's `GET /config` shape (`effective` also says which cluster version is current)."""
    data = data or {}
    return {
        "config": config_file.strip_secrets(data),
        "configPath": str(path),
        "fileExists": bool(path.is_file()),
        "effective": {
            "kv_cache_backend": "default",  # mlx-lm's own KV cache: there is no other backend here
            "has_hf_token": bool(data.get("hf_token")) or hf_token_in_env,
            "cluster_config_version": synced.version if synced else 0,
            "cluster_config_from": synced.writer if synced else "",
        },
    }


def _error(status: int, message: str) -> falcon.HTTPError:
    return falcon.HTTPError(falcon.code_to_http_status(status), description=message)


class ConfigResource:
    def __init__(self, master: MasterClient, replica: StateReplica, node_id: str, path: Path) -> None:
        self.master, self.replica, self.node_id, self.path = master, replica, node_id, path
        self._lock = threading.Lock()  # this worker's PUTs one at a time: write, ask, maybe restore

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            data = config_file.read(self.path)
        except ConfigError as exc:
            raise _error(500, str(exc)) from None
        state = self.replica.get(0.0)
        resp.media = config_json(data, self.path, state.config if state else None,
                                 bool(os.environ.get("HF_TOKEN")))

    def on_put(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = config_file.config_body(json_body(req))
        with self._lock:
            old_text = config_file.read_text(self.path)
            try:
                old = config_file.parse(old_text, str(self.path)) if old_text is not None else {}
            except ConfigError:
                old = {}  # an unusable file is simply replaced by a valid one
            try:
                new, changed = config_file.prepare_put(body, old)
            except ConfigError as exc:
                raise _error(422, str(exc)) from None
            config_file.write(self.path, new)
            cmd = SetConfig(command_id=uuid.uuid4().hex, writer=self.node_id,
                            yaml=config_file.dump(config_file.strip_secrets(new)))
            try:
                reply = self.master.command(cmd)
            except MasterUnavailable as exc:
                reply = CommandRejected(command_id=cmd.command_id, status=503, message=str(exc))
            if not isinstance(reply, CommandAccepted):  # the cluster did not take it: undo ours
                config_file.restore(self.path, old_text)
                status = reply.status if isinstance(reply, CommandRejected) else 500
                raise _error(status, getattr(reply, "message", f"unexpected reply {reply.TYPE}"))
        message = f"Configuration saved to {self.path} and sent to every node of the cluster ({reply.message})"
        resp.media = {"success": True, "message": message,
                      "requiresRestart": config_file.requires_restart(changed)}


CONFIG: Schema = obj({"config": ANY_OBJECT, "configPath": STRING, "fileExists": BOOLEAN,
                      "effective": obj({"kv_cache_backend": STRING, "has_hf_token": BOOLEAN,
                                        "cluster_config_version": INTEGER, "cluster_config_from": STRING})})
CONFIG_REQUEST: Schema = {**ANY_OBJECT, "description": "the skulk.yaml settings as an object, or "
                          "{\"config\": {...}}; validated as the node validates its file at start (422)"}
CONFIG_SAVED: Schema = obj({"success": BOOLEAN, "message": STRING, "requiresRestart": BOOLEAN})
