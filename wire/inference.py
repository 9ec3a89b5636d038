"""The data plane: API DEALER <-> rank-0 runner ROUTER. Tokens never go through the master.

A request is `Generate`; the runner answers at once with `Started` (admitted to its batch or
its bounded wait queue) or `Failed` (refused: `reason` says why, e.g. `busy` or
`context_length_exceeded`), then `Progress` while queued or prefilling (so the API can tell a
slow runner from a dead one), `TokenChunk` with `seq` 0, 1, 2 ..., and ends with exactly one
`Done` or `Failed`. `Cancel` removes it from the batch within one step.

A runner of an embedding model takes `Embed` instead: it answers one `Embeddings` per group of
inputs it has run (a slice `start ..` of the request's inputs, so frames stay small and the API
hears from a busy runner) or one `Failed`; it refuses `Generate`, as a text model refuses `Embed`.

Between the ranks of a sharded instance, rank 0's scheduling decisions travel as `RankStep`
over ROUTER -> DEALER on TCP (never PUB/SUB: a lost or reordered decision would desynchronise
the ranks' batches); `RankHello` is a follower's first frame, so rank 0 can address it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from skulk.cluster.state import TaskParams, ToolCall
from skulk.wire.message import Message


class FailReason(StrEnum):
    """Why a request was refused or ended: the runner's verdict, or what the API or the master
    saw happen to its runner. Status codes, `TaskFailed.error_type` and retries are decided on
    this value; the message beside it is for people."""

    BUSY = "busy"  # batch and wait queue full: 503, retry
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"  # prompt + max_tokens beyond the context: 400
    BAD_REQUEST = "bad_request"  # the prompt cannot be built (template, empty): 400
    ENGINE_ERROR = "engine_error"  # an exception while generating this request: 500
    INSTANCE_LOST = "instance_lost"  # its node left the cluster, or its instance vanished
    INSTANCE_DELETED = "instance_deleted"  # an operator deleted its instance
    RUNNER_FAILED = "runner_failed"  # its runner process (or a rank of it) died or restarted
    SESSION_CHANGED = "session_changed"  # master failover while the command was in flight
    STALLED = "stalled"  # no output for api.stall_timeout_s after the first token
    NO_OUTPUT = "no_output"  # no first token within the first-token deadline
    CANCELLED = "cancelled"  # the client, or `POST /v1/cancel/{id}`, cancelled it
    PREEMPTED = "preempted"  # its runner's KV cache filled: taken out to make room, resumable


REFUSALS = frozenset({FailReason.BUSY, FailReason.CONTEXT_LENGTH_EXCEEDED, FailReason.BAD_REQUEST})
"""The runner's own verdict on a request (never a symptom of a lost rank or runner)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Generate(Message):
    TYPE: ClassVar[str] = "inference.generate"
    request_id: str
    task_id: str
    params: TaskParams
    context_limit: int = 0  # the instance's usable context in tokens (prompt + output); 0: the model's
    default_max_tokens: bool = False  # the client gave no max_tokens: fit it to the context, never refuse
    trace: bool = False  # record this request's spans (node/trace_files.py) under `task_id`


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancel(Message):
    TYPE: ClassVar[str] = "inference.cancel"
    request_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Started(Message):
    TYPE: ClassVar[str] = "inference.started"
    request_id: str
    prompt_tokens: int
    queued: int = 0  # requests ahead of it in the wait queue (0: straight into the batch)


class ProgressPhase(StrEnum):
    """Where an admitted request is before its first token."""

    QUEUED = "queued"  # waiting for a place in the batch (kept alive, never shown to the client)
    PREFILL = "prefill"  # its prompt is going in (`processed` of `total` tokens)


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress(Message):
    TYPE: ClassVar[str] = "inference.progress"
    request_id: str
    phase: str  # a ProgressPhase
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
    reasoning: bool = False  # thinking text (between the model's think markers): `reasoning_content`
    tool_calls: tuple[ToolCall, ...] = ()  # calls parsed from the output, sent once, at the end
    index: int = 0  # which token of the answer this is (1: the first; a token may give two chunks)


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
    cached_tokens: int = 0  # prompt tokens reused from the prefix cache (not prefilled)
    stop_string: str = ""  # the client's stop string that ended it ("" for EOS or length)
    accepted_prediction_tokens: int = 0  # speculation: drafts the model kept ...
    rejected_prediction_tokens: int = 0  # ... and threw away (never sent)


@dataclass(frozen=True, slots=True, kw_only=True)
class Failed(Message):
    TYPE: ClassVar[str] = "inference.failed"
    request_id: str
    error: str
    retryable: bool = True
    reason: str = FailReason.ENGINE_ERROR  # a FailReason: what the API's status and type are decided on


@dataclass(frozen=True, slots=True, kw_only=True)
class Embed(Message):
    """Embed every input (for `POST /v1/embeddings`)."""

    TYPE: ClassVar[str] = "inference.embed"
    request_id: str
    task_id: str
    inputs: tuple[str, ...]
    dimensions: int = 0  # 0: the model's width; n: the first n components, normalised again


@dataclass(frozen=True, slots=True, kw_only=True)
class Embeddings(Message):
    """The vectors of inputs `start .. start + len(vectors)`: each is little-endian float32
    bytes (what OpenAI's base64 carries), L2-normalised."""

    TYPE: ClassVar[str] = "inference.embeddings"
    request_id: str
    start: int
    vectors: tuple[bytes, ...]
    prompt_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RankHello(Message):
    """A follower rank's first frame to rank 0's control ROUTER (its routing id is `rank<r>`)."""

    TYPE: ClassVar[str] = "inference.rank_hello"
    rank: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RankInsert(Message):
    """One request joining the batch. Every rank inserts it with the same sampler (a sampled
    request has its own seeded generator, the seed chosen by rank 0 when the client gave none)
    and reuses the same prefix-cache entry, so `cached` must match on every rank."""

    TYPE: ClassVar[str] = "inference.rank_insert"
    uid: int
    prompt: tuple[int, ...]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    seed: int
    cached: int
    grammar: str = ""  # the request's output grammar: every rank masks its logits alike
    continued: int = 0  # the prompt's last tokens are this many output tokens (a resumed answer): the grammar has them
    trace_task: str = ""  # the task id when the request is traced: every rank records its spans


@dataclass(frozen=True, slots=True, kw_only=True)
class RankStep(Message):
    """Rank 0 -> every other rank, once per batch step, in order (`seq` 1, 2, 3 ...): trim the
    prefix cache to `cache_entries` (rank 0's count, so eviction agrees), remove `removes`,
    insert `inserts`, then run one step of the batch."""

    TYPE: ClassVar[str] = "inference.rank_step"
    seq: int
    cache_entries: int
    removes: tuple[int, ...] = ()
    inserts: tuple[RankInsert, ...] = ()
