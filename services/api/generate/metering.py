"""A generation request's metrics, as its client sees them (`node/metrics.py` declares them).

`Generation.open` starts a `StreamMeter` when a request arrives; the `Stream` shows it every
event it passes on and closes it once, however the request ends. The meter turns that into the
request's outcome (typed: `outcome_of`, `refusal_outcome`), its time to first token, the gaps
between its tokens and its token count. Times are passed in (`now`), so it is tested as a value.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from skulk.node import metrics
from skulk.node.metrics import CLIENT_GONE, Outcome
from skulk.wire.inference import REFUSALS, Done, Failed, FailReason, TokenChunk


class ApiShape(StrEnum):
    """The client shape a request came in (the `api` label; each route names its own)."""

    OPENAI_CHAT = "openai_chat"
    OPENAI_COMPLETIONS = "openai_completions"
    OPENAI_RESPONSES = "openai_responses"
    ANTHROPIC_MESSAGES = "anthropic_messages"
    OLLAMA_CHAT = "ollama_chat"
    OLLAMA_GENERATE = "ollama_generate"
    BENCH = "bench"
    OTHER = "other"


def outcome_of(outcome: Done | Failed | None) -> tuple[Outcome, str]:
    """How an admitted request ended and why (None: the client went away first)."""
    if outcome is None:
        return Outcome.CANCELLED, CLIENT_GONE
    if isinstance(outcome, Done):
        return Outcome.COMPLETED, outcome.finish_reason
    if outcome.reason == FailReason.CANCELLED:
        return Outcome.CANCELLED, str(outcome.reason)
    return Outcome.FAILED, str(outcome.reason)


_FAIL_REASONS = frozenset(FailReason)


def refusal_outcome(reason: str) -> Outcome:
    """A request that ended before its stream: refused (busy, no instance, bad request, no
    leader, ...), cancelled, or failed (its runner was lost before it answered)."""
    if reason == FailReason.CANCELLED:
        return Outcome.CANCELLED
    if reason in _FAIL_REASONS and reason not in REFUSALS:
        return Outcome.FAILED
    return Outcome.REFUSED


@dataclass
class StreamMeter:
    """One request's figures: in flight from its creation until `refused` or `closed` ends it
    (once)."""

    api: ApiShape
    model: str
    opened_at: float
    last_token_at: float | None = None
    tokens: int = 0
    ended: bool = False

    def __post_init__(self) -> None:
        metrics.IN_FLIGHT.labels(self.api).inc()

    def refused(self, reason: str) -> None:
        """The request ended before its stream opened (`GenerationError.reason`)."""
        self._end(refusal_outcome(reason), reason)

    def saw(self, event: object, now: float) -> None:
        """An event the stream passes on to the client: a token times TTFT or a gap."""
        if not isinstance(event, TokenChunk) or (event.tool_calls and not event.text):
            return  # the tool calls of a finished answer are no token
        # (a token whose text is part thinking, part content comes as two chunks: two here)
        seconds = now - (self.opened_at if self.last_token_at is None else self.last_token_at)
        (metrics.TTFT if self.last_token_at is None else metrics.INTER_TOKEN).labels(
            self.api, self.model).observe(seconds)
        self.last_token_at = now
        self.tokens += 1

    def closed(self, outcome: Done | Failed | None) -> None:
        """The stream ended: its outcome and its tokens (usage's count when it completed)."""
        if self.ended:
            return
        tokens = outcome.completion_tokens if isinstance(outcome, Done) else self.tokens
        if tokens:
            metrics.GENERATED_TOKENS.labels(self.api, self.model).inc(tokens)
        if isinstance(outcome, Done) and (outcome.accepted_prediction_tokens or outcome.rejected_prediction_tokens):
            metrics.SPEC_DRAFTS.labels(self.api, self.model, "accepted").inc(outcome.accepted_prediction_tokens)
            metrics.SPEC_DRAFTS.labels(self.api, self.model, "rejected").inc(outcome.rejected_prediction_tokens)
        self._end(*outcome_of(outcome))

    def _end(self, outcome: Outcome, reason: str) -> None:
        if self.ended:
            return
        self.ended = True
        metrics.IN_FLIGHT.labels(self.api).dec()
        metrics.REQUESTS.labels(self.api, outcome, reason).inc()
