"""What a trace is shown as, computed from its spans (pure): the list entry, the merged spans of
several parts or nodes, the timing stats and the Chrome trace format (Perfetto opens it).

A trace is read from untrusted JSON (part files on disk, peers' answers), so every span goes
through `clean_span` first: a malformed span is dropped, never a 500. Shapes follow upstream's
`/v1/traces*` field by field (camelCase); a span is `{name, startUs, durationUs, rank, category,
nodeId, modelId, taskKind, tags, attrs}`, rank -1 being the API or the router.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from skulk.node.trace_files import valid_task_id
from skulk.services.api.observe.timestamps import iso_auto

Span = dict[str, Any]
NodeRef = dict[str, str]  # {"nodeId", "friendlyName"}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def clean_span(raw: Any, node_id: str = "", model_id: str = "", task_kind: str = "") -> Span | None:
    """`raw` in upstream's span shape, or None when it is not a span; the part's node, model and
    kind fill what the span leaves out."""
    if not isinstance(raw, Mapping):
        return None
    start, duration, rank = _int(raw.get("startUs")), _int(raw.get("durationUs")), _int(raw.get("rank", -1))
    name, category = raw.get("name"), raw.get("category")
    if start is None or duration is None or rank is None or not isinstance(name, str) \
            or not isinstance(category, str):
        return None
    tags = raw.get("tags")
    attrs = raw.get("attrs")
    return {"name": name, "startUs": start, "durationUs": max(0, duration), "rank": rank,
            "category": category, "nodeId": _str(raw.get("nodeId")) or node_id,
            "modelId": _str(raw.get("modelId")) or model_id, "taskKind": _str(raw.get("taskKind")) or task_kind,
            "tags": [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else [],
            "attrs": dict(attrs) if isinstance(attrs, Mapping) else {}}


@dataclass
class Part:
    """One process's spans of one task, as read from its part file."""

    part: str
    node_id: str
    friendly_name: str
    model_id: str
    task_kind: str
    spans: list[Span] = field(default_factory=list)

    @property
    def node(self) -> NodeRef:
        return {"nodeId": self.node_id, "friendlyName": self.friendly_name or self.node_id}


