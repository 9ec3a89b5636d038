"""What the API records in its node's event log besides the state changes: each chunk it
streams and each request's routing and end (the API side of the node's log, behind `GET /events`).

These never ride the bus: each API thread PUSHes them straight to the eventlog role's PULL
socket (`endpoints.eventlog_in`), without blocking: when the eventlog is down or behind, the
record is dropped and counted, never a stall of a stream. The eventlog role writes them with the
same retention, floor and counting-only mode as everything else it keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from skulk.wire.message import Message

CHUNK_TOPIC = b"api.chunk"
TASK_TOPIC = b"api.task"
API_TOPICS = (CHUNK_TOPIC, TASK_TOPIC)
CHUNKS_PER_MESSAGE = 64
"""A message on `CHUNK_TOPIC` is the topic and 1 to this many `ChunkGenerated` records, in the
order the API streamed them (one message per token woke the eventlog at every token); one on
`TASK_TOPIC` is the topic and one record."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkGenerated(Message):
    """One chunk of output as the API streamed it to its client."""

    TYPE: ClassVar[str] = "api.chunk_generated"
    command_id: str
    task_id: str
    model: str
    seq: int
    text: str
    token: int
    reasoning: bool = False
    tool_calls: int = 0
    at: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRouted(Message):
    """The master routed a request: its task, instance and runner."""

    TYPE: ClassVar[str] = "api.request_routed"
    command_id: str
    task_id: str
    model: str
    instance_id: str
    runner_id: str
    traced: bool = False
    at: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestEnded(Message):
    """How a request ended at the API: `done` (with its finish reason), `failed` (with the typed
    reason) or `cancelled` (the client went away or asked)."""

    TYPE: ClassVar[str] = "api.request_ended"
    command_id: str
    task_id: str
    model: str
    outcome: str  # "done" | "failed" | "cancelled"
    reason: str = ""  # finish reason when done, FailReason when failed
    prompt_tokens: int = 0
    completion_tokens: int = 0
    at: float = 0.0
