"""The API's records in its node's event log (`wire/api_events.py`): a PUSH socket per thread
to the eventlog role, sends that never block (a record the eventlog cannot take now is dropped
and counted in `skulk_api_event_records_dropped_total`: a stream never waits on the disk).

Chunk records go several to a message (`wire/api_events.py`): a thread holds its stream's
records until `CHUNKS_PER_MESSAGE` are waiting, a chunk comes `CHUNK_HOLD_S` after the oldest held
one, or the stream has something else: a keep-alive or prefill progress (`flush`, from the
stream), its end, or the thread's next request. One message per token woke the eventlog (and the
socket threads between) at every token, CPU taken from the model's step on a small machine; the
records, their order and their own times (`at`) are the same. A worker that dies mid-stream loses
its held records with the stream's end record, as before with the end record alone."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import zmq

from skulk.node import metrics
from skulk.wire import codec, endpoints
from skulk.wire.api_events import (
    CHUNK_TOPIC,
    CHUNKS_PER_MESSAGE,
    TASK_TOPIC,
    ChunkGenerated,
    RequestEnded,
    RequestRouted,
)
from skulk.wire.commands import Routed
from skulk.wire.inference import Done, Failed, FailReason, TokenChunk
from skulk.wire.message import Message
from skulk.wire.sockets import make_socket

HWM = 100
"""Messages one thread may have queued for the eventlog (with it down, at most this many wait, up
to 6,400 records, about 1.3 MB; the rest are dropped). Not `IMMEDIATE`: a thread's first record
goes out before its new connection completes and must not be lost for that."""
CHUNK_HOLD_S = 0.25
"""How long after the oldest held chunk record a new chunk sends them all (while tokens flow,
`GET /events` lags a stream by about this much)."""


class EventRecorder:
    def __init__(self, run_dir: Path) -> None:
        self.endpoint = endpoints.eventlog_in(run_dir)
        self.local = threading.local()

    def _sock(self) -> zmq.Socket[Any]:
        sock = getattr(self.local, "sock", None)
        if sock is None:
            sock = make_socket(zmq.Context.instance(), zmq.PUSH, hwm=HWM, connect=self.endpoint)
            self.local.sock = sock
        return sock

    def _send(self, topic: bytes, msg: Message) -> None:
        self.flush()  # the thread's held chunk records go first: the log keeps their order
        self._send_frames(topic, [codec.encode(msg)])

    def _send_frames(self, topic: bytes, payloads: list[bytes]) -> None:
        try:
            self._sock().send_multipart([topic, *payloads], zmq.NOBLOCK)
        except zmq.ZMQError:  # no eventlog now, or it is behind: drop, never wait
            metrics.API_RECORDS_DROPPED.labels("chunk" if topic == CHUNK_TOPIC else "request").inc(len(payloads))

    def flush(self) -> None:
        """Send this thread's held chunk records now (a stream that pauses: keep-alives)."""
        held: list[bytes] | None = getattr(self.local, "held", None)
        if held:
            self.local.held = []
            self._send_frames(CHUNK_TOPIC, held)

    def routed(self, routed: Routed, model: str) -> None:
        self._send(TASK_TOPIC, RequestRouted(command_id=routed.command_id, task_id=routed.task_id, model=model,
                                             instance_id=routed.instance_id, runner_id=routed.runner_id,
                                             traced=routed.trace, at=time.time()))

    def chunk(self, routed: Routed, model: str, chunk: TokenChunk) -> None:
        now = time.time()
        held: list[bytes] | None = getattr(self.local, "held", None)
        if not held:
            held = self.local.held = []
            self.local.since = now
        held.append(codec.encode(ChunkGenerated(command_id=routed.command_id, task_id=routed.task_id, model=model,
                                                seq=chunk.seq, text=chunk.text, token=chunk.token,
                                                reasoning=chunk.reasoning, tool_calls=len(chunk.tool_calls),
                                                at=now)))
        if len(held) >= CHUNKS_PER_MESSAGE or now - self.local.since >= CHUNK_HOLD_S:
            self.flush()

    def ended(self, routed: Routed, model: str, outcome: Done | Failed | None, prompt_tokens: int) -> None:
        if isinstance(outcome, Done):
            kind, reason, completion = "done", outcome.finish_reason, outcome.completion_tokens
        elif isinstance(outcome, Failed) and outcome.reason != FailReason.CANCELLED:
            kind, reason, completion = "failed", str(outcome.reason), 0
        else:
            kind, reason, completion = "cancelled", "", 0
        self._send(TASK_TOPIC, RequestEnded(command_id=routed.command_id, task_id=routed.task_id, model=model,
                                            outcome=kind, reason=reason, prompt_tokens=prompt_tokens,
                                            completion_tokens=completion, at=time.time()))