def clean_part(raw: Any, part: str) -> Part | None:
    """A part file's JSON as a `Part` (malformed spans dropped), or None when it is not a part."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("spans"), list):
        return None
    node_id, model_id, kind = _str(raw.get("nodeId")), _str(raw.get("modelId")), _str(raw.get("taskKind"))
    spans = [s for s in (clean_span(r, node_id, model_id, kind) for r in raw["spans"]) if s is not None]
    return Part(part=_str(raw.get("part"), part) or part, node_id=node_id,
                friendly_name=_str(raw.get("friendlyName")), model_id=model_id, task_kind=kind, spans=spans)


def _when(text: str) -> float:
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return float("-inf")


def merge_nodes(*lists: Iterable[Any]) -> list[NodeRef]:
    """The union of several `sourceNodes` lists by node id, in order of first appearance."""
    seen: dict[str, NodeRef] = {}
    for nodes in lists:
        for node in nodes:
            if isinstance(node, Mapping) and isinstance(node.get("nodeId"), str) and node["nodeId"] not in seen:
                seen[node["nodeId"]] = {"nodeId": node["nodeId"],
                                        "friendlyName": _str(node.get("friendlyName"), node["nodeId"])}
    return list(seen.values())


def _span_key(span: Span) -> str:
    return json.dumps(span, sort_keys=True, separators=(",", ":"), default=str)


def merge_spans(*lists: Iterable[Span]) -> list[Span]:
    """Every distinct span of several lists (a span two nodes both report counts once), sorted
    by start time (then rank, then name, so the order is the same on every node)."""
    unique: dict[str, Span] = {}
    for spans in lists:
        for span in spans:
            unique.setdefault(_span_key(span), span)
    return sorted(unique.values(), key=lambda s: (s["startUs"], s["rank"], s["name"], _span_key(s)))


def has_tool_activity(spans: Iterable[Span]) -> bool:
    """A span about a tool call: its category or one of its tags names a tool."""
    return any(s["category"].startswith("tool") or any(t.startswith("tool") for t in s["tags"]) for s in spans)


def summary(task_id: str, parts: list[Part], created_at: float, file_size: int) -> dict[str, Any]:
    """The list entry of one task from its parts on one node (`createdAt`: the newest part's mtime)."""
    spans = [s for p in parts for s in p.spans]
    ordered = sorted(parts, key=lambda p: p.part != "api")  # the API's view of model and kind first
    return {"taskId": task_id, "createdAt": iso_auto(created_at), "fileSize": file_size,
            "modelId": next((p.model_id for p in ordered if p.model_id), ""),
            "taskKind": next((p.task_kind for p in ordered if p.task_kind), "text"),
            "categories": sorted({s["category"] for s in spans}),
            "tags": sorted({t for s in spans for t in s["tags"]}),
            "hasToolActivity": has_tool_activity(spans),
            "sourceNodes": merge_nodes(p.node for p in parts)}


def clean_summary(raw: Any) -> dict[str, Any] | None:
    """A peer's list entry, or None when it is not one."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("taskId"), str) or not valid_task_id(raw["taskId"]):
        return None
    size = _int(raw.get("fileSize"))
    cats, tags = raw.get("categories"), raw.get("tags")
    return {"taskId": raw["taskId"], "createdAt": _str(raw.get("createdAt")), "fileSize": size or 0,
            "modelId": _str(raw.get("modelId")), "taskKind": _str(raw.get("taskKind"), "text"),
            "categories": [c for c in cats if isinstance(c, str)] if isinstance(cats, list) else [],
            "tags": [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else [],
            "hasToolActivity": raw.get("hasToolActivity") is True,
            "sourceNodes": merge_nodes(raw.get("sourceNodes") or [])}


def merge_summaries(*lists: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per task id over several nodes' lists: the latest `createdAt`, the largest
    `fileSize`, the union of categories, tags and source nodes; newest first."""
    merged: dict[str, dict[str, Any]] = {}
    for entries in lists:
        for entry in entries:
            have = merged.get(entry["taskId"])
            if have is None:
                merged[entry["taskId"]] = {**entry, "categories": sorted(set(entry["categories"])),
                                           "tags": sorted(set(entry["tags"])),
                                           "sourceNodes": merge_nodes(entry["sourceNodes"])}
                continue
            if _when(entry["createdAt"]) > _when(have["createdAt"]):
                have["createdAt"] = entry["createdAt"]
            have["fileSize"] = max(have["fileSize"], entry["fileSize"])
            have["modelId"] = have["modelId"] or entry["modelId"]
            have["categories"] = sorted({*have["categories"], *entry["categories"]})
            have["tags"] = sorted({*have["tags"], *entry["tags"]})
            have["hasToolActivity"] = have["hasToolActivity"] or entry["hasToolActivity"]
            have["sourceNodes"] = merge_nodes(have["sourceNodes"], entry["sourceNodes"])
    return sorted(merged.values(), key=lambda e: (-_when(e["createdAt"]), e["taskId"]))


# ---- stats -------------------------------------------------------------------------------------

def _category_stats(durations: list[int]) -> dict[str, Any]:
    total = sum(durations)
    return {"totalUs": total, "count": len(durations), "minUs": min(durations), "maxUs": max(durations),
            "avgUs": total / len(durations)}


def _by_category(spans: Iterable[Span]) -> dict[str, dict[str, Any]]:
    durations: dict[str, list[int]] = {}
    for span in spans:
        durations.setdefault(span["category"], []).append(span["durationUs"])
    return {cat: _category_stats(d) for cat, d in sorted(durations.items())}


def stats(task_id: str, spans: list[Span], source_nodes: list[NodeRef]) -> dict[str, Any]:
    """Upstream's timing summary: wall time from the first start to the last end, and per
    category (over all spans, then per rank) the total, count, min, max and mean duration."""
    wall = (max(s["startUs"] + s["durationUs"] for s in spans) - min(s["startUs"] for s in spans)) if spans else 0
    ranks = sorted({s["rank"] for s in spans})
    return {"taskId": task_id, "totalWallTimeUs": wall, "byCategory": _by_category(spans),
            "byRank": {str(r): {"byCategory": _by_category(s for s in spans if s["rank"] == r)} for r in ranks},
            "sourceNodes": source_nodes}


# ---- Chrome trace format -----------------------------------------------------------------------

def lane(span: Span) -> tuple[int, str]:
    """Which process of its node recorded a span: ("rank N") or the API or the router (rank -1,
    told apart by category); the int orders lanes: API, router, then ranks."""
    if span["rank"] >= 0:
        return span["rank"] + 2, f"rank {span['rank']}"
    return (1, "router") if span["category"] == "router" else (0, "api")


def chrome(spans: list[Span], source_nodes: list[NodeRef], other: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Chrome trace event format (JSON object form): one process per (node, lane) named by
    `process_name`/`thread_name` metadata, one complete event (`ph: "X"`, µs) per span.
    `other` goes into `otherData` (what the viewer shows as the trace's metadata)."""
    names = {n["nodeId"]: n["friendlyName"] for n in source_nodes}
    lanes = sorted({(s["nodeId"], *lane(s)) for s in spans})
    pids = {key: pid for pid, key in enumerate(lanes, start=1)}
    events: list[dict[str, Any]] = []
    for (node_id, _order, label), pid in pids.items():
        node = names.get(node_id) or node_id or "unknown node"
        events += [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"{node} {label}"}},
                   {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
                   {"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": label}}]
    for span in spans:
        events.append({"name": span["name"], "cat": span["category"], "ph": "X", "ts": span["startUs"],
                       "dur": span["durationUs"], "pid": pids[(span["nodeId"], *lane(span))], "tid": 0,
                       "args": {"rank": span["rank"], "nodeId": span["nodeId"], "modelId": span["modelId"],
                                "taskKind": span["taskKind"], "tags": span["tags"], "attrs": span["attrs"]}})
    out: dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ms"}
    if other:
        out["otherData"] = dict(other)
    return out
