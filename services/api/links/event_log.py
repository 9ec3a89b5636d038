"""The API's records in its node's event log (`wire/api_events.py`): a PUSH socket per thread
to the eventlog role, sends that never block (a record the eventlog cannot take now is dropped
and counted: a stream never waits on the disk)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import zmq

from skulk.wire import codec, endpoints
from skulk.wire.api_events import CHUNK_TOPIC, TASK_TOPIC, ChunkGenerated, RequestEnded, RequestRouted
from skulk.wire.commands import Routed
from skulk.wire.inference import Done, Failed, FailReason, TokenChunk
from skulk.wire.message import Message
from skulk.wire.sockets import make_socket

HWM = 1000
"""Records one thread may have queued for the eventlog (with it down, at most this many wait,
about 200 KB; the rest are dropped). Not `IMMEDIATE`: a thread's first record goes out before
its new connection completes and must not be lost for that."""


class EventRecorder:
    def __init__(self, run_dir: Path) -> None:
        self.endpoint = endpoints.eventlog_in(run_dir)
        self.local = threading.local()
        self.dropped = 0

    def _sock(self) -> zmq.Socket[Any]:
        sock = getattr(self.local, "sock", None)
        if sock is None:
            sock = make_socket(zmq.Context.instance(), zmq.PUSH, hwm=HWM, connect=self.endpoint)
            self.local.sock = sock
        return sock

    def _send(self, topic: bytes, msg: Message) -> None:
        try:
            self._sock().send_multipart([topic, codec.encode(msg)], zmq.NOBLOCK)
        except zmq.ZMQError:  # no eventlog now, or it is behind: drop, never wait
            self.dropped += 1

    def routed(self, routed: Routed, model: str) -> None:
        self._send(TASK_TOPIC, RequestRouted(command_id=routed.command_id, task_id=routed.task_id, model=model,
                                             instance_id=routed.instance_id, runner_id=routed.runner_id,
                                             traced=routed.trace, at=time.time()))

    def chunk(self, routed: Routed, model: str, chunk: TokenChunk) -> None:
        self._send(CHUNK_TOPIC, ChunkGenerated(command_id=routed.command_id, task_id=routed.task_id, model=model,
                                               seq=chunk.seq, text=chunk.text, token=chunk.token,
                                               reasoning=chunk.reasoning, tool_calls=len(chunk.tool_calls),
                                               at=time.time()))

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
