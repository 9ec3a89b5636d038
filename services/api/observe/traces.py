"""`/v1/traces*`: this node's saved traces (upstream's shapes). A traced task leaves its parts
on every node that took part (`node/trace_files.py`); these routes read this node's only, the
`/v1/traces/cluster*` routes (`traces_cluster.py`) merge every node's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import falcon

from skulk.node.trace_files import traces_root, valid_task_id
from skulk.services.api.http.errors import http_error
from skulk.services.api.http.request_body import json_body
from skulk.services.api.http.schema import ANY_OBJECT, BOOLEAN, INTEGER, NUMBER, STRING, Schema, array, map_of, obj
from skulk.services.api.observe.trace_reader import delete_traces, list_traces, load_trace
from skulk.services.api.observe.trace_views import chrome, stats


def checked_id(task_id: str) -> str:
    """The task id of a path, refused before it names a file (`..`, separators)."""
    if not valid_task_id(task_id):
        raise http_error(400, "Invalid task ID")
    return task_id


def not_found(task_id: str) -> falcon.HTTPError:
    return http_error(404, f"Trace not found: {task_id}")


def send_raw(resp: falcon.Response, task_id: str, body: dict[str, Any]) -> None:
    """A Chrome trace file as a download named like upstream's (`trace_<id>.json`)."""
    resp.content_type = falcon.MEDIA_JSON
    resp.downloadable_as = f"trace_{task_id}.json"
    resp.text = json.dumps(body, separators=(",", ":"))


class TracesResource:
    """`GET /v1/traces`: this node's traces, newest first."""

    def __init__(self, home: Path) -> None:
        self.root = traces_root(home)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"traces": list_traces(self.root)}


class TraceResource:
    """`GET /v1/traces/{task_id}` (spans), `/stats` and `/raw` (Chrome trace format)."""

    def __init__(self, home: Path) -> None:
        self.root = traces_root(home)

    def _load(self, task_id: str) -> dict[str, Any]:
        trace = load_trace(self.root, checked_id(task_id))
        if trace is None:
            raise not_found(task_id)
        return trace

    def on_get(self, req: falcon.Request, resp: falcon.Response, task_id: str) -> None:
        resp.media = self._load(task_id)

    def on_get_stats(self, req: falcon.Request, resp: falcon.Response, task_id: str) -> None:
        trace = self._load(task_id)
        resp.media = stats(task_id, trace["traces"], trace["sourceNodes"])

    def on_get_raw(self, req: falcon.Request, resp: falcon.Response, task_id: str) -> None:
        trace = self._load(task_id)
        send_raw(resp, task_id, chrome(trace["traces"], trace["sourceNodes"], {"taskId": task_id}))


def parse_delete(body: Any) -> list[str]:
    """`{"taskIds": [...]}` (or `task_ids`) -> the ids; 422 for any other shape, as upstream's
    strict models."""
    if not isinstance(body, dict) or len(body) != 1 or not {"taskIds", "task_ids"} & body.keys():
        raise http_error(422, "the body must be {\"taskIds\": [\"<task id>\", ...]} (no other keys)")
    ids = body.get("taskIds", body.get("task_ids"))
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise http_error(422, "taskIds must be a list of strings")
    return ids


class TracesDeleteResource:
    """`POST /v1/traces/delete`: remove this node's parts of these tasks."""

    def __init__(self, home: Path) -> None:
        self.root = traces_root(home)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        deleted, missing = delete_traces(self.root, parse_delete(json_body(req)))
        resp.media = {"deleted": deleted, "notFound": missing}


NODE_REF: Schema = obj({"nodeId": STRING, "friendlyName": STRING})
UNREACHABLE: Schema = array(obj({"nodeId": STRING, "url": STRING, "friendlyName": STRING, "error": STRING}))
"""Peers a cluster view could not ask (`/v1/traces/cluster*` only): who, and why."""
TRACE_ENTRY: Schema = obj({
    "taskId": STRING, "createdAt": STRING, "fileSize": INTEGER, "modelId": STRING, "taskKind": STRING,
    "categories": array(STRING), "tags": array(STRING), "hasToolActivity": BOOLEAN, "sourceNodes": array(NODE_REF)})
TRACE_LIST: Schema = obj({"traces": array(TRACE_ENTRY)}, {"unreachableNodes": UNREACHABLE})
SPAN: Schema = obj({"name": STRING, "startUs": INTEGER, "durationUs": INTEGER, "rank": INTEGER, "category": STRING,
                    "nodeId": STRING, "modelId": STRING, "taskKind": STRING, "tags": array(STRING),
                    "attrs": ANY_OBJECT})
TRACE: Schema = obj({"taskId": STRING, "traces": array(SPAN), "sourceNodes": array(NODE_REF)},
                    {"unreachableNodes": UNREACHABLE})
_CATEGORY_STATS: Schema = map_of(obj({"totalUs": INTEGER, "count": INTEGER, "minUs": INTEGER, "maxUs": INTEGER,
                                      "avgUs": NUMBER}))
TRACE_STATS: Schema = obj({"taskId": STRING, "totalWallTimeUs": INTEGER, "byCategory": _CATEGORY_STATS,
                           "byRank": map_of(obj({"byCategory": _CATEGORY_STATS})), "sourceNodes": array(NODE_REF)},
                          {"unreachableNodes": UNREACHABLE})
CHROME_TRACE: Schema = obj({"traceEvents": array(obj({"name": STRING, "ph": STRING, "pid": INTEGER}))},
                           {"displayTimeUnit": STRING, "otherData": ANY_OBJECT})
DELETE_REQUEST: Schema = obj({"taskIds": array(STRING)}, extra=False)
DELETED: Schema = obj({"deleted": array(STRING), "notFound": array(STRING)})
