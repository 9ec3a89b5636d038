"""What the runner's loop needs from an engine: admit, step, cancel (and nothing about MLX).

The loop (`service.py`) owns scheduling, sessions and sockets; an engine owns the model, the
running batch and the prefix cache. Both engines follow this protocol: `MlxBatchEngine`
(mlx-lm's `BatchGenerator`) and `FakeEngine` (deterministic, no MLX, for control-plane unit
tests). Every rank of a sharded instance calls the same methods with the same arguments in
the same order (`wire.inference.RankStep`), so their batches and caches stay alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from skulk.cluster.state import TaskParams
from skulk.wire.inference import RankInsert


def output_of(insert: RankInsert) -> tuple[int, ...]:
    """The output tokens a resumed answer's prompt ends with (none for a new one): a grammar
    starts after them."""
    return insert.prompt[len(insert.prompt) - insert.continued:] if insert.continued else ()


class EngineRefused(RuntimeError):
    """This engine cannot run this checkpoint here (a file it cannot read, an architecture it
    lacks, a context it cannot make). Typed, so that the runner exits `ENGINE_REFUSED` and the
    leader places the instance again on another engine instead of retrying this one."""


@dataclass(frozen=True, slots=True)
class PromptProgress:
    """Prefill progress of one request after a step (`done == total`: its prompt is in)."""

    uid: int
    done: int
    total: int


@dataclass(frozen=True, slots=True)
class TokenOut:
    """One generated token of one request. `finish` is "length" or "stop" (an EOS token, which
    is returned too) when the engine ended the request itself; it is then out of the batch."""

    uid: int
    token: int
    logprobs: Any  # the full-vocabulary log-probabilities (engine-specific array)
    finish: str | None
    accepted: int = 0  # speculation: drafts the target kept / threw away in the step that gave
    rejected: int = 0  # this token (on the first token of that step only)


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """The model's own output markers (from its tokenizer): thinking and tool calls, with the
    tool parser that reads a call body (`parse_tool(body, tools) -> {"name", "arguments"}`)."""

    think: tuple[str, str] | None = None
    think_start_ids: tuple[int, ...] = ()
    tools: tuple[str, str] | None = None
    parse_tool: Callable[[str, Any], Any] | None = None


@dataclass(frozen=True, slots=True)
class StepOutput:
    prompts: list[PromptProgress]
    tokens: list[TokenOut]
    preempted: list[int] = field(default_factory=list)
    """Rows the engine took out of its batch in this step to make room in a full KV cache (an
    engine whose cache has a fixed size): their requests end `preempted`, and go on later."""


class Detokenizer(Protocol):
    """mlx-lm's streaming detokenizer interface (one per request): `last_segment` is the text
    completed since it was last read."""

    @property
    def last_segment(self) -> str: ...

    def add_token(self, token: int) -> None: ...

    def finalize(self) -> None: ...


class Engine(Protocol):
    path: str  # what the runner logs: "cpu fp32", "Pipeline rank 1/2 cpu fp32", ...
    model_context: int  # the model's own context length in tokens (0: unknown)
    max_token_bytes: int  # no token decodes to more bytes: prompt bytes / this <= prompt tokens
    kv_capacity: int  # tokens its KV cache holds for all rows (0: no fixed size, it grows with them)

    def load(self) -> None: ...

    def warmup(self) -> None: ...

    def encode(self, params: TaskParams) -> list[int]:
        """The prompt's token ids through the model's chat template."""

    def next_uid(self) -> int:
        """The uid the next inserted request gets (uids are sequential from 0)."""

    def insert(self, inserts: Sequence[RankInsert]) -> list[int]:
        """Add requests to the batch (they prefill from the next step); how many prompt tokens
        of each came from the prefix cache."""

    def remove(self, uids: Sequence[int]) -> None:
        """Take requests out of the batch wherever they are (waiting, prefilling, decoding)."""

    def step(self) -> StepOutput:
        """One decode step for the batch plus one prefill chunk."""

    def active(self) -> int:
        """Requests in the batch (prefilling or decoding)."""

    def cache_entries(self) -> int: ...

    def trim_cache(self, entries: int) -> None:
        """Evict least recently stored prefix-cache entries down to `entries`."""

    def detokenizer(self) -> Detokenizer: ...

    def piece(self, token: int) -> str:
        """One token's text (logprobs' `token` and `bytes`)."""

    def logprob_of(self, logprobs: Any, token: int, k: int) -> tuple[float, list[tuple[int, float]]]:
        """The token's log-probability and the `k` most likely (token, logprob), best first."""

    def peak_memory(self) -> int: ...

    def output_format(self) -> OutputFormat:
        """The model's thinking and tool-call markers (empty for a model without them)."""
