"""This node's traces on disk (`<home>/traces/<task_id>/<part>.json`, written by
`node/trace_files.py`): list them, load one task's spans merged from all its parts, delete.

A reader never trusts the disk: a part that does not parse (a torn write, a disk error), a
`.tmp` leftover of a writer that died before its rename, or a directory whose name is not a
task id is skipped, never an error. Task ids from clients are checked with
`trace_files.valid_task_id` before any path is built from them.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skulk.node.trace_files import valid_task_id
from skulk.services.api.observe.trace_views import Part, clean_part, merge_nodes, merge_spans, summary

log = logging.getLogger("skulk.api.traces")

MAX_PART_BYTES = 64 << 20
"""A part larger than this is not read (a runaway writer must not take the API's memory)."""


@dataclass(frozen=True)
class PartFile:
    part: Part
    size: int
    mtime: float


def read_part(path: Path) -> PartFile | None:
    """One part file, or None when it is not a readable part."""
    if path.name.startswith(".") or path.suffix != ".json":
        return None  # a writer's temporary file (`.<part>.<random>.tmp`) or something else
    try:
        st = path.stat()
        if not path.is_file() or st.st_size > MAX_PART_BYTES:
            return None
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        log.debug("traces: skipping unreadable part %s: %s", path, exc)
        return None
    part = clean_part(raw, path.stem)
    return PartFile(part, st.st_size, st.st_mtime) if part is not None else None


def task_parts(root: Path, task_id: str) -> list[PartFile] | None:
    """The readable parts of one task on this node, in name order; None when this node has no
    readable part of it (or the id is not a task id)."""
    if not valid_task_id(task_id):
        return None
    try:
        paths = sorted((root / task_id).iterdir())
    except OSError:
        return None
    parts = [p for p in (read_part(path) for path in paths) if p is not None]
    return parts or None


def list_traces(root: Path) -> list[dict[str, Any]]:
    """Upstream's `/v1/traces` entries of this node, newest first."""
    try:
        names = [d.name for d in root.iterdir() if d.is_dir()]
    except OSError:
        return []
    found: list[tuple[float, dict[str, Any]]] = []
    for name in names:
        parts = task_parts(root, name)
        if parts:
            newest = max(p.mtime for p in parts)
            found.append((newest, summary(name, [p.part for p in parts], newest, sum(p.size for p in parts))))
    found.sort(key=lambda item: (-item[0], item[1]["taskId"]))
    return [entry for _, entry in found]


def load_trace(root: Path, task_id: str) -> dict[str, Any] | None:
    """Upstream's `/v1/traces/{task_id}` body from this node's parts: `{taskId, traces (spans
    sorted by start), sourceNodes}`; None when this node has no part of it."""
    parts = task_parts(root, task_id)
    if parts is None:
        return None
    return {"taskId": task_id, "traces": merge_spans(*(p.part.spans for p in parts)),
            "sourceNodes": merge_nodes(p.part.node for p in parts)}


def delete_traces(root: Path, task_ids: list[str]) -> tuple[list[str], list[str]]:
    """Remove each task's directory: (deleted, not found), each in the order asked, without
    repeats. An id that is not a task id is not found (no path is built from it)."""
    deleted: list[str] = []
    missing: list[str] = []
    for task_id in dict.fromkeys(task_ids):
        folder = root / task_id
        if not valid_task_id(task_id) or not folder.is_dir() or folder.is_symlink():
            missing.append(task_id)
            continue
        try:
            shutil.rmtree(folder)
        except OSError as exc:
            log.warning("traces: cannot delete %s: %s", folder, exc)
            if folder.exists():
                missing.append(task_id)
                continue
        deleted.append(task_id)
    return deleted, missing
