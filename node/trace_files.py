"""Where a traced request's spans are kept on disk, and the one way they are written.

A traced task leaves one directory per node that took part, `<home>/traces/<task_id>/`, with
one part file per process that recorded spans there: `api.json` (the API that served the
client), `router.json` (the master that routed it), `rank<N>.json` (each rank of its runner on
this node). Each process writes its own part once, when the task ends, atomically (temporary
file + rename), so a reader never sees half a part and processes never share a file. A node
holds only what happened on it; the cluster views merge the parts of every node by task id.

A part file is JSON: `{"taskId", "nodeId", "friendlyName", "modelId", "taskKind", "part",
"spans": [{"name", "startUs", "durationUs", "rank", "category", "nodeId", "modelId",
"taskKind", "tags", "attrs"}]}`. `startUs` is wall-clock microseconds since the epoch; `rank`
is -1 for the API and the router, which are not ranks.
"""

from __future__ import annotations

import json
import os
import queue
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRACES_DIR = "traces"
TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
"""A task id as a directory name: no separators, no `..`, bounded (a path from a client is
checked against this before it touches the disk)."""

MAX_SPANS = 4096
"""Spans one process keeps for one task (a decode step, a detokenize and a send per token: about
a 1,300-token answer in full)."""


def valid_task_id(task_id: str) -> bool:
    return bool(TASK_ID.match(task_id)) and ".." not in task_id


def traces_root(home: Path) -> Path:
    return home / TRACES_DIR


def now_us() -> int:
    return int(time.time() * 1_000_000)


@dataclass
class Span:
    name: str
    category: str
    start_us: int
    duration_us: int
    rank: int = -1
    tags: tuple[str, ...] = ()
    attrs: dict[str, Any] = field(default_factory=dict)

    def to_json(self, node_id: str, model_id: str, task_kind: str) -> dict[str, Any]:
        return {"name": self.name, "startUs": self.start_us, "durationUs": max(0, self.duration_us),
                "rank": self.rank, "category": self.category, "nodeId": node_id, "modelId": model_id,
                "taskKind": task_kind, "tags": list(self.tags), "attrs": self.attrs}


@dataclass
class TracePart:
    """The spans one process recorded for one task, written once at the task's end."""

    task_id: str
    part: str  # "api", "router", "rank<N>"
    node_id: str
    friendly_name: str
    model_id: str
    task_kind: str = "text"
    spans: list[Span] = field(default_factory=list)

    def add(self, name: str, category: str, start_us: int, end_us: int, **kw: Any) -> None:
        """One span; past `MAX_SPANS` only counted (`droppedSpans` on the last one kept), so a
        very long request's trace stays a bounded file."""
        if len(self.spans) >= MAX_SPANS:
            self.spans[-1].attrs["droppedSpans"] = self.spans[-1].attrs.get("droppedSpans", 0) + 1
            return
        self.spans.append(Span(name, category, start_us, end_us - start_us, **kw))

    def to_json(self) -> dict[str, Any]:
        return {"taskId": self.task_id, "nodeId": self.node_id, "friendlyName": self.friendly_name,
                "modelId": self.model_id, "taskKind": self.task_kind, "part": self.part,
                "spans": [s.to_json(self.node_id, self.model_id, self.task_kind) for s in self.spans]}


def write_part(home: Path, part: TracePart) -> Path | None:
    """Write `part` under `home`'s traces; None when the task id is not a safe name or the disk
    refuses (tracing never fails a request)."""
    if not valid_task_id(part.task_id):
        return None
    folder = traces_root(home) / part.task_id
    target = folder / f"{part.part}.json"
    tmp = ""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{part.part}.", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(part.to_json(), fh, separators=(",", ":"))
        os.replace(tmp, target)
    except OSError:
        if tmp:
            Path(tmp).unlink(missing_ok=True)  # a full disk must not keep half a part
        return None
    return target


class BackgroundWriter:
    """Writes parts on its own thread, so a runner's loop never waits on the disk; a queue full
    of parts (a disk that stalls) drops the newest, counted: tracing never slows serving."""

    def __init__(self, home: Path, size: int = 64) -> None:
        self.home = home
        self.queue: queue.Queue[TracePart] = queue.Queue(maxsize=size)
        self.dropped = 0
        threading.Thread(target=self._run, name="trace-writer", daemon=True).start()

    def write(self, part: TracePart) -> None:
        try:
            self.queue.put_nowait(part)
        except queue.Full:
            self.dropped += 1

    def flush(self, timeout: float) -> bool:
        """Whether every queued part was written within `timeout` (tests; a stop)."""
        deadline = time.monotonic() + timeout
        with self.queue.all_tasks_done:
            while self.queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.queue.all_tasks_done.wait(left)
        return True

    def _run(self) -> None:
        while True:
            part = self.queue.get()
            try:
                write_part(self.home, part)
            finally:
                self.queue.task_done()
