"""The data plane: API DEALER <-> rank-0 runner ROUTER. Tokens never go through the master.

A request is `Generate`; the runner answers `Started`, then `Progress` while queued or
prefilling (so the API can tell a slow runner from a dead one), `TokenChunk` with `seq`
0, 1, 2 ..., and ends with exactly one `Done` or `Failed`. `Cancel` stops it within one
decode step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from skulk.wire.message import Message
from skulk.wire.state import TaskParams


@dataclass(frozen=True, slots=True, kw_only=True)
class Generate(Message):
    TYPE: ClassVar[str] = "inference.generate"
    request_id: str
    task_id: str
    params: TaskParams


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancel(Message):
    TYPE: ClassVar[str] = "inference.cancel"
    request_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Started(Message):
    TYPE: ClassVar[str] = "inference.started"
    request_id: str
    prompt_tokens: int
    queued: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress(Message):
    TYPE: ClassVar[str] = "inference.progress"
    request_id: str
    phase: str  # "queued" | "prefill"
    processed: int = 0
    total: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TopLogprob(Message):
    TYPE: ClassVar[str] = "inference.top_logprob"
    token: str
    logprob: float
    token_bytes: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenChunk(Message):
    TYPE: ClassVar[str] = "inference.token_chunk"
    request_id: str
    seq: int
    text: str
    token: int
    logprob: float | None = None
    token_bytes: bytes = b""
    top_logprobs: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Done(Message):
    TYPE: ClassVar[str] = "inference.done"
    request_id: str
    seq: int
    finish_reason: str  # "stop" | "length"
    prompt_tokens: int
    completion_tokens: int
    prompt_tps: float
    generation_tps: float
    peak_memory_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Failed(Message):
    TYPE: ClassVar[str] = "inference.failed"
    request_id: str
    error: str
    retryable: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class RankControl(Message):
    """Rank 0 -> the other ranks of a sharded instance (PUB/SUB over TCP): every rank must run
    the same generate loop, so rank 0 says when a generation starts (prompt ids, params, the
    seed it chose), before each decode step, and when it stops."""

    TYPE: ClassVar[str] = "inference.rank_control"
    request_id: str
    action: str  # "start" | "step" | "stop"
    prompt: tuple[int, ...] = ()
    params: TaskParams | None = None
