"""`GET /store/storage` (this node's staged copies, event log and disk) and
`POST /store/purge-staging` (every node removes the staged copies nobody uses).

Storage is local by design (for the fleet view, query each node). The purge is a
command to the leader, which records it in the replicated state; every node's worker acts on
it once, never touching a copy in use, the store, or a node's own models dir.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import falcon

from skulk.cluster.replica import StateReplica
from skulk.node.eventlog_files import MODE_FILE
from skulk.node.staged import in_use_here, staged_copies
from skulk.services.api.http.cluster_replies import master_accepts
from skulk.services.api.http.errors import http_error
from skulk.services.api.http.request_body import json_body
from skulk.services.api.http.schema import BOOLEAN, INTEGER, NUMBER, STRING, Schema, array, enum, nullable, obj
from skulk.services.api.links.master_client import MasterClient
from skulk.wire.models import dir_name
from skulk.wire.staging import PurgeStaging


def _bytes_under(path: Path) -> int:
    try:
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    except OSError:
        return 0


def _event_log_mode(directory: Path) -> dict[str, Any]:
    """Whether the event log writes or only counts (the disk was full), and why."""
    try:
        mode = json.loads((directory / MODE_FILE).read_text())
    except (OSError, ValueError):
        return {"eventLogMode": "unknown", "eventLogReason": None}
    return {"eventLogMode": mode.get("mode", "unknown"), "eventLogReason": mode.get("reason")}


class StorageResource:
    def __init__(self, replica: StateReplica, node_id: str, home: Path, staging_root: Path | None) -> None:
        self.replica, self.node_id, self.home, self.staging = replica, node_id, home, staging_root

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        state = self.replica.get(timeout=1.0)
        in_use = in_use_here(state, self.node_id) if state else set()
        staged = sorted(staged_copies(self.staging), key=lambda s: -s.last_used) if self.staging else []
        volume = self.staging if self.staging and self.staging.exists() else self.home / "models"
        try:
            disk = shutil.disk_usage(volume)
            total, free = disk.total, disk.free
        except OSError:
            total = free = 0
        resp.media = {
            "nodeId": self.node_id, "stagingRoot": str(self.staging) if self.staging else None,
            "stagedModels": [{"modelId": s.model_id, "directory": str(self.staging / dir_name(s.model_id)),
                              "sizeBytes": s.size_bytes, "lastUsedEpochSeconds": s.last_used,
                              "inUse": s.model_id in in_use} for s in staged] if self.staging else [],
            "stagedTotalBytes": sum(s.size_bytes for s in staged),
            "eventLogBytes": _bytes_under(self.home / "eventlog"), **_event_log_mode(self.home / "eventlog"),
            "diskTotalBytes": total, "diskFreeBytes": free}


class PurgeResource:
    def __init__(self, master: MasterClient) -> None:
        self.master = master

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = json_body(req)  # required, as upstream (`{}` purges every model)
        if not isinstance(body, dict) or set(body) - {"modelId", "model_id"}:
            raise http_error(422, "the body must be {} or {\"modelId\": \"org/name\"} (no other keys)")
        model_id = body.get("modelId", body.get("model_id", ""))
        if not isinstance(model_id, str):
            raise http_error(422, "modelId must be a string")
        cmd = PurgeStaging(command_id=uuid.uuid4().hex, model_id=model_id)
        master_accepts(self.master, cmd)
        resp.media = {"commandId": cmd.command_id, "message": "Purge staging command broadcast to all nodes"
                      + (f" for model {model_id}" if model_id else "")}


STORAGE: Schema = obj({
    "nodeId": STRING, "stagingRoot": nullable(STRING),
    "stagedModels": array(obj({"modelId": STRING, "directory": STRING, "sizeBytes": INTEGER,
                               "lastUsedEpochSeconds": NUMBER, "inUse": BOOLEAN})),
    "stagedTotalBytes": INTEGER, "eventLogBytes": INTEGER, "eventLogMode": enum("writing", "counting", "unknown"),
    "eventLogReason": nullable(STRING), "diskTotalBytes": INTEGER, "diskFreeBytes": INTEGER})
PURGE_REQUEST: Schema = obj({}, {"modelId": STRING})
PURGED: Schema = obj({"commandId": STRING, "message": STRING})
