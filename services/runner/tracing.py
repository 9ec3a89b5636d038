"""Spans of the traced requests on this rank, written as `rank<N>.json` when each request ends.

Only requests the leader stamped as traced (`Generate.trace` on rank 0, `RankInsert.trace_task`
on the others) are followed; with none traced every hook returns at its first test, so tracing
off costs a dict lookup per step. Spans: `queue` (admitted until it joins the batch, rank 0),
`prefill` chunks and `decode` steps (the engine step the request was in, shared with the
batch), `detokenize` (its own text, rank 0) and `network` (its messages handed to the socket,
rank 0). Layout and writer: `node/trace_files.py`.
"""

from __future__ import annotations

from pathlib import Path

from skulk.node.trace_files import BackgroundWriter, TracePart, now_us


class RankTraces:
    def __init__(self, home: Path, node_id: str, friendly_name: str, model_id: str, rank: int) -> None:
        self.home, self.node_id, self.friendly_name = home, node_id, friendly_name
        self._writer: BackgroundWriter | None = None  # started with the first traced request
        self.model_id, self.rank = model_id, rank
        self.by_request: dict[str, TracePart] = {}  # rank 0: from admission
        self.by_uid: dict[int, TracePart] = {}  # once in the batch
        self.admitted_us: dict[str, int] = {}
        self.prefilling: set[int] = set()

    def _write(self, part: TracePart) -> None:
        if self._writer is None:
            self._writer = BackgroundWriter(self.home)
        self._writer.write(part)

    def flush(self, timeout: float = 5.0) -> bool:
        return self._writer is None or self._writer.flush(timeout)

    def __bool__(self) -> bool:
        return bool(self.by_request or self.by_uid)

    def _part(self, task_id: str) -> TracePart:
        return TracePart(task_id=task_id, part=f"rank{self.rank}", node_id=self.node_id,
                         friendly_name=self.friendly_name, model_id=self.model_id)

    # ---- rank 0 ---------------------------------------------------------------------------------
    def admitted(self, request_id: str, task_id: str) -> None:
        self.by_request[request_id] = self._part(task_id)
        self.admitted_us[request_id] = now_us()

    def joined(self, request_id: str, uid: int, cached: int) -> None:
        part = self.by_request.get(request_id)
        if part is None:
            return
        t = now_us()
        part.add("queue", "queue", self.admitted_us.pop(request_id, t), t, rank=self.rank,
                 attrs={"cachedTokens": cached})
        self.by_uid[uid] = part
        self.prefilling.add(uid)

    def text(self, uid: int, start_us: int, end_us: int) -> None:
        if (part := self.by_uid.get(uid)) is not None:
            part.add("detokenize", "detokenize", start_us, end_us, rank=self.rank)

    def sent(self, request_id: str, start_us: int, end_us: int, what: str) -> None:
        if (part := self.by_request.get(request_id)) is not None:
            part.add(f"send {what}", "network", start_us, end_us, rank=self.rank)

    def ended_request(self, request_id: str) -> None:
        part = self.by_request.pop(request_id, None)
        self.admitted_us.pop(request_id, None)
        for uid in [u for u, p in self.by_uid.items() if p is part]:
            self.by_uid.pop(uid, None)
            self.prefilling.discard(uid)
        if part is not None:
            self._write(part)

    # ---- every rank -------------------------------------------------------------------------------
    def joined_follower(self, uid: int, task_id: str) -> None:
        self.by_uid[uid] = self._part(task_id)
        self.prefilling.add(uid)

    def step(self, seq: int, start_us: int, end_us: int, prefilled: set[int], tokens: set[int],
             batch: int) -> None:
        """The engine step `seq` ran from `start_us` to `end_us` for every traced request in the
        batch: a prefill chunk for those still prefilling, a decode step for those that got a
        token."""
        for uid, part in self.by_uid.items():
            if uid in tokens:
                self.prefilling.discard(uid)
                part.add("decode step", "decode", start_us, end_us, rank=self.rank,
                         attrs={"step": seq, "batch": batch})
            elif uid in prefilled or uid in self.prefilling:
                part.add("prefill chunk", "prefill", start_us, end_us, rank=self.rank,
                         attrs={"step": seq, "batch": batch})

    def ended_uids(self, uids: set[int]) -> None:
        """Followers: these requests left the batch (removed or finished)."""
        for uid in uids & self.by_uid.keys():
            self.prefilling.discard(uid)
            self._write(self.by_uid.pop(uid))
