"""The API's spans of a traced request (`Routed.trace`): routing through the master, the
runner's admission, the wait for the first token, the stream to its outcome. Written as the
task's `api.json` part on this node when the stream closes (`node/trace_files.py`)."""

from __future__ import annotations

from pathlib import Path

from skulk.node.trace_files import TracePart, now_us, write_part
from skulk.wire.commands import Routed


class RequestTrace:
    def __init__(self, home: Path, node_id: str, friendly_name: str, routed: Routed, model: str,
                 opened_us: int, kind: str = "text") -> None:
        self.home = home
        self.part = TracePart(task_id=routed.task_id, part="api", node_id=node_id, friendly_name=friendly_name,
                              model_id=model, task_kind=kind)
        self.mark_us = now_us()
        self.part.add("route", "api", opened_us, self.mark_us,
                      attrs={"commandId": routed.command_id, "instanceId": routed.instance_id,
                             "runnerId": routed.runner_id})
        self.first_token_us = 0
        self.chunks = 0

    def admitted(self, prompt_tokens: int) -> None:
        t = now_us()
        self.part.add("admission", "api", self.mark_us, t, attrs={"promptTokens": prompt_tokens})
        self.mark_us = t

    def chunk(self) -> None:
        self.chunks += 1
        if not self.first_token_us:
            self.first_token_us = now_us()
            self.part.add("wait first token", "api", self.mark_us, self.first_token_us)

    def closed(self, outcome: str) -> None:
        t = now_us()
        start = self.first_token_us or self.mark_us
        self.part.add("stream", "api", start, t, attrs={"chunks": self.chunks, "outcome": outcome})
        write_part(self.home, self.part)
